"""A fake CUDA device for static capture on a machine without a GPU.

Suites that create their tensors on ``"cuda"`` unconditionally (FlagGems, attorch) cannot run on
a CPU machine at all, and wrappers around kernels ask the device questions CPU torch cannot
answer. While :class:`FakeCuda` is active:

- every torch call that names a CUDA device (``device="cuda"``, ``device=torch.device("cuda", 0)``,
  ``x.cuda()``, ``x.to("cuda")``) gets the CPU instead. Kernels then run in Triton's interpreter on
  CPU tensors, whose alignment and divisibility are what the specialization sees (the same rules
  as for any CPU tensor, see README "Static mode");
- ``torch.cuda`` answers as the device of the target arch would (:class:`FakeGpu`: the first
  ``--kperf-arch``, its numbers from :mod:`kperf_ci.hardware`): ``get_device_name``,
  ``get_device_capability``, ``get_device_properties`` (``multi_processor_count`` and the other
  tabulated limits), ``current_device`` (0), ``device(...)`` (a guard that accepts the ``None``
  index of a CPU tensor);
- streams and events are no-ops (``Stream``, ``stream(...)``, ``current_stream``, ``Event``), and
  so are ``synchronize``, ``set_device``, ``empty_cache``, ``manual_seed`` and their kin;
- any other public ``torch.cuda`` function that raises is reported by name through
  ``on_unfaked`` (then re-raised): a test that hits a gap learns which call it was, once.

``torch.cuda.is_available()`` keeps saying False: a test that asks is told the truth, and a test
side that probes it behaves as it does on any CPU machine.

It is switched on around marked tests' setup, call and teardown in static mode without CUDA, never
on a GPU, and in the compile worker while it imports the user's kernel modules
(:mod:`kperf_ci.capture.static._worker`): import-time probes see the same device on both sides.
Switched on before torch is imported, it imports nothing: the fakes go in when torch is first
imported inside it (an import hook), so a static session whose tests never use torch (a usage
error, a suite of plain tests) never pays torch's ~1.3 s import.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.abc
import importlib.util
import sys
import threading
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kperf_ci.capture.static._standins import stand_in_limits
from kperf_ci.hardware import GPUS, ArchLimits, GpuSpec, arch_capability, normalize_arch

#: the device the fakes describe when no arch is given (the default ``--kperf-arch``)
DEFAULT_ARCH = "sm_90"

_DEVICE_KWARGS = ("device",)
_NOOPS = (
    "synchronize",
    "empty_cache",
    "set_device",
    "set_stream",
    "manual_seed",
    "manual_seed_all",
    "seed",
    "seed_all",
    "reset_peak_memory_stats",
)
#: public torch.cuda functions left alone and never reported: their CPU answer is the truth
_TRUTHFUL = frozenset({"is_available", "is_initialized", "device_count"})


def _is_cuda(dev: Any) -> bool:
    if isinstance(dev, str):
        return dev.split(":")[0].strip().lower() == "cuda"
    if isinstance(dev, int) and not isinstance(dev, bool):
        return True  # torch reads a bare int device as a CUDA ordinal
    return getattr(dev, "type", None) == "cuda"


def _cpu_args(func: Any, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
    import torch

    kwargs = dict(kwargs)
    for k in _DEVICE_KWARGS:
        if k in kwargs and _is_cuda(kwargs[k]):
            kwargs[k] = "cpu"
    name = getattr(func, "__name__", "")
    if name == "to":
        # Tensor.to("cuda"), .to(torch.device("cuda")), .to("cuda", torch.float16), .to(other)
        args = tuple(
            "cpu" if i > 0 and _is_cuda(a) and not isinstance(a, torch.Tensor) else a
            for i, a in enumerate(args)
        )
    return args, kwargs


# --------------------------------------------------------------------------------------------
# the device the fakes describe


@dataclass(frozen=True)
class FakeGpu:
    """The device of a target arch: capability from the arch, SM count and limits from its row of
    :data:`kperf_ci.hardware.ARCHS` (the same row the compile worker's Triton driver reports), and
    the name of a tabulated GPU of that arch and SM count when there is one."""

    arch: str
    limits: ArchLimits
    spec: GpuSpec | None

    @classmethod
    def for_arch(cls, arch: str | int | None = None) -> FakeGpu:
        arch = normalize_arch(arch or DEFAULT_ARCH)
        limits = stand_in_limits(arch_capability(arch))
        spec = next((g for g in GPUS if g.arch == limits.arch and g.sm_count == limits.sm_count), None)
        return cls(arch, limits, spec)

    @property
    def capability(self) -> tuple[int, int]:
        return divmod(arch_capability(self.arch), 10)

    @property
    def name(self) -> str:
        if self.spec is not None:
            return f"NVIDIA {self.spec.name}"
        return f"NVIDIA GPU {self.arch} (kperf static stand-in)"


class FakeDeviceProperties:
    """What ``torch.cuda.get_device_properties()`` returns under the fake: the tabulated facts of
    :class:`FakeGpu` under torch's attribute names. A property that is not tabulated (e.g.
    ``total_memory``) is reported through ``on_unfaked`` and raises AttributeError: a guess would
    be silent."""

    def __init__(self, gpu: FakeGpu, on_unfaked: Callable[[str], None] | None = None) -> None:
        lim = gpu.limits
        self._on_unfaked = on_unfaked
        self.name = gpu.name
        self.major, self.minor = gpu.capability
        self.multi_processor_count = lim.sm_count
        self.warp_size = lim.warp_size
        self.regs_per_multiprocessor = lim.regs_per_sm
        self.shared_memory_per_block_optin = lim.smem_per_block
        if lim.smem_per_sm is not None:
            self.shared_memory_per_multiprocessor = lim.smem_per_sm
        if lim.max_warps_per_sm is not None:
            self.max_threads_per_multi_processor = lim.max_warps_per_sm * lim.warp_size
        if gpu.spec is not None and gpu.spec.l2_bytes is not None:
            self.L2_cache_size = gpu.spec.l2_bytes

    def __getattr__(self, name: str) -> Any:  # only for attributes not set above
        if not name.startswith("_") and self._on_unfaked is not None:
            self._on_unfaked(f"torch.cuda.get_device_properties().{name}")
        raise AttributeError(f"static mode's fake device has no tabulated {name!r}")

    def __repr__(self) -> str:
        return (
            f"FakeDeviceProperties(name={self.name!r}, major={self.major}, minor={self.minor}, "
            f"multi_processor_count={self.multi_processor_count})"
        )


class _NullContext:
    """Accepts any arguments; as a context manager, does nothing."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.idx = args[0] if args else kwargs.get("device")

    def __enter__(self) -> _NullContext:
        return self

    def __exit__(self, *exc: Any) -> bool:
        return False


class FakeEvent:
    """``torch.cuda.Event`` under the fake: nothing runs asynchronously, so every event is done."""

    def __init__(
        self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ) -> None:
        self.enable_timing = enable_timing

    def record(self, stream: Any = None) -> None:
        pass

    def wait(self, stream: Any = None) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def elapsed_time(self, end_event: Any) -> float:
        return 0.0  # nothing is timed in static mode


class FakeStream(_NullContext):
    """``torch.cuda.Stream`` under the fake: work is never queued, so waits and syncs are no-ops."""

    cuda_stream = 0
    priority = 0

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        super().__init__(device)

    def wait_stream(self, stream: Any) -> None:
        pass

    def wait_event(self, event: Any) -> None:
        pass

    def record_event(self, event: Any = None) -> FakeEvent:
        return event if event is not None else FakeEvent()

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True


# --------------------------------------------------------------------------------------------
# switching it on


class FakeCuda:
    """Context manager: CUDA devices in torch calls become the CPU, and ``torch.cuda`` answers as
    the device of ``arch`` would (see the module docstring). ``on_unfaked(name)`` is told about a
    public ``torch.cuda`` function that raised while active, or an untabulated device property."""

    def __init__(
        self, arch: str | int | None = None, on_unfaked: Callable[[str], None] | None = None
    ) -> None:
        self.gpu = FakeGpu.for_arch(arch)
        self._on_unfaked = on_unfaked
        self._mode: Any = None
        self._saved: dict[str, Any] = {}
        self._waiting: AfterImport | None = None  # applies the fakes once torch is imported
        self._depth = threading.local()  # nesting of reported torch.cuda calls, per thread

    def _fakes(self) -> dict[str, Any]:
        gpu = self.gpu
        props = FakeDeviceProperties(gpu, self._on_unfaked)
        default_stream = FakeStream()
        fakes: dict[str, Any] = {name: (lambda *a, **k: None) for name in _NOOPS}
        fakes.update(
            current_device=lambda: 0,
            get_device_name=lambda device=None: gpu.name,
            get_device_capability=lambda device=None: gpu.capability,
            get_device_properties=lambda device=None: props,
            device=_NullContext,  # `with torch.cuda.device(x.device.index)`: None for a CPU tensor
            Stream=FakeStream,
            Event=FakeEvent,
            stream=_NullContext,
            current_stream=lambda device=None: default_stream,
            default_stream=lambda device=None: default_stream,
        )
        return fakes

    def _reporting(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        on_unfaked = self._on_unfaked
        depth = self._depth

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            # only the call the test made is named: mem_get_info fails inside in cudart()
            depth.n = getattr(depth, "n", 0) + 1
            try:
                return fn(*args, **kwargs)
            except Exception:
                if on_unfaked is not None and depth.n == 1:
                    on_unfaked(f"torch.cuda.{name}")
                raise
            finally:
                depth.n -= 1

        return call

    def __enter__(self) -> FakeCuda:
        if "torch" in sys.modules:
            self._apply()
        else:
            # torch is not imported yet: the fakes go in when it is, if it is, before the importer
            # sees the module (a session whose tests never import torch never pays for it)
            self._waiting = AfterImport(self._apply)
            sys.meta_path.insert(0, self._waiting)
        return self

    def _apply(self) -> None:
        self._stop_waiting()
        import torch
        from torch.overrides import TorchFunctionMode

        class _Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
                if getattr(func, "__name__", "") == "cuda" and args:  # Tensor.cuda(): stays on the CPU
                    return args[0]
                args, kwargs = _cpu_args(func, tuple(args), kwargs or {})
                return func(*args, **kwargs)

        self._mode = _Mode()
        self._mode.__enter__()
        fakes = self._fakes()
        if self._on_unfaked is not None:
            # every other public torch.cuda function: a call that raises is named, not guessed at
            for name, fn in vars(torch.cuda).items():
                if (
                    isinstance(fn, types.FunctionType)
                    and not name.startswith("_")
                    and name not in fakes
                    and name not in _TRUTHFUL
                    and (fn.__module__ or "").startswith("torch.cuda")
                ):
                    fakes[name] = self._reporting(name, fn)
        for name, fake in fakes.items():
            self._saved[name] = getattr(torch.cuda, name, None)
            setattr(torch.cuda, name, fake)

    def _stop_waiting(self) -> None:
        if self._waiting is not None:
            with contextlib.suppress(ValueError):
                sys.meta_path.remove(self._waiting)
            self._waiting = None

    def __exit__(self, *exc: Any) -> None:
        self._stop_waiting()
        if self._mode is None and not self._saved:
            return  # torch was never imported while active: nothing was faked
        import torch

        for name, fn in self._saved.items():
            if fn is None:
                delattr(torch.cuda, name)
            else:
                setattr(torch.cuda, name, fn)
        self._saved.clear()
        if self._mode is not None:
            self._mode.__exit__(*exc)
            self._mode = None


class AfterImport(importlib.abc.MetaPathFinder):
    """On ``sys.meta_path`` while a :class:`FakeCuda` waits for torch: ``torch`` is found and
    loaded as it would be without it, then ``then()`` runs before the import statement returns."""

    def __init__(self, then: Callable[[], None]) -> None:
        self._then = then
        self._finding = False

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != "torch" or self._finding:
            return None
        self._finding = True
        try:
            spec = importlib.util.find_spec(fullname)  # the finders after this one
        finally:
            self._finding = False
        if spec is None or spec.loader is None:
            return None
        spec.loader = _ThenLoader(spec.loader, self._then)
        return spec


class _ThenLoader(importlib.abc.Loader):
    """``loader``, then ``then()``; the module keeps ``loader`` as its own (``__loader__``)."""

    def __init__(self, loader: Any, then: Callable[[], None]) -> None:
        self._loader, self._then = loader, then

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__loader__ = module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        self._then()


@contextlib.contextmanager
def fake_cuda(
    enabled: bool = True, arch: str | int | None = None, on_unfaked: Callable[[str], None] | None = None
) -> Iterator[None]:
    """:class:`FakeCuda` when ``enabled`` and torch is installed, else nothing (a compile worker
    in an environment with Triton but no torch has no torch.cuda to fake)."""
    if not enabled or importlib.util.find_spec("torch") is None:
        yield
        return
    with FakeCuda(arch, on_unfaked):
        yield
