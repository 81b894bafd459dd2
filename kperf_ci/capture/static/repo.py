"""Where a file's repository is: the git work tree that names kernel sites and test ids the same
from any directory (:func:`git_toplevel`), and the one error a user sees for a bad revision or a
directory outside git (:class:`ABError`). Below both the static job (sites) and the base revision's
checkout (``launches/base_tree.py``), so it lives in the lowest layer of capture.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from kperf_ci.git import GitError, git


class ABError(Exception):
    """A user-facing problem (bad revision, not a git repository); one line, no traceback."""


def run_git(repo: Path, *args: str) -> str:
    """``git -C repo ARGS``'s output (:func:`kperf_ci.git.git`); a missing git or a failing
    command is an :class:`ABError`, the one line the user sees."""
    try:
        return git(repo, *args)
    except GitError as e:
        raise ABError(str(e)) from e


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
