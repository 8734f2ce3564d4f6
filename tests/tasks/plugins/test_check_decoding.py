"""``zoo check``'s ``kv cache`` row judges cached decoding by its scores: a near-tie that rounding decides one way with
the cache and the other way without it passes, while a cache that adds noise or forgets beam search's reordering
fails. The near-tie is built into the logits, so the test does not depend on the CPU's kernels (it was found on an
AVX-512 CPU, where the classic model's own copy failed at preset ``base``)."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

import zoo
from core.decoding import beam_search, greedy_decode
from core.model import DecoderCache
from tasks.plugins.check import RTOL, _Preset
from tasks.plugins.check_decoding import _Lockstep, lockstep_drift
from zoo.analysis import probes


class NearTieHead(nn.Module):
    """The classic output projection, with the last two tokens tied above every other; in a call of one position
    (cached decoding, and the first step of recomputation) the last is ahead by 1e-6 of the logits' magnitude:
    far below the check's tolerance, but enough to turn every argmax."""

    def __init__(self, head: nn.Module) -> None:
        super().__init__()
        self.head = head

    def forward(self, x: Tensor) -> Tensor:
        logits = self.head(x)  # (B, T, V)
        top = logits.amax(-1, keepdim=True).abs() + 1.0  # (B, T, 1)
        lead = 1e-6 * top if x.shape[1] == 1 else torch.zeros_like(top)
        return torch.cat((logits[..., :-2], top, top + lead), dim=-1)


class NoisyHead(nn.Module):
    """A broken cache, as a head: calls of one position get logits moved by noise of 1 % of their magnitude."""

    def __init__(self, head: nn.Module) -> None:
        super().__init__()
        self.head = head

    def forward(self, x: Tensor) -> Tensor:
        logits = self.head(x)
        if x.shape[1] > 1:
            return logits
        noise = torch.randn(logits.shape, generator=torch.Generator().manual_seed(x.shape[0]))
        return logits + 0.01 * logits.abs().amax() * noise


class UnorderedCache(DecoderCache):
    """A broken cache: beam search's reordering of the hypotheses is ignored (teacher forcing never reorders)."""

    def reorder(self, index: Tensor) -> None:
        pass


def kv_cache_row(patch) -> tuple[object, _Preset]:
    subject = _Preset(zoo.get_variant("classic", "translation"), "translation", "tiny")
    patch(subject.model)
    (row,) = [r for r in subject.decoder() if r.check == "kv cache"]
    return row, subject


def test_a_near_tie_decided_by_rounding_passes():
    def tie(model: nn.Module) -> None:
        model.generator = NearTieHead(model.generator)

    row, subject = kv_cache_row(tie)
    # the tokens differ: the cached path takes the last token, recomputation (past its first step) the one before
    src = probes.probe_batch(subject.model, src_len=12)[0]
    assert probes.decoding_mismatch(subject.model, src, max_len=14) > 0
    assert probes.decoding_mismatch(subject.model, src, beam_size=3, max_len=14) > 0
    assert row.ok, row.reason


@pytest.mark.parametrize("patch, where", [
    (lambda model: setattr(model, "generator", NoisyHead(model.generator)), "greedy"),
    (lambda model: setattr(model, "new_cache", lambda: UnorderedCache(len(model.decoder.layers))), "beam"),
], ids=["noise", "no-reorder"])
@pytest.mark.slow
def test_a_broken_cache_fails(patch, where):
    row, subject = kv_cache_row(patch)
    assert row.ok is False and row.reason.startswith("cached decoding differs from recomputation"), row
    src = probes.probe_batch(subject.model, src_len=12)[0]
    drift = lockstep_drift(subject.model, src, 3 if where == "beam" else None, max_len=14)
    assert drift.max_abs > 100 * RTOL * max(drift.magnitude, 1.0)


def test_the_lockstep_follows_cached_decoding_and_refuses_other_models():
    model = probes.build_for_probes("classic", "translation")
    src = probes.probe_batch(model, src_len=12)[0]
    for beam in (None, 3):
        drift = lockstep_drift(model, src, beam, max_len=14)
        assert drift.max_abs <= RTOL * max(drift.magnitude, 1.0) and drift.magnitude > 0
    # steered by the cached logits, it takes cached decoding's very tokens
    assert torch.equal(greedy_decode(_Lockstep(model), src, max_len=14, use_cache=False),
                       greedy_decode(model, src, max_len=14))
    assert torch.equal(beam_search(_Lockstep(model), src, beam_size=3, max_len=14, use_cache=False),
                       beam_search(model, src, beam_size=3, max_len=14))
    with pytest.raises(TypeError, match="needs a model with encode, decode, new_cache, config"):
        lockstep_drift(nn.Linear(2, 2), src)
