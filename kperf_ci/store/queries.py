"""Reads and maintenance that commands need beyond loading a run: one metric's values across
runs (the report's history plots) and folding a database's write-ahead log into its file. Here so
that the commands hold no SQL."""

from __future__ import annotations

import json
import math
import os
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass

from kperf_ci.model import SCRIPT_TAG

from .db import _opened, open_db

__all__ = ["OperationalError", "RunSize", "fold_wal", "metric_values", "run_sizes"]

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


@dataclass(frozen=True)
class RunSize:
    """What one run measured, counted: what tells a suite's run from a bench script's in `kperf
    show`, where both may carry no label."""

    variants: int
    tests: int  # distinct test ids (a bench script's: its do_bench calls)
    files: int  # distinct files of those tests (a bench script's: the script)
    first_file: str  # the files' first and last in order: their common prefix is every file's
    last_file: str
    bench: bool  # measured from a benchmark script's do_bench calls


def run_sizes(path: str | os.PathLike[str]) -> dict[str, RunSize]:
    """{run id: :class:`RunSize`} for every run that stored any variant; one bounded row per run,
    however many tests a (crafted) run holds."""
    file = "CASE WHEN instr(test, '::') > 0 THEN substr(test, 1, instr(test, '::') - 1) ELSE test END"
    sql = (
        "SELECT run_id, COUNT(*), COUNT(DISTINCT test), COUNT(DISTINCT f), MIN(f), MAX(f), MAX(b) "
        f"FROM (SELECT run_id, test, {file} AS f, instr(tags, ?) > 0 AS b FROM run_variants) GROUP BY run_id"
    )
    with _opened(path) as db:
        rows = db.conn.execute(sql, (json.dumps(SCRIPT_TAG),)).fetchall()
    return {
        r: RunSize(int(n), int(t), int(nf), str(lo or ""), str(hi or ""), bool(b))
        for r, n, t, nf, lo, hi, b in rows
    }
