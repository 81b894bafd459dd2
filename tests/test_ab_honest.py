"""Honest outcomes when nothing compiles (issue 35): a suite whose every compile fails is no
"changed" and no pass. Here the compiler refuses the kernel (a dot of 8x8 tiles) while the tests,
under the interpreter, pass, as a real repository's every compile failed on a CPU runner while its
tests ran. `kperf ab` is then exit 2 with one line giving the count and the first error,
and the pytest summary says each distinct error once, with a count, and names variants, kernels
and failures as such. Real two-commit repository, the CLI and pytest as subprocesses, CPU only.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import checkout_path
from test_pr_check import kperf, make_repo

KERNELS = """
import triton
import triton.language as tl


@triton.jit
def dot_kernel(a_ptr, b_ptr, c_ptr, B: tl.constexpr):
    r = tl.arange(0, B)
    a = tl.load(a_ptr + r[:, None] * B + r[None, :])
    b = tl.load(b_ptr + r[:, None] * B + r[None, :])
    tl.store(c_ptr + r[:, None] * B + r[None, :], tl.dot(a, b))
"""

# 8x8 tiles: the interpreter multiplies them, the compiler refuses a dot under 16 (every compile
# fails, every test passes)
TESTS = """
import pytest
import torch
from kernels import dot_kernel


@pytest.mark.kperf
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("seed", [0, 1])
def test_dot(seed, dtype):
    torch.manual_seed(seed)
    a, b = torch.rand(8, 8).to(dtype), torch.rand(8, 8).to(dtype)
    c = torch.empty(8, 8, dtype=dtype)
    dot_kernel[(1,)](a, b, c, B=8)
    assert torch.allclose(c.float(), a.float() @ b.float(), atol=1e-2)
"""


def _repo(tmp_path):
    return make_repo(
        tmp_path / "r",
        {"kernels.py": KERNELS, "test_k.py": TESTS},
        {"kernels.py": KERNELS.replace("    r = tl.arange(0, B)\n", "    r = tl.arange(0, B)  # one tile\n")},
    )


@pytest.mark.slow
def test_ab_where_every_compile_failed_is_exit_2_with_count_and_first_error(tmp_path):
    p = kperf("ab", "--base", "HEAD~1", "--no-gpu", cwd=_repo(tmp_path))
    assert p.returncode == 2, p.stdout + p.stderr
    last = p.stderr.strip().splitlines()[-1]
    assert "all 2 compile(s) failed, nothing could be compared" in last
    assert "dot_kernel" in last
    assert "Traceback" not in p.stderr


def test_the_summary_says_a_repeated_error_once_and_counts_kernels_and_failures(tmp_path):
    repo = _repo(tmp_path)
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--kperf", "--kperf-db", "k.db"],
        cwd=repo,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": checkout_path(repo)},
        timeout=600,
    )
    out = r.stdout
    assert "kperf: 2 variant(s) captured in static mode" in out, out  # four tests, two dtypes
    assert "(1 kernel(s); 0 compiled, 2 did not compile)" in out
    errors = [line for line in out.splitlines() if line.startswith("kperf ERROR ")]
    assert len(errors) == 1, errors
    assert "(and 1 more)" in errors[0]
