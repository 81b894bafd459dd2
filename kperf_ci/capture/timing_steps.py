"""The steps of measuring one variant, shared by every loop that times one: each warms, flushes,
picks its method and re-warms by the same rules (``kperf_ci.capture.timing`` runs them in its
interleaved rounds, ``kperf_ci.capture.interleaved`` in pairs of base and head).

:class:`TimingConfig` (how to time), :class:`Variant` (one callable under measurement),
:func:`should_flush` (whether the L2 flush applies), :func:`warmup`, :func:`choose_method`
(events or a CUDA-graph replay) and :func:`rewarm_calls`; the reasons behind each rule are in
``kperf_ci.capture.timing``'s docstring.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import InitVar, dataclass, field
from typing import Any

from ..judge.stats import median
from .backend import DeviceBackend

__all__ = [
    "TimingConfig",
    "Variant",
    "choose_method",
    "pace",
    "rewarm_calls",
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
    ci_rel_width: float = 0.005  # stop when (ci_high - ci_low) / median <= this
    confidence: float = 0.95
    budget_s: float = 2.0  # host seconds per variant for the measured part
    min_samples: int = 20
    min_time_s: float = 0.25  # host seconds of measurement per variant before the CI may stop it
    max_samples: int = 10000
    round_samples: int = 10  # samples per round between stop checks (and per A/B turn)
    flush_l2: bool | None = None  # None: flush unless input_bytes is known to exceed the L2
    input_bytes: int | None = None  # bytes the callable reads (when known): decides flushing
    use_graph: bool = True
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
    schedule (``kperf_ci.capture.interleaved`` times base and head in pairs): they build a
    ``Variant`` per side and call :func:`warmup`, :func:`choose_method` and :func:`rewarm_calls` on it.
    ``Variant(name, fn, inputs)`` wraps ``fn`` into one zero-argument call per input set
    (``fn`` itself when there are none); :meth:`next_call` rotates over them.
    """

    name: str
    fn: InitVar[Callable[..., Any]]
    inputs: InitVar[Sequence[Sequence[Any]] | None] = None
    calls: list[Callable[[], Any]] = field(init=False)
    k: int = field(init=False, default=0)  # next input set
    method: str = field(init=False, default="events")  # "events" or "graph" (choose_method)
    warnings: list[str] = field(init=False, default_factory=list)
    samples: list[float] = field(init=False, default_factory=list)
    warm_calls: int = field(init=False, default=0)
    warm_converged: bool = field(init=False, default=False)
    warm_median: float = field(init=False, default=math.nan)  # ms, last warm-up batch (warmup)
    host_ms: list[float] = field(init=False, default_factory=list)  # host ms to issue a call, per batch
    state_start: dict[str, Any] = field(init=False, default_factory=dict)
    t_spent: float = field(init=False, default=0.0)  # host seconds busy measuring
    discarded: list[float] = field(init=False, default_factory=list)  # re-warm call times (ms)

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

    ``rewarm`` calls go first, in the same queue, and their times land in ``v.discarded``: after
    an idle gap the first calls of a batch ran 1.2-2.2x slower than the median on an H100 (and
    the next few still ~10% slower on short kernels), because the clock drops while the GPU idles
    and because the first timed call starts before the host has queued anything behind it."""
    marks = []
    t0 = be.host_time()
    for _ in range(n + rewarm):
        call = v.next_call()
        if flush:
            be.flush()
        a = be.marker()
        call()
        b = be.marker()
        marks.append((a, b))
    v.host_ms.append((be.host_time() - t0) * 1000.0 / max(n + rewarm, 1))
    be.synchronize()
    xs = [be.elapsed_ms(a, b) for a, b in marks]
    v.discarded.extend(xs[:rewarm])
    return xs[rewarm:]


def rewarm_calls(v: Variant, cfg: TimingConfig) -> int:
    """Calls that re-warm the device after an idle gap: about ``rewarm_ms`` of device time.

    Counted from ``v.warm_median`` (set by :func:`warmup`), between ``rewarm_min_calls`` and one
    round (``round_samples``); 0 when re-warm is off. Public so that other loops that idle
    between batches (``kperf_ci.capture.interleaved`` between rounds) re-warm by the same amount.
    """
    if cfg.rewarm_ms <= 0 and cfg.rewarm_min_calls <= 0:
        return 0
    per = v.warm_median if v.warm_median > 0 else cfg.rewarm_ms
    n = math.ceil(cfg.rewarm_ms / per) if cfg.rewarm_ms > 0 else 0
    return int(min(max(cfg.rewarm_min_calls, n), max(cfg.round_samples, cfg.rewarm_min_calls)))


def pace(be: DeviceBackend, busy_s: float, cfg: TimingConfig) -> None:
    """Idle after `busy_s` of work so the device is busy at most `duty_cycle` of the time.

    On an H100 (700 W cap) back-to-back compute-bound kernels trip the power cap within tens
    of ms and the SM clock then wanders between ~1.55 and 1.98 GHz depending on what ran
    before: medians of the same kernel differed by up to 10% between fresh processes. Paced at
    50% the average power stays under the cap and the clock where the card's boost puts it.
    """
    if 0 < cfg.duty_cycle < 1 and busy_s > 0:
        be.sleep(busy_s * (1.0 / cfg.duty_cycle - 1.0))


def warmup(v: Variant, be: DeviceBackend, cfg: TimingConfig, flush: bool) -> None:
    """Batches until `warmup_settle` consecutive batch medians each agree with the one before.

    Sets ``v.warm_median``, ``v.warm_calls`` and ``v.warm_converged``; a warm-up that did not
    settle within ``warmup_budget_s`` leaves a warning in ``v.warnings``. Public so that other
    loops (``kperf_ci.capture.interleaved``) start from the same warm state as :func:`time_interleaved`.
    """
    t0 = be.host_time()
    meds: list[float] = []
    while True:
        ts = be.host_time()
        xs = sample_batch(v, be, cfg.warmup_batch, flush)
        pace(be, be.host_time() - ts, cfg)
        v.warm_calls += len(xs)
        meds.append(median(xs))
        if (
            len(meds) >= max(cfg.warmup_min_batches, cfg.warmup_settle + 1)
            and be.host_time() - t0 >= cfg.warmup_min_s
        ):
            tail = meds[-(cfg.warmup_settle + 1) :]
            if all(
                a > 0 and abs(b - a) / a <= cfg.warmup_rel_tol for a, b in zip(tail, tail[1:], strict=False)
            ):
                v.warm_converged = True
                break
        if be.host_time() - t0 >= cfg.warmup_budget_s:
            break
    v.warm_median = meds[-1]
    if not v.warm_converged:
        last = " / ".join(f"{m:.6g}" for m in meds[-3:])
        v.warnings.append(
            f"warm-up did not settle within {cfg.warmup_budget_s:g} s "
            f"({v.warm_calls} calls; last batch medians {last} ms)"
        )


def choose_method(v: Variant, be: DeviceBackend, cfg: TimingConfig) -> None:
    """CUDA-graph replay for short or host-bound calls, plain events otherwise; call after
    :func:`warmup`.

    Below ``graph_threshold_ms`` (by ``v.warm_median``), or when the host needs at least
    ``host_bound_rel`` of the device time to issue a call, each call is captured into a graph and
    ``v.calls`` becomes the replays, ``v.method`` "graph"; a failed capture keeps the plain calls
    and leaves a warning. Public so that other loops (``kperf_ci.capture.interleaved``) pick the method alike.
    """
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
