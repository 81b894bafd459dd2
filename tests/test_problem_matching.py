"""Issue 23, finding 7: a GPU's first run against the committed static baseline is no false red.

On an H100, `kperf run examples --kperf-mode gpu` against the static baseline exited 1: the GPU
run's softmax of a GPU-size problem (BLOCK_SIZE 4096, num_warps 16) was rematched with the
baseline's interpreter-size one (BLOCK_SIZE 256), "sass.instructions 108 -> 194 (+79.6%)", next
to "no comparable baseline for this machine class". Reproduced on CPU with two databases: the
committed H100 run against the committed baseline, and a minimal pair made with the store API.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import without

from kperf_ci import store
from kperf_ci.judge.matching import match_variants, same_problem
from kperf_ci.model import Fingerprint, Metric, RunInfo, VariantKey, VariantResult

REPO = Path(__file__).parent.parent
KPERF = [sys.executable, "-m", "kperf_ci.cli"]
H100 = "NVIDIA H100 80GB HBM3"
SPEC = "output_ptr:*{t}:D, input_ptr:*{t}:D, n_cols:i32:D, BLOCK_SIZE={b}"
SITE = "examples/kernels/softmax.py::softmax_kernel"


def kperf(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = without("PYTEST_", "KPERF_", "GITHUB_")
    return subprocess.run(
        [*KPERF, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**env, "PYTHONPATH": str(REPO)},
        timeout=300,
    )


def softmax(params: str, dtype: str, block: int, sass: float, *, gpu: bool, warps: int = 4) -> VariantResult:
    spec = SPEC.format(t=dtype, b=block) + (f" @ {params}" if gpu else "")
    config = f"num_warps={warps},num_stages=3" + ("" if gpu else ",num_ctas=1")
    key = VariantKey(
        "softmax_kernel",
        H100 if gpu else "sm_90",
        spec,
        config,
        test=f"examples/test_softmax.py::test_softmax[{params}]",
        source=SITE,
    )
    return VariantResult(
        key, metrics=[Metric("sass.instructions", sass, "count"), Metric("num_warps", warps, "count")]
    )


def other(name: str) -> VariantResult:
    key = VariantKey(
        name, H100, "x:*fp32", "num_warps=4,num_stages=3", test=f"examples/test_{name}.py::test_{name}[big]"
    )
    return VariantResult(key, metrics=[Metric("registers", 32, "count")])


def crafted_pair(tmp_path: Path) -> None:
    fp = Fingerprint(cpu="cpu", triton="3.6.0", python="3.11", host_hash="x")
    base = RunInfo("static", "2026-01-01T00:00:00+00:00", "static", fp)
    store.save_run(
        tmp_path / "base.db",
        base,
        [
            softmax("37-1000-fp16", "fp16", 1024, 234, gpu=False),
            softmax("64-256-fp32", "fp32", 256, 108, gpu=False),
        ],
    )
    gfp = Fingerprint(
        cpu="cpu", gpu=H100, triton="3.6.0", python="3.11", host_hash="y", extra={"capability": "9.0"}
    )
    cur = RunInfo("gpu", "2026-01-02T00:00:00+00:00", "gpu", gfp)
    store.save_run(
        tmp_path / "run.db",
        cur,
        [
            softmax("8192-1000-fp16", "fp16", 1024, 234, gpu=True),
            softmax("8192-4096-fp32", "fp32", 4096, 194, gpu=True, warps=16),
            other("matmul"),
            other("layernorm"),
        ],
    )


def test_variants_of_different_problems_are_not_rematched(tmp_path):
    crafted_pair(tmp_path)
    b, c = store.load_run(tmp_path / "base.db"), store.load_run(tmp_path / "run.db")
    m = match_variants(b.results, c.results, base_info=b.info, cur_info=c.info)
    pairs = [(p.base.key.test, p.current.key.test, p.matched_by) for p in m.pairs]
    # the one compiled kernel both runs built meets its baseline; the GPU-size one does not
    # meet the interpreter-size one of another problem
    assert pairs == [
        (
            "examples/test_softmax.py::test_softmax[37-1000-fp16]",
            "examples/test_softmax.py::test_softmax[8192-1000-fp16]",
            "id",
        )
    ]
    assert [r.key.test for r in m.removed] == ["examples/test_softmax.py::test_softmax[64-256-fp32]"]


def test_same_problem():
    k = lambda test, spec="x": VariantKey("k", "sm_90", spec, "", test=test)  # noqa: E731
    assert same_problem(k("t.py::a[1-2]"), k("t.py::b[1-2]"))  # a renamed test, same sizes
    assert same_problem(k("t.py::a"), k("t.py::b"))
    assert not same_problem(k("t.py::a[64-256]"), k("t.py::a[8192-4096]"))
    assert not same_problem(k("t.py::a", "x @ 64"), k("t.py::a", "x @ 8192"))
    assert same_problem(k("t.py::a", "x @ 64"), k("t.py::a", "x"))  # a static side records no sizes


def _no_false_red(tmp_path: Path) -> None:
    r = kperf(tmp_path, "compare", "--db", "run.db", "--baseline", "base.db")
    out = " ".join(r.stdout.split())
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no comparable baseline for this machine class" in out and "nothing was judged" in out
    assert "regressed kernel" not in out
    doc = json.loads(
        kperf(tmp_path, "compare", "--db", "run.db", "--baseline", "base.db", "--format", "json").stdout
    )
    assert doc["exit_code"] == 0 and doc["status"] == "no comparable baseline" and doc["regressions"] == 0
    r = kperf(tmp_path, "report", "--db", "run.db", "--baseline", "base.db", "--format", "markdown")
    assert r.returncode == 0 and "## ⚠️ kperf: no comparable baseline for this machine class" in r.stdout
    assert "❌" not in r.stdout and "### Regressions" not in r.stdout
    r = kperf(tmp_path, "report", "--db", "run.db", "--baseline", "base.db", "-o", "site")
    index = (tmp_path / "site" / "index.html").read_text()
    assert r.returncode == 0 and '<div id="verdict" class="banner warn">' in index
    assert "no comparable baseline for this machine class" in index
    sha = "a" * 40
    r = kperf(
        tmp_path,
        "github",
        "status",
        "--dry-run",
        "--repo",
        "o/n",
        "--sha",
        sha,
        "--db",
        "run.db",
        "--baseline",
        "base.db",
    )
    # no false red: neutral (issue 37, item 15: "no comparable baseline" is never a green check either)
    assert r.returncode == 0 and "= neutral" in r.stdout and "failure" not in r.stdout, r.stdout + r.stderr


def test_a_crafted_first_gpu_run_is_no_false_red(tmp_path):
    crafted_pair(tmp_path)
    _no_false_red(tmp_path)


@pytest.mark.slow
def test_the_committed_h100_run_against_the_committed_baseline_is_no_false_red(tmp_path):
    shutil.copy(REPO / "tests/data/gpu/h100_examples.db", tmp_path / "run.db")
    shutil.copy(REPO / "baselines/main.db", tmp_path / "base.db")
    _no_false_red(tmp_path)
