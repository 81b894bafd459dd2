"""Stored test ids are relative to the git repository, whatever pytest's rootdir: in a repository
without a pytest config, pytest's node ids depend on the arguments (``tests/test_x.py::t`` from the
repository, ``repo/tests/test_x.py::t`` from its parent); kperf stores the same id for both."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

from kperf_ci import store  # noqa: E402

TEST = """
import pytest
import torch
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def test_copy():
    x = torch.rand(100)
    y = torch.empty_like(x)
    copy_kernel[(1,)](x, y, 100, BLOCK=128)
    assert torch.equal(x, y)
"""


@pytest.mark.slow
def test_the_stored_id_does_not_depend_on_where_pytest_ran(tmp_path: Path) -> None:
    repo = tmp_path / "work" / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "test_x.py").write_text(TEST)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    env = dict(os.environ, TRITON_INTERPRET="1")
    env.pop("KPERF_DB", None)
    ids = []
    for cwd, target in ((repo, "tests/test_x.py"), (tmp_path / "work", "repo/tests/test_x.py")):
        db = tmp_path / f"{len(ids)}.db"
        r = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--kperf", "--kperf-all",
             "--kperf-mode", "static", "--kperf-db", str(db), target],
            cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr
        ids.append({v.key.test for v in store.load_run(db).results})
    assert ids[0] == ids[1] == {"tests/test_x.py::test_copy"}
