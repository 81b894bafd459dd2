"""The PR check as users run it: `kperf ab --base HEAD~1` on git repositories with planted changes.

Writes benchmarks/results/pr_check_eval.{json,md} (every number and sentence of the .md comes from
this script).  Needs a CUDA GPU; run from the repository root:

    python benchmarks/pr_check_eval.py [--out benchmarks/results] [--aa-runs 2]

What it does, each step a fresh `kperf ab` process with default settings unless said otherwise:
1. builds a repository whose base commit holds a few self-contained kernels and one test per
   planted case (each test calls `kperf.bench(case_fn, ...)`; the plant lives in `case_fn`'s
   module, so the base revision has its own version) and whose head commit plants every case:
   extra traffic of about 1%, 2% and 8%, an epilogue-only change, arithmetic-only, num_stages
   3 -> 1, a spilling tile, a grid-only change (one more CTA than SMs), a launch-option change, a
   constexpr change, a faster change, a kernel added, one removed, a comment-only change;
2. `kperf ab --base HEAD~1 --json` (defaults) -> the verdicts;
3. the same with a tighter interval and a larger budget (KPERF_AB_PRECISION=0.001,
   KPERF_TIMING_BUDGET_S=6) -> the reference effect of each case ("truth");
4. A/A: `kperf ab --base HEAD~1 --time-all -k aa` on 50 unchanged tests, --aa-runs times;
5. the bundled examples as a repository (head: a comment in one kernel): `kperf ab` wall time with
   defaults, then `--time-all` (every example timed A/B against itself: more A/A comparisons).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import kperf_commit  # noqa: E402 - the one reader of the measured commit

KERNELS = """
import torch
import triton
import triton.language as tl


@triton.jit
def stream_kernel(x_ptr, y_ptr, z_ptr, out_ptr, n, n_extra, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    acc = tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m)
    acc += tl.load(z_ptr + offs, mask=offs < n_extra, other=0.0)
    tl.store(out_ptr + offs, acc, mask=m)


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2.0, mask=m)


@triton.jit
def arith_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2.0, mask=m)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                  EPILOGUE: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(a, b)
    if EPILOGUE:
        acc = acc * 1.0001 + tl.sqrt(tl.abs(acc)) * 0.001 + tl.exp(acc * 0.0001) * 0.001
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.float16))


@triton.jit
def busy_kernel(out_ptr, ITERS: tl.constexpr, BLOCK: tl.constexpr):
    # fixed work per CTA: the launch time is set by the number of waves
    x = tl.arange(0, BLOCK).to(tl.float32) * 1e-3
    for _ in range(ITERS):
        x = x * 0.999 + 0.001
    tl.store(out_ptr + tl.program_id(0) * BLOCK + tl.arange(0, BLOCK), x)


N = 1 << 26


def stream(x, y, z, out, extra, block=1024, num_warps=4):
    stream_kernel[(triton.cdiv(N, block),)](x, y, z, out, N, extra, BLOCK=block, num_warps=num_warps)
    return out


def matmul(a, b, c, bm=128, bn=128, bk=64, num_warps=8, num_stages=3, epilogue=False):
    M, K = a.shape
    N_ = b.shape[1]
    matmul_kernel[(M // bm, N_ // bn)](a, b, c, M, N_, K, BM=bm, BN=bn, BK=bk, EPILOGUE=epilogue,
                                       num_warps=num_warps, num_stages=num_stages)
    return c


def busy(out, ctas):
    # 1024 threads per CTA: at most 2 CTAs per SM, so 2 x SMs is a full wave and one more CTA
    # is a tail wave
    busy_kernel[(ctas,)](out, ITERS=20000, BLOCK=1024, num_warps=32)
    return out


# ---- one callable per case: the head commit edits these lines ----
def case_comment(x, y, z, out):
    return stream(x, y, z, out, 0)


def case_traffic_1(x, y, z, out):
    return stream(x, y, z, out, 0)


def case_traffic_2(x, y, z, out):
    return stream(x, y, z, out, 0)


def case_traffic_8(x, y, z, out):
    return stream(x, y, z, out, 0)


def case_faster(x, y, z, out):
    return stream(x, y, z, out, int(0.24 * N))


def case_options(x, y, z, out):
    return stream(x, y, z, out, 0, num_warps=4)


def case_constexpr(x, y, z, out):
    return stream(x, y, z, out, 0, block=1024)


def case_arithmetic(x, y, z, out):
    arith_kernel[(triton.cdiv(N, 1024),)](x, out, N, BLOCK=1024)
    return out


def case_kernel_added(x, y, z, out):
    return stream(x, y, z, out, 0)


def case_kernel_removed(x, y, z, out):
    stream(x, y, z, out, 0)
    scale_kernel[(triton.cdiv(N, 1024),)](out, z, N, BLOCK=1024)
    return out


def case_epilogue(a, b, c):
    return matmul(a, b, c)


def case_num_stages(a, b, c):
    return matmul(a, b, c)


def case_spills(a, b, c):
    return matmul(a, b, c)


def case_grid(out):
    return busy(out, 2 * SMS)


SMS = torch.cuda.get_device_properties(0).multi_processor_count if torch.cuda.is_available() else 132
"""

PLANTS = {  # case -> (base line, head line) in kernels.py, and the class it stands for
    "comment": None,
    "traffic_1": ("    return stream(x, y, z, out, 0)", "    return stream(x, y, z, out, int(0.03 * N))"),
    "traffic_2": ("    return stream(x, y, z, out, 0)", "    return stream(x, y, z, out, int(0.06 * N))"),
    "traffic_8": ("    return stream(x, y, z, out, 0)", "    return stream(x, y, z, out, int(0.24 * N))"),
    "faster": ("    return stream(x, y, z, out, int(0.24 * N))", "    return stream(x, y, z, out, 0)"),
    "options": ("stream(x, y, z, out, 0, num_warps=4)", "stream(x, y, z, out, 0, num_warps=8)"),
    "constexpr": ("stream(x, y, z, out, 0, block=1024)", "stream(x, y, z, out, 0, block=256)"),
    "arithmetic": None,  # arith_kernel gains arithmetic, see planted_repo (memory-bound: truth ~0)
    "kernel_added": (
        "    return stream(x, y, z, out, 0)",
        "    stream(x, y, z, out, 0)\n    scale_kernel[(triton.cdiv(N, 1024),)](out, z, N, BLOCK=1024)\n"
        "    return out",
    ),
    "kernel_removed": (
        "    stream(x, y, z, out, 0)\n    scale_kernel[(triton.cdiv(N, 1024),)](out, z, N, BLOCK=1024)\n"
        "    return out",
        "    return stream(x, y, z, out, 0)",
    ),
    "epilogue": ("    return matmul(a, b, c)", "    return matmul(a, b, c, epilogue=True)"),
    "num_stages": ("    return matmul(a, b, c)", "    return matmul(a, b, c, num_stages=1)"),
    "spills": ("    return matmul(a, b, c)", "    return matmul(a, b, c, bm=256, bn=256, num_warps=4)"),
    "grid": ("    return busy(out, 2 * SMS)", "    return busy(out, 2 * SMS + 1)"),
}

STREAM_CASES = [c for c in PLANTS if c not in ("epilogue", "num_stages", "spills", "grid")]
MATMUL_CASES = ["epilogue", "num_stages", "spills"]

TESTS = """
import pytest
import torch

import kernels as k


@pytest.fixture(scope="module")
def stream_args():
    g = torch.Generator(device="cuda").manual_seed(0)
    x, y, z = (torch.rand(k.N, device="cuda", generator=g) for _ in range(3))
    return x, y, z, torch.empty_like(x)


@pytest.fixture(scope="module")
def mm_args():
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    return a, b, torch.empty(4096, 4096, device="cuda", dtype=torch.float16)


@pytest.mark.parametrize("case", {stream})
def test_plant_stream(kperf, stream_args, case):
    kperf.bench(getattr(k, "case_" + case), *stream_args)


@pytest.mark.parametrize("case", {matmul})
def test_plant_matmul(kperf, mm_args, case):
    kperf.bench(getattr(k, "case_" + case), *mm_args)


def test_plant_grid(kperf):
    kperf.bench(k.case_grid, torch.empty((2 * k.SMS + 1) * 1024, device="cuda"))
"""

AA_TESTS = """
import pytest
import torch

import kernels as k

SIZES = [1 << p for p in range(16, 27)] + [(1 << p) - 3 for p in range(16, 27)]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("kind", ["stream", "scale"])
def test_aa(kperf, n, kind):
    x = torch.rand(n, device="cuda")
    out = torch.empty_like(x)
    if kind == "stream":
        kperf.bench(k.aa_stream, x, x, x, out, n)
    else:
        kperf.bench(k.aa_scale, x, out, n)


@pytest.mark.parametrize("m", [1024, 2048, 4096])
def test_aa_matmul(kperf, m):
    a = torch.randn(m, m, device="cuda", dtype=torch.float16)
    b = torch.randn(m, m, device="cuda", dtype=torch.float16)
    kperf.bench(k.matmul, a, b, torch.empty(m, m, device="cuda", dtype=torch.float16))
"""

AA_FNS = """

def aa_stream(x, y, z, out, n):
    stream_kernel[(triton.cdiv(n, 1024),)](x, y, z, out, n, 0, BLOCK=1024)
    return out


def aa_scale(x, out, n):
    scale_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out
"""


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def commit_all(repo: Path, msg: str) -> None:
    git(repo, "add", "-A")
    git(repo, "-c", "user.email=eval@kperf", "-c", "user.name=eval", "commit", "-qm", msg)


def planted_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q")
    base = KERNELS + AA_FNS
    (path / "kernels.py").write_text(base)
    (path / "test_plants.py").write_text(
        TESTS.replace("{stream}", repr(STREAM_CASES)).replace("{matmul}", repr(MATMUL_CASES))
    )
    (path / "test_aa.py").write_text(AA_TESTS)
    commit_all(path, "base")
    head = base
    for case, plant in PLANTS.items():
        if plant is None:
            continue
        old, new = plant
        start = head.index(f"def case_{case}(")
        end = head.index("\n\n\n", start)
        body = head[start:end]
        assert old in body, (case, old)
        head = head[:start] + body.replace(old, new, 1) + head[end:]
    # arithmetic only: arith_kernel is memory-bound, more math should cost nothing
    body = "tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2.0, mask=m)"
    i = head.index("def arith_kernel(")
    head = head[:i] + head[i:].replace(
        body,
        "v = tl.load(x_ptr + offs, mask=m)\n"
        "    tl.store(out_ptr + offs, v * 2.0 + tl.sqrt(tl.abs(v)) * 1e-4, mask=m)",
        1,
    )
    # comment only: a comment in stream_kernel
    head = head.replace(
        "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n    m = offs < n\n    acc",
        "    # one block per program\n    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
        "    m = offs < n  # the tail\n    acc",
        1,
    )
    (path / "kernels.py").write_text(head)
    commit_all(path, "head: every plant")
    return path


def examples_repo(path: Path) -> Path:
    shutil.copytree(
        ROOT / "examples", path, ignore=shutil.ignore_patterns("__pycache__", "regressions", "*.md")
    )
    git(path, "init", "-q")
    commit_all(path, "base: the bundled examples")
    f = path / "kernels" / "vector_add.py"
    f.write_text("# a comment-only change\n" + f.read_text())
    commit_all(path, "head: a comment")
    return path


def kperf_ab(repo: Path, *args: str, env: dict[str, str] | None = None, log: Path | None = None) -> dict:
    out = repo / f"ab-{time.monotonic_ns()}.json"
    t0 = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "kperf_ci", "ab", "--base", "HEAD~1", "--json", str(out), *args],
        cwd=repo,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    wall = time.monotonic() - t0
    if log is not None:
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"\n$ kperf ab --base HEAD~1 {' '.join(args)}  (exit {p.returncode}, {wall:.1f} s)\n")
            f.write(p.stdout[-20000:] + p.stderr[-5000:])
    doc = json.loads(out.read_text()) if out.exists() else {}
    return {"exit_code": p.returncode, "wall_s": wall, "doc": doc, "stderr": p.stderr[-2000:]}


def case_of(test: str) -> str:
    if "[" in test:
        return test.split("[", 1)[1].rstrip("]")
    return test.rsplit("::test_plant_", 1)[-1]


def rows_by_case(doc: dict) -> dict[str, dict]:
    out = {}
    for t in doc.get("tests", []):
        if "test_plants.py" not in t["test"]:
            continue
        timed = t.get("timed") or []
        tm = timed[0] if timed else {}
        out[case_of(t["test"])] = {
            "status": t["status"],
            "changes": t.get("changes", []),
            "verdict": tm.get("verdict", "identical" if t["status"] == "identical" else "not timed"),
            "ratio": tm.get("ratio"),
            "ci": [tm.get("ci_low"), tm.get("ci_high")] if tm else None,
            "gpu_s": float(tm.get("seconds") or 0.0),
            "regions_moved": tm.get("regions_moved", []),
        }
    return out


STEPS = ("planted", "reference", "aa", "examples", "examples_aa")


def run_step(step: str, out_dir: Path, aa_runs: int) -> dict:
    """One step in fresh repositories; its part of the results (written as part-<step>.json)."""
    log = out_dir / f"pr_check_eval.{step}.log"
    log.write_text("")
    tmp = Path(tempfile.mkdtemp(prefix="kperf-prcheck-"))
    if step == "examples":
        d = kperf_ab(examples_repo(tmp / "examples"), log=log)
        return {
            "wall_s_examples": d["wall_s"],
            "examples_default_exit": d["exit_code"],
            "examples_default_gpu_s": sum(float(t.get("seconds") or 0) for t in d["doc"].get("timed", [])),
            "examples_default_counts": d["doc"].get("counts"),
        }
    if step == "examples_aa":
        a = kperf_ab(examples_repo(tmp / "examples"), "--time-all", "--no-fail", log=log)
        return {"wall_s_examples_time_all": a["wall_s"], "aa": list(a["doc"].get("timed", []))}
    repo = planted_repo(tmp / "planted")
    if step == "planted":
        d = kperf_ab(repo, log=log)
        return {"cases": rows_by_case(d["doc"]), "exit_code": d["exit_code"], "wall_s": d["wall_s"]}
    if step == "reference":
        env = {"KPERF_AB_PRECISION": "0.001", "KPERF_TIMING_BUDGET_S": "4"}
        d = kperf_ab(repo, "--no-fail", "-k", "plant", env=env, log=log)
        return {"cases": rows_by_case(d["doc"]), "env": env}
    aa = []
    for _ in range(aa_runs):
        d = kperf_ab(repo, "--time-all", "--no-fail", "-k", "aa", log=log)
        aa += [t for t in d["doc"].get("timed", []) if "test_aa.py" in t["test"]]
    return {"aa": aa}


def assemble(out_dir: Path) -> dict:

    parts = {}
    for step in STEPS:
        f = out_dir / f"pr_check_eval.part-{step}.json"
        parts[step] = json.loads(f.read_text()) if f.exists() else {}
    planted = parts["planted"].get("cases", {})
    ref = parts["reference"].get("cases", {})
    case_rows = []
    for name in PLANTS:
        row = planted.get(
            name, {"status": "missing", "verdict": "missing", "ratio": None, "ci": None, "gpu_s": 0.0}
        )
        r = ref.get(name, {})
        truth = None if r.get("ratio") is None else (r["ratio"] - 1) * 100
        case_rows.append(
            {
                "name": name,
                "truth_pct": truth,
                "truth_ci": r.get("ci"),
                "verdict": row["verdict"],
                "status": row["status"],
                "ratio": row["ratio"],
                "ci": row["ci"],
                "gpu_s": row["gpu_s"],
                "exit_code": parts["planted"].get("exit_code"),
                "changes": row.get("changes", []),
                "regions_moved": row.get("regions_moved", []),
            }
        )
    recall, missed = {}, []
    for lim in (1, 2, 5):
        due = [c for c in case_rows if c["truth_pct"] is not None and c["truth_pct"] >= lim]
        recall[str(lim)] = (sum(1 for c in due if c["verdict"] == "slower") / len(due)) if due else None
    for c in case_rows:
        t = c["truth_pct"]
        if t is not None and (
            (t >= 1 and c["verdict"] != "slower") or (t <= -1 and c["verdict"] != "faster")
        ):
            missed.append(c["name"])
        if c["name"] == "comment" and (c["status"] != "identical" or c["gpu_s"]):
            missed.append("comment (GPU time spent)")
    errors = [
        abs((c["ratio"] - 1) * 100 - c["truth_pct"])
        for c in case_rows
        if c["ratio"] is not None and c["truth_pct"] is not None
    ]
    aa = parts["aa"].get("aa", []) + parts["examples_aa"].get("aa", [])
    alarms = [t for t in aa if t["verdict"] in ("slower", "faster")]
    ex = {**parts["examples"], **parts["examples_aa"]}
    measured = [p for p in parts.values() if p.get("device")]
    return {
        # where the parts were measured (rendering may happen on another machine)
        "device": measured[0]["device"] if measured else None,
        "versions": measured[0].get("versions") if measured else None,
        "hand_edits": {s: parts[s]["hand_edits"] for s in STEPS if parts[s].get("hand_edits")},
        "cases": case_rows,
        "false_alarm_rate": (len(alarms) / len(aa)) if aa else None,
        "aa_comparisons": len(aa),
        "aa_verdicts": {
            v: sum(1 for t in aa if t["verdict"] == v) for v in sorted({t["verdict"] for t in aa})
        },
        "aa_alarms": [{"test": t["test"], "verdict": t["verdict"], "ratio": t["ratio"]} for t in alarms],
        "recall": recall,
        "missed": missed,
        "effect_error_pct": max(errors) if errors else None,
        "effect_error_median_pct": sorted(errors)[len(errors) // 2] if errors else None,
        "wall_s_planted": parts["planted"].get("wall_s"),
        "default_exit_code": parts["planted"].get("exit_code"),
        "wall_s_examples": ex.get("wall_s_examples"),
        "examples_default_exit": ex.get("examples_default_exit"),
        "examples_default_gpu_s": ex.get("examples_default_gpu_s"),
        "examples_default_counts": ex.get("examples_default_counts"),
        "wall_s_examples_time_all": ex.get("wall_s_examples_time_all"),
        "reference_env": parts["reference"].get("env"),
        "kperf_commit": {step: parts[step].get("kperf_commit") for step in STEPS},
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--aa-runs", type=int, default=2)
    ap.add_argument(
        "--steps", default=",".join(STEPS), help="comma list of steps to run now (each writes its part file)"
    )
    ap.add_argument("--no-render", action="store_true", help="only write the part files")
    a = ap.parse_args()
    import torch

    out_dir = Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    for step in filter(None, a.steps.split(",")):
        if step not in STEPS:
            print(f"pr_check_eval: unknown step {step!r} (steps: {', '.join(STEPS)})", file=sys.stderr)
            return 2
        if not torch.cuda.is_available():
            print(
                "pr_check_eval: needs a CUDA GPU (rendering the parts does not: --steps '')", file=sys.stderr
            )
            return 2
        part = {
            **run_step(step, out_dir, a.aa_runs),
            "kperf_commit": kperf_commit(),
            "device": torch.cuda.get_device_name(),
            "versions": {"torch": torch.__version__, "triton": __import__("triton").__version__},
        }
        (out_dir / f"pr_check_eval.part-{step}.json").write_text(json.dumps(part, indent=2, default=str))
    if not a.no_render:
        result = assemble(out_dir)
        (out_dir / "pr_check_eval.json").write_text(json.dumps(result, indent=2, default=str))
        (out_dir / "pr_check_eval.md").write_text(render_md(result))
        print(render_md(result))
    return 0


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.2f}%"


def target_lines(r: dict) -> list[str]:
    def line(name: str, ok: bool | None, detail: str) -> str:
        return f"- {name}: {'not measured' if ok is None else 'met' if ok else 'MISSED'} ({detail})"

    cases = {c["name"]: c for c in r["cases"]}
    slower_due = [c for c in r["cases"] if c["truth_pct"] is not None and c["truth_pct"] >= 1]
    faster_due = [c for c in r["cases"] if c["truth_pct"] is not None and c["truth_pct"] <= -1]
    small = [
        abs((c["ratio"] - 1) * 100 - c["truth_pct"])
        for c in r["cases"]
        if c["ratio"] is not None and c["truth_pct"] is not None and abs(c["truth_pct"]) < 10
    ]
    far, n_aa = r["false_alarm_rate"], r["aa_comparisons"]
    comment = cases.get("comment", {})
    ex = r["wall_s_examples"]
    return [
        line(
            "every regression >= 1% slower",
            all(c["verdict"] == "slower" for c in slower_due) if slower_due else None,
            f"{sum(c['verdict'] == 'slower' for c in slower_due)} of {len(slower_due)}",
        ),
        line(
            "every faster change faster",
            all(c["verdict"] == "faster" for c in faster_due) if faster_due else None,
            f"{sum(c['verdict'] == 'faster' for c in faster_due)} of {len(faster_due)}",
        ),
        line(
            "comment-only changes spend no GPU time",
            None if not comment else comment.get("status") == "identical" and not comment.get("gpu_s"),
            f"status {comment.get('status')}, {comment.get('gpu_s')} GPU s; "
            f"examples {r['examples_default_gpu_s']} GPU s",
        ),
        line(
            "false alarms <= 1% over at least 100 A/A comparisons",
            None if far is None else far <= 0.01 and n_aa >= 100,
            f"{'-' if far is None else f'{far:.1%}'} of {n_aa} comparisons",
        ),
        line(
            "effect error <= 0.3 pt",
            None if r["effect_error_pct"] is None else r["effect_error_pct"] <= 0.3,
            f"max {_pct(r['effect_error_pct'])} over all cases; max {_pct(max(small) if small else None)} "
            f"over cases whose truth is under 10%",
        ),
        line("`kperf ab` over the examples <= 3 min", None if ex is None else ex <= 180, _secs(ex)),
    ]


def _secs(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f} s"


def render_md(r: dict) -> str:
    lines = [
        "# PR check evaluation: `kperf ab --base HEAD~1` on planted changes",
        "",
        f"Written by `benchmarks/pr_check_eval.py` from runs on {r['device']} "
        f"(torch {(r['versions'] or {}).get('torch')}, triton {(r['versions'] or {}).get('triton')}); "
        "each step's commit and any hand edits are listed at the end.",
        f"Truth = the same command with {r['reference_env']} (a 0.1% interval target, a longer budget).",
        "",
        "| case | truth | verdict | measured [99% CI] | GPU s | what changed |",
        "|---|---|---|---|---|---|",
    ]
    for c in r["cases"]:
        ci = c["ci"] or [None, None]
        measured = "-" if c["ratio"] is None else f"{(c['ratio'] - 1) * 100:+.2f}%"
        if ci[0] is not None:
            measured += f" [{(ci[0] - 1) * 100:+.2f}, {(ci[1] - 1) * 100:+.2f}]"
        what = "; ".join(c["changes"] + c["regions_moved"])[:160]
        lines.append(
            f"| {c['name']} | {_pct(c['truth_pct'])} | {c['verdict']} | {measured} "
            f"| {c['gpu_s']:.2f} | {what} |"
        )
    rec = ", ".join(f">= {k}%: {'-' if v is None else f'{v:.0%}'}" for k, v in r["recall"].items())
    far = r["false_alarm_rate"]
    lines += [
        "",
        f"- Recall (slower verdicts among cases whose truth is at least): {rec}.",
        f"- Missed (truth >= 1% not slower, or <= -1% not faster): {', '.join(r['missed']) or 'none'}.",
        f"- A/A: {r['aa_comparisons']} comparisons of unchanged code, verdicts {r['aa_verdicts']}; "
        f"false-alarm rate {'-' if far is None else f'{far:.1%}'}.",
        f"- Effect error against the truth: max {_pct(r['effect_error_pct'])} points, "
        f"median {_pct(r['effect_error_median_pct'])}.",
        f"- Wall time of `kperf ab` over the bundled examples (a comment-only change, defaults): "
        f"{_secs(r['wall_s_examples'])}, exit {r['examples_default_exit']}, GPU seconds spent timing "
        f"{r['examples_default_gpu_s']}; with `--time-all` (every example timed against itself): "
        f"{_secs(r['wall_s_examples_time_all'])}.",
        f"- The planted repository's default run exited {r['default_exit_code']} "
        f"and took {_secs(r['wall_s_planted'])}.",
        "",
        f"- kperf-ci commit each step measured: {r['kperf_commit']}.",
        f"- Hand edits of the part files: {r['hand_edits'] or 'none'}.",
        "",
        "Targets (issue 13), as measured here:",
        "",
        *target_lines(r),
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
