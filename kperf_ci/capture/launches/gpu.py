"""Capture the Triton kernel launches a callable makes on a real GPU.

Two hooks, both removed in ``finally``:

- ``triton.knobs.runtime.launch_enter_hook`` (a ``HookChain`` with ``add``/``remove`` in
  Triton 3.6): called by the launcher for every real launch, with a ``LazyDict`` holding the
  kernel name, the CUfunction handle and the stream. It is the ground truth of *what ran*,
  including launches of a ``CompiledKernel`` made without a ``JITFunction``.
- ``JITFunction.run`` wrapped for the duration: it knows the ``JITFunction``, resolves the grid
  (a callable grid is wrapped to see its result) and returns the ``CompiledKernel``; launches
  seen by the enter hook during that call are completed with these.

``LaunchInfo`` carries the compiled kernel's registers, spills, shared memory and its ``asm``
dict; static metrics come from :func:`kperf_ci.capture.static.sass.static_metrics`, through
:mod:`kperf_ci.capture.static.metrics_cache` (computed once per cubin: in memory for the process and on
disk across runs, shared with static mode).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kperf_ci.capture.static.metrics_cache import cached_static_metrics
from kperf_ci.hardware import normalize_arch
from kperf_ci.model import Metric
from kperf_ci.traces.kernel_records import load_records


@dataclass
class LaunchInfo:
    """One kernel launch seen on the device."""

    name: str
    grid: tuple[int, int, int] | None = None
    jit_fn: Any = None  # triton.runtime.jit.JITFunction (None for a bare CompiledKernel launch)
    kernel: Any = None  # triton.compiler.CompiledKernel
    stream: int | None = None
    function: int | None = None  # CUfunction handle
    args: tuple[Any, ...] | None = None  # bound argument values (references, not copies)
    static: list[Metric] = field(default_factory=list)
    sass_hash: str | None = None
    static_error: str | None = None

    @property
    def n_regs(self) -> int | None:
        return getattr(self.kernel, "n_regs", None)

    @property
    def n_spills(self) -> int | None:
        return getattr(self.kernel, "n_spills", None)

    @property
    def shared(self) -> int | None:
        md = getattr(self.kernel, "metadata", None)
        return getattr(md, "shared", None)

    @property
    def num_warps(self) -> int | None:
        return getattr(getattr(self.kernel, "metadata", None), "num_warps", None)

    @property
    def num_stages(self) -> int | None:
        return getattr(getattr(self.kernel, "metadata", None), "num_stages", None)

    @property
    def asm(self) -> dict[str, Any]:
        return getattr(self.kernel, "asm", {}) or {}

    @property
    def hash(self) -> str | None:
        return getattr(getattr(self.kernel, "metadata", None), "hash", None)

    @property
    def n_ctas(self) -> int | None:
        return None if self.grid is None else self.grid[0] * self.grid[1] * self.grid[2]

    def replay(self) -> Callable[[], None]:
        """A callable that launches the same compiled kernel with the same arguments and grid."""
        if self.kernel is None or self.grid is None or self.args is None:
            raise ValueError(f"launch of {self.name} cannot be replayed (kernel, grid or args unknown)")
        runner = self.kernel[self.grid]
        args = self.args
        return lambda: runner(*args)


class _Capture:
    def __init__(self, keep_args: bool, on_enter: Callable[[LaunchInfo, Any], None] | None):
        self.keep_args = keep_args
        self.on_enter = on_enter
        self.launches: list[LaunchInfo] = []
        self.local = threading.local()

    # launch_enter_hook
    def enter(self, metadata: Any) -> None:
        data = getattr(metadata, "data", None) or {}
        info = LaunchInfo(
            name=str(data.get("name", "?")), stream=data.get("stream"), function=data.get("function")
        )
        pending = getattr(self.local, "pending", None)
        if pending is not None:
            pending.append(info)
        self.launches.append(info)
        if self.on_enter is not None:
            self.on_enter(info, getattr(self.local, "jit_fn", None))


def _norm_grid(grid: Any) -> tuple[int, int, int]:
    g = tuple(int(x) for x in grid)
    return (g + (1, 1, 1))[:3]  # type: ignore[return-value]


@contextlib.contextmanager
def launch_capture(
    *, keep_args: bool = True, on_enter: Callable[[LaunchInfo, Any], None] | None = None
) -> Iterator[list[LaunchInfo]]:
    """Context manager: the list it yields fills with the launches made inside the block.

    ``on_enter(info, jit_fn)`` is called from the launch-enter hook, before the kernel runs
    (and before hooks added after this one, such as a Proton session started inside).
    """
    import triton
    from triton.runtime.jit import JITFunction

    cap = _Capture(keep_args, on_enter)
    orig_run = JITFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        if warmup:
            return orig_run(self, *args, grid=grid, warmup=warmup, **kwargs)
        seen: dict[str, Any] = {}
        g = grid
        if callable(grid):

            def g(meta, _grid=grid):
                r = _grid(meta)
                seen["grid"] = r
                return r
        else:
            seen["grid"] = grid
        outer = getattr(cap.local, "pending", None)
        outer_fn = getattr(cap.local, "jit_fn", None)
        cap.local.pending = []
        cap.local.jit_fn = self
        try:
            kernel = orig_run(self, *args, grid=g, warmup=warmup, **kwargs)
        finally:
            mine, cap.local.pending = cap.local.pending, outer
            cap.local.jit_fn = outer_fn
        if hasattr(kernel, "result"):
            kernel = kernel.result()
        bound = _bound_args(self, args, kwargs) if cap.keep_args else None
        for info in mine:
            info.jit_fn = self
            info.kernel = kernel
            if "grid" in seen:
                info.grid = _norm_grid(seen["grid"])
            info.args = bound
        if outer is not None:
            outer.extend(mine)
        return kernel

    hooks = triton.knobs.runtime.launch_enter_hook
    JITFunction.run = run
    hooks.add(cap.enter)
    try:
        yield cap.launches
    finally:
        hooks.remove(cap.enter)
        JITFunction.run = orig_run


def _bound_args(jit_fn: Any, args: tuple, kwargs: dict) -> tuple | None:
    """The argument values Triton passes to CompiledKernel.run (Triton's own binder)."""
    try:
        from triton.runtime.driver import driver

        device = driver.active.get_current_device()
        binder = jit_fn.device_caches[device][4]
        import triton

        kw = dict(kwargs)
        kw["debug"] = kw.get("debug", jit_fn.debug) or triton.knobs.runtime.debug
        kw["instrumentation_mode"] = triton.knobs.compilation.instrumentation_mode
        bound_args, _, _ = binder(*args, **kw)
        return tuple(bound_args.values())
    except Exception:
        return None


def capture_launches(
    fn: Callable[..., Any], *args: Any, static: bool = True, keep_args: bool = True, **kwargs: Any
) -> tuple[Any, list[LaunchInfo]]:
    """Run ``fn(*args, **kwargs)`` once; return its result and the launches it made, in order.

    With ``static=True`` each distinct compiled kernel also gets its static metrics from
    ``kperf_ci.capture.static.sass.static_metrics``, cached by cubin (failures are kept in
    ``LaunchInfo.static_error``, never raised).
    """
    with launch_capture(keep_args=keep_args) as launches:
        result = fn(*args, **kwargs)
    if static:
        add_static_metrics(launches)
    return result, launches


def kernel_records(call: Callable[[], Any], calls: int = 1) -> list[Any]:
    """When each kernel of ``calls`` consecutive ``call()`` s ran on the GPU, as
    ``KernelRecord`` s in start order: Triton's and any other (torch ops inside the callable are
    GPU work of the sequence too). The calls are issued back to back, as a model runs its
    layers, and the device is synchronized once after the last: where the host keeps ahead of
    the GPU there is no gap, and where it cannot (a launch-bound sequence) the gaps show.

    From torch.profiler's CUPTI kernel records: start and end of execution on the GPU. CUDA
    events around each launch would also hold the time the GPU waited for the host to submit
    the kernel, which is the very gap being measured. Only the CUDA activity is traced, so the
    host's launch path is not slowed by CPU-side tracing."""
    import os
    import tempfile

    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory(prefix="kperf_kineto_") as d:
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        return sorted(load_records(path), key=lambda r: r.start_ns)


def arch_of(kernel: Any) -> str:
    """The arch a compiled kernel targets ("sm_90"); its backend's own name when not a number."""
    target = getattr(getattr(kernel, "metadata", None), "target", None)
    arch = getattr(target, "arch", None)
    return normalize_arch(arch) if isinstance(arch, int) else str(arch or "")


def add_static_metrics(launches: list[LaunchInfo]) -> None:
    """Static metrics and SASS hash of each distinct compiled kernel among ``launches``.

    Cached by a hash of the cubin, PTX and metadata (:mod:`kperf_ci.capture.static.metrics_cache`):
    nvdisasm and friends took ~0.5 s per launch on an H100 host, the largest fixed cost of a
    replayed launch; a kernel seen before, in this process or an earlier one, costs a hash."""
    done: dict[int, tuple[list[Metric], str | None, str | None]] = {}
    for info in launches:
        if info.kernel is None:
            continue
        key = id(info.kernel)
        if key not in done:
            try:
                metrics, _normalized, digest, _cached = cached_static_metrics(
                    info.kernel.asm, info.kernel.metadata, arch_of(info.kernel)
                )
                done[key] = (list(metrics), digest, None)
            except Exception as e:  # keep going: static metrics are a bonus in GPU mode
                done[key] = ([], None, f"{type(e).__name__}: {e}"[:300])
        info.static, info.sass_hash, info.static_error = done[key]
