"""The interface between a task (data, model, loss, metrics) and the shared training loop."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from plumbing.errors import unknown_name
from tasks.engine.config import TrainConfig, config_from_dict
from tasks.engine.distributed import DistInfo
from tasks.engine.paired_metric import PairedMetric
from zoo.analysis.delta import TaskShape

if TYPE_CHECKING:  # annotations only
    from zoo.analysis.doctor import Batch
    from zoo.registry import Variant


class Task:
    """A task runner plugs into :class:`tasks.engine.trainer.Trainer` by implementing these hooks.

    Batches are described by *rows* (e.g. example indices): ``train_batches`` must return the same
    global batches on every rank for a given epoch, so that distributed ranks can each take a shard.
    """

    name: str = ""
    config_class: type[TrainConfig] = TrainConfig
    main_metric: str = ""
    higher_is_better: bool = True
    baseline: str = "classic"  # the variant every other is compared with
    headline: tuple[str, str] = ("test", "")  # (split, metric) in the final results that ranks variants
    extra_columns: tuple[tuple[str, str, str], ...] = ()  # (split, metric, column title) also shown
    eval_splits: tuple[str, ...] = ("test",)  # splits `zoo evaluate --split` accepts; the default is the first
    preset: str | None = None  # the preset build_model resolved (None: the variant's own default, or a reference model)
    # --variant names that are not zoo variants (e.g. a CNN baseline): name -> builder; no delta analysis
    cost_note: str = ""  # what "one input" of the comparisons' GFLOPs column is, when the task's models differ in it
    reference_models: dict[str, Callable[..., nn.Module]] = {}

    # What the generic commands ask of a task, so that none of them names a task:
    delta_shape: TaskShape | None = None  # the input `zoo diff` / `zoo check` measure models at (and its preset)
    dynamic_shapes: bool = False  # batches change shape from step to step: torch.compile marks them dynamic
    predict_options: tuple[str, ...] = ()  # `zoo predict` options (argparse dests) only this task takes

    @classmethod
    def paired_metrics(cls, info: dict[str, Any]) -> list[PairedMetric]:
        """The metrics `zoo compare` tests example by example (:mod:`tasks.compare.paired`), for runs whose
        run.json is ``info``; the first is the headline. A task without them cannot be compared."""
        raise ValueError(f"task {cls.name!r} declares no paired metrics (Task.paired_metrics), so its runs cannot "
                         "be compared example by example")

    @classmethod
    def score_folders(cls, pred: str, labels: str, dataset_json: str | None, chill: bool,
                      out: str | None, nsd_tolerance: float | None = None) -> list[str]:
        """``zoo evaluate TASK --pred DIR --labels DIR``: score two folders of predictions without a run; the
        summary lines. Only tasks whose predictions are files offer it."""
        raise ValueError(f"task {cls.name!r} does not score folders of predictions; give a run folder: "
                         "`zoo evaluate RUN`")

    @classmethod
    def predict_inputs(cls, run: Any, inputs: list[str], out: str | None, progress: bool = True,
                       **options: Any) -> str:
        """``zoo predict RUN INPUTS``: read ``inputs`` (files, folders; none: standard input), convert them exactly
        as the training data was, predict with ``run`` (a :class:`tasks.runs.run.Run` of this task) and write
        the outputs to ``out``; returns the summary line. ``options`` are the ``predict_options`` given (and
        ``batch_size``, ``members`` for an ensemble). A task that cannot predict new inputs keeps this refusal."""
        raise ValueError(f"task {cls.name!r} cannot predict new inputs (it defines no Task.predict_inputs); "
                         f"`zoo evaluate {run.path}` re-scores the run on its own data")

    @classmethod
    def add_arguments(cls, command: str, parser: Any) -> None:
        """Add this task's own options to ``zoo predict`` or ``zoo evaluate`` (``command``) with
        ``parser.add_argument`` (argparse's signature; a flag whose dest the command already has is kept once).
        ``zoo predict`` hands an option to :meth:`predict_inputs` when its dest is in ``predict_options``;
        ``zoo evaluate`` sets the run's config field of that dest for the call (refused for runs whose config
        lacks it). The default adds none."""

    @classmethod
    def cross_validate(cls, config: TrainConfig, launch: Any = None) -> tuple[dict[str, Any], list[str]]:
        """``zoo cv TASK`` and sweeps of kind cv: train every fold of ``config`` (one sweep, run by ``launch``, a
        :class:`tasks.sweeps.launchers.Launch`: the runs and the sweeps sit above the engine, so neither type is
        imported here, not even for annotations) and summarise them; returns the summary and its lines. Only tasks
        with folds override it (:func:`tasks.engine.registry.tasks_with` names them)."""
        raise ValueError(f"task {cls.name!r} has no cross-validation: its runner does not override "
                         "Task.cross_validate (`zoo cv --help` lists the tasks that do)")

    def __init__(self, config: TrainConfig, device: torch.device, dist: DistInfo) -> None:
        self.config, self.device, self.dist = config, device, dist

    @property
    def variant(self) -> Variant | None:
        """The registration of ``--variant`` for this task, looked up once per run and then passed down (the model,
        ``--init-from``, the comparisons' costs read it here); ``None`` for one of the task's ``reference_models``.

        Raises:
            ValueError: an unknown name ("did you mean" among this task's variants and reference models), or a
                variant of another task.
        """
        if "_variant" not in self.__dict__:
            self._variant = self.resolve_variant(self.config.variant)
        return self._variant

    @classmethod
    def resolve_variant(cls, name: str) -> Variant | None:
        """The registration of variant ``name`` for this task (``None``: a reference model). A run calls it once, for
        :attr:`variant`; a sweep once per variant, before any training (:func:`tasks.compare.sweep.compare`)."""
        from zoo import registry

        if name in cls.reference_models:
            return None
        try:
            return registry.get_variant(name, cls.name)
        except ValueError:
            if name in registry.list_variants():  # a variant of another task: get_variant's error says so
                raise
            raise unknown_name("variant", name, [*registry.list_variants(cls.name), *cls.reference_models]) from None

    # --- setup ---------------------------------------------------------------------------------
    def setup(self) -> None:
        """Load or generate the data and whatever the model depends on (tokenizer, classes...)."""

    def build_model(self) -> nn.Module:
        raise NotImplementedError

    def decided_overrides(self, decided: dict[str, Any], source: str) -> dict[str, Any]:
        """``--model-set`` fields plus the config fields ``source`` decides (the data's channels, classes...).

        A ``--model-set`` value that contradicts a decided one is refused rather than silently overridden.
        """
        model = self.config.model
        for key, value in decided.items():
            if key in model and model[key] != value:
                raise ValueError(f"--model-set {key}={model[key]} conflicts with {source}, which sets {key}={value}; "
                                 "remove it, the task sets it")
        return {**model, **decided}

    def build_variant(self, overrides: dict[str, Any], *reference_args: Any) -> nn.Module:
        """The ``--variant`` model: a reference model built from ``reference_args``, or the zoo variant's
        config with ``overrides`` at ``--preset`` (default: the preset the delta analysis measures for this
        task, else the variant's own). Sets ``self.model_config`` for zoo variants.
        """
        c, variant = self.config, self.variant
        if variant is None:
            if c.model:
                raise ValueError(f"the reference model {c.variant!r} takes no --model-set overrides, got {c.model}")
            return self.reference_models[c.variant](*reference_args)
        preset, shape = c.preset, self.delta_shape
        if preset is None and shape is not None and shape.preset in variant.presets:
            preset = shape.preset
        self.preset = preset
        self.model_config = variant.config(preset, **overrides)
        return variant.build(self.model_config)

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        c = self.config
        return torch.optim.AdamW(model.parameters(), lr=c.lr, weight_decay=c.weight_decay)

    def make_scheduler(self, optimizer: torch.optim.Optimizer, total_steps: int):
        raise NotImplementedError

    # --- training ------------------------------------------------------------------------------
    def train_batches(self, epoch: int) -> list[Sequence[Any]]:
        """The global batches of ``epoch`` (deterministic from the seed and the epoch)."""
        raise NotImplementedError

    def shuffled_batches(self, n: int, epoch: int, min_last: int) -> list[list[tuple[int, int]]]:
        """Rows ``(item index, epoch)`` of ``n`` items, shuffled from (seed, epoch) and cut into ``batch_size``
        batches; a last batch smaller than ``min_last`` is dropped. The epoch in each row keys the item's
        augmentation, so a resumed or distributed run sees the same items as an uninterrupted one."""
        gen = torch.Generator().manual_seed(self.config.seed * 100_003 + epoch)
        order = torch.randperm(n, generator=gen).tolist()
        size = self.config.batch_size
        batches = [[(i, epoch) for i in order[j : j + size]] for j in range(0, len(order), size)]
        if len(batches) > 1 and len(batches[-1]) < min_last:
            batches.pop()
        return batches

    def loss(self, model: nn.Module, rows: Sequence[Any]) -> tuple[Tensor, float]:
        """Summed loss over the rows' items and the number of items (tokens, images, pixels)."""
        raise NotImplementedError

    # --- evaluation ----------------------------------------------------------------------------
    def evaluate(self, model: nn.Module, split: str) -> list[Any]:
        """Per-example records for this rank's shard of ``split`` (gathered across ranks by the loop)."""
        raise NotImplementedError

    def score(self, records: list[Any], split: str) -> dict[str, float]:
        """Metrics from all records of a split; must contain ``main_metric``."""
        raise NotImplementedError

    def data_hash(self, split: str) -> str | None:
        """The SHA-256 (:func:`tasks.runs.records.split_hash`) of the examples ``split`` scores, after
        :meth:`setup`; ``"valid"`` is what validation reads (the test split's hash when a task validates on test).
        ``None``: the task does not say (a comparison then cannot check what was scored)."""
        return None

    def final_report(self, model: nn.Module, out_dir, splits: Sequence[str] | None = None
                     ) -> tuple[dict[str, Any], str]:
        """Test-time evaluation after training (and by ``zoo evaluate``) of ``splits`` (default: the task's test
        splits): (metrics, markdown section for report.md). Writes ``predictions/<split>.jsonl`` under ``out_dir``
        (see :mod:`tasks.runs.records`)."""
        return {}, ""

    def doctor_batch(self, split: str = "valid", n: int = 64) -> Batch | None:
        """The first ``n`` examples of ``split`` as the model takes them, for the doctor's examination (after
        ``setup``); None: the doctor does not examine this task's models (its training-curve check still runs)."""
        return None

    def onnx_graphs(self, model: nn.Module, n: int = 8) -> list:
        """The graphs ``zoo export --format onnx`` writes (:class:`tasks.engine.export_graphs.Graph`), with ``n``
        real examples of the test data as the model takes them (after ``setup``)."""
        raise ValueError(f"the {self.name} task does not export to ONNX (cifar, medseg and translation runs do)")

    def target_entropy(self, n: int = 5000) -> float | None:
        """Entropy (nats) of the training targets' frequencies: the loss of a model that reads nothing, where a
        stuck run sits (the doctor's plateau check). None when the task has no such figure."""
        return None

    def delta_overrides(self) -> dict[str, Any]:
        """Config overrides that make the delta analysis measure the model exactly as trained."""
        return dict(self.config.model)

    def save_artifacts(self, out_dir) -> None:
        """Files the run needs besides the checkpoint (a tokenizer, class names...)."""

    # --- using a finished run (see tasks.runs.run) --------------------------------------------------------
    def preprocessing(self) -> dict[str, Any]:
        """What inference needs besides the weights, as JSON (run.json): how inputs were encoded or normalised,
        the classes, the artefact files (names relative to the run folder). Called after ``setup``."""
        return {}

    def artifact_files(self) -> list[str]:
        """Files of the run folder that :meth:`restore` reads (copied by ``zoo export``)."""
        return []

    def restore(self, preprocessing: dict[str, Any], run_dir) -> None:
        """Set what ``setup`` would fit on the training data from a saved run's ``preprocessing``, so that the
        run's model can be rebuilt and used without its training data; a later ``setup()`` (to evaluate on
        data) reads the data but keeps this preprocessing."""
        self.restored = dict(preprocessing)

    restored: dict[str, Any] | None = None  # the saved preprocessing, once restore() ran

    def reference_args(self) -> tuple:
        """The arguments of a reference model's builder (``reference_models``), from the preprocessing."""
        return ()

    def build_saved_model(self, variant: str, variant_config: dict[str, Any] | None) -> nn.Module:
        """The model a run describes: a reference model from :meth:`reference_args`, or the zoo variant from its
        saved full config (not from presets: the presets may have changed since). Sets ``self.model_config``."""
        if self._saved(variant) is None:
            return self.reference_models[variant](*self.reference_args())
        return self.variant.build(self.restore_model_config(variant, variant_config))

    def restore_model_config(self, variant: str, variant_config: dict[str, Any] | None) -> Any:
        """Set and return ``self.model_config`` from a run's saved variant config, without building the model
        (an ONNX export runs without it)."""
        registration = self._saved(variant)
        if variant_config is None or registration is None:
            raise ValueError(f"run.json holds no config of variant {variant!r}; it cannot be rebuilt")
        self.model_config = config_from_dict(registration.config_class, variant_config)
        return self.model_config

    def _saved(self, variant: str) -> Variant | None:
        """:attr:`variant`, checked against the name run.json records beside the config (the two agree in every
        folder this package writes: :func:`tasks.runs.run.run_info` takes both from the config)."""
        if variant != self.config.variant:
            raise ValueError(f"run.json names the variant {variant!r} but its config says {self.config.variant!r}; "
                             "the run folder was edited by hand: make the two agree")
        return self.variant
