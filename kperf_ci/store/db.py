"""Opening a run database: validation (header, quick_check, schema version), WAL, migration,
and the one write transaction every save uses."""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import shutil
import sqlite3
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:  # imported where a Database is made (open_db): see below
    import sqlite_utils

from . import schema
from .errors import (
    DB_OPTION,
    CorruptDatabaseError,
    DatabaseLockedError,
    MissingDatabaseError,
    NewerSchemaError,
    ReadOnlyDatabaseError,
    StoreError,
)

BUSY_TIMEOUT_S = 30.0
# SQLite waits for a lock inside one C call, where Python runs no signal handler: with its busy
# timeout at 30 s, Ctrl-C took up to 30 s. It waits in slices of this instead, and the slices are
# repeated from Python (:func:`_waiting`) until BUSY_TIMEOUT_S, so Ctrl-C lands within one slice.
BUSY_SLICE_S = 0.1
CACHE_KIB = 64 * 1024
_SQLITE_HEADER = b"SQLite format 3\x00"
T = TypeVar("T")


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
            # never "delete it": the file is the user's (a CSV passed as --baseline, say)
            "point the option at a kperf run database; this file is left as it is",
        )
    if len(head) < 100:
        raise CorruptDatabaseError(path, "truncated SQLite file", "restore the file from git or delete it")
    return False


#: errors that say why a directory takes no file; /proc answers ENOENT or EEXIST for a directory
#: that is there, words that would send the user looking for a missing folder
_TELLING = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT}


def cannot_create_in(directory: str | os.PathLike[str]) -> str | None:
    """Why no file can be created in ``directory`` ("/proc is not a writable directory", the
    OS's words after a colon where they tell why), or None when one can: a temporary file is created there
    and removed. os.access alone says yes to root for /proc and /sys, where creating a file then
    fails after the work the check was meant to save."""
    try:
        fd, name = tempfile.mkstemp(dir=directory, prefix=".kperf-probe-")
    except OSError as e:
        why = f": {e.strerror}" if e.errno in _TELLING and e.strerror else ""
        return f"{directory} is not a writable directory{why}"
    os.close(fd)
    with contextlib.suppress(OSError):  # created by us a moment ago: nothing is left behind
        os.unlink(name)
    return None


def check_writable(path: str | os.PathLike[str]) -> None:
    """Raise :class:`ReadOnlyDatabaseError` unless ``path`` could be written (created with its
    directories when missing), leaving nothing behind: a session checks its run database before
    the tests run, not after them. The directory it goes in is proved by creating a file there
    (:func:`cannot_create_in`; SQLite's -wal and -shm files go beside it too)."""
    p = Path(path)
    if p.exists():
        why = "file is read-only" if not os.access(p, os.W_OK) else cannot_create_in(p.parent)
    else:
        top = next((a for a in p.parents if a.exists()), Path("/"))
        why = f"{top} is a file, not a directory" if not top.is_dir() else cannot_create_in(top)
    if why is not None:
        raise ReadOnlyDatabaseError(
            p, f"cannot be written here ({why})", f"choose a writable path ({DB_OPTION})"
        )


def _connect(path: Path, *, write: bool) -> sqlite3.Connection:
    """Open and validate; never writes. Raises StoreError subclasses."""
    if not path.exists():
        if not write:
            raise MissingDatabaseError(
                path,
                "no such run database",
                "check the path, or create it with `pytest --kperf` / `kperf import`",
            )
        check_writable(path)  # why not in the user's terms (a file above it, /proc), before any mkdir
        parent = path.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ReadOnlyDatabaseError(
                path,
                f"cannot create directory {parent} ({e.strerror})",
                f"choose a writable path ({DB_OPTION})",
            ) from None
    elif path.is_dir():
        raise CorruptDatabaseError(path, "is a directory, not a database file", "give the path of a .db file")
    else:
        _check_header(path)
        if write and not os.access(path, os.W_OK):
            raise ReadOnlyDatabaseError(
                path,
                "file is read-only",
                f"make it writable (chmod u+w) or choose another path ({DB_OPTION})",
            )
        if write and not os.access(path.parent, os.W_OK | os.X_OK):  # WAL needs its -wal/-shm files
            raise ReadOnlyDatabaseError(
                path, f"directory {path.parent} is not writable", f"choose a writable path ({DB_OPTION})"
            )
    check = _VALIDATED.get(str(path.resolve())) != _signature(path)
    try:
        return _waiting(lambda: _checked_conn(path, str(path), uri=False, check=check))
    except sqlite3.OperationalError as e:
        if write or not _is_readonly_error(e):
            raise _translate(e, path) from None
    # Reading a WAL database in a directory we cannot write (no -shm can be made): open it
    # immutable. Safe because nobody can be writing it from here either -- unless a -wal is
    # beside it: an immutable open ignores that, and would silently read the older state.
    wal = Path(str(path) + "-wal")
    if wal.exists() and wal.stat().st_size > 0:
        raise ReadOnlyDatabaseError(
            path,
            f"its newest writes are in {wal.name}, which cannot be read without a writable directory",
            "open it once where its directory is writable (that folds the -wal in), or copy the "
            ".db with its -wal to a writable place",
        )
    uri = "file:" + urllib.parse.quote(str(path.resolve())) + "?immutable=1"
    return _checked_conn(path, uri, uri=True, check=check)


# Files this process validated (quick_check) or wrote itself, with their stat signature at that
# time: unchanged since, they are not checked again (quick_check reads the whole file).
_VALIDATED: dict[str, tuple] = {}


def _signature(path: Path) -> tuple | None:
    sig: list[tuple | None] = []
    for p in (path, Path(str(path) + "-wal")):
        try:
            st = p.stat()
        except OSError:
            sig.append(None)
            continue
        sig.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    if sig[1] is not None and sig[1][2] == 0:
        # an empty -wal holds no page, whatever its time: each reader's connection to a WAL
        # database touches it, so its mtime made every open of a file look changed (the
        # committed H100 run's `kperf report -o` re-copied and re-migrated it 27 times)
        sig[1] = ("empty",)
    return tuple(sig) if sig[0] is not None else None


def _checked_conn(path: Path, target: str, *, uri: bool, check: bool = True) -> sqlite3.Connection:
    """Connect and run ``PRAGMA quick_check`` (unless ``check`` is False: then only the schema
    is read, which still fails on a broken header). OperationalError (locks, permissions) propagates."""
    conn = sqlite3.connect(target, timeout=BUSY_SLICE_S, isolation_level=None, uri=uri)
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_SLICE_S * 1000)}")
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


def _is_locked_error(e: sqlite3.Error) -> bool:
    msg = str(e)
    return "locked" in msg or "busy" in msg


def _waiting(op: Callable[[], T]) -> T:
    """``op()``, tried again while SQLite reports a lock, until BUSY_TIMEOUT_S has passed; each
    try waits one BUSY_SLICE_S inside SQLite, and between tries Python can act on Ctrl-C."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            return op()
        except sqlite3.OperationalError as e:
            if not _is_locked_error(e) or time.monotonic() >= deadline:
                raise


def _is_readonly_error(e: sqlite3.Error) -> bool:
    msg = str(e)
    return "readonly" in msg or "read-only" in msg or "unable to open" in msg


def _migrate(db: sqlite_utils.Database, path: Path) -> None:
    """Apply pending migrations, each in its own BEGIN IMMEDIATE transaction, recorded in meta."""
    conn = db.conn
    while True:
        with _write_txn(db, path):
            version = schema.schema_version(conn, path)
            if version is None:  # re-checked inside the lock: another process may have written
                raise _not_ours(path)
            if version > schema.SCHEMA_VERSION:
                raise _newer(path, version)
            if version == schema.SCHEMA_VERSION:
                return
            if version == 0:
                conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
            schema.MIGRATIONS[version](db)
            conn.execute(
                "INSERT INTO meta(key, value) VALUES ('schema_version', ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (str(version + 1),),
            )


def _check_tables(conn: sqlite3.Connection, path: Path) -> None:
    """A kperf database with a table gone (dropped by hand, a crafted file) is bad input, not
    a "no such table" crash in whatever query reaches it first."""
    have = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    missing = [t for t in schema.TABLES if t not in have]
    if missing:
        raise CorruptDatabaseError(
            path,
            f"a kperf run database without its table(s) {', '.join(missing)}",
            "restore the file from git or delete it",
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
        f"schema version {version} is newer than this kperf-ci supports ({schema.SCHEMA_VERSION})",
        "upgrade kperf-ci (pip install -U kperf-ci); the file was left untouched",
    )


def open_db(path: str | os.PathLike[str], *, create: bool = False) -> sqlite_utils.Database:
    """Open a run database, validated, at the current schema.

    ``create=False``: the file must exist (:class:`MissingDatabaseError` otherwise) and is only
    read: an older schema is migrated in a private temporary copy, never in place.
    ``create=True``: open for writing, creating the file (and its directory) if missing;
    a path that cannot be written raises :class:`ReadOnlyDatabaseError`.
    Nothing is written to a file that failed validation. Close the result with ``db.close()``.
    """
    p = Path(path)
    conn = _connect(p, write=create)
    try:
        version = schema.schema_version(conn, p)
        if version is None:
            raise _not_ours(p)
        if version > schema.SCHEMA_VERSION:
            raise _newer(p, version)
        if version == 0 and not create:
            raise MissingDatabaseError(p, "empty database, holds no runs", "write a run into it first")
        if version:
            _check_tables(conn, p)
        if version < schema.SCHEMA_VERSION and not create:
            # A reader never writes its input (a committed baseline, a read-only mount, a
            # download): an older schema is migrated in a private copy, once per process.
            copy = _migrated_copy(p, conn)
            conn.close()
            return open_db(copy)
        # imported here, not at the top: sqlite_utils brings numpy and dateutil (~0.15 s of a
        # core), and `kperf analyze --trace`, `kperf import`'s parse, the usage errors and every
        # `kperf_ci.errors` import (each command's) need the store's exceptions, not a database
        import sqlite_utils

        db = sqlite_utils.Database(conn, execute_plugins=False)
        if create:
            # 64 MiB of page cache instead of SQLite's 2 MiB for a writer: a run of 100,000
            # variants writes indexes far larger than that (import 12.2 s -> 10.2 s); readers
            # gain nothing from it and would hold the memory
            conn.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
        if create:
            # Validated, and opened to write: from here on writing is allowed.
            _enable_wal(conn, p)
            _migrate(db, p)
        conn.execute("PRAGMA foreign_keys = ON")
        return db
    except BaseException:
        conn.close()
        raise


# (resolved path, signature) -> the migrated copy of an older-schema file this process reads
_COPIES: dict[tuple[str, tuple | None], Path] = {}


def _migrated_copy(path: Path, conn: sqlite3.Connection) -> Path:
    """A copy of ``path`` at the current schema, in a temporary directory removed at exit.
    Made with SQLite's backup API from the open connection, so a -wal's writes are in it."""
    key = (str(path.resolve()), _signature(path))
    done = _COPIES.get(key)
    if done is not None and done.exists():
        return done
    tmp = tempfile.mkdtemp(prefix="kperf-migrated-")
    atexit.register(shutil.rmtree, tmp, True)
    dst = Path(tmp) / path.name
    target = sqlite3.connect(dst)
    try:
        conn.backup(target)
    finally:
        target.close()
    open_db(dst, create=True).close()  # migrates the copy
    _COPIES[key] = dst
    return dst


def _enable_wal(conn: sqlite3.Connection, path: Path) -> None:
    try:
        if _waiting(lambda: conn.execute("PRAGMA journal_mode").fetchone()[0].lower()) != "wal":
            _waiting(lambda: conn.execute("PRAGMA journal_mode = WAL"))
    except sqlite3.OperationalError as e:
        raise _translate(e, path) from None


def _translate(e: sqlite3.Error, path: Path) -> Exception:
    """A StoreError for what the environment did (read-only, locked, corrupt); other errors as they are."""
    msg = str(e)
    if _is_readonly_error(e):
        return ReadOnlyDatabaseError(path, f"cannot write ({msg})", f"choose a writable path ({DB_OPTION})")
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
        _waiting(lambda: conn.execute("BEGIN IMMEDIATE"))
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
