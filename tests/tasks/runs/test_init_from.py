"""``--init-from`` and ``--freeze``: a run starting from another run's weights or a timm checkpoint, the per-tensor
table in its report and run.json, frozen parts that do not move, and ``zoo.create(pretrained=RUN)``."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file
from timm.models.vision_transformer import VisionTransformer as TimmViT

import zoo
from tasks.cifar.task import CifarConfig, CifarTask
from tasks.engine.checkpoint import load_checkpoint
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
    train(CifarTask, config(source, "from_timm", init_from=str(file), epochs=2, lr=1e-9, warmup=0, resume=True))
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
