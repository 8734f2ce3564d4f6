"""Exercise of the lesson ``position`` (``zoo lab position``): a sinusoidal position table that is not the paper's.

Symptom: a model trained with the core's sinusoidal positions gives other outputs when this table is put in
their place (a checkpoint read with another table than the one it was trained with), and the row of position 0
is not what the formula of Vaswani et al. 2017, §3.5 gives there. Run this file to see that row's first values.
Find the line that causes it, fix it, and check your fix with ``zoo lab --check FOLDER``.

Interface of :class:`core.position.PositionalScheme` with ``injection = "embedding"``. Shape: ``embed`` maps
``(B, N, D)`` embeddings to ``(B, N, D)``, positions counted from ``offset``.
"""

import torch

from core.position import PositionalScheme


class Sinusoids(PositionalScheme):
    """Fixed sinusoids added to the embeddings, for ``length`` positions of width ``d_model`` (even)."""

    injection = "embedding"

    def __init__(self, d_model: int, length: int = 512, base: float = 10000.0) -> None:
        super().__init__()
        position = torch.arange(length, dtype=torch.float32)[:, None]  # (N, 1)
        inv_freq = base ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)  # (D/2,)
        angles = position * inv_freq  # (N, D/2)
        table = torch.zeros(length, d_model)  # (N, D)
        table[:, 0::2], table[:, 1::2] = torch.cos(angles), torch.sin(angles)
        self.register_buffer("table", table, persistent=False)

    def embed(self, x, offset=0):
        end = offset + x.shape[1]
        if end > self.table.shape[0]:
            raise ValueError(f"sequence reaches position {end} but the table has {self.table.shape[0]} rows; "
                             "build Sinusoids with a larger length")
        return x + self.table[offset:end].to(x.dtype)  # (B, N, D)


if __name__ == "__main__":
    print("position 0, dimensions 0..3:", [round(x, 3) for x in Sinusoids(8).table[0, :4].tolist()])
