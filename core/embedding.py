"""Token embeddings scaled by √d_model (Vaswani et al. 2017, §3.4)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def check_token_ids(name: str, ids: object, vocab_size: int) -> Tensor:
    """Validate a ``(B, N)`` tensor of token ids; return it unchanged."""
    if not isinstance(ids, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids, got {type(ids).__name__}")
    if ids.dtype.is_floating_point or ids.dtype == torch.bool or ids.is_complex():
        raise TypeError(f"{name} must hold integer token ids (torch.long), got dtype {ids.dtype}")
    if ids.dim() != 2:
        raise ValueError(f"{name} must have shape (batch, length), got {tuple(ids.shape)}")
    # The range check reads the ids' values (a host sync). Under torch.compile that would split the graph at
    # every call, so it is left to the compiled embedding's own bounds check there (inductor asserts indirect
    # indices); tasks.engine.compiled.CompiledModel's first call also runs the model, and this check, eagerly.
    if torch.compiler.is_compiling():
        return ids
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        raise ValueError(
            f"{name} holds ids in [{int(ids.min())}, {int(ids.max())}] but the vocabulary has {vocab_size} "
            "entries; check the tokenizer and the model's vocab size"
        )
    return ids


class TokenEmbedding(nn.Module):
    """A lookup table of ``vocab_size`` vectors, multiplied by √d_model.

    The scale matters when the weights are tied with the output projection: the shared matrix is
    initialised small, and without the scale the positional encoding would drown the tokens.

    Shape: ``(B, N)`` integer ids -> ``(B, N, D)``.
    """

    zoo_part = "embedding"

    def __init__(self, vocab_size: int, d_model: int, pad_id: int | None = None, scale: bool = True) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.lookup = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        self.scale = math.sqrt(d_model) if scale else 1.0

    @property
    def weight(self) -> nn.Parameter:
        return self.lookup.weight

    def forward(self, ids: Tensor) -> Tensor:
        return self.lookup(ids) * self.scale  # (B, N, D)
