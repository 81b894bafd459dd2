"""`kperf merge a.db b.db ... -o all.db`: one database from several (shards, workers, history).

What merging guarantees:

- nothing is lost: every run of every input is in the output with every row of it; a variant
  measured in two inputs for the same run keeps the measurement of the first input that has it
  (the rule a single session follows for tests that compile to one variant), and the command
  says how many such variants it saw;
- nothing is duplicated and merging is idempotent: rows are keyed by (run, variant, ...), so
  merging a database with itself or with a part of it changes nothing;
- machine classes stay apart: runs are only ever combined with runs of the same machine
  fingerprint (``--shards``), never across GPUs, drivers or software versions;
- inputs are never written: each is copied and the copy opened (validated, and migrated if it is
  of an older schema); a corrupt input or one of a newer schema is exit 2, and the output is
  written to a temporary file and moved into place only when everything succeeded.

``--shards``: the runs of one commit measured on several runners (``--kperf-shard i/n``) become
one run per machine class, with the id ``shards-<hash of commit, mode, label, fingerprint>``, so
merging more shards in later lands in the same run.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from kperf_ci import store
from kperf_ci.fingerprint import DEVICE_EXTRA
from kperf_ci.model import canonical_json
from kperf_ci.report.safe_text import terminal_safe

from . import KperfError, read_run, user_errors

# Tables whose rows belong to one run; every one has run_id and variant_id ('' = the run itself).
_RUN_TABLES = ("run_variants", "metrics", "samples", "blobs")
# Fingerprint fields that name the host, not the machine class: shards on several runners of one
# class differ only there (and shards on two GPUs of one host in which card: DEVICE_EXTRA).
_HOST_FIELDS = ("host_hash",)
_STATUS_ORDER = (store.RUNNING, store.INTERRUPTED, store.COMPLETE, store.EMPTY)  # first one wins


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
    return "shards-" + hashlib.sha256(class_key(run).encode()).hexdigest()[:12]


def _combined_status(a: str, b: str) -> str:
    if store.COMPLETE in (a, b) and store.EMPTY in (a, b):
        return store.COMPLETE
    return min(a, b, key=lambda s: _STATUS_ORDER.index(s) if s in _STATUS_ORDER else 0)


def _rows(conn: sqlite3.Connection, sql: str, args: tuple = ()) -> list[dict[str, Any]]:
    cur = conn.execute(sql, args)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def _insert(conn: sqlite3.Connection, table: str, row: dict[str, Any]) -> None:
    cols = ", ".join(row)
    conn.execute(f"INSERT INTO {table}({cols}) VALUES ({', '.join('?' * len(row))})", tuple(row.values()))


class _Writer:
    def __init__(self, conn: sqlite3.Connection, shards: bool) -> None:
        self.conn = conn
        self.shards = shards
        self.owner: dict[tuple[str, str], int] = {}  # (out run, variant) -> input index that owns it
        self.stats = MergeStats()

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
        for vid in sorted(by_variant):
            per_table = by_variant[vid]
            if vid == "":  # run-level blobs: one per name, the first input's
                for b in per_table.get("blobs", []):
                    self.conn.execute(
                        "INSERT OR IGNORE INTO blobs(run_id, variant_id, name, data) VALUES (?, '', ?, ?)",
                        (out_id, b["name"], b["data"]),
                    )
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
                    _insert(self.conn, table, {**r, "run_id": out_id})
                    self.stats.rows += 1

    def _same(self, out_id: str, vid: str, per_table: dict[str, list[dict[str, Any]]]) -> bool:
        for table in _RUN_TABLES:
            mine = _rows(
                self.conn, f"SELECT * FROM {table} WHERE run_id = ? AND variant_id = ?", (out_id, vid)
            )
            theirs = [{**r, "run_id": out_id} for r in per_table.get(table, [])]
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


def _open_copy(src: Path, work: Path, n: int) -> Any:
    """Open a copy of ``src`` (with its WAL), so validation and migration never touch the input."""
    if not src.is_file():
        raise KperfError(f"{src}: no such database; check the path")
    copy = work / f"in{n}.db"
    shutil.copyfile(src, copy)
    if Path(f"{src}-wal").is_file():
        shutil.copyfile(f"{src}-wal", f"{copy}-wal")
    try:
        _check_runs(copy)
        return store.open_db(copy)
    except store.StoreError as e:
        fix = e.fix
        if isinstance(e, store.CorruptDatabaseError):  # the store's hint names --db/--baseline
            fix = f"check that {src} is a kperf run database (restore it from its artifact or drop it)"
        raise KperfError(f"{src}: {e.problem.replace(str(copy), str(src))}; {fix}") from None
    except KperfError as e:
        raise KperfError(e.message.replace(str(copy), str(src))) from None


def _check_runs(copy: Path) -> None:
    """Every run decodes as one kperf-ci wrote (``read_run``): a malformed run is refused, never
    merged with exit 0 for the next reader to trip on."""
    for rid in store.run_statuses(copy):
        read_run(copy, rid)


def merge_databases(inputs: list[Path], output: Path, *, shards: bool = False) -> MergeStats:
    """Merge ``inputs`` (in order) into a new database at ``output`` (replaced atomically)."""
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kperf-merge-", dir=output.parent) as tmp:
        work = Path(tmp)
        dbs = [_open_copy(p, work, i) for i, p in enumerate(inputs)]  # all validated before any work
        out_tmp = work / "out.db"
        out = store.open_db(out_tmp, create=True)
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
            for db in dbs:
                db.close()
        for stale in (f"{output}-wal", f"{output}-shm"):
            if os.path.exists(stale):
                os.remove(stale)
        os.replace(out_tmp, output)
    return writer.stats


@click.command("merge")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="database to write")
@click.option(
    "--shards",
    is_flag=True,
    help="combine the runs of one commit and machine class (from --kperf-shard i/n) into one run",
)
@user_errors
def merge_cmd(inputs: tuple[str, ...], output: str, shards: bool) -> None:
    """Merge run databases into one: no row lost or duplicated, machine classes kept apart.

    An existing output is a merge target: it is merged in first, as if it were named as the first
    input, so nothing in it is lost and running the same merge again (a retried CI step) changes
    nothing. An existing file that is not a kperf database is refused and left as it is."""
    out = Path(output)
    paths = [Path(p) for p in inputs]
    if out.exists() and not any(store.same_database(out, p) for p in paths):
        if not out.is_file():
            raise KperfError(f"{output}: exists and is not a database file; choose another -o")
        paths.insert(0, out)  # validated like every input: a non-database output is exit 2, untouched
        click.echo(terminal_safe(f"kperf merge: {output} exists; merging into it"))
    stats = merge_databases(paths, out, shards=shards)
    click.echo(
        terminal_safe(
            f"kperf merge: {len(paths)} database(s) -> {output}: {stats.runs} run(s), "
            f"{stats.variants} variant(s), {stats.rows} row(s)"
        )
    )
    if stats.conflicting_variants:
        click.echo(
            terminal_safe(
                f"kperf merge: {stats.conflicting_variants} variant(s) measured differently in more than one "
                "input for the same run; the first input's measurement was kept"
            ),
            err=True,
        )
    elif stats.duplicate_variants:
        click.echo(f"kperf merge: {stats.duplicate_variants} variant(s) were already there, unchanged")
    if shards:
        for rid, members in stats.combined.items():
            if len(members) > 1:
                click.echo(terminal_safe(f"kperf merge: run {rid} = {', '.join(members)}"))
