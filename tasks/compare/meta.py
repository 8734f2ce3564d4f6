"""The statistics of a study across cells: is one change general, or specific to the task it was proposed on?

A *cell* is one (task, dataset, preset) of a study. In it the base and the base with the change are trained with
the same seeds, giving paired differences ``change − base`` (one per seed, or one per unit of the task's paired
test), and the base is trained again with other seeds, giving base-vs-base differences: the *noise floor*.
Pure functions of numbers, no task knowledge; orient every difference so that positive means "the change
scores higher" in the metric's good direction (negate perplexity or HD95 first).

* **Standardisation** (:func:`cell_effect`): the mean paired difference divided by σ̂, the seed-to-seed SD of
  one base run, estimated from the noise floor. A base-vs-base difference has mean 0 by symmetry and variance
  2σ², so ``σ̂² = Σ n_j² / (2 m)`` with m degrees of freedom (the mean is known, not estimated). The effect is
  then Hedges' small-sample correction J(m) times ``mean / σ̂``: a change's gain in units of "how much a
  reseed moves this metric", which is comparable across BLEU, perplexity and accuracy. This unit is chosen
  over Hedges' g of the paired differences (mean / SD of the differences) because the question is whether
  the change *moves the metric* beyond seed noise everywhere; g of the differences measures how *consistent*
  the change is, grows without bound when seeds are shared and correlated, and would call a tiny but steady
  shift in one task larger than a big, noisy gain in another. Its variance, by the delta method, is
  ``J² (s_d² / (n σ̂²) + d² / (2 m))``: the mean's sampling variance plus the noise floor's.
* **Within a cell** the change is tested by a paired t test on the raw differences (Student, n − 1 degrees of
  freedom, as :func:`tasks.compare.stats.seed_t_test` computes it); the p-values of all cells of a study are
  corrected together with Holm's method (:func:`tasks.compare.stats.holm`).
* **Across cells** (:func:`random_effects`): a random-effects meta-analysis of the standardised effects with
  DerSimonian–Laird's (``"dl"``) or Paule–Mandel's (``"pm"``) between-cell variance τ², the pooled effect, its
  normal (1 − α) interval, Cochran's Q with its χ² p-value and I² = max(0, (Q − (k − 1)) / Q); equal to
  ``statsmodels.stats.meta_analysis.combine_effects`` (tested).
* **Sign consistency** (:func:`sign_consistency`): the sign of each task's (or dataset's, or preset's)
  inverse-variance mean effect, and how many groups agree with the pooled sign.
* **The measured scope** (:func:`measured_scope`), by the rule :func:`rule_text` writes out, *across* the cells'
  tasks (``zoo study``: is the change general, or specific to a task?) or across the datasets of one task
  (``zoo compare --folds K --data A --data B``: does the variant win on every dataset, or on one?): the rule
  is the same, its groups are the tasks or the datasets (:data:`ACROSS`).

Checked in simulation over planted studies of 3 tasks × 2 presets (tests/tasks/compare/test_meta.py; base and
change share half of each seed's variance; effects in seed-SDs). With no effect anywhere the scope is "general" or
"task-specific" in 0.8 %, 0.6 % and 0.9 % of 1000 studies at 3, 5 and 10 seeds a side (1.5 % when no task is
declared as proposed); every such call needs a Holm-significant cell, so the rate is at most α. A general effect
of 1.5 is called general in 99 % of 400 studies at 8 seeds (58 % at 5; 1.0 at 15 seeds: 100 %; 0.5 at 30: 85 %);
one of 2.0 in one task only is called task-specific in 98 % at 8 seeds (70 % at 5), general in under 1 %. The
pooled interval alone is a little too narrow with few seeds (it excludes 0 in 7.1 % of null studies at 5 seeds,
5.4 % at 20; Hartung–Knapp's interval does not help: 7.4 %), because each cell's variance is estimated from a
few seeds; hence the rule asks for significant cells too.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from plumbing.errors import check_bool, check_number, unknown_name
from tasks.compare.stats import check_alpha, holm

SCOPES = ("general", "task-specific", "no effect", "inconclusive")
METHODS = ("dl", "pm")  # DerSimonian–Laird's one-step τ², Paule–Mandel's iterated one
EQUIVALENCE_MARGIN = 0.2  # standardised: a fifth of one run's seed SD, Cohen's "small" effect
TARGET_POWER = 0.8  # the power the "how many seeds would tell" calculation asks for
MOST_SEEDS = 10**6  # where that calculation stops counting: "more than" this many
# what a measured scope groups the cells by: the tasks of a study, or the datasets of one task's comparison
ACROSS = ("task", "dataset")
GROUPINGS = (*ACROSS, "preset")  # what sign consistency may group by


@dataclass(frozen=True)
class Cell:
    """One (task, dataset, preset) of a study: the change's paired differences and the base's noise floor.

    Args:
        differences: ``change − base`` per seed (same seed both sides) or per unit of the paired test; at least 2.
        noise: ``base − base`` with other seeds (each a difference of two independent base runs); at least 2.
            Of the same kind as ``differences`` (both per seed, or both per unit): it sets the effect's unit.
    """

    task: str
    dataset: str
    preset: str
    differences: tuple[float, ...]
    noise: tuple[float, ...]

    def __post_init__(self) -> None:
        for name in ("task", "dataset", "preset"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise TypeError(f"a cell's {name} must be a non-empty string, got {value!r}")
        for name in ("differences", "noise"):
            values = np.asarray(getattr(self, name), dtype=np.float64)
            if values.ndim != 1 or len(values) < 2 or not np.all(np.isfinite(values)):
                raise ValueError(f"cell {self.label}: {name} must be at least 2 finite numbers (one per seed), "
                                 f"got {getattr(self, name)!r}; run more seeds")
            object.__setattr__(self, name, tuple(float(v) for v in values))
        if not any(self.noise):
            raise ValueError(f"cell {self.label}: the noise floor is all zeros, so base runs with other seeds "
                             "scored identically and nothing can be standardised; check that the seeds differ")
        if max(self.differences) == min(self.differences):
            raise ValueError(f"cell {self.label}: every paired difference equals {self.differences[0]}, so its "
                             "variance is 0; check that the seeds differ")

    @property
    def label(self) -> str:
        """``task/dataset/preset``: the cell's name in tables and plots."""
        return f"{self.task}/{self.dataset}/{self.preset}"


@dataclass(frozen=True)
class CellEffect:
    """A cell's standardised effect, its variance and its paired test (``p_holm`` over the study's cells)."""

    cell: Cell
    mean_difference: float
    difference_sd: float  # SD of the paired differences: the cell's paired t test and power read it
    seed_sd: float  # σ̂: one base run's seed-to-seed SD, from the noise floor
    effect: float  # J(m) · mean_difference / σ̂
    variance: float
    p_value: float
    p_holm: float


@dataclass(frozen=True)
class Pooled:
    """A random-effects meta-analysis: the pooled effect, its interval, τ², I², Cochran's Q and its p-value."""

    method: str  # "dl" or "pm", "+hksj" with the Hartung–Knapp–Sidik–Jonkman interval
    estimate: float
    se: float
    interval: tuple[float, float]
    tau2: float
    i2: float
    q: float
    q_df: int
    q_p: float


@dataclass(frozen=True)
class Consistency:
    """The sign of each group's inverse-variance mean effect, and how many share the pooled effect's sign."""

    by: str
    signs: dict[str, int]
    agreeing: int


@dataclass(frozen=True)
class Scope:
    """The measured scope, the reason in words, and (when inconclusive) how many seeds a side would tell."""

    scope: str
    reason: str
    seeds_needed: int | None = None


@dataclass(frozen=True)
class Study:
    """Everything :func:`meta_analysis` measures of one study; ``across`` the groups its scope was measured across
    (:data:`ACROSS`), ``by_dataset`` the signs by dataset when those are the datasets (else None)."""

    cells: list[CellEffect]
    pooled: Pooled
    by_task: Consistency
    by_preset: Consistency
    scope: Scope
    alpha: float
    margin: float
    across: str = "task"
    by_dataset: Consistency | None = None


def hedges_j(df: float) -> float:
    """Hedges' small-sample correction J(ν) = Γ(ν/2) / (√(ν/2) Γ((ν − 1)/2)): E[J · d] = δ for an SD with ν df."""
    return math.exp(math.lgamma(df / 2) - math.lgamma((df - 1) / 2)) / math.sqrt(df / 2)


def cell_effect(cell: Cell) -> CellEffect:
    """The cell's standardised effect and variance (see the module docstring) and its paired t test's p-value.

    The test is :func:`tasks.compare.stats.seed_t_test` with one term (t = mean / (s / √n), n − 1 degrees of
    freedom; equal, tested), written with ``scipy.special.stdtr`` because a simulation calls it thousands of times.
    ``p_holm`` is the uncorrected p here; :func:`cell_effects` corrects a study's cells together.
    """
    from scipy import special

    d = np.asarray(cell.differences)
    noise = np.asarray(cell.noise)
    n, m = len(d), len(noise)
    mean, s2 = float(d.mean()), float(d.var(ddof=1))
    seed_sd = math.sqrt(float(noise @ noise) / (2 * m))  # Var(base − base) = 2σ², mean known to be 0
    j = hedges_j(m)
    raw = mean / seed_sd
    variance = j * j * (s2 / (n * seed_sd**2) + raw * raw / (2 * m))
    p = float(2 * special.stdtr(n - 1, -abs(mean) / math.sqrt(s2 / n)))
    return CellEffect(cell, mean, math.sqrt(s2), seed_sd, j * raw, variance, p, p)


def cell_effects(cells: Sequence[Cell]) -> list[CellEffect]:
    """:func:`cell_effect` of every cell, with the paired tests' p-values Holm-corrected across the cells."""
    if not cells or not all(isinstance(c, Cell) for c in cells):
        raise TypeError(f"cells must be a non-empty list of Cell, got {cells!r}")
    labels = [c.label for c in cells]
    if len(set(labels)) != len(labels):
        raise ValueError(f"cells must be distinct (task, dataset, preset), got {sorted(labels)}")
    raw = [cell_effect(c) for c in cells]
    return [replace(e, p_holm=p) for e, p in zip(raw, holm([e.p_value for e in raw]), strict=True)]


def _q(effects: np.ndarray, weights: np.ndarray) -> float:
    """Cochran's weighted sum of squares about the weighted mean: Σ w (y − ȳ_w)²."""
    mean = weights @ effects / weights.sum()
    return float(weights @ (effects - mean) ** 2)


def _tau2_pm(effects: np.ndarray, variances: np.ndarray) -> float:
    """Paule–Mandel's τ²: the root of Q(τ²) = k − 1, Q weighted by 1/(v + τ²) (decreasing); 0 if Q(0) <= k − 1."""
    from scipy import optimize

    k = len(effects)

    def excess(tau2: float) -> float:
        return _q(effects, 1 / (variances + tau2)) - (k - 1)

    if excess(0.0) <= 0:
        return 0.0
    # Q(τ²) <= Σ w (y − ȳ)² <= Σ (y − ȳ)² / τ², below k − 1 once τ² exceeds the effects' sample variance
    high = float(np.var(effects, ddof=1)) + float(variances.max())
    return float(optimize.brentq(excess, 0.0, high, xtol=1e-15, rtol=4 * np.finfo(float).eps))


def random_effects(effects: Sequence[float], variances: Sequence[float], method: str = "dl",
                   alpha: float = 0.05, hartung_knapp: bool = False) -> Pooled:
    """Pool ``effects`` (each with its sampling variance) by a random-effects meta-analysis.

    τ² by DerSimonian–Laird, ``max(0, (Q − (k − 1)) / (Σw − Σw² / Σw))`` with w = 1/v, or Paule–Mandel; the pooled
    effect is the mean weighted by w* = 1/(v + τ²), its SE 1/√Σw*, its interval normal. Q and I² are the
    fixed-effect ones (as statsmodels reports them for either method). ``hartung_knapp``: the
    Hartung–Knapp–Sidik–Jonkman interval instead, SE² scaled by Σw*(y − ȳ*)² / (k − 1) and a t with k − 1
    degrees of freedom, which keeps its coverage with few cells and variances estimated from few seeds, where
    the normal one is too narrow (measured in the tests' simulation).

    Shape:
        effects (k,), variances (k,) -> Pooled.
    """
    from scipy import special

    check_alpha(alpha)
    check_bool("hartung_knapp", hartung_knapp)
    if method not in METHODS:
        raise unknown_name("random-effects method", method, METHODS)
    y = np.asarray(effects, dtype=np.float64)
    v = np.asarray(variances, dtype=np.float64)
    if y.ndim != 1 or y.shape != v.shape or len(y) < 2:
        raise ValueError(f"need at least 2 effects with one variance each, got {len(y)} effects and {len(v)} "
                         "variances")
    if not (np.all(np.isfinite(y)) and np.all(np.isfinite(v)) and np.all(v > 0)):
        raise ValueError(f"effects must be finite and variances finite and > 0, got {list(y)} and {list(v)}")
    k, w = len(y), 1 / v
    q = _q(y, w)
    tau2 = max(0.0, (q - (k - 1)) / (w.sum() - w @ w / w.sum())) if method == "dl" else _tau2_pm(y, v)
    w_re = 1 / (v + tau2)
    estimate = float(w_re @ y / w_re.sum())
    se = float(1 / math.sqrt(w_re.sum()))
    if hartung_knapp:
        se *= math.sqrt(_q(y, w_re) / (k - 1))
        half = float(special.stdtrit(k - 1, 1 - alpha / 2)) * se
    else:
        half = float(special.ndtri(1 - alpha / 2)) * se
    i2 = max(0.0, (q - (k - 1)) / q) if q > 0 else 0.0
    return Pooled(method + "+hksj" * hartung_knapp, estimate, se, (estimate - half, estimate + half), float(tau2),
                  i2, q, k - 1, float(special.chdtrc(k - 1, q)))


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


def sign_consistency(effects: Sequence[CellEffect], by: str, pooled_sign: int) -> Consistency:
    """Per group (``by``: ``"task"``, ``"dataset"`` or ``"preset"``), the sign of its cells' inverse-variance mean
    effect."""
    if by not in GROUPINGS:
        raise unknown_name("grouping", by, GROUPINGS)
    groups: dict[str, list[CellEffect]] = {}
    for e in effects:
        groups.setdefault(getattr(e.cell, by), []).append(e)
    signs = {name: _sign(sum(e.effect / e.variance for e in members)) for name, members in groups.items()}
    return Consistency(by, signs, sum(s == pooled_sign != 0 for s in signs.values()))


def signs_text(signs: dict[str, int]) -> str:
    """``{"alpha": 1, "beta": -1}`` as ``"alpha +, beta −"``: a :class:`Consistency`'s signs for a report."""
    return ", ".join(f"{name} {'+' if v > 0 else '−' if v < 0 else '0'}" for name, v in signs.items())


def subgroup_difference(first: Sequence[CellEffect], second: Sequence[CellEffect]) -> tuple[float, float]:
    """The difference of two groups' inverse-variance mean effects and its two-sided z test's p-value.

    The fixed-effect subgroup test (Borenstein et al. 2009, ch. 19: Q_between with one degree of freedom):
    ``m_g = Σ y/v / Σ 1/v`` with variance ``1 / Σ 1/v`` in each group, ``z = (m_1 − m_2) / √(V_1 + V_2)``.
    """
    from scipy import special

    means, variances = [], []
    for group in (first, second):
        if not group:
            raise ValueError("subgroup_difference needs at least one cell in each group")
        w = np.array([1 / e.variance for e in group])
        means.append(float(w @ [e.effect for e in group] / w.sum()))
        variances.append(float(1 / w.sum()))
    gap = means[0] - means[1]
    return gap, float(2 * special.ndtr(-abs(gap) / math.sqrt(sum(variances))))


def t_test_power(effect: float, n: int, alpha: float) -> float:
    """Power of a two-sided one-sample (paired) t test of n values at standardised effect ``effect`` (mean / SD)."""
    from scipy import special

    crit = float(special.stdtrit(n - 1, 1 - alpha / 2))
    nc = effect * math.sqrt(n)
    return float(1 - special.nctdtr(n - 1, nc, crit) + special.nctdtr(n - 1, nc, -crit))


def seeds_for_power(effect: float, alpha: float = 0.05, power: float = TARGET_POWER, most: int = MOST_SEEDS) -> int:
    """The fewest paired values n >= 2 whose two-sided t test at ``alpha`` detects ``effect`` with ``power``.

    ``most`` if even that many would not (a vanishing effect): the caller says "more than".
    """
    check_number("effect", effect, 0, low_open=True, hint="a standardised effect, mean / SD of the differences")
    check_alpha(alpha)
    check_number("power", power, 0, 1, low_open=True, high_open=True, hint="e.g. 0.8")
    if t_test_power(effect, most, alpha) < power:
        return most
    from scipy import special

    # the normal approximation's n, then a few steps: the t test needs a little more (about z²/4 values)
    z = float(special.ndtri(1 - alpha / 2) + special.ndtri(power))
    n = min(most, max(2, math.floor((z / effect) ** 2)))
    while n > 2 and t_test_power(effect, n - 1, alpha) >= power:
        n -= 1
    while t_test_power(effect, n, alpha) < power:
        n += 1
    return n


def check_across(across: object) -> str:
    """``across`` when it names what a measured scope may group by (:data:`ACROSS`), else a "did you mean"."""
    if across not in ACROSS:
        raise unknown_name("across (what the scope groups cells by)", across, ACROSS)
    return across


def rule_text(alpha: float = 0.05, margin: float = EQUIVALENCE_MARGIN, across: str = "task") -> str:
    """The measured-scope rule in words, as :func:`measured_scope` applies it across ``across`` (the tasks, or the
    datasets), for the report to print."""
    unit = check_across(across)
    return (
        f"A cell is *significant* when its paired t test's p, Holm-corrected over all the study's cells, is below "
        f"{alpha:g}; a {unit}'s *direction* is the sign of its significant cells (none, or both signs: no direction). "
        "Effects are mean differences in units of one base run's seed-to-seed SD (the noise floor). "
        f"**general**: the pooled random-effects {100 * (1 - alpha):g} % interval excludes 0, more than half of the "
        f"{unit}s have the pooled sign as their direction, every {unit}'s mean effect has that sign and no cell is "
        f"significant the other way. **{unit}-specific**: not general, and every {unit} the change was proposed on "
        f"(if none is declared: every {unit} with a direction) has the same direction, every other {unit} has none "
        "or the opposite one, and the two groups' inverse-variance mean effects differ that way by a z test at "
        f"{alpha:g}. **no effect**: no cell is significant and the pooled interval lies within "
        f"±{margin:g}. **inconclusive**: anything else; it says how many seeds a side would give each cell's "
        f"paired test {100 * TARGET_POWER:g} % power at Holm's strictest level ({alpha:g} / cells) against an "
        f"effect of the pooled size or ±{margin:g}, whichever is larger, at the observed variances."
    )


def measured_scope(effects: Sequence[CellEffect], pooled: Pooled, proposed: Iterable[str] = (),
                   alpha: float = 0.05, margin: float = EQUIVALENCE_MARGIN, across: str = "task") -> Scope:
    """The measured scope of a change: general, task-specific, no effect or inconclusive.

    ``across`` (:data:`ACROSS`) names the groups of cells the rule reads: ``"task"`` (a study: the cells' tasks) or
    ``"dataset"`` (one task's comparison on several datasets: the cells' datasets; the scopes then read
    "dataset-specific", and ``proposed`` names datasets). Below, "task" stands for either.

    The rule (also :func:`rule_text`, which the report prints): a cell is significant when its Holm-corrected p
    is below ``alpha``; a task's direction is the common sign of its significant cells (0 when none or mixed).

    * **general**: the pooled interval excludes 0; more than half of the tasks have the pooled sign as their
      direction; every task's inverse-variance mean effect has that sign; no cell is significant the other way.
    * **task-specific**: not general; every task in ``proposed`` (or, if none is given, every task with a
      direction) has one common direction, every other task has direction 0 or the opposite one, and the two
      groups' mean effects differ in that direction (:func:`subgroup_difference`, p < ``alpha``): "null
      elsewhere" must be shown, not read off a non-significant test.
    * **no effect**: no cell significant and the pooled interval within ``[-margin, margin]``.
    * **inconclusive**: otherwise, with the seeds a side that would give every cell's paired t test
      :data:`TARGET_POWER` at level ``alpha / cells`` against ``max(|pooled|, margin)`` standardised units.

    Every "general" or "task-specific" call needs a significant cell, so with no effect anywhere such a call
    happens at most at the Holm family-wise rate α. Needs cells of at least two tasks (one cannot tell).
    """
    check_alpha(alpha)
    check_number("margin", margin, 0, low_open=True, hint=f"a standardised effect, e.g. {EQUIVALENCE_MARGIN}")
    unit = check_across(across)

    def group_of(e: CellEffect) -> str:
        return getattr(e.cell, unit)

    groups = sorted({group_of(e) for e in effects})
    if len(groups) < 2:
        raise ValueError(f"a measured scope needs cells of at least 2 {unit}s, got {groups}: one {unit} cannot tell "
                         f"general from {unit}-specific; add {unit}s")
    proposed = sorted(set(proposed))
    for name in proposed:
        if name not in groups:
            raise unknown_name(f"proposed {unit}", name, groups)
    significant = [e for e in effects if e.p_holm < alpha]
    direction = {}
    for name in groups:
        signs = {_sign(e.mean_difference) for e in significant if group_of(e) == name}
        direction[name] = signs.pop() if len(signs) == 1 else 0
    sign = _sign(pooled.estimate)
    low, high = pooled.interval
    by_group = sign_consistency(effects, unit, sign)
    with_sign = [t for t in groups if direction[t] == sign != 0]
    if ((low > 0 or high < 0) and 2 * len(with_sign) > len(groups) and by_group.agreeing == len(groups)
            and not any(_sign(e.mean_difference) == -sign for e in significant)):
        return Scope("general", f"pooled {pooled.estimate:+.2f} [{low:+.2f}, {high:+.2f}]; significant with that "
                     f"sign in {len(with_sign)} of {len(groups)} {unit}s ({', '.join(with_sign)})")
    where = proposed or [t for t in groups if direction[t]]
    common = {direction[t] for t in where}
    if where and len(common) == 1 and 0 not in common:
        s = common.pop()
        others = [t for t in groups if t not in where]
        inside = [e for e in effects if group_of(e) in where]
        outside = [e for e in effects if group_of(e) not in where]
        gap, p_gap = subgroup_difference(inside, outside) if outside else (0.0, 1.0)
        if all(direction[t] != s for t in others) and _sign(gap) == s and p_gap < alpha:
            return Scope(f"{unit}-specific", f"significant {'+-'[s < 0]} in {', '.join(where)}; null or opposite in "
                         f"{', '.join(others)}; the two groups differ by {gap:+.2f} (p {p_gap:.2g})")
    if not significant and -margin <= low and high <= margin:
        return Scope("no effect", f"no cell significant; pooled interval [{low:+.2f}, {high:+.2f}] within "
                     f"±{margin:g}")
    target = max(abs(pooled.estimate), margin)
    needed = max(seeds_for_power(target * e.seed_sd / e.difference_sd, alpha / len(effects)) for e in effects)
    seeds = f"more than {needed}" if needed >= MOST_SEEDS else f"about {needed}"
    return Scope("inconclusive", f"{len(significant)} significant cell(s); pooled {pooled.estimate:+.2f} "
                 f"[{low:+.2f}, {high:+.2f}]; {seeds} seeds a side would give each cell "
                 f"{100 * TARGET_POWER:g} % power against ±{target:.2f}", needed)


def meta_analysis(cells: Sequence[Cell], proposed: Iterable[str] = (), method: str = "dl", alpha: float = 0.05,
                  margin: float = EQUIVALENCE_MARGIN, hartung_knapp: bool = False, across: str = "task") -> Study:
    """A study's statistics across cells: each cell's effect and Holm-corrected test, the pooled effect, the sign
    consistency across tasks and presets (and datasets, ``across="dataset"``), and the measured scope across the
    tasks, or across the datasets of one task (see :func:`measured_scope`).

    ``method`` and ``hartung_knapp`` choose the pooled interval (:func:`random_effects`).
    """
    check_across(across)
    effects = cell_effects(cells)
    pooled = random_effects([e.effect for e in effects], [e.variance for e in effects], method, alpha, hartung_knapp)
    sign = _sign(pooled.estimate)
    by_dataset = sign_consistency(effects, "dataset", sign) if across == "dataset" else None
    return Study(effects, pooled, sign_consistency(effects, "task", sign), sign_consistency(effects, "preset", sign),
                 measured_scope(effects, pooled, proposed, alpha, margin, across), alpha, margin, across, by_dataset)


def plot_forest(study: Study, path: str | Path, title: str = "") -> Path:
    """A forest plot of ``study``, written atomically to ``path`` (PNG); returns ``path``.

    One row per cell: its standardised effect with its normal (1 − α) interval (black when Holm-significant), over
    a grey band, the (1 − α) range of a base-vs-base mean difference over the cell's n seeds, ±z √(2/n) seed-SDs
    (the noise floor); the pooled effect as a diamond spanning its interval; a line at 0 and dotted lines at the
    equivalence margin.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from scipy import special

    from plumbing.atomic import atomic_open

    z = float(special.ndtri(1 - study.alpha / 2))
    level = f"{100 * (1 - study.alpha):g} %"
    rows = len(study.cells)
    fig, ax = plt.subplots(figsize=(7, 1.2 + 0.4 * (rows + 2)))
    labels: set[str] = set()
    for i, e in enumerate(study.cells):
        y = rows + 1 - i  # the first cell at the top, the pooled diamond at y = 0
        band = z * math.sqrt(2 / len(e.cell.differences))
        ax.fill_between([-band, band], y - 0.35, y + 0.35, color="0.85", lw=0,
                        label=f"noise floor (base vs base, {level})" if i == 0 else None)
        significant = e.p_holm < study.alpha
        label = "significant (Holm)" if significant else "not significant"
        ax.errorbar(e.effect, y, xerr=z * math.sqrt(e.variance), fmt="s", color="black" if significant else "0.45",
                    capsize=3, label=label if label not in labels else None)
        labels.add(label)
    p = study.pooled
    low, high = p.interval
    ax.fill([low, p.estimate, high, p.estimate], [0, 0.3, 0, -0.3], color="tab:blue",
            label=f"pooled ({p.method.upper()}): τ² {p.tau2:.2g}, I² {100 * p.i2:.0f} %")
    ax.axvline(0, color="grey", lw=0.8)
    ax.axvline(-study.margin, color="grey", lw=0.8, ls=":", label=f"equivalence margin ±{study.margin:g}")
    ax.axvline(study.margin, color="grey", lw=0.8, ls=":")
    ax.set_yticks([rows + 1 - i for i in range(rows)] + [0],
                  [e.cell.label for e in study.cells] + ["pooled"])
    ax.set(xlabel=f"effect (seed-to-seed SDs of the base; {level} intervals)",
           title=title or f"measured scope: {study.scope.scope}")
    ax.legend(fontsize=8, loc="best")
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    with atomic_open(path, binary=True) as f:
        fig.savefig(f, format="png", dpi=110)
    plt.close(fig)
    return Path(path)
