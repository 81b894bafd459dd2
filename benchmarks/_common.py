"""Shared by the GPU benchmarks: the example kernels at GPU-filling sizes, device facts, output.

Each case builds its inputs from a seed (random data, never zeros) and returns a callable that
makes exactly one Triton launch through the example's own wrapper.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def load_example(name: str):
    """examples/kernels/<name>.py, imported by path (examples/ is not a package)."""
    path = ROOT / "examples" / "kernels" / f"{name}.py"
    mod_name = f"kperf_example_{name}"
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    spec = importlib.util.spec_from_file_location(mod_name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = mod
    spec.loader.exec_module(mod)
    return mod


@dataclass
class Case:
    name: str
    size: str
    make: Callable[[int], Callable[[], Any]]  # seed -> callable making one launch
    bytes_moved: int
    flops: int = 0


def _gen(seed: int):
    import torch

    g = torch.Generator(device="cuda")
    g.manual_seed(seed)
    return g


def _vector_add(seed: int):
    import torch

    m = load_example("vector_add")
    n = 1 << 26
    g = _gen(seed)
    x = torch.randn(n, device="cuda", generator=g)
    y = torch.randn(n, device="cuda", generator=g)
    return lambda: m.add(x, y)


def _softmax(seed: int):
    import torch

    m = load_example("softmax")
    x = torch.randn(16384, 4096, device="cuda", generator=_gen(seed))
    return lambda: m.softmax(x)


def _layernorm(seed: int):
    import torch

    m = load_example("layernorm")
    g = _gen(seed)
    N = 4096
    x = torch.randn(32768, N, device="cuda", dtype=torch.float16, generator=g)
    w = torch.rand(N, device="cuda", dtype=torch.float16, generator=g) + 0.5
    b = torch.randn(N, device="cuda", dtype=torch.float16, generator=g)
    return lambda: m.layer_norm(x, w, b)


def _matmul(seed: int):
    """The example's kernel pinned to its first autotune config (128x256x64, 8 warps, 3 stages),
    launched as the example's wrapper does: every process times the same compiled kernel (the
    autotuner's pick can differ between processes, which is not timing noise)."""
    import torch
    import triton

    m = load_example("matmul")
    g = _gen(seed)
    M = N = K = 4096
    a = torch.randn(M, K, device="cuda", dtype=torch.float16, generator=g)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16, generator=g)
    cfg = m.get_autotune_config()[0]
    jit_fn = getattr(m.matmul_kernel, "fn", m.matmul_kernel)
    kw = dict(cfg.kwargs, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    grid = (triton.cdiv(M, kw["BLOCK_SIZE_M"]) * triton.cdiv(N, kw["BLOCK_SIZE_N"]),)

    def run():
        c = torch.empty((M, N), device="cuda", dtype=torch.float16)
        jit_fn[grid](
            a,
            b,
            c,
            M,
            N,
            K,
            a.stride(0),
            a.stride(1),
            b.stride(0),
            b.stride(1),
            c.stride(0),
            c.stride(1),
            **kw,
        )
        return c

    return run


def _flash_attention(seed: int):
    import torch

    m = load_example("flash_attention")
    g = _gen(seed)
    shape = (2, 16, 4096, 64)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.float16, generator=g) for _ in range(3))
    return lambda: m.attention(q, k, v, causal=False)


CASES = [
    Case("vector_add", "64M fp32", _vector_add, 3 * 4 << 26),
    Case("softmax", "16384x4096 fp32", _softmax, 2 * 4 * 16384 * 4096),
    Case("layernorm", "32768x4096 fp16", _layernorm, 2 * 2 * 32768 * 4096),
    Case("matmul", "4096^3 fp16 (config 0)", _matmul, 3 * 2 * 4096 * 4096, 2 * 4096**3),
    Case(
        "flash_attention",
        "2x16x4096x64 fp16",
        _flash_attention,
        4 * 2 * 2 * 16 * 4096 * 64,
        4 * 2 * 16 * 4096 * 4096 * 64,
    ),
]


def cases(only: list[str] | None = None) -> list[Case]:
    return [c for c in CASES if not only or c.name in only]


def device_info() -> dict[str, Any]:
    from kperf_ci.device import device_fingerprint

    d = device_fingerprint()
    try:
        from kperf_ci.capture.timing.engine import CudaBackend

        d["gpu_state"] = CudaBackend().state()
    except Exception as e:  # pragma: no cover - device only
        d["gpu_state"] = {"error": str(e)}
    return d


def out_dir(arg: str | None) -> Path:
    p = Path(arg or os.environ.get("OUT") or RESULTS)
    p.mkdir(parents=True, exist_ok=True)
    return p


def write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=False, default=_jsonable) + "\n")


def _jsonable(o: Any) -> Any:
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, float) and not math.isfinite(o):
        return None
    return str(o)


def cv(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    if len(xs) < 2:
        return None
    m = statistics.fmean(xs)
    return statistics.stdev(xs) / m if m else None


def spread(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    if len(xs) < 2:
        return None
    return (max(xs) - min(xs)) / statistics.median(xs)


def geomean(xs: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(x) for x in xs))


def warm_timed_launch(be: Any, run: Any, warm: int = 3) -> float:
    """One launch timed between two events (ms), right behind ``warm`` untimed launches in the
    same queue (no idle gap before it), each after an L2 flush."""
    for _ in range(warm):
        be.flush()
        run()
    be.flush()
    a = be.marker()
    run()
    b = be.marker()
    be.synchronize()
    return be.elapsed_ms(a, b)


def kperf_commit() -> str:
    """The kperf-ci commit a result measured ("+dirty" with uncommitted changes to kperf_ci/).
    KPERF_EVAL_COMMIT wins: a copy of the tree on another machine may carry a stale .git."""
    if os.environ.get("KPERF_EVAL_COMMIT"):
        return os.environ["KPERF_EVAL_COMMIT"]
    root = Path(__file__).resolve().parents[1]
    try:
        sha = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", "kperf_ci"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        return "unknown"
    return sha + ("+dirty" if dirty else "")
