"""The cells of a study: task × dataset × preset, each a task config a change is tried on.

A cell says *where* a change is measured. Its task names the base model (:data:`zoo.changes.MODELS`: the
translation encoder–decoder, the decoder-only language model, ViT for image classification), its dataset is a set
of task settings (an embedded default at one difficulty or size, or a user's folder), and its preset is the model's
size. Everything else a run needs (the budget, the learning rate, the seed) is the plan's (:mod:`tasks.study.plan`).

Datasets that need nothing downloaded (:data:`DATASETS`), two per task, at two difficulties or sizes:

* translation: the generated corpus ``easy`` (subject-verb-object) and ``medium`` (clauses, prepositional phrases),
  both at 10,000 training pairs so that only the difficulty differs;
* lm: the embedded Shakespeare plays, read one character a token (``shakespeare-char``) and as 512 byte-level BPE
  ids learnt on the training split (``shakespeare-bpe``): the same text, a harder per-token problem;
* cifar: the embedded Fashion-MNIST subset with 4,500 training images (``fmnist``) and with 2,500
  (``fmnist-2500``: half the images held out for validation).

A user's folder joins with ``--data TASK=PATH`` (a Multi30k-style translation folder, a text corpus, a CIFAR or
Fashion-MNIST folder): it is a dataset named after the folder, read as ``zoo train TASK --data PATH`` reads it.

Presets: a study's presets are scales (:data:`SCALES`): ``tiny`` is each model's tiny preset (32 wide), ``small`` a
CPU-sized second scale 128 wide (translation's ``mini``, the language model's ``small``, ViT's ``cpu``); any other
name is taken as each model's own preset of that name, and a name a model lacks is an error naming the ones it has.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from plumbing.errors import unknown_name
from tasks.engine.registry import task_names
from zoo.changes import MODELS, model_config
from zoo.registry import get_variant

# task -> the key of zoo.changes.MODELS whose model is the task's base in a study
TASK_MODELS: dict[str, str] = {"translation": "translation", "lm": "lm", "cifar": "vit"}
DATASETS: dict[str, dict[str, dict[str, Any]]] = {
    "translation": {"easy": {"difficulty": "easy", "n_train": 10_000},
                    "medium": {"difficulty": "medium", "n_train": 10_000}},
    "lm": {"shakespeare-char": {"tokenizer": "char"}, "shakespeare-bpe": {"tokenizer": "bpe", "vocab_size": 512}},
    "cifar": {"fmnist": {"valid_fraction": 0.1}, "fmnist-2500": {"valid_fraction": 0.5}},
}
# A study's scales -> each task model's preset: `small` is the CPU-sized second scale, 128 wide everywhere
# (translation's mini: 2+2 layers; the language model's small: 4 layers, nanoGPT's; ViT's cpu: 4 layers, patch 4).
SCALES: dict[str, dict[str, str]] = {"translation": {"tiny": "tiny", "small": "mini"},
                                     "lm": {"tiny": "tiny", "small": "small"},
                                     "cifar": {"tiny": "tiny", "small": "cpu"}}
# Epochs of a study's default run per task: a few seconds to a few tens of seconds of training at `tiny` on one core,
# long enough that the base learns (translation ~0.9 BLEU in 3 epochs of `easy`, lm 2.5 nats/char after 1 epoch).
STUDY_EPOCHS: dict[str, int] = {"translation": 3, "lm": 1, "cifar": 5}
# Task settings a study's runs take unless --set says otherwise, each for the time it saves per run. No run draws
# its plots (`figures`: curves.png, cifar's confusion matrix and attention maps, ~1-3 s of a 6 s cifar run; figures,
# not scores: the run's identity is unchanged, tasks.engine.same_run.UNCHANGING); translation scores greedy decoding
# (beam_size 1: its BLEU, not the beam search's; the beam search is the longest part of the final evaluation, and a
# change is read by the same decoder on both sides).
STUDY_SETTINGS: dict[str, dict[str, object]] = {"translation": {"beam_size": 1, "figures": False},
                                               "lm": {"figures": False}, "cifar": {"figures": False}}


@dataclass(frozen=True)
class StudyCell:
    """One (task, dataset, preset) of a study.

    Attributes:
        task: the task (a key of :data:`TASK_MODELS`).
        dataset: the dataset's name (a key of :data:`DATASETS`'s task entry, or a user folder's name).
        preset: the study's preset name; ``model_preset`` the model's own name for it.
        settings: the task config fields the dataset sets (``{"data": PATH}`` for a user's folder).
    """

    task: str
    dataset: str
    preset: str
    model_preset: str
    settings: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @property
    def label(self) -> str:
        return f"{self.task}/{self.dataset}/{self.preset}"

    @property
    def model(self) -> str:
        """The key of :data:`zoo.changes.MODELS` of the task's base model."""
        return TASK_MODELS[self.task]

    @property
    def variant(self) -> str:
        """The registered variant that is the task's base model."""
        return MODELS[self.model][0]

    def base_config(self) -> Any:
        """The task's base model config at this cell's preset, as the task's registration builds it."""
        return model_config(self.model, self.model_preset)


def model_preset(task: str, preset: str) -> str:
    """The preset of ``task``'s base model that the study's ``preset`` names: a scale of :data:`SCALES`, else the
    model's own preset of that name."""
    presets = get_variant(*MODELS[TASK_MODELS[task]]).presets
    name = SCALES[task].get(preset, preset)
    if name not in presets:
        raise unknown_name(f"preset of {task}'s base model (--presets)", preset, presets)
    return name


def check_tasks(tasks: list[str]) -> list[str]:
    """``tasks`` checked: each a registered task a study can run, none twice, at least one."""
    if not tasks:
        raise ValueError("--tasks is empty; name the tasks to study, e.g. --tasks translation,lm,cifar")
    for task in tasks:
        if task not in TASK_MODELS:
            if task in task_names():
                raise ValueError(f"task {task!r} has no base model built on the core's parts that the catalogue of "
                                 f"changes reaches; a study runs on {', '.join(TASK_MODELS)}")
            raise unknown_name("task (--tasks)", task, TASK_MODELS)
    twice = sorted({t for t in tasks if tasks.count(t) > 1})
    if twice:
        raise ValueError(f"--tasks names {', '.join(twice)} twice; name each task once")
    return tasks


def parse_data(items: list[str] | None, tasks: list[str]) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """``--data TASK=PATH`` (repeatable) as each task's user datasets: ``(name, {"data": PATH})``.

    The name is the folder's (or file's) name, made unique within the task. A missing path is a FileNotFoundError,
    a task outside the study a ValueError.
    """
    found: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for item in items or []:
        if "=" not in item:
            raise ValueError(f"--data {item!r}: expected TASK=PATH, e.g. --data translation=data/multi30k")
        task, path = (s.strip() for s in item.split("=", 1))
        if task not in tasks:
            raise ValueError(f"--data {item!r}: {task!r} is not one of the study's tasks ({', '.join(tasks)}); add "
                             "it to --tasks")
        if not Path(path).exists():
            raise FileNotFoundError(f"--data {item!r}: {path} does not exist; pass a dataset folder or file")
        names = {n for n, _ in found.get(task, [])} | set(DATASETS[task])
        name = base = Path(path).name or "data"
        k = 2
        while name in names:
            name, k = f"{base}-{k}", k + 1
        found.setdefault(task, []).append((name, {"data": str(Path(path).resolve())}))
    return found


def study_cells(tasks: list[str], presets: list[str], datasets: str = "embedded",
                data: list[str] | None = None) -> list[StudyCell]:
    """Every cell of a study: each task × each of its datasets × each preset, in that order.

    Args:
        tasks: the tasks (:func:`check_tasks`).
        presets: the study's preset names (:func:`model_preset` maps them per task).
        datasets: ``"embedded"`` (both embedded datasets of each task), ``"first"`` (the first one only) or
            ``"none"`` (only the ``data`` folders).
        data: ``TASK=PATH`` items (:func:`parse_data`).
    """
    tasks = check_tasks(list(tasks))
    if not presets:
        raise ValueError("--presets is empty; name the sizes, e.g. --presets tiny,small")
    if datasets not in ("embedded", "first", "none"):
        raise unknown_name("--datasets choice", datasets, ("embedded", "first", "none"))
    user = parse_data(data, tasks)
    cells = []
    for task in tasks:
        embedded = list(DATASETS[task].items())
        chosen = {"embedded": embedded, "first": embedded[:1], "none": []}[datasets] + user.get(task, [])
        if not chosen:
            raise ValueError(f"task {task} has no dataset: --datasets none needs --data {task}=PATH")
        sizes = [(p, model_preset(task, p)) for p in presets]
        cells += [StudyCell(task, name, p, mp, settings) for name, settings in chosen for p, mp in sizes]
    return cells
