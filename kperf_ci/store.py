"""Run databases: one SQLite file holds any number of runs, read and written with sqlite-utils.

Plain functions over a path; each call opens the file, validates it, does its work and closes it.
Every save is ONE ``BEGIN IMMEDIATE`` transaction on a WAL database with a long busy timeout, so
several processes (pytest-xdist workers, parallel CI jobs) can write into one file and lose nothing.

A file is validated before anything is written to it: the SQLite header, ``PRAGMA quick_check``
and the schema version. A file that fails is never migrated, converted to WAL or overwritten; the
error (a :class:`StoreError`) says in one line which file, what is wrong and what to do.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import sys
import time
import urllib.parse
import zlib
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import TypeVar

import sqlite_utils

from .model import (
    Fingerprint,
    RunInfo,
    RunRecord,
    VariantKey,
    VariantResult,
    canonical_json,
    make_metric,
)

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
    "save_run",
    "add_results",
    "finish_run",
    "pending_path",
    "write_or_divert",
    "retry_locked",
    "RunDivertedError",
    "same_database",
    "load_run",
    "list_runs",
    "run_statuses",
    "metric_history",
    "save_blob",
    "load_blob",
    "blob_names",
    "copy_run",
    "rows_typed",
]

T = TypeVar("T")

BUSY_TIMEOUT_S = 30.0
CACHE_KIB = 64 * 1024
# A write that still finds the database locked after BUSY_TIMEOUT_S is tried again this many
# times in all, waiting LOCK_BACKOFF_S, then twice that, ... in between (see write_or_divert).
LOCK_ATTEMPTS = 3
LOCK_BACKOFF_S = 5.0

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
_SQLITE_HEADER = b"SQLite format 3\x00"


# --------------------------------------------------------------------------- errors


class StoreError(Exception):
    """A run database cannot be used. ``str(e)`` is one line: file, problem, fix."""

    def __init__(self, path: str | os.PathLike[str], problem: str, fix: str):
        self.path = str(path)
        self.problem = " ".join(problem.split())  # one line, whatever SQLite said
        self.fix = fix
        super().__init__(f"{self.path}: {self.problem}; {fix}")


class MissingDatabaseError(StoreError):
    pass


class CorruptDatabaseError(StoreError):
    pass


class NewerSchemaError(StoreError):
    pass


class ReadOnlyDatabaseError(StoreError):
    pass


class RunNotFoundError(StoreError):
    pass


class DatabaseLockedError(StoreError):
    """Another process held the write lock for longer than the busy timeout."""


# --------------------------------------------------------------------------- schema


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

# Tables whose rows belong to one run, in the order they are copied/deleted.
_RUN_TABLES = ("run_variants", "metrics", "samples", "blobs")


# --------------------------------------------------------------------------- opening


def _schema_version(conn: sqlite3.Connection, path: Path) -> int | None:
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


def _check_header(path: Path) -> bool:
    """True if the file is empty (a fresh database), False if it has a valid header; raise otherwise."""
    with open(path, "rb") as f:
        head = f.read(100)
    if not head:
        return True
    if not head.startswith(_SQLITE_HEADER):
        raise CorruptDatabaseError(
            path,
            "not a SQLite database (bad header)",
            "point --db/--baseline at a kperf run database or delete it",
        )
    if len(head) < 100:
        raise CorruptDatabaseError(path, "truncated SQLite file", "restore the file from git or delete it")
    return False


def _connect(path: Path, *, write: bool) -> sqlite3.Connection:
    """Open and validate; never writes. Raises StoreError subclasses."""
    if not path.exists():
        if not write:
            raise MissingDatabaseError(
                path,
                "no such run database",
                "check the path, or create it with `pytest --kperf` / `kperf import`",
            )
        parent = path.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ReadOnlyDatabaseError(
                path,
                f"cannot create directory {parent} ({e.strerror})",
                "choose a writable path (--db / KPERF_DB)",
            ) from None
        if not os.access(parent, os.W_OK | os.X_OK):
            raise ReadOnlyDatabaseError(
                path, f"directory {parent} is not writable", "choose a writable path (--db / KPERF_DB)"
            )
    elif path.is_dir():
        raise CorruptDatabaseError(path, "is a directory, not a database file", "give the path of a .db file")
    else:
        _check_header(path)
        if write and not os.access(path, os.W_OK):
            raise ReadOnlyDatabaseError(
                path,
                "file is read-only",
                "make it writable (chmod u+w) or choose another path (--db / KPERF_DB)",
            )
        if write and not os.access(path.parent, os.W_OK | os.X_OK):  # WAL needs its -wal/-shm files
            raise ReadOnlyDatabaseError(
                path, f"directory {path.parent} is not writable", "choose a writable path (--db / KPERF_DB)"
            )
    check = _VALIDATED.get(str(path.resolve())) != _signature(path)
    try:
        return _checked_conn(path, str(path), uri=False, check=check)
    except sqlite3.OperationalError as e:
        if write or not _is_readonly_error(e):
            raise _translate(e, path) from None
    # Reading a WAL database in a directory we cannot write (no -shm can be made): open it
    # immutable. Safe because nobody can be writing it from here either.
    uri = "file:" + urllib.parse.quote(str(path.resolve())) + "?immutable=1"
    return _checked_conn(path, uri, uri=True, check=check)


# Files this process validated (quick_check) or wrote itself, with their stat signature at that
# time: unchanged since, they are not checked again (quick_check reads the whole file).
_VALIDATED: dict[str, tuple] = {}


def _signature(path: Path) -> tuple | None:
    sig = []
    for p in (path, Path(str(path) + "-wal")):
        try:
            st = p.stat()
        except OSError:
            sig.append(None)
            continue
        sig.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(sig) if sig[0] is not None else None


def _checked_conn(path: Path, target: str, *, uri: bool, check: bool = True) -> sqlite3.Connection:
    """Connect and run ``PRAGMA quick_check`` (unless ``check`` is False: then only the schema
    is read, which still fails on a broken header). OperationalError (locks, permissions) propagates."""
    conn = sqlite3.connect(target, timeout=BUSY_TIMEOUT_S, isolation_level=None, uri=uri)
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        check = conn.execute("PRAGMA quick_check").fetchall() if check else [("ok",)]
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        if check != [("ok",)]:
            detail = str(check[0][0]) if check else "no result"
            raise CorruptDatabaseError(
                path, f"integrity check failed ({detail[:120]})", "restore the file from git or delete it"
            )
    except sqlite3.OperationalError as e:
        conn.close()
        if "malformed" in str(e) or "not a database" in str(e):
            raise _corrupt(path, e) from None
        raise
    except sqlite3.DatabaseError as e:
        conn.close()
        raise _corrupt(path, e) from None
    except BaseException:
        conn.close()
        raise
    return conn


def _corrupt(path: Path, e: Exception) -> CorruptDatabaseError:
    return CorruptDatabaseError(
        path, f"corrupt SQLite database ({e})", "restore the file from git or delete it"
    )


def _is_readonly_error(e: sqlite3.Error) -> bool:
    msg = str(e)
    return "readonly" in msg or "read-only" in msg or "unable to open" in msg


def _migrate(db: sqlite_utils.Database, path: Path) -> None:
    """Apply pending migrations, each in its own BEGIN IMMEDIATE transaction, recorded in meta."""
    conn = db.conn
    while True:
        with _write_txn(db, path):
            version = _schema_version(conn, path)
            if version is None:  # re-checked inside the lock: another process may have written
                raise _not_ours(path)
            if version > SCHEMA_VERSION:
                raise _newer(path, version)
            if version == SCHEMA_VERSION:
                return
            if version == 0:
                conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
            MIGRATIONS[version](db)
            conn.execute(
                "INSERT INTO meta(key, value) VALUES ('schema_version', ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (str(version + 1),),
            )


def _not_ours(path: Path) -> CorruptDatabaseError:
    return CorruptDatabaseError(
        path,
        "a SQLite database but not a kperf run database (no meta table)",
        "use another path; it was left as is",
    )


def _newer(path: Path, version: int) -> NewerSchemaError:
    return NewerSchemaError(
        path,
        f"schema version {version} is newer than this kperf-ci supports ({SCHEMA_VERSION})",
        "upgrade kperf-ci (pip install -U kperf-ci); the file was left untouched",
    )


def open_db(path: str | os.PathLike[str], *, create: bool = False) -> sqlite_utils.Database:
    """Open a run database, validated and migrated to the current schema.

    ``create=False``: the file must exist (:class:`MissingDatabaseError` otherwise).
    ``create=True``: open for writing, creating the file (and its directory) if missing;
    a path that cannot be written raises :class:`ReadOnlyDatabaseError`.
    Nothing is written to a file that failed validation. Close the result with ``db.close()``.
    """
    p = Path(path)
    conn = _connect(p, write=create)
    try:
        version = _schema_version(conn, p)
        if version is None:
            raise _not_ours(p)
        if version > SCHEMA_VERSION:
            raise _newer(p, version)
        if version == 0 and not create:
            raise MissingDatabaseError(p, "empty database, holds no runs", "write a run into it first")
        db = sqlite_utils.Database(conn, execute_plugins=False)
        if create:
            # 64 MiB of page cache instead of SQLite's 2 MiB for a writer: a run of 100,000
            # variants writes indexes far larger than that (import 12.2 s -> 10.2 s); readers
            # gain nothing from it and would hold the memory
            conn.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
        if create or version < SCHEMA_VERSION:
            # Validated: from here on writing is allowed.
            _enable_wal(conn, p)
            _migrate(db, p)
        conn.execute("PRAGMA foreign_keys = ON")
        return db
    except BaseException:
        conn.close()
        raise


def _enable_wal(conn: sqlite3.Connection, path: Path) -> None:
    try:
        if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            conn.execute("PRAGMA journal_mode = WAL")
    except sqlite3.OperationalError as e:
        raise _translate(e, path) from None


def _translate(e: sqlite3.Error, path: Path) -> Exception:
    """A StoreError for what the environment did (read-only, locked, corrupt); other errors as they are."""
    msg = str(e)
    if _is_readonly_error(e):
        return ReadOnlyDatabaseError(
            path, f"cannot write ({msg})", "choose a writable path (--db / KPERF_DB)"
        )
    if "locked" in msg or "busy" in msg:
        return DatabaseLockedError(
            path,
            f"database stayed locked for {BUSY_TIMEOUT_S:.0f} s ({msg})",
            "retry, or stop the other writer",
        )
    if "disk" in msg and ("full" in msg or "I/O" in msg):
        return StoreError(path, f"cannot write ({msg})", "free disk space or choose another path")
    if "malformed" in msg or "not a database" in msg:
        return _corrupt(path, e)
    return e


@contextlib.contextmanager
def _write_txn(db: sqlite_utils.Database, path: Path) -> Iterator[sqlite_utils.Database]:
    """One BEGIN IMMEDIATE transaction: takes the write lock up front (waiting up to the busy
    timeout), so concurrent writers serialise instead of failing on lock upgrade."""
    conn = db.conn
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as e:
        raise _translate(e, path) from None
    try:
        yield db
        conn.execute("COMMIT")
    except sqlite3.Error as e:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise _translate(e, path) from None
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


@contextlib.contextmanager
def _opened(path: str | os.PathLike[str], *, create: bool = False) -> Iterator[sqlite_utils.Database]:
    db = open_db(path, create=create)
    try:
        yield db
    finally:
        db.close()
    p = Path(path)
    _VALIDATED[str(p.resolve())] = _signature(p)  # validated on open; since then only our writes


# --------------------------------------------------------------------------- writing


def _run_row(info: RunInfo, status: str) -> dict:
    if status not in RUN_STATUSES:
        raise ValueError(f"run status {status!r} is not one of {', '.join(RUN_STATUSES)}")
    fp = info.fingerprint
    return {
        "run_id": info.run_id,
        "started_at": info.started_at,
        "mode": info.mode,
        "git_sha": info.git_sha,
        "git_branch": info.git_branch,
        "label": info.label,
        "kperf_version": info.kperf_version,
        "fingerprint": canonical_json(fp.to_dict()),
        "gpu": fp.gpu,
        "triton": fp.triton,
        "host_hash": fp.host_hash,
        "status": status,
    }


def _insert_results(
    db: sqlite_utils.Database, run_id: str, results: list[VariantResult], *, fresh: bool = False
) -> None:
    """Insert (or replace) the rows of each result. Caller holds the write transaction.

    One row per variant per run: a second result for the same variant replaces the first.
    ``fresh``: the run has no rows yet (save_run just wrote it), so there is nothing to delete.
    Set-based: one ``executemany`` per table over all results (a 100,000-variant import is
    a handful of statements, not half a million).
    """
    conn = db.conn
    conn.executemany(
        "INSERT OR IGNORE INTO kernels(name, source) VALUES (?, ?)",
        dict.fromkeys((r.key.kernel, r.key.source) for r in results),
    )
    kernel_ids: dict[tuple[str, str], int] = {}
    for kid, name, source in conn.execute("SELECT id, name, source FROM kernels"):
        kernel_ids[(name, source)] = kid
    conn.executemany(  # the first result of a variant names its kernel row, as before
        "INSERT OR IGNORE INTO variants(id, kernel_id, arch, spec, config) VALUES (?, ?, ?, ?, ?)",
        (
            (r.key.id, kernel_ids[(r.key.kernel, r.key.source)], r.key.arch, r.key.spec, r.key.config)
            for r in sorted(results, key=lambda r: r.key.id)  # stable: the first still comes first
        ),
    )
    by_id: dict[str, VariantResult] = {}  # the last result of each variant replaces earlier ones
    for r in results:
        by_id[r.key.id] = r
    # in primary-key order: each B-tree is appended to rather than written all over
    last = {vid: by_id[vid] for vid in sorted(by_id)}
    if not fresh:  # the run may hold rows of these variants already: they are replaced
        for table in _RUN_TABLES:
            conn.executemany(
                f"DELETE FROM {table} WHERE run_id = ? AND variant_id = ?", ((run_id, vid) for vid in last)
            )
    conn.executemany(
        "INSERT INTO run_variants(run_id, variant_id, test, tags, thresholds, sass_hash, error) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            (
                run_id,
                vid,
                r.key.test,
                json.dumps(list(r.tags)),
                canonical_json(r.thresholds),
                r.sass_hash,
                r.error,
            )
            for vid, r in last.items()
        ),
    )
    conn.executemany(
        "INSERT OR REPLACE INTO metrics(run_id, variant_id, name, value, unit, kind, better) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            (run_id, vid, m.name, float(m.value), m.unit, m.kind, m.better)
            for vid, r in last.items()
            for m in r.metrics
        ),
    )
    conn.executemany(
        "INSERT INTO samples(run_id, variant_id, seq, value_ms) VALUES (?, ?, ?, ?)",
        ((run_id, vid, i, float(v)) for vid, r in last.items() for i, v in enumerate(r.samples)),
    )
    conn.executemany(
        "INSERT INTO blobs(run_id, variant_id, name, data) VALUES (?, ?, ?, ?)",
        ((run_id, vid, name, _pack(text)) for vid, r in last.items() for name, text in r.artifacts.items()),
    )


Blob = tuple[str, str, "bytes | str"]  # (variant id or "" for the run, name, data)


def save_run(
    path: str | os.PathLike[str],
    info: RunInfo,
    results: list[VariantResult],
    *,
    status: str | None = None,
    blobs: Collection[Blob] = (),
) -> str:
    """Write a run, its results and blobs in one transaction (replacing a run of the same id).

    ``status`` defaults to complete (empty when ``results`` is): call this only with everything
    the run measured, and pass ``status=INTERRUPTED`` when it stopped early. Returns run_id."""
    if status is None:
        status = COMPLETE if results else EMPTY
    p = Path(path)
    with _opened(p, create=True) as db, _write_txn(db, p):
        db.conn.execute("DELETE FROM runs WHERE run_id = ?", (info.run_id,))  # cascades
        _insert_row(db.conn, "runs", _run_row(info, status))
        _insert_results(db, info.run_id, results, fresh=True)
        _insert_blobs(db.conn, p, info.run_id, blobs)
    return info.run_id


def add_results(
    path: str | os.PathLike[str],
    run_id: str,
    results: list[VariantResult],
    *,
    info: RunInfo | None = None,
    blobs: Collection[Blob] = (),
) -> None:
    """Append results (and blobs) to a run in one transaction; the run's status is unchanged.

    The run must exist, unless ``info`` is given: then it is created if missing, as ``running``
    (so xdist workers can each call this without first agreeing on who saves the run row);
    :func:`finish_run` marks it finished.
    """
    p = Path(path)
    with _opened(p, create=True) as db, _write_txn(db, p):
        exists = db.conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if not exists:
            if info is None:
                raise RunNotFoundError(p, f"no run {run_id!r} to add results to", "save_run() it first")
            if info.run_id != run_id:
                raise ValueError(f"info.run_id {info.run_id!r} != run_id {run_id!r}")
            _insert_row(db.conn, "runs", _run_row(info, RUNNING))
        _insert_results(db, run_id, results)
        _insert_blobs(db.conn, p, run_id, blobs)


def finish_run(path: str | os.PathLike[str], run_id: str, *, interrupted: bool = False) -> str:
    """Mark a run written piecewise (``add_results``) as finished: ``interrupted``, else
    ``complete`` or ``empty`` by whether it holds any variant. Returns the status set."""
    p = Path(path)
    with _opened(p, create=True) as db, _write_txn(db, p):
        if not db.conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone():
            raise RunNotFoundError(p, f"no run {run_id!r} to finish", "save_run() it first")
        if interrupted:
            status = INTERRUPTED
        else:
            n = db.conn.execute("SELECT count(*) FROM run_variants WHERE run_id = ?", (run_id,)).fetchone()
            status = COMPLETE if n[0] else EMPTY
        db.conn.execute("UPDATE runs SET status = ? WHERE run_id = ?", (status, run_id))
    return status


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
    """The database stayed locked, so the run was written to ``written_to`` instead."""

    def __init__(self, path: Path, run_id: str, written_to: Path):
        self.written_to = written_to
        waited = LOCK_ATTEMPTS * BUSY_TIMEOUT_S
        super().__init__(
            path,
            f"stayed locked by another writer for over {waited:.0f} s; run {run_id} was written to "
            f"{written_to} instead",
            f"use that file as it is (--db {written_to}) or copy the run in when the lock is gone "
            f"(`kperf baseline update --db {written_to} --baseline {path} --run {run_id}`)",
        )


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
    try:
        retry_locked(lambda: write(p), sleep=sleep)
        return p
    except DatabaseLockedError:
        pass
    side = pending_path(p, run_id)
    write(side)  # a new file next to the locked one: nobody else holds its lock
    raise RunDivertedError(p, run_id, side)


def _pack(data: bytes | str) -> bytes:
    return zlib.compress(data.encode() if isinstance(data, str) else bytes(data), 6)


def _insert_blobs(conn: sqlite3.Connection, path: Path, run_id: str, blobs: Collection[Blob]) -> None:
    conn.executemany(
        "INSERT OR REPLACE INTO blobs(run_id, variant_id, name, data) VALUES (?, ?, ?, ?)",
        [(run_id, variant_id, name, _pack(data)) for variant_id, name, data in blobs],
    )


def save_blob(
    path: str | os.PathLike[str], run_id: str, variant_id: str, name: str, data: bytes | str
) -> None:
    """Store an artifact (zlib-compressed); ``variant_id=""`` for run-level blobs. Replaces same name."""
    p = Path(path)
    with _opened(p, create=True) as db, _write_txn(db, p):
        if not db.conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone():
            raise RunNotFoundError(p, f"no run {run_id!r} to attach blob {name!r} to", "save_run() it first")
        db.conn.execute(
            "INSERT OR REPLACE INTO blobs(run_id, variant_id, name, data) VALUES (?, ?, ?, ?)",
            (run_id, variant_id, name, _pack(data)),
        )


def load_blob(path: str | os.PathLike[str], run_id: str, variant_id: str, name: str) -> bytes | None:
    """The decompressed bytes of a blob, or None if there is none."""
    with _opened(path) as db:
        row = db.conn.execute(
            "SELECT data FROM blobs WHERE run_id = ? AND variant_id = ? AND name = ?",
            (run_id, variant_id, name),
        ).fetchone()
    return zlib.decompress(row[0]) if row else None


def blob_names(path: str | os.PathLike[str], run_id: str, variant_id: str = "") -> list[str]:
    """Names of a run's blobs (run-level ones by default), sorted."""
    with _opened(path) as db:
        rows = db.conn.execute(
            "SELECT name FROM blobs WHERE run_id = ? AND variant_id = ? ORDER BY name", (run_id, variant_id)
        ).fetchall()
    return [r[0] for r in rows]


# --------------------------------------------------------------------------- reading


def _info(row: dict) -> RunInfo:
    return RunInfo(
        run_id=row["run_id"],
        started_at=row["started_at"],
        mode=row["mode"],
        fingerprint=Fingerprint.from_dict(json.loads(row["fingerprint"])),
        git_sha=row["git_sha"],
        git_branch=row["git_branch"],
        kperf_version=row["kperf_version"] or "",
        label=row["label"],
    )


def _resolve_run_id(
    db: sqlite_utils.Database, path: Path, run_id: str | None, label: str | None, skip_empty: bool = False
) -> tuple[str, str, list[tuple[str, str]]]:
    """(run id, its status, newer incomplete runs passed over as [(id, status)]).

    An id (or unique prefix) picks that run whatever its status; without one, the latest run
    that is not incomplete (still running or interrupted) is picked, and with ``skip_empty``
    (a baseline) not empty either: a run that measured nothing judges nothing."""
    where, params = [], []
    if run_id is not None:
        where.append("(run_id = ? OR run_id LIKE ? ESCAPE '\\')")
        esc = run_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        params += [run_id, esc + "%"]
    if label is not None:
        where.append("label = ?")
        params.append(label)
    sql = "SELECT run_id, status FROM runs"
    if where:
        sql += " WHERE " + " AND ".join(where)
    rows = list(db.conn.execute(sql + " ORDER BY started_at DESC, rowid DESC", params))
    what = " ".join(filter(None, [f"id {run_id!r}" if run_id else "", f"label {label!r}" if label else ""]))
    if not rows:
        raise RunNotFoundError(
            path, f"no run{' with ' + what if what else 's'} in this database", "list runs with `kperf show`"
        )
    if run_id is not None:
        exact = [r for r in rows if r[0] == run_id]
        if not exact and len(rows) > 1:
            raise RunNotFoundError(
                path,
                f"run id prefix {run_id!r} is ambiguous ({len(rows)} runs)",
                "give more characters of the id",
            )
        rid, status = (exact or rows)[0]
        return rid, status, []
    skipped = []
    for rid, status in rows:
        if status not in INCOMPLETE and not (skip_empty and status == EMPTY):
            return rid, status, skipped
        skipped.append((rid, status))
    listed = ", ".join(f"{rid} ({status})" for rid, status in skipped[:3])
    raise RunNotFoundError(
        path,
        f"no complete run{' with ' + what if what else ''} in this database, only "
        f"{'incomplete or empty' if skip_empty else 'incomplete'} ones: {listed}",
        "run the tests to the end, or name an incomplete run explicitly with its id",
    )


_new = object.__new__


def load_run(
    path: str | os.PathLike[str],
    run_id: str | None = None,
    *,
    label: str | None = None,
    artifacts: bool | Collection[str] = False,
    baseline: bool = False,
) -> RunRecord:
    """Read one run: by id (a unique prefix is enough), whatever its status; else the latest
    (by started_at) complete or empty one, optionally the latest with ``label`` -- runs still
    ``running`` or ``interrupted`` are passed over then, and listed in ``RunRecord.skipped``.
    Artifacts (blobs) are loaded only when asked: ``True`` for all, or a collection of names
    for just those (e.g. a report that needs the small ``findings`` artifact but not every
    SASS listing). ``baseline``: the latest run is also never an ``empty`` one."""
    p = Path(path)
    with _opened(p) as db:
        rid, status, skipped = _resolve_run_id(db, p, run_id, label, skip_empty=baseline)
        info = _info(next(db.query("SELECT * FROM runs WHERE run_id = ?", [rid])))
        results: dict[str, VariantResult] = {}
        conn = db.conn
        # Plain tuples, not sqlite-utils' dict rows: a 100,000-variant run reads a million rows.
        for vid, test, tags, thresholds, sass_hash, error, arch, spec, config, kernel, source in conn.execute(
            "SELECT rv.variant_id, rv.test, rv.tags, rv.thresholds, rv.sass_hash, rv.error, "
            "v.arch, v.spec, v.config, k.name, k.source FROM run_variants rv "
            "JOIN variants v ON v.id = rv.variant_id JOIN kernels k ON k.id = v.kernel_id "
            "WHERE rv.run_id = ? ORDER BY k.name, v.arch, v.config, v.spec",
            (rid,),
        ):
            key = _new(VariantKey)  # as VariantKey(...) does it, without the frozen __init__'s cost
            key.__dict__.update(kernel=kernel, arch=arch, spec=spec, config=config, test=test, source=source)
            results[vid] = VariantResult(
                key=key,
                tags=[] if tags == "[]" else json.loads(tags),
                thresholds={} if thresholds == "{}" else json.loads(thresholds),
                sass_hash=sass_hash,
                error=error,
            )
        res: VariantResult | None = None
        last = None
        intern = sys.intern
        for vid, name, value, unit, kind, better in conn.execute(
            "SELECT variant_id, name, value, unit, kind, better FROM metrics WHERE run_id = ? "
            "ORDER BY variant_id, name",
            (rid,),
        ):
            if vid != last:
                last, res = vid, results.get(vid)
            if res is not None:  # the few distinct names interned: SQLite returns a new str per row
                res.metrics.append(
                    make_metric(intern(name), value, intern(unit), intern(kind), intern(better))
                )
        last = None
        for vid, value in conn.execute(
            "SELECT variant_id, value_ms FROM samples WHERE run_id = ? ORDER BY variant_id, seq", (rid,)
        ):
            if vid != last:
                last, res = vid, results.get(vid)
            if res is not None:
                res.samples.append(value)
        if artifacts:
            sql, args = "SELECT variant_id, name, data FROM blobs WHERE run_id = ?", [rid]
            if not isinstance(artifacts, bool):
                names = sorted({artifacts} if isinstance(artifacts, str) else set(artifacts))
                sql += f" AND name IN ({','.join('?' * len(names))})"
                args += names
            for vid, name, data in db.conn.execute(sql, args):
                if vid in results:
                    results[vid].artifacts[name] = zlib.decompress(data).decode("utf-8", "replace")
    return RunRecord(info=info, results=list(results.values()), status=status, skipped=skipped)


def rows_typed(path: str | os.PathLike[str], run_id: str) -> bool:
    """Whether every metric and sample row of a run holds the column types kperf-ci writes
    (text names, numeric values): checked in SQL, so a reader need not look at each of a large
    run's million rows in Python. False means "look closer", not necessarily "broken"."""
    num = "('integer', 'real')"
    with _opened(path) as db:
        row = db.conn.execute(
            "SELECT EXISTS(SELECT 1 FROM metrics WHERE run_id = ?1 AND (typeof(name) <> 'text' "
            "OR typeof(unit) <> 'text' OR typeof(kind) <> 'text' OR typeof(better) <> 'text' "
            f"OR typeof(value) NOT IN {num})) "
            f"OR EXISTS(SELECT 1 FROM samples WHERE run_id = ?1 AND typeof(value_ms) NOT IN {num})",
            (run_id,),
        ).fetchone()
    return not row[0]


def list_runs(path: str | os.PathLike[str], *, include_incomplete: bool = False) -> list[RunInfo]:
    """Runs oldest first: the finished ones (complete or empty), or all with ``include_incomplete``
    (their status: :func:`run_statuses`). History (gate, report trends) must not see part-runs."""
    sql = "SELECT * FROM runs"
    if not include_incomplete:
        sql += f" WHERE status NOT IN ({', '.join(repr(s) for s in INCOMPLETE)})"
    with _opened(path) as db:
        return [_info(r) for r in db.query(sql + " ORDER BY started_at, rowid")]


def run_statuses(path: str | os.PathLike[str]) -> dict[str, str]:
    """{run id: status} for every run in the database."""
    with _opened(path) as db:
        return dict(db.conn.execute("SELECT run_id, status FROM runs").fetchall())


def metric_history(
    path: str | os.PathLike[str], variant_id: str, metric: str, *, limit: int | None = None
) -> list[tuple[RunInfo, float]]:
    """Values of one metric of one variant across runs, oldest first (the last ``limit`` runs)."""
    sql = (
        "SELECT r.*, m.value AS metric_value FROM metrics m JOIN runs r ON r.run_id = m.run_id "
        "WHERE m.variant_id = ? AND m.name = ? ORDER BY r.started_at DESC, r.rowid DESC"
    )
    params: list = [variant_id, metric]
    if limit is not None:
        sql += " LIMIT ?"
        params.append(int(limit))
    with _opened(path) as db:
        rows = list(db.query(sql, params))
    return [(_info(r), r["metric_value"]) for r in reversed(rows)]


def copy_run(src: str | os.PathLike[str], dst: str | os.PathLike[str], run_id: str | None = None) -> str:
    """Copy one run (default: the latest) with all its rows and blobs from ``src`` into ``dst``,
    replacing a run of the same id there, in one transaction. Returns the run id."""
    sp, dp = Path(src), Path(dst)
    with _opened(sp) as sdb:  # validates src (never written) before dst is touched
        rid = _resolve_run_id(sdb, sp, run_id, None)[0]
        run_row = next(sdb.query("SELECT * FROM runs WHERE run_id = ?", [rid]))
        variants = list(
            sdb.query(
                "SELECT v.*, k.name AS kernel, k.source FROM run_variants rv "
                "JOIN variants v ON v.id = rv.variant_id JOIN kernels k ON k.id = v.kernel_id "
                "WHERE rv.run_id = ?",
                [rid],
            )
        )
        rows = {t: list(sdb.query(f"SELECT * FROM {t} WHERE run_id = ?", [rid])) for t in _RUN_TABLES}
    if sp.exists() and dp.exists() and sp.resolve() == dp.resolve():
        return rid
    with _opened(dp, create=True) as db, _write_txn(db, dp):
        c = db.conn
        c.execute("DELETE FROM runs WHERE run_id = ?", (rid,))  # cascades to the run's rows
        _insert_row(c, "runs", run_row)
        for v in variants:
            c.execute("INSERT OR IGNORE INTO kernels(name, source) VALUES (?, ?)", (v["kernel"], v["source"]))
            kid = c.execute(
                "SELECT id FROM kernels WHERE name = ? AND source = ?", (v["kernel"], v["source"])
            ).fetchone()[0]
            c.execute(
                "INSERT OR IGNORE INTO variants(id, kernel_id, arch, spec, config) VALUES (?, ?, ?, ?, ?)",
                (v["id"], kid, v["arch"], v["spec"], v["config"]),
            )
        for table, table_rows in rows.items():
            for row in table_rows:
                _insert_row(c, table, row)
    return rid


def same_database(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two paths name one database file (after symlinks; hard links too when both exist)."""
    pa, pb = Path(a), Path(b)
    try:
        if pa.exists() and pb.exists():
            return os.path.samefile(pa, pb)
    except OSError:
        pass
    return pa.resolve() == pb.resolve()


def _insert_row(conn: sqlite3.Connection, table: str, row: dict) -> None:
    conn.execute(
        f"INSERT INTO {table}({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", tuple(row.values())
    )
