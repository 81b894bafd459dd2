"""Guards installed in the harness process before a candidate is imported.

Each guard exists because of a reward hack seen in public kernel-generation benchmarks:

- network: a candidate that downloads a solution or phones home (the harness has no business
  on the network; a dead proxy in the environment and a socket guard here);
- torch ops and kernel launches: candidates that call the reference or torch's own ops instead
  of a kernel (KernelBench #82, the Sakana incident, gpu-mode reference-kernels #159-#167);
- streams: work launched on a side stream and not synchronized, so the timed stream sees
  nothing (gpu-mode reference-kernels, pygpubench #7);
- timers: patched ``time``/CUDA events/``do_bench`` that report what the candidate wants
  (tensara #238);
- poison: outputs allocated by the launcher are filled with NaN, so a candidate that writes
  nothing and hopes the allocator hands back a previous correct result fails.

Nothing here imports kperf_ci modules that a candidate could not also see: the guards record
what happened; the harness decides.
"""

from __future__ import annotations

import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Any

#: torch functions a launcher may call outside a Triton kernel: allocation, views and metadata.
#: Everything else (arithmetic, reductions, matmul, softmax, copies) computes, and a launcher
#: that computes is not a kernel.
ALLOWED_OPS = frozenset(
    """
    __get__ __set__ shape dtype device size stride numel element_size data_ptr dim ndim
    is_contiguous contiguous reshape view view_as flatten unsqueeze squeeze expand t transpose
    permute __getitem__ __len__ __format__ __repr__ __hash__ __bool__ __index__ __int__
    storage_offset is_cuda layout requires_grad untyped_storage nbytes itemsize
    empty empty_like empty_strided new_empty zeros zeros_like new_zeros __eq__ __ne__
    is_floating_point is_complex __setstate__ __reduce_ex__ __deepcopy__
    """.split()
)
ALLOC_OPS = frozenset({"empty", "empty_like", "empty_strided", "new_empty"})


class NetworkBlocked(OSError):
    """Raised to a candidate that opens a connection."""


@dataclass
class Record:
    """What the candidate did during the guarded calls."""

    network: list[str] = field(default_factory=list)
    torch_ops: list[str] = field(default_factory=list)
    kernels: list[str] = field(default_factory=list)  # co_filename of each launched kernel
    streams: list[str] = field(default_factory=list)

    def clear(self) -> None:
        self.torch_ops.clear()
        self.kernels.clear()
        self.streams.clear()


RECORD = Record()
_ACTIVE = {"call": False, "kernel": 0}


def install_network_guard() -> None:
    """Every outgoing connection or name lookup raises and is recorded."""

    def refuse(what: str) -> Any:
        def f(*a: Any, **k: Any) -> Any:
            RECORD.network.append(what)
            raise NetworkBlocked(f"network access blocked in the kperf agent harness ({what})")

        return f

    socket.socket.connect = refuse("connect")  # type: ignore[method-assign]
    socket.socket.connect_ex = refuse("connect_ex")  # type: ignore[method-assign]
    socket.socket.sendto = refuse("sendto")  # type: ignore[method-assign]
    socket.create_connection = refuse("create_connection")
    socket.getaddrinfo = refuse("getaddrinfo")


def _op_name(func: Any) -> str:
    name = getattr(func, "__name__", None) or repr(func)
    if name == "__get__":  # a property such as Tensor.shape: name the property
        owner = getattr(func, "__self__", None)
        name = getattr(owner, "__name__", name)
    return name


def op_guard(torch: Any, poison: bool = True) -> Any:
    """A TorchFunctionMode that records compute ops outside kernels and poisons allocations."""
    from torch.overrides import TorchFunctionMode

    class OpGuard(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            kwargs = kwargs or {}
            if _ACTIVE["kernel"]:  # Triton's own launch machinery (the interpreter copies)
                return func(*args, **kwargs)
            name = _op_name(func)
            out = func(*args, **kwargs)
            if name not in ALLOWED_OPS:
                RECORD.torch_ops.append(name)
            elif poison and name in ALLOC_OPS and isinstance(out, torch.Tensor):
                _poison(torch, out)
            return out

    return OpGuard()


def _poison(torch: Any, t: Any) -> None:
    if t.dtype.is_floating_point:
        t.fill_(float("nan"))
    elif t.dtype != torch.bool:
        t.fill_(-123456789 if t.dtype.itemsize >= 4 else -99)


def install_launch_hook(torch: Any, on_gpu: bool) -> None:
    """Wrap Triton's launch entry points: record which file each launched kernel comes from,
    check the stream it goes to, and let Triton's own torch calls through the op guard."""
    from triton.runtime.jit import JITFunction

    targets: list[Any] = [JITFunction]
    try:
        from triton.runtime.interpreter import InterpretedFunction

        targets.append(InterpretedFunction)
    except ImportError:  # pragma: no cover - older triton
        pass
    for cls in targets:
        orig = cls.run

        def run(self: Any, *a: Any, _orig: Any = orig, **k: Any) -> Any:
            if _ACTIVE["call"]:
                fn = getattr(self, "fn", None)
                code = getattr(fn, "__code__", None)
                RECORD.kernels.append(getattr(code, "co_filename", "?"))
                if on_gpu and torch.cuda.current_stream() != torch.cuda.default_stream():
                    RECORD.streams.append("kernel launched on a non-default stream")
            _ACTIVE["kernel"] += 1
            try:
                return _orig(self, *a, **k)
            finally:
                _ACTIVE["kernel"] -= 1

        cls.run = run


def install_stream_guard(torch: Any) -> None:
    """Record any stream a candidate creates or switches to during a guarded call.

    The classes keep their identity (``isinstance`` checks in torch and in kperf's timing still
    hold): their ``__new__`` is wrapped, not the class replaced; the functions are wrapped."""
    cuda = torch.cuda

    def recorder(orig: Any, name: str, is_new: bool) -> Any:
        def wrapper(*a: Any, **k: Any) -> Any:
            # torch.cuda.current_stream() builds a Stream object for the stream already current
            # (stream_id=...), and so does this guard's own check below: that is no new stream
            if _ACTIVE["call"] and not (is_new and "stream_id" in k):
                RECORD.streams.append(f"torch.cuda.{name}")
            return orig(*a, **k)

        return staticmethod(wrapper) if is_new else wrapper

    for name in ("Stream", "ExternalStream"):
        cls = getattr(cuda, name, None)
        if isinstance(cls, type) and "__new__" in vars(cls):
            cls.__new__ = recorder(
                vars(cls)["__new__"].__func__
                if isinstance(vars(cls)["__new__"], staticmethod)
                else vars(cls)["__new__"],
                name,
                True,
            )
    for name in ("stream", "set_stream"):
        fn = getattr(cuda, name, None)
        if fn is not None:
            setattr(cuda, name, recorder(fn, name, False))


class guarded_call:
    """Context for one candidate (or reference) call: the op guard on, launches recorded."""

    def __init__(self, torch: Any, poison: bool = True):
        self.mode = op_guard(torch, poison)

    def __enter__(self) -> guarded_call:
        RECORD.clear()
        _ACTIVE["call"] = True
        self.mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.mode.__exit__(*exc)
        _ACTIVE["call"] = False


def timer_identities(torch: Any, extra: dict[str, Any]) -> dict[str, int]:
    """id() of every clock and timing entry point a candidate could patch to fake a speedup."""
    import triton.testing

    objs: dict[str, Any] = {
        "time.perf_counter": time.perf_counter,
        "time.perf_counter_ns": time.perf_counter_ns,
        "time.time": time.time,
        "time.monotonic": time.monotonic,
        "torch.cuda.Event": torch.cuda.Event,
        "torch.cuda.Event.elapsed_time": getattr(torch.cuda.Event, "elapsed_time", None),
        "torch.cuda.Event.record": getattr(torch.cuda.Event, "record", None),
        "torch.cuda.synchronize": torch.cuda.synchronize,
        "triton.testing.do_bench": triton.testing.do_bench,
        **extra,
    }
    return {k: id(v) for k, v in objs.items()}


def changed_timers(before: dict[str, int], after: dict[str, int]) -> list[str]:
    return sorted(k for k in before if after.get(k) != before[k])


def modules_loaded() -> set[str]:
    return set(sys.modules)
