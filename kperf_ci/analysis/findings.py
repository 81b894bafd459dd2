"""What every analysis returns: a number, whether it is a problem, why, and what to try."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from kperf_ci.metrics import metric
from kperf_ci.model import Better, Metric


@dataclass(frozen=True)
class Finding:
    """One measured property of a kernel launch.

    ``name`` is the metric suffix: it is stored as ``analysis.<name>``. ``explanation`` is one
    line that states the number in words; ``suggestion`` is empty unless ``flagged``.
    ``details`` holds supporting numbers (per-SM lists, bubbles, ...) for reports; it is not
    stored as metrics.
    """

    name: str
    value: float
    unit: str
    flagged: bool
    explanation: str
    suggestion: str = ""
    better: Better = "none"
    threshold: float | None = None
    details: dict[str, Any] = field(default_factory=dict, compare=False)
    #: wall time it costs one launch, ns (analysis.apply_cost_floor); None when unknown. Ranks
    #: findings at suite scale: the costliest are the ones worth an author's time.
    cost_ns: float | None = None

    def to_metric(self) -> Metric:
        """The stored metric: unit and direction from the catalogue, as every producer's."""
        return metric(f"analysis.{self.name}", self.value)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        mark = "FLAG" if self.flagged else "ok  "
        out = f"[{mark}] {self.name} = {_fmt(self.value)} {self.unit}: {self.explanation}"
        if self.flagged and self.suggestion:
            out += f"\n       -> {self.suggestion}"
        return out


def _fmt(v: float) -> str:
    if v != v:  # NaN
        return "nan"
    if abs(v) >= 1000 or v == int(v):
        return f"{v:.0f}"
    return f"{v:.3g}"


def to_metrics(findings: Iterable[Finding]) -> list[Metric]:
    """Findings as Metric(kind="analysis"), so they are stored and compared like any metric.
    Only finite values become metrics."""
    out = []
    for f in findings:
        if f.value == f.value and abs(f.value) != float("inf"):
            out.append(f.to_metric())
    return out


#: the artifact name under which a variant keeps its findings (JSON from :func:`findings_to_json`)
ARTIFACT = "findings"
_KEEP = ("name", "value", "unit", "flagged", "explanation", "suggestion", "better", "threshold", "cost_ns")


def findings_to_json(findings: Iterable[Finding]) -> str:
    """Findings as a JSON list for a variant's ``findings`` artifact. ``details`` (per-SM lists,
    bubbles) stay out: they can be large and the stored timeline reproduces them. NaN becomes
    null."""
    rows = []
    for f in findings:
        d = {k: getattr(f, k) for k in _KEEP}
        if d["value"] != d["value"]:
            d["value"] = None
        rows.append(d)
    return json.dumps(rows, sort_keys=True, separators=(",", ":"))


def findings_from_json(text: str) -> list[Finding]:
    """Inverse of :func:`findings_to_json`; unknown keys are ignored so older readers cope."""
    out = []
    for d in json.loads(text):
        kw = {k: d[k] for k in _KEEP if k in d}
        kw["value"] = float("nan") if kw.get("value") is None else float(kw["value"])
        out.append(Finding(**kw))
    return out


def flagged(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.flagged]


#: Flagged findings listed per kernel where many kernels are summarised (``kperf show``, the
#: report's summary, the PR comment); the setting ``findings_per_kernel`` changes it. Three: a
#: launch rarely has more than three distinct problems, and wave findings of one grid repeat.
DEFAULT_PER_KERNEL = 3


def ranked(findings: Iterable[Finding]) -> list[Finding]:
    """Flagged findings first, the costliest first (unknown cost after every known one, in
    their order), then the rest in their order."""
    items = list(findings)

    def key(i: int) -> tuple:
        f = items[i]
        cost = f.cost_ns if f.cost_ns is not None and f.cost_ns == f.cost_ns else None
        return (not f.flagged, cost is None, -(cost or 0.0), i)

    return [items[i] for i in sorted(range(len(items)), key=key)]


def capped(findings: Iterable[Finding], cap: int) -> tuple[list[Finding], int]:
    """(the ``cap`` costliest flagged findings, how many more are flagged). Findings that give
    the same advice are one problem seen from two sides (``wave_tail`` and ``wave_idle`` of one
    grid): only the costliest of them takes a place under the cap."""
    every = flagged(ranked(findings))
    shown: list[Finding] = []
    advice: set[str] = set()
    for f in every:
        if len(shown) == cap:
            break
        if f.suggestion and f.suggestion in advice:
            continue
        advice.add(f.suggestion)
        shown.append(f)
    return shown, len(every) - len(shown)


def pct(x: float) -> str:
    return f"{100.0 * x:.1f}%"


def us(ns: float) -> str:
    return f"{ns / 1000.0:.1f} us"
