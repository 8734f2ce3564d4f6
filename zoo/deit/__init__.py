"""DeiT (Touvron et al. 2021) as a patch on ViT, itself a patch on the classic Transformer.

ViT needs far more data than a CNN to beat it: it lacks a convolution's locality prior. DeiT's answer is
in the training, not the architecture: a teacher (typically a CNN, which has that prior) is distilled into
the ViT through an extra token. DeiT's declared changes, in ``CHANGES``, are ViT's five plus its own two (the
distillation head and the objective), each revertible alone (``zoo ablate deit``); ``zoo diff deit`` renders
them with the measured deltas. The objective is a change of the training loss, with no parameters or FLOPs of
its own: ``zoo diff`` says so, ``zoo ablate`` and ``zoo lab small-data`` measure it.

Training needs a teacher: ``zoo train cifar --variant deit --teacher RUN``, RUN a finished cifar run (e.g.
``--variant resnet18``). The finished DeiT run no longer needs it.
"""

from zoo.deit.config import DISTILLATIONS, DeiTConfig
from zoo.deit.model import DistillationReadout, DistilledVisionTransformer, late_fusion
from zoo.deit.timm_interop import load_timm_weights, timm_kwargs, timm_state_to_ours
from zoo.registry import Change, Paper, Variant, register
from zoo.vision import image_inputs
from zoo.vit import CHANGES as VIT_CHANGES
from zoo.vit import DEFAULT_PRESET, PRESETS

PAPER = Paper(
    "Training data-efficient image transformers & distillation through attention", 2021,
    "https://arxiv.org/abs/2012.12877",
)

CHANGES = (
    *VIT_CHANGES,
    Change(
        "head",
        "one output read from one place ([CLS]), one linear classifier",
        "a second learned token (distillation) beside [CLS], with its own linear head; at test time the two "
        "heads' softmax outputs are averaged (late fusion)",
        "a single [CLS] head must serve the label and the teacher at once; a separate token lets the teacher's "
        "signal reach every layer through attention without competing with the label (§4)",
        scope="task-specific",
        revert={"distillation_token": False},
        resizes={"position": "the learned table has one more row, for the distillation token"},
    ),
    Change(
        "objective",
        "cross-entropy against the true label",
        "hard distillation (the paper's better choice): ½·CE(class head, label) + ½·CE(distillation head, a "
        "teacher's arg-max prediction); no parameters or FLOPs of its own",
        "without a convolution's locality prior a ViT overfits small data; a CNN teacher hands that prior over "
        "as its predictions (on the same augmented images), which the label alone cannot",
        revert={"distillation": "none"},
    ),
)

DEIT = register(
    Variant(
        name="deit",
        paper=PAPER,
        tasks=("cifar",),
        config_class=DeiTConfig,
        presets=PRESETS,
        build=DistilledVisionTransformer,
        changes=CHANGES,
        default_preset=DEFAULT_PRESET,
        builds_on="vit",
        summary="ViT trained data-efficiently: a distillation token and head learn a (CNN) teacher's predictions "
                "beside the [CLS] token's label.",
        example_input=image_inputs,
        import_weights=timm_state_to_ours,
    )
)

__all__ = ["CHANGES", "DEIT", "DISTILLATIONS", "DeiTConfig", "DistillationReadout", "DistilledVisionTransformer",
           "PAPER", "late_fusion", "load_timm_weights", "timm_kwargs", "timm_state_to_ours"]
