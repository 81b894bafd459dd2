"""Issue 23, findings 1-3: work bounded by what is real, not by numbers or sizes in a file.

Each command runs as a subprocess under a memory and time limit (``resource.setrlimit`` before
exec), on files this test crafts: a trace that names an absurd SM, a decompression bomb in a
blob, stored text longer than a PR comment may be.
"""

from __future__ import annotations

import json
import resource
import sqlite3
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
from conftest import without, zeros_packed

from kperf_ci import store
from kperf_ci.model import Fingerprint, Metric, RunInfo, VariantKey, VariantResult

KPERF = [sys.executable, "-m", "kperf_ci.cli"]
REPO = Path(__file__).parent.parent
MEMORY_LIMIT = 2 * 1024**3  # address space: enough for kperf with torch imported, far below a bomb
TIME_LIMIT_S = 60


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    resource.setrlimit(resource.RLIMIT_CPU, (TIME_LIMIT_S, TIME_LIMIT_S))


def kperf(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    clean = without("PYTEST_", "KPERF_", "GITHUB_")
    return subprocess.run(
        [*KPERF, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**clean, "PYTHONPATH": str(REPO), **env},
        timeout=TIME_LIMIT_S * 2,
        preexec_fn=_limits,
    )


def info(run_id: str, started: str = "2026-01-01T00:00:00+00:00", **kw) -> RunInfo:
    fp = Fingerprint(cpu="cpu", triton="3.6.0", python="3.11", host_hash="x")
    return RunInfo(run_id, started, "static", fp, git_sha="deadbeef", git_branch="main", **kw)


def variant(name: str, regs: float = 32, **artifacts: str) -> VariantResult:
    return VariantResult(
        VariantKey(name, "sm_90", "x:*fp32", "num_warps=4", test=f"t.py::{name}"),
        metrics=[Metric("registers", regs, "count"), Metric("num_warps", 4, "count")],
        sass_hash="a",
        artifacts=dict(artifacts),
    )


def one_line_error(r: subprocess.CompletedProcess, *needles: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.stderr[-2000:]
    for n in needles:
        assert n in lines[0], (n, lines[0])


# --------------------------------------------------------------------------- 2: decompression bombs


def plant_blob(db: Path, run_id: str, variant_id: str, name: str, packed: bytes) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute(
            "INSERT OR REPLACE INTO blobs(run_id, variant_id, name, data) VALUES (?, ?, ?, ?)",
            (run_id, variant_id, name, packed),
        )
    conn.close()


@pytest.mark.parametrize("size", [0, 5, 1 << 20, 7 << 20])
def test_the_planted_zeros_are_one_zlib_stream_of_that_many_zero_bytes(size):
    """The bomb below is built without compressing its 3 GiB (that took 23 s of CPU): the stream
    must still be one valid zlib stream of exactly that many zeros, or the refusal it provokes
    would be for another reason."""
    d = zlib.decompressobj()
    out = d.decompress(zeros_packed(size))
    assert d.eof and not d.unused_data
    assert len(out) == size and out.count(0) == size


def test_a_decompression_bomb_is_refused_naming_the_blob(tmp_path):
    base, cur = tmp_path / "base.db", tmp_path / "run.db"
    store.save_run(base, info("base"), [variant("k")])
    store.save_run(cur, info("cur", "2026-01-02T00:00:00+00:00"), [variant("k", 40, findings="[]")])
    vid = store.load_run(cur).results[0].key.id
    plant_blob(cur, "cur", vid, "findings", zeros_packed(3 * 1024**3))  # 3 GiB of zeros in ~3 MB
    for args in (
        ("show", "--db", "run.db", "--run", "cur"),
        ("report", "--db", "run.db", "--baseline", "base.db", "--format", "markdown"),
        ("report", "--db", "run.db", "--baseline", "base.db", "-o", "rep"),
        (
            "github",
            "comment",
            "--dry-run",
            "--pr",
            "7",
            "--repo",
            "o/n",
            "--db",
            "run.db",
            "--baseline",
            "base.db",
        ),
    ):
        r = kperf(tmp_path, *args)
        one_line_error(r, "'findings'", "decompresses to more than", "run.db")


def test_an_integer_where_a_blob_belongs_sizes_nothing(tmp_path):
    """``bytes(n)`` of an INTEGER cell is n zero bytes: 2**33 of them once took a worker to 23 GB
    (found by tests/test_fuzz_cli.py). The cell is refused, naming the blob, under 2 GiB; and
    ``kperf merge`` of such a shard copies it, not expands it."""
    cur = tmp_path / "run.db"
    store.save_run(cur, info("cur"), [variant("k", 40, findings="[]")])
    vid = store.load_run(cur).results[0].key.id
    plant_blob(cur, "cur", vid, "findings", 2**33)
    for args in (("show", "--db", "run.db", "--run", "cur"), ("report", "--db", "run.db", "-o", "rep")):
        one_line_error(kperf(tmp_path, *args), "'findings'", "holds int, not zlib bytes", "run.db")
    for name, run in (("a.db", "a"), ("b.db", "b")):
        store.save_run(tmp_path / name, info(run), [variant("k")])
        store.save_blob(tmp_path / name, run, "", "manifest", "m")
    plant_blob(tmp_path / "b.db", "b", "", "manifest", 2**33)
    r = kperf(tmp_path, "merge", "--shards", "-o", "all.db", "a.db", "b.db")
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    with sqlite3.connect(tmp_path / "all.db") as conn:
        kept = conn.execute("SELECT data FROM blobs WHERE name LIKE 'manifest%' ORDER BY name").fetchall()
    conn.close()
    assert sorted(kept, key=repr) == sorted([(2**33,), (zlib.compress(b"m", 6),)], key=repr)


def test_blobs_below_the_cap_still_read(tmp_path):
    db = tmp_path / "run.db"
    store.save_run(db, info("cur"), [variant("k", findings="[]")])
    store.save_blob(db, "cur", "", "note", "x" * 1_000_000)
    assert store.load_blob(db, "cur", "", "note") == b"x" * 1_000_000
    assert store.load_run(db, artifacts=True).results[0].artifacts == {"findings": "[]"}


# --------------------------------------------------------------------------- 1: SM ids and counts

TRACE = REPO / "tests" / "data" / "traces" / "imbalance_equal.json"


def hostile_timeline(**change) -> str:
    obj = json.loads(TRACE.read_text())
    cols = obj["columns"]
    if "sm" in change:
        cols["sm"][0] = change["sm"]
    if "all_sm" in change:
        cols["sm"] = [change["all_sm"]] * len(cols["sm"])
    if "num_sms" in change:
        obj["num_sms"] = change["num_sms"]
    if "start" in change:
        cols["start_ns"] = [change["start"]] * len(cols["start_ns"])
    return json.dumps(obj)


@pytest.mark.parametrize(
    "change, needle",
    [
        ({"sm": 10**7}, "SM 10000000"),
        ({"all_sm": 10**9}, "SM 1000000000"),
        ({"sm": -1}, "SM -1"),
        ({"num_sms": 10**9}, "SM count 1000000000"),
    ],
)
def test_a_trace_naming_an_absurd_sm_is_refused_quickly(tmp_path, change, needle):
    (tmp_path / "t.json").write_text(hostile_timeline(**change))
    t0 = time.monotonic()
    r = kperf(tmp_path, "analyze", "--trace", "t.json")
    one_line_error(r, "t.json", needle)
    assert time.monotonic() - t0 < 30
    r = kperf(tmp_path, "analyze", "--trace", TRACE.as_posix())  # the real file still analyzes
    assert r.returncode == 0, r.stderr


def test_nan_times_in_a_trace_are_bad_input_not_all_ok(tmp_path):
    """NaN compares False: every finding read "nan [ok]" and --fail-on-flag passed (finding 6)."""
    (tmp_path / "t.json").write_text(hostile_timeline(start=float("nan")))
    r = kperf(tmp_path, "analyze", "--trace", "t.json", "--fail-on-flag")
    one_line_error(r, "t.json", "not a finite number")


def test_a_stored_timeline_or_sm_count_is_bounded_too(tmp_path):
    """The same code reached through a run database: ``analyze --db`` and ``report``."""
    base, cur = tmp_path / "base.db", tmp_path / "run.db"
    store.save_run(base, info("base"), [variant("k")])
    store.save_run(
        cur,
        info("cur", "2026-01-02T00:00:00+00:00"),
        [variant("k", 40, timeline=hostile_timeline(all_sm=10**9))],
    )
    t0 = time.monotonic()
    r = kperf(tmp_path, "analyze", "--db", "run.db")
    assert r.returncode == 0, r.stderr  # one variant's bad trace costs that variant, with a note
    assert "SM 1000000000" in r.stdout, r.stdout
    r = kperf(tmp_path, "report", "--db", "run.db", "--baseline", "base.db", "-o", "rep")
    assert r.returncode in (0, 1), r.stderr
    assert time.monotonic() - t0 < 60
    # an SM count from the run's fingerprint is bounded as well
    huge = tmp_path / "huge.db"
    fp = Fingerprint(cpu="cpu", triton="3.6.0", python="3.11", host_hash="x", sm_count=10**9)
    store.save_run(
        huge,
        RunInfo("h", "2026-01-03T00:00:00+00:00", "static", fp),
        [variant("k", timeline=hostile_timeline())],
    )
    r = kperf(tmp_path, "analyze", "--db", "huge.db")
    one_line_error(r, "huge.db", "sm_count")


# --------------------------------------------------------------------------- 3: long stored text

LONG = "L" * 70_000


def _long_pair(tmp_path: Path, *, branch: str = "main", gpu: str | None = None, long_kernel: bool = False):
    fp = Fingerprint(cpu="cpu", triton="3.6.0", python="3.11", host_hash="x", gpu=gpu)
    names = [f"k{i}" for i in range(66)]
    if long_kernel:
        names[1] = LONG
    store.save_run(tmp_path / "base.db", info("base"), [variant(n) for n in names])
    cur = RunInfo("cur", "2026-01-02T00:00:00+00:00", "static", fp, git_sha="beef", git_branch=branch)
    store.save_run(tmp_path / "run.db", cur, [variant(n, 40) for n in names])  # 66 regressions


COMMENT_COMMANDS = [
    ("report", "--db", "run.db", "--baseline", "base.db", "--format", "markdown"),
    ("report", "--db", "run.db", "--baseline", "base.db", "--format", "summary"),
    (
        "github",
        "comment",
        "--dry-run",
        "--pr",
        "7",
        "--repo",
        "o/n",
        "--db",
        "run.db",
        "--baseline",
        "base.db",
    ),
    (
        "github",
        "status",
        "--dry-run",
        "--sha",
        "a" * 40,
        "--repo",
        "o/n",
        "--db",
        "run.db",
        "--baseline",
        "base.db",
    ),
]


@pytest.mark.parametrize("field", ["git_branch", "fingerprint"])
@pytest.mark.parametrize("args", COMMENT_COMMANDS, ids=lambda a: " ".join(a[:3]))
def test_a_long_stored_field_is_cut_to_fit_the_comment(tmp_path, field, args):
    _long_pair(tmp_path, **({"branch": LONG} if field == "git_branch" else {"gpu": LONG}))
    r = kperf(tmp_path, *args)
    assert r.returncode in (0, 1), (r.returncode, r.stderr[-2000:])
    assert len(r.stdout) < 65_536 + 2000 and "L" * 1000 not in r.stdout


def test_a_long_kernel_name_does_not_stop_the_regression_table(tmp_path):
    _long_pair(tmp_path, long_kernel=True)
    r = kperf(
        tmp_path, "report", "--db", "run.db", "--baseline", "base.db", "--format", "markdown", "-o", "md/"
    )
    assert r.returncode == 0, r.stderr[-2000:]  # report renders; compare and gate judge
    body = (tmp_path / "md" / "comment.md").read_text()
    assert len(body) <= 65_000
    rows = [ln for ln in body.splitlines() if ln.startswith("| ❌")]
    assert len(rows) == 66, (len(rows), len(body))
    assert "more regressions not shown" not in body


def test_a_nested_npz_bomb_is_refused_before_it_loads():
    """A timeline.npz is a zip of its own: the blob cap bounds the outer zlib layer only. A member
    that inflates past the cap, or an .npy header declaring a huge shape, is refused before numpy
    allocates anything (a 7.4 KB blob cost 3.15 GB in analyze --db and report)."""
    import io
    import zipfile

    import numpy as np

    from kperf_ci.traces.timeline_file import MAX_NPZ_BYTES, read_npz

    buf = io.BytesIO()
    np.savez_compressed(
        buf, header=np.frombuffer(b"{}", dtype=np.uint8), sm=np.zeros(MAX_NPZ_BYTES // 4 + 1, np.int32)
    )
    assert len(buf.getvalue()) < MAX_NPZ_BYTES // 100  # a small blob
    with pytest.raises(ValueError, match="inflates to more than"):
        read_npz(buf.getvalue())

    fake = io.BytesIO()
    with zipfile.ZipFile(fake, "w") as zf:  # a header claiming 10**11 int64s over 16 bytes of data
        head = io.BytesIO()
        np.lib.format.write_array_header_1_0(
            head, {"descr": "<i8", "fortran_order": False, "shape": (10**11,)}
        )
        zf.writestr("sm.npy", head.getvalue() + b"\0" * 16)
    with pytest.raises(ValueError, match="declares arrays of more than"):
        read_npz(fake.getvalue())


def test_an_id_that_does_not_fit_64_bits_is_bad_input():
    import numpy as np

    from kperf_ci.traces.records import Timeline

    with pytest.raises(ValueError, match="does not fit a 64-bit integer"):
        Timeline(
            cta=[0], warp=[0], sm=[1e300], region=["k"], start_ns=np.array([0.0]), end_ns=np.array([1.0])
        )
