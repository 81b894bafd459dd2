"""Where a command writes its reports: a directory it creates inside a repository's working tree
is kept out of git."""

from __future__ import annotations

import os
from pathlib import Path

#: what the topmost directory kperf creates holds, so that ``git status`` does not list it
GITIGNORE = "# written by kperf-ci: its reports and databases are not part of the repository\n*\n"


def make_output_dir(path: str | os.PathLike[str]) -> None:
    """Create ``path`` and its missing parents; the topmost one created gets a ``.gitignore``
    that ignores everything in it (`kperf ab`'s default ``reports/`` in a pull request's working
    tree read ``?? reports/`` and was easy to commit by accident). A directory that existed is
    left as it was. OSError as ``Path.mkdir`` raises it."""
    p = Path(path).absolute()
    missing = [d for d in (p, *p.parents) if not d.exists()]
    p.mkdir(parents=True, exist_ok=True)
    if missing:
        (missing[-1] / ".gitignore").write_text(GITIGNORE, encoding="utf-8")
