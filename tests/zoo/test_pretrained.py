"""Pretrained weights in: timm and MONAI checkpoints saved to files (random weights, built here: nothing is
downloaded) load into our models by ``zoo.create(name, pretrained=FILE)`` and give the reference's outputs;
a new image size resamples the position table as timm does; a head with other classes is re-initialised and
reported; files of another model are refused, naming what did not match."""

import json

import pytest
import torch
from safetensors.torch import save_file
from timm.models import swin_transformer as timm_swin
from timm.models.deit import VisionTransformerDistilled
from timm.models.vision_transformer import VisionTransformer as TimmViT
from timm.models.vision_transformer import checkpoint_filter_fn

import zoo
from tests.numerics import assert_close_fp64, float64
from zoo.deit import timm_kwargs as deit_kwargs
from zoo.swin import timm_kwargs as swin_kwargs
from zoo.vit import timm_kwargs as vit_kwargs
from zoo.weights.sources import read_source
from zoo.weights.transfer import load_pretrained

VIT = dict(image_size=32, patch_size=8, d_model=32, depth=2, heads=2, num_classes=10)


def timm_vit(**overrides):
    config = zoo.get_variant("vit").config("tiny", **{**VIT, **overrides})
    return config, TimmViT(**vit_kwargs(config)).eval()


def save(state, path):
    """A checkpoint file as timm's training scripts (.pth, nested) or save_pretrained (.safetensors) write it."""
    if path.suffix == ".safetensors":
        save_file({k: v.contiguous() for k, v in state.items()}, path)
    else:
        torch.save({"state_dict": state, "epoch": 3}, path)
    return path


@float64()
@pytest.mark.parametrize("suffix", [".safetensors", ".pth"])
def test_timm_vit_checkpoint_gives_timm_logits(tmp_path, suffix):
    config, peer = timm_vit()
    file = save(peer.state_dict(), tmp_path / f"vit{suffix}")
    ours = zoo.create("vit", preset="tiny", pretrained=file, **VIT).eval()
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        assert_close_fp64(ours(x), peer(x))
    transfer = load_pretrained(zoo.create("vit", preset="tiny", **VIT), file, zoo.get_variant("vit").import_weights)
    assert transfer.renamed and transfer.counts() == {"loaded": len(peer.state_dict()), "resized": 0,
                                                      "re-initialised": 0, "initialised": 0, "unused": 0}


@float64()
def test_another_image_size_resamples_positions_as_timm_does(tmp_path):
    _, peer = timm_vit()
    file = save(peer.state_dict(), tmp_path / "vit.safetensors")
    config48, peer48 = timm_vit(image_size=48)
    peer48.load_state_dict(checkpoint_filter_fn(peer.state_dict(), peer48))  # timm's own resampling
    ours = zoo.create("vit", preset="tiny", pretrained=file, **{**VIT, "image_size": 48}).eval()
    x = torch.randn(2, 3, 48, 48)
    with torch.no_grad():
        assert_close_fp64(ours(x), peer48(x))
    transfer = load_pretrained(zoo.create("vit", preset="tiny", **{**VIT, "image_size": 48}), file,
                               zoo.get_variant("vit").import_weights)
    assert transfer.names("resized") == ["position.weight"]
    assert "[17, 32]→[37, 32]" in transfer.table()  # 1 + 4×4 rows -> 1 + 6×6


@float64()
def test_a_head_for_other_classes_is_reinitialised_and_reported(tmp_path):
    _, peer = timm_vit()
    file = save(peer.state_dict(), tmp_path / "vit.safetensors")
    torch.manual_seed(0)
    fresh = zoo.create("vit", preset="tiny", **{**VIT, "num_classes": 5})
    head = fresh.head.weight.clone()
    transfer = load_pretrained(fresh, file, zoo.get_variant("vit").import_weights)
    assert transfer.names("re-initialised") == ["head.weight", "head.bias"]
    assert torch.equal(fresh.head.weight, head)  # kept its own initialisation
    assert torch.equal(fresh.tokens.proj.weight, peer.patch_embed.proj.weight)
    assert "| re-initialised | 2 | 165 |" in transfer.table()  # 5×32 + 5 values
    assert transfer.to_dict()["re-initialised"] == ["head.weight", "head.bias"]


@float64()
def test_timm_folder_with_config_json(tmp_path):
    _, peer = timm_vit()
    save(peer.state_dict(), tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps({"architecture": "vit_tiny_patch8_32", "num_classes": 10}))
    source = read_source(tmp_path)
    assert "timm's vit_tiny_patch8_32" in source.describe
    ours = zoo.create("vit", preset="tiny", pretrained=tmp_path, **VIT).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert_close_fp64(ours(x), peer(x))


@float64()
def test_timm_swin_and_deit_checkpoints_give_timm_logits(tmp_path):
    swin = zoo.get_variant("swin").config("tiny")
    peer = timm_swin.SwinTransformer(**swin_kwargs(swin)).eval()
    with torch.no_grad():
        for p in peer.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    ours = zoo.create("swin", preset="tiny", pretrained=save(peer.state_dict(), tmp_path / "swin.pth")).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert_close_fp64(ours(x), peer(x))
    deit = zoo.get_variant("deit").config("tiny", **VIT)
    peer = VisionTransformerDistilled(**deit_kwargs(deit)).eval()
    ours = zoo.create("deit", preset="tiny", pretrained=save(peer.state_dict(), tmp_path / "deit.safetensors"), **VIT)
    with torch.no_grad():
        assert_close_fp64(ours.eval().head_dist(torch.ones(1, 32)), peer.head_dist(torch.ones(1, 32)))
        assert_close_fp64(ours.forward_features(x)[:, :2], peer.forward_features(x)[:, :2])


def test_monai_swinunetr_encoder_weights_load_into_swinunetr3d(tmp_path):
    from monai.networks.nets import SwinUNETR

    c = zoo.get_variant("swinunetr3d").config("cpu")
    monai = SwinUNETR(in_channels=c.in_channels, out_channels=c.num_classes, depths=c.depths, num_heads=c.num_heads,
                      window_size=c.window_size, feature_size=c.feature_size, spatial_dims=3)
    # the self-supervised encoder checkpoint's layout: the encoder's names after "module.", and pretext heads
    state = {f"module.{k}": v for k, v in monai.swinViT.state_dict().items()}
    state["module.rotation_head.weight"] = torch.randn(4, 8)
    file = tmp_path / "model_swinvit.pt"
    torch.save({"state_dict": state}, file)
    with pytest.raises(ValueError, match=r"loads 17 % of this model's parameter values \(694,998 of 4,078,155\), "
                                         r"below the 50 % a load needs.*stacking 3,383,040.*--init-partial"):
        load_pretrained(zoo.create("swinunetr3d", preset="cpu"), file, zoo.get_variant("swinunetr3d").import_weights)
    ours = zoo.create("swinunetr3d", preset="cpu")  # an encoder under a new decoder: a partial load, asked for
    transfer = load_pretrained(ours, file, zoo.get_variant("swinunetr3d").import_weights, partial=True)
    for name, tensor in monai.swinViT.state_dict().items():
        assert torch.equal(ours.network.swinViT.state_dict()[name], tensor), name
    assert transfer.names("unused") == ["rotation_head.weight"]
    assert transfer.counts()["initialised"] > 0  # the CNN decoder: not in an encoder checkpoint
    assert all(not n.startswith("network.swinViT.") for n in transfer.names("initialised"))
    # a whole SwinUNETR's state dict (MONAI's fine-tuned checkpoints): every tensor loads
    whole = load_pretrained(zoo.create("swinunetr3d", preset="cpu"), save(monai.state_dict(), tmp_path / "w.pth"),
                            zoo.get_variant("swinunetr3d").import_weights)
    assert whole.counts()["loaded"] == len(monai.state_dict()) and whole.counts()["initialised"] == 0


def test_unrelated_and_other_size_checkpoints_are_refused(tmp_path):
    other = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.Linear(8, 2))
    file = save(other.state_dict(), tmp_path / "resnet.pth")
    with pytest.raises(ValueError, match=r"does not fit this model: 0 of its 9 tensors .*'0.weight'"):
        zoo.create("vit", preset="tiny", pretrained=file, **VIT)
    wide = TimmViT(**{**vit_kwargs(zoo.get_variant("vit").config("tiny", **{**VIT, "d_model": 64})), "num_heads": 2})
    with pytest.raises(ValueError, match=r"another size of this model: tokens.proj.weight checkpoint \[64, 3, 8, 8\] "
                                         r"ours \[32, 3, 8, 8\]"):
        zoo.create("vit", preset="tiny", pretrained=save(wide.state_dict(), tmp_path / "wide.pth"), **VIT)
    pooled = TimmViT(**{**vit_kwargs(zoo.get_variant("vit").config("tiny", **VIT)), "global_pool": "avg",
                        "class_token": False, "fc_norm": True})  # norm after pooling: another function
    with pytest.raises(ValueError, match="normalises after pooling"):
        zoo.create("vit", preset="tiny", pretrained=save(pooled.state_dict(), tmp_path / "avg.pth"), **VIT)
    with pytest.raises(ValueError, match="does not fit this model"):  # a Swin checkpoint is not a ViT
        zoo.create("vit", preset="tiny", pretrained=save(timm_swin.SwinTransformer(
            **swin_kwargs(zoo.get_variant("swin").config("tiny"))).state_dict(), tmp_path / "swin.pth"), **VIT)


def test_files_that_are_not_checkpoints(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        read_source(tmp_path / "absent.pth")
    (tmp_path / "broken.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError, match="corrupt or not a safetensors file"):
        read_source(tmp_path / "broken.safetensors")
    (tmp_path / "broken.pth").write_bytes(b"\x80\x04garbage")
    with pytest.raises(ValueError, match="broken.pth"):
        read_source(tmp_path / "broken.pth")
    torch.save({"state_dict": {"w": torch.ones(1)}, "hook": print}, tmp_path / "code.pth")  # pickles a function
    with pytest.raises(ValueError, match="would run code"):
        read_source(tmp_path / "code.pth")
    torch.save({"epoch": 3, "lr": 0.1}, tmp_path / "nothing.pth")
    with pytest.raises(ValueError, match="holding no state dict"):
        read_source(tmp_path / "nothing.pth")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="holds no weights"):
        read_source(tmp_path / "empty")


def test_a_file_of_only_the_head_is_refused_unless_a_partial_load_is_asked_for(tmp_path, caplog):
    """Two tensors that fit are not the model pretrained: the share counts values (a head's 330 of this tiny ViT's
    24,234: 1.36 %), and the refusal names the share, the threshold, the biggest parts left fresh and the flag."""
    torch.manual_seed(0)
    trained = zoo.create("vit", preset="tiny", **VIT)
    file = save({k: v for k, v in trained.state_dict().items() if k.startswith("head.")}, tmp_path / "head.pth")
    total = sum(p.numel() for p in trained.parameters())
    with pytest.raises(ValueError, match=rf"head.pth \(a checkpoint, 2 tensors\) loads 1.\d+ % of this model's "
                                         rf"parameter values \(330 of {total:,}\), below the 50 % a load needs; the "
                                         r"biggest parts left at their initialisation: (attention|ffn) .*"
                                         r"--init-partial \(zoo train\) or partial=True"):
        zoo.create("vit", preset="tiny", pretrained=file, **VIT)
    with caplog.at_level("WARNING", logger="zoo.weights.transfer"):
        model = zoo.create("vit", preset="tiny", pretrained=file, partial=True, **VIT)
    assert torch.equal(model.head.weight, trained.head.weight)
    assert "partial load" in caplog.text and "330 of" in caplog.text
    transfer = load_pretrained(zoo.create("vit", preset="tiny", **VIT), file, partial=True)
    assert transfer.share == pytest.approx(330 / total) and transfer.counts()["loaded"] == 2
    assert transfer.to_dict()["share"] == pytest.approx(330 / total, abs=1e-6)
    assert "% of the model's parameter values loaded or resized" in transfer.table()
    with pytest.raises(TypeError, match="partial must be a bool, got str"):
        zoo.create("vit", preset="tiny", pretrained=file, partial="yes", **VIT)
