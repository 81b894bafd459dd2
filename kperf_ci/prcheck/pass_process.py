"""One pytest pass of the PR check as a subprocess in one tree (head or base): its environment,
its command line, its output and peak memory."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from kperf_ci.config import ENV_PROFILE_DIR, env_name


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
    return env


def _pytest(
    root: Path, rel_cwd: Path, args: list[str], kperf_args: list[str], python: str
) -> tuple[int, str]:
    return _start(root, rel_cwd, args, kperf_args, python).wait()


class _Pass:
    """One pytest pass running as a subprocess; its output goes to a temporary file, so that
    two passes can run side by side without filling a pipe."""

    def __init__(self, cmd: list[str], cwd: Path, env: dict[str, str]) -> None:
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
    return _Pass(cmd, root / rel_cwd, _env_for(root))


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
