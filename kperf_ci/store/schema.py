"""Schema of a run database: the migrations (append only), the schema version, run statuses."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlite_utils

from .errors import CorruptDatabaseError

# runs.status. A run is marked complete only by the process that wrote all of it:
#   running      created before its results (an xdist controller writes the row at the start);
#                a run still "running" was killed or is being written right now
#   complete     finished, with at least one variant
#   empty        finished, but no variant was measured (e.g. no marked test ran)
#   interrupted  stopped early (Ctrl-C, a crashed xdist worker): holds only part of what it should
RUNNING, COMPLETE, EMPTY, INTERRUPTED = "running", "complete", "empty", "interrupted"
RUN_STATUSES = (RUNNING, COMPLETE, EMPTY, INTERRUPTED)
#: Never picked as "the latest run" nor listed by default; loaded only by an explicit id.
INCOMPLETE = (RUNNING, INTERRUPTED)


def _execute_script(db: sqlite_utils.Database, script: str) -> None:
    """Run several statements inside the caller's transaction.

    Not ``executescript``: Python's sqlite3 (and sqlite-utils before 4.0) COMMITs any open
    transaction before running a script, which ends our BEGIN IMMEDIATE half-way through a
    migration ("cannot commit - no transaction is active" on sqlite-utils 3.38)."""
    statement = ""
    for line in script.splitlines(keepends=True):
        statement += line
        if sqlite3.complete_statement(statement):
            db.conn.execute(statement)
            statement = ""
    if statement.strip():
        raise ValueError(f"incomplete SQL statement in migration: {statement.strip()[:80]!r}")


def _m001_initial(db: sqlite_utils.Database) -> None:
    _execute_script(
        db,
        """
        CREATE TABLE runs (
            run_id TEXT PRIMARY KEY,
            started_at TEXT NOT NULL,
            mode TEXT NOT NULL,
            git_sha TEXT,
            git_branch TEXT,
            label TEXT,
            kperf_version TEXT,
            fingerprint TEXT NOT NULL,
            gpu TEXT,
            triton TEXT,
            host_hash TEXT
        );
        CREATE INDEX idx_runs_started_at ON runs(started_at);
        CREATE INDEX idx_runs_label ON runs(label, started_at);
        CREATE TABLE kernels (
            id INTEGER PRIMARY KEY,
            name TEXT NOT NULL,
            source TEXT NOT NULL DEFAULT '',
            UNIQUE(name, source)
        );
        CREATE TABLE variants (
            id TEXT PRIMARY KEY,
            kernel_id INTEGER NOT NULL REFERENCES kernels(id),
            arch TEXT NOT NULL,
            spec TEXT NOT NULL DEFAULT '',
            config TEXT NOT NULL DEFAULT ''
        );
        CREATE INDEX idx_variants_kernel ON variants(kernel_id);
        CREATE TABLE run_variants (
            run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
            variant_id TEXT NOT NULL REFERENCES variants(id),
            test TEXT NOT NULL DEFAULT '',
            tags TEXT NOT NULL DEFAULT '[]',
            thresholds TEXT NOT NULL DEFAULT '{}',
            sass_hash TEXT,
            error TEXT,
            PRIMARY KEY (run_id, variant_id)
        );
        CREATE INDEX idx_run_variants_variant ON run_variants(variant_id);
        CREATE TABLE metrics (
            run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
            variant_id TEXT NOT NULL,
            name TEXT NOT NULL,
            value REAL NOT NULL,
            unit TEXT NOT NULL DEFAULT '',
            kind TEXT NOT NULL DEFAULT 'static',
            better TEXT NOT NULL DEFAULT 'lower',
            PRIMARY KEY (run_id, variant_id, name)
        ) WITHOUT ROWID;
        CREATE INDEX idx_metrics_variant_name ON metrics(variant_id, name);
        CREATE TABLE samples (
            run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
            variant_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            value_ms REAL NOT NULL,
            PRIMARY KEY (run_id, variant_id, seq)
        ) WITHOUT ROWID;
        CREATE TABLE blobs (
            run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
            variant_id TEXT NOT NULL DEFAULT '',
            name TEXT NOT NULL,
            data BLOB NOT NULL,
            PRIMARY KEY (run_id, variant_id, name)
        );
        """,
    )


def _m002_run_status(db: sqlite_utils.Database) -> None:
    # Runs written before version 2 are taken as finished: complete, or empty when they hold no
    # variant (an old run cut short by Ctrl-C can only be told apart by that).
    _execute_script(
        db,
        """
        ALTER TABLE runs ADD COLUMN status TEXT NOT NULL DEFAULT 'complete';
        UPDATE runs SET status = 'empty'
            WHERE NOT EXISTS (SELECT 1 FROM run_variants rv WHERE rv.run_id = runs.run_id);
        CREATE INDEX idx_runs_status ON runs(status, started_at);
        """,
    )


#: Ordered migrations; schema version N means the first N have been applied. Append only.
MIGRATIONS: list[Callable[[sqlite_utils.Database], None]] = [_m001_initial, _m002_run_status]
SCHEMA_VERSION = len(MIGRATIONS)

#: The tables every schema version from 1 on has.
TABLES = ("meta", "runs", "kernels", "variants", "run_variants", "metrics", "samples", "blobs")
# Tables whose rows belong to one run, in the order they are copied/deleted.
_RUN_TABLES = ("run_variants", "metrics", "samples", "blobs")


def schema_version(conn: sqlite3.Connection, path: Path) -> int | None:
    """Schema version recorded in the file, 0 for an empty SQLite file, None if not ours."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "meta" not in tables:
        return 0 if not tables else None
    row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    try:
        return int(row[0]) if row else 0
    except (TypeError, ValueError):
        raise CorruptDatabaseError(
            path, f"meta.schema_version is {row[0]!r}, not a number", "restore the file from git or delete it"
        ) from None
