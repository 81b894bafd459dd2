"""Reads and maintenance that commands need beyond loading a run: one metric's values across
runs (the report's history plots) and folding a database's write-ahead log into its file. Here so
that the commands hold no SQL."""

from __future__ import annotations

import math
import os
import sqlite3
from collections.abc import Iterable

from .db import _opened, open_db

__all__ = ["OperationalError", "fold_wal", "metric_values"]

#: What SQLite raises when a crafted file lacks a table or column a reader asks for: callers that
#: read untrusted databases catch it as bad input.
OperationalError = sqlite3.OperationalError


def metric_values(
    path: str | os.PathLike[str], run_ids: Iterable[str], metric: str
) -> list[tuple[str, str, float]]:
    """(run_id, variant_id, value) of ``metric`` in the runs ``run_ids`` of the database at
    ``path``; values that are not finite numbers are left out (SQLite keeps any type in a REAL
    column: a crafted file's text is no point)."""
    ids = list(run_ids)
    db = open_db(path)
    try:
        marks = ",".join("?" * len(ids))
        rows = db.conn.execute(
            f"SELECT run_id, variant_id, value FROM metrics WHERE run_id IN ({marks}) AND name = ?",
            [*ids, metric],
        )
        return [
            (run_id, variant_id, value)
            for run_id, variant_id, value in rows
            if isinstance(value, (int, float)) and math.isfinite(value)
        ]
    finally:
        db.close()


def fold_wal(path: str | os.PathLike[str]) -> None:
    """Open and check the database at ``path`` like any input (StoreError when it fails) and fold
    a pending write-ahead log into the file, so the file's bytes are the whole database."""
    db = open_db(path)
    try:
        db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()


def run_sizes(path: str | os.PathLike[str]) -> dict[str, tuple[int, int]]:
    """{run id: (variants, tests)} for every run that stored any: what tells a suite's run from a
    bench script's in `kperf show`, where both may carry no label."""
    sql = "SELECT run_id, COUNT(*), COUNT(DISTINCT test) FROM run_variants GROUP BY run_id"
    with _opened(path) as db:
        return {r: (int(n), int(t)) for r, n, t in db.conn.execute(sql).fetchall()}
