"""Arguments `kperf ab` cannot use, as a user meets them (issue 35, a maintainer's walk): a path
that does not exist or a flag pytest does not know ends the check with pytest's own words, exit 2,
and no pass left running the whole suite meanwhile. The CLI runs as a subprocess on a real
two-commit repository on the CPU (static passes only).
"""

from __future__ import annotations

import pytest
from test_pr_check import kperf, make_repo

KERNEL = """
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)
"""

TEST = """
import pytest
import torch
from kernels import copy_kernel


@pytest.mark.kperf
def test_copy():
    x = torch.rand(256)
    y = torch.empty_like(x)
    copy_kernel[(4,)](x, y, 256, BLOCK=64)
"""

# the rest of the suite: slow, and leaving a mark when it ran to its end (a pass running the
# whole suite, which a path missing from both trees made the base's pass do)
SLOW = """
import os
import time
from pathlib import Path


def test_slow():
    time.sleep(25)
    Path(os.environ["KPERF_TEST_ROOM"], "whole-suite-ran").touch()
"""


def _repo(tmp_path):
    return make_repo(
        tmp_path / "r",
        {"kernels.py": KERNEL, "test_k.py": TEST, "test_slow.py": SLOW},
        {"kernels.py": KERNEL.replace("    m = offs < n\n", "    m = offs < n  # the tail\n")},
    )


@pytest.mark.parametrize(
    "args, said",
    [
        (["no_such_file.py", "--kperf-all"], "file or directory not found: no_such_file.py"),
        (["no_such_file.py", "-k", "copy"], "file or directory not found: no_such_file.py"),
        (["--passes", "sequential", "no_such_file.py"], "file or directory not found: no_such_file.py"),
        (["test_k.py", "--bogus-flag"], "unrecognized arguments: --bogus-flag"),
    ],
)
def test_pytest_usage_error_in_head_is_its_line_and_stops_the_base_pass(tmp_path, args, said):
    repo = _repo(tmp_path)
    room = tmp_path / "room"
    room.mkdir()
    p = kperf("ab", "--base", "HEAD~1", "--no-gpu", *args, cwd=repo, env={"KPERF_TEST_ROOM": str(room)})
    assert p.returncode == 2, p.stdout + p.stderr
    last = p.stderr.strip().splitlines()[-1]
    assert "usage error, exit 4" in last and last.endswith(said), last
    # not "some test(s) failed", not the base tree, not memory
    assert "failed" not in last and "base tree" not in last and "memory" not in last
    assert not (room / "whole-suite-ran").exists()  # the base's pass was stopped, not run to its end
    assert "Traceback" not in p.stderr
    # pytest's line alone: none of the pass's own output around it (the fresh walk of issue 33
    # saw "kperf: no test ran marked ... --kperf-all" although --kperf-all was given, and a run
    # "stored" in a scratch database removed right after)
    assert "no test ran marked" not in p.stdout + p.stderr and "stored in" not in p.stdout + p.stderr


@pytest.mark.parametrize(
    "args, said",
    [
        (["test_k.py", "-k", "copy", "--db", "F.db"], "--db is an option of kperf ab: put it before"),
        (["test_k.py", "--json=ab.json"], "--json is an option of kperf ab: put it before"),
        (["test_k.py", "--db", "F.db", "--report-dir", "D"], "--db, --report-dir are options of kperf ab"),
    ],
)
def test_kperf_ab_options_after_the_pytest_arguments_are_one_line_before_any_pass(tmp_path, args, said):
    """Everything after the first pytest argument goes to pytest, which refused `--db` in both
    trees, and the check then blamed the base tree ("stored no run (pytest exit 4)")."""
    repo = _repo(tmp_path)
    p = kperf("ab", "--base", "HEAD~1", "--no-gpu", *args, cwd=repo)
    assert p.returncode == 2, p.stdout + p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], p.stderr
    assert lines[0].endswith("(kperf ab [OPTIONS] [PYTEST_ARGS]...)")
    assert "static:" not in p.stdout  # no pass started
    assert not (repo / "F.db").exists()
