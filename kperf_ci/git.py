"""The one place kperf-ci runs git: the checkout a run fingerprints, the base revision `kperf ab`
checks out, the last release a gate compares with, the branch the agent pushes. One runner, so
that a missing git, a failing command and a hung one read alike everywhere.
"""

from __future__ import annotations

import os
import subprocess

#: seconds a git command may take; git on a local repository answers in milliseconds, and a
#: command waiting for a credential or a lock must not hang a CI job
TIMEOUT_S = 120.0


class GitError(RuntimeError):
    """git is missing, or a command failed: one line naming the command and git's last words."""


def git(repo: str | os.PathLike[str], *args: str, timeout: float = TIMEOUT_S) -> str:
    """``git -C repo ARGS``'s output, stripped; :class:`GitError` when git is missing, the command
    fails or it runs past ``timeout``."""
    try:
        p = subprocess.run(
            ["git", "-C", os.fspath(repo), *args], capture_output=True, text=True, timeout=timeout
        )
    except FileNotFoundError as e:
        raise GitError("git is not installed") from e
    except (OSError, subprocess.SubprocessError) as e:
        raise GitError(f"git {' '.join(args[:2])} failed: {type(e).__name__}") from e
    if p.returncode != 0:
        last = (p.stderr or p.stdout or "").strip().splitlines()
        raise GitError(f"git {' '.join(args)} failed: {last[-1] if last else p.returncode}")
    return p.stdout.strip()


def git_or_none(repo: str | os.PathLike[str], *args: str, timeout: float = 10.0) -> str | None:
    """The output, or None when git is missing, fails, runs past ``timeout`` or prints nothing
    (what a run's fingerprint records outside a checkout)."""
    try:
        return git(repo, *args, timeout=timeout) or None
    except GitError:
        return None
