"""Lesson ``init``: a too-wide Q/K/V initialisation saturates attention at step 0; the core's fix does not."""

import pytest
import torch

from core.multihead import MultiHeadAttention
from tasks.lab import LabSettings, run_lesson
from tasks.lab.init import MISTAKE, reinit_qkv
from tasks.lab.toolkit import small_transformer, translation_data
from tests.tasks.lab.zh_checks import assert_chinese


def test_reinit_qkv_redraws_only_the_qkv_weights():
    data = translation_data(300)
    model = small_transformer(data, d_model=64, heads=2)
    before = {name: p.clone() for name, p in model.named_parameters()}
    reinit_qkv(model, 1.0, seed=3)
    changed = {name for name, p in model.named_parameters() if not torch.equal(before[name], p)}
    assert changed and all(name.endswith("qkv.weight") for name in changed)
    weights = torch.cat([m.qkv.weight.flatten() for m in model.modules() if isinstance(m, MultiHeadAttention)])
    assert float(weights.detach().std()) == pytest.approx(1.0, rel=0.02)
    again = reinit_qkv(small_transformer(data, d_model=64, heads=2), 1.0, seed=3)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), again.parameters()))  # seeded


@pytest.fixture(scope="module")
def lesson(tmp_path_factory):
    out = tmp_path_factory.mktemp("init")
    # 60 steps: the std-1.0 arm's final loss is chaotic (at 15 steps it ended 0.11-0.15 above the std-0.02 fix, varying
    # by 0.04 with the CPU's kernels); at 60 it ends 0.73-0.76 above them, varying by 0.013.
    return out, run_lesson("init", LabSettings(out, quick=True, scale=0.2, progress=False))


def test_large_variance_saturates_attention_at_step_zero(lesson):
    _, result = lesson
    bad = result.findings[MISTAKE]
    for fix in ("std 0.02", "xavier (core)"):
        good = result.findings[fix]
        assert bad["saturation_init"] > good["saturation_init"] + 0.3
        assert bad["entropy_init"] < good["entropy_init"] - 1.0
        assert bad["saturation"] > good["saturation"]
        assert bad["final_loss"] > good["final_loss"]
    assert result.holds


def test_lesson_writes_its_files(lesson):
    out, result = lesson
    assert result.figures == ["init_training.png"]
    assert (out / "init_training.png").stat().st_size > 0
    text = (out / "lesson.md").read_text()
    assert "std 1.0" in text and "xavier (core)" in text
    assert (out / "result.json").exists()
    assert_chinese("init", result, out)
