"""Gaps of Triton 3.6's interpreter that static capture patches while a kernel executes.

- **Float scalar arguments** reach the kernel as Python floats, so ``eps.to(tl.float32)`` fails
  ("'float' object has no attribute 'to'"). Compiled Triton passes them as fp32 scalars; the
  patch converts them the same way (:func:`_implicit_cvt`).
- **libdevice** (``triton.language.extra.libdevice`` / ``.cuda.libdevice``): the generic module's
  functions are stubs that return None and the CUDA module's need a compiler, so ``rsqrt`` and
  ``tanh`` give None or an error. While a kernel runs, the names bound to them in the globals
  of the kernel and of the jit functions it reaches are swapped for numpy implementations
  (:data:`NUMPY_LIBDEVICE`), and put back afterwards.

A libdevice function without a numpy version here raises NotImplementedError naming it; the
recorder then captures the launch without executing it and says so
(see :mod:`kperf_ci.capture.static.record`).
"""

from __future__ import annotations

import contextlib
import math
import types
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

_LIBDEVICE_MODULES = ("triton.language.extra.libdevice", "triton.language.extra.cuda.libdevice")


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[x.dtype])(x)


#: name -> numpy function of the libdevice call's operands (results cast to the first operand's type).
NUMPY_LIBDEVICE: dict[str, Callable[..., Any]] = {
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "sqrt": np.sqrt,
    "tanh": np.tanh,
    "exp": np.exp,
    "exp2": np.exp2,
    "expm1": np.expm1,
    "log": np.log,
    "log2": np.log2,
    "log10": np.log10,
    "log1p": np.log1p,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "atan2": np.arctan2,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "erf": _erf,
    "pow": np.power,
    "fast_expf": np.exp,
    "fast_logf": np.log,
    "fast_dividef": np.divide,
    "div_rn": np.divide,
    "rcp_rn": lambda x: 1.0 / x,
    "floor": np.floor,
    "ceil": np.ceil,
    "trunc": np.trunc,
    "rint": np.rint,
    "round": np.round,
    "nearbyint": np.rint,
    "abs": np.abs,
    "fabs": np.abs,
    "fmax": np.fmax,
    "fmin": np.fmin,
    "fma": lambda a, b, c: a * b + c,
    "isnan": np.isnan,
    "isinf": np.isinf,
    "signbit": np.signbit,
}


def _as_float(t: Any) -> np.ndarray:
    """The operand's values; bf16 (kept as uint16 bit patterns by the interpreter) as fp32."""
    import triton.language as tl
    from triton.runtime.interpreter import _convert_float

    if t.dtype == tl.bfloat16:
        data = t.handle.data
        return _convert_float(data, tl.bfloat16, tl.float32, None).view(np.float32).reshape(data.shape)
    return t.handle.data


def _from_float(out: np.ndarray, elem: Any, np_dtype: np.dtype) -> np.ndarray:
    import triton.language as tl
    from triton.runtime.interpreter import _convert_float

    if elem == tl.bfloat16:
        bits = _convert_float(out.astype(np.float32), tl.float32, tl.bfloat16, "rtne").view(np.uint16)
        return bits.reshape(out.shape)
    return out.astype(np_dtype, copy=False)


def _numpy_op(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def op(*args: Any, _semantic: Any = None, **_kw: Any) -> Any:
        import triton.language as tl
        from triton.runtime.interpreter import TensorHandle, interpreter_semantic

        tensors = [interpreter_semantic.to_tensor(a) if not isinstance(a, tl.tensor) else a for a in args]
        data = [_as_float(t) for t in tensors]
        shape = np.broadcast_shapes(*(d.shape for d in data))
        first = tensors[0]
        with np.errstate(all="ignore"):  # inf/nan as the GPU gives them, no warnings
            out = np.asarray(fn(*(np.broadcast_to(d, shape) for d in data)))
        if out.dtype == np.bool_:
            block = any(t.type.is_block() for t in tensors)
            ty = tl.block_type(tl.int1, list(shape)) if block else tl.int1
            return tl.tensor(TensorHandle(out, tl.int1), ty)
        elem = first.dtype
        out = _from_float(out, elem, tensors[0].handle.data.dtype)
        block = any(t.type.is_block() for t in tensors)
        ty = tl.block_type(elem, list(shape)) if block else elem
        return tl.tensor(TensorHandle(np.ascontiguousarray(out), elem), ty)

    op.__name__ = name
    op.__qualname__ = f"kperf_numpy_libdevice.{name}"
    return op


_OPS = {name: _numpy_op(name, fn) for name, fn in NUMPY_LIBDEVICE.items()}


def _unsupported(name: str) -> Callable[..., Any]:
    def op(*_a: Any, **_k: Any) -> Any:
        raise NotImplementedError(f"libdevice.{name} (no numpy version for Triton's interpreter)")

    op.__name__ = name
    return op


def _is_libdevice_fn(v: Any) -> bool:
    return callable(v) and getattr(v, "__module__", None) in _LIBDEVICE_MODULES


def _libdevice_proxy(module: types.ModuleType) -> types.SimpleNamespace:
    """The module with numpy versions in front; other names pass through."""
    names = [k for k in dir(module) if not k.startswith("_")]
    ns = types.SimpleNamespace(
        **{k: _OPS.get(k) or _unsupported(k) for k in names if callable(getattr(module, k))}
    )
    return ns


def _swaps(fn: Any) -> list[tuple[dict[str, Any], str, Any]]:
    """(globals dict, name, replacement) for every libdevice name reachable from ``fn``."""
    out: list[tuple[dict[str, Any], str, Any]] = []
    seen: set[int] = set()
    stack = [fn]
    while stack:
        obj = stack.pop()
        py = obj
        for _ in range(8):  # InterpretedFunction/Autotuner/Heuristics -> plain function
            if isinstance(py, types.FunctionType):
                break
            py = getattr(py, "fn", None)
        if not isinstance(py, types.FunctionType):
            continue
        g = py.__globals__
        if id(g) in seen:
            continue
        seen.add(id(g))
        for name, v in list(g.items()):
            if isinstance(v, types.ModuleType) and v.__name__ in _LIBDEVICE_MODULES:
                out.append((g, name, _libdevice_proxy(v)))
            elif _is_libdevice_fn(v):
                fname = getattr(v, "__name__", name)
                out.append((g, name, _OPS.get(fname) or _unsupported(fname)))
            elif hasattr(v, "fn") and (hasattr(v, "run") or hasattr(v, "arg_names")):
                stack.append(v)  # another jit function the kernel may call
    return out


@contextlib.contextmanager
def libdevice_as_numpy(fn: Any) -> Iterator[int]:
    """While active, libdevice names seen by ``fn`` (and jit functions in its modules) are numpy
    versions. Yields how many names were swapped."""
    swaps = _swaps(fn)
    saved = [(g, name, g[name]) for g, name, _ in swaps]
    for g, name, new in swaps:
        g[name] = new
    try:
        yield len(swaps)
    finally:
        for g, name, old in saved:
            g[name] = old


class FloatScalars:
    """Patch of ``interpreter._implicit_cvt``: Python floats become fp32 scalars, as compiled
    Triton passes them. Installed by the recorder's hooks, removed with them."""

    def __init__(self) -> None:
        self._orig: Callable[[Any], Any] | None = None

    def install(self) -> None:
        from triton.runtime import interpreter

        if self._orig is not None:
            return
        orig = interpreter._implicit_cvt
        self._orig = orig

        def _implicit_cvt(arg: Any) -> Any:
            if isinstance(arg, float):
                import triton.language as tl

                handle = interpreter.TensorHandle(np.array([arg], dtype=np.float32), tl.float32)
                return tl.tensor(handle, tl.float32)
            return orig(arg)

        interpreter._implicit_cvt = _implicit_cvt

    def uninstall(self) -> None:
        if self._orig is None:
            return
        from triton.runtime import interpreter

        interpreter._implicit_cvt = self._orig
        self._orig = None
