"""Record Triton kernel launches so that they can be compiled ahead of time elsewhere.

Static mode runs the user's tests on a CPU machine under Triton's interpreter
(``TRITON_INTERPRET=1``): every ``@triton.jit`` function is then an
``triton.runtime.interpreter.InterpretedFunction``. While a :class:`LaunchRecorder` is active,
``InterpretedFunction.run`` is wrapped: each launch is described as a :class:`LaunchSpec`
(argument types, the integer values Triton specializes on, pointer alignment, constexpr values,
launch options, grid) and then executed for real, so the test's own assertions still hold.

``@triton.autotune`` with several configs: every config is *recorded* (each is a variant) but
only one is *executed*: while recording, the autotuner's benchmarking is replaced by a record-only
call per config, and the first config is chosen and runs for real. ``@triton.heuristics`` needs
nothing special (it calls the inner ``run`` with the computed meta-parameters).

The specialization string (``LaunchSpec.spec``) is computed with Triton's own binder
(``create_function_from_signature`` + ``native_specialize_impl``), so two launches get the same
spec exactly when Triton would reuse the same compiled kernel for them.

:func:`describe_args` works on real GPU launches too (a ``JITFunction`` and its arguments).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import math
import numbers
import os
import threading
import weakref
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ..model import DEFAULT_OPTIONS, canonical_json

# Options of the CUDA backend that a launch may pass besides kernel arguments. Defaults are
# filled in for the first three so that "no options" and "the defaults spelled out" are the
# same config.
_OPTION_ORDER = ("num_warps", "num_stages", "num_ctas")
# Keyword arguments of a launch that are bookkeeping of the runtime, never compile options.
_IGNORED_KWARGS = {"grid", "warmup", "stream", "device"}

NOT_IMPORTABLE = "not importable: define the kernel at module level"


# --------------------------------------------------------------------------------------------
# data


@dataclass(frozen=True)
class ArgSpec:
    """One kernel argument, described well enough to rebuild a stand-in for compilation.

    kind: "tensor" (dtype = Triton type name such as "fp32", aligned = data_ptr % 16 == 0),
    "int", "float", "bool", "none", "str", "dtype" (a Triton dtype, value = its name),
    "torch_dtype", "jit" (a jit function passed as constexpr; value = {"module", "qualname"}),
    "tuple" (items), "tensordesc" (host TensorDescriptor; dtype/aligned of the base, value =
    {"shape", "strides", "block_shape", "padding"}), "unknown" (value = repr; not replayable).
    """

    name: str
    kind: str
    constexpr: bool = False
    dtype: str | None = None
    aligned: bool | None = None
    value: Any = None
    items: tuple[ArgSpec, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "kind": self.kind}
        if self.constexpr:
            d["constexpr"] = True
        if self.dtype is not None:
            d["dtype"] = self.dtype
        if self.aligned is not None:
            d["aligned"] = self.aligned
        if self.value is not None:
            d["value"] = self.value
        if self.items:
            d["items"] = [a.to_dict() for a in self.items]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ArgSpec:
        return cls(
            name=d.get("name", ""),
            kind=d["kind"],
            constexpr=bool(d.get("constexpr", False)),
            dtype=d.get("dtype"),
            aligned=d.get("aligned"),
            value=d.get("value"),
            items=tuple(cls.from_dict(x) for x in d.get("items", ())),
        )

    @property
    def replayable(self) -> bool:
        return self.kind != "unknown" and all(a.replayable for a in self.items)


@dataclass(frozen=True)
class LaunchSpec:
    """One recorded kernel launch: everything needed to compile the same variant elsewhere."""

    kernel: str  # the Triton function's __name__
    qualname: str
    module: str
    source_file: str  # absolute path of the kernel's module ("" when unknown)
    args: tuple[ArgSpec, ...]
    options: dict[str, Any]  # launch options as given (num_warps, num_stages, ...)
    grid: tuple[int, ...]
    spec: str  # canonical specialization string (VariantKey.spec)
    config: str  # canonical launch options string (VariantKey.config)
    test: str = ""  # pytest node id
    name: str | None = None  # user-facing kernel name override (marker)
    tags: tuple[str, ...] = ()
    thresholds: dict[str, Any] = field(default_factory=dict)
    importable: bool = True
    reason: str | None = None  # why it cannot be compiled elsewhere
    executed: bool = True  # False: recorded only (an autotune config that was not run)
    autotune: dict[str, Any] | None = None  # {"index": i, "count": n} for autotuned launches
    # Tensor argument shapes: they size the work without always changing the specialization, so
    # the A/B static pass compares them per launch (never used to compile).
    shapes: dict[str, list[int]] = field(default_factory=dict)

    @property
    def display_name(self) -> str:
        return self.name or self.kernel

    @property
    def identity(self) -> str:
        """Launches with equal identity compile to the same variant (for any arch)."""
        return canonical_json([self.source_file, self.qualname, self.spec, self.config])

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["args"] = [a.to_dict() for a in self.args]
        d["grid"] = list(self.grid)
        d["tags"] = list(self.tags)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LaunchSpec:
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        known["args"] = tuple(ArgSpec.from_dict(a) for a in d.get("args", ()))
        known["grid"] = tuple(d.get("grid", ()))
        known["tags"] = tuple(d.get("tags", ()))
        known["options"] = dict(d.get("options", {}))
        known["thresholds"] = dict(d.get("thresholds", {}) or {})
        known["shapes"] = {k: list(v) for k, v in (d.get("shapes") or {}).items()}
        return cls(**known)

    def to_json(self) -> str:
        return canonical_json(self.to_dict())


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


def describe_value(name: str, v: Any, constexpr: bool = False) -> ArgSpec:
    """Describe one argument value (see :class:`ArgSpec`)."""
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
    cls = type(v)
    mod = getattr(cls, "__module__", "") or ""
    if mod.startswith("triton") and cls.__name__ in ("dtype", "pointer_type") or _is_triton_dtype(v):
        return ArgSpec(name, "dtype", constexpr, value=str(getattr(v, "name", v)))
    if mod == "torch" and cls.__name__ == "dtype":
        return ArgSpec(name, "torch_dtype", constexpr, value=str(v).replace("torch.", ""))
    if cls.__name__ == "constexpr" and hasattr(v, "value"):
        return describe_value(name, v.value, True)
    if _is_tensor_descriptor(v):
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
    if _is_tensor_like(v):
        return ArgSpec(name, "tensor", constexpr, dtype=_triton_dtype_name(v), aligned=_aligned(v))
    if isinstance(v, tuple):
        return ArgSpec(
            name,
            "tuple",
            constexpr,
            items=tuple(describe_value(f"{name}[{i}]", x, constexpr) for i, x in enumerate(v)),
        )
    # a jit function passed as constexpr (JITFunction or InterpretedFunction)
    if hasattr(v, "fn") and (hasattr(v, "run") or hasattr(v, "rewrite")):
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
    keys = [k for k in _OPTION_ORDER] + sorted(k for k in opts if k not in _OPTION_ORDER)
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
    options_in = {k: v for k, v in kwargs.items() if k not in names and k not in _IGNORED_KWARGS}
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
    )


# --------------------------------------------------------------------------------------------
# recording


class _State(threading.local):
    record_only: bool = False
    autotune: dict[str, Any] | None = None


_state = _State()
_patch_lock = threading.RLock()
_active: list[LaunchRecorder] = []
_originals: dict[str, Any] = {}


def _current() -> LaunchRecorder | None:
    return _active[-1] if _active else None


def _patched_interp_run(self, *args, grid, warmup, **kwargs):
    rec = _current()
    if rec is not None and not warmup:
        try:
            rec._record(self, args, kwargs, grid, executed=not _state.record_only, autotune=_state.autotune)
        except Exception as e:  # recording must never break the user's test
            rec.errors.append(f"{getattr(self, '__name__', self)!r}: {type(e).__name__}: {e}")
    if _state.record_only:
        return None
    return _originals["interp_run"](self, *args, grid=grid, warmup=warmup, **kwargs)


def _patched_jit_run(self, *args, grid, warmup, **kwargs):
    """A compiled (GPU) launch: record it, then run it as Triton would.

    Static mode on a machine with CUDA does not switch the interpreter on, so kernels are
    ``JITFunction`` s; without this hook such a session recorded nothing and an A/B static pass
    on a GPU runner saw "identical code" everywhere.  Autotuner benchmarking launches land here
    too, one per config, which is what static mode wants: every config is a variant.
    """
    rec = _current()
    if rec is not None and not warmup:
        try:
            rec._record(self, args, kwargs, grid, executed=True, autotune=_state.autotune)
        except Exception as e:  # recording must never break the user's test
            rec.errors.append(f"{getattr(self, '__name__', self)!r}: {type(e).__name__}: {e}")
    return _originals["jit_run"](self, *args, grid=grid, warmup=warmup, **kwargs)


def _patched_autotuner_run(self, *args, **kwargs):
    """Record every (pruned) config, then let the autotuner pick the first one and run it."""
    rec = _current()
    if rec is None or len(self.configs) <= 1 or not _wraps_interpreted(self):
        return _originals["autotuner_run"](self, *args, **kwargs)
    self.nargs = dict(zip(self.arg_names, args, strict=False))
    try:
        configs = self.prune_configs(kwargs)
    except Exception:
        configs = self.configs
    n = len(configs)
    prev = (_state.record_only, _state.autotune)
    try:
        for i, cfg in enumerate(configs):
            _state.record_only, _state.autotune = True, {"index": i, "count": n}
            try:
                self.fn.run(*args, **kwargs, **cfg.all_kwargs())
            except Exception as e:
                rec.errors.append(f"autotune config {i} of {self.base_fn.__name__}: {type(e).__name__}: {e}")
    finally:
        _state.record_only, _state.autotune = prev
    # The real run: benchmarking is replaced (see _patched_autotuner_bench) so the first config
    # wins without being executed once per config.
    order = {id(c): i for i, c in enumerate(configs)}
    self._kperf_order = order
    _state.autotune = {"count": n, "chosen": True}
    try:
        return _originals["autotuner_run"](self, *args, **kwargs)
    finally:
        _state.autotune = prev[1]
        self.__dict__.pop("_kperf_order", None)


def _wraps_interpreted(obj: Any) -> bool:
    """True when the innermost kernel object is an InterpretedFunction (record-only is safe)."""
    from triton.runtime.interpreter import InterpretedFunction

    for _ in range(16):
        if isinstance(obj, InterpretedFunction):
            return True
        obj = getattr(obj, "fn", None)
        if obj is None or inspect.isfunction(obj):
            return False
    return False


def _patched_autotuner_bench(self, *args, config, **meta):
    if _current() is None or not hasattr(self, "_kperf_order"):
        return _originals["autotuner_bench"](self, *args, config=config, **meta)
    i = getattr(self, "_kperf_order", {}).get(id(config), 1_000_000)
    t = float(i + 1)
    return [t, t, t]


def _activate() -> None:
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    _originals["interp_run"] = InterpretedFunction.run
    _originals["jit_run"] = JITFunction.run
    JITFunction.run = _patched_jit_run
    _originals["autotuner_run"] = Autotuner.run
    _originals["autotuner_bench"] = Autotuner._bench
    InterpretedFunction.run = _patched_interp_run
    Autotuner.run = _patched_autotuner_run
    Autotuner._bench = _patched_autotuner_bench


def _deactivate() -> None:
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    InterpretedFunction.run = _originals.pop("interp_run")
    JITFunction.run = _originals.pop("jit_run")
    Autotuner.run = _originals.pop("autotuner_run")
    Autotuner._bench = _originals.pop("autotuner_bench")


class LaunchRecorder:
    """Collects a :class:`LaunchSpec` for every kernel launch while active.

    >>> rec = LaunchRecorder()
    >>> with rec.recording(test="tests/test_add.py::test_add"):
    ...     run_the_test()
    >>> rec.launches  # list[LaunchSpec], in launch order (duplicates kept)

    Intercepts interpreted launches (``TRITON_INTERPRET=1``, a CPU machine) and compiled
    ``JITFunction`` launches (a machine with CUDA) alike.
    """

    def __init__(self) -> None:
        self.launches: list[LaunchSpec] = []
        self.errors: list[str] = []  # recording problems (never raised into the test)
        self._context: dict[str, Any] = {"test": "", "name": None, "tags": (), "thresholds": None}
        self._lock = threading.Lock()

    # -- activation -------------------------------------------------------------------------
    def activate(self) -> None:
        with _patch_lock:
            if self in _active:
                raise RuntimeError("LaunchRecorder already active")
            if not _active:
                _activate()
            _active.append(self)

    def deactivate(self) -> None:
        with _patch_lock:
            if self not in _active:
                return
            _active.remove(self)
            if not _active:
                _deactivate()

    @property
    def active(self) -> bool:
        return self in _active

    @contextlib.contextmanager
    def recording(
        self,
        test: str = "",
        name: str | None = None,
        tags: tuple[str, ...] | list[str] = (),
        thresholds: dict[str, Any] | None = None,
    ) -> Iterator[LaunchRecorder]:
        """Record launches inside the block, tagged with the given test id / name / tags."""
        prev = self._context
        self._context = {"test": test, "name": name, "tags": tuple(tags), "thresholds": thresholds}
        self.activate()
        try:
            yield self
        finally:
            self.deactivate()
            self._context = prev

    # -- recording --------------------------------------------------------------------------
    def _record(
        self,
        fn: Any,
        args: tuple,
        kwargs: dict[str, Any],
        grid: Any,
        *,
        executed: bool,
        autotune: dict[str, Any] | None,
    ) -> None:
        ctx = self._context
        spec = make_launch_spec(
            fn,
            args,
            kwargs,
            grid,
            test=ctx["test"],
            name=ctx["name"],
            tags=ctx["tags"],
            thresholds=ctx["thresholds"],
            executed=executed,
            autotune=dict(autotune) if autotune else None,
        )
        with self._lock:
            self.launches.append(spec)

    def unique(self) -> list[LaunchSpec]:
        """Launches with duplicates removed, first occurrence kept.  A duplicate is the same test,
        the same compiled variant (identity) and the same work (grid, integer arguments, tensor
        shapes): a test that runs one variant at two problem sizes keeps both launches, which the
        A/B static pass compares launch by launch."""
        seen: set[tuple[str, ...]] = set()
        out = []
        for ls in self.launches:
            k = (ls.test, ls.identity, work_signature(ls))
            if k not in seen:
                seen.add(k)
                out.append(ls)
        return out

    def clear(self) -> None:
        self.launches.clear()
        self.errors.clear()

    def dump(self, path: str | os.PathLike[str]) -> None:
        """Write the launches as JSON lines."""
        with open(path, "w", encoding="utf-8") as f:
            for ls in self.launches:
                f.write(ls.to_json() + "\n")


def work_signature(ls: LaunchSpec) -> str:
    """What sizes a launch's work besides its compiled code: grid, integer arguments, shapes."""
    ints = {a.name: a.value for a in ls.args if a.kind == "int" and not a.constexpr}
    return canonical_json([list(ls.grid), ints, ls.shapes])


def load_launches(path: str | os.PathLike[str]) -> list[LaunchSpec]:
    with open(path, encoding="utf-8") as f:
        return [LaunchSpec.from_dict(json.loads(line)) for line in f if line.strip()]


def with_context(spec: LaunchSpec, **changes: Any) -> LaunchSpec:
    """A copy of ``spec`` with fields changed (test, name, tags, thresholds, ...)."""
    return replace(spec, **changes)
