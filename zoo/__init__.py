"""The zoo: variants of the classic Transformer, each a declared and measured patch on ``core``.

This file is the package's front door — ``zoo.create``, ``zoo.get_variant``, ``zoo.load_run`` — and sits above
everything else: no module of the project imports it (they import ``zoo.registry`` and the variants directly;
importing any of them runs this file first, so every built-in variant is registered whichever is imported).
"""

from zoo import classic, deit, linear, lm, missformer, moe, monai3d, norm_ffn, swin, vit  # noqa: F401  (importing a variant's package registers it)
from zoo.registry import Change, Paper, Variant, create, get_variant, list_variants, register, tasks_of

__all__ = ["Change", "Paper", "Variant", "create", "get_variant", "list_variants", "load_run", "register", "tasks_of"]


def load_run(path, checkpoint="best", device="cpu", task=None, runtime="torch"):
    """Load a finished run (a folder written by ``zoo train`` or ``zoo export``): its model in eval mode, the task
    config and preprocessing it was trained with, and its metrics. ``runtime="onnxruntime"`` runs an ONNX export's
    graphs instead of the PyTorch model. See :func:`tasks.runs.run.load_run`.

    The front door's one import from ``tasks``, made on call: a run needs its task runner (tokenizer, image
    normalisation, classes), and the task layer sits above the variants.
    """
    from tasks.runs.run import load_run as load

    return load(path, checkpoint, device, task, runtime)
