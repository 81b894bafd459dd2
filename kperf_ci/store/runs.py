"""Writing and reading runs: one transaction per save, set-based inserts, typed reads."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlite_utils

from ..model import (
    Fingerprint,
    RunInfo,
    RunRecord,
    VariantKey,
    VariantResult,
    canonical_json,
    make_metric,
)
from .blobs import MAX_BLOB_BYTES, MAX_LOADED_BYTES, Blob, _insert_blobs, _pack, unpack
from .db import _insert_row, _opened, _write_txn
from .errors import CorruptDatabaseError, RunNotFoundError
from .schema import _RUN_TABLES, COMPLETE, EMPTY, INCOMPLETE, INTERRUPTED, RUN_STATUSES, RUNNING


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


#: runs to write, each with its results, and the ids of stored runs to delete
RunsUpdate = tuple[list[tuple[RunInfo, list[VariantResult]]], Collection[str]]


def save_runs(path: str | os.PathLike[str], make: Callable[[], RunsUpdate]) -> None:
    """Write complete runs (each replacing a run of its id) and delete the runs named, all in one
    transaction: an import that regroups stored runs is stored whole or not at all. ``make()``
    says what, and runs while this process holds the write lock of the database, created and at
    the current schema by then: what it reads of the stored runs (:func:`list_runs`,
    :func:`load_run`; WAL readers see every committed run) no other writer changes before this
    write lands, so imports run side by side merge as if one after another (reading before the
    lock, two of three concurrent imports into a new file met it half-made, "empty database")."""
    p = Path(path)
    with _opened(p, create=True) as db, _write_txn(db, p):
        runs, delete = make()
        for run_id in [*delete, *(info.run_id for info, _ in runs)]:
            db.conn.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))  # cascades
        for info, results in runs:
            _insert_row(db.conn, "runs", _run_row(info, COMPLETE if results else EMPTY))
            _insert_results(db, info.run_id, results, fresh=True)


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
    if run_id is not None and not run_id.strip():  # a LIKE '%' would take it for "any run"
        raise RunNotFoundError(
            path,
            "the run id is empty",
            "give a run id or a unique prefix (`kperf show` lists them), or leave --run out for the latest",
        )
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
        if status not in RUN_STATUSES:  # what a reader decides by (latest, baseline) must be known
            raise CorruptDatabaseError(
                p,
                f"run {rid!r} has status {status!r}, which no kperf-ci writes",
                "restore the file from git, or delete that run",
            )
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
            left = MAX_LOADED_BYTES  # many blobs below the cap of one must not add up to GBs either
            for vid, name, data in db.conn.execute(sql, args):
                if vid in results:
                    what = f"blob {name!r} of variant {vid!r} in run {rid!r}"
                    raw = unpack(data, path, what, min(MAX_BLOB_BYTES, left))
                    left -= len(raw)
                    results[vid].artifacts[name] = raw.decode("utf-8", "replace")
    return RunRecord(info=info, results=list(results.values()), status=status, skipped=skipped)


_MAX_REAL = "1.7976931348623157e308"  # a larger REAL is +-Inf (NaN is stored as NULL)


def rows_typed(path: str | os.PathLike[str], run_id: str) -> bool:
    """Whether every metric and sample row of a run holds the column types kperf-ci writes
    (text names, finite numeric values): checked in SQL, so a reader need not look at each of a large
    run's million rows in Python. False means "look closer", not necessarily "broken"."""
    num = "('integer', 'real')"
    with _opened(path) as db:
        row = db.conn.execute(
            "SELECT EXISTS(SELECT 1 FROM metrics WHERE run_id = :run AND (typeof(name) <> 'text' "
            "OR typeof(unit) <> 'text' OR typeof(kind) <> 'text' OR typeof(better) <> 'text' "
            f"OR typeof(value) NOT IN {num} OR abs(value) > {_MAX_REAL})) "
            f"OR EXISTS(SELECT 1 FROM samples WHERE run_id = :run AND (typeof(value_ms) NOT IN {num} "
            f"OR abs(value_ms) > {_MAX_REAL}))",
            {"run": run_id},
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
