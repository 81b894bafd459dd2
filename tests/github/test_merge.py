"""`kperf merge`: random splits of a run merge back to the whole; merging is idempotent; machine
classes stay apart; broken or newer inputs are refused and no input is ever written."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kperf_ci import store
from kperf_ci.cli import main
from kperf_ci.merging import merge_databases
from tests.conftest import wait_for

ROOT = Path(__file__).resolve().parents[2]
TABLES = ("run_variants", "metrics", "samples", "blobs")


def dump(path: Path) -> dict:
    """Everything a run database says, independent of row order and of per-file kernel ids."""
    c = sqlite3.connect(path)
    out = {"runs": sorted(map(repr, c.execute("SELECT * FROM runs ORDER BY run_id")))}
    used = set()
    for t in TABLES:
        rows = c.execute(f"SELECT * FROM {t}").fetchall()
        out[t] = sorted(map(repr, rows))
        used |= {r[1] for r in c.execute(f"SELECT run_id, variant_id FROM {t}") if r[1]}
    defs = c.execute(
        "SELECT v.id, k.name, k.source, v.arch, v.spec, v.config "
        "FROM variants v JOIN kernels k ON k.id = v.kernel_id"
    ).fetchall()
    out["variants"] = sorted(repr(d) for d in defs if d[0] in used)
    c.close()
    return out


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> Path:
    """A copy of the committed H100 run, migrated to the current schema by the store (not by merge,
    so a merge that lost rows could not hide it by losing them here too)."""
    d = tmp_path_factory.mktemp("whole")
    shutil.copy(ROOT / "tests/data/gpu/h100_examples.db", d / "whole.db")
    db = store.open_db(d / "whole.db", create=True)
    db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.conn.execute("PRAGMA journal_mode = DELETE")
    db.close()
    assert dump(d / "whole.db")["run_variants"], "the fixture run must have variants"
    return d / "whole.db"


def variant_ids(path: Path) -> list[str]:
    c = sqlite3.connect(path)
    ids = sorted({r[0] for t in TABLES for r in c.execute(f"SELECT variant_id FROM {t}") if r[0]})
    c.close()
    return ids


def part(whole: Path, dest: Path, keep: set[str], run_blobs: bool) -> Path:
    shutil.copy(whole, dest)
    c = sqlite3.connect(dest)
    for t in TABLES:
        rows = c.execute(f"SELECT DISTINCT variant_id FROM {t}").fetchall()
        for (vid,) in rows:
            if (vid == "" and not run_blobs) or (vid != "" and vid not in keep):
                c.execute(f"DELETE FROM {t} WHERE variant_id = ?", (vid,))
    c.commit()
    c.close()
    return dest


def digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
@pytest.mark.slow
def test_random_splits_merge_back_to_the_whole(whole, tmp_path_factory, data):
    tmp = tmp_path_factory.mktemp("split")
    ids = variant_ids(whole)
    k = data.draw(st.integers(1, 4), label="parts")
    # each variant goes to one part, some also to a second one (a shard overlap: identical rows)
    home = data.draw(st.lists(st.integers(0, k - 1), min_size=len(ids), max_size=len(ids)), label="home")
    extra = data.draw(st.lists(st.integers(-1, k - 1), min_size=len(ids), max_size=len(ids)), label="extra")
    blobs_in = data.draw(st.integers(0, k - 1), label="run-level blobs in part")
    parts = []
    for i in range(k):
        keep = {v for v, h, e in zip(ids, home, extra, strict=True) if h == i or e == i}
        parts.append(part(whole, tmp / f"p{i}.db", keep, run_blobs=(i == blobs_in)))
    order = data.draw(st.permutations(parts), label="order")
    before = [digest(p) for p in parts]
    merge_databases(list(order), tmp / "all.db")
    assert dump(tmp / "all.db") == dump(whole)
    # merging again, with the result itself and any of the parts, changes nothing
    again = data.draw(st.lists(st.sampled_from(parts), max_size=3), label="again")
    merge_databases([tmp / "all.db", *again], tmp / "all.db")
    assert dump(tmp / "all.db") == dump(whole)
    assert [digest(p) for p in parts] == before, "inputs are never written"


def set_run(path: Path, **fields) -> None:
    c = sqlite3.connect(path)
    for k, v in fields.items():
        c.execute(f"UPDATE runs SET {k} = ?", (v,))
    for t in TABLES:  # run ids are in every run table
        if "run_id" in fields:
            c.execute(f"UPDATE {t} SET run_id = ?", (fields["run_id"],))
    c.commit()
    c.close()


def test_shards_of_one_class_combine_and_classes_stay_apart(whole, tmp_path):
    ids = variant_ids(whole)
    half = set(ids[: len(ids) // 2])
    a = part(whole, tmp_path / "a.db", half, run_blobs=True)
    b = part(whole, tmp_path / "b.db", set(ids) - half, run_blobs=False)
    set_run(a, run_id="shard-a", host_hash="host-1")
    set_run(b, run_id="shard-b", host_hash="host-2", started_at="2020-01-01T00:00:00+00:00")
    other = part(whole, tmp_path / "a100.db", set(ids), run_blobs=True)
    fp = json.loads(sqlite3.connect(other).execute("SELECT fingerprint FROM runs").fetchone()[0])
    fp["gpu"] = "NVIDIA A100-SXM4-80GB"
    set_run(other, run_id="a100-run", fingerprint=json.dumps(fp), gpu=fp["gpu"])

    r = CliRunner().invoke(
        main, ["merge", str(a), str(b), str(other), "-o", str(tmp_path / "all.db"), "--shards"]
    )
    assert r.exit_code == 0, r.output
    c = sqlite3.connect(tmp_path / "all.db")
    runs = c.execute("SELECT run_id, gpu, started_at FROM runs ORDER BY gpu").fetchall()
    assert len(runs) == 2, "one run per machine class"
    assert {g for _, g, _ in runs} == {"NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"}
    h100 = next(r for r in runs if "H100" in r[1])
    assert h100[2] == "2020-01-01T00:00:00+00:00"  # the earliest shard's start
    n = {
        rid: c.execute("SELECT count(*) FROM run_variants WHERE run_id = ?", (rid,)).fetchone()[0]
        for rid, _, _ in runs
    }
    assert sorted(n.values()) == [len(ids), len(ids)]
    c.close()
    # without --shards the two shard runs stay two runs
    r = CliRunner().invoke(main, ["merge", str(a), str(b), "-o", str(tmp_path / "two.db")])
    assert r.exit_code == 0
    assert sqlite3.connect(tmp_path / "two.db").execute("SELECT count(*) FROM runs").fetchone()[0] == 2


def test_shards_on_two_cards_of_one_host_combine(whole, tmp_path):
    """Two shards run side by side on GPU 0 and GPU 1 (issue 26): one machine class, one run,
    whose fingerprint then names neither card."""
    ids = variant_ids(whole)
    half = set(ids[: len(ids) // 2])
    a = part(whole, tmp_path / "a.db", half, run_blobs=True)
    b = part(whole, tmp_path / "b.db", set(ids) - half, run_blobs=False)
    fp = json.loads(sqlite3.connect(a).execute("SELECT fingerprint FROM runs").fetchone()[0])
    for path, rid, card in ((a, "shard-a", "0"), (b, "shard-b", "1")):
        extra = {**fp["extra"], "gpu_uuid": f"GPU-{card}", "gpu_pci_bus_id": f"00000000:{card}b:00.0"}
        set_run(path, run_id=rid, fingerprint=json.dumps({**fp, "extra": extra}))
    r = CliRunner().invoke(main, ["merge", str(a), str(b), "-o", str(tmp_path / "all.db"), "--shards"])
    assert r.exit_code == 0, r.output
    c = sqlite3.connect(tmp_path / "all.db")
    (rid, stored), *more = c.execute("SELECT run_id, fingerprint FROM runs").fetchall()
    assert not more, "two cards of one model are one machine class"
    assert rid.startswith("shards-")
    assert c.execute("SELECT count(*) FROM run_variants").fetchone()[0] == len(ids)
    extra = json.loads(stored)["extra"]
    assert "gpu_uuid" not in extra and "gpu_pci_bus_id" not in extra
    assert extra["capability"] == fp["extra"]["capability"]
    c.close()


def test_conflicting_measurements_keep_the_first_and_say_so(whole, tmp_path):
    a = part(whole, tmp_path / "a.db", set(variant_ids(whole)), run_blobs=True)
    b = part(whole, tmp_path / "b.db", set(variant_ids(whole)), run_blobs=True)
    c = sqlite3.connect(b)
    c.execute("UPDATE metrics SET value = value * 2")
    c.commit()
    c.close()
    r = CliRunner().invoke(main, ["merge", str(a), str(b), "-o", str(tmp_path / "all.db")])
    assert r.exit_code == 0
    assert "measured differently" in r.output
    assert dump(tmp_path / "all.db") == dump(whole)


def test_refuses_corrupt_and_newer_inputs(whole, tmp_path):
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"SQLite format 3\x00" + b"\xff" * 5000)
    newer = tmp_path / "newer.db"
    shutil.copy(whole, newer)
    c = sqlite3.connect(newer)
    c.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    c.commit()
    c.close()
    for broken, word in ((bad, "corrupt"), (newer, "newer")):
        before = digest(broken)
        r = CliRunner().invoke(main, ["merge", str(whole), str(broken), "-o", str(tmp_path / "out.db")])
        assert r.exit_code == 2, r.output
        assert str(broken) in r.output and word in r.output
        assert "--db" not in r.output and "--baseline" not in r.output  # merge has no such options
        assert not (tmp_path / "out.db").exists()
        assert digest(broken) == before


def test_existing_output_is_a_merge_target_and_a_retry_changes_nothing(whole, tmp_path):
    ids = variant_ids(whole)
    a = part(whole, tmp_path / "a.db", set(ids[: len(ids) // 2]), run_blobs=True)
    b = part(whole, tmp_path / "b.db", set(ids[len(ids) // 2 :]), run_blobs=False)
    out = tmp_path / "all.db"
    args = ["merge", str(a), str(b), "-o", str(out)]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    first = dump(out)
    assert first == dump(whole)
    r = CliRunner().invoke(main, args)  # the CI step retried: the output exists now
    assert r.exit_code == 0, r.output
    assert "merging into it" in r.output
    assert dump(out) == first
    # an existing output that holds other rows keeps them: it is merged into, not replaced
    c = part(whole, tmp_path / "c.db", set(ids[:1]), run_blobs=False)
    out2 = tmp_path / "grow.db"
    shutil.copy(c, out2)
    r = CliRunner().invoke(main, ["merge", str(b), "-o", str(out2)])
    assert r.exit_code == 0, r.output
    assert set(variant_ids(out2)) == set(ids[:1]) | set(ids[len(ids) // 2 :])


def test_refuses_to_replace_an_existing_file_that_is_not_a_database(whole, tmp_path):
    out = tmp_path / "precious.db"
    out.write_bytes(b"keep me, I am not a database" * 10)
    r = CliRunner().invoke(main, ["merge", str(whole), "-o", str(out)])
    assert r.exit_code == 2, r.output
    assert str(out) in r.output and "--db" not in r.output and "--baseline" not in r.output
    assert out.read_bytes() == b"keep me, I am not a database" * 10


def test_each_shards_launch_manifest_is_kept_and_a_shared_variant_is_no_conflict(whole, tmp_path):
    """Static shards of one suite (the issue-26 walkthrough): each stores its own run-level
    `launches` manifest, and a kernel that tests of both shards compile to the same variant is
    stored by both under a different test. Both manifests survive the merge (shard 2's was dropped
    without a word) and the shared variant is not "measured differently"."""
    from kperf_ci.capture.static.manifest import BLOB
    from kperf_ci.prcheck.passes import load_manifest

    ids = variant_ids(whole)
    a = part(whole, tmp_path / "a.db", set(ids), run_blobs=False)
    b = part(whole, tmp_path / "b.db", {ids[0]}, run_blobs=False)
    for path, rid, test in ((a, "shard-a", "tests/t.py::test_a"), (b, "shard-b", "tests/t.py::test_b")):
        set_run(path, run_id=rid)
        c = sqlite3.connect(path)
        c.execute("UPDATE run_variants SET test = ? WHERE variant_id = ?", (test, ids[0]))
        c.commit()
        c.close()
        store.save_blob(path, rid, "", BLOB, json.dumps({test: [{"kernel": "k"}]}))
    out = tmp_path / "all.db"
    r = CliRunner().invoke(main, ["merge", str(a), str(b), "-o", str(out), "--shards"])
    assert r.exit_code == 0, r.output
    assert "measured differently" not in r.output
    (rid,) = [x[0] for x in sqlite3.connect(out).execute("SELECT run_id FROM runs")]
    assert set(load_manifest(str(out), rid)) == {"tests/t.py::test_a", "tests/t.py::test_b"}
    before = dump(out)
    r = CliRunner().invoke(main, ["merge", str(a), str(b), "-o", str(out), "--shards"])
    assert r.exit_code == 0 and dump(out) == before  # merging again adds nothing


# --------------------------------------------------------------------------- a live output (issue 37)

WRITER = """
import pathlib, sqlite3, sys, time
db, ready, go = sys.argv[1:4]
c = sqlite3.connect(db, isolation_level=None, timeout=120)
c.execute("BEGIN IMMEDIATE")  # another job's writer, in the middle of its transaction
rid = c.execute("SELECT run_id FROM runs LIMIT 1").fetchone()[0]
c.execute("INSERT INTO blobs(run_id, variant_id, name, data) VALUES (?, '', 'writer-mark', x'01')", (rid,))
pathlib.Path(ready).touch()
deadline = time.monotonic() + 120
while not pathlib.Path(go).exists() and time.monotonic() < deadline:
    time.sleep(0.02)
c.execute("COMMIT")
print("committed")
"""


def _cli(*args: str, busy_timeout_s: float | None = None) -> subprocess.Popen:
    """`kperf ARGS` as its own process; ``busy_timeout_s`` shortens the store's lock wait (30 s)."""
    patch = f"import kperf_ci.store.db as d; d.BUSY_TIMEOUT_S = {busy_timeout_s}; " if busy_timeout_s else ""
    code = patch + f"from kperf_ci.cli import main; main({list(args)!r})"
    return subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _blob_names(path: Path) -> set[str]:
    c = sqlite3.connect(path)
    try:
        return {r[0] for r in c.execute("SELECT name FROM blobs")}
    finally:
        c.close()


def test_merging_into_a_live_database_loses_no_committed_transaction(whole, tmp_path):
    """Was: the merge did not wait for the writer's lock, renamed a merged copy over the file and
    deleted its -wal: the writer's COMMIT returned without error, and its row was gone."""
    ids = variant_ids(whole)
    live = part(whole, tmp_path / "live.db", set(ids[: len(ids) // 2]), run_blobs=True)
    b = part(whole, tmp_path / "b.db", set(ids[len(ids) // 2 :]), run_blobs=False)
    ready, go = tmp_path / "ready", tmp_path / "go"
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(live), str(ready), str(go)], stdout=subprocess.PIPE, text=True
    )
    try:
        wait_for(ready.exists, "the writer to hold its transaction", writer)
        merge = _cli("merge", str(b), "-o", str(live))
        try:  # a merge that does not wait for the lock is done by now; one that waits is not
            merge.wait(timeout=3)
        except subprocess.TimeoutExpired:
            pass
        go.touch()
        assert writer.communicate(timeout=60)[0].strip() == "committed"
        out, err = merge.communicate(timeout=120)
    finally:
        go.touch()
        writer.kill()
    assert merge.returncode == 0, out + err
    assert "merging into it" in out
    assert "writer-mark" in _blob_names(live), "the writer's committed row was lost"
    assert set(variant_ids(live)) == set(ids)


def test_a_merge_refuses_while_another_writer_keeps_the_lock(whole, tmp_path):
    ids = variant_ids(whole)
    live = part(whole, tmp_path / "live.db", set(ids[:1]), run_blobs=False)
    b = part(whole, tmp_path / "b.db", set(ids[1:]), run_blobs=False)
    before = dump(live)
    holder = sqlite3.connect(live, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute(
        "INSERT INTO blobs(run_id, variant_id, name, data) SELECT run_id, '', 'held', x'01' FROM runs"
    )
    try:
        merge = _cli("merge", str(b), "-o", str(live), busy_timeout_s=0.5)
        out, err = merge.communicate(timeout=120)
    finally:
        holder.execute("COMMIT")  # the holder's transaction still commits, whole
        holder.close()
    assert merge.returncode == 2, out + err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "locked for writing" in lines[0] and "nothing merged" in lines[0], err
    after = dump(live)
    assert after["run_variants"] == before["run_variants"] and "held" in _blob_names(live)
