"""Pretrained weights in: read a checkpoint someone trained (timm, MONAI, or a run of this package), map its
names onto a model of the zoo, resize what a new grid needs, and say tensor by tensor what happened.

``zoo train --init-from SOURCE`` and ``zoo.create(name, pretrained=SOURCE)`` both go through
:func:`zoo.weights.transfer.load_pretrained`.
"""
