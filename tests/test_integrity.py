"""A run is stored as complete only when it is: Ctrl-C, killed xdist sessions, a lock held too
long, a run compared with itself, bad marker and boolean values. Real pytest processes (pytester
subprocesses, or Popen where a signal has to be sent) on real SQLite files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import wait_for, without
from test_plugin import ADD_KERNEL, ONE_ADD_TEST, run

from kperf_ci import store

pytest.importorskip("triton")
pytest.importorskip("torch")

# a marked test that passes, then one that announces itself and blocks until it is stopped
PASS_THEN_BLOCK = """
import pathlib, time, pytest, torch
from kernels_add import add

@pytest.mark.kperf
def test_a_add(kperf):
    kperf.bench(add, torch.rand(64), torch.rand(64))

@pytest.mark.parametrize("i", range(4))
def test_b_block(i):
    pathlib.Path(f"started-{i}").touch()
    time.sleep(120)
"""


@pytest.fixture
def sample(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(kernels_add=ADD_KERNEL)
    return pytester


def _env() -> dict[str, str]:
    env = without("PYTEST_", "KPERF_")
    return {**env, "PYTHONPATH": str(Path(__file__).parent.parent)}


def _start(where: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    # its own process group, so a signal can be sent to the whole session as a terminal would
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=where,
        env={**_env(), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _is_compile_worker(cmd: str) -> bool:
    """A spawned compile worker, or the spare forked from the session once it became one."""
    return "kperf_ci.capture.static._worker" in cmd or cmd.endswith("[kperf-worker]")


def _children(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of the direct children of ``pid``, from /proc. A compile worker forked
    from the session (kperf_ci.capture.static.spare) has the session's command line and names
    itself in its comm, which ends the line in brackets: use :func:`_is_compile_worker`."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cmd += f" [{(entry / 'comm').read_text().strip()}]"
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            out.append((int(entry.name), cmd))
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]


# --------------------------------------------------------------------------- Ctrl-C


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the compile workers in /proc")
def test_ctrl_c_while_compiling_stops_cleanly_and_stores_nothing_as_complete(sample: pytest.Pytester) -> None:
    sample.makepyfile(test_one=ONE_ADD_TEST)
    proc = _start(
        sample.path,
        *("--kperf", "--kperf-arch", "sm_90", "--kperf-db", "run.db", "--kperf-jobs", "1"),
        # compiled at the end of the session, where the Ctrl-C is meant to land (a machine that
        # compiles ahead would start the worker while the test still runs: test_compile_ahead.py)
        env={"KPERF_COMPILE_AHEAD": "0"},
    )
    workers: list[tuple[int, str]] = []

    def compiling() -> bool:
        workers[:] = [c for c in _children(proc.pid) if _is_compile_worker(c[1])]
        return bool(workers)

    wait_for(compiling, "a compile worker to start", proc)
    os.kill(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out
    # one line instead of a traceback through the compile pool
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out
    assert "kperf: run " in out and "interrupted (Ctrl-C while compiling): not stored" in out, out
    assert not (sample.path / "run.db").exists() or not store.run_statuses(sample.path / "run.db")
    time.sleep(0.5)
    assert not [pid for pid, _ in workers if _alive(pid)], "a compile worker outlived the session"


@pytest.mark.slow
def test_ctrl_c_during_xdist_tests_marks_the_run_interrupted(sample: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    sample.makepyfile(test_block=PASS_THEN_BLOCK)
    db = sample.path / "run.db"
    proc = _start(sample.path, "-n", "2", "--kperf", "--kperf-arch", "sm_90", "--kperf-db", "run.db")
    wait_for(lambda: any(sample.path.glob("started-*")), "a blocking test to start", proc)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: every process
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out
    # the controller wrote the row at the start; it must not end up "complete"
    statuses = store.run_statuses(db)
    assert list(statuses.values()) == [store.INTERRUPTED], (statuses, out)
    assert "stored as incomplete (status interrupted)" in out, out
    with pytest.raises(store.RunNotFoundError, match="no complete run"):
        store.load_run(db)


def test_killed_xdist_session_leaves_a_running_run_that_is_never_the_latest(sample: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    sample.makepyfile(test_block=PASS_THEN_BLOCK)
    db = sample.path / "run.db"
    store.save_run(db, store_info("good"), [store_result()])
    proc = _start(sample.path, "-n", "2", "--kperf", "--kperf-arch", "sm_90", "--kperf-db", "run.db")
    wait_for(lambda: any(sample.path.glob("started-*")), "a blocking test to start", proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    statuses = store.run_statuses(db)
    assert sorted(statuses.values()) == [store.COMPLETE, store.RUNNING], statuses
    assert store.load_run(db).info.run_id == "good"  # not the killed run
    killed = next(rid for rid, s in statuses.items() if s == store.RUNNING)
    # and `kperf baseline update` will not make it a baseline
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "kperf_ci",
            "baseline",
            "update",
            "--db",
            "run.db",
            "--baseline",
            "b.db",
            "--run",
            killed,
        ],
        cwd=sample.path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "is incomplete (status running)" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (sample.path / "b.db").exists()


def store_info(run_id: str):
    from conftest import make_info

    return make_info(run_id, started_at="2026-01-01T00:00:00+00:00")


def store_result():
    from conftest import make_result

    return make_result(registers=1)


# --------------------------------------------------------------------------- the same file twice


def test_same_file_as_db_and_baseline_is_refused(sample: pytest.Pytester) -> None:
    sample.makepyfile(test_one=ONE_ADD_TEST)
    # spelled differently, one file: the baseline's latest run would be this very run
    result = run(sample, "--kperf", "--kperf-db", "run.db", "--kperf-baseline", "./sub/../run.db")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: kperf: the baseline (--kperf-baseline)*same file*compared with itself*"]
    )
    assert not (sample.path / "run.db").exists()  # refused before any test ran


# --------------------------------------------------------------------------- a lock held too long

SHORT_LOCK_WAITS = """
from kperf_ci import store

# the production waits are 30 s x 3; the behaviour is the same with short ones
# (set where they are read: a name set on the package itself is read by nobody, and the test
# then waited the production 105 s)
store.db.BUSY_TIMEOUT_S = 0.2
store.locks.LOCK_ATTEMPTS = 2
store.locks.LOCK_BACKOFF_S = 0.01
"""


def test_locked_database_keeps_the_results_in_a_side_file(sample: pytest.Pytester) -> None:
    import sqlite3

    sample.makepyfile(test_one=ONE_ADD_TEST)
    sample.makeconftest(SHORT_LOCK_WAITS)
    db = sample.path / "run.db"
    store.save_run(db, store_info("old"), [store_result()])
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another writer that never lets go
    try:
        result = run(sample, "--kperf", "--kperf-arch", "sm_90", "--kperf-db", "run.db")
    finally:
        holder.rollback()
        holder.close()
    # exit 2, not 1: nothing was judged, and 1 is a regression (the README's exit codes)
    assert result.ret == 2, result.stdout.str()
    result.stdout.fnmatch_lines(
        # "over 0 s": the short waits above took effect
        [
            "*kperf ERROR <store>: *run.db: stayed locked by another writer for over 0 s; run *"
            "written to *run.db.pending-*.db instead; merge it in when the lock is gone "
            "(`kperf merge *run.db *run.db.pending-*.db -o *run.db`)*"
        ]
    )
    (side,) = sample.path.glob("run.db.pending-*.db")
    run_id = side.name.split("pending-")[1][: -len(".db")]
    rec = store.load_run(side, run_id)
    assert rec.status == store.COMPLETE and len(rec.results) == 1  # measured, kept, whole
    assert set(store.run_statuses(db)) == {"old"}


# --------------------------------------------------------------------------- booleans


@pytest.mark.parametrize(
    "env, toml, enabled",
    [
        ({"KPERF_ENABLED": "yes"}, "", True),  # accepted by the validator, so honoured by the plugin
        ({"KPERF_ENABLED": "Off"}, "enabled = true", False),  # env wins over the file
        ({}, "enabled = true", True),
        ({}, "enabled = false", False),
    ],
)
def test_enabled_is_parsed_by_the_one_parser(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, env: dict, toml: str, enabled: bool
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    pytester.makepyprojecttoml(f"[tool.kperf]\n{toml}\ndb = 'run.db'\n")
    pytester.makepyfile(test_x="def test_x(kperf):\n    print('MODE', kperf.mode)\n")
    result = run(pytester, "-s")
    result.stdout.fnmatch_lines(["*MODE static" if enabled else "*MODE off"])
    # enabled, the test uses the kperf fixture but launches no kernel: a capture that saw nothing
    # fails the session (it would pass every comparison)
    assert result.ret == (1 if enabled else 0), result.stdout.str() + result.stderr.str()
    if enabled:
        result.stdout.fnmatch_lines(["*captured no Triton launch in 1 marked test*"])


@pytest.mark.parametrize(
    "env, toml, needle",
    [
        ({}, 'enabled = "false"', "'enabled' from [tool.kperf]*'false' is not valid; use true or false"),
        ({"KPERF_ENABLED": "maybe"}, "", "'enabled' from env KPERF_ENABLED: 'maybe' is not valid"),
        ({}, 'save = "no"', "'save' from [tool.kperf]*'no' is not valid"),
    ],
)
def test_bad_boolean_is_one_usage_line(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, env: dict, toml: str, needle: str
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    pytester.makepyprojecttoml(f"[tool.kperf]\n{toml}\n")
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    # enabled = "false" used to switch kperf ON (a non-empty string is truthy)
    result = run(pytester, *(["--kperf"] if "save" in toml else []))
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    lines = [line for line in result.stderr.lines if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ERROR: kperf: kperf setting "), lines
    assert all(part in lines[0] for part in needle.split("*")), lines


def test_xdist_worker_whose_part_was_diverted_leaves_the_run_incomplete(tmp_path: Path) -> None:
    """A worker that wrote its results to the side file hands that over: the controller then
    marks the run in the database interrupted, not complete (its part is elsewhere)."""
    from types import SimpleNamespace

    from kperf_ci.exit_codes import EXIT_BAD_INPUT
    from kperf_ci.plugin import finish
    from kperf_ci.plugin.session import KperfSession

    side = store.pending_path(tmp_path / "run.db", "r1")

    def save() -> None:
        raise store.RunDivertedError(tmp_path / "run.db", "r1", side)

    worker = KperfSession(
        config=None,  # type: ignore[arg-type]
        settings=SimpleNamespace(save=True),  # type: ignore[arg-type]
        mode="static",
        run_id="r1",
        is_worker=True,
        marked_passed=1,
        marked_with_launches=1,
    )
    worker.save = save  # type: ignore[method-assign]
    worker.compare_with_baseline = lambda: None  # type: ignore[method-assign]
    assert finish.finish_session(worker) == EXIT_BAD_INPUT
    controller = KperfSession(config=None, settings=None, mode="static", run_id="r1")  # type: ignore[arg-type]
    finish.merge_worker_output(controller, finish.worker_output(worker))
    assert controller.interrupted and str(side) in controller.interrupted
    assert controller.errors and str(side) in controller.errors[0][1]
    assert finish._error_status(controller) == EXIT_BAD_INPUT == 2  # not a regression's 1
    controller.error("test_x.py::test_x", "kernel k: did not compile")  # any other error still fails
    assert finish._error_status(controller) == pytest.ExitCode.TESTS_FAILED


@pytest.mark.parametrize("which", ["--kperf-db", "--kperf-baseline"])
def test_a_bad_database_is_reported_before_any_test_runs(pytester: pytest.Pytester, which: str) -> None:
    """Issue 14: a corrupt run database or baseline is one usage line before the tests (and the
    compile) run, and the file is left as it was."""
    bad = pytester.path / "bad.db"
    bad.write_bytes(b"not a database at all")
    pytester.makepyfile(test_x="def test_x():\n    raise AssertionError('a test ran')\n")
    args = ["--kperf", which, str(bad)] + (["--kperf-db", "run.db"] if which == "--kperf-baseline" else [])
    result = run(pytester, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    assert "a test ran" not in result.stdout.str()
    result.stderr.fnmatch_lines(["*kperf: *bad.db: not a SQLite database*"])
    assert bad.read_bytes() == b"not a database at all"


def test_a_file_that_is_not_a_database_is_never_to_be_deleted(tmp_path: Path) -> None:
    """Issue 37's walk: `--kperf-baseline` pointing at a CSV was told to "delete it". The file is
    the user's; the line names the problem and points the option elsewhere, and leaves it as is."""
    csv = tmp_path / "base.csv"
    csv.write_text("kernel,time\nadd,1.0\n" * 20)
    r = subprocess.run(
        [sys.executable, "-m", "kperf_ci", "show", "--db", str(csv)],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert "not a SQLite database" in lines[0] and "delete" not in lines[0], lines[0]
    assert csv.read_text().startswith("kernel,time")
