"""Every registered variant with a decoder: causal, batch-invariant in evaluation, the same with a KV cache.

The variants come from the registry (:func:`zoo.analysis.probes.autoregressive_variants`: every registration whose
model follows the decoding protocol), so a new variant is checked without editing this file. The
measurements are the probes of :mod:`zoo.analysis.probes`; the last tests show that each probe does catch a leak.

Exactness: where two runs have the same shapes the outputs must be bit-identical (``torch.equal``);
where the batch or the padded length differs, matmul kernels may round differently, so they must agree
to a float32 tolerance scaled to the outputs' magnitude.
"""

import copy

import pytest
import torch
from torch import nn

import zoo
from core.ffn import PositionwiseFFN
from zoo.analysis import probes
from zoo.moe import MoEFFN

VARIANTS = probes.autoregressive_variants()
IDS = [f"{name}-{task}" for name, task in VARIANTS]
RTOL = 1e-5  # float32 rounding, relative to the largest logit


def close(drift: probes.Drift) -> bool:
    return drift.max_abs <= RTOL * max(drift.magnitude, 1.0)


def batch(model: nn.Module, rows: int = 3, src_len: int = 9, tgt_len: int = 12, seed: int = 0):
    """``(rows, src_len)`` sources and ``(rows, tgt_len)`` BOS-first targets; every row but the first is
    right-padded to a random length (the first is full, so that every position is probed)."""
    gen = torch.Generator().manual_seed(seed)
    c = model.config
    src = probes.real_tokens(model, (rows, src_len), gen, source=True)
    tgt = probes.real_tokens(model, (rows, tgt_len), gen)
    tgt[:, 0] = c.bos_id
    for i in range(1, rows):
        src[i, torch.randint(2, src_len, (1,), generator=gen).item():] = c.pad_id
        tgt[i, torch.randint(2, tgt_len, (1,), generator=gen).item():] = c.pad_id
    return src, tgt


def test_the_registry_has_decoders_to_check():
    assert ("classic", "translation") in VARIANTS and ("moe", "translation") in VARIANTS


# ------------------------------------------------------------------------------- (a) causality


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("name, task", VARIANTS, ids=IDS)
def test_later_target_tokens_never_change_earlier_outputs(name, task, training):
    model = probes.build_for_probes(name, task, training)
    src, tgt = batch(model)
    for t in (0, 3, 7, tgt.shape[1] - 2):
        assert probes.causal_leak(model, src, tgt, t).max_abs == 0.0, f"other tokens after position {t}"
        ended = probes.causal_leak(model, src, tgt, t, replacement=model.config.pad_id)
        assert ended.max_abs == 0.0, f"padding after position {t}"


# ---------------------------------------------------------------------- (b) batch invariance


@pytest.mark.parametrize("name, task", VARIANTS, ids=IDS)
def test_a_sequence_does_not_depend_on_its_batch_in_evaluation(name, task):
    model = probes.build_for_probes(name, task, training=False)
    src, tgt = batch(model)
    others_src, others_tgt = batch(model, rows=4, seed=1)
    # the same shapes: bit-identical
    assert probes.batch_leak(model, src, tgt, others_src[:2], others_tgt[:2]).max_abs == 0.0
    # alone, or with other sequences of the same padded length: the batch size differs, so up to rounding
    assert close(probes.batch_leak(model, src[:1], tgt[:1], others_src, others_tgt))
    # padded further, because the others are longer, or with padding appended to every sequence
    longer_src, longer_tgt = batch(model, rows=2, src_len=14, tgt_len=17, seed=2)
    assert close(probes.batch_leak(model, src[:1], tgt[:1], longer_src, longer_tgt))
    assert close(probes.padding_leak(model, src, tgt, extra=5))


# ------------------------------------------------------------------- (c) KV cache == recomputation


@pytest.mark.parametrize("name, task", VARIANTS, ids=IDS)
def test_cached_decoding_equals_full_recomputation(name, task):
    model = probes.build_for_probes(name, task, training=False)
    src, tgt = batch(model)
    assert close(probes.cache_drift(model, src, tgt))
    assert probes.decoding_mismatch(model, src, max_len=10) == 0  # greedy
    assert probes.decoding_mismatch(model, src, beam_size=3, max_len=10) == 0


# ------------------------------------------------------------------------ the probes can fail


class MeanOverPositions(nn.Module):
    """A deliberately non-causal FFN: every position sees the mean of the whole sequence."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + x.mean(dim=1, keepdim=True)


class MeanOverBatch(nn.Module):
    """A deliberately batch-dependent FFN: every sequence sees the mean of the batch."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + x.mean(dim=0, keepdim=True)


class WholeBatchMoE(MoEFFN):
    """The capacity counted over the whole batch (all of it one sequence, padding routed), as before issue
    12: in training, a token's slot can be taken by any token of the batch, earlier or later."""

    def forward(self, x: torch.Tensor, token_mask: torch.Tensor | None = None) -> torch.Tensor:
        return super().forward(x.reshape(1, -1, x.shape[-1])).view(x.shape)


def with_ffn(ffn: nn.Module, layer: int = 0, name: str = "classic") -> nn.Module:
    model = probes.build_for_probes(name, "translation", training=False)
    model.decoder.layers[layer].ffn = ffn
    return model


def test_the_probes_catch_a_non_causal_and_a_batch_dependent_layer():
    model = with_ffn(MeanOverPositions())
    src, tgt = batch(model)
    assert probes.causal_leak(model, src, tgt, 3).max_abs > 0.1
    assert probes.padding_leak(model, src, tgt).max_abs > 0.1
    assert probes.cache_drift(model, src, tgt).max_abs > 0.1
    model = with_ffn(MeanOverBatch())
    others_src, others_tgt = batch(model, rows=4, seed=1)
    assert probes.batch_leak(model, src, tgt, others_src[:2], others_tgt[:2]).max_abs > 0.1
    assert probes.batch_leak(model, src[:1], tgt[:1], others_src, others_tgt).max_abs > 0.1


def test_the_causal_probe_catches_whole_batch_capacity():
    model = probes.build_for_probes("moe", "translation", training=True)
    moe = model.decoder.layers[1].ffn
    whole = WholeBatchMoE(32, 64, moe.n_experts, moe.k, moe.capacity_factor)  # the default 1.25
    whole.load_state_dict(moe.state_dict())
    src, tgt = batch(model)
    model.decoder.layers[1].ffn = whole
    assert probes.causal_leak(model, src, tgt, 3).max_abs > 0.1
    model.decoder.layers[1].ffn = moe  # the same weights, capacity per sequence
    assert probes.causal_leak(model, src, tgt, 3).max_abs == 0.0


class CallSizeDependent(nn.Module):
    """Wraps an FFN so that its output depends on how many positions a call holds (as a per-call capacity
    did): calls of one position, as in cached decoding, get no offset; longer calls get one."""

    def __init__(self, ffn: nn.Module, d_model: int) -> None:
        super().__init__()
        self.ffn = ffn
        self.offset = torch.randn(d_model, generator=torch.Generator().manual_seed(0)) * 3

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ffn(x) + (self.offset if x.shape[1] > 1 else 0.0)


def test_the_decoding_probe_reports_differing_tokens(copy_model):
    model = copy.deepcopy(copy_model)  # trained to copy: decoding produces varied tokens
    src = torch.tensor([[3, 4, 5, 6, 7, 8], [9, 10, 11, 0, 0, 0], [12, 13, 0, 0, 0, 0]])
    assert probes.decoding_mismatch(model, src, max_len=8) == 0
    layer = model.decoder.layers[0]
    layer.ffn = CallSizeDependent(layer.ffn, model.config.d_model)
    assert probes.decoding_mismatch(model, src, max_len=8) > 0
    assert probes.decoding_mismatch(model, src, beam_size=3, max_len=8) > 0


def test_probe_arguments_are_checked():
    model = zoo.create("classic", preset="tiny")
    src, tgt = batch(model)
    with pytest.raises(ValueError, match=r"t must be in \[0, 10\]"):
        probes.causal_leak(model, src, tgt, 11)
    assert not probes.is_autoregressive(PositionwiseFFN(4, 8))
