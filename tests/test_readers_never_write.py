"""Issue 23, finding 5: a reader never writes its input.

``kperf show``/``compare``/``report`` on an older-schema database (the committed static example
run is at schema 1) leave the file byte for byte as it was and add nothing beside it; a
read-only place is readable; a database whose newest writes sit in a ``-wal`` that cannot be read
(read-only directory, no ``-shm``) is refused with the fix instead of silently reading the older
state. Commands run as subprocesses; the read-only cases as uid 65534 (root ignores file modes).
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import without

from kperf_ci import store
from kperf_ci.model import Fingerprint, Metric, RunInfo, VariantKey, VariantResult

REPO = Path(__file__).parent.parent
KPERF = [sys.executable, "-m", "kperf_ci.cli"]
OLD = REPO / "tests/data/static/cpu_examples.db"  # schema 1, committed


#: Runs a command with one directory bind-mounted read-only over itself, in a mount namespace of
#: its own, entered after the mount (a cwd from before would still be writable): a real read-only
#: mount, which file modes are not for root, as CI runs.
READ_ONLY = ["unshare", "-m", "sh", "-c", 'mount --bind -o ro "$0" "$0" && cd "$0" && exec "$@"']


def _can_mount_read_only() -> bool:
    try:
        with tempfile.TemporaryDirectory() as d:
            r = subprocess.run(
                [*READ_ONLY, d, "sh", "-c", "! touch x"], cwd=d, capture_output=True, timeout=30
            )
        return r.returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


needs_ro_mount = pytest.mark.skipif(not _can_mount_read_only(), reason="needs unshare -m and mount (root)")


def kperf(cwd: Path, *args: str, read_only: Path | None = None) -> subprocess.CompletedProcess:
    env = without("PYTEST_", "KPERF_", "GITHUB_")
    env.update(PYTHONPATH=str(REPO), PYTHONDONTWRITEBYTECODE="1")
    wrap = [*READ_ONLY, str(read_only)] if read_only else []
    return subprocess.run(
        [*wrap, *KPERF, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=300
    )


def _state(d: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())}


def _version(db: Path) -> int:
    conn = sqlite3.connect(f"file:{db}?immutable=1", uri=True)  # mode=ro would leave a -shm
    try:
        return int(conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0])
    finally:
        conn.close()


def test_an_older_schema_is_read_without_writing_it(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(OLD, data / "run.db")
    shutil.copy(OLD, data / "base.db")
    assert _version(data / "run.db") == 1 < store.SCHEMA_VERSION
    shutil.copy(OLD, tmp_path / "scratch.db")
    run_id = store.list_runs(tmp_path / "scratch.db")[-1].run_id  # the committed file is not opened
    before = _state(data)
    for args in (
        ("show", "--db", "data/run.db"),
        ("show", "--db", "data/run.db", "--run", run_id[:8]),
        ("compare", "--db", "data/run.db", "--baseline", "data/base.db"),
        ("report", "--db", "data/run.db", "--baseline", "data/base.db", "--format", "markdown"),
    ):
        r = kperf(tmp_path, *args)
        assert r.returncode == 0, (args, r.stdout[-2000:], r.stderr[-2000:])
    assert _state(data) == before  # not migrated in place, no -wal or -shm left beside it


@pytest.fixture
def ro_dir(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    return d


def _info(run_id: str, minute: int) -> RunInfo:
    fp = Fingerprint(cpu="cpu", triton="3.6.0", python="3.11", host_hash="x")
    return RunInfo(run_id, f"2026-01-01T00:{minute:02d}:00+00:00", "static", fp)


def _variant() -> VariantResult:
    return VariantResult(
        VariantKey("k", "sm_90", "x", "num_warps=4"), metrics=[Metric("registers", 32, "count")]
    )


@needs_ro_mount
def test_an_older_schema_in_a_read_only_place_is_readable(ro_dir):
    shutil.copy(OLD, ro_dir / "run.db")
    before = _state(ro_dir)
    r = kperf(ro_dir, "show", "--db", "run.db", read_only=ro_dir)
    assert r.returncode == 0, r.stderr
    assert "3da32507851b" in r.stdout  # the run in the committed file
    assert _state(ro_dir) == before


@needs_ro_mount
def test_a_wal_that_cannot_be_read_is_refused_not_read_stale(ro_dir):
    """The newest run sits in the -wal; the directory is read-only and holds no -shm."""
    work = ro_dir / "w"
    work.mkdir()
    store.save_run(work / "run.db", _info("older", 1), [_variant()])
    keep = sqlite3.connect(work / "run.db")  # open: the next writer's close checkpoints nothing
    keep.execute("SELECT count(*) FROM runs").fetchone()
    shutil.copy(work / "run.db", ro_dir / "run.db")  # the main file holds the older run only
    store.save_run(work / "run.db", _info("newer", 2), [_variant()])
    assert (work / "run.db-wal").stat().st_size > 0
    shutil.copy(work / "run.db-wal", ro_dir / "run.db-wal")
    keep.close()
    shutil.rmtree(work)
    r = kperf(ro_dir, "show", "--db", "run.db", read_only=ro_dir)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "run.db-wal" in lines[0] and "writable" in lines[0], r.stderr


def test_the_committed_baseline_is_at_the_current_schema():
    assert _version(REPO / "baselines/main.db") == store.SCHEMA_VERSION
