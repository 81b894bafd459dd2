"""One pytest pass of the PR check as a subprocess in one tree (head or base): its environment,
its command line, its output and peak memory."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from kperf_ci.config import ENV_FREEZE_AT_EXIT, ENV_PROFILE_DIR, ENV_PROGRESS, SLOW_TEST_LINE, env_name
from kperf_ci.config_values import FALSE_WORDS

#: while passes run, one line on stderr this often: a CI log (no terminal, so no progress bar)
#: showed nothing for the 273 s of a first `kperf ab` on mamba (issue 33's walk, item 7)
HEARTBEAT_S = 60.0


def _env_for(root: Path) -> dict[str, str]:
    """The tree's own sources first on sys.path, so an installed (head) copy of the project
    does not shadow the base tree's modules."""
    env = os.environ.copy()
    paths = [str(root)] + ([str(root / "src")] if (root / "src").is_dir() else [])
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    # the passes are judged here, base against head: the project's own baseline comparison
    # ([tool.kperf] baseline) would end a pass with exit 1 on a regression, read as failing tests
    env[env_name("baseline")] = ""
    # a pass is a process of kperf's, ended once its database is written: skip the shutdown's
    # collections of torch's objects (0.4-0.6 s of a core a pass; KPERF_FREEZE_AT_EXIT=0 keeps them)
    env.setdefault(ENV_FREEZE_AT_EXIT, "1")
    return env


def _pytest(
    root: Path, rel_cwd: Path, args: list[str], kperf_args: list[str], python: str
) -> tuple[int, str]:
    p = _start(root, rel_cwd, args, kperf_args, python)
    with heartbeat([p]):
        return p.wait()


class _Pass:
    """One pytest pass running as a subprocess; its output goes to a temporary file, so that
    two passes can run side by side without filling a pipe."""

    def __init__(self, cmd: list[str], cwd: Path, env: dict[str, str], label: str = "pass") -> None:
        self.label = label  # "head static pass": what the heartbeat names
        self.out = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
        self.proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=self.out, stderr=subprocess.STDOUT, text=True
        )
        self.peak_rss_mb: float | None = None  # the pass's largest resident set (its own, or a child's)

    def _reap(self) -> int:
        """Wait for the pass; where the OS tells, keep its peak memory (a pass killed for memory
        is then reported with the peak it reached)."""
        if not hasattr(os, "wait4"):
            return self.proc.wait()
        while True:
            try:
                _, status, usage = os.wait4(self.proc.pid, 0)
                break
            except InterruptedError:
                continue
            except ChildProcessError:  # reaped elsewhere already
                return self.proc.wait()
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self.peak_rss_mb = usage.ru_maxrss / 1024  # KiB on Linux
        return self.proc.returncode

    def wait(self) -> tuple[int, str]:
        try:
            rc = self._reap()
        except BaseException:  # Ctrl-C: no pass outlives the command
            self.proc.kill()
            self.proc.wait()
            raise
        self.out.seek(0)
        text = self.out.read()
        self.out.close()
        return rc, text

    def running(self) -> bool:
        """Whether the process still runs, without reaping it: ``Popen.poll`` from another thread
        would reap it first, and ``_reap`` would lose the peak memory a killed pass is told by."""
        if self.proc.returncode is not None:
            return False
        if not hasattr(os, "waitid"):
            return self.proc.poll() is None
        try:
            return os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
        except ChildProcessError:
            return False

    def progress(self) -> str:
        """How far pytest got, from the last "[ 40%]" of its -q output so far, read from the file
        without moving the reader's offset. Before the first mark (pytest writes one per line of
        80 results, minutes apart where each test compiles), the results of the line so far,
        which pytest flushes one by one; "collecting" before any."""
        try:
            fd = self.out.fileno()
            size = os.fstat(fd).st_size
            tail = os.pread(fd, 4096, max(0, size - 4096)).decode("utf-8", "replace")
        except (OSError, ValueError):  # closed: the pass has ended
            return "ended"
        return _how_far(tail)


def _how_far(tail: str) -> str:
    """``_Pass.progress`` of the end of a pass's output. A test named as slow with nothing written
    after it is running still, and is named: the progress sat at "41% of its tests" for minutes
    without saying which (walk 2 of issue 38, finding 16)."""
    marks = re.findall(r"\[\s*(\d+)%\]", tail)
    line = tail.rstrip("\n").rsplit("\n", 1)[-1]
    slow = SLOW_TEST_LINE.search(line)
    if slow:
        now = f"{marks[-1]}% of its tests" if marks else "running its tests"
        return f"{now}, {slow.group(1)} running for over {slow.group(2)} s"
    if marks:
        return f"{marks[-1]}% of its tests"
    line = tail.rsplit("\n", 1)[-1]
    if re.fullmatch(r"[.FEsxX]+", line):  # pytest -q's result letters, one per test
        return f"running its tests, {len(line)} done"
    return "collecting"


#: when the command that runs the passes started: every progress line counts from it, one clock
#: for the whole of ``kperf ab`` (walk 3 of issue 38, J2-7: each pass restarted it at 0)
_clock_start: float | None = None


def start_clock(at: float | None = None) -> None:
    """Count the progress lines from ``at`` (a ``time.monotonic()``; now when None)."""
    global _clock_start
    _clock_start = time.monotonic() if at is None else at


def _elapsed(s: float) -> str:
    return f"{int(s // 60)}m{int(s % 60):02d}s" if s >= 60 else f"{s:.0f}s"


def _progress_on() -> bool:
    return os.environ.get(ENV_PROGRESS, "").strip().lower() not in FALSE_WORDS


def say_next_pass(done_label: str, took_s: float, next_label: str) -> None:
    """Between passes run one after the other: how long the first took, which is what the next
    will about take (the same tests in the other tree), where the progress clock starts anew
    (walk 2 of issue 38, finding 17: no estimate anywhere); none with KPERF_PROGRESS=0."""
    if _progress_on():
        print(
            f"kperf ab: {done_label} took {_elapsed(took_s)}; the {next_label}, about as long, starts now",
            file=sys.stderr,
            flush=True,
        )


@contextlib.contextmanager
def heartbeat(passes: list[_Pass], every: float | None = None) -> Iterator[None]:
    """Every ``every`` seconds (:data:`HEARTBEAT_S`) while the block runs, one line on stderr
    naming each pass still running and how far its tests got; none with KPERF_PROGRESS=0."""
    if not _progress_on():
        yield
        return
    period = HEARTBEAT_S if every is None else every
    stop = threading.Event()
    t0 = _clock_start if _clock_start is not None else time.monotonic()

    def beat() -> None:
        while not stop.wait(period):
            running = [f"{p.label} {p.progress()}" for p in passes if p.running()]
            if running:
                print(
                    f"kperf ab: {_elapsed(time.monotonic() - t0)}: " + "; ".join(running),
                    file=sys.stderr,
                    flush=True,
                )

    thread = threading.Thread(target=beat, name="kperf-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _start(root: Path, rel_cwd: Path, args: list[str], kperf_args: list[str], python: str) -> _Pass:
    # One rootdir for every pass (the invocation directory, unless the user names one): node ids
    # are relative to it, and the static passes' ids select the tests of the timing pass.  Left
    # to pytest, a repository without a pytest config gets a rootdir from the arguments, which
    # differ between the passes.
    rootdir = (
        []
        if any(a == "--rootdir" or a.startswith("--rootdir=") for a in args)
        else [f"--rootdir={root / rel_cwd}"]
    )
    pytest = ["-m", "pytest", "-q", "-p", "no:cacheprovider", *rootdir, "--kperf", *kperf_args, *args]
    cmd = [python, *_profiled(kperf_args), *pytest]
    return _Pass(cmd, root / rel_cwd, _env_for(root), label=_label(kperf_args))


def _label(kperf_args: list[str]) -> str:
    """The pass's name in a heartbeat line ("head static pass", "head timing pass"), from its
    ``--kperf-label`` (``ab-head-static``, ``head``) and ``--kperf-mode``."""

    def value(opt: str) -> str:
        return kperf_args[kperf_args.index(opt) + 1] if opt in kperf_args[:-1] else ""

    label, mode = value("--kperf-label"), value("--kperf-mode")
    side = next((w for w in ("head", "base") if w in label.split("-")), label or "a")
    kind = "timing" if mode == "gpu" else mode
    return " ".join(w for w in (side, kind, "pass") if w)


def _profiled(kperf_args: list[str]) -> list[str]:
    """``-m cProfile -o <dir>/<label>.prof`` where ENV_PROFILE_DIR names a folder (the PR
    check's passes profiled where they run, before optimizing them), else nothing."""
    folder = os.environ.get(ENV_PROFILE_DIR)
    if not folder:
        return []
    label = (
        kperf_args[kperf_args.index("--kperf-label") + 1] if "--kperf-label" in kperf_args[:-1] else "pass"
    )
    os.makedirs(folder, exist_ok=True)
    return ["-m", "cProfile", "-o", os.path.join(folder, f"{label}.prof")]
