"""Kernel durations from CUPTI activity records: the timing of GPU mode when CUPTI is there.

**Why.** Events around a call (or a graph replay) time the launch too: on an H100 every stored
median was 2.1-3.2 us above the kernels' own CUPTI durations, effects read at half their size on
short kernels, and the overhead varied between graph instances (A/A offsets of up to 5%; the
field notes, "Timing against CUPTI kernel durations"). A sample here is the device duration of
the kernels a call launched, as CUPTI's activity records give it, summed; the launch, the
gaps between the call's kernels and the L2 flush are not in it.

**Mechanism: torch's profiler (Kineto, CUPTI activity records), low-level.** It ships with every
CUDA build of torch, so a GPU runner needs nothing more; the same records are what TritonBench's
profiler latency mode and DeepGEMM's ``bench_kineto`` read. The profiler is started with CUDA
activity only, and its results are read as raw ``_KinetoEvent`` records (no ``FunctionEvent``
tree, which cost 0.06-0.15 ms a record). ``benchmarks/timing_accuracy.py`` measures its cost per
sample against events and its agreement with a separate ``torch.profiler`` script.

**Attribution by launch order.** Records are matched to calls by markers in the stream: each
:meth:`CuptiBackend.marker` launches a tiny kernel of a name no user code launches
(torch's ``spin_kernel``, ``torch.cuda._sleep(0)``) and records a CUDA event beside it. On one
stream kernels run in launch order, so the kernels between marker i and marker i+1 are exactly
those launched between the two ``marker()`` calls: per kernel, and summed for the call.
Records that are not kernels (memsets, copies) are never counted, and the L2 flush is enqueued
before the start marker, outside every window; a call that launches no kernel at all (a plain
device copy) is timed with events, as a lost record is. A collection whose marker count differs from
the markers issued (records lost) raises :class:`AttributionError`, and the timing loop times
that measurement again with events (every call in it, so that they compare on one clock), saying
why.

**Events beside it.** The CUDA events recorded inside the markers time the same calls as
``triton.testing.do_bench`` would (:meth:`CuptiBackend.event_elapsed_ms`), so a benchmark
script that asked do_bench for a number still gets a number of do_bench's meaning.

:func:`kernel_windows` (records in, windows out) is pure and tested on the CPU; the device is
faked only at :class:`ActivitySource`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kperf_ci.config import ENV_TIMING
from kperf_ci.error_text import error_text

__all__ = [
    "ENV_TIMING",
    "MARKER_KERNEL",
    "ActivityRecord",
    "ActivitySource",
    "AttributionError",
    "CuptiBackend",
    "KinetoSource",
    "kernel_windows",
]

#: the marker kernel's name, as CUPTI reports it (torch's ``spin_kernel``, from ``torch.cuda._sleep``)
MARKER_KERNEL = "spin_kernel"
# KPERF_TIMING=events forces the event timing (the fallback) on a machine with CUPTI: ENV_TIMING


@dataclass(frozen=True)
class ActivityRecord:
    """One CUPTI activity record, as much of it as attribution needs (times in ns)."""

    kind: str  # "kernel", "gpu_memset", "gpu_memcpy", ... (Kineto's activity type)
    name: str
    start_ns: int
    end_ns: int
    stream: int = 0
    correlation: int = 0

    @property
    def duration_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6

    @property
    def is_marker(self) -> bool:
        return self.kind == "kernel" and MARKER_KERNEL in self.name


class AttributionError(RuntimeError):
    """CUPTI's records cannot time the calls: they do not match the markers issued, or a call's
    window holds no kernel (it only copied or set memory). The timing loop then times with events."""


def kernel_windows(records: Sequence[ActivityRecord], markers: int) -> list[list[ActivityRecord]]:
    """The kernel records between consecutive markers: ``markers - 1`` windows, window i holding
    the kernels launched between marker i and marker i+1, in launch order.

    Records are ordered by start time (one stream runs its work in launch order; the
    correlation id breaks ties). Records other than kernels are left out, and so is everything
    before the first marker and after the last. Raises :class:`AttributionError` when the
    records hold another number of markers than ``markers``."""
    ordered = sorted(records, key=lambda r: (r.start_ns, r.correlation))
    marks = [i for i, r in enumerate(ordered) if r.is_marker]
    if len(marks) != markers:
        raise AttributionError(
            f"CUPTI returned {len(marks)} marker record(s) for {markers} marker(s) issued: "
            "records were lost or another profiler holds CUPTI"
        )
    return [
        [r for r in ordered[a + 1 : b] if r.kind == "kernel" and not r.is_marker]
        for a, b in zip(marks, marks[1:], strict=False)
    ]


class ActivitySource(Protocol):
    """Where activity records come from: start collecting, stop and hand over what came."""

    def start(self) -> None: ...

    def stop(self) -> list[ActivityRecord]: ...


class KinetoSource:
    """CUPTI activity records through torch's profiler, CUDA activity only, read raw."""

    def __init__(self) -> None:
        from torch._C._autograd import _disable_profiler, _enable_profiler, _prepare_profiler
        from torch._C._profiler import ProfilerActivity, ProfilerConfig, ProfilerState, _ExperimentalConfig

        self._disable = _disable_profiler
        self._enable = _enable_profiler
        self._prepare = _prepare_profiler
        self._activities = {ProfilerActivity.CUDA}
        self._config = ProfilerConfig(
            ProfilerState.KINETO, False, False, False, False, False, _ExperimentalConfig()
        )
        self.running = False

    def start(self) -> None:
        # prepared each time, as torch.profiler does: Kineto returns to idle after each stop
        # (the first prepare in a process initialises CUPTI, about 5 s on an H100)
        self._prepare(self._config, self._activities)
        self._enable(self._config, self._activities)
        self.running = True

    def stop(self) -> list[ActivityRecord]:
        self.running = False
        result = self._disable()
        out = []
        for e in result.events():
            if str(e.device_type()).rsplit(".", 1)[-1] != "CUDA":
                continue
            kind = _kind(e)
            out.append(
                ActivityRecord(
                    kind, e.name(), e.start_ns(), e.end_ns(), e.device_resource_id(), e.correlation_id()
                )
            )
        return out


def _kind(e: Any) -> str:
    """Kineto's activity type ("kernel", "gpu_memset", ...); older torch: from the name."""
    try:
        kind = e.activity_type()
    except AttributeError:
        kind = ""
    if kind:
        return str(kind)
    name = e.name()
    return (
        "gpu_memset" if name.startswith("Memset") else "gpu_memcpy" if name.startswith("Memcpy") else "kernel"
    )


@dataclass
class _Mark:
    generation: int
    index: int
    event: Any  # the inner backend's marker (a CUDA event)


class CuptiBackend:
    """A device backend whose ``elapsed_ms`` is the CUPTI duration of the kernels launched
    between two markers; everything else (flush, state, clocks, sleep) is the ``inner``
    event backend's, which is also what the timing loop falls back to.

    Collection starts at the first marker after a ``synchronize`` and ends at the next
    ``synchronize``, so nothing is collected while the loop idles or the test runs on."""

    method = "cupti"
    kernel_durations = True  # steps.choose_method: no CUDA graphs (launch overhead is not timed)

    def __init__(
        self, inner: Any, source: ActivitySource | None = None, spin: Callable[[], None] | None = None
    ):
        self.inner = inner
        self.source = source if source is not None else shared_source()
        self._spin = spin if spin is not None else _torch_spin
        self._collecting = False
        self._generation = 0  # collections so far: a marker names the one it belongs to
        self._issued = 0
        # the last collection's generation and its windows (window i: between markers i, i+1)
        self._windows: tuple[int, list[list[ActivityRecord]]] = (-1, [])

    def __getattr__(self, name: str) -> Any:  # flush, l2_bytes, state, host_time, sleep, device ...
        if name == "inner":  # not set yet (copy/unpickle): no recursion through __getattr__
            raise AttributeError(name)
        return getattr(self.inner, name)

    @property
    def fallback_reason(self) -> str | None:
        return None

    def marker(self) -> _Mark:
        """A marker kernel, then the inner marker (an event): the event sits where the event
        backend puts its own, so :meth:`event_elapsed_ms` times what do_bench would, and no
        marker kernel is inside it."""
        if not self._collecting:
            if getattr(self.source, "running", False):  # another backend's collection, never closed
                self.source.stop()
            self.source.start()
            self._collecting = True
        self._spin()
        mark = _Mark(self._generation, self._issued, self.inner.marker())
        self._issued += 1
        return mark

    def synchronize(self) -> None:
        self.inner.synchronize()
        if not self._collecting:
            return
        records = self.source.stop()
        self._collecting = False
        issued, generation = self._issued, self._generation
        self._generation += 1
        self._issued = 0
        self._windows = (generation, kernel_windows(records, issued))

    def kernels(self, start: _Mark, end: _Mark) -> list[ActivityRecord]:
        """The kernels launched between two markers of the last collection, in launch order."""
        generation, windows = self._windows
        if not start.generation == end.generation == generation:
            raise AttributionError("markers from another collection: synchronize() between them")
        return [r for w in windows[start.index : end.index] for r in w]

    def elapsed_ms(self, start: _Mark, end: _Mark) -> float:
        """The summed durations of the kernels between two markers. A window without a kernel
        (a call that only copies or sets memory, which CUPTI's kernel records leave out) raises
        :class:`AttributionError`, so the call is timed with events, saying why, instead of
        reading 0 ms."""
        kernels = self.kernels(start, end)
        if not kernels:
            raise AttributionError(
                "the call launched no kernel between its markers (CUPTI's kernel records leave out "
                "copies and memsets)"
            )
        return sum(r.duration_ms for r in kernels)

    def event_elapsed_ms(self, start: _Mark, end: _Mark) -> float:
        """What the inner backend (CUDA events) reads between the same two markers."""
        return float(self.inner.elapsed_ms(start.event, end.event))

    def capture_graph(self, call: Callable[[], Any]) -> Callable[[], Any]:
        raise RuntimeError("CUPTI timing replays no graphs")  # choose_method never asks

    def close(self) -> None:
        """Stop collecting: while the profiler runs, every launch of the test pays host time."""
        if self._collecting:
            self.source.stop()
            self._collecting = False
        self._windows = (-1, [])


def _torch_spin() -> None:
    import torch

    torch.cuda._sleep(0)


@functools.cache
def shared_source() -> ActivitySource:
    """One Kineto source per process: the profiler is process-wide state."""
    return KinetoSource()


def unavailable_reason() -> str | None:
    """Why CUPTI timing cannot be used here (None when it can): forced off by KPERF_TIMING, or
    a probe (one marker kernel, collected) failed: no Kineto/CUPTI in this torch, or another
    profiler holds it. The probe runs once per process."""
    if os.environ.get(ENV_TIMING, "").strip().lower() == "events":
        return f"{ENV_TIMING}=events"
    return _probe()


@functools.cache
def _probe() -> str | None:
    try:
        import torch

        if not hasattr(torch.cuda, "_sleep"):
            return "torch.cuda._sleep (the marker kernel) is missing"
        if torch._C._autograd._profiler_enabled():
            return "another torch profiler is active"
        source = shared_source()
        source.start()
        torch.cuda._sleep(0)
        torch.cuda.synchronize()
        records = source.stop()
        if not any(r.is_marker for r in records):
            return "torch's profiler returned no kernel records (CUPTI activity unavailable)"
    except Exception as e:  # any failure to start means: time with events, and say why
        return f"torch's profiler (Kineto/CUPTI) cannot start: {error_text(e, 160)}"
    return None
