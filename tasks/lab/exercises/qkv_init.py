"""Exercise of the lesson ``init`` (``zoo lab init``): an initialisation of the attention projections that stalls
training.

Symptom: right after this function runs, most attention rows of the model are nearly one-hot (entropy close to
0 nats) even though every kernel applies the 1/√d_k scale, and the training loss plateaus high from the first
steps. Run this file to see the largest attention weight of a few rows of a fresh model. Find the line that causes
it, fix it, and check your fix with ``zoo lab --check FOLDER``.

``model`` is any model built from the core; every :class:`core.multihead.MultiHeadAttention` in it packs
[W^Q; W^K; W^V] in one ``qkv`` linear layer of weight shape ``(3·D, D)``.
"""

import torch
from torch import nn

from core.multihead import MultiHeadAttention


@torch.no_grad()
def init_qkv(model: nn.Module) -> nn.Module:
    """Draw the packed Q/K/V weight of every multi-head attention of ``model`` afresh (biases untouched)."""
    for module in model.modules():
        if isinstance(module, MultiHeadAttention):
            module.qkv.weight.normal_(0.0, 1.0)
    return model


if __name__ == "__main__":
    from core.model import build_transformer
    from core.multihead import record_attention

    torch.manual_seed(0)
    model = init_qkv(build_transformer("tiny")).eval()
    ids = torch.randint(4, 64, (1, 8))
    with record_attention(model) as maps:
        model(ids, ids)
    print("largest weight of each row, encoder layer 0, head 0:",
          [round(w, 3) for w in maps["encoder.layers.0.self_attn"][0, 0].amax(-1).tolist()])
