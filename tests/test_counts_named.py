"""One run's size in the same words everywhere (issue 35, a maintainer's walk): pytest's summary
said "6 variant(s) captured ... (1 kernel(s))" while `kperf show` and the run report said
"6 kernels" for the same run; and a session that captured nothing because no test was marked
says how to mark them. A real project, pytest and the CLI as subprocesses, CPU only.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_pr_check import kperf

ROOT = Path(__file__).resolve().parent.parent

KERNELS = """
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)
"""

# one Triton kernel at three block sizes: three variants of one kernel
TESTS = """
import pytest
import torch
from kernels import copy_kernel


@pytest.mark.kperf
@pytest.mark.parametrize("block", [32, 64, 128])
def test_copy(block):
    x = torch.rand(256)
    y = torch.empty_like(x)
    copy_kernel[(256 // block,)](x, y, 256, BLOCK=block)
    assert torch.equal(x, y)
"""


def pytest_run(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{repo}", "KPERF_PROGRESS": "0"},
        timeout=600,
    )


@pytest.mark.slow
def test_pytest_show_and_the_report_count_variants_and_kernels_alike(tmp_path):
    repo = tmp_path / "p"
    repo.mkdir()
    (repo / "kernels.py").write_text(KERNELS)
    (repo / "test_k.py").write_text(TESTS)
    r = pytest_run(repo, "--kperf", "--kperf-arch", "sm_90", "--kperf-db", "k.db")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "kperf: 3 variant(s) captured in static mode for sm_90 (1 kernel(s))" in r.stdout, r.stdout

    show = kperf("show", "--db", "k.db", "--run", "latest", cwd=repo)
    assert show.returncode == 0, show.stdout + show.stderr
    assert "3 variants of 1 kernel;" in show.stdout.splitlines()[-1], show.stdout
    md = kperf("report", "--db", "k.db", "--format", "markdown", cwd=repo)
    assert md.returncode == 0 and "\n3 variants of 1 kernel: 3 new" in md.stdout, md.stdout + md.stderr
    site = kperf("report", "--db", "k.db", "-o", "site", cwd=repo)
    assert site.returncode == 0 and "(3 variants of 1 kernel; " in site.stdout, site.stdout + site.stderr
    index = (repo / "site" / "index.html").read_text(encoding="utf-8")
    assert "3 variants of 1 kernel" in index and "<h2>Kernels (" not in index
    for text in (show.stdout, md.stdout, site.stdout, index):
        assert "3 kernels" not in text


@pytest.mark.slow
def test_a_session_with_no_marked_test_says_how_to_mark_them(tmp_path):
    """`pytest --kperf` on a suite nobody marked said "0 variant(s) captured" and nothing more."""
    repo = tmp_path / "p"
    repo.mkdir()
    (repo / "kernels.py").write_text(KERNELS)
    (repo / "test_k.py").write_text(TESTS.replace("@pytest.mark.kperf\n", ""))
    r = pytest_run(repo, "--kperf", "--kperf-no-save")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    lines = r.stdout.splitlines()
    i = next(i for i, line in enumerate(lines) if "kperf: 0 variant(s) captured" in line)
    hint = lines[i + 1]
    assert hint.startswith("kperf: no test ran marked"), r.stdout
    assert all(w in hint for w in ("@pytest.mark.kperf", "kperf fixture", "--kperf-all", 'mark = "all"'))
    # marked through --kperf-all: captured, no hint
    r = pytest_run(repo, "--kperf", "--kperf-no-save", "--kperf-all")
    assert "3 variant(s) captured" in r.stdout and "no test ran marked" not in r.stdout, r.stdout[-3000:]
