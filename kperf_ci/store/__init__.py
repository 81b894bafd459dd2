"""Run databases: one SQLite file holds any number of runs, read and written with sqlite-utils.

Plain functions over a path; each call opens the file, validates it, does its work and closes it.
Every save is ONE ``BEGIN IMMEDIATE`` transaction on a WAL database with a long busy timeout, so
several processes (pytest-xdist workers, parallel CI jobs) can write into one file and lose nothing.

A file is validated before anything is written to it: the SQLite header, ``PRAGMA quick_check``
and the schema version. A file that fails is never migrated, converted to WAL or overwritten; the
error (a :class:`StoreError`) says in one line which file, what is wrong and what to do.
A reader never writes its input: a file of an older schema is read through a migrated copy
(a committed baseline, a read-only mount); only a writer migrates a file in place.

Layout: :mod:`.schema` (tables, migrations, run statuses), :mod:`.db` (opening and validating a
file, the write transaction), :mod:`.runs` (saving and loading runs), :mod:`.blobs` (artifacts),
:mod:`.locks` (retry and divert when another writer holds the lock), :mod:`.queries` (one metric
across runs, folding the WAL), :mod:`.merge` (``kperf merge``'s writer). Callers use the names below.
"""

from __future__ import annotations

from .blobs import Blob, blob_names, load_blob, save_blob
from .db import cannot_create_in, check_writable, open_db, same_database
from .errors import (
    CorruptDatabaseError,
    DatabaseLockedError,
    MissingDatabaseError,
    NewerSchemaError,
    ReadOnlyDatabaseError,
    RunNotFoundError,
    StoreError,
)
from .locks import RunDivertedError, pending_path, retry_locked, write_or_divert
from .queries import OperationalError, RunSize, fold_wal, metric_values, run_sizes
from .runs import (
    RunsUpdate,
    add_results,
    copy_run,
    finish_run,
    list_runs,
    load_run,
    metric_history,
    rows_typed,
    run_statuses,
    save_run,
    save_runs,
)
from .schema import COMPLETE, EMPTY, INCOMPLETE, INTERRUPTED, RUN_STATUSES, RUNNING, SCHEMA_VERSION

__all__ = [
    "SCHEMA_VERSION",
    "StoreError",
    "MissingDatabaseError",
    "CorruptDatabaseError",
    "NewerSchemaError",
    "ReadOnlyDatabaseError",
    "RunNotFoundError",
    "DatabaseLockedError",
    "RUNNING",
    "COMPLETE",
    "INTERRUPTED",
    "EMPTY",
    "RUN_STATUSES",
    "INCOMPLETE",
    "open_db",
    "OperationalError",
    "fold_wal",
    "metric_values",
    "cannot_create_in",
    "check_writable",
    "save_run",
    "save_runs",
    "RunsUpdate",
    "add_results",
    "finish_run",
    "pending_path",
    "write_or_divert",
    "retry_locked",
    "RunDivertedError",
    "same_database",
    "load_run",
    "list_runs",
    "run_sizes",
    "RunSize",
    "run_statuses",
    "metric_history",
    "save_blob",
    "load_blob",
    "blob_names",
    "copy_run",
    "rows_typed",
    "Blob",
]
