"""Merging run databases (``kperf merge``): the rows of several opened databases written into
one new file. The rules (nothing lost, nothing duplicated, machine classes apart, ``--shards``)
are in :mod:`kperf_ci.merging`, which validates the inputs and places the output; this
module is the SQL."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import sqlite_utils

from kperf_ci.fingerprint import DEVICE_EXTRA
from kperf_ci.model import canonical_json

from .db import _write_txn, open_db
from .schema import COMPLETE, EMPTY, INTERRUPTED, RUNNING

__all__ = ["MergeStats", "class_key", "merge_in_place", "shard_run_id", "write_merged"]

# Tables whose rows belong to one run; every one has run_id and variant_id ('' = the run itself).
_RUN_TABLES = ("run_variants", "metrics", "samples", "blobs")
# Fingerprint fields that name the host, not the machine class: shards on several runners of one
# class differ only there.
_HOST_FIELDS = ("host_hash",)  # (and shards on two GPUs of one host, which card: DEVICE_EXTRA)
_STATUS_ORDER = (RUNNING, INTERRUPTED, COMPLETE, EMPTY)  # first one wins


@dataclass
class MergeStats:
    runs: int = 0
    variants: int = 0
    rows: int = 0
    duplicate_variants: int = 0  # same (run, variant) in several inputs: the first input's kept
    conflicting_variants: int = 0  # ... and their rows differed
    combined: dict[str, list[str]] = field(default_factory=dict)  # output run id -> input run ids


def class_key(run: dict[str, Any]) -> str:
    """The machine class and what was measured: commit, mode, label, fingerprint without host."""
    try:
        fp = json.loads(run["fingerprint"] or "{}")
    except ValueError:
        fp = {"raw": run["fingerprint"]}
    if isinstance(fp, dict):
        for k in _HOST_FIELDS:
            fp.pop(k, None)
        if isinstance(fp.get("extra"), dict):
            fp["extra"] = {k: v for k, v in fp["extra"].items() if k not in DEVICE_EXTRA}
    return json.dumps([run["git_sha"], run["mode"], run["label"], fp], sort_keys=True)


def shard_run_id(run: dict[str, Any]) -> str:
    """The id of the one run that the shards of a machine class become (``--shards``)."""
    return "shards-" + hashlib.sha256(class_key(run).encode()).hexdigest()[:12]


def _combined_status(a: str, b: str) -> str:
    if COMPLETE in (a, b) and EMPTY in (a, b):
        return COMPLETE
    return min(a, b, key=lambda s: _STATUS_ORDER.index(s) if s in _STATUS_ORDER else 0)


def _rows(conn: sqlite3.Connection, sql: str, args: tuple = ()) -> list[dict[str, Any]]:
    cur = conn.execute(sql, args)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def _insert_many(
    conn: sqlite3.Connection, table: str, cols: tuple[str, ...], values: list[tuple[Any, ...]]
) -> None:
    marks = ", ".join("?" * len(cols))
    conn.executemany(f"INSERT INTO {table}({', '.join(cols)}) VALUES ({marks})", values)


def _insert(conn: sqlite3.Connection, table: str, row: dict[str, Any]) -> None:
    _insert_many(conn, table, tuple(row), [tuple(row.values())])


class _Writer:
    def __init__(self, conn: sqlite3.Connection, shards: bool) -> None:
        self.conn = conn
        self.shards = shards
        self.owner: dict[tuple[str, str], int] = {}  # (out run, variant) -> input index that owns it
        self.stats = MergeStats()

    def own_existing(self) -> None:
        """Merging into a database that already holds runs: its variants are kept as they are
        (as those of the first input are), and an input's copy of one counts as a duplicate."""
        for table in _RUN_TABLES:
            for run_id, vid in self.conn.execute(f"SELECT DISTINCT run_id, variant_id FROM {table}"):
                if vid:
                    self.owner[(run_id, vid)] = -1

    def add_input(self, index: int, src: sqlite3.Connection) -> None:
        for run in _rows(src, "SELECT * FROM runs ORDER BY started_at, run_id"):
            out_id = shard_run_id(run) if self.shards else run["run_id"]
            self._run_row(run, out_id)
            self.stats.combined.setdefault(out_id, [])
            if run["run_id"] not in self.stats.combined[out_id]:
                self.stats.combined[out_id].append(run["run_id"])
            self._variants(index, src, run["run_id"], out_id)

    def _run_row(self, run: dict[str, Any], out_id: str) -> None:
        have = _rows(self.conn, "SELECT started_at, status FROM runs WHERE run_id = ?", (out_id,))
        if not have:
            _insert(self.conn, "runs", {**run, "run_id": out_id})
            self.stats.runs += 1
            return
        started = min(have[0]["started_at"], run["started_at"])
        status = _combined_status(have[0]["status"], run["status"])
        self.conn.execute(
            "UPDATE runs SET started_at = ?, status = ? WHERE run_id = ?", (started, status, out_id)
        )
        self._forget_other_device(out_id, run["fingerprint"])

    def _forget_other_device(self, out_id: str, joining: str) -> None:
        """Shards timed on two cards make one run: its fingerprint then names neither card (the
        first shard's would be wrong for half the variants; each timing still names its own)."""
        (stored,) = self.conn.execute("SELECT fingerprint FROM runs WHERE run_id = ?", (out_id,)).fetchone()
        try:
            mine, theirs = json.loads(stored or "{}"), json.loads(joining or "{}")
        except ValueError:
            return
        if not (isinstance(mine, dict) and isinstance(theirs, dict) and isinstance(mine.get("extra"), dict)):
            return
        other = theirs.get("extra") if isinstance(theirs.get("extra"), dict) else {}
        differ = [k for k in DEVICE_EXTRA if k in mine["extra"] and mine["extra"][k] != other.get(k)]
        if differ:
            mine["extra"] = {k: v for k, v in mine["extra"].items() if k not in differ}
            self.conn.execute(
                "UPDATE runs SET fingerprint = ? WHERE run_id = ?", (canonical_json(mine), out_id)
            )

    def _variants(self, index: int, src: sqlite3.Connection, run_id: str, out_id: str) -> None:
        rows = {t: _rows(src, f"SELECT * FROM {t} WHERE run_id = ?", (run_id,)) for t in _RUN_TABLES}
        by_variant: dict[str, dict[str, list[dict[str, Any]]]] = {}
        for table, table_rows in rows.items():
            for r in table_rows:
                by_variant.setdefault(r["variant_id"], {}).setdefault(table, []).append(r)
        # the rows to copy, per table and column list, in the order they were met: one executemany
        # each (an execute per row was a third of a merge's time), each table's rowids as before
        batches: dict[tuple[str, tuple[str, ...]], list[tuple[Any, ...]]] = {}
        for vid in sorted(by_variant):
            per_table = by_variant[vid]
            if vid == "":
                for b in per_table.get("blobs", []):
                    self._run_blob(out_id, b["name"], b["data"])
                continue
            key = (out_id, vid)
            if key in self.owner:
                if self.owner[key] != index:
                    self.stats.duplicate_variants += 1
                    if not self._same(out_id, vid, per_table):
                        self.stats.conflicting_variants += 1
                continue
            self.owner[key] = index
            self._variant_def(src, vid)
            self.stats.variants += 1
            for table in _RUN_TABLES:
                for r in per_table.get(table, []):
                    row = {**r, "run_id": out_id}
                    batches.setdefault((table, tuple(row)), []).append(tuple(row.values()))
                    self.stats.rows += 1
        for (table, cols), values in batches.items():
            _insert_many(self.conn, table, cols, values)

    def _run_blob(self, out_id: str, name: str, data: bytes) -> None:
        """A run-level blob. Shards of one run each write their own launch manifest under the same
        name: a second blob of that name with other bytes is kept as ``<name>:<its hash>``, which
        the readers of per-worker parts read too (kperf_ci.capture.static.manifest). Merging again adds
        nothing: bytes already held under the name or one of its parts are not stored twice."""
        # only this name's blobs are read (a run's other blobs can be megabytes of manifest)
        held = self.conn.execute(
            "SELECT data FROM blobs WHERE run_id = ? AND variant_id = '' "
            "AND (name = ? OR substr(name, 1, length(?) + 1) = ? || ':')",
            (out_id, name, name, name),
        ).fetchall()
        if any(d == data for (d,) in held):
            return
        if held:  # a shard's cell is any SQLite value: bytes() of an INTEGER would allocate that many
            raw = data if isinstance(data, bytes) else repr(data).encode()
            name = f"{name}:{hashlib.sha256(raw).hexdigest()[:12]}"
        self.conn.execute(
            "INSERT OR IGNORE INTO blobs(run_id, variant_id, name, data) VALUES (?, '', ?, ?)",
            (out_id, name, data),
        )

    def _same(self, out_id: str, vid: str, per_table: dict[str, list[dict[str, Any]]]) -> bool:
        """The same measurement: equal rows, whichever test reached the variant (a kernel that
        two shards' tests compile to the same variant is one variant, as in an unsharded run)."""
        for table in _RUN_TABLES:
            mine = _rows(
                self.conn, f"SELECT * FROM {table} WHERE run_id = ? AND variant_id = ?", (out_id, vid)
            )
            theirs = [{**r, "run_id": out_id} for r in per_table.get(table, [])]
            if table == "run_variants":
                mine = [{**r, "test": ""} for r in mine]
                theirs = [{**r, "test": ""} for r in theirs]
            if sorted(map(repr, mine)) != sorted(map(repr, theirs)):
                return False
        return True

    def _variant_def(self, src: sqlite3.Connection, vid: str) -> None:
        found = _rows(
            src,
            "SELECT v.*, k.name AS kernel, k.source FROM variants v JOIN kernels k ON k.id = v.kernel_id "
            "WHERE v.id = ?",
            (vid,),
        )
        if not found:
            return  # rows of a variant without a definition: kept as they are (the input allowed it)
        v = found[0]
        self.conn.execute(
            "INSERT OR IGNORE INTO kernels(name, source) VALUES (?, ?)", (v["kernel"], v["source"])
        )
        kid = self.conn.execute(
            "SELECT id FROM kernels WHERE name = ? AND source = ?", (v["kernel"], v["source"])
        ).fetchone()[0]
        self.conn.execute(
            "INSERT OR IGNORE INTO variants(id, kernel_id, arch, spec, config) VALUES (?, ?, ?, ?, ?)",
            (v["id"], kid, v["arch"], v["spec"], v["config"]),
        )


def write_merged(dbs: list[sqlite_utils.Database], out_path: Path, *, shards: bool = False) -> MergeStats:
    """Write the runs of ``dbs`` (in order: the first input that has a variant of a run keeps
    it) into a new database at ``out_path``, in one transaction, as one self-contained file."""
    out = open_db(out_path, create=True)
    try:
        writer = _Writer(out.conn, shards)
        out.conn.execute("BEGIN IMMEDIATE")
        for i, db in enumerate(dbs):
            writer.add_input(i, db.conn)
        out.conn.execute("COMMIT")
        # one self-contained file (no -wal beside it): it is uploaded and pushed as bytes
        out.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        out.conn.execute("PRAGMA journal_mode = DELETE")
    finally:
        out.close()
    return writer.stats


def merge_in_place(
    out: sqlite_utils.Database, out_path: Path, dbs: list[sqlite_utils.Database], *, shards: bool = False
) -> MergeStats:
    """Merge the runs of ``dbs`` into the open database ``out``, in place, in one write
    transaction. Another process may have it open and write it: the write lock is taken first
    (waiting as every writer does; :class:`~kperf_ci.store.errors.DatabaseLockedError` when it
    is not let go), so a transaction the other writer commits is never lost, as it was when the
    merged file was renamed over the live one. The runs already there are kept as they are."""
    with _write_txn(out, out_path):
        writer = _Writer(out.conn, shards)
        writer.own_existing()
        for i, db in enumerate(dbs):
            writer.add_input(i, db.conn)
    try:  # the write-ahead log folded in when nobody is reading: the file is pushed as bytes
        out.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except sqlite3.OperationalError:
        pass  # a reader holds it: the -wal stays, readers and writers see the merged rows
    return writer.stats
