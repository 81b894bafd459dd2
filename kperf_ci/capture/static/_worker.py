"""Compile worker: a long-lived process that compiles recorded launches ahead of time.

Run as ``python -m kperf_ci.capture.static._worker`` WITHOUT ``TRITON_INTERPRET`` (the interpreter and
the compiler do not mix in one process). Protocol: one JSON request per line on stdin, one
JSON response per line on the original stdout; anything the user's modules print goes to
stderr. Requests:

    {"id": 1, "op": "compile", "launch": LaunchSpec.to_dict(), "arch": "sm_90",
     "artifacts": ["sass", "ptx"], "device_arch": "sm_90"}
    {"id": 2, "op": "ping"}
    {"op": "exit"}

Responses: {"id": 1, "ok": true, "metrics": [[name, value, unit, kind, better], ...],
"sass_hash": "...", "artifacts": {...}, "compile_s": 0.1, "metrics_s": 0.2} or
{"id": 1, "ok": false, "error": "one line"}.

No GPU is needed: a stand-in driver reports the requested target (``GPUTarget("cuda", cc, 32)``)
and stand-in tensors (``.dtype`` + ``.data_ptr()``) reproduce the recorded specialization.

User modules are imported under the test side's fake CUDA device
(:mod:`kperf_ci.capture.static.fake_device`, for ``device_arch``: the first ``--kperf-arch``, the
same for every request of a run, so a module imported once answers the same in every worker).
Kernel modules probe the GPU at import time (``torch.cuda.get_device_name(0)`` once the driver
says "cuda"); here the stand-in driver does say "cuda" while torch is a CPU build, and without
the fake every compile of such a module died on "Torch not compiled with CUDA enabled" although
the tests had run.
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import json
import os
import re
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from kperf_ci.capture.static import triton_key as triton_key_memo
from kperf_ci.capture.static._standins import StandInTensor, _capture_ptxas_log, _make_driver
from kperf_ci.capture.static.fake_device import fake_cuda
from kperf_ci.capture.static.metrics_cache import cached_static_metrics
from kperf_ci.capture.static.sass import arch_capability, static_metrics
from kperf_ci.config import (
    ENV_NO_PREWARM,
    ENV_WORKER_PATH,
    env_switch,
    env_text,
)

# --------------------------------------------------------------------------------------------
# importing kernels

_MODULES: dict[tuple[str, str], Any] = {}
#: the arch whose device the fake CUDA device describes while user modules are imported (set per
#: request; every request of a run names the same one)
_device_arch: str | None = None


def _same_file(a: str | None, b: str) -> bool:
    try:
        return a is not None and os.path.samefile(a, b)
    except OSError:
        return False


def load_module(source_file: str, module: str) -> Any:
    """The user's module, imported once per worker under the fake CUDA device. A ``torch.cuda``
    call the fake lacks that breaks the import is named in the error."""
    key = (source_file, module)
    if key in _MODULES:
        return _MODULES[key]
    unfaked: list[str] = []
    try:
        with fake_cuda(arch=_device_arch, on_unfaked=unfaked.append):
            mod = _import(source_file, module)
    except Exception as e:
        if unfaked:
            raise ImportError(
                f"importing {module or source_file} called {unfaked[0]}, which static mode does not fake "
                f"({one_line(e)})"
            ) from e
        raise
    _MODULES[key] = mod
    return mod


def _import(source_file: str, module: str) -> Any:
    mod = None
    errors = []
    if module and module != "__main__" and source_file:
        parts = module.split(".")
        p = Path(source_file).with_suffix("")
        if p.name == "__init__":
            p = p.parent
        if tuple(p.parts[-len(parts) :]) == tuple(parts):
            base = str(Path(*p.parts[: -len(parts)]))
            if base not in sys.path:
                sys.path.insert(0, base)
        try:
            m = importlib.import_module(module)
            if not source_file or _same_file(getattr(m, "__file__", None), source_file):
                mod = m
            else:
                errors.append(f"module {module} is {getattr(m, '__file__', None)}, not {source_file}")
        except Exception as e:
            errors.append(f"{type(e).__name__}: {e}")
    if mod is None:
        if not source_file or not os.path.exists(source_file):
            raise ImportError(f"cannot import {module!r} ({'; '.join(errors) or 'no source file'})")
        d = os.path.dirname(source_file)
        if d not in sys.path:
            sys.path.insert(0, d)
        name = f"_kperf_src_{abs(hash(source_file)):x}_{Path(source_file).stem}"
        spec = importlib.util.spec_from_file_location(name, source_file)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {source_file}")
        m = importlib.util.module_from_spec(spec)
        sys.modules[name] = m
        spec.loader.exec_module(m)
        mod = m
    return mod


def resolve_jit(source_file: str, module: str, qualname: str) -> Any:
    """The JITFunction for module/qualname (Autotuner / Heuristics wrappers removed)."""
    from triton.runtime.jit import JITFunction

    if "<locals>" in qualname:
        raise ImportError("not importable: define the kernel at module level")
    mod = load_module(source_file, module)
    obj: Any = mod
    try:
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except AttributeError:
        obj = None
        for v in vars(mod).values():
            cur = v
            for _ in range(16):
                if isinstance(cur, JITFunction) or not hasattr(cur, "fn"):
                    break
                cur = cur.fn
            if isinstance(cur, JITFunction) and cur.fn.__qualname__ == qualname:
                obj = cur
                break
        if obj is None:
            raise ImportError(f"{qualname} not found in {module or source_file}") from None
    for _ in range(16):
        if isinstance(obj, JITFunction):
            return obj
        obj = getattr(obj, "fn", None)
        if obj is None:
            break
    raise ImportError(f"{qualname} in {module or source_file} is not a @triton.jit kernel")


def forget_placeholder_hashes() -> None:
    """After a failed compile: Triton's ``JITFunction.cache_key`` sets the placeholder hash
    ``recursion:<name>`` before it walks a kernel's dependencies and keeps it when the walk
    raises ("Unsupported function referenced"); a later compile of that kernel in this worker
    then skipped the walk and failed further on, with another error (a NameError from codegen).
    Reset, so that a kernel's error does not depend on what its worker compiled before (which
    worker takes which request is a matter of timing)."""
    from triton.runtime.jit import JITFunction

    for mod in list(sys.modules.values()):
        for obj in list(getattr(mod, "__dict__", {}).values()):
            for _ in range(16):  # Autotuner / Heuristics wrap the JITFunction as .fn
                if isinstance(obj, JITFunction):
                    if isinstance(obj.hash, str) and obj.hash.startswith("recursion:"):
                        obj.hash = None
                    break
                obj = getattr(obj, "fn", None) if _is_kernel_wrapper(obj) else None
                if obj is None:
                    break


def _is_kernel_wrapper(obj: Any) -> bool:
    from triton.runtime.jit import KernelInterface

    return isinstance(obj, KernelInterface)


# --------------------------------------------------------------------------------------------
# arguments

_TORCH_NAMES = {
    "fp32": "float32",
    "fp16": "float16",
    "bf16": "bfloat16",
    "fp64": "float64",
    "i8": "int8",
    "i16": "int16",
    "i32": "int32",
    "i64": "int64",
    "u8": "uint8",
    "u16": "uint16",
    "u32": "uint32",
    "u64": "uint64",
    "u1": "bool",
    "i1": "bool",
    "fp8e4nv": "float8_e4m3fn",
    "fp8e5": "float8_e5m2",
    "fp8e4b8": "float8_e4m3fnuz",
    "fp8e5b16": "float8_e5m2fnuz",
}


def rebuild_arg(a: dict[str, Any]) -> Any:
    import triton.language as tl

    kind = a["kind"]
    v = a.get("value")
    if kind == "tensor":
        return StandInTensor(tl.str_to_ty(a["dtype"], None), a.get("aligned", True) is not False)
    if kind in ("int", "bool", "str"):
        return v
    if kind == "float":
        return float(v)
    if kind == "none":
        return None
    if kind == "dtype":
        return tl.str_to_ty(v, None)
    if kind == "torch_dtype":
        import torch

        return getattr(torch, v)
    if kind == "jit":
        return resolve_jit(v.get("file", ""), v["module"], v["qualname"])
    if kind == "tuple":
        return tuple(rebuild_arg(x) for x in a.get("items", ()))
    if kind == "tensordesc":
        import torch
        from triton.tools.tensor_descriptor import TensorDescriptor

        base = torch.empty(0, dtype=getattr(torch, _TORCH_NAMES[a["dtype"]]))
        return TensorDescriptor(
            base, list(v["shape"]), list(v["strides"]), list(v["block_shape"]), v.get("padding", "zero")
        )
    raise ValueError(f"argument {a.get('name')!r} of kind {kind!r} cannot be replayed")


# --------------------------------------------------------------------------------------------
# compile


def one_line(e: BaseException) -> str:
    """A one-line summary of a compile error."""
    name = type(e).__name__
    text = re.sub(r" at 0x[0-9a-fA-F]+", "", str(e)).strip()  # object addresses change per run
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if name == "CompilationError" or "CompilationError" in name or name.endswith("AssertionFailure"):
        # triton: "at L:C:\n<source>\n^\n<message>" -- keep position and message
        pos = lines[0] if lines and lines[0].startswith("at ") else ""
        msg = lines[-1] if lines else ""
        if e.__cause__ is not None and (not msg or msg == "^"):
            cause = f"{type(e.__cause__).__name__}: {e.__cause__}"
            msg = re.sub(r" at 0x[0-9a-fA-F]+", "", cause).splitlines()[0]
        return f"{name} {pos} {msg}".replace("  ", " ").strip()[:500]
    if name == "PTXASError":
        for ln in lines:
            if "error" in ln.lower() and "ptxas" in ln.lower() and "failed with" not in ln:
                return f"{name}: {ln}"[:500]
    first = lines[0] if lines else ""
    return f"{name}: {first}"[:500] if first else name


def compile_launch(launch: dict[str, Any], arch: str, artifacts: list[str]) -> dict[str, Any]:
    import triton

    t0 = time.perf_counter()
    if not launch.get("importable", True):
        raise ImportError(launch.get("reason") or "not importable")
    jit = resolve_jit(launch.get("source_file", ""), launch.get("module", ""), launch["qualname"])
    args = [rebuild_arg(a) for a in launch["args"]]
    options = dict(launch.get("options") or {})
    for k, v in list(options.items()):
        if isinstance(v, list):
            options[k] = tuple(v)
    drv = triton.runtime.driver.active
    drv.cc = arch_capability(arch)
    kernel = jit.run(*args, grid=(1, 1, 1), warmup=True, **options)
    if hasattr(kernel, "result"):
        kernel = kernel.result()
    if kernel is None:
        raise RuntimeError("compile returned no kernel")
    t1 = time.perf_counter()
    # one cache for static and GPU mode (capture.static.metrics_cache): warm runs skip the tools
    warnings: list[str] = []  # a refused cache entry: the parent shows it (this stderr is kept hidden)
    metrics, sass, digest, cached = cached_static_metrics(
        kernel.asm, kernel.metadata, arch, static_metrics, warn=warnings.append
    )
    t2 = time.perf_counter()
    arts = {}
    if "sass" in artifacts:
        arts["sass"] = sass
    if "ptx" in artifacts:
        arts["ptx"] = kernel.asm.get("ptx", "")
    for k in artifacts:
        if k not in ("sass", "ptx") and k in kernel.asm and isinstance(kernel.asm[k], str):
            arts[k] = kernel.asm[k]
    return {
        "ok": True,
        "metrics": [[m.name, m.value, m.unit, m.kind, m.better] for m in metrics],
        "sass_hash": digest,
        "artifacts": arts,
        "compile_s": round(t1 - t0, 6),
        "metrics_s": round(t2 - t1, 6),
        "triton_name": kernel.metadata.name,
        "metrics_cached": cached,
        "warnings": warnings,
    }


def prewarm() -> None:
    """Pay per-process costs up front (torch import by Triton's specialization, triton_key)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    try:
        from triton.runtime.cache import triton_key

        triton_key()
    except Exception:
        pass


def handle(req: dict[str, Any]) -> dict[str, Any]:
    op = req.get("op")
    if op == "ping":
        return {"ok": True}
    if op == "compile":
        global _device_arch
        _device_arch = req.get("device_arch") or req["arch"]
        try:
            return compile_launch(req["launch"], req["arch"], req.get("artifacts", ["sass", "ptx"]))
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # pytest.skip at import time is a BaseException
            sys.stderr.write(traceback.format_exc())
            forget_placeholder_hashes()
            return {"ok": False, "error": one_line(e)}
    return {"ok": False, "error": f"unknown op {op!r}"}


def main(forked: bool = False) -> int:
    """``forked``: this process is a spare forked from the test process (:mod:`.spare`), torch
    already imported."""
    os.environ.pop("TRITON_INTERPRET", None)
    proto_fd = os.dup(1)
    os.dup2(2, 1)  # user prints go to stderr
    sys.stdout = sys.stderr
    proto = os.fdopen(proto_fd, "w", buffering=1)
    for p in reversed([p for p in (env_text(ENV_WORKER_PATH) or "").split(os.pathsep) if p]):
        if p not in sys.path:
            sys.path.insert(0, p)

    import triton

    triton.runtime.driver.set_active(_make_driver())
    _capture_ptxas_log()
    triton_key_memo.install()  # Triton's hash of its own ~400 MB, read from the memo once computed
    if not env_switch(ENV_NO_PREWARM):
        # torch's import makes ~165k objects that live as long as the worker: collecting while they
        # are made, and walking them again in every later full collection, is wasted work
        gc.disable()
        prewarm()
        gc.freeze()
        gc.enable()
    hello = {"ready": True, "pid": os.getpid(), "triton": triton.__version__, "forked": forked}
    proto.write(json.dumps(hello) + "\n")
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        req = json.loads(line)
        if req.get("op") == "exit":
            break
        resp = handle(req)
        resp["id"] = req.get("id")
        proto.write(json.dumps(resp) + "\n")
    # The interpreter's shutdown collections walk every object torch and the user's modules
    # created (~165k after `import torch`): 0.4-0.5 s of a core per worker on the 2-core CPU, and
    # the session waits for its workers to exit. Nothing of ours is left to collect; atexit
    # handlers and module teardown still run (in a spawned worker: a forked one ends in os._exit,
    # its parent's handlers not being its own).
    gc.freeze()
    return 0


if __name__ == "__main__":
    sys.exit(main())
