"""The truth of the corpus evaluation of kperf's PR check: for one planted pull request on a real
repository, the true effect of the change on each launch of one Triton kernel. It imports nothing
of kperf-ci; the CUPTI loop is benchmarks/_cupti_truth.py (torch.profiler's public API).

Two modes, run by the evaluation driver on two checkouts (BASE and HEAD trees) that differ by a
patch to one Python file, the module that defines the kernel:

``record``: a pytest plugin in one tree (run it once in each). For every launch of the kernel
(matched by its Python function's ``__name__``, and by the module file when given) it keeps the
fully resolved launch as data: each parameter in signature order (a tensor as dtype, shape,
stride, storage offset and, for integer or bool tensors of at most 1e6 elements, its values; a
scalar or constexpr as its value), the launch options and the grid as ints. Launches are told
apart by a *call key*: the tensors' (dtype, shape) and the non-constexpr scalars, so the base's
and the head's launch of one call get one key even where the change moved a block size or
num_warps. For an autotuned kernel each call also keeps the configs that survive the
autotuner's own pruning and, for each, the resolved launch it makes (heuristics included),
caught by calling the autotuner's inner ``fn.run`` on clones of the arguments with the launch
intercepted (nothing is launched), and the config the autotuner picked. The first
``KPERF_TRUTH_MAX`` keys are kept; the JSON is written at session end::

    KPERF_TRUTH_KERNEL=l2norm_fwd_kernel KPERF_TRUTH_MODULE=fla/modules/l2norm.py \\
    KPERF_TRUTH_OUT=base.json KPERF_TRUTH_MAX=8 PYTHONPATH=<kperf>/benchmarks \\
        python -m pytest -p _corpus_truth tests/modules/test_l2norm.py
    # or the same through this script (it runs that pytest in a child process, cwd kept):
    python benchmarks/_corpus_truth.py record --kernel l2norm_fwd_kernel \\
        --module fla/modules/l2norm.py --out base.json -- tests/modules/test_l2norm.py

``time``: one process, the head's package importable; the changed module file of each tree is
loaded under an alias inside the head's package (``<pkg>._truth_base_<mod>``), so the rest of the
package is the head's (identical) copy. For each call key in both records, the two sides' launches
run on shared buffers wherever the two sides' tensor at a position has one layout (float tensors
seeded normal, integer ones the recorded values or zeros), alternated call by call with the L2
flushed before each, CUPTI kernel durations (``cupti_samples``). Autotuned kernels: best against
best (every surviving config of each side timed first, ``--config-calls`` calls each in one
alternated loop; each side's fastest median goes on)::

    python benchmarks/_corpus_truth.py time --base-tree B --head-tree H \\
        --module fla/modules/l2norm.py --kernel l2norm_fwd_kernel \\
        --base-rec base.json --head-rec head.json --out truth.json [--calls 40]

``--dry`` swaps CUPTI for a wall-clock stand-in and runs under Triton's interpreter on the CPU
(tests/test_corpus_truth_script.py uses it): the numbers then mean nothing, the plumbing is real.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RECORD_FORMAT = "kperf-corpus-truth-record/1"
TRUTH_FORMAT = "kperf-corpus-truth/1"
MAX_VALUES = 1_000_000  # integer/bool tensors up to this many elements keep their values
SHORT = {
    "float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64",
    "float8_e4m3fn": "fp8e4m3", "float8_e5m2": "fp8e5m2", "int64": "i64", "int32": "i32",
    "int16": "i16", "int8": "i8", "uint8": "u8", "bool": "bool",
}  # fmt: skip


def _dtype_name(dt: Any) -> str:
    return str(dt).replace("torch.", "")


def _is_tensor(v: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(v, torch.Tensor)


def _is_desc(v: Any) -> bool:
    return type(v).__name__ == "TensorDescriptor" and hasattr(v, "base") and hasattr(v, "block_shape")


def _write_json(path: Path, doc: dict) -> None:
    """Atomic: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e)[:300]}"


# ---------------------------------------------------------------------------------------------
# what a launch is, as data (both modes read this)


def _py_fn(obj: Any) -> Any:
    """The innermost Python function of a kernel object (JITFunction, InterpretedFunction,
    Heuristics, Autotuner or a repository's subclass), else None."""
    for _ in range(16):
        if inspect.isfunction(obj):
            return obj
        obj = getattr(obj, "fn", None)
        if obj is None:
            return None
    return None


def _params(jit: Any) -> list[tuple[str, bool, Any]]:
    """(name, is constexpr, default or inspect.Parameter.empty) in signature order."""
    cached = getattr(jit, "_corpus_truth_params", None)
    if cached is not None:
        return cached
    from triton.runtime.jit import _normalize_ty

    fn = _py_fn(jit)
    kparams = getattr(jit, "params", None)
    out = []
    for i, (name, p) in enumerate(inspect.signature(fn).parameters.items()):
        if kparams is not None and len(kparams) > i:
            const = bool(kparams[i].is_constexpr)
        else:  # the interpreter's function keeps no KernelParam
            const = p.annotation is not inspect.Parameter.empty and "constexpr" in _normalize_ty(p.annotation)
        out.append((name, const, p.default))
    try:
        jit._corpus_truth_params = out
    except AttributeError:
        pass
    return out


def _bind(jit: Any, args: tuple, kwargs: dict) -> tuple[dict[str, Any], dict[str, Any]]:
    """({parameter: value} in signature order, defaults applied; {option: value})."""
    params = _params(jit)
    names = [n for n, _, _ in params]
    given = dict(zip(names, args, strict=False))
    options = {}
    for k, v in kwargs.items():
        if k in names:
            given[k] = v
        else:
            options[k] = v
    bound = {}
    for name, _, default in params:
        if name in given:
            bound[name] = given[name]
        elif default is not inspect.Parameter.empty:
            bound[name] = default
        else:
            raise TypeError(f"missing argument {name}")
    return bound, options


def _key_item(v: Any) -> Any:
    if _is_tensor(v):
        return ["T", _dtype_name(v.dtype), list(v.shape)]
    if _is_desc(v):
        return ["D", _dtype_name(v.base.dtype), list(v.base.shape)]
    if isinstance(v, (tuple, list)):
        return ["tuple", [_key_item(x) for x in v]]
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if type(v).__module__ == "numpy" and hasattr(v, "item"):
        return v.item()
    return ["obj", type(v).__name__]


def call_key(jit: Any, args: tuple, kwargs: dict) -> list:
    """The tensors' (dtype, shape) and the non-constexpr scalars, in signature order, nameless
    (a renamed parameter keeps its key). Constexprs and options are left out: the change under
    test may move them, and the base's and head's launches of one call must pair."""
    bound, _ = _bind(jit, args, kwargs)
    return [_key_item(bound[n]) for n, const, _ in _params(jit) if not const]


def _kernel_of(jit: Any) -> str:
    fn = _py_fn(jit)
    return getattr(fn, "__name__", "?")


def _key_text(launch: dict) -> str:
    parts = []
    for a in launch["args"]:
        if a["constexpr"]:
            continue
        v = a["value"]
        if isinstance(v, dict) and "tensor" in v:
            parts.append(f"{a['name']}:{_tensor_text(v['tensor'])}")
        elif not isinstance(v, dict):
            parts.append(f"{a['name']}={v}")
    return " ".join(parts)


def _tensor_text(t: dict) -> str:
    return f"{SHORT.get(t['dtype'], t['dtype'])}[{'x'.join(map(str, t['shape']))}]"


def _shapes_text(launch: dict) -> str:
    out = []
    for a in launch["args"]:
        v = a["value"]
        if isinstance(v, dict) and "tensor" in v:
            out.append(_tensor_text(v["tensor"]))
    return ", ".join(out)


def _enc(v: Any, path: str, seen: dict) -> Any:
    """A launch argument as JSON. ``seen`` maps a tensor's (data_ptr, layout) to the first path
    that passed it, so an argument passed twice (in place) is rebuilt as one buffer."""
    if _is_tensor(v):
        t = {
            "dtype": _dtype_name(v.dtype),
            "shape": list(v.shape),
            "stride": list(v.stride()),
            "offset": int(v.storage_offset()),
        }
        ident = (v.data_ptr(), t["dtype"], tuple(t["shape"]), tuple(t["stride"]))
        if ident in seen:
            t["alias"] = seen[ident]
        else:
            seen[ident] = path
        if not (v.dtype.is_floating_point or v.dtype.is_complex) and v.numel() <= MAX_VALUES:
            if v.device.type != "meta":
                t["values"] = v.detach().cpu().tolist()
        return {"tensor": t}
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (tuple, list)):
        return {"tuple": [_enc(x, f"{path}.{i}", seen) for i, x in enumerate(v)]}
    if _is_desc(v):
        return {
            "desc": {
                "base": _enc(v.base, f"{path}.base", seen),
                "shape": [int(x) for x in v.shape],
                "strides": [int(x) for x in v.strides],
                "block_shape": [int(x) for x in v.block_shape],
                "padding": getattr(v, "padding", "zero"),
            }
        }
    if type(v).__module__ == "numpy" and hasattr(v, "item"):
        return _enc(v.item(), path, seen)
    import triton.language as tl

    if isinstance(v, tl.constexpr):
        return _enc(v.value, path, seen)
    if isinstance(v, tl.dtype):
        return {"tl_dtype": v.name}
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(v, torch.dtype):
        return {"torch_dtype": _dtype_name(v)}
    fn = _py_fn(v)
    if fn is not None:  # a @triton.jit helper passed as a constexpr
        return {"jit": {"module": fn.__module__, "name": fn.__name__}}
    return {"unsupported": type(v).__name__}


def _plain(v: Any) -> str:
    if isinstance(v, dict) and len(v) == 1:
        ((kind, x),) = v.items()
        if kind in ("tl_dtype", "torch_dtype"):
            return str(x)
        if kind == "jit":
            return x["name"]
    return json.dumps(v) if isinstance(v, (dict, list)) else str(v)


def _launch_text(args: list[dict], options: dict) -> str:
    parts = [f"{a['name']}={_plain(a['value'])}" for a in args if a["constexpr"]]
    parts += [f"{k}={_plain(v)}" for k, v in options.items() if v is not None]
    return ",".join(parts)


def _config_text(cfg: Any) -> str | None:
    if cfg is None:
        return None
    parts = [f"{k}={v}" for k, v in getattr(cfg, "kwargs", {}).items()]
    parts.append(f"num_warps={cfg.num_warps}")
    parts.append(f"num_stages={cfg.num_stages}")
    if getattr(cfg, "num_ctas", 1) != 1:
        parts.append(f"num_ctas={cfg.num_ctas}")
    if getattr(cfg, "maxnreg", None) is not None:
        parts.append(f"maxnreg={cfg.maxnreg}")
    return ",".join(parts)


def resolve_launch(jit: Any, args: tuple, kwargs: dict, grid: Any) -> dict:
    """A JIT-level launch as data: arguments in signature order, options, grid (a callable grid
    called with the bound arguments, as Triton does)."""
    bound, options = _bind(jit, args, kwargs)
    g = grid(dict(bound)) if callable(grid) else grid
    seen: dict = {}
    out_args = [
        {"name": n, "constexpr": const, "value": _enc(bound[n], str(i), seen)}
        for i, (n, const, _) in enumerate(_params(jit))
    ]
    opts = {k: _enc(v, k, seen) for k, v in options.items()}
    return {
        "args": out_args,
        "options": opts,
        "grid": [int(x) for x in g],
        "text": _launch_text(out_args, opts),
    }


# ---------------------------------------------------------------------------------------------
# record: the pytest plugin

_S: dict[str, Any] = {
    "kernel": None,
    "kernels": set(),  # KPERF_TRUTH_KERNEL: one name, or several comma-separated
    "module": None,
    "max": 8,
    "out": None,
    "calls": {},  # key text -> entry, first KPERF_TRUTH_MAX keys
    "at_stack": [],  # one frame per target autotuner run in progress
    "capture": None,  # list while a config's launch is caught (nothing launched then)
    "test": None,
    "errors": [],
    "launches": 0,
    "kernel_files": set(),
    "kernel_module": None,
    "patched": [],  # (owner, attribute, original)
    "targets": {},  # id(kernel object) -> (the object, is it the kernel)
}


def _matches_module(filename: str) -> bool:
    mod = _S["module"]
    if not mod:
        return True
    f = filename.replace(os.sep, "/")
    parts = [p for p in mod.replace(os.sep, "/").split("/") if p not in ("", ".")]
    # an installed copy drops leading folders (src/): any tail of two or more parts will do
    for i in range(max(1, len(parts) - 1)):
        if f.endswith("/" + "/".join(parts[i:])) or f == "/".join(parts[i:]):
            return True
    return False


def _is_target(obj: Any) -> bool:
    known = _S["targets"].get(id(obj))
    if known is not None and known[0] is obj:
        return known[1]
    fn = _py_fn(obj)
    hit = fn is not None and fn.__name__ in _S["kernels"] and _matches_module(fn.__code__.co_filename)
    if hit:
        _S["kernel_files"].add(fn.__code__.co_filename)
        _S["kernel_module"] = fn.__module__
    _S["targets"][id(obj)] = (obj, hit)  # the object kept: its id is not reused
    return hit


def _note(where: str, e: BaseException) -> None:
    if len(_S["errors"]) < 50:
        _S["errors"].append({"where": where, "test": _S["test"], "error": _err(e)})


def _room(kt: str, kernel: str) -> bool:
    """A key not recorded yet, of a kernel with fewer than KPERF_TRUTH_MAX keys."""
    mine = sum(1 for e in _S["calls"].values() if e.get("kernel") == kernel)
    return (kernel, kt) not in _S["calls"] and mine < _S["max"]


def _add_call(key: list, launch: dict, kernel: str) -> dict:
    entry = {
        "kernel": kernel,
        "key": key,
        "key_text": _key_text(launch),
        "shapes": _shapes_text(launch),
        "test": _S["test"],
        "autotuned": False,
        "launch": launch,
    }
    _S["calls"][(kernel, json.dumps(key))] = entry
    return entry


def _jit_hook(orig: Callable) -> Callable:
    def run(self, *args, grid, warmup, **kwargs):
        if warmup or not _is_target(self):
            return orig(self, *args, grid=grid, warmup=warmup, **kwargs)
        if _S["capture"] is not None:  # a config's launch, caught and not made
            try:
                _S["capture"].append(resolve_launch(self, args, kwargs, grid))
            except Exception as e:
                _S["capture"].append({"error": _err(e)})
            return None
        _S["launches"] += 1
        if _S["at_stack"]:  # inside the autotuner: its last launch is the call's (after tuning)
            _S["at_stack"][-1]["last"] = (self, args, kwargs, grid)
            return orig(self, *args, grid=grid, warmup=warmup, **kwargs)
        pending = None
        try:
            key = call_key(self, args, kwargs)
            if _room(json.dumps(key), _kernel_of(self)):  # resolved before the launch: inputs as given
                pending = (key, resolve_launch(self, args, kwargs, grid), _kernel_of(self))
        except Exception as e:
            _note("jit", e)
        ret = orig(self, *args, grid=grid, warmup=warmup, **kwargs)
        if pending is not None:
            _add_call(*pending)
        return ret

    run._corpus_truth = True
    return run


def _clone_like(t: Any, memo: dict) -> Any:
    """A copy with the same layout (strides, storage offset) and values; one per original."""
    import torch

    ident = (t.data_ptr(), t.dtype, tuple(t.shape), tuple(t.stride()), t.storage_offset())
    if ident in memo:
        return memo[ident]
    n = _storage_elems(list(t.shape), list(t.stride()))
    buf = torch.empty(t.storage_offset() + n, dtype=t.dtype, device=t.device)
    c = buf.as_strided(t.shape, t.stride(), t.storage_offset())
    try:
        c.copy_(t.detach())
    except RuntimeError:  # overlapping strides: layout kept, values not
        pass
    memo[ident] = c
    return c


def _clone_arg(v: Any, memo: dict) -> Any:
    if _is_tensor(v):
        return _clone_like(v, memo)
    if isinstance(v, tuple) and not hasattr(v, "_fields"):
        return tuple(_clone_arg(x, memo) for x in v)
    if isinstance(v, list):
        return [_clone_arg(x, memo) for x in v]
    if _is_desc(v):
        return type(v)(_clone_arg(v.base, memo), v.shape, v.strides, list(v.block_shape), v.padding)
    return v


def _configs_of(tuner: Any, args: tuple, kwargs: dict) -> tuple[list, int]:
    """(the configs that survive the autotuner's own pruning for this call, how many it has)."""
    configs = list(getattr(tuner, "configs", []) or [])
    if len(configs) <= 1 or not hasattr(tuner, "prune_configs"):
        return configs, len(configs)  # Autotuner.run does not prune a single config
    saved = getattr(tuner, "nargs", None)
    tuner.nargs = dict(zip(tuner.arg_names, args, strict=False))
    try:
        return list(tuner.prune_configs(dict(kwargs))), len(configs)
    finally:
        tuner.nargs = saved


def caller_constexprs(tuner: Any, jit: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The constexprs the caller itself passed to the autotuner (attorch's softmax ``log`` and
    ``neg``): they are part of the call, unlike the values the configs and heuristics supply,
    which the change under test may move. Without them three calls that differ only in ``log``
    and ``neg`` shared one key, so only the first test's launch had a truth."""
    const = {n for n, c, _ in _params(jit) if c}
    names = getattr(tuner, "arg_names", None) or [n for n, _, _ in _params(jit)]
    given = {**dict(zip(names, args, strict=False)), **kwargs}
    return {n: _key_item(v) for n, v in given.items() if n in const}


def _after_autotune(tuner: Any, args: tuple, kwargs: dict, last: tuple) -> None:
    jit, jargs, jkwargs, jgrid = last
    given = caller_constexprs(tuner, jit, args, kwargs)
    key = call_key(jit, jargs, jkwargs) + [["C", n, v] for n, v in sorted(given.items())]
    if not _room(json.dumps(key), _kernel_of(jit)):
        return
    # resolved after the launch (resolving inside the autotuner's timing loop would move its pick)
    entry = _add_call(key, resolve_launch(jit, jargs, jkwargs, jgrid), _kernel_of(jit))
    entry["autotuned"] = True
    entry["caller_constexprs"] = given
    entry["pick"] = _config_text(getattr(tuner, "best_config", None))
    entry["autotuner"] = type(tuner).__name__
    try:
        survivors, total = _configs_of(tuner, args, kwargs)
    except Exception as e:  # the pruning itself failed here: the pick alone is kept
        entry["configs_error"] = _err(e)
        return
    entry["configs_total"] = total
    memo: dict = {}
    cargs = tuple(_clone_arg(a, memo) for a in args)
    ckw = {k: _clone_arg(v, memo) for k, v in kwargs.items()}
    out = []
    for cfg in survivors:
        item: dict[str, Any] = {"config": _config_text(cfg)}
        full = {**ckw, **cfg.all_kwargs()}
        caught: list = []
        _S["capture"] = caught
        try:
            if getattr(cfg, "pre_hook", None):
                cfg.pre_hook({**dict(zip(tuner.arg_names, cargs, strict=False)), **full})
            tuner.fn.run(*cargs, **full)
        except Exception as e:
            item["error"] = _err(e)
        finally:
            _S["capture"] = None
        if caught:
            if "error" in caught[-1]:
                item["error"] = caught[-1]["error"]
            else:
                item["launch"] = caught[-1]
        elif "error" not in item:
            item["error"] = "no launch of the kernel was caught"
        out.append(item)
    entry["configs"] = out
    del memo, cargs, ckw


def _autotuner_hook(orig: Callable) -> Callable:
    def run(self, *args, **kwargs):
        if not _is_target(self):
            return orig(self, *args, **kwargs)
        if _S["capture"] is not None:  # stacked autotuners: the inner one's pick, its state untouched
            cfg = getattr(self, "best_config", None) or self.configs[0]
            return self.fn.run(*args, **{**kwargs, **cfg.all_kwargs()})
        frame: dict[str, Any] = {"last": None}
        _S["at_stack"].append(frame)
        try:
            ret = orig(self, *args, **kwargs)
        finally:
            _S["at_stack"].pop()
        if _S["at_stack"]:  # a subclass's run around Autotuner.run, or stacked autotuners
            if frame["last"] is not None:
                _S["at_stack"][-1]["last"] = frame["last"]
        elif frame["last"] is not None:
            try:
                _after_autotune(self, args, kwargs, frame["last"])
            except Exception as e:
                _note("autotune", e)
        return ret

    run._corpus_truth = True
    return run


def _patch(owner: Any, name: str, make: Callable) -> None:
    orig = owner.__dict__.get(name)
    if orig is None or getattr(orig, "_corpus_truth", False):
        return
    setattr(owner, name, make(orig))
    _S["patched"].append((owner, name, orig))


def _patch_tuner_class(cls: type) -> None:
    _patch(cls, "run", _autotuner_hook)
    for sub in cls.__subclasses__():
        _patch_tuner_class(sub)


def install() -> None:
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    _patch(JITFunction, "run", _jit_hook)
    _patch(InterpretedFunction, "run", _jit_hook)
    _patch_tuner_class(Autotuner)  # and every subclass that defines its own run
    had = Autotuner.__dict__.get("__init_subclass__")

    def init_subclass(cls, **kw):  # subclasses defined later (the repository imported later)
        super(Autotuner, cls).__init_subclass__(**kw)
        _patch(cls, "run", _autotuner_hook)

    Autotuner.__init_subclass__ = classmethod(init_subclass)
    _S["patched"].append((Autotuner, "__init_subclass__", had))


def uninstall() -> None:
    while _S["patched"]:
        owner, name, orig = _S["patched"].pop()
        if orig is None:
            delattr(owner, name)
        else:
            setattr(owner, name, orig)


def _record_doc(kernel: str) -> dict:
    import triton

    torch = sys.modules.get("torch")
    return {
        "format": RECORD_FORMAT,
        "kernel": kernel,
        "module": _S["module"],
        "kernel_module": _S["kernel_module"],
        "kernel_files": sorted(_S["kernel_files"]),
        "cwd": os.getcwd(),
        "max": _S["max"],
        "interpret": os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"),
        "triton": triton.__version__,
        "torch": getattr(torch, "__version__", None),
        "launches_seen": _S["launches"],
        "calls": [e for e in _S["calls"].values() if e.get("kernel") == kernel],
        "errors": _S["errors"],
    }


def record_path(out: Path, kernel: str, several: bool) -> Path:
    """Where the record of ``kernel`` goes: ``out`` itself for one kernel, ``<out>.<kernel>.json``
    beside it when KPERF_TRUTH_KERNEL names several (one pytest run records them all)."""
    return out.with_name(f"{out.stem}.{kernel}.json") if several else out


def pytest_configure(config: Any) -> None:
    kernel = os.environ.get("KPERF_TRUTH_KERNEL")
    if not kernel:
        return
    _S.update(
        kernel=kernel,
        kernels={k.strip() for k in kernel.split(",") if k.strip()},
        module=os.environ.get("KPERF_TRUTH_MODULE") or None,
        max=int(os.environ.get("KPERF_TRUTH_MAX", "8")),
        out=Path(os.environ.get("KPERF_TRUTH_OUT", "corpus_truth_record.json")).resolve(),
    )
    install()


def pytest_runtest_setup(item: Any) -> None:
    _S["test"] = item.nodeid


def pytest_sessionfinish(session: Any, exitstatus: Any) -> None:
    if _S["out"] is not None:
        try:
            several = len(_S["kernels"]) > 1
            for kernel in sorted(_S["kernels"]):
                doc = _record_doc(kernel)
                doc["pytest_exit"] = int(exitstatus)
                _write_json(record_path(_S["out"], kernel, several), doc)
        except Exception as e:  # the suite's own outcome stands
            print(f"_corpus_truth: could not write {_S['out']}: {_err(e)}", file=sys.stderr)


def pytest_unconfigure(config: Any) -> None:
    uninstall()


# ---------------------------------------------------------------------------------------------
# time: base vs head on shared buffers


def _storage_elems(shape: list[int], stride: list[int]) -> int:
    if any(s == 0 for s in shape):
        return 0
    return 1 + sum((s - 1) * abs(st) for s, st in zip(shape, stride, strict=True))


class Buffers:
    """Argument buffers of one call key, shared by every launch (both sides, every config) that
    passes a tensor of one layout at one position: the sides then differ only in their code.
    ``users`` tells which sides used each buffer."""

    def __init__(self, device: str):
        self.device = device
        self.bufs: dict[tuple, Any] = {}
        self.users: dict[tuple, set] = {}

    def tensor(self, path: str, t: dict, side: str) -> Any:
        import torch

        k = (t.get("alias", path), t["dtype"], tuple(t["shape"]), tuple(t["stride"]), t.get("offset", 0))
        self.users.setdefault(k, set()).add(side)
        if k in self.bufs:
            return self.bufs[k]
        dt = getattr(torch, t["dtype"])
        off = int(t.get("offset", 0))
        total = off + _storage_elems(t["shape"], t["stride"])
        if dt.is_floating_point or dt.is_complex:
            g = torch.Generator(device=self.device).manual_seed(zlib.crc32(repr(k).encode()))
            base = torch.randn(total, generator=g, device=self.device, dtype=torch.float32).to(dt)
        else:
            base = torch.zeros(total, dtype=dt, device=self.device)
        x = base.as_strided(t["shape"], t["stride"], off)
        if "values" in t:
            try:
                x.copy_(torch.tensor(t["values"], dtype=dt))
            except RuntimeError:  # overlapping strides: left zero
                pass
        self.bufs[k] = x
        return x

    def sharing(self) -> dict[str, int]:
        n = {"shared": 0, "base_only": 0, "head_only": 0}
        for users in self.users.values():
            n["shared" if len(users) > 1 else f"{next(iter(users))}_only"] += 1
        return n


class Side:
    """One tree's copy of the changed module and its kernel's JIT function."""

    def __init__(self, name: str, module: Any, jit: Any, kernel_module: str | None):
        self.name, self.module, self.jit, self.kernel_module = name, module, jit, kernel_module

    def decode(self, v: Any, path: str, bufs: Buffers) -> Any:
        if not isinstance(v, dict):
            return v
        if "tensor" in v:
            return bufs.tensor(path, v["tensor"], self.name)
        if "tuple" in v:
            return tuple(self.decode(x, f"{path}.{i}", bufs) for i, x in enumerate(v["tuple"]))
        if "desc" in v:
            from triton.tools.tensor_descriptor import TensorDescriptor

            d = v["desc"]
            base = self.decode(d["base"], f"{path}.base", bufs)
            return TensorDescriptor(
                base, d["shape"], d["strides"], d["block_shape"], d.get("padding", "zero")
            )
        if "tl_dtype" in v:
            import triton.language as tl

            return tl.dtype(v["tl_dtype"])
        if "torch_dtype" in v:
            import torch

            return getattr(torch, v["torch_dtype"])
        if "jit" in v:
            mod = v["jit"]["module"]
            owner = self.module if mod == self.kernel_module else importlib.import_module(mod)
            return getattr(owner, v["jit"]["name"])
        raise ValueError(f"argument of a kind not rebuilt: {v}")

    def launcher(self, launch: dict, bufs: Buffers) -> Callable[[], Any]:
        """``jit[grid](*leading non-constexprs, **the rest, **options)``, the recorded values."""
        pos, kw, leading = [], {}, True
        for i, a in enumerate(launch["args"]):
            val = self.decode(a["value"], str(i), bufs)
            if leading and not a["constexpr"]:
                pos.append(val)
            else:
                leading = False
                kw[a["name"]] = val
        kw.update({k: self.decode(v, k, bufs) for k, v in launch["options"].items()})
        grid = tuple(launch["grid"])
        run = self.jit.run
        return lambda: run(*pos, grid=grid, warmup=False, **kw)


def _package_of(tree: Path, module: str) -> tuple[Path, str]:
    """(the folder to import from, the dotted package holding the module): up from the module's
    folder while it holds ``__init__.py`` (so ``src/pkg/ops/x.py`` gives ``src``, ``pkg.ops``)."""
    d = (tree / module).parent
    parts: list[str] = []
    while d != tree and (d / "__init__.py").exists():
        parts.insert(0, d.name)
        d = d.parent
    return d, ".".join(parts)


def load_side(tree: Path, module: str, side: str, package: str) -> Any:
    stem = Path(module).stem
    alias = f"{package}._truth_{side}_{stem}" if package else f"_truth_{side}_{stem}"
    if package:
        importlib.import_module(package)
    spec = importlib.util.spec_from_file_location(alias, tree / module)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[alias] = mod
    spec.loader.exec_module(mod)
    return mod


def find_jit(mod: Any, kernel: str) -> Any:
    """The kernel's JIT function (InterpretedFunction under the interpreter): the module's
    attribute of that name, else any kernel object whose innermost function has that name;
    ``.fn`` unwrapped through heuristics and autotuners."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    obj = getattr(mod, kernel, None)
    if obj is None or _py_fn(obj) is None or _py_fn(obj).__name__ != kernel:
        obj = next(
            (v for v in vars(mod).values() if (f := _py_fn(v)) is not None and f.__name__ == kernel), None
        )
    for _ in range(16):
        if obj is None or isinstance(obj, (JITFunction, InterpretedFunction)):
            break
        obj = getattr(obj, "fn", None)
    if obj is None:
        raise LookupError(f"no Triton kernel {kernel} in {mod.__name__}")
    return obj


def _source(jit: Any) -> str | None:
    try:
        return inspect.getsource(_py_fn(jit))
    except (OSError, TypeError):
        return None


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def wall_samples(calls: Mapping[str, Callable[[], object]], n: int = 30) -> dict[str, list[float]]:
    """``--dry``: cupti_samples' alternation with a wall clock per call (us); no L2 flush."""
    names = list(calls)
    for k in names:
        calls[k]()
    order: list[str] = []
    for i in range(n):
        order += names if (i < n // 2) == (i % 2 == 0) else names[::-1]
    out: dict[str, list[float]] = {k: [] for k in names}
    for k in order:
        _sync()
        t0 = time.perf_counter()
        calls[k]()
        _sync()
        out[k].append((time.perf_counter() - t0) * 1e6)
    return out


def _median_ci(xs: list[float]) -> tuple[float, float]:
    """A ~95% distribution-free interval of the median (order statistics)."""
    s, n = sorted(xs), len(xs)
    k = max(0, int(n / 2 - 0.98 * n**0.5))
    return s[k], s[n - 1 - k]


def _candidates(entry: dict, autotuned: bool) -> tuple[list[tuple[str, dict]], list[dict]]:
    """(the launches a side can time, as (config text, launch); the configs it cannot)."""
    if not autotuned or not entry.get("configs"):
        return [(entry["launch"]["text"], entry["launch"])], []
    ok, bad = [], []
    for c in entry["configs"]:
        if "launch" in c:
            ok.append((c["config"], c["launch"]))
        else:
            bad.append({"config": c["config"], "error": c.get("error", "not recorded")})
    if not ok:  # no config's launch was caught: the autotuner's own pick, as it ran
        ok.append((entry.get("pick") or entry["launch"]["text"], entry["launch"]))
    return ok, bad


def time_key(
    sides: dict[str, Side],
    entries: dict[str, dict],
    sampler: Callable,
    calls: int,
    config_calls: int,
    device: str,
) -> dict[str, Any]:
    """One call key: base vs head, alternated; autotuned kernels best against best."""
    b = entries["base"]
    row: dict[str, Any] = {
        "key": json.dumps(b["key"]),
        "key_text": b["key_text"],
        "shapes": b["shapes"],
        "head_shapes": entries["head"]["shapes"],
        "tests": {s: e.get("test") for s, e in entries.items()},
        "caller_constexprs": b.get("caller_constexprs") or {},
        "base_pick": b.get("pick"),
        "head_pick": entries["head"].get("pick"),
        "base_launch": b["launch"]["text"],
        "head_launch": entries["head"]["launch"]["text"],
    }
    autotuned = any(e.get("configs") for e in entries.values())
    row["kind"] = "best_of_configs" if autotuned else "pick"
    bufs = Buffers(device)
    timed: dict[str, list[dict]] = {}
    fns: dict[str, list[tuple[str, Callable]]] = {}
    for s in ("base", "head"):
        ok, bad = _candidates(entries[s], autotuned)
        timed[s] = list(bad)
        fns[s] = []
        for text, launch in ok:
            try:  # built and run once: a launch that fails is said, not timed
                f = sides[s].launcher(launch, bufs)
                f()
                _sync()
            except Exception as e:
                timed[s].append({"config": text, "error": _err(e)})
                continue
            fns[s].append((text, f))
    row["buffers"] = bufs.sharing()
    try:
        for s in ("base", "head"):
            if not fns[s]:
                raise RuntimeError(f"{s}: no launch could be built and run")
        best = {s: fns[s][0] for s in ("base", "head")}
        if autotuned and any(len(v) > 1 for v in fns.values()):
            # every surviving config of both sides in one alternated loop; each side's fastest
            screen = {f"{s}#{i}": f for s in ("base", "head") for i, (_, f) in enumerate(fns[s])}
            us = sampler(screen, n=config_calls)
            for s in ("base", "head"):
                meds = [statistics.median(us[f"{s}#{i}"]) for i in range(len(fns[s]))]
                for (text, _), m in zip(fns[s], meds, strict=True):
                    timed[s].append({"config": text, "median_us": m})
                best[s] = fns[s][min(range(len(meds)), key=meds.__getitem__)]
        us = sampler({"base": best["base"][1], "head": best["head"][1]}, n=calls)
    except Exception as e:
        row["error"] = _err(e)
        row["configs_timed"] = timed
        return row
    base, head = statistics.median(us["base"]), statistics.median(us["head"])
    lo, hi = _median_ci([h / b for b, h in zip(us["base"], us["head"], strict=True)])
    row.update(
        base_us=base,
        head_us=head,
        truth_pct=100 * (head / base - 1),
        truth_pct_ci95=[100 * (lo - 1), 100 * (hi - 1)],
        n=len(us["base"]),
        base_best=best["base"][0],
        head_best=best["head"][0],
        configs_timed=timed,
        samples_us={s: [round(x, 4) for x in v] for s, v in us.items()},
    )
    return row


def pairs(recs: dict[str, dict]) -> list[tuple[dict, dict, str]]:
    """(base call, head call, how they were paired): by call key; then, among calls left over,
    by the test that made them, in order. A pull request that changes what the caller computes
    (a scratch buffer sized by num_warps, a scalar derived from it) changes the key of the same
    call; the same test making one launch of the kernel on each side is still one call."""
    head_keys = {json.dumps(c["key"]): c for c in recs["head"]["calls"]}
    out = [(c, head_keys[json.dumps(c["key"])], "key") for c in recs["base"]["calls"]
           if json.dumps(c["key"]) in head_keys]  # fmt: skip
    used = {id(c) for pair in out for c in pair[:2]}
    left = {s: [c for c in recs[s]["calls"] if id(c) not in used] for s in ("base", "head")}
    for c in left["base"]:
        h = next((h for h in left["head"] if h.get("test") == c.get("test") and id(h) not in used), None)
        if h is not None:
            out.append((c, h, "test"))
            used |= {id(c), id(h)}
    return out


def _unpaired(recs: dict[str, dict]) -> list[dict]:
    keys = {s: {json.dumps(c["key"]): c for c in r["calls"]} for s, r in recs.items()}
    used = {json.dumps(c["key"]) for pair in pairs(recs) for c in pair[:2]}
    out = []
    for s, other in (("base", "head"), ("head", "base")):
        for kt, c in keys[s].items():
            if kt in keys[other] or kt in used:
                continue
            if len(keys[other]) >= recs[other].get("max", 8):
                why = f"the {other}'s record holds its first {recs[other].get('max')} keys, not this one"
            else:
                why = f"no launch with this key in the {other}'s tests"
            out.append(
                {"key": kt, "key_text": c["key_text"], "shapes": c["shapes"], "side": s, "reason": why}
            )
    return out


def time_main(a: argparse.Namespace) -> int:
    t0 = time.monotonic()
    if a.dry:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch

    device = a.device or ("cpu" if a.dry else "cuda")
    base_tree, head_tree = Path(a.base_tree).resolve(), Path(a.head_tree).resolve()
    root, package = _package_of(head_tree, a.module)
    sys.path[:0] = [str(root)] + ([str(head_tree)] if root != head_tree else [])
    recs = {s: json.loads(Path(p).read_text()) for s, p in (("base", a.base_rec), ("head", a.head_rec))}
    doc: dict[str, Any] = {
        "format": TRUTH_FORMAT,
        "kernel": a.kernel,
        "module": a.module,
        "base_tree": str(base_tree),
        "head_tree": str(head_tree),
        "calls": a.calls,
        "config_calls": a.config_calls,
        "method": "wall clock (--dry, no meaning)" if a.dry else "cupti (L2 flushed before each call)",
        "device": torch.cuda.get_device_name() if device.startswith("cuda") else device,
        "torch": torch.__version__,
        "record_errors": {s: r.get("errors", []) for s, r in recs.items()},
        "keys": [],
        "unpaired": _unpaired(recs),
    }
    import triton

    doc["triton"] = triton.__version__
    if a.dry:
        sampler = wall_samples
    else:
        sys.path.insert(0, str(HERE))
        from _cupti_truth import cupti_samples

        sampler = cupti_samples
    sides = {}
    try:
        for s, tree in (("base", base_tree), ("head", head_tree)):
            mod = load_side(tree, a.module, s, package)
            sides[s] = Side(s, mod, find_jit(mod, a.kernel), recs[s].get("kernel_module"))
    except Exception as e:
        doc["error"] = f"loading the kernel: {_err(e)}"
        _write_json(Path(a.out), doc)
        print(doc["error"], file=sys.stderr)
        return 1
    doc["kernel_source_changed"] = _source(sides["base"].jit) != _source(sides["head"].jit)
    for c, h, by in pairs(recs):
        kt = json.dumps(c["key"])
        try:
            row = time_key(sides, {"base": c, "head": h}, sampler, a.calls, a.config_calls, device)
            row["paired_by"] = by
        except Exception as e:  # never the whole run for one key
            row = {"key": kt, "key_text": c["key_text"], "shapes": c["shapes"], "error": _err(e)}
        doc["keys"].append(row)
        what = (
            row.get("error") or f"{row['truth_pct']:+.2f}% ({row['base_us']:.2f} -> {row['head_us']:.2f} us)"
        )
        print(f"  {a.kernel} {row['shapes']}: {what}", flush=True)
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    doc["seconds"] = time.monotonic() - t0
    _write_json(Path(a.out), doc)
    return 0


def record_main(a: argparse.Namespace) -> int:
    """pytest in a child process (cwd kept) with this file as its plugin."""
    env = dict(os.environ)
    env.update(
        KPERF_TRUTH_KERNEL=a.kernel, KPERF_TRUTH_OUT=str(Path(a.out).resolve()), KPERF_TRUTH_MAX=str(a.max)
    )
    if a.module:
        env["KPERF_TRUTH_MODULE"] = a.module
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH", "")) if p)
    args = a.pytest_args[1:] if a.pytest_args[:1] == ["--"] else a.pytest_args
    return subprocess.call([sys.executable, "-m", "pytest", "-p", "_corpus_truth", *args], env=env)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)
    r = sub.add_parser("record", help="run pytest with this plugin in the current tree")
    r.add_argument("--kernel", required=True, help="the kernel's Python function name")
    r.add_argument("--module", help="the file defining it, relative to the tree (filters same-named kernels)")
    r.add_argument("--out", required=True)
    r.add_argument("--max", type=int, default=8, help="distinct call keys kept")
    r.add_argument("pytest_args", nargs=argparse.REMAINDER)
    t = sub.add_parser("time", help="base vs head by CUPTI from two records")
    t.add_argument("--base-tree", required=True)
    t.add_argument("--head-tree", required=True)
    t.add_argument("--module", required=True)
    t.add_argument("--kernel", required=True)
    t.add_argument("--base-rec", required=True)
    t.add_argument("--head-rec", required=True)
    t.add_argument("--out", required=True)
    t.add_argument("--calls", type=int, default=40, help="calls a side, best against best (at least 30)")
    t.add_argument("--config-calls", type=int, default=10, help="calls a config while screening")
    t.add_argument("--device", help="default cuda (cpu with --dry)")
    t.add_argument("--dry", action="store_true", help="wall clock and Triton's interpreter, no GPU")
    a = p.parse_args(argv)
    if a.mode == "record":
        return record_main(a)
    if a.calls < 30 and not a.dry:
        p.error("--calls: at least 30 a side")
    return time_main(a)


if __name__ == "__main__":
    sys.exit(main())
