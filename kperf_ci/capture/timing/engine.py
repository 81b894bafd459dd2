"""Trustworthy device timing for GPU mode.

What a sample is: the CUPTI duration of the kernels one call of the callable launches
(``kperf_ci.capture.timing.cupti``), or where CUPTI is not available the device time between two
CUDA events recorded on the *current* stream around one call (or one replay of a CUDA graph
holding that call). Before each
sample a buffer of twice the L2 size is zeroed on the same stream, *before* the start event, so
the flush is never inside the timed window and the GPU is busy while the host enqueues the
timed call (no launch gap is timed either).

The loop (``time_callable``):

1. Warm-up in batches for at least ``warmup_min_s`` and until consecutive batch medians agree
   within ``warmup_rel_tol`` (clocks have ramped, caches and compilation are done), or
   ``warmup_budget_s`` is spent.
2. Method: callables whose warm median is under ``graph_threshold_ms``, or whose host side takes
   at least ``host_bound_rel`` of their device time to issue, are captured into a CUDA graph
   (one graph per input set) and replayed; if capture fails, plain events are used and the
   reason is kept in ``TimingResult.warnings``. (The flush below hides the host's work only
   when it runs; on an H100 the layernorm example, 134 MB and so not flushed, 0.053 ms on the
   device and about as long on the host, read 0.058 ms back to back and 0.084 ms paced with
   events, 0.053 ms replayed: benchmarks/results/layernorm_noise.md.)
3. Adaptive repetition in rounds until the distribution-free 95% confidence interval of the
   median is narrower than ``ci_rel_width`` of the median (default 0.5%), the medians of the
   first and second half of the samples agree within that width, and at least ``min_time_s``
   was measured -- or ``budget_s`` (default 2 s per variant) is spent. All samples are kept.
   (On an H100 under its power cap, compute-bound kernels drift by several percent over tens
   of milliseconds: a CI reached within 10 ms described a moving target, and fresh processes
   disagreed by up to 10%. The time floors make every median cover a comparable window.)
4. Pacing: after every batch the loop idles so that the GPU is busy at most ``duty_cycle``
   (default 0.5) of the time, keeping compute-bound kernels under the power cap (see steps.pace).
   Budgets count wall time, ``min_time_s`` counts busy time. The idle time is decided per
   batch from the device's own work (calls and flushes), not as a fixed share of host time: a
   short kernel whose host side is slower than its device side is not paced at all.
   Short kernels (under ``short_kernel_ms``) whose CI cannot reach the target within the budget
   stop once ``min_time_s`` is measured ("futile", with a warning), instead of spending the
   budget for a CI that shrinks as 1/sqrt(n).
5. Re-warm: every timed batch follows an idle gap (pacing, the stop checks, state reads), and
   on an H100 the first call after a gap ran 1.2-2.2x the median (clock dropped while idle,
   empty queue). So each batch starts with ~``rewarm_ms`` of calls queued right before it; they
   are timed but kept apart (``TimingResult.discarded_ms``, ``discard_reason``).
6. GPU state (SM/memory clock, temperature) is read before and after; a move is a warning.

``time_interleaved`` does the same for several callables in one loop, A,B then B,A in
alternating rounds, so that drift (clocks, temperature) lands on every variant alike.

Loops with another schedule reuse the steps above through a small public API, so that every
measurement warms, flushes and re-warms by the same rules: :class:`Variant` (one callable under
measurement), :func:`should_flush` (whether the L2 flush above applies), :func:`warmup` (step 1),
:func:`choose_method` (step 2) and :func:`rewarm_calls` (step 5), with :class:`TimingConfig`, live
in ``kperf_ci.capture.timing.steps`` and are importable from here.
``kperf_ci.capture.timing.interleaved`` times base and head in pairs this way.

The device sits behind one small interface, :class:`DeviceBackend` (markers, elapsed time,
sync, flush, graph capture, state, a host clock), in ``kperf_ci.capture.timing.backend``.
:class:`CudaBackend` implements it with torch; the unit tests implement it with a fake clock and
run on the CPU. The statistics (median and its distribution-free interval) are ``kperf_ci.sample_stats``'.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from kperf_ci.capture.timing.backend import (
    CudaBackend,
    DeviceBackend,
    GraphReplayMismatch,
    default_backend,
    measure_with_fallback,
)
from kperf_ci.capture.timing.steps import (
    TimingConfig,
    Variant,
    choose_method,
    device_busy_s,
    mark_warm,
    pace,
    rewarm_calls,
    round_size,
    sample_batch,
    should_flush,
    warmup,
)
from kperf_ci.metrics import metric
from kperf_ci.model import Metric
from kperf_ci.sample_stats import median, median_ci

# the public API of the timing stage, wherever each piece lives
__all__ = [
    "CudaBackend",
    "DeviceBackend",
    "GraphReplayMismatch",
    "TimingConfig",
    "TimingResult",
    "Variant",
    "choose_method",
    "ci_ok",
    "default_backend",
    "drift_warning",
    "measure_with_fallback",
    "interleaved_order",
    "rewarm_calls",
    "should_flush",
    "state_warnings",
    "time_callable",
    "time_host_clock",
    "time_interleaved",
    "warmup",
]


# --------------------------------------------------------------------------------------------
# results


@dataclass
class TimingResult:
    """All samples (ms) of one variant, their median with its confidence interval, and how."""

    samples_ms: list[float]
    median: float
    ci_low: float
    ci_high: float
    method: str  # "cupti" (kernel durations), "events" or "graph"
    n: int
    warnings: list[str] = field(default_factory=list)
    gpu_state_start: dict[str, Any] = field(default_factory=dict)
    gpu_state_end: dict[str, Any] = field(default_factory=dict)
    flushed_l2: bool = False
    warmup_calls: int = 0
    warmup_converged: bool = False
    stopped_by: str = ""  # "ci", "budget", "max_samples" or "futile" (a short kernel, see futile)
    elapsed_s: float = 0.0  # host seconds spent measuring (after warm-up)
    # calls timed right after an idle gap, before each batch, and left out of every statistic
    discarded_ms: list[float] = field(default_factory=list)
    discard_reason: str = ""
    # method "cupti": CUDA events around the same calls, sample by sample (what do_bench reads)
    event_samples_ms: list[float] = field(default_factory=list)
    method_note: str = ""  # why the method is not CUPTI, where it is not

    @property
    def mean(self) -> float:
        return statistics.fmean(self.samples_ms) if self.samples_ms else math.nan

    @property
    def min(self) -> float:
        return min(self.samples_ms) if self.samples_ms else math.nan

    @property
    def iqr(self) -> float:
        if len(self.samples_ms) < 2:
            return 0.0
        q = statistics.quantiles(self.samples_ms, n=4, method="inclusive")
        return q[2] - q[0]

    @property
    def cv(self) -> float:
        if len(self.samples_ms) < 2 or self.mean == 0:
            return 0.0
        return statistics.stdev(self.samples_ms) / self.mean

    @property
    def ci_rel_width(self) -> float:
        return (self.ci_high - self.ci_low) / self.median if self.median else math.inf

    def to_metrics(self) -> list[Metric]:
        """The time.* metrics of METRICS.md."""
        ms = [
            ("time.median", self.median),
            ("time.mean", self.mean),
            ("time.min", self.min),
            ("time.iqr", self.iqr),
            ("time.ci_low", self.ci_low),
            ("time.ci_high", self.ci_high),
        ]
        out = [metric(name, v) for name, v in ms]
        out.append(metric("time.cv", self.cv))
        # 1 when the samples are CUDA-graph replays: compare notes a method change between runs,
        # since a replay leaves out host time that plain events can include
        out.append(metric("time.graph", float(self.method == "graph")))
        # 1 when the samples are CUPTI kernel durations (no launch overhead): a run timed with
        # events reads 2-3 us higher on an H100, so compare names a change of method
        out.append(metric("time.cupti", float(self.method == "cupti")))
        # 1 when each call followed an L2 flush by reading (backend.L2_FLUSH): a run flushed by
        # zeroing (kperf-ci before, do_bench) reads memory-bound kernels higher, so compare says so
        out.append(metric("time.l2_read_flush", float(self.flushed_l2)))
        return out

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(mean=self.mean, min=self.min, iqr=self.iqr, cv=self.cv)
        return d


# --------------------------------------------------------------------------------------------
# checks on a sample set (pure)


def ci_ok(xs: Sequence[float], cfg: TimingConfig) -> bool:
    """The median's CI is narrow enough AND the two halves of the samples agree within that
    width (a drifting device can give a narrow CI of a moving target)."""
    if len(xs) < cfg.min_samples:
        return False
    xs = np.asarray(xs, dtype=np.float64)  # once: a check looks at thousands of samples
    lo, hi = median_ci(xs, cfg.confidence)
    m = median(xs)
    if not (m > 0 and (hi - lo) / m <= cfg.ci_rel_width):
        return False
    half = len(xs) // 2
    return abs(median(xs[:half]) - median(xs[half:])) / m <= cfg.ci_rel_width


def futile(v: Variant, cfg: TimingConfig, spent_s: float, budget_s: float) -> bool:
    """A short kernel (warm median under ``short_kernel_ms``) whose CI cannot get narrow enough:
    after ``min_time_s``, the CI of the median, shrinking as 1/sqrt(n) over the rest of the
    budget at the rate of samples so far, would still be wider than ``futile_rel`` times
    ``ci_rel_width``; or ``short_max_samples`` are taken. Longer kernels keep the full budget."""
    if not (0 < v.warm_median < cfg.short_kernel_ms) or v.t_spent < cfg.min_time_s:
        return False
    n = len(v.samples)
    if n >= cfg.short_max_samples:
        return True
    if n < cfg.min_samples or spent_s <= 0:
        return False
    xs = np.asarray(v.samples, dtype=np.float64)
    lo, hi = median_ci(xs, cfg.confidence)
    m = median(xs)
    if not m > 0:
        return False
    n_end = n * max(budget_s / spent_s, 1.0)
    return (hi - lo) / m * math.sqrt(n / n_end) > cfg.futile_rel * cfg.ci_rel_width


def interleaved_order(names: Sequence[str], round_index: int) -> list[str]:
    """A,B,C in even rounds and C,B,A in odd rounds."""
    return list(names) if round_index % 2 == 0 else list(reversed(names))


def state_warnings(start: Mapping[str, Any], end: Mapping[str, Any], cfg: TimingConfig) -> list[str]:
    out: list[str] = []
    for key, label in (("sm_clock_mhz", "SM clock"), ("mem_clock_mhz", "memory clock")):
        a, b = start.get(key), end.get(key)
        if a and b and abs(b - a) / a > cfg.clock_warn_rel:
            out.append(f"{label} moved during timing: {a} -> {b} MHz")
    a, b = start.get("temperature_c"), end.get("temperature_c")
    if a is not None and b is not None and abs(b - a) > cfg.temp_warn_c:
        out.append(f"temperature moved during timing: {a} -> {b} C")
    for s in (start, end):
        reasons = s.get("throttle_reasons")
        if reasons:
            out.append(f"clock throttle reasons active: {', '.join(reasons)}")
            break
    return out


def drift_warning(samples: Sequence[float], cfg: TimingConfig) -> str | None:
    """Median of the last third against the first third (needs >= 30 samples)."""
    n = len(samples)
    if n < 30:
        return None
    samples = np.asarray(samples, dtype=np.float64)
    third = n // 3
    a, b = median(samples[:third]), median(samples[-third:])
    if a > 0 and abs(b - a) / a > cfg.drift_warn_rel:
        return f"drift during timing: median of first third {a:.6g} ms, last third {b:.6g} ms"
    return None


# --------------------------------------------------------------------------------------------
# the loop


def _ci_width(samples: list[float], lo: float, hi: float) -> str:
    """The CI's width relative to the median, for a warning; a median of 0 (no clock tick) has
    no relative width, and a warning must never be what raises."""
    m = median(samples)
    return f"{(hi - lo) / m:.2%}" if m > 0 else "unbounded, the median is 0"


def _finish(v: Variant, be: DeviceBackend, cfg: TimingConfig, flush: bool, stopped_by: str) -> TimingResult:
    end = be.state()
    lo, hi = median_ci(v.samples, cfg.confidence)
    warnings = list(v.warnings) + state_warnings(v.state_start, end, cfg)
    if (d := drift_warning(v.samples, cfg)) is not None:
        warnings.append(d)
    if stopped_by == "futile" and v.samples:
        warnings.append(
            f"stopped early: a short kernel whose CI of the median ({_ci_width(v.samples, lo, hi)} with "
            f"{len(v.samples)} samples) would not reach {cfg.ci_rel_width:.2%} within the budget"
        )
    elif stopped_by != "ci" and v.samples:
        warnings.append(
            f"stopped by {stopped_by} before the CI of the median reached {cfg.ci_rel_width:.2%} "
            f"(got {_ci_width(v.samples, lo, hi)} with {len(v.samples)} samples)"
        )
    return TimingResult(
        samples_ms=list(v.samples),
        median=median(v.samples),
        ci_low=lo,
        ci_high=hi,
        method=v.method,
        n=len(v.samples),
        warnings=warnings,
        gpu_state_start=v.state_start,
        gpu_state_end=end,
        flushed_l2=flush,
        warmup_calls=v.warm_calls,
        warmup_converged=v.warm_converged,
        stopped_by=stopped_by,
        elapsed_s=v.t_spent,
        discarded_ms=list(v.discarded),
        event_samples_ms=list(v.event_samples),
        discard_reason=(
            f"{len(v.discarded)} re-warm calls, timed right after idle gaps (pacing, checks) and "
            "left out: the first calls after a gap run slow (clock dropped while idle, empty queue)"
            if v.discarded
            else ""
        ),
    )


def time_callable(
    fn: Callable[..., Any],
    cfg: TimingConfig | None = None,
    *,
    device: Any = None,
    inputs: Sequence[Sequence[Any]] | None = None,
    backend: DeviceBackend | None = None,
) -> TimingResult:
    """Time `fn()` (or `fn(*inputs[i])`, rotating over the input sets) on the device.

    The callable must enqueue its work on the current stream and return without synchronizing.
    """
    return time_interleaved(
        {"fn": fn}, cfg, device=device, inputs={"fn": inputs} if inputs else None, backend=backend
    )["fn"]


def time_interleaved(
    fns: Mapping[str, Callable[..., Any]],
    cfg: TimingConfig | None = None,
    *,
    device: Any = None,
    inputs: Mapping[str, Sequence[Sequence[Any]]] | None = None,
    backend: DeviceBackend | None = None,
) -> dict[str, TimingResult]:
    """Time several callables in one interleaved loop: rounds A,B,... then ...,B,A.

    Each variant gets the same per-variant budget; the loop stops when every variant's median
    CI is narrow enough or the total budget (budget_s x number of variants) is spent. Samples
    of variant X in round r are ``results[X].samples_ms[r*round_samples:(r+1)*round_samples]``.
    """
    cfg = cfg or TimingConfig()
    if not fns:
        return {}
    be = backend if backend is not None else default_backend(device)
    out, note = measure_with_fallback(be, lambda b: _time_interleaved(fns, cfg, b, inputs or {}))
    for r in out.values():
        r.method_note = note or ""
    return out


def _time_interleaved(
    fns: Mapping[str, Callable[..., Any]],
    cfg: TimingConfig,
    be: DeviceBackend,
    inputs: Mapping[str, Sequence[Sequence[Any]]],
) -> dict[str, TimingResult]:
    names = list(fns)
    vs = {name: Variant(name, fns[name], inputs.get(name)) for name in names}
    flush = should_flush(cfg, be)

    # warm-up, interleaved as well, so no variant gets a colder or hotter GPU
    for name in interleaved_order(names, 0):
        warmup(vs[name], be, cfg, flush)
    for name in names:
        choose_method(vs[name], be, cfg, flush)
    for name in names:  # state after warm-up: what the measured part starts from
        vs[name].state_start = be.state()

    t0 = be.host_time()
    total_budget = cfg.budget_s * len(names)
    stopped_by = "ci"
    r = 0
    while True:
        for name in interleaved_order(names, r):
            v = vs[name]
            ts = be.host_time()
            v.samples.extend(sample_batch(v, be, round_size(v, be, cfg, flush), flush, rewarm_calls(v, cfg)))
            v.event_samples.extend(v.batch_events)
            busy = be.host_time() - ts
            v.t_spent += busy
            pace(be, device_busy_s(v, busy), cfg, busy)  # idle by the device's share, see pace
        r += 1
        ok = {n: vs[n].t_spent >= cfg.min_time_s and ci_ok(vs[n].samples, cfg) for n in names}
        if all(ok.values()):
            stopped_by = "ci"
            break
        spent = be.host_time() - t0
        if spent >= total_budget:
            stopped_by = "budget"
            break
        if any(len(vs[n].samples) >= cfg.max_samples for n in names):
            stopped_by = "max_samples"
            break
        if all(ok[n] or futile(vs[n], cfg, spent, total_budget) for n in names):
            stopped_by = "futile"
            break
    mark_warm(be)  # the device has been busy until now: the next variant warms briefly
    return {name: _finish(vs[name], be, cfg, flush, stopped_by) for name in names}


# --------------------------------------------------------------------------------------------
# baselines the benchmarks compare against


def time_host_clock(
    fn: Callable[[], Any],
    n: int = 100,
    warmup: int = 10,
    sync: Callable[[], None] | None = None,
) -> list[float]:
    """Naive host-clock timing (pytest-benchmark style): perf_counter around call + sync, ms."""
    if sync is None:
        import torch

        sync = torch.cuda.synchronize
    for _ in range(warmup):
        fn()
    sync()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        sync()
        out.append((time.perf_counter() - t) * 1000.0)
    return out
