"""Automatic intra-kernel regions for unmodified Triton kernels, through Proton: running.

The pieces: :mod:`.ttgir_pass` (which regions, and the TTGIR text edit), :mod:`.hook`
(the compiler hook with its lifetime, the cache directory per configuration, ahead-of-time
compiles), :mod:`.result` (statistics, clock, spans of one launch) and the trace formats
in :mod:`kperf_ci.traces`. This module runs instrumented launches on a GPU.

Running. :func:`instrument_callable` runs the callable ONCE under
``proton.start(backend="instrumentation", data="trace")`` and parses the Chrome trace into a
:class:`RegionResult`. Never put it in a timing loop: each instrumented launch pays Proton's
host post-processing. :func:`instrumented_launches` launches the already compiled instrumented
kernels *without* a Proton session (a fixed profile buffer, no per-launch post-processing): that
is how their device time is measured next to the plain kernels (benchmarks/instrumentation_overhead.py).

Granularity. Proton 3.6 lowers only its warp granularity. ``RegionConfig.granularity="cta"``
(the default) has warp 0 of each CTA record (Proton's selective sampling): on an H100 that
cost +0.7..+2% on four of the five examples, against +7..+25% on short-CTA memory-bound kernels
when every warp records (``"warp"``; ``"warp_group"`` also records in every warp and merges
groups of 4 afterwards). See benchmarks/results/instrumentation_overhead.md.

Buffer. Default: warp 0's records go straight to a 512-byte per-CTA buffer in global memory
(``RegionConfig.buffer_type`` / ``effective_buffer_size``): with Proton's default 8 KB shared
buffer the layernorm example cost +16%, with the global one +8%.

Clock. Proton 3.6's Chrome trace cannot give the SM clock: it subtracts each CTA's first cycle
and carries no per-CTA end time. So the profile buffer of each launch is kept through the
session (``_keep_profile_buffers``) and read directly (:func:`read_raw_trace`,
:func:`kperf_ci.traces.proton_raw.parse_raw_buffer`): every record's absolute SM cycle plus each
CTA's globaltimer init / pre-final / post-final stamps, from which
:func:`kperf_ci.traces.clock.fit_clock` measures the clock during this launch. Without a raw
buffer (or an SM with two CTAs) the clock falls back to NVML after the launch, flagged in the
warnings.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kperf_ci.capture.launches.gpu import launch_capture
from kperf_ci.capture.regions.hook import (
    RegionHook,
    aot_compile,
    cache_and_mode,
    enable_triton_semantic,
    proton_lowering,
)
from kperf_ci.capture.regions.result import RegionResult, build_result
from kperf_ci.capture.regions.ttgir_pass import RegionConfig, regions_in_ttgir
from kperf_ci.capture.timing.engine import CudaBackend
from kperf_ci.traces.kernel_trace import KernelTrace
from kperf_ci.traces.proton_chrome import load_trace, parse_events
from kperf_ci.traces.proton_raw import parse_raw_buffer, raw_header_bytes

# Re-exported: what plugin/gpu_bench.py and the benchmarks reach as ``instrument.<name>``.
__all__ = [
    "RegionConfig",
    "RegionResult",
    "aot_compile",
    "instrument_callable",
    "instrument_callable_all",
    "instrumented_launches",
    "profile_buffer",
    "read_raw_trace",
    "scope_names",
]


@contextlib.contextmanager
def _capture_fds() -> Iterator[io.StringIO]:
    """Capture what C++ writes to fds 1 and 2 (Proton's drop warnings) and echo it back after."""
    out = io.StringIO()
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    tmp = tempfile.TemporaryFile(mode="w+b")
    try:
        for fd in (1, 2):
            os.dup2(tmp.fileno(), fd)
        yield out
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, s in saved.items():
            os.dup2(s, fd)
            os.close(s)
        tmp.seek(0)
        text = tmp.read().decode(errors="replace")
        tmp.close()
        out.write(text)
        if text:
            sys.stderr.write(text)


def _device_clock_mhz() -> float | None:
    try:
        import torch

        p = torch.cuda.get_device_properties(torch.cuda.current_device())
        rate = getattr(p, "clock_rate", None)  # kHz in some torch builds
        if rate:
            return rate / 1000.0
        from triton.runtime.driver import driver

        props = driver.active.utils.get_device_properties(torch.cuda.current_device())
        return props.get("sm_clock_rate", 0) / 1000.0 or None
    except Exception:
        return None


def instrument_callable_all(
    fn: Callable[[], Any],
    cfg: RegionConfig | None = None,
    *,
    workdir: str | None = None,
    keep_trace: bool = False,
) -> dict[str, RegionResult]:
    """Run `fn()` once with regions inserted in every Triton kernel it launches; one
    RegionResult per kernel name, in launch order."""
    cfg = cfg or RegionConfig()
    enable_triton_semantic()
    own_dir = workdir is None
    wd = Path(tempfile.mkdtemp(prefix="kperf_regions_") if own_dir else workdir)
    wd.mkdir(parents=True, exist_ok=True)
    base = wd / f"regions_{cfg.key()}"
    run = _instrumented_run(fn, cfg, base)
    files = sorted(p for p in wd.glob(base.name + "*") if p.is_file())
    if not files:
        raise RuntimeError(f"Proton wrote no trace under {wd} (log: {run.log.getvalue()[-500:]})")
    events = load_trace(files[0])
    traces = parse_events(events)
    if not traces:
        head = files[0].read_text()[:1500]
        raise RuntimeError(f"no CTA slices recognised in Proton's trace {files[0].name}; it begins: {head}")
    out = _region_results(run, traces, cfg, str(files[0]) if keep_trace else None)
    if own_dir and not keep_trace:
        for p in files:
            p.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            wd.rmdir()
    return out


@dataclass
class _Run:
    """What one instrumented run left: the launches it made, the profile buffers kept per
    kernel, Proton's log, the SM clock NVML read after it, its host seconds, and the hook (which
    reports what the region pass did to each kernel)."""

    launches: list[Any]
    raws: dict[str, KernelTrace]
    log: io.StringIO
    nvml_mhz: float | None
    host_s: float
    hook: Any


def _instrumented_run(fn: Callable[[], Any], cfg: RegionConfig, base: Path) -> _Run:
    """Step 1: ``fn()`` once inside a Proton instrumentation session writing to ``base``, with
    the region pass hooked into every compile and the profile buffers kept."""
    import time

    import torch
    import triton
    import triton.profiler as proton

    try:
        nvml = CudaBackend()._nvml
    except Exception:
        nvml = None

    log = io.StringIO()
    session = None
    raws: dict[str, KernelTrace] = {}
    t0 = time.perf_counter()
    nvml_mhz = None
    with RegionHook(cfg) as hook, cache_and_mode(cfg, None):
        try:
            with launch_capture(keep_args=False) as launches:
                session = proton.start(
                    str(base), backend="instrumentation", data="trace", mode=cfg.proton_mode()
                )
                triton.knobs.compilation.instrumentation_mode = cfg.mode_string()
                with _keep_profile_buffers() as kept:
                    fn()
                    torch.cuda.synchronize()
                raws = _read_kept(kept, launches)
            if nvml is not None:
                nvml_mhz = nvml.read().get("sm_clock_mhz")
        finally:
            if session is not None:
                with _capture_fds() as captured:
                    proton.finalize(session)
                log.write(captured.getvalue())
    host_s = time.perf_counter() - t0
    return _Run(launches, raws, log, nvml_mhz, host_s, hook)


def _region_results(
    run: _Run, traces: dict[str, KernelTrace], cfg: RegionConfig, trace_path: str | None
) -> dict[str, RegionResult]:
    """Step 2: one RegionResult per kernel name in launch order (then any other traced kernel),
    with the pass's warnings; a kernel launched without instrumentation gets an empty one."""
    launches, raws, log, nvml_mhz, host_s, hook = (
        run.launches,
        run.raws,
        run.log,
        run.nvml_mhz,
        run.host_s,
        run.hook,
    )
    grids: dict[str, tuple[int, int, int] | None] = {}
    not_instrumented = []
    for info in launches:
        grids.setdefault(info.name, info.grid)
        md = getattr(info.kernel, "metadata", None)
        if md is not None and not getattr(md, "profile_scratch_size", 0):
            not_instrumented.append(info.name)
    dev_mhz = _device_clock_mhz()
    out: dict[str, RegionResult] = {}
    order = [i.name for i in launches] + sorted(traces)
    for name in dict.fromkeys(order):
        if name not in traces:
            continue
        r = build_result(
            traces[name],
            cfg,
            log_text=log.getvalue(),
            nvml_mhz=nvml_mhz,
            device_mhz=dev_mhz,
            grid=grids.get(name),
            trace_path=trace_path,
            raw=raws.get(name),
        )
        r.host_seconds = host_s
        rep = hook.report(name)
        if rep is not None:
            r.warnings += rep.warnings
        if sum(1 for i in launches if i.name == name) > 1:
            r.warnings.append(
                "the callable launched this kernel more than once: slices of all launches are mixed"
            )
        out[name] = r
    for name in not_instrumented:
        if name not in out:
            out[name] = build_result(KernelTrace.empty(name), cfg, grid=grids.get(name))
            out[name].warnings.append("kernel was launched without instrumentation (compiled elsewhere?)")
    return out


class _KeepBuffers:
    """Wraps the active profile allocator (Proton's, inside a session) and keeps every buffer
    it hands out, in launch order, so the raw records can be read after the callable."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.kept: list[Any] = []

    def __call__(self, size: int, alignment: int, stream: Any):
        buf = self.inner(size, alignment, stream)
        self.kept.append(buf)
        return buf


@contextlib.contextmanager
def _keep_profile_buffers() -> Iterator[list[Any]]:
    from triton.runtime import _allocation

    saved = _allocation._profile_allocator.get()
    keep = _KeepBuffers(saved)
    _allocation.set_profile_allocator(keep)
    try:
        yield keep.kept
    finally:
        _allocation.set_profile_allocator(saved)


def _read_kept(kept: list[Any], launches: list[Any]) -> dict[str, KernelTrace]:
    """Raw traces of the first launch of each instrumented kernel (buffers pair with the
    instrumented launches in order). Best effort: any mismatch gives no raw trace (the clock
    then falls back to NVML, with a warning)."""
    out: dict[str, KernelTrace] = {}
    inst = [i for i in launches if getattr(getattr(i.kernel, "metadata", None), "profile_scratch_size", 0)]
    if len(inst) != len(kept):
        return out
    for info, buf in zip(inst, kept, strict=True):
        if info.name in out or info.grid is None:
            continue
        try:
            holder = _FixedProfileBuffer()
            holder.last = buf
            n = info.grid[0] * info.grid[1] * info.grid[2]
            out[info.name] = read_raw_trace(holder, info.kernel, n, name=info.name)
        except Exception:
            continue
    kept.clear()
    return out


def instrument_callable(
    fn: Callable[[], Any],
    cfg: RegionConfig | None = None,
    *,
    kernel: str | None = None,
    workdir: str | None = None,
    keep_trace: bool = False,
) -> RegionResult:
    """Run `fn()` once with automatic regions; the RegionResult of `kernel` (default: the first
    instrumented kernel it launched)."""
    res = instrument_callable_all(fn, cfg, workdir=workdir, keep_trace=keep_trace)
    if not res:
        raise RuntimeError("the callable launched no instrumented Triton kernel")
    if kernel is None:
        return next(iter(res.values()))
    if kernel not in res:
        raise KeyError(f"kernel {kernel!r} not among the instrumented launches {sorted(res)}")
    return res[kernel]


def _compiled_kernels(jit_fn: Any) -> list[Any]:
    out = []
    for caches in getattr(jit_fn, "device_caches", {}).values():
        try:
            out.extend(caches[0].values())
        except Exception:
            pass
    return out


class _FixedProfileBuffer:
    """Profile allocator that hands out one preallocated buffer (grown when a launch needs more)."""

    def __init__(self):
        self.buf = None
        self.last: Any = None  # the view handed to the latest launch (its raw records, after sync)
        self.last_size = 0

    def __call__(self, size: int, alignment: int, stream: Any):
        import torch

        need = (size + alignment - 1) // alignment * alignment + alignment
        if self.buf is None or self.buf.numel() < need:
            self.buf = torch.empty(need, dtype=torch.uint8, device="cuda")
        off = (-self.buf.data_ptr()) % alignment
        self.last = self.buf[off:] if off else self.buf
        self.last_size = size
        return self.last


@contextlib.contextmanager
def profile_buffer() -> Iterator[_FixedProfileBuffer]:
    """Instrumented kernels launched inside get one fixed device buffer for their records (no
    Proton session needed). Plain kernels are unaffected. Yields the allocator: after a launch
    and a sync, ``.last`` holds that launch's raw records (see read_raw_trace)."""
    from triton.runtime import _allocation

    saved = _allocation._profile_allocator.get()
    alloc = _FixedProfileBuffer()
    _allocation.set_profile_allocator(alloc)
    try:
        yield alloc
    finally:
        _allocation.set_profile_allocator(saved)


def scope_names(kernel: Any) -> dict[int, str]:
    """Proton's scope id -> name for a compiled instrumented kernel (from its TTGIR, as Proton's
    own hook does); falls back to the order of first `proton.record start` in the text."""
    text = kernel.asm["ttgir"]
    try:
        from triton._C.libtriton import ir, nvidia
        from triton._C.libtriton import proton as triton_proton

        ctx = ir.context()
        ir.load_dialects(ctx)
        nvidia.load_dialects(ctx)
        triton_proton.load_dialects(ctx)
        fd, path = tempfile.mkstemp(suffix=".ttgir", prefix="kperf_")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
            module = ir.parse_mlir_module(path, ctx)
            module.context = ctx
            return {int(i): str(n) for i, n in triton_proton.get_scope_id_names(module)}
        finally:
            os.unlink(path)
    except Exception:
        return dict(enumerate(regions_in_ttgir(text)))


def read_raw_trace(
    alloc: _FixedProfileBuffer, kernel: Any, n_ctas: int, max_records: int = 64, name: str | None = None
) -> KernelTrace:
    """The records of the latest instrumented launch into `alloc` (after a sync), parsed from
    the device buffer itself: absolute SM cycles and per-CTA globaltimer init / pre-final /
    post-final stamps, which Proton 3.6's Chrome trace does not carry."""
    md = kernel.metadata
    scratch = int(md.profile_scratch_size)
    nw = int(md.num_warps)
    width = min(scratch, raw_header_bytes(nw, max_records))
    buf = alloc.last[: n_ctas * scratch].view(n_ctas, scratch)[:, :width]
    blocks = buf.cpu().numpy()
    return parse_raw_buffer(blocks, nw, scope_names(kernel), kernel=name or md.name)


@contextlib.contextmanager
def instrumented_launches(
    cfg: RegionConfig | None = None, *, compile: bool = False
) -> Iterator[_FixedProfileBuffer]:
    """Inside: Triton launches use the instrumented build of `cfg` (compiled earlier by
    instrument_callable in this process or found in its cache directory) WITHOUT a Proton
    session: the kernels write their records into a fixed device buffer that nobody reads, and
    no host post-processing runs per launch. For measuring the instrumented kernels' own device
    time with the ordinary timing loop. A kernel that would need compiling raises, unless
    ``compile=True``: then Proton's lowering is registered as in :func:`aot_compile` (no
    session) and the instrumented kernels compile here."""
    cfg = cfg or RegionConfig()
    with contextlib.ExitStack() as stack:
        stack.enter_context(RegionHook(cfg))
        stack.enter_context(cache_and_mode(cfg, cfg.mode_string()))
        alloc = stack.enter_context(profile_buffer())
        if compile:
            import torch

            major, minor = torch.cuda.get_device_capability()
            enable_triton_semantic()
            stack.enter_context(proton_lowering(cfg, major * 10 + minor))
        yield alloc
