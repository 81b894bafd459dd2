"""Kernel replay (GPU mode): every Triton launch a marked test makes, measured without the
test calling ``kperf.bench``, as Nsight Compute replays kernels.

While the test runs, :class:`LaunchCopier` intercepts each launch at ``JITFunction.run`` (and
``InterpretedFunction.run``, so the same path runs under ``TRITON_INTERPRET=1`` on a CPU) and,
before the kernel runs, copies the storage of every tensor argument (same offset and strides,
so the same pointer alignment and specialization; tensors that share storage share one copy).
The launch itself goes on unchanged. After the test, ``kperf_ci.measure.measure_replay.replay``
relaunches each
distinct launch on its copies with the same ``JITFunction``, arguments, options and grid, so
in-place kernels and atomics never touch the test's own tensors, and measures it with
:func:`kperf_ci.measure.measure_replay.replay` : static metrics of the compiled kernel, timing by
:mod:`kperf_ci.capture.timing.engine` (the method of ``kperf.bench``), one instrumented launch for
regions and analyses.

Why a hook of its own and not ``capture/static/record.py``'s: that hook serves static mode (the
interpreter's launch path, specializations for the AOT compile) and is being reshaped there;
replay needs the call as made (arguments, keyword options, grid) and a copy taken *before* the
launch, which neither record.py nor ``capture/launches/gpu.py`` (arguments bound after the launch) keep.

Identical launches (same kernel, argument shapes/strides/dtypes/alignment, scalar values and
options) are copied and replayed once. Launches made while the autotuner benchmarks its
configs are not copied: the launch with the chosen config is. Limits
(:class:`ReplayLimits`): device memory for the copies, distinct launches and seconds per
test; each one that bites is reported with the number of launches it left out.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kperf_ci.capture.launches import gpu

MIB = 2**20


@dataclass(frozen=True)
class ReplayLimits:
    copy_bytes: int = 4096 * MIB  # device memory per test for argument copies
    launches: int = 32  # distinct launches per test
    seconds: float = 120.0  # host seconds of replay per test

    @classmethod
    def from_settings(cls, settings: Any) -> ReplayLimits:
        return cls(
            copy_bytes=int(settings.replay_copy_mb * MIB),
            launches=int(settings.replay_launches),
            seconds=float(settings.replay_seconds),
        )


#: Where each limit is set, for the line that says it bit.
LIMIT_SETTING = {
    "copy memory": "replay_copy_mb",
    "launches": "replay_launches",
    "seconds": "replay_seconds",
}


@dataclass
class CapturedLaunch:
    """One distinct launch: the call as the test made it, its arguments replaced by copies."""

    jit_fn: Any
    args: tuple
    kwargs: dict[str, Any]
    grid: Any  # as given (a tuple or a callable of the meta-parameters)
    grid_seen: tuple[int, int, int] | None = None  # resolved at the launch
    kernel: Any = None  # what JITFunction.run returned (a CompiledKernel on a GPU)
    copy_bytes: int = 0
    count: int = 1  # identical launches the test made

    @property
    def name(self) -> str:
        fn = getattr(self.jit_fn, "fn", None)
        return getattr(fn, "__name__", None) or getattr(self.jit_fn, "__name__", "?")

    def call(self) -> Callable[[], Any]:
        """A zero-argument relaunch on the copies, through the same JIT entry point. ``run`` is
        looked up at each call, so hooks installed later (capture_launches, the instrumented
        launch) see the relaunch as they see any launch."""
        fn, args, kwargs, grid = self.jit_fn, self.args, self.kwargs, self.grid
        return lambda: fn.run(*args, grid=grid, warmup=False, **kwargs)


# ------------------------------------------------------------------------------ copies


def _is_tensor(v: Any) -> bool:
    return hasattr(v, "untyped_storage") and hasattr(v, "data_ptr") and hasattr(v, "stride")


def _storages(value: Any, out: dict[int, int]) -> None:
    """Distinct storages (data pointer -> bytes) reachable from an argument."""
    if _is_tensor(value):
        s = value.untyped_storage()
        out[s.data_ptr()] = s.nbytes()
    elif isinstance(value, (tuple, list)):
        for v in value:
            _storages(v, out)
    elif dataclasses.is_dataclass(value) and _is_tensor(getattr(value, "base", None)):
        _storages(value.base, out)  # a tensor descriptor


def _copy(value: Any, memo: dict[int, Any]) -> Any:
    """``value`` with every tensor replaced by a view of a copy of its whole storage."""
    if _is_tensor(value):
        import torch

        s = value.untyped_storage()
        key = s.data_ptr()
        if key not in memo:
            memo[key] = s.clone()
        # set_ keeps offset and strides: the same pointer alignment and strides the kernel saw
        return torch.empty(0, dtype=value.dtype, device=value.device).set_(
            memo[key], value.storage_offset(), value.size(), value.stride()
        )
    if isinstance(value, (tuple, list)):
        return type(value)(_copy(v, memo) for v in value)
    if dataclasses.is_dataclass(value) and _is_tensor(getattr(value, "base", None)):
        return dataclasses.replace(value, base=_copy(value.base, memo))
    return value


def _sig(value: Any) -> Any:
    """What makes two launches different work: tensor layout and alignment, scalar values."""
    if _is_tensor(value):
        return ("T", str(value.dtype), tuple(value.shape), tuple(value.stride()), value.data_ptr() % 16)
    if isinstance(value, (tuple, list)):
        return tuple(_sig(v) for v in value)
    if dataclasses.is_dataclass(value) and _is_tensor(getattr(value, "base", None)):
        return ("D", _sig(value.base), repr(dataclasses.replace(value, base=None)))
    if isinstance(value, float):
        return "float"  # a value that does not specialize the kernel
    return repr(value)


def _grid_sig(grid: Any) -> Any:
    return "callable" if callable(grid) else repr(grid)


def _norm_grid(grid: Any) -> tuple[int, int, int]:
    g = tuple(int(x) for x in grid)
    return (g + (1, 1, 1))[:3]  # type: ignore[return-value]


# ------------------------------------------------------------------------------ interception


@dataclass
class LaunchCopier:
    """Copies the arguments of each distinct launch made inside :meth:`capturing`."""

    limits: ReplayLimits = field(default_factory=ReplayLimits)
    launches: list[CapturedLaunch] = field(default_factory=list)
    left_out: dict[str, int] = field(default_factory=dict)  # limit -> launches it left out
    copy_bytes: int = 0
    _seen: dict[Any, CapturedLaunch] = field(default_factory=dict)
    _refused: set[Any] = field(default_factory=set)  # launches a limit left out, counted once
    _local: threading.local = field(default_factory=threading.local)

    def clear(self) -> None:
        self.launches, self.left_out, self.copy_bytes, self._seen, self._refused = [], {}, 0, {}, set()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No copies inside: ``kperf.bench`` measures its callable itself."""
        depth = getattr(self._local, "paused", 0)
        self._local.paused = depth + 1
        try:
            yield
        finally:
            self._local.paused = depth

    @contextlib.contextmanager
    def capturing(self) -> Iterator[LaunchCopier]:
        """Hooks installed for the block, removed in ``finally``."""
        from triton.runtime.autotuner import Autotuner
        from triton.runtime.jit import JITFunction

        patched: list[tuple[Any, str, Any]] = [(JITFunction, "run", JITFunction.run)]
        with contextlib.suppress(ImportError):
            from triton.runtime.interpreter import InterpretedFunction

            patched.append((InterpretedFunction, "run", InterpretedFunction.run))
        if hasattr(Autotuner, "_bench"):
            patched.append((Autotuner, "_bench", Autotuner._bench))
        try:
            for cls, name, orig in patched:
                setattr(cls, name, self._bench_wrapper(orig) if name == "_bench" else self._run_wrapper(orig))
            yield self
        finally:
            for cls, name, orig in reversed(patched):
                setattr(cls, name, orig)

    def _bench_wrapper(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        copier = self

        def _bench(tuner: Any, *args: Any, **kwargs: Any) -> Any:
            with copier.paused():  # the autotuner timing its configs: not the test's launch
                return orig(tuner, *args, **kwargs)

        return _bench

    def _run_wrapper(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        copier = self

        def run(jit_fn: Any, *args: Any, grid: Any, warmup: Any, **kwargs: Any) -> Any:
            if warmup or getattr(copier._local, "paused", 0):
                return orig(jit_fn, *args, grid=grid, warmup=warmup, **kwargs)
            launch = copier._before(jit_fn, args, kwargs, grid)
            if launch is None:
                return orig(jit_fn, *args, grid=grid, warmup=warmup, **kwargs)
            g = grid
            if callable(grid):

                def g(meta: Any, _grid: Any = grid) -> Any:
                    r = _grid(meta)
                    launch.grid_seen = _norm_grid(r)
                    return r
            else:
                launch.grid_seen = _norm_grid(grid)
            with copier.paused():  # nothing the launch itself runs is the test's launch
                kernel = orig(jit_fn, *args, grid=g, warmup=warmup, **kwargs)
            launch.kernel = kernel.result() if hasattr(kernel, "result") else kernel
            return kernel

        return run

    def _before(self, jit_fn: Any, args: tuple, kwargs: dict, grid: Any) -> CapturedLaunch | None:
        """The new launch with its copies, or None when it is a repeat or a limit bites."""
        key = (
            id(jit_fn),
            _sig(args),
            tuple(sorted((k, _sig(v)) for k, v in kwargs.items())),
            _grid_sig(grid),
        )
        if key in self._seen:
            self._seen[key].count += 1
            return None
        if key in self._refused:
            return None
        storages: dict[int, int] = {}
        _storages((args, tuple(kwargs.values())), storages)
        need = sum(storages.values())
        limit = None
        if len(self.launches) >= self.limits.launches:
            limit = "launches"
        elif self.copy_bytes + need > self.limits.copy_bytes:
            limit = "copy memory"
        if limit is not None:  # counted once per distinct launch, as replays are
            self._refused.add(key)
            self.left_out[limit] = self.left_out.get(limit, 0) + 1
            return None
        memo: dict[int, Any] = {}
        launch = CapturedLaunch(
            jit_fn=jit_fn,
            args=_copy(args, memo),
            kwargs={k: _copy(v, memo) for k, v in kwargs.items()},
            grid=grid,
            copy_bytes=need,
        )
        self.copy_bytes += need
        self._seen[key] = launch
        self.launches.append(launch)
        return launch


# ------------------------------------------------------------------------------ device side


@dataclass
class ReplayDevice:
    """The device side of a replay. :meth:`cuda` is the real one; CPU tests build one with a
    fake timing backend and a capture that runs the interpreter."""

    capture: Callable[[Callable[[], Any]], list[Any]]  # run once -> gpu.LaunchInfo s (static metrics)
    gpu_name: str
    sm_count: int
    backend: Any = None  # timing.DeviceBackend; None: CUDA events
    # (Measurement, call) -> regions by kernel name; None: one instrumented launch on the device
    regions: Callable[[Any, Callable[[], Any]], dict[str, Any]] | None = None

    @classmethod
    def cuda(cls) -> ReplayDevice:
        import torch

        def capture(call: Callable[[], Any]) -> list[Any]:
            _result, launches = gpu.capture_launches(call)
            torch.cuda.synchronize()
            return launches

        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        return cls(capture, torch.cuda.get_device_name(), props.multi_processor_count)
