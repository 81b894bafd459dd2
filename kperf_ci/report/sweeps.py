"""Sweep plots: time.median against the calls of one benchmark site, head beside baseline.

A benchmark script (Liger-Kernel's ``benchmark/scripts/benchmark_*.py``) times one kernel with
``triton.testing.do_bench`` over a sweep of sizes; kperf stores one variant per call, with a
``bench_call`` artifact (``canonical_json``)::

    {"script": "benchmark/scripts/benchmark_rms_norm.py", "site": "utils.run_speed_benchmark#1",
     "index": 7, "label": "bf16:2048x4096", "x": 2048}

``index`` orders the calls of one script run, ``label`` describes the call, ``x`` is there when
the swept value is a number. Imported Liger CSVs (``kperf import all_benchmark_data.csv``) write
the same shape, so one plot serves both. The artifact comes from a database, which is data: a
malformed one is passed over, and every text is escaped by the SVG helpers.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup

from ..model import BENCH_CALL, VariantResult
from .plots import sweep_svg
from .view import Report

#: Most sweep plots on one report page: a run of 2,000 script calls in 300 sites stays readable
#: and fast; the section says how many were left out.
MAX_SWEEPS = 60


@dataclass(frozen=True)
class BenchCall:
    script: str
    site: str
    index: int
    label: str
    x: float | None


@dataclass
class Sweep:
    """One (script, site, kernel): the calls of each side, in index order."""

    script: str
    site: str
    kernel: str
    head: list[tuple[BenchCall, float]] = field(default_factory=list)
    base: list[tuple[BenchCall, float]] = field(default_factory=list)
    svg: Markup | None = None

    @property
    def title(self) -> str:
        return f"{self.kernel}: {self.script} {self.site}"


def parse_bench_call(raw: str | None) -> BenchCall | None:
    """The artifact as a BenchCall; None when absent or not of the documented shape."""
    if not raw:
        return None
    try:
        d: Any = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(d, dict):
        return None
    script, site, index, label, x = (d.get(k) for k in ("script", "site", "index", "label", "x"))
    if not (isinstance(script, str) and isinstance(site, str) and isinstance(label, str)):
        return None
    if not isinstance(index, int) or isinstance(index, bool):
        return None
    num = isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(float(x))
    return BenchCall(script, site, index, label, float(x) if num else None)


def _point(r: VariantResult | None) -> tuple[BenchCall, float] | None:
    if r is None or not r.artifacts:
        return None
    call = parse_bench_call(r.artifacts.get(BENCH_CALL))
    m = r.metric("time.median")
    if call is None or m is None or not math.isfinite(m.value):
        return None
    return call, m.value


def sweeps(report: Report) -> tuple[list[Sweep], int]:
    """The report's sweeps (at most MAX_SWEEPS, in script/site/kernel order) and how many more
    there were. Empty when no variant carries a ``bench_call`` artifact, so a report without
    benchmark-script runs is byte-for-byte what it was."""
    groups: dict[tuple[str, str, str], Sweep] = {}
    for v in report.variants:
        for side, r in (("head", v.cur), ("base", v.base)):
            p = _point(r)
            if p is None:
                continue
            k = (p[0].script, p[0].site, v.key.kernel)
            sw = groups.get(k) or groups.setdefault(k, Sweep(*k))
            (sw.head if side == "head" else sw.base).append(p)
    ordered = [groups[k] for k in sorted(groups)]
    shown = ordered[:MAX_SWEEPS]
    compared = report.baseline is not None
    for sw in shown:
        sw.head.sort(key=lambda p: p[0].index)
        sw.base.sort(key=lambda p: p[0].index)
        sw.svg = sweep_svg(_series(sw, compared), _labels(sw), unit="ms", title=sw.title)
    return shown, len(ordered) - len(shown)


def _labels(sw: Sweep) -> list[str] | None:
    """Category labels of the x axis (None: numeric x). Numeric only when every call of both
    sides has an x; else the labels in index order, head's first, then any only the baseline has."""
    calls = [c for c, _ in sw.head + sw.base]
    if all(c.x is not None for c in calls):
        return None
    return list(dict.fromkeys(c.label for c in calls))


def _series(sw: Sweep, compared: bool) -> list[tuple[str, str, list[tuple[float | str, float]]]]:
    """(css class, legend name, points) per side; points keyed by x, or by label when categorical."""
    numeric = _labels(sw) is None

    def pts(side: Sequence[tuple[BenchCall, float]]) -> list[tuple[float | str, float]]:
        return [((c.x if numeric and c.x is not None else c.label), y) for c, y in side]

    out = [("cur", "head", pts(sw.head))] if sw.head else []
    if compared and sw.base:
        out.insert(0, ("base", "baseline", pts(sw.base)))
    return out
