"""SIGTERM, what `timeout` and a cancelled CI job send, ends `kperf ab` as a Ctrl-C does: its
passes stopped, the base revision's worktree removed, exit 143 and one line (a newcomer's walk
found the worktree and its temporary folders left behind and the exit 143 of a process killed
before any cleanup). The CLI runs as a subprocess on a real two-commit repository (static passes).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import git
from test_ab_usage import KERNEL, TEST
from test_pr_check import make_repo

# a test that runs until it is stopped, and says it started (the moment the passes are busy)
HANG = """
import os
import time
from pathlib import Path


def test_hang():
    Path(os.environ["KPERF_TEST_ROOM"], f"started-{os.getpid()}").touch()
    time.sleep(120)
"""


def _cwds_under(root: Path) -> list[str]:
    """Processes whose working directory lies under ``root`` (a pass runs in its tree)."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cwd = os.readlink(d / "cwd")
            except OSError:
                continue
            if cwd.startswith(str(root)):
                found.append(f"{d.name}: {cwd}")
    return found


def _terminated_once_started(args: list[str], cwd: Path, env: dict[str, str], room: Path, wait_s: float):
    """Start ``kperf ARGS`` in a session of its own (the signal reaches kperf's pid alone, as
    `timeout` sends it), wait until a test has written its start into ``room``, send SIGTERM;
    (process, stdout, stderr, the started test's pid)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "kperf_ci", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + wait_s
        while not any(room.iterdir()) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None and any(room.iterdir()), "no test process reached the hanging test"
        started = int(next(room.iterdir()).name.split("-")[1])
        os.kill(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc, out, err, started


def test_sigterm_stops_the_passes_removes_the_base_worktree_and_exits_143(tmp_path):
    repo = make_repo(
        tmp_path / "r",
        {"kernels.py": KERNEL, "test_k.py": TEST, "test_hang.py": HANG},
        {"kernels.py": KERNEL.replace("    m = offs < n\n", "    m = offs < n  # the tail\n")},
    )
    room, tmp = tmp_path / "room", tmp_path / "tmp"
    room.mkdir()
    tmp.mkdir()
    env = {**os.environ, "KPERF_TEST_ROOM": str(room), "TMPDIR": str(tmp)}
    earlier = repo / "reports" / "ab"  # an earlier run's reports, as kperf ab leaves them
    earlier.mkdir(parents=True)
    (repo / "reports" / ".gitignore").write_text("*\n")
    (earlier / "comment.md").write_text("an earlier run's comment\n")
    os.utime(earlier / "comment.md", (0, 86400 * 365))  # 1971-01-01
    args = ["ab", "--base", "HEAD~1", "--no-gpu", "test_k.py", "test_hang.py"]
    proc, out, err, _ = _terminated_once_started(args, repo, env, room, wait_s=240)
    assert proc.returncode == 143, out + err
    assert err.strip().splitlines()[-1] == "kperf: terminated (SIGTERM)", err
    # the earlier run's reports stay, and the command says they are not this run's (walk 2 of
    # issue 38, finding 25)
    said = "kperf ab: stopped before its reports; reports/ab/ holds an earlier run's"
    said += " (written 1971-01-01 00:00 UTC)"
    assert said in err.splitlines(), err
    assert (earlier / "comment.md").read_text() == "an earlier run's comment\n"
    assert "Traceback" not in err
    worktrees = git(repo, "worktree", "list", "--porcelain")
    assert worktrees.count("worktree ") == 1, worktrees  # the base's checkout is gone
    assert not list(tmp.glob("kperf-base-*")), list(tmp.iterdir())
    time.sleep(1)  # a pass killed with its command is reaped by then
    assert not _cwds_under(tmp) and not _cwds_under(repo), (_cwds_under(tmp), _cwds_under(repo))


def test_sigterm_to_kperf_run_stops_its_pytest_too_and_exits_143(tmp_path):
    """`kperf run` waits for pytest in its own process group: a SIGTERM sent to kperf's pid
    alone is passed on, so no pytest is left running the suite after its command ended."""
    (tmp_path / "test_hang.py").write_text(HANG)
    room = tmp_path / "room"
    room.mkdir()
    env = {**os.environ, "KPERF_TEST_ROOM": str(room), "KPERF_NO_REPORT": "1"}
    proc, out, err, pytest_pid = _terminated_once_started(
        ["run", "test_hang.py"], tmp_path, env, room, wait_s=120
    )
    assert proc.returncode == 143, out + err
    assert err.strip().splitlines()[-1] == "kperf: terminated (SIGTERM)", err
    assert not Path(f"/proc/{pytest_pid}").exists()  # pytest itself ended, and was reaped
