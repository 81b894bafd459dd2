"""Issue 23, finding 6 (the plugin): settings that cannot work are a pytest usage error (exit 4,
one line) before any test runs, never a suite run into errors or a red exit 1 at the end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kperf_ci.device import cuda_available

REPO = Path(__file__).parent.parent

TEST_FILE = """
import pathlib
import pytest

@pytest.mark.kperf(name="k")
def test_runs():
    pathlib.Path("TEST-RAN").write_text("x")
"""


def pytest_run(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_it.py").write_text(TEST_FILE)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "KPERF_"))}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--kperf", "test_it.py", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**clean, "PYTHONPATH": str(REPO), **env},
        timeout=300,
    )


def usage_error(r: subprocess.CompletedProcess, tmp_path: Path, *needles: str) -> None:
    assert r.returncode == pytest.ExitCode.USAGE_ERROR, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("ERROR: kperf: "), r.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    assert not (tmp_path / "TEST-RAN").exists(), "a test ran before the usage error"


@pytest.mark.parametrize("jobs", [str(10**23), str(10**8), "257"])
def test_absurd_job_counts_are_refused_before_any_test(tmp_path, jobs):
    usage_error(pytest_run(tmp_path, KPERF_JOBS=jobs), tmp_path, "env KPERF_JOBS", "from 1 to 256")
    r = pytest_run(tmp_path, "--kperf-jobs", jobs)
    assert r.returncode == pytest.ExitCode.USAGE_ERROR and "from 1 to 256" in r.stderr
    assert not (tmp_path / "TEST-RAN").exists()


@pytest.mark.skipif(cuda_available(), reason="needs a machine without a usable CUDA GPU")
def test_gpu_mode_without_a_gpu_is_a_usage_error(tmp_path):
    usage_error(pytest_run(tmp_path, "--kperf-mode", "gpu"), tmp_path, "mode gpu (--kperf-mode)", "static")
    usage_error(pytest_run(tmp_path, KPERF_MODE="gpu"), tmp_path, "mode gpu (env KPERF_MODE)")


def test_an_unwritable_run_database_is_found_before_the_suite(tmp_path):
    (tmp_path / "blocker").write_text("a file where a directory must be")
    r = pytest_run(tmp_path, "--kperf-mode", "static", "--kperf-db", "blocker/run.db")
    usage_error(r, tmp_path, "blocker/run.db", "writable")


def test_a_missing_baseline_is_found_before_the_suite(tmp_path):
    r = pytest_run(tmp_path, "--kperf-mode", "static", "--kperf-db", "run.db", "--kperf-baseline", "nope.db")
    usage_error(r, tmp_path, "nope.db", "does not exist", "kperf baseline update")
    assert not (tmp_path / "run.db").exists()
