"""What a comparison found (:class:`Comparison`, made by :func:`kperf_ci.judge.compare.compare_runs`):
metric changes, added / removed / not-run variants, key changes, incomparable metric kinds, and
the comparison's status ("no comparable baseline" below MIN_COMPARED_FRACTION compared).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from ..metrics import Change
from ..model import RunInfo, VariantKey
from .group import KernelIndex
from .matching import MatchStage
from .verdict import regression

__all__ = [
    "COMPARED",
    "MIN_COMPARED_FRACTION",
    "NO_COMPARABLE_BASELINE",
    "Comparison",
    "ComparisonStatus",
    "Incomparable",
    "KeyChange",
    "MetricChange",
    "NotRun",
]


@dataclass(slots=True)  # slots: one per metric of every variant
class MetricChange:
    variant: VariantKey
    metric: str
    base: float | None
    current: float | None
    delta: float | None
    rel: float | None  # delta / base; None when base is 0 (or missing)
    direction: Change
    regression: bool
    reason: str
    kind: str = "static"
    unit: str = ""
    threshold: float | None = None
    threshold_source: str = ""
    ci: tuple[float, float] | None = None  # time.median: CI of the ratio cur/base
    verdict: str | None = None  # time.median: slower/faster/unchanged/inconclusive
    key_change: str = ""  # the variant was matched across this key change ("num_warps 4 -> 1")

    @property
    def changed(self) -> bool:
        return self.regression or self.direction in ("better", "worse")

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "variant"}
        d["variant"] = {
            "id": self.variant.id,
            "kernel": self.variant.kernel,
            "arch": self.variant.arch,
            "spec": self.variant.spec,
            "config": self.variant.config,
            "test": self.variant.test,
        }
        d = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in d.items()}
        if self.ci is not None:
            d["ci"] = [None if math.isnan(v) else v for v in self.ci]
        return d


@dataclass
class Incomparable:
    variant: VariantKey
    kind: str
    reason: str


@dataclass(frozen=True)
class KeyChange:
    """A variant matched across a change of its key (see :func:`match_variants`)."""

    base: VariantKey
    current: VariantKey
    matched_by: MatchStage
    description: str  # "num_warps 4 -> 1; BLOCK 1024 -> 512"; "" for a match across modes only


@dataclass(frozen=True)
class NotRun:
    """A baseline variant missing from the current run for a reason that is not a finding."""

    variant: VariantKey
    reason: str  # "its test did not run", "this run built no sm_80 variants", ...


ComparisonStatus = Literal["compared", "no comparable baseline"]
COMPARED: ComparisonStatus = "compared"
NO_COMPARABLE_BASELINE: ComparisonStatus = "no comparable baseline"
#: A comparison stands only when at least this share of the current run's variants was compared
#: with a baseline variant (matched, and at least one metric comparable). Below it the baseline
#: describes another machine class or another suite, and "no regressions" would mean nothing.
MIN_COMPARED_FRACTION = 0.5

#: the words for a baseline that holds this run's tests but compared too few of them
OTHER_MACHINE_CLASS = "no comparable baseline for this machine class"
# Why every baseline variant is "not run" when the baseline holds none of this run's tests: the
# per-variant "deselected, renamed or deleted" guessed wrong for a bench script's run against the
# suite's baseline (walk 3 of issue 38, finding J1-5).
OTHER_TESTS = "none of the baseline's tests ran (this run is a bench script's, or another suite's)"


@dataclass
class Comparison:
    baseline: RunInfo
    current: RunInfo
    changes: list[MetricChange] = field(default_factory=list)
    added: list[VariantKey] = field(default_factory=list)
    #: baseline variants missing from this run although their test ran: a finding, fails the
    #: comparison unless ``allow_removed``
    removed: list[VariantKey] = field(default_factory=list)
    not_run: list[NotRun] = field(default_factory=list)  # missing for a reason that is no finding
    #: (base, current) of every pair whose ids differ: a key change, or a match across modes
    rematched: list[tuple[VariantKey, VariantKey]] = field(default_factory=list)
    key_changes: list[KeyChange] = field(default_factory=list)  # the pairs whose key changed
    incomparable: list[Incomparable] = field(default_factory=list)
    allow_removed: bool = False
    current_variants: int = 0  # variants in the current run
    compared_variants: int = 0  # of them, matched with at least one metric compared
    #: tests of the current run that the baseline holds too: none says the baseline is of other
    #: tests (a benchmark script's run against the suite's baseline), not of another machine
    shared_tests: int | None = None
    #: variant -> compiled kernel (kperf_ci.judge.group): regressions are counted in kernels, not rows
    kernels: KernelIndex = field(default_factory=KernelIndex)

    @property
    def regressions(self) -> list[MetricChange]:
        return [c for c in self.changes if c.regression]

    @property
    def improvements(self) -> list[MetricChange]:
        return [c for c in self.changes if c.direction == "better" and not c.regression]

    @property
    def regressed_kernels(self) -> int:
        """Kernels with at least one regressed metric (or a new build error): the one
        regression count of compare, show and the reports (a metric row is not a unit)."""
        return self.kernels.count(c.variant.id for c in self.regressions)

    @property
    def removed_kernels(self) -> int:
        """Kernels among the removed variants that fail the comparison."""
        return self.kernels.count(k.id for k in self.failing_removed)

    @property
    def failing_removed(self) -> list[VariantKey]:
        """Removed variants that fail the comparison (none with ``allow_removed``)."""
        return [] if self.allow_removed else list(self.removed)

    @property
    def exit_code(self) -> int:
        """1 on a regression: :func:`kperf_ci.judge.verdict.regression`'s answer, as every
        consumer of a comparison reads it."""
        return regression(self).exit_code

    @property
    def status(self) -> ComparisonStatus:
        """ "compared", or "no comparable baseline" when fewer than MIN_COMPARED_FRACTION of the
        current run's variants (or none at all) were compared: a baseline of another machine
        class, another Triton, another suite."""
        if (
            self.compared_variants == 0
            or self.compared_variants < MIN_COMPARED_FRACTION * self.current_variants
        ):
            return NO_COMPARABLE_BASELINE
        return COMPARED

    @property
    def of_other_tests(self) -> bool:
        """The baseline holds none of this run's tests (a bench script's run against the suite's
        baseline, a baseline of another project): nothing of it could be compared."""
        return bool(
            self.shared_tests == 0
            and self.current_variants
            and not self.compared_variants
            and not self.rematched
        )

    def not_run_reasons(self) -> dict[str, int]:
        """How many baseline variants did not run here, by reason, for every consumer's count."""
        if self.of_other_tests and self.not_run:
            return {OTHER_TESTS: len(self.not_run)}
        out: dict[str, int] = {}
        for n in self.not_run:
            out[n.reason] = out.get(n.reason, 0) + 1
        return out

    @property
    def no_verdict_reason(self) -> str:
        """Why there is no verdict, in a few words ("" when compared): the baseline holds none of
        this run's tests, or it holds them for another machine class (GPU, Triton, mode)."""
        if self.status == COMPARED:
            return ""
        if self.of_other_tests:
            return "no comparable baseline: the baseline holds none of these tests"
        return OTHER_MACHINE_CLASS

    @property
    def status_line(self) -> str:
        """One line for every consumer: what was compared, or why the verdict means nothing."""
        n, m = self.compared_variants, self.current_variants
        if self.status == COMPARED:
            return f"compared {n} of {m} variant(s) with the baseline"
        return (
            f"{self.no_verdict_reason}: {n} of {m} variant(s) of this run "
            f"were compared with the baseline (at least {MIN_COMPARED_FRACTION:.0%} needed)"
        )

    def sorted_changes(self, *, all: bool = False) -> list[MetricChange]:
        """Worst first: regressions, then worse, better, the rest; larger relative moves first."""
        rows = self.changes if all else [c for c in self.changes if c.changed]
        order = {"worse": 1, "better": 2, "same": 3, "n/a": 3}

        def key(c: MetricChange) -> tuple:
            mag = abs(c.rel) if c.rel is not None and not math.isnan(c.rel) else math.inf
            return (0 if c.regression else order[c.direction], -mag, c.variant.label(), c.metric)

        return sorted(rows, key=key)

    def to_dict(self, *, all: bool = True) -> dict[str, Any]:
        def k(v: VariantKey) -> dict:
            return {
                "id": v.id,
                "kernel": v.kernel,
                "arch": v.arch,
                "spec": v.spec,
                "config": v.config,
                "test": v.test,
            }

        return {
            "baseline": self.baseline.run_id,
            "current": self.current.run_id,
            "exit_code": self.exit_code,
            "status": self.status,
            "status_line": self.status_line,
            "compared_variants": self.compared_variants,
            "current_variants": self.current_variants,
            "regressions": len(self.regressions),
            "regressed_kernels": self.regressed_kernels,
            "improvements": len(self.improvements),
            "changes": [c.to_dict() for c in self.sorted_changes(all=all)],
            "added": [k(v) for v in self.added],
            "removed": [k(v) for v in self.removed],
            "allow_removed": self.allow_removed,
            "not_run": [{"variant": k(n.variant), "reason": n.reason} for n in self.not_run],
            "rematched": [{"base": k(b), "current": k(c)} for b, c in self.rematched],
            "changed": [
                {
                    "base": k(c.base),
                    "current": k(c.current),
                    "matched_by": c.matched_by,
                    "change": c.description,
                }
                for c in self.key_changes
            ],
            "incomparable": [
                {"variant": k(i.variant), "kind": i.kind, "reason": i.reason} for i in self.incomparable
            ],
        }
