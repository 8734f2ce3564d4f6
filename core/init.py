"""Weight initialisation schemes for the core model.

* ``xavier``: Glorot-uniform on every matrix (the Annotated Transformer and tensor2tensor's choice);
* ``normal``: N(0, 0.02²) on linear and embedding weights, zero biases (BERT, GPT-2, ViT);
* ``torch``: keep PyTorch's per-layer defaults.

LayerNorm always starts at weight 1, bias 0, and a padding embedding row starts at zero.
"""

from __future__ import annotations

from torch import nn

INIT_SCHEMES = ("xavier", "normal", "torch")


def init_weights(model: nn.Module, scheme: str = "xavier", std: float = 0.02) -> None:
    """Initialise ``model`` in place with ``scheme`` (see the module docstring)."""
    if scheme not in INIT_SCHEMES:
        from plumbing.errors import unknown_name

        raise unknown_name("init scheme", scheme, INIT_SCHEMES)
    if scheme == "torch":
        return
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            if scheme == "xavier":
                nn.init.xavier_uniform_(module.weight)
            else:
                nn.init.normal_(module.weight, std=std)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
            if isinstance(module, nn.Embedding) and module.padding_idx is not None:
                module.weight.data[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm) and module.elementwise_affine:
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
