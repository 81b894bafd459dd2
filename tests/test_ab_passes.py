"""How `kperf ab` runs its two static passes (issue 35, memory): side by side by default, a pass
the system kills (SIGKILL, the out-of-memory killer's signal) run again alone, `--passes
sequential` never side by side, and `--passes parallel` a one-line exit 2 naming the kill, the
peak memory and the option.

The "out of memory" is a test that kills its own pytest process with SIGKILL when the other
tree's pass is running at the same time: what the OOM killer does to a pass that only fits alone.
The other pass is seen as a sibling process (another `python -m pytest` child of the same `kperf
ab`, from /proc), which exists from the moment kperf starts it to the moment it ends: of two
passes side by side, the first to reach its test always sees the other alive, and a pass alone
sees none, with no window to wait out (a shared folder of pids made each pass alone wait 20 s
for another that might still come). The CLI runs as a subprocess on a real two-commit
repository on the CPU (static passes only).
"""

from __future__ import annotations

import json
import subprocess
import time

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

# a pass that cannot share the machine: if the other tree's pass is alive beside it, it dies as
# the OOM killer would kill it
TEST = """
import os
import signal
from pathlib import Path

import pytest
import torch
from kernels import copy_kernel


def _other_pass_alive():
    # a live (not zombie) `python -m pytest` whose parent is this pass's parent, the `kperf ab`
    me, parent = os.getpid(), os.getppid()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == me:
            continue
        try:
            stat, cmd = (d / "stat").read_text(), (d / "cmdline").read_bytes()
        except OSError:  # ended meanwhile
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if int(ppid) == parent and state != "Z" and b"\\0-m\\0pytest\\0" in cmd:
            return True
    return False


@pytest.mark.kperf
def test_copy():
    if _other_pass_alive():
        os.kill(os.getpid(), signal.SIGKILL)
    Path(os.environ["KPERF_TEST_ROOM"], str(os.getpid())).touch()  # this pass ran its test
    x = torch.rand(1000)
    y = torch.empty_like(x)
    copy_kernel[(4,)](x, y, 1000, BLOCK=256)
"""


def _repo(tmp_path):
    return make_repo(
        tmp_path / "r",
        {"kernels.py": KERNEL, "test_k.py": TEST},
        {"kernels.py": KERNEL.replace("    m = offs < n\n", "    m = offs < n  # the tail\n")},
    )


@pytest.mark.slow
def test_auto_runs_a_pass_killed_side_by_side_again_alone(tmp_path):
    repo = _repo(tmp_path)
    room = tmp_path / "room"
    room.mkdir()
    p = kperf(
        "ab",
        "--base",
        "HEAD~1",
        "--no-gpu",
        "--json",
        "ab.json",
        cwd=repo,
        env={"KPERF_TEST_ROOM": str(room), "KPERF_PASS_CORES": "8"},  # side by side
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "was killed (SIGKILL; out of memory?)" in p.stdout
    assert "run again alone" in p.stdout
    assert len(list(room.iterdir())) == 2  # a test ran once per tree: the killed pass's on its rerun
    doc = json.loads((repo / "ab.json").read_text())
    assert [t["status"] for t in doc["tests"]] == ["identical"]


@pytest.mark.slow
def test_sequential_never_runs_the_passes_side_by_side(tmp_path):
    repo = _repo(tmp_path)
    room = tmp_path / "room"
    room.mkdir()
    env = {"KPERF_TEST_ROOM": str(room)}
    p = kperf(
        "ab", "--base", "HEAD~1", "--no-gpu", "--passes", "sequential", "--json", "ab.json", cwd=repo, env=env
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "one after the other" in p.stdout
    assert "killed" not in p.stdout
    assert len(list(room.iterdir())) == 2  # both passes ran their test, neither beside the other
    # between the two, what the second will about take (walk 2 of issue 38, finding 17)
    said = [ln for ln in p.stderr.splitlines() if ln.startswith("kperf ab: head static pass took ")]
    assert len(said) == 1 and said[0].endswith("; the base static pass, about as long, starts now"), p.stderr
    assert [t["status"] for t in json.loads((repo / "ab.json").read_text())["tests"]] == ["identical"]


@pytest.mark.slow
def test_a_failing_head_ends_the_check_before_the_base_pass_runs(tmp_path):
    """A newcomer's walk on attorch waited 51 s for "fix them first" where the head's own pass
    took 25 s: a head that fails its tests is judged as its pass ends, the base never runs."""
    broken = TEST + "    assert False, 'the pull request broke this test'\n"
    repo = make_repo(tmp_path / "r", {"kernels.py": KERNEL, "test_k.py": TEST}, {"test_k.py": broken})
    room = tmp_path / "room"
    room.mkdir()
    env = {"KPERF_TEST_ROOM": str(room)}
    p = kperf("ab", "--base", "HEAD~1", "--no-gpu", "--passes", "sequential", cwd=repo, env=env)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "static pass in the head tree: 1 test(s) failed (pytest exit 1); fix them first" in p.stderr
    assert len(list(room.iterdir())) == 1  # the head's test ran; no base pass started
    assert "the base static pass" not in p.stderr


@pytest.mark.slow
def test_parallel_reports_the_kill_in_one_line_exit_2(tmp_path):
    repo = _repo(tmp_path)
    room = tmp_path / "room"
    room.mkdir()
    p = kperf(
        "ab",
        "--base",
        "HEAD~1",
        "--no-gpu",
        "--passes",
        "parallel",
        cwd=repo,
        env={"KPERF_TEST_ROOM": str(room)},
    )
    assert p.returncode == 2, p.stdout + p.stderr
    last = p.stderr.strip().splitlines()[-1]
    assert "was killed (SIGKILL; out of memory?) at a peak of" in last
    assert "--passes sequential" in last
    assert "Traceback" not in p.stderr


def test_an_unknown_pass_order_is_a_usage_error(tmp_path):
    repo = _repo(tmp_path)
    p = kperf("ab", "--base", "HEAD~1", "--passes", "sometimes", cwd=repo)
    assert p.returncode == 2
    assert "--passes" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.slow
def test_auto_runs_the_passes_one_after_the_other_on_fewer_than_four_cores(tmp_path, monkeypatch):
    """Two static passes side by side on a 2-core runner were slower than one after the other
    (118 s against 102 s, docs/walks/issue33-2026-11-27.md item 7): there `auto` is sequential,
    and the terminal says why."""
    from kperf_ci.prcheck.pass_order import resolve_order, usable_cores

    assert resolve_order("auto", cores=2) == "sequential"
    assert resolve_order("auto", cores=4) == "auto"
    assert resolve_order("parallel", cores=1) == "parallel"
    monkeypatch.setenv("KPERF_PASS_CORES", "3")
    assert usable_cores() == 3
    repo = _repo(tmp_path)
    room = tmp_path / "room"
    room.mkdir()
    p = kperf("ab", "--base", "HEAD~1", "--no-gpu", cwd=repo, env={"KPERF_TEST_ROOM": str(room)})
    assert p.returncode == 0, p.stdout + p.stderr
    assert "one after the other (fewer than 4 cores here)" in p.stdout
    assert "killed" not in p.stdout  # the test dies only when the other tree's pass runs beside it
    # the reports kperf wrote in the working tree are kept out of git
    assert (repo / "reports" / "ab" / "comment.md").exists()
    status = subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True)
    assert "reports" not in status.stdout, status.stdout


def _fake_pass(tmp_path, script: str, label: str):
    import sys

    from kperf_ci.prcheck.pass_process import _Pass

    return _Pass([sys.executable, "-c", script], tmp_path, dict(__import__("os").environ), label=label)


def test_a_long_pass_says_how_far_it_got_where_no_terminal_shows_a_bar(tmp_path, capfd, monkeypatch):
    """Issue 33's walk, item 7: for 273 s a CI log showed nothing while the passes ran. While a
    pass runs, one line on stderr names it and pytest's last progress mark; none after it ended,
    none with KPERF_PROGRESS=0."""
    from kperf_ci.prcheck.pass_process import heartbeat

    monkeypatch.delenv("KPERF_PROGRESS", raising=False)
    script = "import sys, time; print('....' + ' ' * 60 + '[ 40%]', flush=True); time.sleep(1.2)"
    p = _fake_pass(tmp_path, script, "head static pass")
    with heartbeat([p], every=0.3):
        rc, out = p.wait()
    assert rc == 0 and "[ 40%]" in out
    err = capfd.readouterr().err
    assert "kperf ab: " in err and "head static pass 40% of its tests" in err, err
    # before the line's first mark: the results so far, not "collecting" (a newcomer's walk read
    # "collecting" for 3 minutes of a static pass whose collection took 4 s)
    script = "import sys, time; print('..s.F', end='', flush=True); time.sleep(1.2)"
    p = _fake_pass(tmp_path, script, "head static pass")
    with heartbeat([p], every=0.3):
        p.wait()
    err = capfd.readouterr().err
    assert "head static pass running its tests, 5 done" in err and "collecting" not in err, err
    monkeypatch.setenv("KPERF_PROGRESS", "0")
    p = _fake_pass(tmp_path, "import time; time.sleep(0.8)", "base static pass")
    with heartbeat([p], every=0.2):
        p.wait()
    assert "kperf ab" not in capfd.readouterr().err


def test_a_pass_is_named_by_its_side_and_mode():
    from kperf_ci.prcheck.pass_process import _label

    assert _label(["--kperf-mode", "static", "--kperf-label", "ab-head-static"]) == "head static pass"
    assert _label(["--kperf-mode", "static", "--kperf-label", "ab-base-static"]) == "base static pass"
    assert _label(["--kperf-mode", "gpu", "--kperf-label", "head"]) == "head timing pass"


def test_the_progress_lines_count_one_clock_across_passes(tmp_path, capfd, monkeypatch):
    """Walk 3 of issue 38, J2-7: the lines read "1m00s: head ...", "2m00s: head ...", then
    "1m00s: base ..." again; docs/pr-check.md shows one clock since kperf ab started."""
    from kperf_ci.prcheck import pass_process

    monkeypatch.delenv("KPERF_PROGRESS", raising=False)
    monkeypatch.setattr(pass_process, "_clock_start", None)
    pass_process.start_clock(time.monotonic() - 125)  # kperf ab started 2 min ago; this pass now
    p = _fake_pass(tmp_path, "import time; time.sleep(0.5)", "base static pass")
    with pass_process.heartbeat([p], every=0.2):
        p.wait()
    lines = [ln for ln in capfd.readouterr().err.splitlines() if ln.startswith("kperf ab: ")]
    assert lines and all(ln.startswith("kperf ab: 2m0") for ln in lines), lines


def test_the_heartbeat_never_reaps_a_pass_so_its_peak_memory_is_kept(tmp_path, monkeypatch):
    """Popen.poll from the heartbeat's thread would reap the pass before _reap's wait4, and the
    peak memory that a killed pass's message gives would be lost."""
    from kperf_ci.prcheck.pass_process import heartbeat

    monkeypatch.delenv("KPERF_PROGRESS", raising=False)
    p = _fake_pass(tmp_path, "import time; time.sleep(0.3)", "head static pass")
    with heartbeat([p], every=0.01):
        time.sleep(0.6)  # the pass ends while the heartbeat looks at it many times
        rc, _ = p.wait()
    assert rc == 0 and p.peak_rss_mb is not None and p.peak_rss_mb > 1


def test_the_progress_line_names_a_test_running_past_the_slow_mark():
    """Walk 2 of issue 38, finding 16: the progress sat at "head static pass 41% of its tests" for
    over a minute without naming the slow test, which the pass's own output had named."""
    from kperf_ci.prcheck.pass_process import _how_far

    slow = (
        "kperf: tests/test_x.py::test_big[a] is still running after 30 s under Triton's interpreter "
        "(static mode); --kperf-test-budget SECONDS skips such tests\n"
    )
    from kperf_ci.config import slow_test_line

    assert slow == slow_test_line("", "tests/test_x.py::test_big[a]", 30.0) + "\n"  # the plugin's line
    head = "." * 72 + " [ 41%]\n.."
    assert (
        _how_far(head + "\n" + slow) == "41% of its tests, tests/test_x.py::test_big[a] running for over 30 s"
    )
    assert _how_far("..\n" + slow) == "running its tests, tests/test_x.py::test_big[a] running for over 30 s"
    assert _how_far(head + "\n" + slow_test_line("[gw1] ", "tests/test_x.py::test_big[a]", 30.0)).endswith(
        "test_big[a] running for over 30 s"
    )
    # it ended: its result follows the line, and the progress is the marks again
    assert _how_far(head + "\n" + slow + ".") == "41% of its tests"
    assert _how_far(head) == "41% of its tests" and _how_far("") == "collecting"
