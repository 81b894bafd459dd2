"""The truth of the timing evaluations: CUPTI kernel durations through torch.profiler's public
API, in a loop that shares nothing with kperf-ci's timing code (no kperf import).

``cupti_samples(calls, n)`` calls each callable ``n`` times, alternating (ABAB... then BABA...
in the second half, so neither side always goes first), with the L2 flushed before every call by
reading a buffer of twice the L2 on the same stream (kperf-ci's rule; benchmarks/placement_study.py
shows why a zeroed buffer is not used), inside one profiling window. Each call
must launch the same number of kernels every time (a replayed Triton launch launches one).
The kernels are read from ``prof.events()`` (device type CUDA, the flush's fill kernels and
every memset/copy left out), ordered by start time and handed out to the calls in issue order.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping


def _flush_buffer():
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    l2 = int(getattr(props, "L2_cache_size", 0) or 50 << 20)
    return torch.empty(2 * l2, dtype=torch.uint8, device="cuda")


def _kernel_events(prof) -> list:
    from torch.autograd import DeviceType

    out = []
    for e in prof.events():
        if e.device_type != DeviceType.CUDA:
            continue
        name = e.name
        if name.startswith(("Memset", "Memcpy")):
            continue
        out.append(e)
    return sorted(out, key=lambda e: e.time_range.start)


def cupti_samples(
    calls: Mapping[str, Callable[[], object]], n: int = 30, warmup: int = 5, flush: str = "read"
) -> dict[str, list[float]]:
    """Per callable, ``n`` samples (us): the summed CUPTI durations of the kernels of one call.

    ``flush``: "zero" writes the buffer (what do_bench does: the L2 is left holding dirty lines
    of the buffer); "read" reads it (``amax``: the L2 is left clean); "zero_read" writes then
    reads it; "none" leaves the L2 warm: the placement study compares them."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    buf = _flush_buffer()
    words = buf.view(torch.int32)
    flushes = {
        "zero": buf.zero_,
        "read": lambda: torch.amax(words),
        "zero_read": lambda: (buf.zero_(), torch.amax(words)),
        "none": lambda: None,
    }
    if flush not in flushes:
        raise ValueError(flush)
    do_flush = flushes[flush]
    with profile(activities=[ProfilerActivity.CUDA]) as prof:  # kernels one flush launches
        do_flush()
        torch.cuda.synchronize()
    per_flush = len(_kernel_events(prof))
    names = list(calls)
    for _ in range(warmup):
        for k in names:
            calls[k]()
    torch.cuda.synchronize()
    # kernels per call, from one profiled call each (the flush is a fill kernel: counted apart)
    per_call: dict[str, int] = {}
    for k in names:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            calls[k]()
            torch.cuda.synchronize()
        per_call[k] = len(_kernel_events(prof))
        if per_call[k] < 1:
            raise RuntimeError(f"{k}: the call launched no kernel")
    order: list[str] = []
    for i in range(n):
        order += names if (i < n // 2) == (i % 2 == 0) else names[::-1]
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for k in order:
            do_flush()
            calls[k]()
        torch.cuda.synchronize()
    events = _kernel_events(prof)
    out: dict[str, list[float]] = {k: [] for k in names}
    i = 0
    for k in order:
        i += per_flush  # the flush's kernels, issued just before the call
        group = events[i : i + per_call[k]]
        i += per_call[k]
        out[k].append(sum(e.time_range.elapsed_us() for e in group))
    if i != len(events):
        raise RuntimeError(f"{len(events)} kernel records for {i} expected: cannot attribute")
    return out


def median_us(samples: list[float]) -> float:
    return statistics.median(samples)
