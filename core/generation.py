"""Continuing a text with a decoder-only language model: greedy or sampled, with or without the KV cache.

With ``use_cache=True`` the prompt is fed once and each later step feeds only the newest token, reusing every
layer's keys and values (:class:`~core.language_model.LanguageModelCache`; linear attention keeps its
fixed-size state instead); with ``use_cache=False`` each step recomputes the whole sequence. Both give the
same tokens; the cache makes a step cost O(N) instead of O(N²).

Nothing is cropped: a sequence that would outgrow a learned position table is refused before the first
step (nanoGPT silently keeps only the last ``block_size`` tokens, which changes what the model conditions on).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from core.decoding import pick_next
from core.embedding import check_token_ids
from plumbing.errors import check_number, check_positive


@torch.no_grad()
def generate(
    model: nn.Module,
    ids: Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
) -> Tensor:
    """Append ``max_new_tokens`` tokens to each prompt of ``ids``, one at a time.

    Args:
        model: a :class:`~core.language_model.LanguageModel` (any module with ``forward(ids, cache)``,
            ``new_cache()``, ``check_length(n, what)`` and ``config.vocab_size``). Put it in eval mode first:
            dropout would otherwise make the tokens random.
        ids: the prompts ``(B, N)``, N ≥ 1 (all of one length; no padding).
        max_new_tokens: how many tokens to add (0 returns ``ids``).
        temperature: divides the logits before sampling; 0 picks the most probable token (greedy).
        top_k, top_p: keep only the k most probable tokens / the smallest set of mass ≥ p
            (:func:`core.decoding.filter_logits`).
        generator: the random generator of the samples, for reproducible sampling under a seed.
        use_cache: reuse the keys/values of earlier positions (same tokens, faster).

    Returns:
        ``(B, N + max_new_tokens)`` ids: the prompts followed by the generated tokens.
    """
    check_token_ids("ids", ids, model.config.vocab_size)
    if ids.shape[1] == 0:
        raise ValueError("ids holds empty prompts (shape (B, 0)); give each prompt at least one token")
    check_positive("max_new_tokens", max_new_tokens, allow_zero=True)
    check_number("temperature", temperature, 0, hint="0 is greedy")
    # The last generated token is never fed back, so the model reads N + max_new_tokens - 1 positions.
    model.check_length(ids.shape[1] + max(max_new_tokens - 1, 0),
                       f"a prompt of {ids.shape[1]} tokens plus max_new_tokens={max_new_tokens}")
    cache = model.new_cache() if use_cache else None
    tokens, fed = ids, ids  # fed: what the next forward reads
    for _ in range(max_new_tokens):
        logits = model(fed, cache)[:, -1]  # (B, V)
        # float32 at least for the softmax, but float64 stays float64 (a float64 test compares the two paths)
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
        next_ids = pick_next(logits, temperature, top_k, top_p, generator)[:, None]  # (B, 1)
        tokens = torch.cat((tokens, next_ids), dim=1)  # (B, t + 1)
        fed = next_ids if use_cache else tokens
    return tokens
