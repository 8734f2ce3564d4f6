"""``zoo check VARIANT``: the conformance suite — is the variant a fair patch on the classic model?

For every task of the variant, at the preset ``zoo train`` trains (the registration's ``default_preset``; the
ones asked for, or every one with ``--preset all``), one row per check, each with the measured number and, when it
fails, the reason (and the presets left unchecked, their sizes, and the command that checks them):

* ``build`` — the config validates and the model builds; ``forward`` — finite outputs on the task's example
  input (:attr:`zoo.registry.Variant.example_input` at the task's size, batch 2); ``backward`` — every
  parameter gets a finite gradient (from a random projection of the outputs plus any auxiliary losses);
* ``changes`` — the declared changed parts equal the measured ones: the parts whose module types or parameter
  counts differ from the classic counterpart (:mod:`zoo.analysis.counterpart`: the model the variant builds on, at the
  same preset, with every change reverted), as ``zoo diff`` measures them; every config field where the
  variant with every change reverted still differs from that counterpart (sizes, choices, values inside
  option dicts) is a failure naming the field, both values and the fix; and a builder of the variant's own
  must build, from the classic config, the modules the builder of the model it patches builds;
* ``revert NAME`` — one per change (not applicable to a change declared with ``no_revert``, which says why it has no
  revert): reverting it alone moves its part (it is not a no-op), alters the module
  types or parameters of no part outside those it declares (its own, and those it ``resizes`` or is
  ``also_in``), and brings back the classic counterpart's own module types at its part (sizes may differ
  where other changes set them; a part changed twice is reverted whole). A change of the ``objective`` or
  ``decoding`` part (:data:`PROCEDURES`: a loss, a generation procedure) need not show in the modules: its
  revert must move a config field, and no module outside the parts it declares;
* decoders (:func:`zoo.analysis.probes.is_autoregressive`): ``causal (train)`` / ``causal (eval)`` — later target
  tokens, changed or padded, leave earlier outputs bit-identical; ``padding`` — appended pads move no real
  position; ``batch (eval)`` — a sequence is bit-identical beside others of its shape, and equal to rounding
  alone or beside longer ones; ``kv cache`` — cached decoding equals full recomputation (teacher-forced logits,
  and the logits of greedy and beam search decoding past every block, steered by the cache and each step's
  prefixes recomputed: :mod:`tasks.plugins.check_decoding`; scores, not tokens, so that a near-tie rounding
  decides either way fails nothing). Every decoder probe runs at several lengths
  (:func:`zoo.analysis.probes.probe_lengths`: short, just past every block the model works in — a kernel's chunk, the KV
  cache's first buffer, a block of expert rows — and the longest the model accepts), the causal ones perturbed
  after points spread over the sequence and either side of each block boundary. Decoder-only language models
  (:func:`tasks.plugins.check_decoding.is_decoder_only`) get the same rows but ``padding`` (every position is a real
  token), the ``kv cache`` row feeding their own cache as generation does
  (:func:`~tasks.plugins.check_decoding.stepwise_drift`). Other models get ``batch (eval)``: an input alone and in
  a batch;
* ``save/load`` — the weights written as ``zoo export`` writes them (safetensors) and as ``zoo train``
  checkpoints them (a ``weights_only`` state dict) and loaded into a model built from another seed give
  bit-identical outputs;
* ``seed`` — two builds from one seed give bit-identical outputs, and a training-mode forward repeats
  under one seed; ``accounting`` — parameters per part add up to the model's, the meta-device build that
  ``zoo list`` counts agrees with the real one, and FLOPs per part add up to the measured total.

Models are built with every dropout-like rate at 0 (:func:`zoo.analysis.probes.quiet_overrides`), so that training
mode is deterministic. Exactness: where two computations have the same shapes they must be bit-identical;
where the batch or the padded length differs, matmul kernels may round differently, so they must agree
within :data:`RTOL` of the largest output (float32 rounding, the policy of ``tests/core/test_decoder_causality.py``).
"""

from __future__ import annotations

import dataclasses
import logging
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from core.parts import PARTS, parameters_by_part
from core.sidechannels import AuxiliaryLosses, active_parameters
from plumbing.errors import unknown_name
from tasks.engine.registry import task_shape
from tasks.plugins.check_decoding import is_decoder_only, lockstep_drift, stepwise_drift
from tasks.plugins.check_structure import anatomy, anatomy_of, build, describe, differs, types_text
from zoo.analysis import probes
from zoo.analysis.counterpart import counterpart
from zoo.analysis.delta import flops_by_part, module_flops
from zoo.analysis.doctor.leaks import prefix_leak
from zoo.registry import Change, Variant, get_variant, tasks_of

# Parts a change can make without a module of its own (a loss, a generation procedure): their changes move the
# config, and are not expected to show in the module types (the revert row checks their fields instead).
PROCEDURES = ("objective", "decoding")
log = logging.getLogger(__name__)
RTOL = 1e-5  # float32 rounding, relative to the largest output (at least 1)
EXAMPLE_BATCH = 2


@dataclass
class Row:
    """One check of one preset: ``ok`` is ``None`` when the check does not apply to the model."""

    preset: str
    check: str
    ok: bool | None
    measured: str = ""
    reason: str = ""

    @property
    def result(self) -> str:
        return "n/a" if self.ok is None else "PASS" if self.ok else "FAIL"


@dataclass
class Report:
    """The rows of one registration over the presets checked, and ``unchecked``: its other presets with
    their parameters (``None`` where a preset does not build on the meta device), the scale of their cost."""

    variant: str
    task: str
    rows: list[Row]
    seconds: float
    unchecked: dict[str, int | None] = dataclasses.field(default_factory=dict)

    @property
    def failed(self) -> list[Row]:
        return [r for r in self.rows if r.ok is False]

    @property
    def applied(self) -> list[Row]:
        """The checks that apply to the model (not n/a)."""
        return [r for r in self.rows if r.ok is not None]

    def row(self, check: str, preset: str | None = None) -> Row:
        """The row of ``check`` (of ``preset``, default: the first preset checked)."""
        for r in self.rows:
            if r.check == check and (preset is None or r.preset == preset):
                return r
        raise unknown_name("check", check, sorted({r.check for r in self.rows}))


def _slice(inputs: tuple, n: int) -> tuple:
    return tuple(x[:n] if isinstance(x, Tensor) else x for x in inputs)


def _same(a: Tensor, b: Tensor) -> tuple[bool, float]:
    drift = (a.float() - b.float()).abs().max().item() if a.shape == b.shape else float("inf")
    return a.shape == b.shape and torch.equal(a, b), drift


def _close(drift: probes.Drift) -> bool:
    return drift.max_abs <= RTOL * max(drift.magnitude, 1.0)


class _Preset:
    """The checks of one preset of one registration; each method returns its rows."""

    def __init__(self, variant: Variant, task: str, preset: str) -> None:
        self.variant, self.task, self.preset = variant, task, preset
        spec = task_shape(task)
        self.fixed = {**spec.config_overrides(spec.shape), **probes.quiet_overrides(variant)}
        self.config = variant.config(preset, **self.fixed)
        self.inputs = variant.example_input(self.config, {**spec.for_config(self.config), "batch": EXAMPLE_BATCH})
        self.model = build(variant, self.config)

    def row(self, check: str, ok: bool | None, measured: str = "", reason: str = "") -> Row:
        return Row(self.preset, check, ok, measured, "" if ok or ok is None else reason)

    def outputs(self, model: nn.Module, training: bool = False, inputs: tuple | None = None) -> Tensor:
        model.train(training)
        torch.manual_seed(0)
        with torch.no_grad():
            return model(*(self.inputs if inputs is None else inputs))

    def config_with(self, overrides: dict[str, Any]) -> Any:
        return self.variant.config(self.preset, **{**self.fixed, **overrides})

    # ------------------------------------------------------------------------- build, forward, backward

    def forward_backward(self) -> list[Row]:
        n_params = sum(p.numel() for p in self.model.parameters())
        rows = [self.row("build", True, f"{n_params:,} parameters")]
        self.fresh_eval = self.outputs(self.model)  # before any training-mode forward moves running statistics
        self.model.train()
        out = self.model(*self.inputs)
        if not isinstance(out, Tensor) or not out.is_floating_point():
            return rows + [self.row("forward", False, type(out).__name__, "the model must return a float tensor")]
        finite = bool(torch.isfinite(out).all())
        rows.append(self.row("forward", finite, f"{tuple(out.shape)}, max |y| {out.abs().max().item():.3g}",
                             "non-finite outputs (NaN or inf)"))
        weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(0))
        loss = (out.float() * weights).sum()
        for module in self.model.modules():  # routers whose only gradient is an auxiliary loss
            if isinstance(module, AuxiliaryLosses) and module.auxiliary_losses():
                loss = loss + sum(module.auxiliary_losses().values())
        loss.backward()
        params = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]
        missing = [n for n, p in params if p.grad is None]
        bad = [n for n, p in params if p.grad is not None and not torch.isfinite(p.grad).all()]
        self.model.zero_grad(set_to_none=True)
        reason = (f"no gradient reaches {len(missing)} parameter(s): {', '.join(missing[:3])}" if missing else
                  f"non-finite gradients in {', '.join(bad[:3])}")
        rows.append(self.row("backward", not missing and not bad,
                             f"{len(params) - len(missing)}/{len(params)} parameter tensors get one", reason))
        return rows

    # ------------------------------------------------------------------------------- declared changes

    def changes(self) -> list[Row]:
        """The declared parts against those measured to differ from the classic counterpart (the model the
        variant builds on, at this preset: :func:`zoo.analysis.counterpart.counterpart`), and every config field where
        the two differ although no change reverts it; then one ``revert`` row per change."""
        variant = self.variant
        if variant.changes and not any(c.revertible for c in variant.changes):
            # with no change to revert, the counterpart is the variant itself: a PASS would measure nothing
            why = "; ".join(dict.fromkeys(c.no_revert for c in variant.changes))
            return [self.row("changes", None, f"not measurable: no change can be reverted ({why})"),
                    *(self.revert(change) for change in variant.changes)]
        reference = counterpart(variant, self.task, self.preset, self.fixed)
        self.mine = anatomy_of(variant, self.config)
        self.classic = anatomy_of(variant, reference.reverted)  # what the revert rows must bring back
        theirs = anatomy_of(reference.registration, reference.config)
        measured = [p for p in PARTS if differs(theirs, self.mine, p)]
        problems = [difference.message for difference in reference.differences]
        by_builder: list[str] = []
        if reference.base is not None and reference.base.build is not variant.build:
            # a builder of its own must build the base's model from the classic config
            base = reference.base
            built = anatomy_of(base, reference.reverted)
            by_builder = [p for p in PARTS if built.types[p] != self.classic.types[p]]
            builder = getattr(variant.build, "__qualname__", repr(variant.build))
            problems += [f"undeclared change at {describe(built, self.classic, p)}, made by the builder {builder} "
                         f"(from the classic config, {base.name}'s builder builds the former)" for p in by_builder]
        reached = {p for c in variant.changes for p in c.parts}
        problems += [f"undeclared change at {describe(theirs, self.mine, p)}" for p in measured
                     if p not in reached and p not in by_builder]
        unmeasurable = {c.part for c in variant.changes if not c.revertible} - {
            c.part for c in variant.changes if c.revertible}  # parts whose every change has no revert
        problems += [f"{p} is declared but measures the same as the classic counterpart"
                     for p in variant.parts_changed if p not in measured and p not in PROCEDURES
                     and p not in unmeasurable]
        text = "; ".join(filter(None, [", ".join(measured) or "none", reference.note]))
        rows = [self.row("changes", not problems, text, "; ".join(problems))]
        return rows + [self.revert(change) for change in variant.changes]

    def revert(self, change: Change) -> Row:
        """Revert ``change`` alone: it must move its part, alter nothing outside the parts it declares, and
        (with the other changes of its part) bring back the classic model's own module types there."""
        check = f"revert {change.name}"
        if not change.revertible:
            return self.row(check, None, f"not revertible: {change.no_revert}")
        if not change.revert:
            return self.row(check, False, "no revert", "the change declares no revert overrides")
        reverted = self.config_with(change.revert)
        alone = anatomy_of(self.variant, reverted)
        moved = [p for p in PARTS if differs(self.mine, alone, p)]
        measured = f"moves {', '.join(moved) or 'nothing'}"
        if change.part in PROCEDURES:  # a loss or a generation procedure: it moves the config, not the modules
            before, after = dataclasses.asdict(self.config), dataclasses.asdict(reverted)
            moved_fields = [f"{k}: {before[k]!r} → {after[k]!r}" for k in change.revert if before[k] != after[k]]
            outside = [p for p in moved if p not in change.parts]
            measured = f"{'; '.join(moved_fields) or 'no field moves'}, {measured} among the modules"
            return self.row(check, bool(moved_fields) and not outside, measured, (
                f"{change.revert} already holds in the variant's config: it reverts nothing" if not moved_fields else
                f"{change.revert} also changes " + "; ".join(describe(self.mine, alone, p) for p in outside)))
        if change.part not in moved:
            return self.row(check, False, measured, f"{change.revert} leaves the variant's modules at {change.part} "
                            f"in place ({types_text(self.mine.types[change.part])})")
        outside = [p for p in moved if p not in change.parts]
        if outside:
            return self.row(check, False, measured, f"{change.revert} also changes "
                            + "; ".join(describe(self.mine, alone, p) for p in outside)
                            + " (declare it in the change's resizes= or also_in=, or revert less)")
        together = alone
        same_part = [c for c in self.variant.changes if c.part == change.part]
        if len(same_part) > 1:  # one part changed twice (MISSFormer's hierarchy and bridge): revert both
            reverts = {k: v for c in same_part for k, v in c.revert.items()}
            together = anatomy_of(self.variant, self.config_with(reverts))
        restored = together.own[change.part] == self.classic.own[change.part]
        return self.row(check, restored, measured, f"{change.revert} does not bring back the classic modules: "
                        + describe(self.classic, together, change.part, own=True))

    # ---------------------------------------------------------------------------- behaviour probes

    def decoder(self) -> list[Row]:
        model = self.model
        if is_decoder_only(model):
            return self.decoder_only()
        if not probes.is_autoregressive(model):
            with torch.no_grad():
                batch = self.outputs(model, inputs=_slice(self.inputs, 1))
                drift = probes.Drift((self.outputs(model)[:1] - batch).abs().max().item(), batch.abs().max().item())
            return [self.row("causal / kv cache", None, "no autoregressive decoder"),
                    self.row("batch (eval)", _close(drift), f"alone vs in a batch: {drift.max_abs:.2g}",
                             f"an input's output depends on its batch (drift {drift.max_abs:.3g})")]
        lengths, blocks = probes.probe_lengths(model), probes.block_sizes(model)
        batches = {n: probes.probe_batch(model, src_len=n, tgt_len=n, seed=n) for n in lengths}
        at = f"lengths {', '.join(map(str, lengths))}"
        rows = []
        for training in (True, False):
            model.train(training)
            leak, where = max(((probes.causal_leak(model, src, tgt, t, replacement).max_abs, f"length {n}, after {t}")
                               for n, (src, tgt) in batches.items() for t in probes.perturbation_points(n, blocks)
                               for replacement in (None, model.config.pad_id)), key=lambda x: x[0])
            rows.append(self.row(f"causal ({'train' if training else 'eval'})", leak == 0.0,
                                 f"{at}: max drift {leak:.3g}", f"earlier outputs move when later target tokens "
                                 f"change: by {leak:.3g} at {where} (changed tokens)"))
        model.eval()
        pad, where = max(((probes.padding_leak(model, src, tgt, extra=probes.PAD_EXTRA), f"length {n}")
                          for n, (src, tgt) in batches.items()), key=lambda x: x[0].relative)
        rows.append(self.row("padding", _close(pad), f"{at}: max drift {pad.max_abs:.2g}",
                             f"appended padding moves real positions by {pad.max_abs:.3g} at {where}"))
        same, alone = [], []
        for n, (src, tgt) in batches.items():
            others_src, others_tgt = probes.probe_batch(model, rows=4, src_len=n, tgt_len=n, seed=n + 1)
            longer = min(n + probes.PAD_EXTRA, model.config.max_len)
            longer_src, longer_tgt = probes.probe_batch(model, rows=2, src_len=longer, tgt_len=longer, seed=n + 2)
            same.append((probes.batch_leak(model, src, tgt, others_src[:2], others_tgt[:2]), f"length {n}"))
            alone += [(probes.batch_leak(model, src[:1], tgt[:1], s, t), f"length {n}")
                      for s, t in ((others_src, others_tgt), (longer_src, longer_tgt))]
        (same_worst, same_at), (worst, worst_at) = (max(x, key=lambda d: d[0].relative) for x in (same, alone))
        rows.append(self.row("batch (eval)", same_worst.max_abs == 0.0 and all(_close(d) for d, _ in alone),
                             f"{at}: same shape {same_worst.max_abs:.2g}, alone {worst.max_abs:.2g}",
                             f"a sequence depends on its batch (same shape: {same_worst.max_abs:.3g} at {same_at}, "
                             f"alone: {worst.max_abs:.3g} at {worst_at})"))
        cache, where = max(((probes.cache_drift(model, src, tgt), f"length {n}") for n, (src, tgt) in batches.items()),
                           key=lambda x: x[0].relative)
        steps = min(max([10, *blocks]) + 4, lengths[-1])  # greedy and beam decoding past every block
        src = batches[lengths[0]][0]
        # scores, not tokens: a near-tie may go either way under rounding (tasks.plugins.check_decoding)
        greedy, beam = (lockstep_drift(model, src, beam_size, max_len=steps) for beam_size in (None, 3))
        rows.append(self.row("kv cache", _close(cache) and _close(greedy) and _close(beam),
                             f"{at}: logits {cache.max_abs:.2g}; {steps} decoding steps: logits {greedy.max_abs:.2g} "
                             f"greedy / {beam.max_abs:.2g} beam",
                             f"cached decoding differs from recomputation (logits by {cache.max_abs:.3g} at {where}, "
                             f"by {greedy.max_abs:.3g} greedy and {beam.max_abs:.3g} beam in {steps} decoding steps; "
                             f"tolerance {RTOL:g} of the largest logit)"))
        return rows

    def decoder_only(self) -> list[Row]:
        """The decoder probes on a decoder-only language model (:func:`tasks.plugins.check_decoding.is_decoder_only`):
        ``causal`` — later ids, changed, leave earlier logits bit-identical; ``batch (eval)`` — a sequence is
        bit-identical beside others of its shape and equal to rounding alone; ``kv cache`` — logits fed through the
        model's cache as generation feeds it equal one full call's to rounding. At the lengths and points the
        encoder-decoder probes use; every position is a real token, so there is no padding row."""
        model = self.model
        lengths, blocks = probes.probe_lengths(model), probes.block_sizes(model)
        gen = torch.Generator().manual_seed(0)
        batches = {n: torch.randint(0, model.config.vocab_size, (3, n), generator=gen) for n in lengths}
        at = f"lengths {', '.join(map(str, lengths))}"
        rows = []
        for training in (True, False):
            model.train(training)
            leak, where = max(((prefix_leak(model, ids, t).max_abs, f"length {n}, after {t}")
                               for n, ids in batches.items() for t in probes.perturbation_points(n, blocks)),
                              key=lambda x: x[0])
            rows.append(self.row(f"causal ({'train' if training else 'eval'})", leak == 0.0,
                                 f"{at}: max drift {leak:.3g}", f"earlier outputs move when later ids change: by "
                                 f"{leak:.3g} at {where}"))
        model.eval()
        with torch.no_grad():
            together = {n: model(ids) for n, ids in batches.items()}
            others = {n: model(torch.cat((ids[:1], ids[1:].flip(0)))) for n, ids in batches.items()}
            same = max((others[n][0] - together[n][0]).abs().max().item() for n in batches)
            alone = max((probes.Drift((model(ids[:1])[0] - together[n][0]).abs().max().item(),
                                      together[n][0].abs().max().item()) for n, ids in batches.items()),
                        key=lambda d: d.relative)
        rows.append(self.row("batch (eval)", same == 0.0 and _close(alone), f"{at}: same shape {same:.2g}, alone "
                             f"{alone.max_abs:.2g}", f"a sequence depends on its batch (same shape: {same:.3g}, "
                             f"alone: {alone.max_abs:.3g})"))
        cache, where = max(((stepwise_drift(model, ids), f"length {n}") for n, ids in batches.items()),
                           key=lambda x: x[0].relative)
        rows.append(self.row("kv cache", _close(cache), f"{at}: logits {cache.max_abs:.2g}",
                             f"cached decoding differs from recomputation (logits by {cache.max_abs:.3g} at {where}; "
                             f"tolerance {RTOL:g} of the largest logit)"))
        return rows

    # ------------------------------------------------------------------------------ persistence

    def save_load(self) -> list[Row]:
        from safetensors.torch import save_model

        from tasks.engine.checkpoint import save_checkpoint
        from tasks.runs.run import WEIGHTS_FILE, load_weights

        reference = self.outputs(self.model)
        other = build(self.variant, self.config, seed=1)
        initial = {k: v.clone() for k, v in other.state_dict().items()}
        drifts = {}
        with tempfile.TemporaryDirectory() as tmp:
            save_model(self.model, str(Path(tmp) / WEIGHTS_FILE))
            save_checkpoint(Path(tmp) / "best.pt", {"task": self.task, "config": {}, "model": self.model.state_dict()})
            for label, file in (("safetensors", WEIGHTS_FILE), ("state dict", "best.pt")):
                other.load_state_dict(initial)
                load_weights(other, Path(tmp) / file, self.task)
                drifts[label] = _same(self.outputs(other), reference)
        measured = ", ".join(f"{k} {d:.2g}" for k, (_, d) in drifts.items())
        broken = [k for k, (ok, _) in drifts.items() if not ok]
        return [self.row("save/load", not broken, measured, f"outputs after a {' and a '.join(broken)} round trip "
                         "differ: state the module keeps outside its state dict (a plain tensor attribute, a "
                         "non-persistent buffer drawn at random)?")]

    def seed(self) -> list[Row]:
        twin = build(self.variant, self.config, seed=0)
        same_build, drift = _same(self.outputs(twin), self.fresh_eval)
        train_a, train_b = self.outputs(twin, training=True), self.outputs(twin, training=True)
        same_train, train_drift = _same(train_a, train_b)
        return [self.row("seed", same_build and same_train, f"two builds {drift:.2g}, two train forwards "
                         f"{train_drift:.2g}", "the same seed gives other outputs: " + (
                             "two builds differ" if not same_build else "training-mode forwards differ"))]

    def accounting(self) -> list[Row]:
        by_part = parameters_by_part(self.model)
        total = sum(p.numel() for p in self.model.parameters())
        real = anatomy(self.model)
        try:
            meta = anatomy(build(self.variant, self.config, meta=True))
        except Exception as error:
            meta = None
            meta_error = f"{type(error).__name__}: {error}".splitlines()[0]
        _, flop_total = module_flops(self.model, self.inputs)
        flops = flops_by_part(self.model, self.inputs)
        problems = []
        if sum(by_part.values()) != total:
            problems.append(f"parameters per part sum to {sum(by_part.values()):,}, the model has {total:,}")
        if meta is None:
            problems.append(f"the model does not build on the meta device, where zoo list counts it ({meta_error})")
        elif meta != real:
            problems.append("the meta-device build differs: " + "; ".join(
                describe(meta, real, p) for p in PARTS if differs(meta, real, p)))
        if sum(flops.values()) != flop_total:
            problems.append(f"FLOPs per part sum to {sum(flops.values()):,}, the total is {flop_total:,}")
        if not 0 < active_parameters(self.model) <= total:
            problems.append(f"active parameters {active_parameters(self.model):,} not in (0, {total:,}]")
        return [self.row("accounting", not problems, f"params {total:,}, FLOPs {flop_total:,}", "; ".join(problems))]


CHECKS: tuple[str, ...] = ("forward_backward", "changes", "decoder", "save_load", "seed", "accounting")


def _error_line(error: BaseException) -> str:
    return " ".join(f"{type(error).__name__}: {error}".split())[:300]


def check_preset(variant: Variant, task: str, preset: str, on_step: Callable[[str], None] | None = None) -> list[Row]:
    """Every row of one preset; a check that raises becomes a failing row, and a model that does not build
    fails its first row alone."""
    try:
        subject = _Preset(variant, task, preset)
    except Exception as error:
        spec = task_shape(task)
        sizes = ", ".join(f"{k}={v}" for k, v in spec.config_overrides(spec.shape).items())
        where = f"built for the {task} task's input ({sizes}): " if sizes else ""
        return [Row(preset, "build", False, "", where + _error_line(error))]
    rows: list[Row] = []
    for name in CHECKS:
        if on_step is not None:
            on_step(name)
        try:
            rows += getattr(subject, name)()
        except Exception as error:
            rows.append(Row(preset, name.replace("_", "/"), False, "raised", _error_line(error)))
            if name == "forward_backward":
                break  # the later checks need a model that runs
    return rows


ALL_PRESETS = "all"  # zoo check --preset all


def _parameters(variant: Variant, preset: str) -> int | None:
    """The parameters of ``preset``, counted on the meta device (``None`` where it does not build there)."""
    try:
        return sum(p.numel() for p in build(variant, variant.config(preset), meta=True).parameters())
    except Exception:
        return None


def check_variant(name: str, task: str | None = None, presets: Sequence[str] | None = None,
                  progress: bool = False) -> list[Report]:
    """Run the conformance suite on variant ``name``: one :class:`Report` per task (``task``, default: every
    task it runs on), over ``presets``: default, the registration's ``default_preset`` (what ``zoo train``
    trains; the largest presets take minutes each on a CPU); ``["all"]``, every preset. Of a name registered
    for several tasks, each registration is checked at those of ``presets`` it has."""
    tasks = [task_shape(task).name] if task is not None else list(dict.fromkeys(tasks_of(name)))
    registered = {t: get_variant(name, t) for t in tasks}
    known = {p for v in registered.values() for p in v.presets}
    every = ALL_PRESETS in (presets or ())
    for preset in presets or ():
        if preset not in known and preset != ALL_PRESETS:  # in none of the registrations checked
            raise unknown_name(f"preset of variant {name!r}", preset, [*known, ALL_PRESETS])
    reports = []
    for task_name, variant in registered.items():
        chosen = (list(variant.presets) if every else [p for p in presets if p in variant.presets] if presets
                  else [variant.default_preset])
        if not chosen:
            log.info("%s on %s has none of the presets %s (it has %s): not checked", name, task_name,
                     ", ".join(presets), ", ".join(variant.presets))
            continue
        start = time.perf_counter()
        rows: list[Row] = []
        from tasks.engine.progress import progress_bar

        with progress_bar(chosen, desc=f"zoo check {name} ({task_name})", unit="preset", disable=not progress,
                          leave=False) as bar:
            for preset in bar:
                rows += check_preset(variant, task_name, preset, lambda step, p=preset: bar.set_postfix_str(
                    f"{p}: {step}"))
        unchecked = {p: _parameters(variant, p) for p in variant.presets if p not in chosen}
        reports.append(Report(name, task_name, rows, time.perf_counter() - start, unchecked))
    return reports


def render(report: Report, options: str = "") -> str:
    """The report as an aligned text table, the presets left unchecked with their sizes and the command that
    checks them (``options``: more of its arguments, e.g. ``--user-dir``), and a summary line."""
    header = ("preset", "check", "result", "measured", "reason")
    cells = [header, *((r.preset, r.check, r.result, r.measured, r.reason) for r in report.rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(4)]
    lines = [("  ".join(c[i].ljust(widths[i]) for i in range(4)) + "  " + c[4]).rstrip() for c in cells]
    lines = [f"zoo check {report.variant} ({report.task})", *lines]
    if report.unchecked:  # their sizes say what they cost: a check's time grows with the model
        sizes = ", ".join(p if n is None else f"{p} ({n:,} parameters)" for p, n in report.unchecked.items())
        lines.append(f"not checked: {sizes}; the larger take minutes each on a CPU. Every preset: "
                     f"zoo check {report.variant} --task {report.task} --preset {ALL_PRESETS}{options}")
    return "\n".join([*lines, summary(report)])  # the verdict last


def summary(report: Report) -> str:
    """``"NAME on TASK: 7/7 checks passed, 3 n/a over 1 preset(s) in 4 s: PASS"``: the checks that do not apply
    to the model (n/a) are counted apart, never as passed."""
    presets = len(dict.fromkeys(r.preset for r in report.rows))
    applied = report.applied
    not_applicable = len(report.rows) - len(applied)
    verdict = "PASS" if not report.failed else f"FAIL ({', '.join(f'{r.preset}/{r.check}' for r in report.failed)})"
    return (f"{report.variant} on {report.task}: {len(applied) - len(report.failed)}/{len(applied)} checks passed"
            f"{f', {not_applicable} n/a' if not_applicable else ''} over {presets} preset(s) in "
            f"{report.seconds:.0f} s: {verdict}")
