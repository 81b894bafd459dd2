"""Issue 23, finding 6 (the plugin): settings that cannot work are a pytest usage error (exit 4,
one line) before any test runs, never a suite run into errors or a red exit 1 at the end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import without

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
    clean = without("PYTEST_", "KPERF_")
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


def plain_run(tmp_path: Path, *args: str, pyproject: str = "") -> subprocess.CompletedProcess:
    """pytest as pytest_run runs it, without --kperf (and with this pyproject.toml, if any)."""
    (tmp_path / "test_it.py").write_text(TEST_FILE)
    if pyproject:
        (tmp_path / "pyproject.toml").write_text(pyproject)
    clean = without("PYTEST_", "KPERF_")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "test_it.py", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**clean, "PYTHONPATH": str(REPO)},
        timeout=300,
    )


@pytest.mark.parametrize(
    "args, said",
    [
        (["--kperf-all"], "--kperf-all needs --kperf (or kperf run): "),
        (["--kperf-mode", "static"], "--kperf-mode needs --kperf (or kperf run): "),
        (["--kperf-db=run.db", "--kperf-all"], "--kperf-db, --kperf-all need --kperf (or kperf run): "),
    ],
)
def test_kperf_options_without_kperf_are_a_usage_error(tmp_path, args, said):
    """Issue 35, a maintainer's walk: `pytest --kperf-all` without --kperf ran as plain pytest,
    saying nothing."""
    usage_error(plain_run(tmp_path, *args), tmp_path, said, "add --kperf")


def test_kperf_options_in_addopts_or_with_kperf_or_a_shard_still_work(tmp_path):
    # addopts may keep the settings of the runs that turn kperf on: a plain run is left alone
    ini = '[tool.pytest.ini_options]\naddopts = "--kperf-all --kperf-mode static --kperf-no-save"\n'
    r = plain_run(tmp_path, pyproject=ini)
    assert r.returncode == 0 and (tmp_path / "TEST-RAN").exists(), r.stdout[-2000:] + r.stderr[-2000:]
    assert "kperf: mode=static" not in r.stdout  # kperf stayed off
    r = plain_run(tmp_path, "--kperf", pyproject=ini)  # with --kperf, the same addopts apply
    assert r.returncode != pytest.ExitCode.USAGE_ERROR and "kperf: mode=static" in r.stdout, r.stderr
    # a shard is a slice of the suite with kperf off too, and the marks choose what it holds
    r = plain_run(tmp_path, "--kperf-shard", "1/2", "--kperf-all", "--collect-only", "-q")
    assert r.returncode == 0 and "test_it.py::test_runs" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
    # kperf run passes --kperf itself
    k = subprocess.run(
        [sys.executable, "-m", "kperf_ci", "run", "test_it.py", "--kperf-all", "--kperf-no-save"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=300,
    )
    assert "needs --kperf" not in k.stdout + k.stderr and "kperf: mode=" in k.stdout, k.stdout + k.stderr


def test_a_baseline_that_went_bad_while_the_tests_ran_is_exit_2_not_1(tmp_path):
    """The baseline read well when the session began and was overwritten before the end (another
    job's copy): one store error line and exit 2, the fix being the user's, never 1, which means a
    regression (it was 1, pytest's "tests failed", for any store error but a pending-file run)."""
    from kperf_ci import store
    from kperf_ci.model import Fingerprint, Metric, RunInfo, VariantKey, VariantResult

    key = VariantKey("k", "sm_90", "x:*fp32", "num_warps=4", test="t.py::k")
    info = RunInfo("base1", "2026-01-02T00:00:00+00:00", "static", Fingerprint(triton="3.6.0"))
    store.save_run(tmp_path / "base.db", info, [VariantResult(key, [Metric("registers", 32)])])
    (tmp_path / "test_overwrite.py").write_text(
        "import pathlib\n\n\ndef test_overwrite():\n"
        "    pathlib.Path('base.db').write_bytes(b'not a database' * 100)\n"
    )
    r = pytest_run(tmp_path, "test_overwrite.py", "--kperf-mode", "static", "--kperf-baseline", "base.db")
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    (line,) = [ln for ln in (r.stdout + r.stderr).splitlines() if "kperf ERROR" in ln]
    assert line.startswith("kperf ERROR <store>: ") and "base.db: not a SQLite database" in line, line
