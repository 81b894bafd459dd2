"""Blobs: zlib-compressed artifacts of a run or of one variant (SASS, traces, manifests)."""

from __future__ import annotations

import os
import sqlite3
import zlib
from collections.abc import Collection
from pathlib import Path

from .db import _opened, _write_txn
from .errors import CorruptDatabaseError, RunNotFoundError

Blob = tuple[str, str, "bytes | str"]  # (variant id or "" for the run, name, data)

#: The most one blob may decompress to. zlib expands up to ~1000x, so a few MB of crafted
#: database (a fork PR's, read by comment.yml) could otherwise cost GBs; the largest real
#: artifacts (a timeline of a long run, a big kernel's SASS) are a few MB.
MAX_BLOB_BYTES = 64 * 1024 * 1024
#: The most all the blobs one ``load_run`` reads may decompress to together.
MAX_LOADED_BYTES = 256 * 1024 * 1024
_CHUNK = 1024 * 1024


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):.0f} MiB" if n >= 1024 * 1024 else f"{n} bytes"


def unpack(data: bytes, path: str | os.PathLike[str], what: str, limit: int = MAX_BLOB_BYTES) -> bytes:
    """Decompress a stored blob, streaming, never past ``limit`` bytes: a bigger one (a
    decompression bomb) raises :class:`CorruptDatabaseError` naming the blob (exit 2)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        # bytes() of an INTEGER cell allocates that many zero bytes: a cell never sizes anything
        raise CorruptDatabaseError(
            path,
            f"{what} holds {type(data).__name__}, not zlib bytes",
            "delete that run or restore the file from git",
        )
    d = zlib.decompressobj()
    out = bytearray()
    buf = bytes(data)
    while buf:
        out += d.decompress(buf, min(_CHUNK, limit + 1 - len(out)))
        if len(out) > limit:
            raise CorruptDatabaseError(
                path,
                f"{what} decompresses to more than {_mib(limit)} (a decompression bomb?)",
                "delete that run or restore the file from git",
            )
        buf = d.unconsumed_tail
        if d.eof:
            break
    if not d.eof:
        raise zlib.error(f"{what}: incomplete or truncated zlib data")
    return bytes(out)


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
    return unpack(row[0], path, f"blob {name!r} of run {run_id!r}") if row else None


def blob_names(path: str | os.PathLike[str], run_id: str, variant_id: str = "") -> list[str]:
    """Names of a run's blobs (run-level ones by default), sorted."""
    with _opened(path) as db:
        rows = db.conn.execute(
            "SELECT name FROM blobs WHERE run_id = ? AND variant_id = ? ORDER BY name", (run_id, variant_id)
        ).fetchall()
    return [r[0] for r in rows]


# --------------------------------------------------------------------------- reading
