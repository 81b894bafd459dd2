"""Where a file's repository is: the git work tree that names kernel sites and test ids the same
from any directory (:func:`git_toplevel`), and the one error a user sees for a bad revision or a
directory outside git (:class:`ABError`). Below both the static job (sites) and the base revision's
checkout (``launches/base_tree.py``), so it lives in the lowest layer of capture.
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path


class ABError(Exception):
    """A user-facing problem (bad revision, not a git repository); one line, no traceback."""


def run_git(repo: Path, *args: str) -> str:
    """``git -C repo ARGS``'s output; a missing git or a failing command is an :class:`ABError`."""
    try:
        out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True)
    except FileNotFoundError as e:
        raise ABError("git is not installed") from e
    except subprocess.CalledProcessError as e:
        msg = (e.stderr or e.stdout or "").strip().splitlines()
        raise ABError(f"git {' '.join(args)} failed: {msg[-1] if msg else e.returncode}") from e
    return out.stdout.strip()


def repo_root(path: str | os.PathLike[str] = ".") -> Path:
    try:
        return Path(run_git(Path(path), "rev-parse", "--show-toplevel"))
    except ABError as e:
        if "git is not installed" in str(e):
            raise
        raise ABError(
            f"{Path(path).resolve()} is not inside a git repository; run kperf ab from the repository "
            "whose pull request you check"
        ) from None


@functools.lru_cache(maxsize=256)
def git_toplevel(directory: str | os.PathLike[str]) -> Path | None:
    """The root of the git work tree holding ``directory`` (resolved), or None outside one.
    Where kperf names files (test ids, kernel sites) it names them relative to this, the same
    whatever directory pytest ran from."""
    try:
        return repo_root(directory).resolve()
    except (ABError, OSError):
        return None
