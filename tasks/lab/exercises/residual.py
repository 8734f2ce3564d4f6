"""Exercise of the lesson ``norm`` (``zoo lab norm``): a residual connection whose layer normalisation makes a deep
model hard to train.

The model: 6 encoder and 6 decoder layers, every sublayer wrapped by :meth:`Residual.residual` (the stacks end
with one more layer normalisation), trained at a high learning rate from the first step, without warm-up.

Symptom: at initialisation the gradients of the layers near the output are several times those of the layers
near the input, and the deeper the model, the larger that ratio; without warm-up such a model stalls on the
loss of predicting token frequencies. Run this file to see the ratio. Find the line that causes it, fix it, and
check your fix with ``zoo lab --check FOLDER``.

The hook of :class:`core.layers.ResidualLayer` that every encoder and decoder layer calls once per sublayer
(self-attention, cross-attention, FFN). Shape: ``x`` ``(B, N, D)``; ``norm`` maps ``(B, N, D)`` to ``(B, N, D)``;
``sublayer`` too.
"""

import types

import torch

from core.layers import ResidualLayer


class Residual(ResidualLayer):
    """One sublayer, with its residual connection and its layer normalisation."""

    def residual(self, x, norm, sublayer):
        return norm(x + self.drop_path(self.dropout(sublayer(x))))  # (B, N, D)


if __name__ == "__main__":
    import torch.nn.functional as F

    from core.model import build_transformer

    torch.manual_seed(0)
    model = build_transformer("tiny", d_model=32, heads=4, d_ff=64, encoder_layers=6, decoder_layers=6,
                              norm_first=True)
    for layer in [*model.encoder.layers, *model.decoder.layers]:
        layer.residual = types.MethodType(Residual.residual, layer)
    ids = torch.randint(4, 64, (8, 10))
    F.cross_entropy(model(ids, ids).flatten(0, 1), ids.flatten()).backward()
    first, last = (torch.cat([p.grad.flatten() for p in model.decoder.layers[i].parameters()]).norm() for i in (0, -1))
    print(f"gradient norm, last decoder layer / first: {float(last / first):.2f}")
