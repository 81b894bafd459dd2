"""A database another writer holds locked: retry with backoff, then divert the run to a side file
so nothing measured is lost."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from . import db as _db
from .errors import DatabaseLockedError, StoreError

T = TypeVar("T")

# A write that still finds the database locked after BUSY_TIMEOUT_S is tried again this many
# times in all, waiting LOCK_BACKOFF_S, then twice that, ... in between (see write_or_divert).
LOCK_ATTEMPTS = 3
LOCK_BACKOFF_S = 5.0


def pending_path(path: str | os.PathLike[str], run_id: str) -> Path:
    """Where a run goes when ``path`` stays locked: ``<db>.pending-<run id>.db`` beside it."""
    p = Path(path)
    return p.with_name(f"{p.name}.pending-{run_id}.db")


def retry_locked(write: Callable[[], T], *, sleep: Callable[[float], None] = time.sleep) -> T:
    """``write()``, tried LOCK_ATTEMPTS times in all while it raises :class:`DatabaseLockedError`
    (each try already waits BUSY_TIMEOUT_S for the lock), backing off from LOCK_BACKOFF_S."""
    delay = LOCK_BACKOFF_S
    for _ in range(LOCK_ATTEMPTS - 1):
        try:
            return write()
        except DatabaseLockedError:
            sleep(delay)
            delay *= 2
    return write()


class RunDivertedError(DatabaseLockedError):
    """The database stayed locked, or could not take the run (``failed``: why), so the run was
    written to ``written_to`` instead."""

    def __init__(self, path: Path, run_id: str, written_to: Path, failed: str | None = None):
        self.written_to = written_to
        waited = LOCK_ATTEMPTS * _db.BUSY_TIMEOUT_S
        # `kperf merge` into the database itself: it keeps every row already there and is safe
        # to run again (the README's pending files)
        merge_in = f"`kperf merge {path} {written_to} -o {path}`"
        if failed is None:
            problem = f"stayed locked by another writer for over {waited:.0f} s"
            fix = f"merge it in when the lock is gone ({merge_in}), or use it as it is (--db {written_to})"
        else:
            problem = f"could not store the run ({failed})"
            fix = (
                f"restore {path} (from git or its artifact), then merge it in ({merge_in}), "
                f"or use it as it is (--db {written_to})"
            )
        super().__init__(path, f"{problem}; run {run_id} was written to {written_to} instead", fix)


def write_or_divert(
    path: str | os.PathLike[str],
    run_id: str,
    write: Callable[[Path], object],
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> Path:
    """``write(path)`` with :func:`retry_locked`; when the database is still locked after that,
    ``write(pending_path(path, run_id))`` so that nothing measured is lost, and raise
    :class:`RunDivertedError` naming that file. Returns ``path`` when the write went there."""
    p = Path(path)
    failed: StoreError | None = None
    try:
        retry_locked(lambda: write(p), sleep=sleep)
        return p
    except DatabaseLockedError:
        pass
    except StoreError as e:
        # the database could not take the run (its header overwritten by the code under test,
        # a file made read-only meanwhile): what was measured is kept all the same
        failed = e
    side = pending_path(p, run_id)
    try:
        write(side)  # a new file next to the locked one: nobody else holds its lock
    except StoreError:
        if failed is not None:
            raise failed from None  # the side file cannot be written either: the first cause
        raise
    raise RunDivertedError(p, run_id, side, failed.problem if failed is not None else None)
