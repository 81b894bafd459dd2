"""Static mode's clock on each test (issue 35, progress and budgets), as a user meets it: pytest as
a subprocess on a test that runs long under the interpreter. The slow test is named on the
terminal while it runs; with --kperf-test-budget it is stopped and skipped with the reason, and the rest of
the suite runs; a bad budget is a usage error.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

TESTS = """
import time

import pytest
import torch
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


@pytest.mark.kperf
def test_quick():
    x = torch.rand(100)
    y = torch.empty_like(x)
    copy_kernel[(1,)](x, y, 100, BLOCK=128)
    assert torch.equal(x, y)


@pytest.mark.kperf
def test_long():
    x = torch.rand(100)
    y = torch.empty_like(x)
    copy_kernel[(1,)](x, y, 100, BLOCK=128)
    time.sleep(60)  # stands in for minutes of interpreted kernels
"""


def _pytest(tmp_path, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    (tmp_path / "test_k.py").write_text(TESTS)
    t0 = time.monotonic()
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            "--kperf",
            "--kperf-no-save",
            *args,
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        timeout=300,
    )
    return r, time.monotonic() - t0


def test_a_test_over_its_budget_is_named_stopped_and_skipped(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.kperf]\nslow_test_s = 1\n")
    r, wall = _pytest(tmp_path, "--kperf-test-budget", "3")
    assert r.returncode == 0, r.stdout + r.stderr
    assert wall < 55  # the 60 s sleep was cut short
    assert "test_k.py::test_long is still running after 1 s under Triton's interpreter" in r.stdout
    assert "test_quick is still running" not in r.stdout
    assert "1 passed, 1 skipped" in r.stdout
    assert "stopped after the 3 s test budget under Triton's interpreter" in r.stdout


def test_a_bad_budget_is_a_usage_error(tmp_path):
    r, _ = _pytest(tmp_path, "--kperf-test-budget", "soon")
    assert r.returncode == 4, r.stdout + r.stderr
    assert "--kperf-test-budget must be a number of seconds >= 0, got 'soon'" in r.stderr
