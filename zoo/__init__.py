"""The zoo: variants of the classic Transformer, each a declared and measured patch on ``core``."""

from zoo import classic, deit, linear, missformer, moe, swin, vit  # noqa: F401  (importing a variant's package registers it)
from zoo.registry import Change, Paper, Variant, create, get_variant, list_variants, register, tasks_of

__all__ = ["Change", "Paper", "Variant", "create", "get_variant", "list_variants", "load_run", "register", "tasks_of"]


def load_run(path, checkpoint="best", device="cpu", task=None):
    """Load a finished run (a folder written by ``zoo train`` or ``zoo export``): its model in eval mode, the task
    config and preprocessing it was trained with, and its metrics. See :func:`tasks.runs.run.load_run`.

    The one import from ``tasks`` in the zoo, made on call: a run needs its task runner (tokenizer, image
    normalisation, classes) and the task layer sits above the zoo.
    """
    from tasks.runs.run import load_run as load

    return load(path, checkpoint, device, task)
