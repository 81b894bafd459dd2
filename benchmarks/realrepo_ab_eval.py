"""`kperf ab` on a real repository, unmodified: Liger-Kernel with planted pull requests of known effect.

Writes benchmarks/results/realrepo_ab_eval.{json,md} (every number and sentence of the .md comes from
this script, rendered from the json).  Liger-Kernel is fetched at run time at a pinned commit and
never committed here.  On the GPU machine (no network) carry a plain export made here:

    python benchmarks/realrepo_ab_eval.py --export liger-export --liger-src <clone or URL>   # here, once
    # on the GPU, a few steps per call (each call under 9 minutes), parts written to --out:
    python benchmarks/realrepo_ab_eval.py --liger-src liger-export --out $OUT --no-render \
        --steps launch_option,plain
    python benchmarks/realrepo_ab_eval.py --steps ''        # render json + md from the parts in --out
    python benchmarks/realrepo_ab_eval.py --mode cpu --liger-src <clone>        # dry run, no GPU

Steps (``--steps``, comma list; each writes ``realrepo_ab_eval.part-<step>.json``, the json and the
md are rendered from every part present):

* one step per planted case (``CASES``): a two-commit git repository made from the Liger checkout
  (commit 1 = base, commit 2 = head with the case's text patch, asserted to apply); the truth, in a
  child process: the changed module file loaded from the base tree and from the head tree under
  distinct names, the op's wrapper called once per side at every launch shape the selected tests
  make (shapes read from the tests' parametrization, asserted present in the test file) with the
  kernel's launch recorded, then the two recorded launches re-launched alternately
  call by call (ABAB.../BABA...), their CUPTI kernel durations read by benchmarks/_cupti_truth.py
  (``--rounds`` x 5 calls a side, at least 30, L2 flushed before each call); then the real CLI
  in a fresh process with default settings: ``kperf ab --base HEAD~1 --db .. --report-dir .. --json .. <tests>
  --kperf-all -p no:cacheprovider``;
* ``aa1``, ``aa2``: ``kperf ab --base HEAD~1 --time-all`` on a repository whose head adds a comment
  to a non-kernel file (A/A), over test_geglu.py + test_softmax.py, and test_rms_norm.py;
* ``plain``: ``python -m pytest -q -p no:cacheprovider`` over the launch_option case's files in
  both trees (the cost kperf ab is compared with).

Every measured pytest or kperf process starts with an empty Triton cache (TRITON_CACHE_DIR in a
fresh temporary directory), as a CI job without a restored cache does.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import kperf_commit  # noqa: E402 - the one reader of the measured commit
from suites_eval import _run as run_group  # noqa: E402 - one process-group runner with a timeout

RESULTS = ROOT / "benchmarks" / "results"
NAME = "realrepo_ab_eval"
T = "test/transformers/"
# what the GPU machine needs of Liger-Kernel (--export): its sources and the tests used here
EXPORT_TESTS = (
    "test_geglu.py", "test_softmax.py", "test_rms_norm.py", "test_dyt.py",
    "test_swiglu.py", "test_layer_norm.py", "test_kl_div.py", "test_jsd.py",
)  # fmt: skip
EXPORT = ("src", "test/__init__.py", "test/conftest.py", "test/utils.py", *(T + f for f in EXPORT_TESTS))


@dataclass
class Plant:
    path: str  # file in the repository
    old: str  # text that must occur exactly once
    new: str


@dataclass
class Shape:
    """One launch shape of the changed kernel, as the selected tests make it."""

    label: str  # e.g. "4096x4096 fp32"
    args: dict[str, Any]  # what the truth builder needs
    test_re: str  # regex over test ids: the tests that make this launch


@dataclass
class Case:
    name: str
    kernel: str  # the Triton kernel the change is about
    module: str  # the file whose base and head versions the truth loads
    what: str  # one line for the md
    expect: str  # slower | faster | identical
    plants: list[Plant]
    tests: list[str]  # pytest arguments on the GPU
    cpu_tests: list[str]  # pytest arguments for the CPU dry run ([] = not runnable there)
    cpu_expect: str  # changed | identical | not run, with why
    truth: str | None = None  # key of TRUTH (None: no timing truth, e.g. comment only)
    shapes: list[Shape] = field(default_factory=list)


GEGLU = "src/liger_kernel/ops/geglu.py"
SOFTMAX = "src/liger_kernel/ops/softmax.py"
RMS = "src/liger_kernel/ops/rms_norm.py"
DYT = "src/liger_kernel/ops/dyt.py"

_GEGLU_FWD_LAUNCH = (
    "            BLOCK_SIZE=BLOCK_SIZE,\n            num_warps=num_warps,\n        )\n"
    "    return a, b, c.view(*ori_shape)"
)
_GEGLU_FWD_SLOW = _GEGLU_FWD_LAUNCH.replace("num_warps=num_warps,", "num_warps=max(num_warps // 4, 1),")
_SOFTMAX_BODY = "    m = tl.max(x, axis=0)\n    e = tl.exp(x - m)"
_SOFTMAX_COMMENT = "    # subtract the row max before exp: exp cannot overflow\n" + _SOFTMAX_BODY
_GEGLU_FWD_LOADS = (
    "    b_row = tl.load(b + col_offsets, mask=mask, other=0)\n\n"
    "    # tanh approximation form of GELU is computed with:"
)
_GEGLU_FWD_USE = (
    "    geglu_a = 0.5 * a_row * (1 + tanh_result)\n    c_row = geglu_a.cast(b_row.dtype) * b_row"
)


def _traffic(k: int) -> list[Plant]:
    """Each program also reads the first n_cols // k elements of b's row half a grid away (rows
    that far apart are not in L2 together on the large shapes): a program moves 3 * n_cols
    elements (a, b read, c written), so this adds 1 / (3k) of the traffic.  The slice feeds the
    result as ``+ 0.0 * extra``: IEEE arithmetic (Triton sets no fast-math flags) cannot drop it
    (0.0 * inf is NaN), and on the tests' finite inputs the output is unchanged."""
    load = (
        "    b_row = tl.load(b + col_offsets, mask=mask, other=0)\n"
        f"    # read a slice of the row half a grid away (n_cols // {k} elements)\n"
        "    far = (tl.program_id(0) + tl.num_programs(0) // 2) % tl.num_programs(0)\n"
        "    extra = tl.load(b + (far - program_id) * stride + col_offsets, "
        f"mask=col_offsets < n_cols // {k}, "
        "other=0).to(tl.float32)\n\n"
        "    # tanh approximation form of GELU is computed with:"
    )
    use = _GEGLU_FWD_USE.replace("(1 + tanh_result)\n", "(1 + tanh_result) + 0.0 * extra\n")
    return [Plant(GEGLU, _GEGLU_FWD_LOADS, load), Plant(GEGLU, _GEGLU_FWD_USE, use)]


def _geglu_shapes(correctness: bool, functional: bool, gemma: bool) -> list[Shape]:
    out = []
    dts = (("fp32", "float32", "dtype0"), ("bf16", "bfloat16", "dtype1"))
    if correctness:  # test_correctness: (bsz, seq_len, hidden, intermediate) -> rows bsz*seq_len
        for b, s, h, i in ((2, 2048, 2048, 4096), (9, 41, 341, 4231)):
            for short, dt, pid in dts:
                out.append(
                    Shape(
                        f"{b * s}x{i} {short}",
                        {"rows": b * s, "cols": i, "dtype": dt},
                        rf"test_correctness\[{pid}-.*-{b}-{s}-{h}-{i}\]",
                    )
                )
    if functional:  # test_correctness_functional: (bsz, seq_len, size)
        for b, s, n in ((2, 2, 8), (9, 7, 41)):
            for short, dt, pid in dts:
                out.append(
                    Shape(
                        f"{b * s}x{n} {short}",
                        {"rows": b * s, "cols": n, "dtype": dt},
                        rf"test_correctness_functional\[{pid}-.*-{b}-{s}-{n}\]",
                    )
                )
    if gemma:  # test_gemma4_mlp_doubled_forward_backward: x (2, 8, 64), intermediate 128 doubled
        out.append(
            Shape(
                "16x256 fp32",
                {"rows": 16, "cols": 256, "dtype": "float32"},
                r"test_gemma4_mlp_doubled_forward_backward",
            )
        )
    return out


def _rms_shapes() -> list[Shape]:
    out = []
    for b, s, h in ((2, 128, 512), (5, 123, 123)):
        for short, dt, pid in (("fp32", "float32", "dtype0"), ("bf16", "bfloat16", "dtype1")):
            out.append(
                Shape(
                    f"{b * s}x{h} {short}",
                    {"rows": b * s, "cols": h, "dtype": dt},
                    rf"test_correctness\[True-False-LlamaRMSNorm-0\.0-llama-{pid}-.*-{b}-{s}-{h}\]",
                )
            )
    return out


def _dyt_shapes() -> list[Shape]:
    out = []
    for b, s, h in ((2, 8, 4096), (4, 16, 2048), (1, 1, 1023), (3, 7, 256)):
        for beta in (False, True):
            out.append(
                Shape(
                    f"{b * s}x{h} fp32{' beta' if beta else ''}",
                    {"rows": b * s, "cols": h, "dtype": "float32", "beta": beta},
                    rf"test_liger_dyt_correctness\[.*-{b}-{s}-{h}-0\.5-{beta}\]",
                )
            )
    return out


# the parametrizations the shapes above were read from (asserted present in the test files)
TEST_SOURCES = {
    "geglu": (
        T + "test_geglu.py",
        ["(2, 2048, 2048, 4096)", "(9, 41, 341, 4231)", "(2, 2, 8)", "(9, 7, 41)"],
    ),
    "rms_norm_bwd": (T + "test_rms_norm.py", ["(2, 128, 512)", "(5, 123, 123)"]),
    "dyt_fwd": (T + "test_dyt.py", ["(2, 8, 4096)", "(4, 16, 2048)", "(1, 1, 1023)", "(3, 7, 256)"]),
}

GEGLU_CPU = [T + "test_geglu.py", "-k", "correctness_functional and dtype0"]
CASES = [
    Case(
        "launch_option",
        "_geglu_tanh_forward_kernel",
        GEGLU,
        "geglu forward launch num_warps=num_warps -> max(num_warps // 4, 1); a comment in a softmax kernel",
        "slower",
        [Plant(GEGLU, _GEGLU_FWD_LAUNCH, _GEGLU_FWD_SLOW), Plant(SOFTMAX, _SOFTMAX_BODY, _SOFTMAX_COMMENT)],
        [T + "test_geglu.py", T + "test_softmax.py"],
        [
            T + "test_geglu.py",
            T + "test_softmax.py",
            "-k",
            "(correctness_functional or test_liger_softmax) and dtype0",
        ],
        "changed",
        "geglu",
        _geglu_shapes(True, True, True),
    ),
    Case(
        "traffic_2",
        "_geglu_tanh_forward_kernel",
        GEGLU,
        "geglu forward reads n_cols // 16 more elements per row (+2.1% of its global traffic)",
        "slower",
        _traffic(16),
        [T + "test_geglu.py", "-k", "correctness"],
        GEGLU_CPU,
        "changed",
        "geglu",
        _geglu_shapes(True, True, False),
    ),
    Case(
        "traffic_8",
        "_geglu_tanh_forward_kernel",
        GEGLU,
        "geglu forward reads n_cols // 4 more elements per row (+8.3% of its global traffic)",
        "slower",
        _traffic(4),
        [T + "test_geglu.py", "-k", "correctness"],
        GEGLU_CPU,
        "changed",
        "geglu",
        _geglu_shapes(True, True, False),
    ),
    Case(
        "grid",
        "_rms_norm_backward_kernel",
        RMS,
        "rms_norm backward on half as many programs (grid 132 -> 66 on an H100), twice the rows each",
        "slower",
        [
            Plant(
                RMS,
                "        sm_count = torch.cuda.get_device_properties(X.device).multi_processor_count\n",
                "        sm_count = torch.cuda.get_device_properties(X.device).multi_processor_count // 2\n",
            )
        ],
        [T + "test_rms_norm.py", "-k", "test_correctness and True-False-LlamaRMSNorm"],
        [
            T + "test_rms_norm.py",
            "-k",
            "test_correctness and True-False-LlamaRMSNorm and dtype0 and 2-128-512",
        ],
        "identical (the grid is set from the CUDA SM count; on a CPU it is 1 in both trees)",
        "rms_norm_bwd",
        _rms_shapes(),
    ),
    Case(
        "autotune",
        "_dyt_fwd_kernel",
        DYT,
        "dyt forward autotune configs: BLOCK_N [1024, 2048, 4096] x num_warps [4, 8, 16] -> [4096] x [1, 2]",
        "slower",
        [
            Plant(
                DYT,
                "        for bn in [1024, 2048, 4096]\n        for ns in [1, 2]\n"
                "        for nw in [4, 8, 16]\n"
                '    ],\n    key=["N"],\n)\n@triton.jit\ndef _dyt_fwd_kernel',
                "        for bn in [4096]\n        for ns in [1, 2]\n        for nw in [1, 2]\n"
                '    ],\n    key=["N"],\n)\n@triton.jit\ndef _dyt_fwd_kernel',
            )
        ],
        [T + "test_dyt.py", "-k", "test_liger_dyt_correctness"],
        [],
        "not run (Liger's dyt backward sets NUM_SMS only for cuda/xpu/npu devices: its tests fail on a CPU); "
        "the module check compares the autotune configs",
        "dyt_fwd",
        _dyt_shapes(),
    ),
    Case(
        "faster",
        "_geglu_tanh_forward_kernel",
        GEGLU,
        "geglu forward launch restored to Liger's num_warps (base: max(num_warps // 4, 1))",
        "faster",
        [Plant(GEGLU, _GEGLU_FWD_SLOW, _GEGLU_FWD_LAUNCH)],  # applied to a base that has the slow launch
        [T + "test_geglu.py", "-k", "correctness"],
        GEGLU_CPU,
        "changed",
        "geglu",
        _geglu_shapes(True, True, False),
    ),
    Case(
        "comment_only",
        "_softmax_single_block_forward_kernel",
        SOFTMAX,
        "a comment line added inside a softmax kernel's body (shifts the kernel's later lines)",
        "identical",
        [Plant(SOFTMAX, _SOFTMAX_BODY, _SOFTMAX_COMMENT)],
        [T + "test_softmax.py"],
        [T + "test_softmax.py", "-k", "test_liger_softmax and dtype0"],
        "identical",
        None,
    ),
]
BY_NAME = {c.name: c for c in CASES}
# A/A: the head adds a comment to a file no kernel or test reads at run time
AA_PLANT = Plant(
    "src/liger_kernel/ops/__init__.py", "", "# an unrelated comment: nothing a test launches changes\n"
)
AA_RUNS = {
    "aa1": [T + "test_geglu.py", T + "test_softmax.py"],
    "aa2": [T + "test_rms_norm.py", "-k", "test_correctness and not functional and not BaseRMSNorm"],
    # issue 32's A/A needs at least 200 launches: more of Liger's kernels
    # five files ran past 500 s on the H100, swiglu and dyt together past 360 s: one file a step
    "aa3": [T + "test_swiglu.py"],
    "aa4": [T + "test_dyt.py"],
    "aa5": [T + "test_rms_norm.py", "-k", "test_correctness_functional"],
}
PLAIN_FILES = BY_NAME["launch_option"].tests
STEPS = (*BY_NAME, *AA_RUNS, "plain")


# ---------------------------------------------------------------------------------------------
# repositories


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def commit_all(repo: Path, msg: str) -> None:
    git(repo, "add", "-A")
    git(repo, "-c", "user.email=eval@kperf", "-c", "user.name=eval", "commit", "-qm", msg)


def apply_plant(repo: Path, p: Plant) -> None:
    f = repo / p.path
    text = f.read_text()
    if p.old == "":  # prepend
        f.write_text(p.new + text)
        return
    n = text.count(p.old)
    assert n == 1, f"{p.path}: the text to replace occurs {n} times (expected once): {p.old[:80]!r}"
    f.write_text(text.replace(p.old, p.new, 1))
    assert p.new in f.read_text()


def liger_checkout(src: str, work: Path) -> tuple[Path, str]:
    """The pinned Liger-Kernel files (EXPORT) in ``work/liger``; (path, commit)."""
    from suites_eval import LIGER_COMMIT, fetch_liger

    full = work / "liger-full"
    commit = fetch_liger(src, LIGER_COMMIT, full)
    if commit != LIGER_COMMIT:
        raise SystemExit(f"{NAME}: {src} holds Liger-Kernel {commit}, not the pinned {LIGER_COMMIT}")
    out = work / "liger"
    if out.exists():
        shutil.rmtree(out)
    for rel in EXPORT:
        s, d = full / rel, out / rel
        if not s.exists():
            raise SystemExit(f"{NAME}: {rel} is missing from {src}")
        d.parent.mkdir(parents=True, exist_ok=True)
        if s.is_dir():
            shutil.copytree(s, d, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(s, d)
    shutil.rmtree(full)
    return out, commit


def build_repo(
    liger: Path, dest: Path, base_plants: list[Plant], head_plants: list[Plant]
) -> tuple[Path, str]:
    """A git repository: commit 1 = Liger (+ base_plants), commit 2 = + head_plants; (path, diff)."""
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(liger, dest)
    git(dest, "init", "-q")
    for p in base_plants:
        apply_plant(dest, p)
    commit_all(dest, "base")
    for p in head_plants:
        apply_plant(dest, p)
    commit_all(dest, "head")
    return dest, git(dest, "diff", "HEAD~1", "HEAD")


def case_repo(case: Case, liger: Path, dest: Path) -> tuple[Path, str]:
    base = [Plant(GEGLU, _GEGLU_FWD_LAUNCH, _GEGLU_FWD_SLOW)] if case.name == "faster" else []
    for key, (path, needles) in TEST_SOURCES.items():
        if key == case.truth:
            text = (liger / path).read_text()
            missing = [n for n in needles if n not in text]
            assert not missing, f"{path} no longer holds the parametrization {missing} the truth shapes use"
    return build_repo(liger, dest, base, case.plants)


# ---------------------------------------------------------------------------------------------
# subprocesses


def _env(repo: Path, cpu: bool, cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(repo / "src"), str(repo), str(ROOT)]
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["TRITON_CACHE_DIR"] = str(cache)
    if cpu:
        env["TRITON_INTERPRET"] = "1"
    return env


def run_cmd(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float) -> tuple[int | None, str, float]:
    """(exit code or None on timeout, output, wall seconds): suites_eval's runner, which kills the
    whole process group on a timeout (kperf's compile workers and passes included), timed."""
    t0 = time.monotonic()
    rc, out = run_group(cmd, cwd, env, timeout)
    return rc, out, time.monotonic() - t0


def kperf_ab(
    repo: Path, tests: list[str], extra: list[str], log: Path, cpu: bool, timeout: float, python: str
) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="kperf-rr-"))
    js = tmp / "ab.json"
    cmd = [
        python,
        "-m",
        "kperf_ci",
        "ab",
        "--base",
        "HEAD~1",
        "--db",
        str(tmp / "ab.db"),
        "--report-dir",
        str(tmp / "rep"),
        "--json",
        str(js),
        *extra,
        *tests,
        "--kperf-all",
        "-p",
        "no:cacheprovider",
    ]
    rc, out, wall = run_cmd(cmd, repo, _env(repo, cpu, tmp / "triton-cache"), timeout)
    shown = "python " + " ".join(c if "/" not in c or c.startswith(T) else Path(c).name for c in cmd[1:])
    tail = "\n".join(out.rstrip().splitlines()[-60:])
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"\n$ {shown}\n  (cwd: the case repository; exit {rc}; {wall:.1f} s)\n{tail}\n")
    doc = json.loads(js.read_text()) if js.exists() else {}
    shutil.rmtree(tmp, ignore_errors=True)
    return {"exit_code": rc, "wall_s": wall, "doc": doc, "command": shown}


# ---------------------------------------------------------------------------------------------
# truth: base vs head launch, alternated, CUPTI kernel durations, in a child process


class _Recorder:
    """Stands in for a kernel (JITFunction or Autotuner) in its module while the wrapper runs once:
    keeps every ``kernel[grid](*args, **kwargs)`` launch so that it can be made again alone."""

    def __init__(self, real: Any):
        self.real, self.launches = real, []

    def __getitem__(self, grid: Any) -> Any:
        def launch(*args: Any, **kwargs: Any) -> Any:
            self.launches.append((grid, args, kwargs))
            return self.real[grid](*args, **kwargs)

        return launch

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def _load(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _inputs(kind: str, a: dict[str, Any]) -> dict[str, Any]:
    import torch

    g = torch.Generator(device="cuda").manual_seed(0)
    dt = getattr(torch, a["dtype"])
    rows, cols = a["rows"], a["cols"]

    def rnd(*shape: int) -> Any:
        return torch.randn(*shape, device="cuda", generator=g, dtype=torch.float32).to(dt)

    if kind == "geglu":
        return {"a": rnd(rows, cols), "b": rnd(rows, cols)}
    if kind == "rms_norm_bwd":
        return {"x": rnd(rows, cols), "w": rnd(cols) * 0.1 + 1.0, "dy": rnd(rows, cols)}
    if kind == "dyt_fwd":
        return {
            "x": rnd(rows, cols),
            "alpha": rnd(1),
            "gamma": rnd(cols),
            "beta": rnd(cols) if a["beta"] else None,
        }
    raise ValueError(kind)


def _call(kind: str, mod: Any, i: dict[str, Any]) -> None:
    if kind == "geglu":
        mod.geglu_forward(i["a"], i["b"])
    elif kind == "rms_norm_bwd":
        # the test's LigerRMSNorm(casting_mode="llama", offset=0.0, in_place=False), weight affine
        y, x2, rstd, block, warps, mode = mod.rms_norm_forward(i["x"], i["w"], 1e-6, 0.0, "llama", None)
        mod.rms_norm_backward(i["dy"], x2, i["w"], rstd, 0.0, mode, block, warps, False, None)
    elif kind == "dyt_fwd":
        mod.liger_dyt_fwd(i["x"], i["alpha"], i["gamma"], i["beta"])


def _record(kind: str, mod: Any, kernel: str, inputs: dict[str, Any]) -> tuple[Any, Any, tuple, dict]:
    """(the kernel, grid, args, kwargs) of the one launch the op makes on ``inputs``."""
    real = getattr(mod, kernel)
    rec = _Recorder(real)
    setattr(mod, kernel, rec)
    try:
        _call(kind, mod, inputs)
    finally:
        setattr(mod, kernel, real)
    assert len(rec.launches) == 1, f"{kernel}: {len(rec.launches)} launches in one wrapper call"
    grid, args, kwargs = rec.launches[0]
    return real, grid, args, kwargs


def _recorded_launch(kind: str, mod: Any, kernel: str, inputs: dict[str, Any]) -> Any:
    real, grid, args, kwargs = _record(kind, mod, kernel, inputs)
    return lambda: real[grid](*args, **kwargs)


def _same_buffer(a: Any, b: Any) -> bool:
    import torch

    return (
        isinstance(a, torch.Tensor)
        and isinstance(b, torch.Tensor)
        and (a.shape, a.stride(), a.dtype, a.device) == (b.shape, b.stride(), b.dtype, b.device)
    )


def shared_launches(kind: str, mods: dict[str, Any], kernel: str, inputs: dict[str, Any]) -> dict[str, Any]:
    """The base's and the head's recorded launch on shared buffers: the head's tensor arguments
    are replaced, position by position, by the base's where shape, strides and dtype agree
    (its own output buffer included), so the two differ only in the code under test. Where a
    buffer sits in memory moves a short kernel's time by several percent (the field notes):
    two sets of buffers would put that into the effect."""
    base_real, base_grid, bargs, bkw = _record(kind, mods["base"], kernel, inputs)
    real, grid, hargs, hkw = _record(kind, mods["head"], kernel, inputs)
    padded = bargs + (None,) * max(0, len(hargs) - len(bargs))
    hargs = tuple(b if _same_buffer(h, b) else h for h, b in zip(hargs, padded[: len(hargs)], strict=True))
    hkw = {k: bkw[k] if _same_buffer(v, bkw.get(k)) else v for k, v in hkw.items()}
    return {
        "base": lambda: base_real[base_grid](*bargs, **bkw),
        "head": lambda: real[grid](*hargs, **hkw),
    }


def _median_ci(xs: list[float]) -> tuple[float, float]:
    """A ~95% distribution-free interval of the median (order statistics)."""
    s, n = sorted(xs), len(xs)
    k = max(0, int(n / 2 - 0.98 * n**0.5))
    return s[k], s[n - 1 - k]


def alternated_cupti(fns: dict[str, Callable[[], Any]], rounds: int) -> dict[str, Any]:
    """The truth at one launch shape: the base's and the head's recorded launch (``fns`` keyed
    "base" and "head") timed by CUPTI kernel durations (benchmarks/_cupti_truth.py: torch.profiler's
    public API, no kperf code), alternated call by call on their shared inputs, the L2 flushed
    before each call: ``rounds`` x 20 calls a side (at least 30). The ratio of call i is head i /
    base i (neighbours in time). Earlier evaluations timed do_bench here, which holds the launch
    overhead on both sides and so shrank every effect toward 0."""
    from _cupti_truth import cupti_samples

    # 20 calls a round: a 1.5 us kernel's CUPTI durations step by 32 ns, so its median needs many
    us = cupti_samples(fns, n=max(30, 20 * rounds))
    ms = {side: [x / 1000 for x in v] for side, v in us.items()}
    ratios = [h / b for b, h in zip(ms["base"], ms["head"], strict=True)]
    lo, hi = _median_ci(ratios)
    return {
        "base_ms": statistics.median(ms["base"]),
        "head_ms": statistics.median(ms["head"]),
        # the effect of the medians (what kperf's verdict estimates), and the calls' ratios' spread
        "ratio": statistics.median(ms["head"]) / statistics.median(ms["base"]),
        "ratio_ci95": [lo, hi],
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "rounds": rounds,
        "calls": len(ms["base"]),
        "method": "cupti",
        # for the record: the ratio of 10%-trimmed means (a 1.5 us kernel's durations step by
        # 32 ns, so its medians step by about 2%; means average the steps away), and the samples
        "ratio_trimmed_mean": _trimmed_mean(ms["head"]) / _trimmed_mean(ms["base"]),
        "samples_us": {side: [round(x * 1000, 4) for x in v] for side, v in ms.items()},
    }


def _trimmed_mean(xs: list[float], cut: float = 0.1) -> float:
    s = sorted(xs)
    k = int(len(s) * cut)
    return statistics.fmean(s[k : len(s) - k])


def alternated_do_bench(fns: dict[str, Callable[[], Any]], rounds: int) -> dict[str, Any]:
    """The truth at one launch shape: the base's and the head's recorded launch (``fns`` keyed
    "base" and "head"), compiled and warmed, then timed by ``triton.testing.do_bench`` (median,
    L2 flushed) alternately, base-head then head-base, for ``rounds`` rounds."""
    import torch
    import triton

    for f in fns.values():  # compile, warm the clocks
        for _ in range(3):
            f()
    torch.cuda.synchronize()
    ms: dict[str, list[float]] = {"base": [], "head": []}
    for r in range(rounds):
        for side in ("base", "head") if r % 2 == 0 else ("head", "base"):
            ms[side].append(triton.testing.do_bench(fns[side], warmup=25, rep=100, return_mode="median"))
    ratios = [h / b for b, h in zip(ms["base"], ms["head"], strict=True)]
    lo, hi = _median_ci(ratios)
    return {
        "base_ms": statistics.median(ms["base"]),
        "head_ms": statistics.median(ms["head"]),
        "ratio": statistics.median(ratios),
        "ratio_ci95": [lo, hi],
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "rounds": rounds,
    }


# The functions of Liger's op modules that _call goes through, and the leading positional
# arguments of each that make up _inputs' dict: the test's own values are caught there.
CAPTURE = {
    "geglu": {"geglu_forward": ("a", "b")},
    "rms_norm_bwd": {"rms_norm_forward": ("x", "w"), "rms_norm_backward": ("dy",)},
    "dyt_fwd": {"liger_dyt_fwd": ("x", "alpha", "gamma", "beta")},
}


def capture_test_inputs(case: Case, repo: Path) -> tuple[dict[str, dict[str, Any]], int | None]:
    """The inputs each shape's test really passes (kperf ab replays the test's launch on those
    values, and a kernel's time can depend on them: tanh's branches, for one): the case's tests
    run once in this process (pytest, kperf's plugin off) with the op module's functions wrapped;
    the first call of each in a test matching a shape's ``test_re`` is kept, its tensors cloned.
    Returns ({shape label: inputs}, pytest's exit code)."""
    import pytest
    import torch

    modname = case.module.removeprefix("src/").removesuffix(".py").replace("/", ".")
    mod = importlib.import_module(modname)
    current: dict[str, Any] = {"id": None}
    got: dict[str, dict[str, Any]] = {}
    originals = {fn: getattr(mod, fn) for fn in CAPTURE[case.truth]}

    def wrap(fn: str, names: tuple[str, ...]) -> Any:
        real = originals[fn]

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            for sh in case.shapes:
                if current["id"] and re.search(sh.test_re, current["id"]):
                    slot = got.setdefault(sh.label, {})
                    for name, v in zip(names, args[: len(names)], strict=False):
                        if name not in slot:
                            slot[name] = v.detach().clone() if isinstance(v, torch.Tensor) else v
            return real(*args, **kwargs)

        return wrapper

    class Plugin:
        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_call(self, item: Any) -> Any:
            current["id"] = item.nodeid
            yield
            current["id"] = None

    for fn, names in CAPTURE[case.truth].items():
        setattr(mod, fn, wrap(fn, names))
    try:
        rc = pytest.main([*case.tests, "-q", "-p", "no:kperf", "-p", "no:cacheprovider"], plugins=[Plugin()])
    finally:
        for fn, real in originals.items():
            setattr(mod, fn, real)
    want = {n for names in CAPTURE[case.truth].values() for n in names}
    done = {k: v for k, v in got.items() if want <= set(v)}
    return done, int(rc)


def truth_child(case_name: str, repo: Path, base_tree: Path, rounds: int, out: Path) -> None:
    import torch

    case = BY_NAME[case_name]
    sys.path[:0] = [str(repo / "src"), str(repo)]
    t0 = time.monotonic()
    captured, pytest_rc = capture_test_inputs(case, repo)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    mods = {
        side: _load(tree / case.module, f"rr_{side}_{Path(case.module).stem}")
        for side, tree in (("base", base_tree), ("head", repo))
    }
    rows = []
    for sh in case.shapes:
        if sh.label not in captured:
            # no silent stand-in: a shape whose test did not reach the op has no truth
            rows.append({"shape": sh.label, "test_re": sh.test_re, "error": "its test did not call the op"})
            print(f"  truth {case.name} {sh.label}: not measured (its test did not call the op)", flush=True)
            continue
        row: dict[str, Any] = {"shape": sh.label, "test_re": sh.test_re, "inputs": "the test's own"}
        mine = captured[sh.label]
        fns = shared_launches(case.truth, mods, case.kernel, mine)
        row.update(alternated_cupti(fns, rounds))
        # the same launch on other buffers (a spacer allocated first moves them): how much where
        # the buffers sit moves the effect, which no one placement can tell
        moved = []
        for spacer_mb in (3, 17):
            spacer = torch.empty(spacer_mb << 20, dtype=torch.uint8, device="cuda")
            again = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in mine.items()}
            fns = shared_launches(case.truth, mods, case.kernel, again)
            moved.append(alternated_cupti(fns, rounds)["ratio"])
            del spacer, again
        row["other_placement_ratios"] = moved
        # the same launch on seeded random inputs, as earlier evaluations measured it: the record
        # of how much the values alone move the effect
        rnd = _inputs(case.truth, sh.args)
        fns = shared_launches(case.truth, mods, case.kernel, rnd)
        row["random_inputs_ratio"] = alternated_cupti(fns, rounds)["ratio"]
        rows.append(row)
        lo, hi = row["ratio_ci95"]
        print(
            f"  truth {case.name} {sh.label}: {(row['ratio'] - 1) * 100:+.2f}% "
            f"[{(lo - 1) * 100:+.2f}, {(hi - 1) * 100:+.2f}] on the test's inputs; "
            f"{(row['random_inputs_ratio'] - 1) * 100:+.2f}% on random ones",
            flush=True,
        )
        del fns, rnd, mine
        captured.pop(sh.label)
        torch.cuda.empty_cache()
    doc = {"shapes": rows, "seconds": time.monotonic() - t0, "pytest_exit": pytest_rc}
    out.write_text(json.dumps(doc, indent=1))


@contextlib.contextmanager
def base_worktree(repo: Path) -> Iterator[tuple[Path, Path]]:
    """(a scratch folder, a worktree of HEAD~1 inside it), both removed afterwards."""
    tmp = Path(tempfile.mkdtemp(prefix="kperf-truth-"))
    base_tree = tmp / "base"
    git(repo, "worktree", "add", "-q", "--detach", str(base_tree), "HEAD~1")
    try:
        yield tmp, base_tree
    finally:
        git(repo, "worktree", "remove", "--force", str(base_tree))
        shutil.rmtree(tmp, ignore_errors=True)


def append_log(log: Path, header: str, text: str, tail: int) -> None:
    """``$ header`` and the last ``tail`` lines of a subprocess's output, appended to ``log``."""
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"\n$ {header}\n" + "\n".join(text.splitlines()[-tail:]) + "\n")


def child_result(out: Path, rc: int | None, wall: float) -> dict[str, Any]:
    """What a truth child wrote (or the exit code when it wrote nothing), with its wall time."""
    data = json.loads(out.read_text()) if out.exists() else {"error": f"exit {rc}", "shapes": []}
    data["wall_s"] = wall
    return data


def measure_truth(case: Case, repo: Path, rounds: int, python: str, log: Path) -> dict[str, Any]:
    with base_worktree(repo) as (tmp, base_tree):
        out = tmp / "truth.json"
        cmd = [
            python,
            str(Path(__file__).resolve()),
            "--truth-child",
            case.name,
            "--repo",
            str(repo),
            "--base-tree",
            str(base_tree),
            "--rounds",
            str(rounds),
            "--child-out",
            str(out),
        ]
        rc, text, wall = run_cmd(cmd, repo, _env(repo, False, tmp / "triton-cache"), 540)
        append_log(log, f"truth for {case.name} (exit {rc}; {wall:.1f} s)", text, 40)
        return child_result(out, rc, wall)


# ---------------------------------------------------------------------------------------------
# steps (GPU)


def _short(kernel: str | None) -> str:
    return (kernel or "").rsplit("/", 1)[-1].rsplit("::", 1)[-1]


def _launches_captured(doc: dict) -> int:
    """Launches captured over both trees: a launch pair present in both counts 2, added/removed 1."""
    n = 0
    for t in doc.get("tests") or []:
        for lc in t.get("launches") or []:
            n += 1 if lc.get("status") in ("added", "removed") else 2
    return n


def run_case_step(case: Case, liger: Path, work: Path, out_dir: Path, rounds: int, python: str) -> dict:
    log = out_dir / f"{NAME}.{case.name}.log"
    log.write_text(f"{NAME}: case {case.name}: {case.what}\n")
    repo, diff = case_repo(case, liger, work / case.name)
    part: dict[str, Any] = {"case": case.name, "diff": diff}
    if case.truth:
        part["truth"] = measure_truth(case, repo, rounds, python, log)
    ab = kperf_ab(repo, case.tests, [], log, False, 600, python)
    part["ab"] = {k: ab[k] for k in ("exit_code", "wall_s", "command")}
    part["doc"] = _slim(ab["doc"])
    # the whole document too, as `kperf ab --json` wrote it: what a reviewer's report renders from
    # (docs/reviewer-walk reads the launch_option case's)
    (out_dir / f"{NAME}.{case.name}.ab.json").write_text(json.dumps(ab["doc"], indent=1) + "\n")
    return part


def _slim(doc: dict) -> dict:
    """What the evaluation reads of the A/B document (the full one can be large)."""
    keep = (
        "exit_code",
        "gpu_seconds",
        "wall_s",
        "counts",
        "messages",
        "timed",
        "static_regressions",
        "device",
        "stage_s",
        "kernels",
    )
    out = {k: doc.get(k) for k in keep}
    out["tests"] = [
        {k: t.get(k) for k in ("test", "status", "changes", "launches")} for t in doc.get("tests") or []
    ]
    out["launches_captured"] = _launches_captured(doc)
    return out


def run_aa_step(step: str, liger: Path, work: Path, out_dir: Path, python: str) -> dict:
    log = out_dir / f"{NAME}.{step}.log"
    log.write_text(f"{NAME}: A/A {step}\n")
    repo, diff = build_repo(liger, work / step, [], [AA_PLANT])
    ab = kperf_ab(repo, AA_RUNS[step], ["--time-all"], log, False, 600, python)
    return {
        "diff": diff,
        "ab": {k: ab[k] for k in ("exit_code", "wall_s", "command")},
        "doc": _slim(ab["doc"]),
    }


def run_plain_step(liger: Path, work: Path, out_dir: Path, python: str) -> dict:
    log = out_dir / f"{NAME}.plain.log"
    log.write_text(f"{NAME}: plain pytest in both trees of launch_option\n")
    repo, _ = case_repo(BY_NAME["launch_option"], liger, work / "plain")
    base = work / "plain-base"
    git(repo, "worktree", "add", "-q", "--detach", str(base), "HEAD~1")
    cache = Path(tempfile.mkdtemp(prefix="kperf-rr-plain-")) / "triton-cache"  # one cache, as kperf ab
    sides = {}
    for side, tree in (("base", base), ("head", repo)):
        cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *PLAIN_FILES]
        rc, out, wall = run_cmd(cmd, tree, _env(tree, False, cache), 600)
        sides[side] = {"exit_code": rc, "wall_s": wall, "summary": (out.strip().splitlines() or [""])[-1]}
        with open(log, "a", encoding="utf-8") as f:
            f.write(
                f"\n$ python -m pytest -q -p no:cacheprovider {' '.join(PLAIN_FILES)}  "
                f"({side} tree; exit {rc}; "
                f"{wall:.1f} s)\n" + "\n".join(out.splitlines()[-15:]) + "\n"
            )
    git(repo, "worktree", "remove", "--force", str(base))
    return {"sides": sides, "wall_s_plain_two_trees": sum(s["wall_s"] for s in sides.values())}


# ---------------------------------------------------------------------------------------------
# assembling the parts


def _kernel_rows(doc: dict, kernel: str) -> list[dict]:
    return [t for t in doc.get("timed") or [] if _short(t.get("kernel")) == kernel]


def _summary_verdict(rows: list[dict]) -> str:
    vs = {r.get("verdict") for r in rows}
    for v in ("slower", "faster", "unchanged", "inconclusive"):
        if v in vs:
            return v
    return "not timed"


def _match(case: Case, truth: dict, rows: list[dict]) -> list[dict]:
    """Truth per shape against kperf's timed rows of the case's kernel in the tests making it."""
    out = []
    for t in truth.get("shapes") or []:
        if "ratio" not in t:  # its test never called the op: no truth, listed by assemble
            continue
        mine = [r for r in rows if re.search(t["test_re"], r.get("test") or "")]
        for r in mine or [None]:
            out.append(
                {
                    "shape": t["shape"],
                    "truth_pct": (t["ratio"] - 1) * 100,
                    "truth_ci95_pct": [(x - 1) * 100 for x in t["ratio_ci95"]],
                    "base_ms": t["base_ms"],
                    # the same launch at two more buffer placements, and on seeded random inputs
                    "truth_other_placements_pct": [
                        (x - 1) * 100 for x in t.get("other_placement_ratios") or []
                    ],
                    "truth_random_inputs_pct": None
                    if t.get("random_inputs_ratio") is None
                    else (t["random_inputs_ratio"] - 1) * 100,
                    "truth_inputs": t.get("inputs", "seeded random"),
                    "test": None if r is None else r.get("test"),
                    "launch": None if r is None else r.get("launch"),
                    "verdict": "not timed" if r is None else r.get("verdict"),
                    "kperf_pct": None if r is None or r.get("ratio") is None else (r["ratio"] - 1) * 100,
                    "kperf_ci_pct": None
                    if r is None or r.get("ci_low") is None
                    else [(r["ci_low"] - 1) * 100, (r["ci_high"] - 1) * 100],
                    "pairs": None if r is None else r.get("pairs"),
                    "seconds": None if r is None else r.get("seconds"),
                    "row": None
                    if r is None
                    else {k: r.get(k) for k in ("ratio", "ci_low", "ci_high", "base_median_ms", "verdict")},
                }
            )
    return out


# The floor the measured runs used: kperf-ci at the measured commit gave replayed launches their
# own absolute floor, ab_replay_floor_ms = 0.1 us. The A/A below showed identical few-microsecond
# launches 0.1-0.35 us apart, so the shipped default is ab_floor_ms (0.5 us) for replay too; the
# floor table re-judges the measured intervals at other floors (kperf_ci.judge.stats.decide, the
# rule kperf applies), which the md labels as re-judged, not re-measured.
AS_RUN_FLOOR_US = 0.1
FLOORS_US = (0.1, 0.25, 0.4, 0.5, 1.0)


def rejudge(row: dict | None, floor_us: float) -> str:
    """The verdict kperf's rule gives a measured interval at another absolute floor. The band is
    max(ab_threshold, floor / base median), as compare_samples sets it (its median is that of the
    order-balanced blocks; the row keeps the raw base median, within a rounding of it)."""
    from kperf_ci.config import Settings
    from kperf_ci.judge.stats import decide

    if not row:
        return "not timed"
    vals = [row.get(k) for k in ("ratio", "ci_low", "ci_high", "base_median_ms")]
    if any(v is None for v in vals) or not vals[3]:
        return str(row.get("verdict"))
    band = max(Settings().ab_threshold, floor_us / 1000.0 / vals[3])
    return decide(vals[0], vals[1], vals[2], band)


def floor_table(
    cases: list[dict], case_rows: dict[str, list[dict]], launches: list[dict], aa_rows: list[dict]
) -> list[dict]:
    out = []
    for f in FLOORS_US:
        alarms = sum(rejudge(r, f) in ("slower", "faster") for r in aa_rows)
        verdicts = {
            c["name"]: _summary_verdict([{"verdict": rejudge(r, f)} for r in case_rows.get(c["name"], [])])
            for c in cases
            if case_rows.get(c["name"])
        }
        regs = [c for c in cases if c["expect"] == "slower" and (c["truth_pct"] or 0) >= 2]
        recall = {}
        for lim in (2, 5):
            due = [x for x in launches if x["truth_pct"] >= lim]
            recall[str(lim)] = (
                sum(rejudge(x.get("row"), f) == "slower" for x in due) / len(due) if due else None
            )
        out.append(
            {
                "floor_us": f,
                "as_run": f == AS_RUN_FLOOR_US,
                "aa_false_alarms": alarms,
                "aa_comparisons": len(aa_rows),
                "false_alarm_rate": alarms / len(aa_rows) if aa_rows else None,
                "regressions_slower": sum(verdicts.get(c["name"]) == "slower" for c in regs),
                "regressions": len(regs),
                "case_verdicts": verdicts,
                "recall_launches": recall,
            }
        )
    return out


def assemble(out_dir: Path) -> dict:
    parts = {}
    for step in STEPS:
        f = out_dir / f"{NAME}.part-{step}.json"
        parts[step] = json.loads(f.read_text()) if f.exists() else {}
    measured = [p for p in parts.values() if p.get("device")]
    cases, launches = [], []
    for c in CASES:
        p = parts[c.name]
        if not p:
            continue
        doc = p.get("doc") or {}
        rows = _kernel_rows(doc, c.kernel)
        truth = p.get("truth") or {}
        shapes = [s for s in truth.get("shapes") or [] if "ratio" in s]
        tp = [(s["ratio"] - 1) * 100 for s in shapes]
        matched = _match(c, truth, rows)
        launches += [{"case": c.name, **m} for m in matched]
        ratios = [r["ratio"] for r in rows if r.get("ratio") is not None]
        lows = [r["ci_low"] for r in rows if r.get("ci_low") is not None]
        highs = [r["ci_high"] for r in rows if r.get("ci_high") is not None]
        statuses: dict[str, int] = {}
        for t in doc.get("tests") or []:
            statuses[t.get("status")] = statuses.get(t.get("status"), 0) + 1
        cases.append(
            {
                "name": c.name,
                "kernel": c.kernel,
                "what": c.what,
                "expect": c.expect,
                # the launch shape the change moves most (signed), and the median over shapes
                "truth_pct": max(tp, key=abs) if tp else (0.0 if c.truth is None else None),
                "truth_median_pct": statistics.median(tp) if tp else None,
                "truth_missing": [s["shape"] for s in truth.get("shapes") or [] if "ratio" not in s],
                "truth_inputs": sorted({s.get("inputs", "seeded random") for s in shapes}),
                "verdict": _summary_verdict(rows)
                if rows
                else ("identical" if statuses.keys() <= {"identical"} and statuses else "not timed"),
                "verdicts": {
                    v: sum(1 for r in rows if r.get("verdict") == v)
                    for v in sorted({r.get("verdict") for r in rows})
                },
                "ratio": statistics.median(ratios) if ratios else None,
                "ci": [min(lows), max(highs)] if lows and highs else None,
                "gpu_s": doc.get("gpu_seconds"),
                "wall_s": (p.get("ab") or {}).get("wall_s"),
                "exit_code": (p.get("ab") or {}).get("exit_code"),
                "doc_exit_code": doc.get("exit_code"),
                "tests": statuses,
                "other_timed": [
                    {k: r.get(k) for k in ("kernel", "test", "verdict", "ratio")}
                    for r in doc.get("timed") or []
                    if _short(r.get("kernel")) != c.kernel
                ],
                "changes": sorted({ch for t in doc.get("tests") or [] for ch in t.get("changes") or []})[:12],
                "messages": (doc.get("messages") or [])[:10],
                "launches_captured": doc.get("launches_captured"),
                "truth_seconds": truth.get("seconds"),
                "truth_error": truth.get("error"),
                "command": (p.get("ab") or {}).get("command"),
                "diff": p.get("diff"),
            }
        )
    # recall over planted regressions (cases), by the truth of the launch they move most
    recall, missed = {}, []
    regs = [c for c in cases if c["expect"] == "slower" and c["truth_pct"] is not None]
    for lim in (2, 5):
        due = [c for c in regs if c["truth_pct"] >= lim]
        recall[str(lim)] = (sum(c["verdict"] == "slower" for c in due) / len(due)) if due else None
    recall_l = {}
    for lim in (2, 5):
        due = [x for x in launches if x["truth_pct"] >= lim]
        recall_l[str(lim)] = (sum(x["verdict"] == "slower" for x in due) / len(due)) if due else None
    for c in cases:
        t = c["truth_pct"]
        if c["expect"] == "slower" and t is not None and t >= 2 and c["verdict"] != "slower":
            missed.append(f"{c['name']}: truth {t:+.2f}% on its most-moved launch, kperf {c['verdict']}")
        if c["expect"] == "faster" and c["verdict"] != "faster":
            missed.append(f"{c['name']}: truth {_pct(t)}, kperf {c['verdict']} (expected faster)")
        if c["expect"] == "identical" and (c["verdict"] != "identical" or c["gpu_s"]):
            missed.append(
                f"{c['name']}: {c['verdict']}, {c['gpu_s']} GPU s (expected identical, no GPU time)"
            )
    for c in CASES:
        if not parts[c.name]:
            missed.append(f"{c.name}: not run (no part file; `--steps {c.name}` runs it)")
    for x in launches:
        if x["truth_pct"] >= 2 and x["verdict"] != "slower":
            lo = x["truth_ci95_pct"][0]
            missed.append(
                f"launch {x['case']} {x['shape']}: truth {x['truth_pct']:+.2f}% (95% CI low {lo:+.2f}%), "
                f"kperf {x['verdict']}" + ("" if x["test"] else " (no timed row of this kernel in its tests)")
            )
    errors = [abs(x["kperf_pct"] - x["truth_pct"]) for x in launches if x["kperf_pct"] is not None]
    aa_rows = [r for s in AA_RUNS for r in (parts[s].get("doc") or {}).get("timed") or []]
    alarms = [r for r in aa_rows if r.get("verdict") in ("slower", "faster")]
    # what the A/A says about an absolute floor: how far apart identical launches read (us)
    offsets = sorted(
        abs(r["head_median_ms"] - r["base_median_ms"]) * 1000
        for r in aa_rows
        if r.get("head_median_ms") is not None and r.get("base_median_ms") is not None
    )
    rel = sorted(abs(r["ratio"] - 1) * 100 for r in aa_rows if r.get("ratio") is not None)
    lo = parts["launch_option"]
    lo_doc = lo.get("doc") or {}
    plain = parts["plain"].get("wall_s_plain_two_trees")
    wall_ab = (lo.get("ab") or {}).get("wall_s")
    gpu_ab = lo_doc.get("gpu_seconds") or 0.0
    n_launch = lo_doc.get("launches_captured")
    n_tests = len(lo_doc.get("tests") or [])
    overhead = (wall_ab - plain - gpu_ab) / n_launch if None not in (wall_ab, plain) and n_launch else None
    return {
        "device": measured[0]["device"] if measured else None,
        "versions": measured[0].get("versions") if measured else None,
        "commit": measured[0].get("liger_commit") if measured else None,
        "kperf_commit": {s: parts[s].get("kperf_commit") for s in STEPS if parts[s]},
        "rounds": {s: parts[s].get("rounds") for s in BY_NAME if parts[s]},
        "cases": cases,
        "launches": launches,
        "false_alarm_rate": (len(alarms) / len(aa_rows)) if aa_rows else None,
        "aa_comparisons": len(aa_rows),
        "aa_verdicts": {
            v: sum(1 for r in aa_rows if r.get("verdict") == v)
            for v in sorted({r.get("verdict") for r in aa_rows})
        },
        "aa_alarms": [{k: r.get(k) for k in ("kernel", "test", "verdict", "ratio")} for r in alarms],
        "aa_offset_us": {
            "median": statistics.median(offsets) if offsets else None,
            "p95": offsets[int(0.95 * (len(offsets) - 1))] if offsets else None,
            "max": offsets[-1] if offsets else None,
        },
        "aa_abs_ratio_pct": {
            "median": statistics.median(rel) if rel else None,
            "p95": rel[int(0.95 * (len(rel) - 1))] if rel else None,
            "max": rel[-1] if rel else None,
        },
        "stage_s_ab": lo_doc.get("stage_s"),
        "as_run_floor_us": AS_RUN_FLOOR_US,
        "floor_table": floor_table(
            cases,
            {c.name: _kernel_rows(parts[c.name].get("doc") or {}, c.kernel) for c in CASES if parts[c.name]},
            launches,
            aa_rows,
        ),
        "aa_runs": {
            s: {
                **(parts[s].get("ab") or {}),
                "tests": len((parts[s].get("doc") or {}).get("tests") or []),
                "gpu_s": (parts[s].get("doc") or {}).get("gpu_seconds"),
            }
            for s in AA_RUNS
            if parts[s]
        },
        "recall": recall,
        "recall_launches": recall_l,
        "missed": missed,
        "effect_error_pct": statistics.fmean(errors) if errors else None,
        "effect_error_max_pct": max(errors) if errors else None,
        "effect_error_launches": len(errors),
        "wall_s_per_test": (wall_ab / n_tests) if wall_ab and n_tests else None,
        "overhead_s_per_launch": overhead,
        "launches_captured": n_launch,
        "wall_s_plain_two_trees": plain,
        "wall_s_plain": (parts["plain"].get("sides") or None),
        "wall_s_ab": wall_ab,
        "gpu_s_ab": gpu_ab if lo_doc else None,
        "plain_files": PLAIN_FILES,
    }


# ---------------------------------------------------------------------------------------------
# markdown


def _pct(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:+.{digits}f}%"


def _num(v: float | None, digits: int) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _secs(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f} s"


def _ratio_pct(r: float | None) -> str:
    return "-" if r is None else f"{(r - 1) * 100:+.2f}%"


def target_lines(r: dict) -> list[str]:
    def line(name: str, ok: bool | None, detail: str) -> str:
        return f"- {'not measured' if ok is None else 'PASS' if ok else 'MISS'}: {name} ({detail})"

    cs = r["cases"]
    regs = [c for c in cs if c["expect"] == "slower" and c["truth_pct"] is not None and c["truth_pct"] >= 2]
    fast = [c for c in cs if c["expect"] == "faster"]
    com = [c for c in cs if c["expect"] == "identical"]
    far, n_aa = r["false_alarm_rate"], r["aa_comparisons"]
    ov, plain, ab, gpu = (
        r["overhead_s_per_launch"],
        r["wall_s_plain_two_trees"],
        r["wall_s_ab"],
        r["gpu_s_ab"],
    )
    limit = None if plain is None or gpu is None else 1.5 * plain + gpu
    return [
        line(
            "every planted regression >= 2% called slower",
            all(c["verdict"] == "slower" for c in regs) if regs else None,
            f"{sum(c['verdict'] == 'slower' for c in regs)} of {len(regs)} cases whose most-moved launch is "
            f">= +2%; launches: {r['recall_launches']}",
        ),
        line(
            "every faster change called faster",
            all(c["verdict"] == "faster" for c in fast) if fast else None,
            ", ".join(f"{c['name']} {c['verdict']}" for c in fast) or "no case run",
        ),
        line(
            "comment-only change identical with no GPU time",
            all(c["verdict"] == "identical" and not c["gpu_s"] for c in com) if com else None,
            ", ".join(f"{c['name']}: {c['verdict']}, {c['gpu_s']} GPU s" for c in com) or "no case run",
        ),
        line(
            "false alarms <= 1% over at least 100 A/A comparisons",
            None if far is None else far <= 0.01 and n_aa >= 100,
            f"{'-' if far is None else f'{far:.1%}'} of {n_aa}",
        ),
        line(
            "overhead <= 0.5 s per captured launch",
            None if ov is None else ov <= 0.5,
            "-" if ov is None else f"{ov:.2f} s",
        ),
        line(
            "wall_s_ab <= 1.5 x wall_s_plain_two_trees + GPU seconds of timing",
            None if ab is None or limit is None else ab <= limit,
            f"{_secs(ab)} against {_secs(limit)} = 1.5 x {_secs(plain)} + {gpu or 0:.1f} s",
        ),
    ]


def floor_lines(r: dict) -> list[str]:
    """The absolute floor, re-judged: the measured intervals at other floors (no re-measurement)."""
    rows = r.get("floor_table") or []
    if not rows:
        return []
    out = [
        "## The absolute floor: the measured intervals re-judged at other floors",
        "",
        "Each timed launch's measured ratio and 99% interval judged again by kperf's own rule "
        "(`kperf_ci.judge.stats.decide`) with band = max(`ab_threshold`, floor / base median). "
        "Re-judged from the runs above, not re-measured: a run at another floor could also have "
        "stopped sampling at another point. The shipped default is `ab_floor_ms` = 0.5 us.",
        "",
        "| floor | A/A false alarms | planted regressions >= 2% called slower | case verdicts "
        "| launch recall >= 2% / >= 5% |",
        "|---|---|---|---|---|",
    ]

    def share(v: float | None, digits: int = 0) -> str:
        return "-" if v is None else f"{v:.{digits}%}"

    for x in rows:
        rl = x["recall_launches"]
        floor = f"{x['floor_us']} us" + (" (as run)" if x["as_run"] else "")
        alarms = f"{x['aa_false_alarms']} of {x['aa_comparisons']} ({share(x['false_alarm_rate'], 1)})"
        regs = f"{x['regressions_slower']} of {x['regressions']}"
        out.append(
            f"| {floor} | {alarms} | {regs} | {x['case_verdicts']} | {share(rl['2'])} / {share(rl['5'])} |"
        )
    return out


def _patch_lines(r: dict) -> list[str]:
    out = []
    for c in r["cases"]:
        body = [
            ln for ln in (c.get("diff") or "").splitlines() if ln[:1] in "+-" and ln[:3] not in ("+++", "---")
        ]
        out += [f"- {c['name']}:", "", "```diff", *body, "```", ""]
    out.append(
        "comment_only's truth is 0 by construction (the compiled kernel is the same); it is not timed."
    )
    return out


def render_md(r: dict) -> str:
    v = r["versions"] or {}
    L = [
        "# `kperf ab` on a real repository: Liger-Kernel with planted pull requests",
        "",
        f"Written by `benchmarks/{NAME}.py` from runs on {r['device']} (torch {v.get('torch')}, triton "
        f"{v.get('triton')}); Liger-Kernel {r['commit']}, unmodified except for each case's patch; kperf-ci "
        f"commit per step: {r['kperf_commit']}"
        + (
            f" (as recorded on the GPU machine, whose copy's .git was stale; the parts measured "
            f"{r['kperf_commit_given']}, given at render time with --measured-commit)."
            if r.get("kperf_commit_given")
            else "."
        ),
        "",
        "Each case is a two-commit git repository (base = Liger, head = Liger + the planted patch). "
        "**Truth**: the changed module loaded from both trees, the op's wrapper called once per side at each "
        "launch shape the tests make (shapes from the tests' parametrization) with the kernel's launch "
        "recorded, then the two launches re-made alternately call by call (ABAB/BABA) on shared inputs, "
        "the L2 flushed before each call, and timed by their CUPTI kernel durations "
        "(benchmarks/_cupti_truth.py, torch.profiler's public API, no kperf code) over "
        f"{sorted(set(r['rounds'].values())) or '-'} x 5 calls a side; "
        "the ratio is head median / base median, with a distribution-free 95% interval of the calls' "
        "head/base ratios. (Before issue 32 the truth was do_bench, which holds the launch overhead.) "
        "**kperf**: `kperf ab --base HEAD~1 --db .. --report-dir .. --json .. <tests> --kperf-all -p "
        "no:cacheprovider` in a fresh process, default settings, an empty Triton cache. A case's truth is "
        "the effect on the launch shape it moves most (signed); its verdict is kperf's strongest verdict "
        "over the timed launches of the changed kernel (slower > faster > unchanged > inconclusive); "
        "ratio = median of those launches' head/base, CI = the widest of their intervals.",
        "",
        "| case | change | kernel | truth (most-moved / median launch) | verdict (launches) "
        "| kperf ratio [CI] "
        "| GPU s | wall s | exit |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in r["cases"]:
        ci = c["ci"]
        kp = _ratio_pct(c["ratio"]) + ("" if not ci else f" [{_ratio_pct(ci[0])}, {_ratio_pct(ci[1])}]")
        L.append(
            f"| {c['name']} | {c['what']} | `{c['kernel']}` "
            f"| {_pct(c['truth_pct'])} / {_pct(c['truth_median_pct'])} "
            f"| {c['verdict']} {c['verdicts'] or ''} | {kp} "
            f"| {c['gpu_s'] if c['gpu_s'] is not None else '-'} "
            f"| {_secs(c['wall_s'])} | {c['exit_code']} |"
        )
    L += [
        "",
        "Test statuses per case (kperf's launch diff): "
        + "; ".join(f"{c['name']} {c['tests']}" for c in r["cases"])
        + ".",
        "",
    ]
    L += [
        "## Per launch: truth vs kperf",
        "",
        "| case | launch shape | truth [95% CI] | base ms | kperf verdict | kperf [CI] | pairs | test |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for x in r["launches"]:
        tci = x["truth_ci95_pct"]
        kci = x["kperf_ci_pct"]
        L.append(
            f"| {x['case']} | {x['shape']} | {_pct(x['truth_pct'])} [{_pct(tci[0])}, {_pct(tci[1])}] "
            f"| {x['base_ms']:.4f} | {x['verdict']} | {_pct(x['kperf_pct'])}"
            + ("" if not kci else f" [{_pct(kci[0])}, {_pct(kci[1])}]")
            + f" | {x['pairs'] if x['pairs'] is not None else '-'} | {(x['test'] or '-').split('::')[-1]} |"
        )
    others = [(c["name"], o) for c in r["cases"] for o in c["other_timed"]]
    if others:
        L += [
            "",
            "Other kernels timed in the case runs (not the planted kernel): "
            + "; ".join(
                f"{n}: {_short(o['kernel'])} {o['verdict']} {_ratio_pct(o['ratio'])}" for n, o in others[:20]
            )
            + ("" if len(others) <= 20 else f"; and {len(others) - 20} more")
            + ".",
        ]
    far = r["false_alarm_rate"]
    L += [
        "",
        "## Summary",
        "",
        f"- Recall (cases planted as regressions whose most-moved launch is at least +N% that kperf called "
        f"slower): {r['recall']}; per launch (launches whose truth is at least +N% called slower): "
        f"{r['recall_launches']}.",
        f"- Missed: {'; '.join(r['missed']) or 'none'}.",
        f"- Effect error: mean |kperf - truth| {_num(r['effect_error_pct'], 2)} points over "
        f"{r['effect_error_launches']} matched launches (max {_num(r['effect_error_max_pct'], 2)}); "
        "a launch is matched when kperf timed the changed kernel in a test that makes that shape.",
        f"- A/A (`--time-all`, head = base + a comment in `{AA_PLANT.path}`): {r['aa_comparisons']} timed "
        f"launch comparisons, verdicts {r['aa_verdicts']}; false-alarm rate "
        f"{'-' if far is None else f'{far:.2%}'}; runs {r['aa_runs']}.",
        f"- A/A spread (what an absolute floor must cover): |head - base| of the medians "
        f"{r.get('aa_offset_us')} us, |ratio - 1| {r.get('aa_abs_ratio_pct')} %; the replay floor "
        "(`ab_replay_floor_ms`) is 0.1 us.",
        f"- `kperf ab` stages on the launch_option case (wall seconds): {r.get('stage_s_ab')}.",
        f"- Cost, over {' '.join(r['plain_files'])} (the launch_option case): plain pytest in both trees "
        f"{_secs(r['wall_s_plain_two_trees'])} ({r['wall_s_plain']}); `kperf ab` {_secs(r['wall_s_ab'])} "
        f"with {r['gpu_s_ab']} GPU seconds of timing and {r['launches_captured']} captured launches; "
        f"{_num(r['wall_s_per_test'], 1)} s per test.",
        "- `overhead_s_per_launch` = (wall_s_ab - wall_s_plain_two_trees - GPU seconds of timing) / captured "
        "launches, where captured launches = the launches in kperf's launch diff over both trees (a launch "
        "present in both counts 2, one added or removed counts 1): "
        f"{_num(r['overhead_s_per_launch'], 3)} s.",
        "",
        "## The planted patches (head against base)",
        "",
        *_patch_lines(r),
        "",
        "## Targets (issue 22), with default settings",
        "",
        f"As run (replay floor {r['as_run_floor_us']} us, the default of the measured commit):",
        "",
        *target_lines(r),
        "",
        *floor_lines(r),
        "",
    ]
    return "\n".join(L) + "\n"


# ---------------------------------------------------------------------------------------------
# CPU dry run


def module_check(case: Case, repo: Path) -> str:
    """Both versions of the changed module import; for the autotune case, their config counts."""
    tmp = Path(tempfile.mkdtemp(prefix="kperf-rr-mod-"))
    base = tmp / "base"
    git(repo, "worktree", "add", "-q", "--detach", str(base), "HEAD~1")
    code = (
        "import importlib.util, sys\n"
        f"sys.path[:0] = [{str(repo / 'src')!r}, {str(repo)!r}]\n"
        "out = []\n"
        f"for side, p in (('base', {str(base / case.module)!r}), ('head', {str(repo / case.module)!r})):\n"
        "    spec = importlib.util.spec_from_file_location('m_' + side, p)\n"
        "    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        f"    k = getattr(m, {case.kernel!r})\n"
        "    cfgs = getattr(k, 'configs', None)\n"
        "    n = '' if cfgs is None else f' with {len(cfgs)} configs: '\n"
        "    n += '' if cfgs is None else ', '.join(sorted({str(c) for c in cfgs})[:3])\n"
        "    out.append(f'{side}: {type(k).__name__}' + n)\n"
        "print('; '.join(out))\n"
    )
    rc, out, _ = run_cmd([sys.executable, "-c", code], repo, _env(repo, True, tmp / "tc"), 120)
    git(repo, "worktree", "remove", "--force", str(base))
    shutil.rmtree(tmp, ignore_errors=True)
    return (out.strip().splitlines() or ["(no output)"])[-1] if rc == 0 else f"import failed: {out[-400:]}"


def _statuses(tests: list[dict]) -> dict[str, int]:
    return {s: sum(t.get("status") == s for t in tests) for s in sorted({t.get("status") for t in tests})}


def cpu_dry_run(liger: Path, work: Path, only: list[str], log: Path, python: str) -> int:
    log.write_text(
        f"{NAME} --mode cpu: planted cases built and checked with `kperf ab --base HEAD~1 --no-gpu` (static "
        "only, Triton interpreter) on small test selections. Not an evaluation: no timing.\n"
    )
    bad = 0
    for case in CASES:
        if only and case.name not in only:
            continue
        repo, diff = case_repo(case, liger, work / case.name)
        stat = git(repo, "diff", "--stat", "HEAD~1", "HEAD").strip().splitlines()[-1]
        mod = module_check(case, repo)
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"\n## {case.name}: {case.what}\n  patch applied: {stat}\n  module check: {mod}\n")
        if not case.cpu_tests:
            with open(log, "a", encoding="utf-8") as f:
                f.write(f"  kperf ab: {case.cpu_expect}\n")
            print(f"{case.name}: {mod}; kperf ab not run on CPU", flush=True)
            continue
        ab = kperf_ab(repo, case.cpu_tests, ["--no-gpu", "--no-fail"], log, True, 1800, python)
        doc = ab["doc"]
        tests = doc.get("tests") or []
        hit = [
            t
            for t in tests
            if any(
                _short(lc.get("name")) == case.kernel or case.kernel in (lc.get("site") or "")
                for lc in t.get("launches") or []
                if lc.get("status") != "identical"
            )
        ]
        seen = [
            t
            for t in tests
            if any(
                _short(lc.get("name")) == case.kernel or case.kernel in (lc.get("site") or "")
                for lc in t.get("launches") or []
            )
        ]
        status = "changed" if hit else ("identical" if seen else "kernel not captured")
        ok = case.cpu_expect.startswith(status)
        bad += not ok
        msg = (
            f"  result: {case.kernel} {status} in {len(hit) or len(seen)} of {len(tests)} tests "
            f"(expected {case.cpu_expect}) -> {'OK' if ok else 'UNEXPECTED'}; exit {ab['exit_code']}, "
            f"{ab['wall_s']:.0f} s; test statuses "
            f"{_statuses(tests)}\n"
        )
        for t in hit[:3]:
            msg += f"    {t.get('test')}: {'; '.join(t.get('changes') or [])[:300]}\n"
        with open(log, "a", encoding="utf-8") as f:
            f.write(msg)
        print(f"{case.name}: {msg.strip()}", flush=True)
    return 1 if bad else 0


# ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    from suites_eval import LIGER_URL

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--liger-src", default=LIGER_URL, help="git URL, local clone/mirror, or an --export directory"
    )
    ap.add_argument(
        "--steps", default=",".join(STEPS), help=f"comma list of steps ({', '.join(STEPS)}); '' renders"
    )
    ap.add_argument("--out", default=str(RESULTS), help="directory of the part files, logs, json and md")
    ap.add_argument("--rounds", type=int, default=12, help="interleaved base/head rounds of the truth")
    ap.add_argument("--workdir", default=None, help="where the case repositories go (default: a temp dir)")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--mode", choices=("gpu", "cpu"), default="gpu", help="cpu: the static dry run here")
    ap.add_argument("--cases", default="", help="--mode cpu: only these cases (comma list)")
    ap.add_argument("--export", metavar="DIR", help="only write the pinned Liger files the steps need to DIR")
    ap.add_argument("--no-render", action="store_true")
    ap.add_argument(
        "--measured-commit",
        help="rendering: the kperf-ci commit the parts measured, when their own record is a stale .git",
    )
    ap.add_argument("--truth-child", help=argparse.SUPPRESS)
    ap.add_argument("--repo", help=argparse.SUPPRESS)
    ap.add_argument("--base-tree", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.truth_child:
        truth_child(a.truth_child, Path(a.repo), Path(a.base_tree), a.rounds, Path(a.child_out))
        return 0
    out_dir = Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(a.workdir or tempfile.mkdtemp(prefix="kperf-rr-"))
    work.mkdir(parents=True, exist_ok=True)
    if a.export:
        liger, commit = liger_checkout(a.liger_src, work)
        dest = Path(a.export)
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(liger, dest)
        (dest / "LIGER_COMMIT").write_text(commit + "\n")
        size = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
        print(f"{NAME}: Liger-Kernel {commit} ({len(EXPORT)} paths, {size / 1e6:.1f} MB) written to {dest}")
        return 0
    if a.mode == "cpu":
        liger, commit = liger_checkout(a.liger_src, work)
        only = [c for c in a.cases.split(",") if c]
        return cpu_dry_run(liger, work, only, out_dir / f"{NAME}.cpu-dryrun.log", a.python)
    steps = [s for s in a.steps.split(",") if s]
    unknown = [s for s in steps if s not in STEPS]
    if unknown:
        print(f"{NAME}: unknown step(s) {unknown} (steps: {', '.join(STEPS)})", file=sys.stderr)
        return 2
    if a.rounds < 10:  # ABAB.../BABA... pairs: fewer leave the truth's interval too wide to read
        print(f"{NAME}: --rounds must be at least 10", file=sys.stderr)
        return 2
    if steps:
        import torch

        if not torch.cuda.is_available():
            print(
                f"{NAME}: the steps need a CUDA GPU (--steps '' renders; --mode cpu is the dry run)",
                file=sys.stderr,
            )
            return 2
        liger, commit = liger_checkout(a.liger_src, work)
        for step in steps:
            t0 = time.monotonic()
            print(f"{NAME}: step {step} ...", flush=True)
            if step in BY_NAME:
                part = run_case_step(BY_NAME[step], liger, work, out_dir, a.rounds, a.python)
                part["rounds"] = a.rounds
            elif step in AA_RUNS:
                part = run_aa_step(step, liger, work, out_dir, a.python)
            else:
                part = run_plain_step(liger, work, out_dir, a.python)
            part.update(
                {
                    "step": step,
                    "step_wall_s": time.monotonic() - t0,
                    "kperf_commit": kperf_commit(),
                    "liger_commit": commit,
                    "device": torch.cuda.get_device_name(),
                    "versions": {"torch": torch.__version__, "triton": __import__("triton").__version__},
                }
            )
            (out_dir / f"{NAME}.part-{step}.json").write_text(json.dumps(part, indent=1, default=str) + "\n")
            print(f"{NAME}: step {step} done in {part['step_wall_s']:.0f} s", flush=True)
    if not a.no_render:
        result = assemble(out_dir)
        if a.measured_commit:
            # the parts' own record is the device copy's .git, which can be stale (KPERF_EVAL_COMMIT
            # unset there): the commit the renderer was told the parts measured is kept beside it
            result["kperf_commit_given"] = a.measured_commit
        (out_dir / f"{NAME}.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
        (out_dir / f"{NAME}.md").write_text(render_md(result))
        print(render_md(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
