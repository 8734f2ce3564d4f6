"""``--init-from`` and ``--freeze``: a run starting from another run's weights or a timm checkpoint, the per-tensor
table in its report and run.json, frozen parts that do not move, ``zoo.create(pretrained=RUN)``, a load of a small
share of the model refused unless ``--init-partial``, and another variant's run named."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file
from timm.models.vision_transformer import VisionTransformer as TimmViT

import zoo
from tasks.cifar.task import CifarConfig, CifarTask
from tasks.cli.main import main
from tasks.engine.checkpoint import load_checkpoint
from tasks.runs.export import export_run
from tasks.runs.run import load_run
from tasks.runs.training import train
from tests.tasks.cifar.test_cifar_use import write_fmnist
from zoo.vit import timm_kwargs


def config(root, out, **overrides):
    return CifarConfig(**{**dict(variant="vit", preset="tiny", data=str(root / "fmnist"), out=str(root / out),
                                 epochs=1, batch_size=50, warmup=2, eval_batch_size=25, attention_images=0,
                                 progress=False, device="cpu"), **overrides})


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A tiny ViT trained one epoch on 300 Fashion-MNIST images: the run the others start from."""
    root = tmp_path_factory.mktemp("init_from")
    write_fmnist(root / "fmnist")
    torch.manual_seed(0)
    train(CifarTask, config(root, "source"))
    return root


def test_a_run_starts_from_another_and_frozen_parts_do_not_move(source):
    train(CifarTask, config(source, "tuned", init_from=str(source / "source"), freeze="backbone", seed=1))
    start = load_checkpoint(source / "source" / "checkpoints" / "best.pt")["model"]
    end = load_checkpoint(source / "tuned" / "checkpoints" / "last.pt")["model"]
    assert not torch.equal(start["head.weight"], end["head.weight"])  # the head trained
    for name, value in start.items():
        if not name.startswith("head."):
            assert torch.equal(value, end[name]), name  # every other part stayed the source's
    info = json.loads((source / "tuned" / "run.json").read_text())
    assert info["init_from"]["counts"]["loaded"] == len(start) and info["init_from"]["unused"] == []
    head = start["head.weight"].numel() + start["head.bias"].numel()
    assert info["frozen"] == {"parts": "backbone", "values": sum(v.numel() for v in start.values()) - head}
    report = (source / "tuned" / "report.md").read_text()
    assert "## Initial weights" in report and f"| loaded | {len(start)} |" in report


def test_a_timm_checkpoint_starts_a_run_and_the_record_survives_resume(source):
    variant = zoo.get_variant("vit")
    timm_model = TimmViT(**timm_kwargs(variant.config("tiny", image_size=32, num_classes=10)))
    file = source / "timm_vit.safetensors"
    save_file(timm_model.state_dict(), file)
    first = config(source, "from_timm", init_from=str(file), epochs=1, lr=1e-9, warmup=0)
    train(CifarTask, first)
    info = json.loads((source / "from_timm" / "run.json").read_text())
    assert info["init_from"]["renamed"] and info["init_from"]["counts"]["loaded"] == len(timm_model.state_dict()) - 1
    assert info["init_from"]["resized"] == ["tokens.proj.weight"]  # RGB weights for grey images: summed, as timm does
    weights = load_checkpoint(source / "from_timm" / "checkpoints" / "last.pt")["model"]
    rgb = timm_model.patch_embed.proj.weight  # (32, 3, 8, 8)
    torch.testing.assert_close(weights["tokens.proj.weight"], rgb.sum(1, keepdim=True), atol=1e-5, rtol=0)
    torch.testing.assert_close(weights["encoder.layers.0.self_attn.qkv.weight"], timm_model.blocks[0].attn.qkv.weight,
                               atol=1e-5, rtol=0)  # lr 1e-9: a step moves nothing visibly
    # resumed (a requeue after its last checkpoint): run.json is written again, from the record of the first start
    train(CifarTask, config(source, "from_timm", init_from=str(file), epochs=1, lr=1e-9, warmup=0, resume=True))
    assert json.loads((source / "from_timm" / "run.json").read_text())["init_from"] == info["init_from"]


def test_create_pretrained_from_a_run_takes_its_config_and_weights(source):
    run = load_run(source / "source")
    model = zoo.create("vit", pretrained=source / "source").eval()
    assert model.config == run.variant_config
    images = torch.randn(2, 1, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(images), run.model(images), rtol=0, atol=0)
    other = zoo.create("vit", pretrained=source / "source", num_classes=3)
    assert other.head.weight.shape == (3, run.variant_config.d_model)


def test_bad_freeze_and_init_from_are_refused(source):
    with pytest.raises(ValueError, match=r"unknown part \(--freeze\) 'atention'.*'attention'"):
        config(source, "x", freeze="atention")
    with pytest.raises(ValueError, match="freezes all .* nothing would train"):
        train(CifarTask, config(source, "all_frozen", freeze="backbone,head"))
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        train(CifarTask, config(source, "missing", init_from=str(source / "nowhere.pth")))
    with pytest.raises(TypeError, match="init_partial must be a bool, got str"):
        config(source, "x", init_partial="yes")


def test_init_from_a_head_only_file_is_refused_and_init_partial_loads_it(source, capsys):
    """The issue's case: a file holding only ``head.*`` (2 tensors fit, 30 would stay fresh) used to start a run
    with one log line. Through the command line: refused naming the share, the 50 % and the flag; with
    ``--init-partial`` it trains, and run.json records the share."""
    state = load_checkpoint(source / "source" / "checkpoints" / "best.pt")["model"]
    head = {k: v.contiguous() for k, v in state.items() if k.startswith("head.")}
    save_file(head, source / "head.safetensors")
    values = sum(v.numel() for v in head.values())
    flags = ["train", "cifar", "--variant", "vit", "--preset", "tiny", "--data", str(source / "fmnist"), "--epochs",
             "1", "--batch-size", "50", "--warmup", "2", "--attention-images", "0", "--progress", "false",
             "--device", "cpu", "--init-from", str(source / "head.safetensors")]
    assert main([*flags, "--out", str(source / "head_refused")]) == 2
    error = capsys.readouterr().err
    assert f"loads {100 * values / sum(v.numel() for v in state.values()):.3g} % of this model's parameter values " \
           f"({values:,} of " in error and "below the 50 % a load needs" in error and "--init-partial" in error
    assert not (source / "head_refused" / "checkpoints").exists()
    assert main([*flags, "--out", str(source / "head_partial"), "--init-partial"]) == 0
    record = json.loads((source / "head_partial" / "run.json").read_text())["init_from"]
    assert record["counts"]["loaded"] == 2 and 0 < record["share"] < 0.05 and record["source_variant"] is None
    assert "% of the model's parameter values loaded or resized" in (source / "head_partial" / "report.md").read_text()


def test_another_variants_run_is_named(source, caplog):
    """A ViT run into a linear-attention ViT (same names, same sizes) loads with a warning naming both variants; into
    an MoE ViT, whose experts leave most values fresh, it is refused naming both."""
    with caplog.at_level("WARNING", logger="zoo.weights.transfer"):
        linear = zoo.create("linear", preset="tiny", pretrained=source / "source", in_channels=1)
    assert "of variant 'vit' where this model is 'linear'" in caplog.text
    vit = load_run(source / "source").model
    assert torch.equal(linear.encoder.layers[0].self_attn.qkv.weight, vit.encoder.layers[0].self_attn.qkv.weight)
    # the exported model.safetensors alone: its header names the task (cifar's linear, not translation's) and variant
    file = export_run(source / "source", source / "source_export") / "model.safetensors"
    caplog.clear()
    with caplog.at_level("WARNING", logger="zoo.weights.transfer"):
        zoo.create("linear", preset="tiny", pretrained=file, in_channels=1)
    assert "(a cifar run of vit, " in caplog.text and "of variant 'vit' where this model is 'linear'" in caplog.text
    with pytest.raises(ValueError, match=r"of variant 'vit' where this model is 'moe', loads \d+(\.\d+)? % of this "
                                         r"model's parameter values .* below the 50 %"):
        zoo.create("moe", preset="tiny", pretrained=source / "source", in_channels=1)
