"""`kperf import` of a Liger CSV's history (issue 37, items 4, 8, 9, 11 and 17's line numbers):
sittings merged row by row with what is stored, stable run ids, bounded work, one line for bad
input. Subprocesses of the CLI on real files; a Hypothesis fuzz of the importer in-process."""

from __future__ import annotations

import csv
import io
import os
import sqlite3
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import fuzz_settings
from hypothesis import given
from hypothesis import strategies as st

from kperf_ci import store
from kperf_ci.capture.imported import BadInput, liger_csv
from kperf_ci.cli import main

DATA = Path(__file__).parent / "data" / "liger" / "all_benchmark_data_excerpt.csv"
HEADER = (
    "kernel_name,kernel_provider,kernel_operation_mode,metric_name,metric_unit,x_name,x_label,x_value,"
    "y_value_50,y_value_20,y_value_80,extra_benchmark_config_str,gpu_name,timestamp,liger_version\n"
)


def kperf(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kperf_ci", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


H100 = "NVIDIA H100 80GB HBM3"


def _row(x: str, y: str, when: str, *, kernel: str = "rms_norm", extra: str = '"{""H"": 4096}"') -> str:
    return f"{kernel},liger,forward,speed,ms,T,tokens,{x},{y},{y},{y},{extra},{H100},{when},0.8.1\n"


def _dump(db: Path) -> list:
    """Everything an import stores, by run: what two ways of importing must agree on."""
    out = []
    for info in store.list_runs(db, include_incomplete=True):
        rec = store.load_run(db, info.run_id, artifacts=True)
        variants = sorted(
            (v.key.id, v.key.test, sorted((m.name, m.value) for m in v.metrics), sorted(v.artifacts.items()))
            for v in rec.results
        )
        out.append((info.run_id, info.started_at, info.fingerprint.gpu, rec.status, variants))
    return sorted(out)


def _variant_rows(db: Path) -> int:
    con = sqlite3.connect(db)
    try:
        return con.execute("select count(*) from run_variants").fetchone()[0]
    finally:
        con.close()


def test_partly_remeasured_sitting_keeps_every_row_and_its_run_id(tmp_path: Path) -> None:
    """The issue's case: one sitting of 4 rows, then 2 of them (its first row among them)
    re-measured a week later. 4 + 2 variant rows; the first sitting keeps its id and rows."""
    first = [_row(x, "1.0", f"2026-07-26 00:09:4{i}") for i, x in enumerate(["1024", "2048", "4096", "8192"])]
    (tmp_path / "v1.csv").write_text(HEADER + "".join(first))
    # Liger rewrites a re-measured row in place: same position, new numbers and timestamp
    second = [
        _row("1024", "0.9", "2026-08-02 10:00:00"),
        first[1],
        first[2],
        _row("8192", "0.8", "2026-08-02 10:00:01"),
    ]
    (tmp_path / "v2.csv").write_text(HEADER + "".join(second))
    assert kperf("import", "v1.csv", "--db", "run.db", cwd=tmp_path).returncode == 0
    (before,) = store.list_runs(tmp_path / "run.db")
    r = kperf("import", "v2.csv", "--db", "run.db", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    runs = store.list_runs(tmp_path / "run.db")
    assert [i.run_id for i in runs][0] == before.run_id and len(runs) == 2
    assert _variant_rows(tmp_path / "run.db") == 6
    old = store.load_run(tmp_path / "run.db", before.run_id)
    assert sorted(v.metric("time.median").value for v in old.results) == [1.0] * 4  # as measured then
    # importing the second file again changes nothing
    dump = _dump(tmp_path / "run.db")
    assert kperf("import", "v2.csv", "--db", "run.db", cwd=tmp_path).returncode == 0
    assert _dump(tmp_path / "run.db") == dump


def _history() -> list[str]:
    """Three versions of the real excerpt, as Liger's update_benchmark_data_csv makes them: rows
    re-measured later are rewritten in place (the H100 sitting's first row among them, and part
    of the A100 sitting)."""
    lines = DATA.read_text(encoding="utf-8").splitlines(keepends=True)
    header, rows = lines[0], lines[1:]

    def remeasure(rows: list[str], which: list[int], when: str, factor: float) -> list[str]:
        out = list(rows)
        for i in which:
            rec = next(csv.reader([rows[i]]))
            rec[8:11] = [str(float(v) * factor) for v in rec[8:11]]
            rec[13] = when
            buf = io.StringIO()
            csv.writer(buf, lineterminator="\n").writerow(rec)
            out[i] = buf.getvalue()
        return out

    h100 = [i for i, r in enumerate(rows) if "H100" in r]
    a100 = [i for i, r in enumerate(rows) if "A100" in r]
    v2 = remeasure(rows, h100[:3] + a100[-2:], "2026-08-02 10:00:00", 0.9)
    v3 = remeasure(v2, h100[:1] + h100[5:7] + a100[:1], "2026-08-09 11:00:00", 1.1)
    return [header + "".join(v) for v in (rows, v2, v3)]


def test_history_in_order_equals_the_union_once(tmp_path: Path) -> None:
    versions = _history()
    for i, text in enumerate(versions):
        (tmp_path / f"v{i}.csv").write_text(text, encoding="utf-8")
        r = kperf("import", f"v{i}.csv", "--db", "history.db", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    header = versions[0].splitlines(keepends=True)[0]
    union = list(dict.fromkeys(ln for v in versions for ln in v.splitlines(keepends=True)[1:]))
    (tmp_path / "union.csv").write_text(header + "".join(union), encoding="utf-8")
    r = kperf("import", "union.csv", "--db", "union.db", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert _dump(tmp_path / "history.db") == _dump(tmp_path / "union.db")
    assert _variant_rows(tmp_path / "history.db") == 52 + 5 + 4  # every row measured is kept
    assert len(store.list_runs(tmp_path / "history.db")) == 6


def test_concurrent_imports_into_a_new_database_equal_one_after_another(tmp_path: Path) -> None:
    """Found by the second fresh walk of issue 37: three `kperf import` at once into a database
    that did not exist yet. Each read the stored runs before taking the write lock: some met the
    file another had just created ("empty database, holds no runs", exit 2), and the others
    merged with a stale view of the database (rows of a re-measured sitting lost or doubled)."""
    versions = _history()
    for i, text in enumerate(versions):
        (tmp_path / f"v{i}.csv").write_text(text, encoding="utf-8")
        assert kperf("import", f"v{i}.csv", "--db", "seq.db", cwd=tmp_path).returncode == 0
    one_after_another = _dump(tmp_path / "seq.db")

    def argv(i: int, db: str) -> list[str]:
        return [sys.executable, "-m", "kperf_ci", "import", f"v{i}.csv", "--db", db]

    for attempt in range(4):  # a race: each attempt is another chance for the old code to lose it
        db = f"cc{attempt}.db"
        procs = [
            subprocess.Popen(
                argv(i, db), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            for i in range(len(versions))
        ]
        results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
        for p in procs:
            p.stdout.close()
            p.stderr.close()
        assert all(rc == 0 for rc, _ in results), results
        assert _dump(tmp_path / db) == one_after_another, attempt


@pytest.mark.parametrize(
    ("rows", "expect"),
    [
        ([_row("1", "1", "2026-07-26 00:09:43+00:00"), _row("2", "1", "2026-07-26 00:09:44")], "time zone"),
        ([_row("1", "1", "2026-07-26 00:09:43", extra=f'"{"[" * 5000}{"]" * 5000}"')], "nested too deeply"),
        ([_row("1", "1", "2026-07-26 00:09:43", extra='"' + "x" * 200_000 + '"')], "line 2: not valid CSV"),
        ([_row("1", "1", "2026-07-26 00:09:43", kernel='"multi\nline"'),
          _row("2", "oops", "2026-07-26 00:09:44")], "line 4: y_value_50"),
    ],
    ids=["mixed-zones", "deep-json", "csv-error-line-2", "line-after-a-quoted-newline"],
)  # fmt: skip
def test_bad_rows_are_one_line_exit_2(tmp_path: Path, rows: list[str], expect: str) -> None:
    (tmp_path / "bad.csv").write_text(HEADER + "".join(rows))
    r = kperf("import", "bad.csv", "--db", "run.db", cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert expect in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_import_is_bounded_in_memory_and_rows(tmp_path: Path, monkeypatch) -> None:
    n = 8000
    p = tmp_path / "big.csv"
    with p.open("w") as f:
        f.write(HEADER)
        for i in range(n):  # a new sitting every 500 rows, as a long history has
            f.write(_row(str(i % 500), f"{1 + i / n:.6f}", f"2026-07-{1 + i // 500:02d} 00:00:{i % 60:02d}"))
    tracemalloc.start()
    try:
        imported = liger_csv.convert(p, liger_csv.read(p), label=None, kperf_version="t")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert sum(len(v) for _, v in imported.runs) == n
    assert peak < 20 * p.stat().st_size, (peak, p.stat().st_size)
    monkeypatch.setattr(liger_csv, "MAX_ROWS", 100)
    with pytest.raises(BadInput, match="more than 100 rows"):
        liger_csv.read(p)


# ------------------------------------------------------------------ fuzz: no crash, no traceback

field = st.one_of(
    st.sampled_from(["", "1", "nan", "-0", "1e400", "speed", "ms", "memory", "MB", "liger", "\x00", '"']),
    st.text(max_size=12),
)
when = st.one_of(
    st.sampled_from(
        ["2026-07-26 00:09:43", "2026-07-26 00:09:43+05:00", "2026-07-26T00:09:43Z", "0001-01-01", "x"]
    ),
    st.datetimes().map(str),
)
extra = st.one_of(
    st.sampled_from(["", "{}", '{"B": 8}', "[" * 3000, "[" * 2000 + "]" * 2000]), st.text(max_size=20)
)
row = st.tuples(
    st.sampled_from(["k", "ce"]),
    st.sampled_from(["liger", "torch"]),
    st.sampled_from(["forward", "full"]),
    st.sampled_from([("speed", "ms"), ("memory", "MB"), ("speed", "s")]),
    st.one_of(st.sampled_from(["1", "2", "4096"]), field),
    st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(str), field),
    extra,
    st.sampled_from(["H100", "A100"]),
    when,
)


def _csv(rows) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    for k, p, m, (mn, mu), x, y, e, g, t in rows:
        w.writerow([k, p, m, mn, mu, "V", "v", x, y, y, y, e, g, t, "0.1"])
    return HEADER + buf.getvalue()


@fuzz_settings(40)
@given(
    files=st.lists(
        st.one_of(st.lists(row, max_size=6).map(_csv), st.binary(max_size=80)), min_size=1, max_size=3
    )
)
def test_fuzz_liger_import_never_crashes(tmp_path: Path, files) -> None:
    """Any file, or a history of them into one database: exit 0 or 2 with one line, never 3."""
    db = tmp_path / f"fuzz-{os.urandom(4).hex()}.db"
    for i, content in enumerate(files):
        p = tmp_path / f"f{i}.csv"
        p.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8", "surrogatepass"))
        r = CliRunner().invoke(main, ["import", str(p), "--db", str(db)])
        assert r.exit_code in (0, 2), (r.output, repr(r.exception))
        assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
        assert "Traceback" not in r.output
        if r.exit_code == 2:
            assert len(r.stderr.strip().splitlines()) == 1, r.stderr
