"""Blobs: zlib-compressed artifacts of a run or of one variant (SASS, traces, manifests)."""

from __future__ import annotations

import os
import sqlite3
import zlib
from collections.abc import Collection
from pathlib import Path

from .db import _opened, _write_txn
from .errors import RunNotFoundError

Blob = tuple[str, str, "bytes | str"]  # (variant id or "" for the run, name, data)


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
