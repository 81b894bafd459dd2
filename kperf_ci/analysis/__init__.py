"""Intra-kernel analyses: pure functions from a :class:`Timeline` (per-CTA/per-warp region
records) or static launch numbers to :class:`Finding` s (a number, a flag, a one-line
explanation and a suggestion), stored as ``Metric(kind="analysis", name="analysis.<name>")``.

- occupancy.sm_utilization       -> sm_utilization
- imbalance.load_imbalance       -> sm_finish_skew, cta_duration_max_over_median, cta_duration_cv,
                                    sm_work_max_over_mean
- waves.wave_quantization        -> waves, ctas_per_sm, wave_tail, wave_idle
                                    (+ wave_tail_idle_measured, ctas_per_sm_observed with a timeline)
- phases.prologue_epilogue       -> prologue_fraction, epilogue_fraction
- overlap.overlap                -> memory_exposed_fraction (flagged), pipeline_bubble_fraction,
                                    mma_busy_fraction, memory_compute_overlap
- launch_gaps.launch_gaps        -> launch_gap_fraction, launch_gap_median_ns, kernel_median_ns

Reading and writing trace files (Proton, kperf timelines, kernel records, Perfetto) is
:mod:`kperf_ci.traces`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from kperf_ci.model import Metric

from .findings import Finding, flagged, to_metrics
from .imbalance import load_imbalance
from .launch_gaps import KernelRecord, launch_gaps
from .occupancy import sm_busy, sm_utilization
from .overlap import overlap
from .phases import prologue_epilogue
from .timeline import Timeline, from_region_result
from .waves import wave_quantization

__all__ = [
    "Finding",
    "KernelRecord",
    "LaunchConfig",
    "Timeline",
    "analyze_timeline",
    "analysis_metrics",
    "apply_cost_floor",
    "flagged",
    "from_region_result",
    "launch_gaps",
    "load_imbalance",
    "overlap",
    "prologue_epilogue",
    "sm_utilization",
    "to_metrics",
    "wave_quantization",
]

#: When a finding is flagged (`kperf analyze --threshold NAME=V` overrides one): a finding's own
#: bar, not a regression threshold between two runs (those are metrics.DEFAULT_THRESHOLDS).
FLAG_THRESHOLDS: dict[str, float] = {
    "sm_utilization": 0.80,  # flag below
    "sm_finish_skew": 0.10,  # flag above (the rest too)
    "wave_idle": 0.10,
    "prologue_fraction": 0.20,
    "epilogue_fraction": 0.20,
    "memory_exposed_fraction": 0.25,
    "pipeline_bubble_fraction": 0.25,  # only when no memory regions are tracked
    "launch_gap_fraction": 0.20,
    # a finding of one launch is flagged only when it costs at least this much wall time: a
    # 0.2 us finish skew on a 0.7 us kernel is true and not worth an author's attention
    "min_cost_ns": 1000.0,
}


def _cost_ns(f: Finding, span_ns: float, by_name: dict[str, Finding]) -> float | None:
    """Wall time a flagged finding costs one launch (None: unknown, never floored)."""
    d = f.details
    if f.name == "sm_utilization":
        return (1.0 - f.value) * span_ns
    if f.name == "sm_finish_skew" and "finish_max_ns" in d:
        return float(d["finish_max_ns"]) - float(d["finish_median_ns"])
    if f.name == "wave_tail_idle_measured" and d.get("num_sms"):
        return float(d["idle_sm_ns"]) / float(d["num_sms"])
    if f.name in ("wave_tail", "wave_idle", "grid_fill") and "wave_idle" in by_name:
        return by_name["wave_idle"].value * span_ns
    if f.unit == "fraction" and f.name in (
        "prologue_fraction",
        "epilogue_fraction",
        "memory_exposed_fraction",
        "pipeline_bubble_fraction",
    ):
        return f.value * span_ns
    return None


def apply_cost_floor(findings: list[Finding], span_ns: float, min_cost_ns: float) -> list[Finding]:
    """Unflag findings of one launch that cost less than ``min_cost_ns`` of wall time; the
    number and the reason stay in the explanation. Every flagged finding whose cost is known
    carries it (``cost_ns``): reports rank findings by it."""
    if span_ns <= 0:
        return findings
    by_name = {f.name: f for f in findings}
    out = []
    for f in findings:
        cost = _cost_ns(f, span_ns, by_name) if f.flagged else None
        if cost is not None:
            f = replace(f, cost_ns=cost)
        if cost is not None and min_cost_ns > 0 and cost < min_cost_ns:
            f = replace(
                f,
                flagged=False,
                suggestion="",
                explanation=f"{f.explanation}; costs ~{cost / 1000:.2f} us per launch, under the "
                f"{min_cost_ns / 1000:.2f} us floor (min_cost_ns): not flagged",
            )
        out.append(f)
    return out


@dataclass(frozen=True)
class LaunchConfig:
    """Static numbers of one launch, as the capture stage knows them (all optional but grid)."""

    grid: int
    num_warps: int | None = None
    registers: int | None = None
    shared_bytes: int | None = None
    arch: str = "sm_90"
    sm_count: int | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LaunchConfig:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d and d[k] is not None})

    def wave_findings(
        self, *, threshold: float, sm_count: int | None = None, timeline: Timeline | None = None
    ) -> list[Finding]:
        """:func:`wave_quantization` of this launch (``sm_count`` overrides the config's)."""
        return wave_quantization(
            self.grid,
            num_warps=self.num_warps,
            registers=self.registers,
            shared_bytes=self.shared_bytes,
            arch=self.arch,
            sm_count=sm_count or self.sm_count,
            timeline=timeline,
            threshold=threshold,
        )


def analyze_timeline(
    tl: Timeline,
    *,
    launch: LaunchConfig | None = None,
    num_sms: int | None = None,
    thresholds: dict[str, float] | None = None,
) -> list[Finding]:
    """Every analysis that applies to one launch's timeline.

    Wave quantization uses ``launch`` (grid, warps, registers, shared memory, arch) when given;
    without it, the grid is the CTAs in the timeline and CTAs per SM the most seen at once.
    A timeline whose ``meta["subset"]`` says it holds only some CTAs of the launch gets only the
    per-CTA analyses (prologue/epilogue, overlap). Findings that cost the launch less than
    ``thresholds["min_cost_ns"]`` of wall time are reported but not flagged."""
    th = {**FLAG_THRESHOLDS, **(thresholds or {})}
    n_sms = num_sms or tl.num_sms or (launch.sm_count if launch else None)
    if not len(tl):
        return []
    out: list[Finding] = []
    if not tl.meta.get("subset"):  # a few CTAs kept from a launch: whole-grid analyses would mislead
        out += _whole_grid(tl, launch, n_sms, th)
    out += prologue_epilogue(
        tl, prologue_threshold=th["prologue_fraction"], epilogue_threshold=th["epilogue_fraction"]
    )
    out += overlap(
        tl,
        exposed_threshold=th["memory_exposed_fraction"],
        bubble_threshold=th["pipeline_bubble_fraction"],
    )
    return apply_cost_floor(out, tl.span_ns, th["min_cost_ns"])


def _whole_grid(
    tl: Timeline, launch: LaunchConfig | None, n_sms: int | None, th: dict[str, float]
) -> list[Finding]:
    """The analyses that need every CTA of the launch: occupancy, imbalance, waves."""
    out = [sm_utilization(tl, num_sms=n_sms, threshold=th["sm_utilization"])]
    out += load_imbalance(tl, num_sms=n_sms, threshold=th["sm_finish_skew"])
    spans = tl.cta_spans()
    if launch is not None and (launch.num_warps or 0) > 0:
        out += launch.wave_findings(threshold=th["wave_idle"], sm_count=n_sms, timeline=tl)
    elif n_sms:
        k = int(sm_busy(tl, n_sms).max_resident.max())
        grid = tl.meta.get("grid")
        n_grid = int(np.prod(grid)) if grid else len(spans)
        out += wave_quantization(
            max(n_grid, len(spans)),
            ctas_per_sm=max(k, 1),
            sm_count=n_sms,
            timeline=tl,
            threshold=th["wave_idle"],
        )
    return out


def analysis_metrics(
    source: Timeline | Any,
    *,
    launch: LaunchConfig | None = None,
    num_sms: int | None = None,
    thresholds: dict[str, float] | None = None,
) -> list[Metric]:
    """``Metric(kind="analysis", name="analysis.<x>")`` for every finding of one launch, from a
    Timeline or the capture stage's RegionResult: what the capture stage adds to a
    VariantResult so the numbers are stored and compared like any other metric."""
    tl = source if isinstance(source, Timeline) else from_region_result(source, num_sms=num_sms)
    return to_metrics(analyze_timeline(tl, launch=launch, num_sms=num_sms, thresholds=thresholds))
