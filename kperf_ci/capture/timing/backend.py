"""The device boundary of the timing loop: what it needs from a device (:class:`DeviceBackend`)
and the CUDA implementation (:class:`CudaBackend`: torch events on the current stream, a read of a
buffer of twice the L2 as the flush (:data:`L2_FLUSH`), CUDA graphs, the GPU's clocks and state through
:mod:`kperf_ci.device`). The unit tests implement the protocol with a fake clock."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from kperf_ci import device as gpu_device
from kperf_ci.capture.timing import cupti

T = TypeVar("T")

#: How the L2 is flushed before a timed call: by *reading* a buffer of twice the L2, which leaves
#: it holding clean lines. Zeroing the buffer (triton's do_bench, kperf-ci before) leaves it full
#: of dirty lines that the timed kernel then writes back, on its own clock: on an H100 that added
#: 1.4 us to a 4.8 us geglu launch and 8 us to a 29 us one, shrank a +48% effect to +31%, and made
#: the effect depend on where the buffers sit (spread 2.7 points against 0.5-1.2 when read;
#: benchmarks/results/placement_study.md). Stored times carry it as ``time.l2_read_flush``.
L2_FLUSH = "read"

__all__ = [
    "CudaBackend",
    "DeviceBackend",
    "GraphReplayMismatch",
    "close_backend",
    "default_backend",
    "events_instead",
    "measure_with_fallback",
]


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

    method = "events"  # what a sample is: event time around the call (or a graph replay)
    kernel_durations = False
    fallback_reason: str | None = None  # why a better method (CUPTI) was not used, if it was not

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
        self._read_state = gpu_device.state_reader(self.device.index, self.props)
        # with every state read, so a variant's stored timing names the physical GPU it was
        # timed on (xdist workers append to a run whose fingerprint is the controller's)
        self._identity = gpu_device.gpu_identity(self.props)

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
        if self._flush_buf is None:  # zeroed once: a read of uninitialised memory is still a read
            self._flush_buf = self.torch.zeros(2 * self._l2 // 4, dtype=self.torch.int32, device=self.device)
        self.torch.amax(self._flush_buf)  # L2_FLUSH: read, so no dirty line is left behind

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
        return {**self._read_state(), **self._identity}

    def host_time(self) -> float:
        return time.perf_counter()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def close(self) -> None:
        """Nothing to release (CuptiBackend stops its collection here)."""


def default_backend(device: Any = None) -> DeviceBackend:
    """Kernel durations from CUPTI (:class:`kperf_ci.capture.timing.cupti.CuptiBackend`) where
    torch's profiler can start; else CUDA events, with the reason in ``fallback_reason``."""
    reason = cupti.unavailable_reason()
    be = CudaBackend(device)
    if reason is None:
        return cupti.CuptiBackend(be)
    be.fallback_reason = reason
    return be


def close_backend(be: DeviceBackend) -> None:
    """End a measurement: CUPTI collection stops (a profiler left running would tax every later
    launch of the test); other backends have nothing to release."""
    close = getattr(be, "close", None)
    if close is not None:
        close()


def measure_with_fallback(be: DeviceBackend, measure: Callable[[DeviceBackend], T]) -> tuple[T, str | None]:
    """``measure(be)``, and once more with the event backend when CUPTI's records cannot time the
    calls (records lost, or a call whose window holds no kernel): every call of the measurement
    again, so that all compare on one clock; the backend is closed either way. Returns the result
    and why it was not timed by CUPTI (None when it was): every timing loop falls back by this one
    rule."""
    try:
        try:
            return measure(be), getattr(be, "fallback_reason", None)
        except cupti.AttributionError as e:
            be = events_instead(be, e)
            return measure(be), be.fallback_reason
    finally:
        close_backend(be)


def events_instead(be: DeviceBackend, why: Exception) -> DeviceBackend:
    """The event backend for the same device, after CUPTI's records could not time the calls."""
    close_backend(be)
    events = getattr(be, "inner", None) or CudaBackend(getattr(be, "device", None))
    events.fallback_reason = f"CUPTI timing abandoned, timed with events: {why}"
    return events
