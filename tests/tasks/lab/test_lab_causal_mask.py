"""Lesson "causal-mask": the 0-filled kernel in a decoder-only model leaks exactly where the future is in the
input (not while generating one token at a time), and a reduced lesson run shows both numbers: a lower training
loss, a worse honest loss and worse generated text."""

import torch

from core.generation import generate
from core.language_model import build_language_model
from tasks.lab import LabSettings, run_lesson
from tasks.lab.causal_mask import validation_loss
from tasks.lab.mask import ZeroFilledMaskAttention, use_zero_fill
from tasks.lab.sampling import lm_task
from tests.numerics import float64
from tests.tasks.lab.zh_checks import assert_chinese


@float64()  # greedy tokens of two kernels are compared: no float32 near-tie may decide them
def test_zero_fill_leaks_on_a_whole_sequence_but_not_while_generating():
    torch.manual_seed(0)
    right = build_language_model("tiny", vocab_size=13, dropout=0.0).eval()
    torch.manual_seed(0)
    zero = use_zero_fill(build_language_model("tiny", vocab_size=13, dropout=0.0)).eval()
    assert all(isinstance(layer.self_attn.kernel, ZeroFilledMaskAttention) for layer in zero.decoder.layers)
    ids = torch.randint(13, (3, 10))
    # A whole sequence (training, scoring): position 0 sees the later tokens through exp(0) ...
    assert not torch.allclose(right(ids)[:, 0], zero(ids)[:, 0])
    # ... generation from one token feeds one query at a time: nothing to mask, nothing to leak.
    prompt = ids[:, :1]
    assert torch.equal(generate(right, prompt, 12, 0.0), generate(zero, prompt, 12, 0.0))


def test_validation_loss_puts_the_models_own_kernel_back():
    task = lm_task(64, 0)
    torch.manual_seed(0)
    zero = use_zero_fill(build_language_model("tiny", vocab_size=task.tokenizer.vocab_size, max_len=64,
                                              dropout=0.0))
    as_trained, honest = validation_loss(zero, task, False), validation_loss(zero, task, True)
    assert as_trained != honest
    assert all(isinstance(layer.self_attn.kernel, ZeroFilledMaskAttention) for layer in zero.decoder.layers)


def test_reduced_lesson_run(tmp_path):
    # scale 0.5: 200 steps per arm. Measured here: training loss 2.38 (leak) vs 2.59, validation loss from the
    # past alone 3.20 vs 2.67, sampled text under the honest model 3.74 vs 2.72 nats per character.
    result = run_lesson("causal-mask", LabSettings(tmp_path, quick=True, scale=0.5, progress=False))
    right, zero = result.findings["right"], result.findings["zero_filled"]
    assert zero["train_loss"] + 0.1 < right["train_loss"]  # training looks better with the leak ...
    assert zero["valid_loss_as_trained"] + 0.1 < right["valid_loss_as_trained"]
    assert zero["valid_loss_honest"] > right["valid_loss_honest"] + 0.25  # ... and is worse from the past alone
    assert zero["sampled"]["nll"] > right["sampled"]["nll"] + 0.3  # generated text the honest model finds unlikely
    assert right["valid_loss_as_trained"] == right["valid_loss_honest"]  # the correct mask has no leak to remove
    assert result.holds
    assert (tmp_path / "lesson.md").exists() and (tmp_path / "result.json").exists()
    assert result.figures and all((tmp_path / name).exists() for name in result.figures)
    assert_chinese("causal-mask", result, tmp_path)
