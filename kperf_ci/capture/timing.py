"""Trustworthy device timing for GPU mode.

What a sample is: the device time between two CUDA events recorded on the *current* stream
around one call of the callable (or one replay of a CUDA graph holding that call). Before each
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
   (default 0.5) of the time, keeping compute-bound kernels under the power cap (see _pace).
   Budgets count wall time, ``min_time_s`` counts busy time.
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
:func:`choose_method` (step 2) and :func:`rewarm_calls` (step 5). ``kperf_ci.ab`` times base and
head in pairs this way.

The device sits behind one small interface, :class:`DeviceBackend` (markers, elapsed time,
sync, flush, graph capture, state, a host clock). :class:`CudaBackend` implements it with torch;
the unit tests implement it with a fake clock and run on the CPU.
"""

from __future__ import annotations

import math
import statistics
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import InitVar, asdict, dataclass, field
from typing import Any, Protocol

from ..model import Metric

# --------------------------------------------------------------------------------------------
# configuration and results


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


@dataclass
class TimingResult:
    """All samples (ms) of one variant, their median with its confidence interval, and how."""

    samples_ms: list[float]
    median: float
    ci_low: float
    ci_high: float
    method: str  # "events" or "graph"
    n: int
    warnings: list[str] = field(default_factory=list)
    gpu_state_start: dict[str, Any] = field(default_factory=dict)
    gpu_state_end: dict[str, Any] = field(default_factory=dict)
    flushed_l2: bool = False
    warmup_calls: int = 0
    warmup_converged: bool = False
    stopped_by: str = ""  # "ci", "budget" or "max_samples"
    elapsed_s: float = 0.0  # host seconds spent measuring (after warm-up)
    # calls timed right after an idle gap, before each batch, and left out of every statistic
    discarded_ms: list[float] = field(default_factory=list)
    discard_reason: str = ""

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
        out = [Metric(name, float(v), unit="ms", kind="time", better="lower") for name, v in ms]
        out.append(Metric("time.cv", float(self.cv), unit="fraction", kind="time", better="none"))
        # 1 when the samples are CUDA-graph replays: compare notes a method change between runs,
        # since a replay leaves out host time that plain events can include
        out.append(
            Metric("time.graph", float(self.method == "graph"), unit="bool", kind="time", better="none")
        )
        return out

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(mean=self.mean, min=self.min, iqr=self.iqr, cv=self.cv)
        return d


# --------------------------------------------------------------------------------------------
# statistics (pure)


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else math.nan


def median_ci(xs: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free confidence interval of the median from order statistics.

    The number of samples below the median is Binomial(n, 1/2); the interval is
    [x_(j), x_(k)] with j, k the binomial quantiles (exact, via scipy, when installed; the
    normal approximation otherwise). Fewer than 6 samples: [min, max].
    """
    s = sorted(xs)
    n = len(s)
    if n == 0:
        return math.nan, math.nan
    if n < 6:
        return s[0], s[-1]
    alpha = 1.0 - confidence
    try:
        from scipy.stats import binom

        low = int(binom.ppf(alpha / 2, n, 0.5))  # 1-based rank of the lower order statistic
    except ImportError:  # pragma: no cover - scipy is a dependency
        z = _z(confidence)
        low = int(math.floor(n / 2.0 - z * math.sqrt(n) / 2.0))
    low = max(1, low)
    j = low - 1  # 0-based; the upper bound is the symmetric rank n - low + 1
    k = min(n - 1, n - low)
    return s[j], s[k]


def _z(confidence: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


def ci_ok(xs: Sequence[float], cfg: TimingConfig) -> bool:
    """The median's CI is narrow enough AND the two halves of the samples agree within that
    width (a drifting device can give a narrow CI of a moving target)."""
    if len(xs) < cfg.min_samples:
        return False
    lo, hi = median_ci(xs, cfg.confidence)
    m = median(xs)
    if not (m > 0 and (hi - lo) / m <= cfg.ci_rel_width):
        return False
    half = len(xs) // 2
    return abs(median(xs[:half]) - median(xs[half:])) / m <= cfg.ci_rel_width


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
    third = n // 3
    a, b = median(samples[:third]), median(samples[-third:])
    if a > 0 and abs(b - a) / a > cfg.drift_warn_rel:
        return f"drift during timing: median of first third {a:.6g} ms, last third {b:.6g} ms"
    return None


# --------------------------------------------------------------------------------------------
# device boundary


class DeviceBackend(Protocol):
    """Everything the timing loop needs from a device. One implementation per device kind."""

    def marker(self) -> Any:
        """Record a timestamp marker on the current stream (asynchronously)."""

    def elapsed_ms(self, start: Any, end: Any) -> float:
        """Device time between two recorded markers; call after synchronize()."""

    def synchronize(self) -> None: ...

    def flush(self) -> None:
        """Enqueue an L2 flush on the current stream (asynchronously)."""

    def l2_bytes(self) -> int | None: ...

    def capture_graph(self, call: Callable[[], Any]) -> Callable[[], Any]:
        """Capture `call` into a replayable graph; raise if it cannot be captured."""

    def state(self) -> dict[str, Any]:
        """SM clock, memory clock, temperature ... (whatever can be read)."""

    def host_time(self) -> float:
        """Host seconds (monotonic) used for budgets."""

    def sleep(self, seconds: float) -> None:
        """Let the device idle (pacing)."""


class GraphReplayMismatch(RuntimeError):
    """A CUDA-graph replay of a callable does not reproduce an eager call's outputs."""


def _tensors(torch: Any, out: Any) -> list[Any]:
    from torch.utils._pytree import tree_flatten

    return [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]


def _same_tensors(torch: Any, a: list[Any], b: list[Any]) -> bool:
    """Equal outputs, up to the rounding of reordered floating-point sums."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        if x.is_floating_point() or x.is_complex():
            if not torch.allclose(x, y, rtol=1e-3, atol=1e-5, equal_nan=True):
                return False
        elif not torch.equal(x, y):
            return False
    return True


class CudaBackend:
    """torch.cuda events on the current stream, a 2x-L2 zeroed buffer, CUDA graphs, NVML."""

    def __init__(self, device: Any = None):
        import torch

        self.torch = torch
        self.device = (
            torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
        )
        if self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.props = torch.cuda.get_device_properties(self.device)
        l2 = getattr(self.props, "L2_cache_size", 0) or 50 * 1024 * 1024
        self._l2 = int(l2)
        self._flush_buf = None
        self._nvml = _Nvml.open(self.device.index, self.props)

    def marker(self):
        ev = self.torch.cuda.Event(enable_timing=True)
        ev.record()  # current stream
        return ev

    def elapsed_ms(self, start, end) -> float:
        return float(start.elapsed_time(end))

    def synchronize(self) -> None:
        self.torch.cuda.synchronize(self.device)

    def l2_bytes(self) -> int | None:
        return self._l2

    def flush(self) -> None:
        if self._flush_buf is None:
            self._flush_buf = self.torch.empty(2 * self._l2, dtype=self.torch.uint8, device=self.device)
        self._flush_buf.zero_()

    def capture_graph(self, call):
        """A replay of ``call`` captured in a CUDA graph, checked against an eager call.

        A graph replays what the call did on the device during capture, host state included:
        a host-to-device copy re-sends the bytes of capture time, a seed passed as a Python
        number stays fixed. When a replay's outputs differ from an eager call's, the graph
        does not time the callable; this raises and the caller keeps plain events."""
        torch = self.torch
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):  # warm the callable on a side stream, as torch advises
            call()
        torch.cuda.current_stream(self.device).wait_stream(side)
        self.synchronize()
        eager = [t.clone() for t in _tensors(torch, call())]
        self.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            static = _tensors(torch, call())
        self.synchronize()
        graph.replay()
        self.synchronize()
        if not _same_tensors(torch, eager, static):
            raise GraphReplayMismatch(
                "a graph replay gives other outputs than an eager call (host state such as a "
                "host-to-device copy or a seed was captured)"
            )
        return graph.replay

    def state(self) -> dict[str, Any]:
        s: dict[str, Any] = {}
        if self._nvml is not None:
            s.update(self._nvml.read())
        elif (smi := _nvidia_smi_state(self.props)) is not None:
            s.update(smi)
        return s

    def host_time(self) -> float:
        return time.perf_counter()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class _Nvml:
    """pynvml (nvidia-ml-py), when importable; the device found by PCI bus id."""

    def __init__(self, nvml, handle):
        self.nvml = nvml
        self.handle = handle

    @classmethod
    def open(cls, index: int, props: Any) -> _Nvml | None:
        try:
            import pynvml as nvml

            nvml.nvmlInit()
        except Exception:
            return None
        handle = None
        try:
            bus = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
            handle = nvml.nvmlDeviceGetHandleByPciBusId(bus)
        except Exception:
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
            except Exception:
                return None
        return cls(nvml, handle)

    def read(self) -> dict[str, Any]:
        n, h, s = self.nvml, self.handle, {}
        for key, fn in (
            ("sm_clock_mhz", lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)),
            ("mem_clock_mhz", lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM)),
            ("max_sm_clock_mhz", lambda: n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM)),
            ("temperature_c", lambda: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)),
            ("power_w", lambda: n.nvmlDeviceGetPowerUsage(h) / 1000.0),
        ):
            try:
                s[key] = fn()
            except Exception:
                pass
        try:
            mask = n.nvmlDeviceGetCurrentClocksThrottleReasons(h)
            s["throttle_reasons"] = _throttle_names(n, mask)
        except Exception:
            pass
        return s


def _throttle_names(n: Any, mask: int) -> list[str]:
    names = {
        "nvmlClocksThrottleReasonHwSlowdown": "hw_slowdown",
        "nvmlClocksThrottleReasonSwThermalSlowdown": "sw_thermal",
        "nvmlClocksThrottleReasonHwThermalSlowdown": "hw_thermal",
        "nvmlClocksThrottleReasonHwPowerBrakeSlowdown": "power_brake",
        "nvmlClocksThrottleReasonSwPowerCap": "sw_power_cap",
    }
    return [label for attr, label in names.items() if mask & getattr(n, attr, 0)]


def _nvidia_smi_state(props: Any) -> dict[str, Any] | None:
    try:
        bus = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
        out = (
            subprocess.run(
                [
                    "nvidia-smi",
                    f"--id={bus}",
                    "--query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw",
                    "--format=csv,noheader,nounits",
                ],
                capture_output=True,
                text=True,
                timeout=10,
                check=True,
            )
            .stdout.strip()
            .splitlines()[0]
        )
    except Exception:
        return None
    vals = [v.strip() for v in out.split(",")]
    s: dict[str, Any] = {}
    for key, v, conv in zip(
        ("sm_clock_mhz", "mem_clock_mhz", "temperature_c", "power_w"),
        vals,
        (int, int, int, float),
        strict=False,
    ):
        try:
            s[key] = conv(float(v)) if conv is int else conv(v)
        except ValueError:
            pass
    return s


def default_backend(device: Any = None) -> DeviceBackend:
    return CudaBackend(device)


# --------------------------------------------------------------------------------------------
# the loop


@dataclass(eq=False)  # identity semantics: a variant is one measurement in progress, not a value
class Variant:
    """One callable under measurement: its calls (one per input set), method, samples, state.

    Public because other loops reuse the warm-up and method choice of this module on their own
    schedule (``kperf_ci.ab`` times base and head in pairs): they build a ``Variant`` per side
    and call :func:`warmup`, :func:`choose_method` and :func:`rewarm_calls` on it.
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


def _sample_batch(v: Variant, be: DeviceBackend, n: int, flush: bool, rewarm: int = 0) -> list[float]:
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
    between batches (``kperf_ci.ab`` between rounds) re-warm by the same amount.
    """
    if cfg.rewarm_ms <= 0 and cfg.rewarm_min_calls <= 0:
        return 0
    per = v.warm_median if v.warm_median > 0 else cfg.rewarm_ms
    n = math.ceil(cfg.rewarm_ms / per) if cfg.rewarm_ms > 0 else 0
    return int(min(max(cfg.rewarm_min_calls, n), max(cfg.round_samples, cfg.rewarm_min_calls)))


def _pace(be: DeviceBackend, busy_s: float, cfg: TimingConfig) -> None:
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
    loops (``kperf_ci.ab``) start from the same warm state as :func:`time_interleaved`.
    """
    t0 = be.host_time()
    meds: list[float] = []
    while True:
        ts = be.host_time()
        xs = _sample_batch(v, be, cfg.warmup_batch, flush)
        _pace(be, be.host_time() - ts, cfg)
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
    and leaves a warning. Public so that other loops (``kperf_ci.ab``) pick the method alike.
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


def _finish(v: Variant, be: DeviceBackend, cfg: TimingConfig, flush: bool, stopped_by: str) -> TimingResult:
    end = be.state()
    lo, hi = median_ci(v.samples, cfg.confidence)
    warnings = list(v.warnings) + state_warnings(v.state_start, end, cfg)
    if (d := drift_warning(v.samples, cfg)) is not None:
        warnings.append(d)
    if stopped_by != "ci" and v.samples:
        m = median(v.samples)
        warnings.append(
            f"stopped by {stopped_by} before the CI of the median reached {cfg.ci_rel_width:.2%} "
            f"(got {(hi - lo) / m:.2%} with {len(v.samples)} samples)"
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
    be = backend if backend is not None else default_backend(device)
    names = list(fns)
    if not names:
        return {}
    inputs = inputs or {}
    vs = {name: Variant(name, fns[name], inputs.get(name)) for name in names}
    flush = should_flush(cfg, be)

    # warm-up, interleaved as well, so no variant gets a colder or hotter GPU
    for name in interleaved_order(names, 0):
        warmup(vs[name], be, cfg, flush)
    for name in names:
        choose_method(vs[name], be, cfg)
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
            v.samples.extend(_sample_batch(v, be, cfg.round_samples, flush, rewarm_calls(v, cfg)))
            busy = be.host_time() - ts
            v.t_spent += busy
            _pace(be, busy, cfg)
        r += 1
        if all(vs[n].t_spent >= cfg.min_time_s and ci_ok(vs[n].samples, cfg) for n in names):
            stopped_by = "ci"
            break
        if be.host_time() - t0 >= total_budget:
            stopped_by = "budget"
            break
        if any(len(vs[n].samples) >= cfg.max_samples for n in names):
            stopped_by = "max_samples"
            break
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
