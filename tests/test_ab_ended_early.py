"""A test that stops before its end in a static pass is never "identical" (issue 33's fresh walk).

On a CPU, a kernel whose grid is too large to interpret is recorded without running; the test's
check of its output then fails, and kperf turns that into an expected failure ("results not
checked"). Everything the test would have launched after that point (mamba's backward kernel,
behind its forward's failed assert) was never seen. A pull request that changes only such a later
kernel read "every launch identical", exit 0, green. It must read "unknown", saying why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import checkout_path, git

pytest.importorskip("torch")
pytest.importorskip("triton")

OPS = """
import torch
import triton
import triton.language as tl


@triton.jit
def fwd_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2.0, mask=m)


@triton.jit
def bwd_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * 0.5, mask=m)


def fwd(x):
    y = torch.empty_like(x)
    fwd_kernel[(triton.cdiv(x.numel(), 2),)](x, y, x.numel(), BLOCK=2)  # 5,000 programs
    return y


def bwd(x):
    y = torch.empty_like(x)
    bwd_kernel[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256, num_warps=4)
    return y
"""

TESTS = """
import torch

from ek import ops


def test_fwd_then_bwd():
    x = torch.rand(10000)
    torch.testing.assert_close(ops.fwd(x), x * 2)  # fails where fwd's body was not run
    torch.testing.assert_close(ops.bwd(x), x * 0.5)  # never reached then
"""


@pytest.mark.slow
def test_a_test_that_stopped_before_a_changed_kernel_is_unknown_not_identical(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    files = {"ek/__init__.py": "", "ek/ops.py": OPS, "tests/test_ek.py": TESTS,
             "pyproject.toml": '[tool.kperf]\narch = ["sm_90"]\n'}  # fmt: skip
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    ops = repo / "ek" / "ops.py"
    ops.write_text(ops.read_text().replace("BLOCK=256, num_warps=4", "BLOCK=256, num_warps=1"))
    git(repo, "commit", "-q", "-a", "-m", "head: only the backward launch changes")
    out = tmp_path / "ab.json"
    env = {**os.environ, "PYTHONPATH": checkout_path(repo)}  # never another installed kperf_ci
    env.pop("KPERF_DB", None)
    r = subprocess.run(
        [sys.executable, "-m", "kperf_ci", "ab", "--base", "HEAD~1", "--no-gpu", "--json", str(out),
         "tests", "--kperf-all", "-p", "no:cacheprovider"],
        cwd=repo, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.exists(), r.stdout[-3000:] + r.stderr[-3000:]
    doc = json.loads(out.read_text())
    (t,) = doc["tests"]
    assert t["status"] == "unknown", (t, r.stdout[-2000:])
    assert any(
        "the test stopped before its end" in c and "too large to interpret" in c for c in t["changes"]
    ), t
    assert "every launch identical" not in r.stdout, r.stdout[-2000:]
    # the count says why (issue 36's fourth walk, item 1): it stopped early, not "compiled on
    # neither side", which its launches were not
    assert t.get("ended_early") is True, t
    assert "1 unknown (1 stopped early in the static pass: later launches not seen)" in r.stdout, r.stdout[
        -2000:
    ]
    assert "compiled on neither side" not in r.stdout, r.stdout[-2000:]
