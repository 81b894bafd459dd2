"""store.py against real SQLite files: round trips, schema versions, refusals, concurrency."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path

import pytest
from conftest import make_info, make_result

from kperf_ci import store
from kperf_ci.model import Metric, VariantResult

REPO = Path(__file__).resolve().parents[1]


def test_round_trip(db_path):
    info = make_info("r1", label="base")
    r = make_result(registers=32, spills=0, samples=[1.0, 1.5, 2.0], thresholds={"registers": 0.2})
    r.tags = ["smoke"]
    r.sass_hash = "ab" * 8
    r.artifacts = {"sass": "FFMA R1, R2, R3 ;\n"}
    broken = make_result("bad_kernel")
    broken.error = "compile failed: boom"
    assert store.save_run(db_path, info, [r, broken]) == "r1"

    rec = store.load_run(db_path, "r1", artifacts=True)
    assert rec.info == info
    by_kernel = {x.key.kernel: x for x in rec.results}
    got = by_kernel["add_kernel"]
    assert got.key == r.key and got.key.id == r.key.id
    assert {m.name: m for m in got.metrics} == {m.name: m for m in r.metrics}
    assert got.samples == [1.0, 1.5, 2.0]
    assert got.thresholds == {"registers": 0.2} and got.tags == ["smoke"] and got.sass_hash == "ab" * 8
    assert got.artifacts == {"sass": "FFMA R1, R2, R3 ;\n"}
    assert by_kernel["bad_kernel"].error == "compile failed: boom"
    # artifacts only on request
    assert store.load_run(db_path, "r1").results[0].artifacts == {}


def test_latest_label_prefix_and_list(db_path):
    store.save_run(db_path, make_info("aaa111", started_at="2026-01-01T00:00:00Z", label="base"), [])
    store.save_run(db_path, make_info("bbb222", started_at="2026-01-03T00:00:00Z", label="head"), [])
    store.save_run(db_path, make_info("ccc333", started_at="2026-01-02T00:00:00Z", label="base"), [])
    assert store.load_run(db_path).info.run_id == "bbb222"
    assert store.load_run(db_path, label="base").info.run_id == "ccc333"
    assert store.load_run(db_path, "aaa").info.run_id == "aaa111"
    assert [i.run_id for i in store.list_runs(db_path)] == ["aaa111", "ccc333", "bbb222"]
    with pytest.raises(store.RunNotFoundError, match="no run with id 'zzz'"):
        store.load_run(db_path, "zzz")
    store.save_run(db_path, make_info("aaa999"), [])
    with pytest.raises(store.RunNotFoundError, match="ambiguous"):
        store.load_run(db_path, "aaa")


def test_add_results_and_replace(db_path):
    info = make_info("r1")
    store.save_run(db_path, info, [make_result("k1", registers=10)])
    store.add_results(db_path, "r1", [make_result("k2", registers=20)])
    store.add_results(db_path, "r1", [make_result("k1", registers=11)])  # same variant: replaced
    rec = store.load_run(db_path, "r1")
    assert {x.key.kernel: x.metric("registers").value for x in rec.results} == {"k1": 11, "k2": 20}
    with pytest.raises(store.RunNotFoundError):
        store.add_results(db_path, "nope", [])
    store.add_results(db_path, "r2", [make_result("k3")], info=make_info("r2"))
    # a run created by add_results is "running" until finish_run: listed only on request
    assert [i.run_id for i in store.list_runs(db_path)] == ["r1"]
    assert len(store.list_runs(db_path, include_incomplete=True)) == 2
    assert store.finish_run(db_path, "r2") == store.COMPLETE
    assert len(store.list_runs(db_path)) == 2


def test_metric_history(db_path):
    r = make_result()
    for i in range(5):
        res = make_result(registers=30 + i)
        store.save_run(db_path, make_info(f"r{i}", started_at=f"2026-01-0{i + 1}T00:00:00Z"), [res])
    hist = store.metric_history(db_path, r.key.id, "registers")
    assert [v for _, v in hist] == [30, 31, 32, 33, 34]
    last2 = store.metric_history(db_path, r.key.id, "registers", limit=2)
    assert [(i.run_id, v) for i, v in last2] == [("r3", 33), ("r4", 34)]
    assert store.metric_history(db_path, "nope", "registers") == []


def test_blobs(db_path):
    store.save_run(db_path, make_info("r1"), [])
    store.save_blob(db_path, "r1", "", "timeline", b"\x00\x01" * 1000)
    store.save_blob(db_path, "r1", "v1", "sass", "text")
    assert store.load_blob(db_path, "r1", "", "timeline") == b"\x00\x01" * 1000
    assert store.load_blob(db_path, "r1", "v1", "sass") == b"text"
    assert store.load_blob(db_path, "r1", "v1", "missing") is None
    raw = (
        sqlite3.connect(db_path).execute("SELECT length(data) FROM blobs WHERE name='timeline'").fetchone()[0]
    )
    assert raw < 100  # compressed
    with pytest.raises(store.RunNotFoundError):
        store.save_blob(db_path, "nope", "", "x", b"")


def test_copy_run(tmp_path):
    src, dst = tmp_path / "run.db", tmp_path / "sub" / "baseline.db"
    r = make_result(registers=32, samples=[1.0, 2.0])
    r.artifacts = {"sass": "X"}
    store.save_run(src, make_info("r1"), [r, make_result("k2", registers=7)])
    store.save_run(src, make_info("r2"), [make_result("k3")])
    assert store.copy_run(src, dst, "r1") == "r1"
    assert store.load_run(dst, artifacts=True).results == store.load_run(src, "r1", artifacts=True).results
    # copying again replaces, does not duplicate; latest by default
    store.copy_run(src, dst, "r1")
    assert store.copy_run(src, dst) == "r2"
    assert [i.run_id for i in store.list_runs(dst)] == ["r1", "r2"]
    with sqlite3.connect(dst) as c:
        assert c.execute("SELECT count(*) FROM samples").fetchone()[0] == 2


# --------------------------------------------------------------------------- schema


def test_schema_version_and_migrations_recorded(db_path):
    store.save_run(db_path, make_info(), [])
    with sqlite3.connect(db_path) as c:
        assert c.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(
            store.SCHEMA_VERSION
        )
        assert c.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        names = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    assert {"idx_metrics_variant_name", "idx_runs_started_at"} <= names


def test_pending_migration_applied_in_order(db_path, monkeypatch):
    store.save_run(db_path, make_info("r1"), [make_result(registers=1)])

    def m2(db):
        db.execute("ALTER TABLE runs ADD COLUMN note TEXT")

    def m3_fails(db):
        db.execute("ALTER TABLE runs ADD COLUMN other TEXT")
        raise RuntimeError("migration bug")

    monkeypatch.setattr(store.schema, "MIGRATIONS", [*store.schema.MIGRATIONS, m2, m3_fails])
    monkeypatch.setattr(store.schema, "SCHEMA_VERSION", len(store.schema.MIGRATIONS))
    with pytest.raises(RuntimeError, match="migration bug"):
        store.open_db(db_path, create=True)  # a writer migrates the file (a reader, a copy)
    with sqlite3.connect(db_path) as c:
        # m2 committed on its own, m3 rolled back whole
        version = c.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0]
        assert version == str(store.schema.SCHEMA_VERSION - 1)  # all but the failing one
        cols = {r[1] for r in c.execute("PRAGMA table_info(runs)")}
    assert "note" in cols and "other" not in cols


def test_migration_script_runs_inside_its_transaction(db_path, monkeypatch):
    # A multi-statement migration must be all or nothing. sqlite3's executescript COMMITs first
    # (and on sqlite-utils 3.38 left BEGIN IMMEDIATE without a transaction: "cannot commit - no
    # transaction is active"), which would keep the first table of a migration that then fails.
    store.save_run(db_path, make_info("r1"), [])

    def m_half(db):
        store.schema._execute_script(db, "CREATE TABLE half_done (x);\nCREATE TABLE half_done (x);\n")

    monkeypatch.setattr(store.schema, "MIGRATIONS", [*store.schema.MIGRATIONS, m_half])
    monkeypatch.setattr(store.schema, "SCHEMA_VERSION", len(store.schema.MIGRATIONS))
    with pytest.raises(sqlite3.OperationalError, match="already exists"):
        store.open_db(db_path, create=True)
    with sqlite3.connect(db_path) as c:
        tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        version = c.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0]
    c.close()
    assert "half_done" not in tables and version == str(store.schema.SCHEMA_VERSION - 1)


def test_newer_schema_refused_and_untouched(db_path):
    store.save_run(db_path, make_info("r1"), [make_result(registers=1)])
    with sqlite3.connect(db_path) as c:
        c.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(store.SCHEMA_VERSION + 1),))
    c.close()
    before = db_path.read_bytes()
    for call in (
        lambda: store.load_run(db_path),
        lambda: store.save_run(db_path, make_info("r2"), []),
        lambda: store.add_results(db_path, "r1", [make_result()]),
        lambda: store.copy_run(db_path, db_path.with_name("other.db")),
    ):
        with pytest.raises(store.NewerSchemaError) as ei:
            call()
        msg = str(ei.value)
        assert "\n" not in msg and str(db_path) in msg and "newer" in msg and "upgrade" in msg
    assert db_path.read_bytes() == before
    assert not db_path.with_name("other.db").exists()


@pytest.mark.parametrize(
    "content, needle",
    [
        (b"", "empty"),
        (os.urandom(4096), "not a SQLite database"),
        (b"SQLite format 3\x00" + b"\x00" * 20, "truncated"),
    ],
    # fixed ids: pytest 8.0 names a bytes parameter after its value, so random bytes gave each
    # xdist worker a different collection ("Different tests were collected")
    ids=["empty", "random-bytes", "truncated"],
)
def test_garbage_refused(db_path, content, needle):
    db_path.write_bytes(content)
    with pytest.raises(store.StoreError, match=needle) as ei:
        store.load_run(db_path)
    assert "\n" not in str(ei.value)
    if content:
        with pytest.raises(store.CorruptDatabaseError):
            store.save_run(db_path, make_info(), [])
        assert db_path.read_bytes() == content  # never overwritten


def test_truncated_and_damaged_database_refused(tmp_path):
    good = tmp_path / "good.db"
    store.save_run(
        good, make_info("r1"), [make_result(f"k{i}", registers=i, samples=[1.0] * 200) for i in range(50)]
    )
    data = good.read_bytes()
    assert len(data) > 8192
    for name, content in {
        "truncated.db": data[: len(data) // 2],
        "damaged.db": data[:4096] + os.urandom(len(data) - 4096),
    }.items():
        p = tmp_path / name
        p.write_bytes(content)
        with pytest.raises(store.CorruptDatabaseError) as ei:
            store.save_run(p, make_info("r2"), [])
        msg = str(ei.value)
        assert "\n" not in msg and str(p) in msg
        assert p.read_bytes() == content, name


def test_file_damaged_after_use_is_checked_again(tmp_path):
    """Opens skip quick_check for a file this process validated and has not seen change since;
    a change made by anyone else (size, mtime, inode) brings the full check back."""
    p = tmp_path / "run.db"
    store.save_run(p, make_info("r1"), [make_result(f"k{i}", samples=[1.0] * 300) for i in range(30)])
    store.load_run(p)
    data = p.read_bytes()
    p.write_bytes(data[:8192] + os.urandom(len(data) - 8192))  # same size, new content
    with pytest.raises(store.CorruptDatabaseError):
        store.save_run(p, make_info("r2"), [])


def test_foreign_sqlite_file_refused(db_path):
    with sqlite3.connect(db_path) as c:
        c.execute("CREATE TABLE something (x)")
    c.close()
    before = db_path.read_bytes()
    with pytest.raises(store.CorruptDatabaseError, match="not a kperf run database"):
        store.save_run(db_path, make_info(), [])
    assert db_path.read_bytes() == before


def test_missing_file(tmp_path):
    p = tmp_path / "nope.db"
    for call in (
        lambda: store.load_run(p),
        lambda: store.list_runs(p),
        lambda: store.copy_run(p, tmp_path / "b.db"),
    ):
        with pytest.raises(store.MissingDatabaseError) as ei:
            call()
        assert str(p) in str(ei.value) and "\n" not in str(ei.value)
    assert not p.exists()


def test_unwritable_location(tmp_path):
    """Independent of permissions (tests may run as root): the parent "directory" is a file."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(store.ReadOnlyDatabaseError) as ei:
        store.save_run(blocker / "run.db", make_info(), [])
    assert "\n" not in str(ei.value) and "writable" in str(ei.value)


def _write_as_nobody(db: str, q) -> None:
    """Child process (forked): drop root, then try to write and to read."""
    if os.geteuid() == 0:
        os.setgid(65534)
        os.setuid(65534)
    try:
        store.save_run(db, make_info("r2"), [])
        q.put("WROTE")
    except store.ReadOnlyDatabaseError as e:
        q.put(f"RO: {e}")
    except Exception as e:  # noqa: BLE001 - report anything else to the parent
        q.put(f"OTHER: {type(e).__name__}: {e}")
    try:
        q.put(f"READ: {store.load_run(db).info.run_id}")
    except Exception as e:  # noqa: BLE001
        q.put(f"READ FAILED: {type(e).__name__}: {e}")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.parametrize("what", ["file", "dir"])
def test_permission_denied(what):
    """A real permission check. Root ignores file modes, so the writer is a forked child that
    drops to uid 65534 (nobody) first; without root it simply runs as the current user."""
    base = Path(tempfile.mkdtemp(prefix="kperf-ro-"))
    try:
        db = base / "run.db"
        store.save_run(db, make_info("r1"), [])
        os.chmod(db, 0o444)
        os.chmod(base, 0o777 if what == "file" else 0o555)  # "file": only the file blocks
        before = db.read_bytes()
        ctx = multiprocessing.get_context("fork")
        q = ctx.Queue()
        proc = ctx.Process(target=_write_as_nobody, args=(str(db), q))
        proc.start()
        msgs = [q.get(timeout=60), q.get(timeout=60)]
        proc.join(60)
        assert msgs[0].startswith("RO: ") and str(db) in msgs[0], msgs
        assert "\n" not in msgs[0]
        assert msgs[1] == "READ: r1"  # reading a read-only database still works
        assert db.read_bytes() == before
    finally:
        os.chmod(base, 0o755)
        shutil.rmtree(base, ignore_errors=True)


# --------------------------------------------------------------------------- concurrency


def _writer(path: str, worker: int, n_runs: int, shared_run: str) -> None:
    for i in range(n_runs):
        results = [make_result(f"w{worker}_k{j}", registers=i, samples=[0.1 * j] * 5) for j in range(3)]
        store.save_run(path, make_info(f"w{worker}-r{i}"), results)
    # and everybody appends to one shared run, as xdist workers do
    store.add_results(
        path, shared_run, [make_result(f"shared_w{worker}", registers=worker)], info=make_info(shared_run)
    )


def test_concurrent_writers_lose_nothing(tmp_path):
    path = str(tmp_path / "shared.db")  # not created up front: creation races too
    n_workers, n_runs = 6, 8
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, w, n_runs, "shared")) for w in range(n_workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * n_workers
    runs = {i.run_id for i in store.list_runs(path, include_incomplete=True)}
    assert runs == {f"w{w}-r{i}" for w in range(n_workers) for i in range(n_runs)} | {"shared"}
    with sqlite3.connect(path) as c:
        assert c.execute("SELECT count(*) FROM run_variants").fetchone()[0] == n_workers * (n_runs * 3 + 1)
        assert c.execute("SELECT count(*) FROM samples").fetchone()[0] == n_workers * n_runs * 3 * 5
        assert c.execute("SELECT count(*) FROM metrics").fetchone()[0] == n_workers * (n_runs * 3 + 1)
    shared = store.load_run(path, "shared")
    assert sorted(r.key.kernel for r in shared.results) == sorted(f"shared_w{w}" for w in range(n_workers))


def test_result_with_no_metrics_round_trips(db_path):
    r = VariantResult(key=make_result().key, metrics=[Metric("time.median", 0.5, "ms", "time")])
    store.save_run(db_path, make_info("r1"), [r])
    assert store.load_run(db_path).results[0].metrics == r.metrics


# --------------------------------------------------------------------------- run status


def test_latest_run_skips_incomplete_runs_but_an_explicit_id_loads_them(db_path):
    store.save_run(db_path, make_info("done", started_at="2026-01-01T00:00:00Z"), [make_result(registers=1)])
    store.save_run(db_path, make_info("killed", started_at="2026-01-02T00:00:00Z"), [], status=store.RUNNING)
    store.save_run(
        db_path,
        make_info("ctrlc", started_at="2026-01-03T00:00:00Z"),
        [make_result(registers=9)],
        status=store.INTERRUPTED,
    )
    latest = store.load_run(db_path)
    # newer part-runs must not become "the latest": compare/baseline would take them silently
    assert latest.info.run_id == "done" and latest.status == store.COMPLETE
    assert latest.skipped == [("ctrlc", store.INTERRUPTED), ("killed", store.RUNNING)]
    explicit = store.load_run(db_path, "ctrl")
    assert explicit.info.run_id == "ctrlc" and explicit.status == store.INTERRUPTED and explicit.skipped == []
    assert [i.run_id for i in store.list_runs(db_path)] == ["done"]
    assert [i.run_id for i in store.list_runs(db_path, include_incomplete=True)] == [
        "done",
        "killed",
        "ctrlc",
    ]
    assert store.run_statuses(db_path) == {"done": "complete", "killed": "running", "ctrlc": "interrupted"}


def test_only_incomplete_runs_is_one_line_error(db_path):
    store.save_run(db_path, make_info("killed"), [], status=store.RUNNING)
    with pytest.raises(store.RunNotFoundError) as ei:
        store.load_run(db_path)
    assert "no complete run" in str(ei.value) and "killed (running)" in str(ei.value)
    assert "\n" not in str(ei.value)


def test_finish_run_sets_status_from_what_was_written(db_path):
    # the xdist path: a row created up front, parts appended, then marked finished
    for rid, results, interrupted, want in [
        ("a", [make_result(registers=1)], False, store.COMPLETE),
        ("b", [], False, store.EMPTY),
        ("c", [make_result(registers=1)], True, store.INTERRUPTED),
    ]:
        store.save_run(db_path, make_info(rid), [], status=store.RUNNING)
        store.add_results(db_path, rid, results)
        assert store.run_statuses(db_path)[rid] == store.RUNNING
        assert store.finish_run(db_path, rid, interrupted=interrupted) == want
        assert store.load_run(db_path, rid).status == want
    assert store.save_run(db_path, make_info("d"), []) and store.run_statuses(db_path)["d"] == store.EMPTY
    with pytest.raises(store.RunNotFoundError):
        store.finish_run(db_path, "nope")


def test_version_1_database_migrates_with_its_runs_finished(db_path):
    store.save_run(db_path, make_info("full"), [make_result(registers=1)])
    store.save_run(db_path, make_info("none"), [])
    with sqlite3.connect(db_path) as c:  # back to what a schema-1 kperf-ci wrote
        c.execute("DROP INDEX idx_runs_status")
        c.execute("ALTER TABLE runs DROP COLUMN status")
        c.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    c.close()
    before = db_path.read_bytes()
    assert store.run_statuses(db_path) == {"full": store.COMPLETE, "none": store.EMPTY}
    assert store.load_run(db_path, "full").status == store.COMPLETE
    assert db_path.read_bytes() == before  # a reader reads a migrated copy (issue 23)
    store.save_run(db_path, make_info("new"), [])  # a writer migrates the file itself
    with sqlite3.connect(db_path) as c:
        assert c.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == "2"
    c.close()
    assert store.run_statuses(db_path)["full"] == store.COMPLETE


def test_blobs_are_written_with_the_run(db_path):
    store.save_run(db_path, make_info("r1"), [make_result(registers=1)], blobs=[("", "log", "hello")])
    assert store.load_blob(db_path, "r1", "", "log") == b"hello"
    with pytest.raises(ValueError):  # a bad status fails the whole transaction: nothing written
        store.save_run(db_path, make_info("r2"), [], status="done", blobs=[("", "log", "x")])
    assert "r2" not in store.run_statuses(db_path)


# --------------------------------------------------------------------------- a lock held too long


@pytest.fixture
def short_lock_waits(monkeypatch):
    monkeypatch.setattr(store.db, "BUSY_TIMEOUT_S", 0.2)
    monkeypatch.setattr(store.locks, "LOCK_ATTEMPTS", 2)
    monkeypatch.setattr(store.locks, "LOCK_BACKOFF_S", 0.01)


def _hold_write_lock(path) -> sqlite3.Connection:
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    return holder


def test_locked_database_diverts_the_run_to_a_side_file(db_path, short_lock_waits):
    store.save_run(db_path, make_info("old"), [make_result(registers=1)])
    holder = _hold_write_lock(db_path)
    results = [make_result("k1", registers=3), make_result("k2", registers=4)]
    try:
        with pytest.raises(store.RunDivertedError) as ei:
            store.write_or_divert(
                db_path, "new", lambda p: store.save_run(p, make_info("new"), results), sleep=lambda s: None
            )
    finally:
        holder.rollback()
        holder.close()
    side = store.pending_path(db_path, "new")
    msg = str(ei.value)
    assert ei.value.written_to == side and str(side) in msg and "locked" in msg and "\n" not in msg
    # nothing measured is lost: the whole run is in the side file, complete
    rec = store.load_run(side, "new")
    assert rec.status == store.COMPLETE and len(rec.results) == 2
    assert "new" not in store.run_statuses(db_path)


def test_lock_released_during_backoff_writes_to_the_database(db_path, short_lock_waits):
    store.save_run(db_path, make_info("old"), [])
    holder = _hold_write_lock(db_path)
    waits = []

    def sleep(seconds):  # the other writer finishes while we back off
        waits.append(seconds)
        holder.rollback()

    try:
        got = store.write_or_divert(
            db_path, "new", lambda p: store.save_run(p, make_info("new"), [make_result()]), sleep=sleep
        )
    finally:
        holder.close()
    assert got == db_path and waits == [0.01]
    assert store.load_run(db_path, "new").status == store.COMPLETE
    assert not store.pending_path(db_path, "new").exists()


def test_an_older_file_read_again_is_migrated_once(tmp_path, monkeypatch):
    # Each reader's connection to a WAL database touches its empty -wal; that changed the file's
    # signature, so every open copied and migrated it again (27 times in one `kperf report -o`).
    from kperf_ci.store import db as store_db

    monkeypatch.setattr(store_db, "_COPIES", {})
    monkeypatch.setattr(store_db, "_VALIDATED", {})
    path = tmp_path / "old.db"
    shutil.copy(REPO / "tests/data/gpu/h100_examples.db", path)  # schema 1, in WAL mode
    copies = []
    real = store_db._migrated_copy
    monkeypatch.setattr(store_db, "_migrated_copy", lambda p, c: copies.append(real(p, c)) or copies[-1])
    run_id = store.list_runs(path)[0].run_id
    for _ in range(3):
        # another reader of the file open meanwhile, as a report's history is: its -wal exists,
        # empty, a new one (another inode and time) each time
        held = sqlite3.connect(path)
        held.execute("SELECT 1 FROM meta").fetchall()
        try:
            assert Path(str(path) + "-wal").stat().st_size == 0
            store.load_run(path, run_id)
        finally:
            held.close()
    assert len(store_db._COPIES) == 1 and len(set(copies)) == 1, copies
