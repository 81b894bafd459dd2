"""Describe one live launch (a kernel object, its arguments and grid) as a :class:`LaunchSpec`.

The specialization string (``LaunchSpec.spec``) is computed with Triton's own binder
(``create_function_from_signature`` + ``native_specialize_impl``), so two launches get the same
spec exactly when Triton would reuse the same compiled kernel for them.

:func:`describe_args` works on real GPU launches too (a ``JITFunction`` and its arguments).
"""

from __future__ import annotations

import inspect
import json
import math
import numbers
import os
import sys
import weakref
from typing import Any

from kperf_ci.capture.static.launch_spec import (
    IGNORED_KWARGS,
    NOT_IMPORTABLE,
    OPTION_ORDER,
    ArgSpec,
    LaunchSpec,
)
from kperf_ci.model import DEFAULT_OPTIONS

# --------------------------------------------------------------------------------------------
# describing arguments


def _unwrap(fn: Any) -> tuple[Any, Any]:
    """(innermost KernelInterface-like object, plain python function) of a kernel object."""
    obj = fn
    inner = None
    seen = 0
    while not inspect.isfunction(obj):
        inner = obj
        obj = getattr(obj, "fn", None)
        seen += 1
        if obj is None or seen > 16:
            raise TypeError(f"not a Triton kernel: {fn!r}")
    return inner, obj


def _do_not_specialize(inner: Any) -> tuple[list, list]:
    if inner is None:
        return [], []
    dns = getattr(inner, "do_not_specialize", None)
    dnsa = getattr(inner, "do_not_specialize_on_alignment", None)
    kw = getattr(inner, "kwargs", None) or {}  # InterpretedFunction keeps jit() kwargs here
    if dns is None:
        dns = kw.get("do_not_specialize")
    if dnsa is None:
        dnsa = kw.get("do_not_specialize_on_alignment")
    return list(dns or []), list(dnsa or [])


_BINDERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _binder(pyfn: Any, inner: Any) -> tuple[Any, list[Any]]:
    """Triton's own argument binder for this function (memoized)."""
    cached = _BINDERS.get(pyfn)
    if cached is not None:
        return cached
    from triton.backends import BaseBackend
    from triton.runtime.jit import KernelParam, create_function_from_signature

    sig = inspect.signature(pyfn)
    dns, dnsa = _do_not_specialize(inner)
    params = []
    for i, p in enumerate(sig.parameters.values()):
        params.append(KernelParam(i, p, i in dns or p.name in dns, i in dnsa or p.name in dnsa))
    binder = create_function_from_signature(sig, params, BaseBackend)
    _BINDERS[pyfn] = (binder, params)
    return binder, params


def _is_tensor_like(x: Any) -> bool:
    return hasattr(x, "data_ptr") and hasattr(x, "dtype") and callable(getattr(x, "data_ptr", None))


def _is_tensor_descriptor(x: Any) -> bool:
    return type(x).__name__ == "TensorDescriptor" and hasattr(x, "base") and hasattr(x, "block_shape")


def _triton_dtype_name(x: Any) -> str | None:
    """Triton type name ("fp32", "bf16", "i32", ...) of a tensor-like's dtype."""
    try:
        from triton._C.libtriton import native_specialize_impl
        from triton.backends import BaseBackend

        ty = native_specialize_impl(BaseBackend, x, False, False, False)[0]
        if isinstance(ty, str) and ty.startswith("*"):
            return ty[2:] if ty.startswith("*k") else ty[1:]
    except Exception:
        pass
    s = str(getattr(x, "dtype", ""))
    return _TORCH_DTYPES.get(s.replace("torch.", ""), s or None)


_TORCH_DTYPES = {
    "float32": "fp32",
    "float16": "fp16",
    "bfloat16": "bf16",
    "float64": "fp64",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "u8",
    "uint16": "u16",
    "uint32": "u32",
    "uint64": "u64",
    "bool": "i1",
    "float8_e4m3fn": "fp8e4nv",
    "float8_e5m2": "fp8e5",
    "float8_e4m3fnuz": "fp8e4b8",
    "float8_e5m2fnuz": "fp8e5b16",
}


def _jsonable(v: Any) -> bool:
    try:
        json.dumps(v, allow_nan=True)
        return True
    except (TypeError, ValueError):
        return False


def _describe_scalar(name: str, v: Any, constexpr: bool) -> ArgSpec | None:
    """A None, bool, number or string (Python's or numpy's) as its ArgSpec; None for anything
    else. bool is tested before int, as a bool is an int."""
    if v is None:
        return ArgSpec(name, "none", constexpr)
    if isinstance(v, bool):
        return ArgSpec(name, "bool", constexpr, value=v)
    if isinstance(v, int):
        return ArgSpec(name, "int", constexpr, value=int(v))
    if isinstance(v, float):
        return ArgSpec(name, "float", constexpr, value=v if math.isfinite(v) else repr(v))
    if isinstance(v, str):
        return ArgSpec(name, "str", constexpr, value=v)
    if isinstance(v, numbers.Integral):  # numpy integers
        return ArgSpec(name, "int", constexpr, value=int(v))
    if isinstance(v, numbers.Real) and not hasattr(v, "data_ptr"):  # numpy floats
        f = float(v)
        return ArgSpec(name, "float", constexpr, value=f if math.isfinite(f) else repr(f))
    return None


def _describe_tensor_descriptor(name: str, v: Any, constexpr: bool) -> ArgSpec:
    """A TMA tensor descriptor: its base tensor's dtype and alignment, its shape, strides,
    block shape and padding."""
    base = v.base
    return ArgSpec(
        name,
        "tensordesc",
        constexpr,
        dtype=_triton_dtype_name(base),
        aligned=_aligned(base),
        value={
            "shape": [int(s) for s in v.shape],
            "strides": [int(s) for s in v.strides],
            "block_shape": [int(s) for s in v.block_shape],
            "padding": str(getattr(v, "padding", "zero")),
        },
    )


def _describe_jit(name: str, v: Any, constexpr: bool) -> ArgSpec | None:
    """A jit function passed as constexpr (JITFunction or InterpretedFunction), named by module
    and qualname; None for one defined inside a function (no import finds it again by name) or
    one that does not unwrap to a Python function."""
    try:
        _, pyfn = _unwrap(v)
        if "<locals>" not in pyfn.__qualname__:
            return ArgSpec(
                name,
                "jit",
                constexpr,
                value={
                    "module": pyfn.__module__,
                    "qualname": pyfn.__qualname__,
                    "file": _source_file(pyfn),
                },
            )
    except TypeError:
        pass
    return None


def describe_value(name: str, v: Any, constexpr: bool = False) -> ArgSpec:
    """Describe one argument value (see :class:`ArgSpec`)."""
    scalar = _describe_scalar(name, v, constexpr)
    if scalar is not None:
        return scalar
    cls = type(v)
    mod = getattr(cls, "__module__", "") or ""
    if mod.startswith("triton") and cls.__name__ in ("dtype", "pointer_type") or _is_triton_dtype(v):
        return ArgSpec(name, "dtype", constexpr, value=str(getattr(v, "name", v)))
    if mod == "torch" and cls.__name__ == "dtype":
        return ArgSpec(name, "torch_dtype", constexpr, value=str(v).replace("torch.", ""))
    if cls.__name__ == "constexpr" and hasattr(v, "value"):
        return describe_value(name, v.value, True)
    if _is_tensor_descriptor(v):
        return _describe_tensor_descriptor(name, v, constexpr)
    if _is_tensor_like(v):
        return ArgSpec(name, "tensor", constexpr, dtype=_triton_dtype_name(v), aligned=_aligned(v))
    if isinstance(v, tuple):
        return ArgSpec(
            name,
            "tuple",
            constexpr,
            items=tuple(describe_value(f"{name}[{i}]", x, constexpr) for i, x in enumerate(v)),
        )
    if hasattr(v, "fn") and (hasattr(v, "run") or hasattr(v, "rewrite")):
        jit = _describe_jit(name, v, constexpr)
        if jit is not None:
            return jit
    return ArgSpec(name, "unknown", constexpr, value=repr(v)[:200])


def _is_triton_dtype(v: Any) -> bool:
    try:
        import triton.language as tl

        return isinstance(v, tl.dtype)
    except Exception:
        return False


def _aligned(t: Any) -> bool:
    try:
        return int(t.data_ptr()) % 16 == 0
    except Exception:
        return True


def _source_file(pyfn: Any) -> str:
    try:
        f = inspect.getsourcefile(pyfn) or ""
    except TypeError:
        f = ""
    return os.path.abspath(f) if f else ""


def _render_value(v: Any) -> str:
    if v is None or isinstance(v, (bool, int, float, str)):
        return json.dumps(v)
    if _is_triton_dtype(v):
        return str(getattr(v, "name", v))
    if hasattr(v, "fn"):
        try:
            return _unwrap(v)[1].__qualname__
        except TypeError:
            pass
    if isinstance(v, (tuple, list)):
        return "(" + ",".join(_render_value(x) for x in v) + ")"
    if hasattr(v, "value") and type(v).__name__ == "constexpr":
        return _render_value(v.value)
    return str(v)


def _render_spec_item(name: str, item: Any) -> str:
    if isinstance(item, tuple) and len(item) == 2 and item[0] == "constexpr":
        return f"{name}={_render_value(item[1])}"
    if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
        ty, attr = item
        return f"{name}:{ty}" + (f":{attr}" if attr else "")
    if isinstance(item, tuple) and len(item) >= 1 and isinstance(item[0], str) and len(item) == 1:
        return f"{name}:{item[0]}"
    # nested (tuple arguments): types and attributes side by side
    return f"{name}:{_render_value(item)}"


def config_string(options: dict[str, Any]) -> str:
    opts = {**DEFAULT_OPTIONS, **{k: v for k, v in options.items() if v is not None}}
    keys = [k for k in OPTION_ORDER] + sorted(k for k in opts if k not in OPTION_ORDER)
    return ",".join(f"{k}={_render_value(opts[k])}" for k in keys if k in opts)


def describe_args(fn: Any, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Describe one launch of ``fn`` (JITFunction, InterpretedFunction, Autotuner, ...).

    Returns a dict with ``args`` (tuple of ArgSpec, one per kernel parameter, defaults
    applied), ``options`` (launch options: kwargs that are not kernel parameters, JSON
    values only), ``spec`` and ``config`` (canonical strings), ``bound`` (name -> value, for
    grid evaluation) and ``reason`` (None, or why the launch cannot be replayed elsewhere).
    """
    inner, pyfn = _unwrap(fn)
    binder, params = _binder(pyfn, inner)
    names = [p.name for p in params]
    kw_args = {k: v for k, v in kwargs.items() if k in names}
    options_in = {k: v for k, v in kwargs.items() if k not in names and k not in IGNORED_KWARGS}
    bound, specialization, _ = binder(*args, **kw_args)

    specs = []
    reason = None
    for p in params:
        a = describe_value(p.name, bound[p.name], p.is_constexpr)
        if not a.replayable and reason is None:
            reason = f"argument {p.name!r} of type {type(bound[p.name]).__name__} cannot be replayed"
        specs.append(a)
    spec = ", ".join(_render_spec_item(p.name, item) for p, item in zip(params, specialization, strict=True))

    options = {}
    for k, v in options_in.items():
        if isinstance(v, list):
            v = tuple(v)
        if _jsonable(v):
            options[k] = v
        elif v is not None and reason is None:
            reason = f"launch option {k!r} of type {type(v).__name__} cannot be replayed"
    return {
        "args": tuple(specs),
        "options": options,
        "spec": spec,
        "config": config_string(options),
        "bound": bound,
        "reason": reason,
        "pyfn": pyfn,
    }


# --------------------------------------------------------------------------------------------
# what the kernel's decorators set


def kernel_object(pyfn: Any) -> Any:
    """The module-level object of a kernel's Python function (its outermost decorator: an
    Autotuner, Heuristics or the JITFunction), or None when the module has no such name that
    wraps ``pyfn`` (a kernel built in a function, a module renamed since)."""
    module = sys.modules.get(getattr(pyfn, "__module__", "") or "")
    obj: Any = module
    for part in str(getattr(pyfn, "__qualname__", "")).split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    try:
        return obj if _unwrap(obj)[1] is pyfn else None
    except TypeError:
        return None


def decorator_names(obj: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(names an ``@triton.autotune`` config sets, names ``@triton.heuristics`` computes) along
    the decorator chain of ``obj``, each sorted. Both are set by the kernel, never by its caller."""
    try:
        from triton.runtime.autotuner import Autotuner, Heuristics
    except ImportError:  # no Triton: nothing decorated
        return (), ()
    tuned: set[str] = set()
    derived: set[str] = set()
    for _ in range(16):
        if obj is None or inspect.isfunction(obj):
            break
        if isinstance(obj, Autotuner):
            for c in getattr(obj, "configs", None) or ():
                tuned |= set(c.all_kwargs())
        elif isinstance(obj, Heuristics):
            derived |= set(getattr(obj, "values", None) or {})
        obj = getattr(obj, "fn", None)
    return tuple(sorted(tuned)), tuple(sorted(derived))


def _set_by_decorators(fn: Any, pyfn: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What the decorators of the launched kernel set. ``fn`` is what was launched: the
    JITFunction under the decorators (their names are found on the module-level object), or a
    decorated object itself."""
    if inspect.isfunction(getattr(fn, "fn", None)):  # the JITFunction: look for its wrappers
        outer = kernel_object(pyfn)
        return decorator_names(outer) if outer is not None else ((), ())
    return decorator_names(fn)


def _eval_grid(grid: Any, bound: dict[str, Any]) -> tuple[int, ...]:
    try:
        g = grid(dict(bound)) if callable(grid) else grid
        if isinstance(g, int):
            g = (g,)
        g = tuple(int(x) for x in g)
    except Exception:
        return ()
    return g + (1,) * (3 - len(g)) if len(g) < 3 else g


def make_launch_spec(
    fn: Any,
    args: tuple,
    kwargs: dict[str, Any],
    grid: Any = None,
    *,
    test: str = "",
    name: str | None = None,
    tags: tuple[str, ...] = (),
    thresholds: dict[str, Any] | None = None,
    executed: bool = True,
    autotune: dict[str, Any] | None = None,
) -> LaunchSpec:
    """Build the LaunchSpec of one launch (used by the recorder; usable on GPU launches)."""
    d = describe_args(fn, args, kwargs)
    pyfn = d["pyfn"]
    qualname = pyfn.__qualname__
    reason = d["reason"]
    importable = True
    if "<locals>" in qualname or "<lambda>" in qualname:
        importable = False
        reason = f"{NOT_IMPORTABLE} ({qualname})"
    src = _source_file(pyfn)
    if not src and importable:
        importable = False
        reason = f"{NOT_IMPORTABLE} (no source file for {qualname})"
    shapes = {}
    for k, v in d["bound"].items():
        if _is_tensor_like(v) and hasattr(v, "shape"):
            try:
                shapes[k] = [int(x) for x in v.shape]
            except (TypeError, ValueError):
                pass
    tuned, derived = _set_by_decorators(fn, pyfn)
    return LaunchSpec(
        kernel=pyfn.__name__,
        qualname=qualname,
        module=pyfn.__module__,
        source_file=src,
        args=d["args"],
        options=d["options"],
        grid=_eval_grid(grid, d["bound"]),
        spec=d["spec"],
        config=d["config"],
        test=test,
        name=name,
        tags=tuple(tags),
        thresholds=dict(thresholds or {}),
        importable=importable and reason is None,
        reason=reason,
        executed=executed,
        autotune=autotune,
        shapes=shapes,
        tuned=tuned,
        derived=derived,
    )
