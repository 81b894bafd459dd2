"""The result of one instrumented launch: per-region statistics in cycles (and ns with the
clock), the clock and its source, spans, drops and the partition check (:func:`build_result`),
from the launch's :class:`~kperf_ci.traces.kernel_trace.KernelTrace`.

Clock. Cycles are exact; ns/ms need the SM clock during the kernel. Preferred: the fit on the
launch's raw device buffer (:func:`kperf_ci.traces.clock.fit_clock`, ``clock_source="trace"``);
else the stamps in the trace (:func:`kperf_ci.traces.clock.measured_clock_ghz`); else NVML or
the device's nominal clock, flagged in the warnings.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from kperf_ci.capture.regions.ttgir_pass import PHASE_REGIONS, WARPS_PER_GROUP, RegionConfig
from kperf_ci.metrics import metric
from kperf_ci.model import Metric
from kperf_ci.traces.clock import fit_clock, kernel_span_ns, measured_clock_ghz, spans_from_raw
from kperf_ci.traces.kernel_trace import KernelTrace
from kperf_ci.traces.proton_chrome import dropped_from_log
from kperf_ci.traces.timeline_file import kernel_trace_npz


@dataclass
class RegionStats:
    name: str
    count: int  # slices recorded (units x occurrences)
    units: int  # distinct (CTA, unit) that recorded it
    cycles_median: float
    cycles_mean: float
    cycles_p10: float
    cycles_p90: float
    cycles_min: float
    cycles_max: float
    total_cycles: float
    fraction: float | None  # total cycles / total cycles of the kernel region
    ns_median: float | None


@dataclass
class RegionResult:
    """Regions of one kernel launch: per-region statistics and the compact per-slice timeline."""

    kernel: str
    config: RegionConfig
    regions: dict[str, RegionStats]
    trace: KernelTrace
    clock_ghz: float | None  # SM cycles per ns used for ns/ms
    clock_source: str  # "trace" (measured), "nvml", "device" or "none"
    clock_trace_ghz: float | None = None
    clock_nvml_mhz: float | None = None
    span_ns: float | None = None  # first CTA start to last CTA end (instrumented launch)
    spans_ns: dict[str, float] = field(default_factory=dict)  # traces.clock.spans_from_raw
    clock_fit: dict[str, Any] = field(default_factory=dict)  # the fit behind clock_source "trace"
    n_ctas: int = 0
    grid: tuple[int, int, int] | None = None
    dropped_events: int = 0
    warnings: list[str] = field(default_factory=list)
    partition: dict[str, Any] = field(default_factory=dict)  # sum of phases vs kernel
    trace_path: str | None = None
    host_seconds: float | None = None

    def to_metrics(self) -> list[Metric]:
        """region.<name>.cycles / .fraction / .ms (METRICS.md)."""
        out: list[Metric] = []
        for name, st in self.regions.items():
            out.append(metric(f"region.{name}.cycles", st.cycles_median))
            if st.fraction is not None:
                out.append(metric(f"region.{name}.fraction", st.fraction))
            if st.ns_median is not None:
                out.append(metric(f"region.{name}.ms", float(st.ns_median) / 1e6))
        return out

    def timeline_bytes(self) -> bytes:
        """The stored form of this launch: timeline.npz (:mod:`kperf_ci.traces.timeline_file`)."""
        header = {
            "kernel": self.kernel,
            "clock_ghz": self.clock_ghz,
            "clock_source": self.clock_source,
            "granularity": self.config.granularity,
            "dropped_events": self.dropped_events,
            "grid": self.grid,
            "config": asdict(self.config),
        }
        return kernel_trace_npz(self.trace, header)

    def summary(self) -> str:
        lines = [
            f"{self.kernel}: {self.n_ctas} CTAs, clock {self.clock_ghz or float('nan'):.3f} GHz "
            f"({self.clock_source}), dropped {self.dropped_events}"
        ]
        for st in self.regions.values():
            frac = "" if st.fraction is None else f" {st.fraction:6.1%}"
            ns = "" if st.ns_median is None else f" {st.ns_median / 1000:9.2f} us"
            lines.append(f"  {st.name:<12} {st.cycles_median:12.0f} cyc{ns}{frac}  n={st.count}")
        return "\n".join(lines)


def _stats(kt: KernelTrace, clock_ghz: float | None) -> dict[str, RegionStats]:
    out: dict[str, RegionStats] = {}
    kid = kt.region_id("kernel")
    ktotal = float(kt.dur[kt.region == kid].sum()) if kid is not None else None
    for rid, name in enumerate(kt.names):
        sel = kt.region == rid
        d = kt.dur[sel].astype(np.float64)
        if d.size == 0:
            continue
        units = np.unique(
            np.stack([kt.cta[sel].astype(np.int64), kt.unit[sel].astype(np.int64)]), axis=1
        ).shape[1]
        med = float(np.median(d))
        out[name] = RegionStats(
            name=name,
            count=int(d.size),
            units=int(units),
            cycles_median=med,
            cycles_mean=float(d.mean()),
            cycles_p10=float(np.percentile(d, 10)),
            cycles_p90=float(np.percentile(d, 90)),
            cycles_min=float(d.min()),
            cycles_max=float(d.max()),
            total_cycles=float(d.sum()),
            fraction=(float(d.sum()) / ktotal) if ktotal else None,
            ns_median=(med / clock_ghz) if clock_ghz else None,
        )
    return out


def _partition(kt: KernelTrace) -> dict[str, Any]:
    """Sum of the non-overlapping phase regions against the kernel region, per (CTA, unit)."""
    kid = kt.region_id("kernel")
    phase_ids = [i for i, n in enumerate(kt.names) if PHASE_REGIONS.match(n)]
    if kid is None or not phase_ids:
        return {}
    if "body" in kt.names and len(phase_ids) > 1:
        phase_ids = [kt.region_id("body")]
    key = kt.cta.astype(np.int64) * 65536 + kt.unit.astype(np.int64)
    ksel = kt.region == kid
    kkeys, kinv = np.unique(key[ksel], return_inverse=True)
    kdur = np.zeros(kkeys.size)
    np.add.at(kdur, kinv, kt.dur[ksel])
    psel = np.isin(kt.region, phase_ids)
    pos = np.searchsorted(kkeys, key[psel])
    ok = (pos < kkeys.size) & (kkeys[np.minimum(pos, kkeys.size - 1)] == key[psel])
    pdur = np.zeros(kkeys.size)
    np.add.at(pdur, pos[ok], kt.dur[psel][ok])
    ratio = pdur[kdur > 0] / kdur[kdur > 0]
    if ratio.size == 0:
        return {}
    return {
        "regions": [kt.names[i] for i in phase_ids],
        "median_ratio": float(np.median(ratio)),
        "total_ratio": float(pdur.sum() / kdur.sum()),
        "min_ratio": float(ratio.min()),
        "max_ratio": float(ratio.max()),
    }


def _completeness(kt: KernelTrace, expected_ctas: int | None) -> tuple[int, list[str]]:
    """Slices missing against 'every unit that recorded anything recorded every non-repeating
    region once', plus CTAs absent altogether (against the grid)."""
    warnings = []
    missing = 0
    once = [
        i
        for i, n in enumerate(kt.names)
        if not n.endswith(".iter") and not re.match(r"^(dot|copy|wait)\d+$", n)
    ]
    key = kt.cta.astype(np.int64) * 65536 + kt.unit.astype(np.int64)
    units = np.unique(key)
    for rid in once:
        have = np.unique(key[kt.region == rid]).size
        missing += units.size - have
    if expected_ctas is not None and kt.cta_ids.size < expected_ctas:
        per_cta = units.size / max(kt.cta_ids.size, 1) * len(once)
        absent = expected_ctas - kt.cta_ids.size
        warnings.append(f"{absent} of {expected_ctas} CTAs recorded nothing")
        missing += int(round(absent * per_cta))
    return missing, warnings


def aggregate_units(kt: KernelTrace, granularity: str) -> KernelTrace:
    """Per-warp slices to per-CTA ("cta") or per-warp-group ("warp_group") slices.

    The k-th occurrence of a region in each warp of a group becomes one slice from the earliest
    start to the latest end among those warps. "warp" returns the trace unchanged.
    """
    if granularity == "warp" or kt.n_events == 0 or (granularity == "cta" and not kt.unit.any()):
        return kt  # (warp 0 alone recorded: already one slice per CTA)
    group = np.zeros_like(kt.unit) if granularity == "cta" else (kt.unit // WARPS_PER_GROUP).astype(np.uint16)
    # occurrence index of each slice within its (cta, warp, region), in start order
    order = np.lexsort((kt.start, kt.region, kt.unit, kt.cta))
    c, u, r = (
        kt.cta[order].astype(np.int64),
        kt.unit[order].astype(np.int64),
        kt.region[order].astype(np.int64),
    )
    new_run = np.ones(order.size, dtype=bool)
    new_run[1:] = (c[1:] != c[:-1]) | (u[1:] != u[:-1]) | (r[1:] != r[:-1])
    run_start = np.maximum.accumulate(np.where(new_run, np.arange(order.size), 0))
    occ = np.empty(order.size, dtype=np.int64)
    occ[order] = np.arange(order.size) - run_start
    key = np.stack([kt.cta.astype(np.int64), group.astype(np.int64), kt.region.astype(np.int64), occ])
    keys, inv = np.unique(key, axis=1, return_inverse=True)
    inv = inv.reshape(-1)
    beg = np.full(keys.shape[1], np.iinfo(np.int64).max, dtype=np.int64)
    end = np.full(keys.shape[1], np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(beg, inv, kt.start)
    np.maximum.at(end, inv, kt.start + kt.dur)
    sm = np.zeros(keys.shape[1], dtype=np.uint16)
    sm[inv] = kt.sm
    return KernelTrace(
        kernel=kt.kernel,
        names=list(kt.names),
        region=keys[2].astype(np.uint16),
        cta=keys[0].astype(np.uint32),
        sm=sm,
        unit=keys[1].astype(np.uint16),
        start=beg,
        dur=end - beg,
        cta_ids=kt.cta_ids,
        cta_sm=kt.cta_sm,
        cta_init_ns=kt.cta_init_ns,
        cta_final_ns=kt.cta_final_ns,
        warnings=list(kt.warnings),
    )


def build_result(
    kt: KernelTrace,
    cfg: RegionConfig,
    *,
    log_text: str = "",
    nvml_mhz: float | None = None,
    device_mhz: float | None = None,
    grid: tuple[int, int, int] | None = None,
    trace_path: str | None = None,
    raw: KernelTrace | None = None,
) -> RegionResult:
    """Statistics, clock, span, partition check and drops for one kernel's (per-warp) trace.

    ``raw``: the same launch read from Proton's device buffer (:func:`read_raw_trace`), with
    absolute SM cycles and per-CTA globaltimer stamps: the clock is then fitted from it
    (:func:`kperf_ci.traces.clock.fit_clock`) and the span comes from it."""
    warnings = list(kt.warnings)
    expected = None if grid is None else grid[0] * grid[1] * grid[2]
    missing, w = _completeness(kt, expected)  # per warp, before aggregation
    warnings += w
    kt = aggregate_units(kt, cfg.granularity)
    kreg = "kernel" if "kernel" in kt.names else ("body" if "body" in kt.names else None)
    fit = fit_clock(raw) if raw is not None and raw.n_events else None
    clock_trace = fit.ghz if fit is not None else measured_clock_ghz(kt, kreg)
    if clock_trace:
        clock, source = clock_trace, "trace"
    elif nvml_mhz:
        clock, source = nvml_mhz / 1000.0, "nvml"
    elif device_mhz:
        clock, source = device_mhz / 1000.0, "device"
    else:
        clock, source = None, "none"
    if source in ("nvml", "device"):
        warnings.append(
            f"SM clock for ns/ms taken from {source} ({clock * 1000:.0f} MHz), not measured in the trace "
            "(Proton 3.6 traces have no per-CTA end time): under a power cap the clock during the kernel "
            "can be lower, so ns/ms values and the span are approximate; cycles are exact"
        )
    if clock_trace and nvml_mhz and abs(clock_trace * 1000 - nvml_mhz) / nvml_mhz > 0.05:
        warnings.append(
            f"clock measured in the trace ({clock_trace * 1000:.0f} MHz) differs from NVML's "
            f"({nvml_mhz:.0f} MHz) by more than 5%"
        )
    regions = _stats(kt, clock)
    if "kernel" not in regions and "body" in regions and cfg.kernel:
        b = regions["body"]
        regions = {"kernel": replace(b, name="kernel", fraction=1.0), **regions}
        regions["body"] = replace(b, fraction=1.0)
    logged = dropped_from_log(log_text)
    dropped = max(missing, logged)
    if dropped:
        warnings.append(
            f"{dropped} profiling events were dropped (buffer too small: raise RegionConfig.buffer_size "
            f"or use buffer_type='global'); statistics cover the events kept"
        )
    spans: dict[str, float] = {}
    if fit is not None and raw is not None:
        spans = spans_from_raw(raw, fit, kreg)
        span = spans.get("regions")
    else:
        span = kernel_span_ns(kt, clock, kreg) if clock else None
    return RegionResult(
        kernel=kt.kernel,
        config=cfg,
        regions=regions,
        trace=kt,
        clock_ghz=clock,
        clock_source=source,
        clock_trace_ghz=clock_trace,
        clock_nvml_mhz=nvml_mhz,
        span_ns=span,
        spans_ns=spans,
        clock_fit=(
            {
                "ghz": fit.ghz,
                "ghz_median_sm": fit.ghz_median_sm,
                "n_ctas": fit.n_ctas,
                "n_sms": fit.n_sms,
                "rms_residual_ns": fit.rms_residual_ns,
            }
            if fit is not None
            else {}
        ),
        n_ctas=int(kt.cta_ids.size),
        grid=grid,
        dropped_events=int(dropped),
        warnings=warnings,
        partition=_partition(kt),
        trace_path=trace_path,
    )
