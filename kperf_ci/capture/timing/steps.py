"""The steps of measuring one variant, shared by every loop that times one: each warms, flushes,
picks its method and re-warms by the same rules (``kperf_ci.capture.timing.engine`` runs them in its
interleaved rounds, ``kperf_ci.capture.timing.interleaved`` in pairs of base and head).

:class:`TimingConfig` (how to time), :class:`Variant` (one callable under measurement),
:func:`should_flush` (whether the L2 flush applies), :func:`warmup`, :func:`choose_method`
(events or a CUDA-graph replay) and :func:`rewarm_calls`; the reasons behind each rule are in
``kperf_ci.capture.timing.engine``'s docstring.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Sequence
from dataclasses import InitVar, dataclass, field
from typing import Any

from kperf_ci.capture.timing.backend import DeviceBackend
from kperf_ci.sample_stats import median

__all__ = [
    "TimingConfig",
    "Variant",
    "choose_method",
    "device_busy_s",
    "mark_warm",
    "pace",
    "rewarm_calls",
    "round_size",
    "sample_batch",
    "should_flush",
    "warmup",
]


@dataclass(frozen=True)
class TimingConfig:
    """How to time one variant. Times are milliseconds (device) or seconds (host budgets)."""

    warmup_batch: int = 10  # calls per warm-up batch
    warmup_rel_tol: float = 0.01  # consecutive batch medians must agree within this fraction
    warmup_min_batches: int = 3
    warmup_settle: int = 2  # this many consecutive batch-to-batch agreements end the warm-up
    warmup_min_s: float = 0.3  # host seconds at least: clocks under a power cap move slowly
    warmup_budget_s: float = 1.0  # host seconds at most for warm-up
    # Once this process warmed the same device less than warm_reuse_s ago (host seconds, see
    # mark_warm), the clocks are up already: the next variant's warm-up needs warmup_min_warm_s
    # at least (and still settles, batch to batch, as above).
    warmup_min_warm_s: float = 0.05
    warm_reuse_s: float = 5.0
    # Warm-up batches hold warmup_batch calls or about warmup_batch_ms of device time (by the
    # previous batch's median), whichever is more, up to warmup_batch_max calls: ten 5 us calls
    # give a median too noisy to settle within 1%, and the warm-up then ran to its budget.
    warmup_batch_ms: float = 0.5
    warmup_batch_max: int = 200
    ci_rel_width: float = 0.005  # stop when (ci_high - ci_low) / median <= this
    confidence: float = 0.95
    budget_s: float = 2.0  # host seconds per variant for the measured part
    min_samples: int = 20
    min_time_s: float = 0.25  # host seconds of measurement per variant before the CI may stop it
    max_samples: int = 10000
    # Short kernels (warm median under short_kernel_ms): at most short_max_samples, and once
    # min_time_s is measured, stop when the CI, shrinking as 1/sqrt(n), would still be wider than
    # futile_rel x ci_rel_width at the end of the budget ("futile"; the wider CI is reported as
    # is). A 5 us kernel on an H100 ran 5,230 samples to the 2 s budget for a 5.26% interval.
    short_kernel_ms: float = 0.05
    short_max_samples: int = 3000
    futile_rel: float = 2.0
    round_samples: int = 10  # samples per round between stop checks (and per A/B turn)
    # With CUPTI each round ends in one collection (a profiler stop and start, a few ms of host
    # time): rounds then hold about cupti_round_ms of device work, at most cupti_round_max.
    cupti_round_ms: float = 5.0
    cupti_round_max: int = 200
    flush_l2: bool | None = None  # None: flush unless input_bytes is known to exceed the L2
    input_bytes: int | None = None  # bytes the callable reads (when known): decides flushing
    use_graph: bool = True
    # Without an L2 flush, calls shorter than batch_below_ms are timed batch_calls_ms of device
    # time at a time (at most batch_max_calls calls) between one pair of markers, and a sample
    # is the batch's time per call: fewer markers, and no marker overhead in short samples. With
    # the flush every call keeps its own pair (a batch would time calls on a warm L2).
    batch_below_ms: float = 0.02
    batch_calls_ms: float = 0.1
    batch_max_calls: int = 32
    graph_threshold_ms: float = 0.05  # warm median below this: try CUDA-graph replay
    # host time to issue one timed call (markers, flush and call) at least this fraction of the
    # call's device time: try CUDA-graph replay too, because the host falls behind the GPU and
    # events would time the host. Not lower: on an H100 host the autotuned matmul example took
    # 0.15-0.17 ms to issue vs 0.187 ms on the device and timed alike either way.
    host_bound_rel: float = 1.0
    clock_warn_rel: float = 0.02  # SM clock moved more than this between start and end: warn
    temp_warn_c: float = 5.0  # temperature moved more than this: warn
    drift_warn_rel: float = 0.01  # median of last third vs first third of samples
    duty_cycle: float = 0.5  # after each batch, idle so the GPU is busy at most this fraction of the time
    # Re-warm after every idle gap (pacing, host-side checks): this much device time (ms, by the
    # warm median) of calls, at least rewarm_min_calls and at most round_samples, enqueued right
    # before each timed batch. They are timed but kept apart (TimingResult.discarded_ms).
    rewarm_ms: float = 1.0
    rewarm_min_calls: int = 1


@dataclass(eq=False)  # identity semantics: a variant is one measurement in progress, not a value
class Variant:
    """One callable under measurement: its calls (one per input set), method, samples, state.

    Public because other loops reuse the warm-up and method choice of this module on their own
    schedule (``kperf_ci.capture.timing.interleaved`` times base and head in pairs): they build a
    ``Variant`` per side and call :func:`warmup`, :func:`choose_method` and :func:`rewarm_calls` on it.
    ``Variant(name, fn, inputs)`` wraps ``fn`` into one zero-argument call per input set
    (``fn`` itself when there are none); :meth:`next_call` rotates over them.
    """

    name: str
    fn: InitVar[Callable[..., Any]]
    inputs: InitVar[Sequence[Sequence[Any]] | None] = None
    calls: list[Callable[[], Any]] = field(init=False)
    k: int = field(init=False, default=0)  # next input set
    method: str = field(init=False, default="events")  # "events", "graph" or "cupti" (choose_method)
    warnings: list[str] = field(init=False, default_factory=list)
    samples: list[float] = field(init=False, default_factory=list)
    # with CUPTI: what CUDA events read around the same calls (do_bench's meaning), sample by
    # sample: the measured batches' (event_samples) and the last batch's (batch_events)
    event_samples: list[float] = field(init=False, default_factory=list)
    batch_events: list[float] = field(init=False, default_factory=list)
    warm_calls: int = field(init=False, default=0)
    warm_converged: bool = field(init=False, default=False)
    warm_median: float = field(init=False, default=math.nan)  # ms, last warm-up batch (warmup)
    host_ms: list[float] = field(init=False, default_factory=list)  # host ms to issue a call, per batch
    state_start: dict[str, Any] = field(init=False, default_factory=dict)
    t_spent: float = field(init=False, default=0.0)  # host seconds busy measuring
    discarded: list[float] = field(init=False, default_factory=list)  # re-warm call times (ms)
    per_sample: int = field(init=False, default=1)  # calls between one pair of markers (sample_batch)
    method_chosen: bool = field(init=False, default=False)  # choose_method ran (it runs once)
    batch_device_ms: float = field(init=False, default=0.0)  # device work of the last sample_batch

    def __post_init__(self, fn: Callable[..., Any], inputs: Sequence[Sequence[Any]] | None) -> None:
        if inputs:
            self.calls = [(lambda args=tuple(a): fn(*args)) for a in inputs]
        else:
            self.calls = [fn]

    def next_call(self) -> Callable[[], Any]:
        """The next call, rotating over the input sets."""
        c = self.calls[self.k % len(self.calls)]
        self.k += 1
        return c


def should_flush(cfg: TimingConfig, be: DeviceBackend) -> bool:
    """Whether to flush the L2 before every timed call.

    ``cfg.flush_l2`` decides when set; otherwise flush unless the callable is known to read more
    than twice the L2 (then its inputs cannot stay cached between calls and the flush would only
    add device work). Public so that every loop timing a variant flushes by the same rule.
    """
    if cfg.flush_l2 is not None:
        return cfg.flush_l2
    l2 = be.l2_bytes()
    if cfg.input_bytes is not None and l2:
        return cfg.input_bytes <= 2 * l2
    return True


def sample_batch(v: Variant, be: DeviceBackend, n: int, flush: bool, rewarm: int = 0) -> list[float]:
    """n timed calls; the flush of each is enqueued before its start marker; one sync at the end.

    ``rewarm`` calls go first (``rewarm / v.per_sample`` samples, rounded up), in the same
    queue, and their times land in ``v.discarded``: after an idle gap the first calls of a batch
    ran 1.2-2.2x slower than the median on an H100 (and the next few still ~10% slower on short
    kernels), because the clock drops while the GPU idles
    and because the first timed call starts before the host has queued anything behind it.

    With ``v.per_sample`` k > 1 (set by :func:`choose_method`, never with a flush) each sample
    is k calls between one pair of markers, divided by k. ``v.batch_device_ms`` gets the
    device time of the batch's work, flushes included (what :func:`pace` paces)."""
    marks = []
    k = max(1, v.per_sample)
    rewarm = math.ceil(rewarm / k)  # re-warm by calls: k to a sample
    t0 = be.host_time()
    for _ in range(n + rewarm):
        if flush:
            be.flush()
        a = be.marker()
        for _ in range(k):
            v.next_call()()
        b = be.marker()
        marks.append((a, b))
    v.host_ms.append((be.host_time() - t0) * 1000.0 / max((n + rewarm) * k, 1))
    be.synchronize()
    xs = [be.elapsed_ms(a, b) / k for a, b in marks]
    v.batch_device_ms = sum(xs) * k + (len(marks) * flush_ms(be) if flush else 0.0)
    v.discarded.extend(xs[:rewarm])
    events = getattr(be, "event_elapsed_ms", None)
    v.batch_events = [events(a, b) / k for a, b in marks[rewarm:]] if events is not None else []
    return xs[rewarm:]


# --------------------------------------------------------------------------------------------
# per process: what does not change from launch to launch is measured once


class _PerBackend:
    """Facts about a device kept for the process: by ``(type, device)`` when the backend names
    its device (a fresh ``CudaBackend`` per measurement sees the same GPU), else by the backend
    object itself (weakly: a test's fake device takes its facts with it)."""

    def __init__(self) -> None:
        self.by_device: dict[tuple[str, str], Any] = {}
        self.by_object: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()

    def _where(self, be: Any) -> tuple[Any, Any]:
        dev = getattr(be, "device", None)
        if dev is not None:
            return self.by_device, (type(be).__qualname__, str(dev))
        return self.by_object, be

    def get(self, be: Any) -> Any:
        table, key = self._where(be)
        try:
            return table.get(key)
        except TypeError:  # neither hashable nor weakly referable: nothing is kept
            return None

    def set(self, be: Any, value: Any) -> None:
        table, key = self._where(be)
        try:
            table[key] = value
        except TypeError:
            pass


_FLUSH_MS = _PerBackend()  # device ms of one L2 flush
_WARM_AT = _PerBackend()  # host time (be.host_time()) at which the device was last left warm


def flush_ms(be: DeviceBackend) -> float:
    """Device time of one L2 flush, measured once per device and process (best of 3)."""
    ms = _FLUSH_MS.get(be)
    if ms is None:
        times = []
        for _ in range(3):
            a = be.marker()
            be.flush()
            b = be.marker()
            be.synchronize()
            times.append(be.elapsed_ms(a, b))
        ms = max(0.0, min(times))
        _FLUSH_MS.set(be, ms)
    return ms


def mark_warm(be: DeviceBackend) -> None:
    """Note that the device is warm now (after a settled warm-up and after each measurement):
    the next variant in this process warms for ``warmup_min_warm_s`` instead of ``warmup_min_s``."""
    _WARM_AT.set(be, be.host_time())


def _warm_already(be: DeviceBackend, cfg: TimingConfig) -> bool:
    at = _WARM_AT.get(be)
    return at is not None and 0.0 <= be.host_time() - at <= cfg.warm_reuse_s


def device_busy_s(v: Variant, host_busy_s: float) -> float:
    """Seconds the device was busy during a batch that took ``host_busy_s`` on the host: its
    work (``v.batch_device_ms``), at most the host's time (the host waited for all of it)."""
    return min(host_busy_s, v.batch_device_ms / 1000.0)


def round_size(v: Variant, be: DeviceBackend, cfg: TimingConfig, flush: bool) -> int:
    """Samples per round: ``round_samples``; with CUPTI, enough calls for about
    ``cupti_round_ms`` of device work (flushes included), so that the collection at the end of
    each round does not cost more host time than the round measures."""
    if not getattr(be, "kernel_durations", False) or not v.warm_median > 0:
        return cfg.round_samples
    per_call = v.warm_median + (flush_ms(be) if flush else 0.0)
    n = math.ceil(cfg.cupti_round_ms / per_call)
    return int(min(max(cfg.round_samples, n), max(cfg.cupti_round_max, cfg.round_samples)))


def rewarm_calls(v: Variant, cfg: TimingConfig) -> int:
    """Calls that re-warm the device after an idle gap: about ``rewarm_ms`` of device time.

    Counted from ``v.warm_median`` (set by :func:`warmup`), between ``rewarm_min_calls`` and one
    round (``round_samples``); 0 when re-warm is off. Public so that other loops that idle
    between batches (``kperf_ci.capture.timing.interleaved`` between rounds) re-warm by the same amount.
    """
    if cfg.rewarm_ms <= 0 and cfg.rewarm_min_calls <= 0:
        return 0
    per = v.warm_median if v.warm_median > 0 else cfg.rewarm_ms
    n = math.ceil(cfg.rewarm_ms / per) if cfg.rewarm_ms > 0 else 0
    return int(min(max(cfg.rewarm_min_calls, n), max(cfg.round_samples, cfg.rewarm_min_calls)))


def pace(be: DeviceBackend, busy_s: float, cfg: TimingConfig, window_s: float | None = None) -> None:
    """Idle after `busy_s` of work so the device is busy at most `duty_cycle` of the time.

    On an H100 (700 W cap) back-to-back compute-bound kernels trip the power cap within tens
    of ms and the SM clock then wanders between ~1.55 and 1.98 GHz depending on what ran
    before: medians of the same kernel differed by up to 10% between fresh processes. Paced at
    50% the average power stays under the cap and the clock where the card's boost puts it.

    ``busy_s`` is the device's busy time in a window of ``window_s`` host seconds (default: the
    same, a device busy all along). The idle time brings the device's share of the window down
    to ``duty_cycle``, decided per batch from what the device did: a short kernel whose host side
    is the slower one leaves the device idle most of the window and needs none. (Sleeping a
    fixed share of host time instead was the largest part of kperf's own time per launch on
    such kernels: about 1 s per launch in 16 of Liger-Kernel's tests on an H100.)
    """
    window_s = busy_s if window_s is None else window_s
    if 0 < cfg.duty_cycle < 1 and busy_s > 0:
        idle = busy_s / cfg.duty_cycle - window_s
        if idle > 0:
            be.sleep(idle)


def warmup(v: Variant, be: DeviceBackend, cfg: TimingConfig, flush: bool) -> None:
    """Batches until `warmup_settle` consecutive batch medians each agree with the one before.

    Sets ``v.warm_median``, ``v.warm_calls`` and ``v.warm_converged``; a warm-up that did not
    settle within ``warmup_budget_s`` leaves a warning in ``v.warnings``. Public so that other
    loops (``kperf_ci.capture.timing.interleaved``) start from the same warm state as
    :func:`time_interleaved`.

    Cheaper than a fixed time for short kernels, with the same settle check: batches hold about
    ``warmup_batch_ms`` of device time; a call shorter than ``graph_threshold_ms`` after two
    batches moves to CUDA-graph replay right away (:func:`choose_method`), so the rest of the
    warm-up warms and settles on what will be timed (the settle check starts over then); and a
    device this process left warm less than ``warm_reuse_s`` ago needs ``warmup_min_warm_s``.
    """
    t0 = be.host_time()
    min_s = cfg.warmup_min_warm_s if _warm_already(be, cfg) else cfg.warmup_min_s
    meds: list[float] = []
    n = cfg.warmup_batch
    batches = 0
    while True:
        ts = be.host_time()
        xs = sample_batch(v, be, n, flush)
        host = be.host_time() - ts
        pace(be, device_busy_s(v, host), cfg, host)
        v.warm_calls += len(xs)
        meds.append(median(xs))
        batches += 1
        m = meds[-1]
        if m > 0:
            n = int(min(max(cfg.warmup_batch, math.ceil(cfg.warmup_batch_ms / m)), cfg.warmup_batch_max))
        if batches == 2 and not v.method_chosen and cfg.use_graph and m < cfg.graph_threshold_ms:
            v.warm_median = m
            choose_method(v, be, cfg)
            if v.method == "graph":
                meds.clear()  # replays time differently from plain calls: settle on replays
        if len(meds) >= max(cfg.warmup_min_batches, cfg.warmup_settle + 1) and be.host_time() - t0 >= min_s:
            tail = meds[-(cfg.warmup_settle + 1) :]
            if all(
                a > 0 and abs(b - a) / a <= cfg.warmup_rel_tol for a, b in zip(tail, tail[1:], strict=False)
            ):
                v.warm_converged = True
                break
        if be.host_time() - t0 >= cfg.warmup_budget_s:
            break
    v.warm_median = meds[-1] if meds else m
    if v.warm_converged:
        mark_warm(be)
    else:
        last = " / ".join(f"{x:.6g}" for x in meds[-3:])
        v.warnings.append(
            f"warm-up did not settle within {cfg.warmup_budget_s:g} s "
            f"({v.warm_calls} calls; last batch medians {last} ms)"
        )


def choose_method(v: Variant, be: DeviceBackend, cfg: TimingConfig, flush: bool | None = None) -> None:
    """CUDA-graph replay for short or host-bound calls, plain events otherwise; call after
    :func:`warmup`.

    Below ``graph_threshold_ms`` (by ``v.warm_median``), or when the host needs at least
    ``host_bound_rel`` of the device time to issue a call, each call is captured into a graph and
    ``v.calls`` becomes the replays, ``v.method`` "graph"; a failed capture keeps the plain calls
    and leaves a warning. Public so that other loops (``kperf_ci.capture.timing.interleaved``) pick
    the method alike.

    Runs once per variant (a call after the warm-up already chose is a no-op). ``flush=False``
    (the caller times without an L2 flush) lets calls under ``batch_below_ms`` be timed several
    per pair of markers (``v.per_sample``, see :func:`sample_batch`).
    """
    if v.method_chosen:
        return
    v.method_chosen = True
    _choose(v, be, cfg)
    if flush is False and 0 < v.warm_median < cfg.batch_below_ms:
        k = math.ceil(cfg.batch_calls_ms / v.warm_median - 1e-9)  # (0.1 / 0.005 is 20.000000000000004)
        v.per_sample = int(max(1, min(cfg.batch_max_calls, k)))


def _choose(v: Variant, be: DeviceBackend, cfg: TimingConfig) -> None:
    if getattr(be, "kernel_durations", False):
        # CUPTI durations hold no launch and no host time: a graph would only add its hazards
        v.method = "cupti"
        return
    host = median(v.host_ms[-3:]) if v.host_ms else 0.0
    host_bound = v.warm_median > 0 and host >= cfg.host_bound_rel * v.warm_median
    if not (cfg.use_graph and (v.warm_median < cfg.graph_threshold_ms or host_bound)):
        if v.warm_median < 0.01:
            v.warnings.append(
                f"short kernel ({v.warm_median * 1000:.1f} us) timed with plain events: launch gaps may count"
            )
        elif host_bound:
            v.warnings.append(
                f"the host takes {host:.3g} ms to issue a call of {v.warm_median:.3g} ms on the device: "
                "event timing includes host time whenever the host falls behind"
            )
        return
    graphs = []
    try:
        for call in v.calls:
            graphs.append(be.capture_graph(call))
    except Exception as e:  # fall back cleanly: keep the plain calls
        v.warnings.append(f"CUDA graph capture failed, timing with events: {type(e).__name__}: {e}"[:300])
        try:
            be.synchronize()
        except Exception:
            pass
        return
    v.calls = graphs
    v.k = 0
    v.method = "graph"
