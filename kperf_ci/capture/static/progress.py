"""A progress bar (rich) for static capture's compile step: counts, failures and an ETA.

Quiet where it would only add noise: when stderr is not a terminal (CI logs), under an xdist
worker (its output is not the user's terminal), or with ``KPERF_PROGRESS=0``.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kperf_ci.config import ENV_PROGRESS


def progress_wanted() -> bool:
    flag = os.environ.get(ENV_PROGRESS, "").strip().lower()
    if flag in ("0", "false", "no", "off"):
        return False
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return False
    return flag in ("1", "true", "yes", "on") or sys.stderr.isatty()


class CompileProgress:
    """``advance(response)`` once per finished compile; thread-safe (pool threads call it)."""

    def __init__(self, total: int, description: str, progress: Any = None) -> None:
        self.total = total
        self.done = 0
        self.failed = 0
        self._progress = progress
        self._task = progress.add_task(description, total=total, failed=0) if progress is not None else None
        self._lock = threading.Lock()

    def advance(self, response: dict[str, Any]) -> None:
        with self._lock:
            self.done += 1
            if not response.get("ok"):
                self.failed += 1
            if self._progress is not None:
                self._progress.update(self._task, advance=1, failed=self.failed)


@contextmanager
def compile_progress(total: int, description: str = "kperf: compiling variants") -> Iterator[CompileProgress]:
    """A :class:`CompileProgress`; drawn on stderr only when :func:`progress_wanted`."""
    if total < 2 or not progress_wanted():
        yield CompileProgress(total, description)
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[failed]} failed"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        yield CompileProgress(total, description, progress)
