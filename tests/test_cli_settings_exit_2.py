"""Issue 23, finding 6 (settings and signals): bad settings are found before the work starts and
are exit 2 with one line; marker errors print once; Ctrl-C does not wait out a locked database."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import wait_for, without

from kperf_ci import store
from kperf_ci.device import cuda_available
from kperf_ci.model import Fingerprint, Metric, RunInfo, VariantKey, VariantResult

REPO = Path(__file__).parent.parent


def env(**extra: str) -> dict[str, str]:
    clean = without("PYTEST_", "KPERF_", "GITHUB_")
    return {**clean, "PYTHONPATH": str(REPO), **extra}


def kperf(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kperf_ci.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env(),
        timeout=300,
    )


def one_line_error(r: subprocess.CompletedProcess, *needles: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout[-1500:], r.stderr[-1500:])
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])


# --------------------------------------------------------------------------- kperf ab --db


def test_ab_refuses_a_bad_database_before_the_passes(tmp_path):
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "test_x.py").write_text(
        "import pathlib\n\ndef test_x():\n    pathlib.Path(__file__).with_name('RAN').write_text('x')\n"
    )
    for args in (
        ["init", "-q"],
        ["add", "-A"],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"],
    ):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)
    (repo / "bad.db").write_bytes(b"not a database at all" * 10)
    r = kperf(repo, "ab", "--base", "HEAD", "--no-gpu", "--db", "bad.db", "tests")
    one_line_error(r, "bad.db", "not a SQLite database")
    assert not (repo / "tests" / "RAN").exists(), "a pass ran before --db was checked"


# --------------------------------------------------------------------------- kperf agent run


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--max-wall-s", "nan"], "--max-wall-s nan: not a finite number"),
        (["--max-gpu-seconds", "nan"], "--max-gpu-seconds nan: not a finite number"),
        (["--bench-budget-s", "inf"], "--bench-budget-s inf: not a finite number"),
        (["--timeout-s", "nan"], "--timeout-s nan: not a finite number"),
        (["--seeds", str(10**23)], "each seed must be from 0 to 4294967295"),
        (["--seeds", "-1"], "each seed must be from 0 to"),
        pytest.param(
            ["--device", "cuda"],
            "--device cuda: no usable CUDA GPU",
            marks=pytest.mark.skipif(cuda_available(), reason="needs a machine without CUDA"),
        ),
    ],
)
def test_bad_agent_settings_are_exit_2(tmp_path, args, needle):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "kperf_ci",
            "agent",
            "run",
            "vector_add",
            "--db",
            str(tmp_path / "a.db"),
            *args,
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env(),
        timeout=300,
    )
    one_line_error(r, needle)
    assert not (tmp_path / "a.db").exists()


# --------------------------------------------------------------------------- markers


def test_a_marker_error_is_printed_once(tmp_path):
    (tmp_path / "test_m.py").write_text(
        "import pytest\n\n@pytest.mark.kperf(bogus=1)\ndef test_a():\n    pass\n"
    )
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--kperf", "--kperf-mode", "static",
         "--kperf-db", "run.db", "test_m.py"],
        capture_output=True, text=True, cwd=tmp_path, env=env(), timeout=300,
    )  # fmt: skip
    assert r.returncode == pytest.ExitCode.TESTS_FAILED, r.stdout
    # once in the error report; pytest's own short summary repeats it in full where CI=true is set
    # (it truncates summary lines to the terminal width elsewhere), which is pytest's line, not kperf's
    report = r.stdout.split("short test summary info")[0]
    assert report.count("unknown kperf marker argument(s) bogus; allowed") == 1, r.stdout
    assert "During handling of the above exception" not in r.stdout


# --------------------------------------------------------------------------- Ctrl-C


def _holds_open(proc: subprocess.Popen, path: Path) -> bool:
    """Whether ``proc`` has ``path`` open (read from /proc/PID/fd)."""
    try:
        fds = Path(f"/proc/{proc.pid}/fd").iterdir()
        return any(os.path.realpath(fd) == str(path.resolve()) for fd in fds)
    except OSError:  # an fd closed while we looked, or the process is gone
        return False


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="watches the process's open files in /proc")
def test_ctrl_c_does_not_wait_out_a_locked_database(tmp_path):
    db = tmp_path / "run.db"
    fp = Fingerprint(cpu="cpu", triton="3.6.0", python="3.11", host_hash="x")
    key = VariantKey("k", "sm_90", "x", "num_warps=4")
    store.save_run(
        db,
        RunInfo("r1", "2026-01-01T00:00:00+00:00", "static", fp),
        [VariantResult(key, [Metric("registers", 1, "count")])],
    )
    stats = {"min": 1, "max": 2, "mean": 1.5, "median": 1.5, "stddev": 0.1, "rounds": 3, "data": [1, 1.5, 2]}
    (tmp_path / "b.json").write_text(
        json.dumps({"benchmarks": [{"name": "a", "fullname": "t::a", "stats": stats}]})
    )
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another writer holds the lock
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kperf_ci.cli", "import", "b.json", "--db", "run.db"],
            cwd=tmp_path, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        # Ctrl-C must land while it waits for the lock, not while it imports (a fixed sleep was
        # too short on a loaded 2-core machine): wait until it holds the database open, then a
        # little longer, so it is inside the lock wait
        wait_for(lambda: _holds_open(proc, db), "the CLI to open run.db", proc, timeout=120)
        time.sleep(1.0)
        assert proc.poll() is None, proc.communicate()
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        waited = time.monotonic() - t0
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert waited < 5, f"Ctrl-C took {waited:.1f} s"
    assert proc.returncode == 130, (proc.returncode, out, err)  # never 1, which means a regression
    assert "Traceback" not in err and "interrupted" in err, err
