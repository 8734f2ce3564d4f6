"""What the doctor reports: findings (a problem with its evidence, likely cause and fix), the numbers each check
measured, and the ranked diagnosis, as a short table, markdown (``doctor.md``) and JSON (``doctor.json``).

Ranking: by severity first (``critical`` > ``error`` > ``warning`` > ``note``), then by ``excess``, how far the
statistic is past its threshold in log units, so that the finding furthest from healthy comes first. Within
one check, a root cause is given a higher severity than the symptoms it produces (a Q/K initialisation that is
8× too wide is an ``error``; the saturated heads it causes are ``warning``), so the cause is ranked first.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

SEVERITIES = ("critical", "error", "warning", "note")
CHECKS = {  # name -> (title, the lab lesson that builds the mistake, or None)
    "attention": ("Attention saturation per layer and head", "scale"),
    "score_scale": ("Score scale", "scale"),
    "mask": ("Mask leaks, by perturbation", "mask"),
    "position": ("Position signal", "position"),
    "init": ("Initialisation, activations and gradients by depth", "init"),
    "curve": ("Training curve", "warmup"),
    "generation": ("Train / inference gap for generation", "mask"),
}


@dataclass
class Finding:
    """One problem the doctor found.

    Args:
        check: the check that found it (a key of :data:`CHECKS`).
        problem: what is wrong, in a few words.
        evidence: the measured number and where (layer, head), against its threshold.
        cause: the likely cause.
        fix: the flag or the code part to change.
        severity: one of :data:`SEVERITIES`.
        statistic, threshold: the measured value and the limit it crossed (for ranking and JSON).
        where: the module (and head) it was measured in, when it is local.
    """

    check: str
    problem: str
    evidence: str
    cause: str
    fix: str
    severity: str
    statistic: float
    threshold: float
    where: str = ""

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")
        if self.check not in CHECKS:
            raise ValueError(f"check must be one of {sorted(CHECKS)}, got {self.check!r}")

    @property
    def excess(self) -> float:
        """|log(statistic / threshold)|: how far past its threshold the statistic is (infinite for a non-finite
        statistic or one that is exactly 0 against a non-zero threshold)."""
        a, b = abs(self.statistic), abs(self.threshold)
        if not math.isfinite(a) or (a == 0) != (b == 0):
            return math.inf  # infinitely far (a NaN loss; an output that does not move at all)
        return abs(math.log(a / b)) if a and b and math.isfinite(b) else 0.0

    @property
    def lesson(self) -> str | None:
        return CHECKS[self.check][1]

    def rank_key(self) -> tuple[int, float]:
        return SEVERITIES.index(self.severity), -self.excess


@dataclass
class CheckResult:
    """One check: ``status`` is ``ok`` (nothing found), ``found`` or ``skipped`` (with the ``note`` saying why);
    ``measured`` holds the numbers it computed (JSON-ready), ``thresholds`` the limits it applied, in words."""

    name: str
    status: str = "ok"
    measured: dict[str, Any] = field(default_factory=dict)
    thresholds: dict[str, str] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    note: str = ""

    @property
    def title(self) -> str:
        return CHECKS[self.name][0]

    def add(self, finding: Finding) -> None:
        self.findings.append(finding)
        self.status = "found"

    def skip(self, why: str) -> CheckResult:
        self.status, self.note = "skipped", why
        return self


@dataclass
class Diagnosis:
    """The result of :func:`zoo.analysis.doctor.examine`: every check's numbers and the findings, ranked.

    ``context`` describes what was examined (model class, parameters, trained or at initialisation, batch
    shape); ``figures`` are file names written next to ``doctor.md`` by :meth:`write`.
    """

    checks: list[CheckResult]
    context: dict[str, Any] = field(default_factory=dict)
    figures: list[str] = field(default_factory=list)

    @property
    def findings(self) -> list[Finding]:
        """Every finding, most severe and furthest past its threshold first."""
        return sorted((f for c in self.checks for f in c.findings), key=Finding.rank_key)

    @property
    def healthy(self) -> bool:
        return not self.findings

    def at_least(self, severity: str) -> list[Finding]:
        """The findings of ``severity`` or worse (``critical`` is the worst), ranked."""
        if severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {severity!r}")
        return [f for f in self.findings if SEVERITIES.index(f.severity) <= SEVERITIES.index(severity)]

    def check(self, name: str) -> CheckResult:
        for result in self.checks:
            if result.name == name:
                return result
        raise KeyError(f"no check {name!r} in this diagnosis; it ran {[c.name for c in self.checks]}")

    def merge(self, other: Diagnosis) -> Diagnosis:
        """This diagnosis with ``other``'s checks added (a check of the same name is replaced)."""
        names = {c.name for c in other.checks}
        return Diagnosis([c for c in self.checks if c.name not in names] + other.checks,
                         {**self.context, **other.context}, self.figures + other.figures)

    # --- rendering ---------------------------------------------------------------------------------------
    def table(self, width: int = 110) -> str:
        """The ranked findings as a short plain-text table, each with its evidence, cause and fix beneath (or
        the explicit "nothing found" with what ran)."""
        import textwrap

        if self.healthy:
            ran = [c.name for c in self.checks if c.status != "skipped"]
            return f"nothing found: {len(ran)} checks ran ({', '.join(ran)}); their numbers are in doctor.md"
        lines = [f"{'#':>2}  {'severity':<8}  {'check':<11}  problem"]
        for i, f in enumerate(self.findings, 1):
            lines.append(f"{i:>2}  {f.severity:<8}  {f.check:<11}  {f.problem}")
            for label, text in (("evidence", f.evidence), ("cause", f.cause), ("fix", f.fix)):
                lines += textwrap.wrap(text, width, initial_indent=f"{'':>4}{label + ':':<10}",
                                       subsequent_indent=" " * 14)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"healthy": self.healthy, "context": self.context,
                "findings": [{**asdict(f), "lesson": f.lesson} for f in self.findings],
                "checks": [{"name": c.name, "title": c.title, "status": c.status, "note": c.note,
                            "thresholds": c.thresholds, "measured": c.measured,
                            "findings": len(c.findings)} for c in self.checks],
                "figures": self.figures}

