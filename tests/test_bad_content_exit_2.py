"""Issue 23, finding 6 (content): malformed databases and files are bad input, exit 2 with one
line naming the file and the fix, in every command that reads them; ``baseline update`` and
``merge`` never copy a malformed run with exit 0. CLI as a subprocess, files crafted here."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import without

from kperf_ci import store
from kperf_ci.model import Fingerprint, Metric, RunInfo, VariantKey, VariantResult

REPO = Path(__file__).parent.parent
KPERF = [sys.executable, "-m", "kperf_ci.cli"]


def kperf(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = without("PYTEST_", "KPERF_", "GITHUB_")
    return subprocess.run(
        [*KPERF, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**env, "PYTHONPATH": str(REPO)},
        timeout=120,
    )


def one_line_error(r: subprocess.CompletedProcess, *needles: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout[-1500:], r.stderr[-1500:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "internal error" not in lines[0], r.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])


def good_run(path: Path, run_id: str = "r1") -> None:
    fp = Fingerprint(cpu="cpu", triton="3.6.0", python="3.11", host_hash="x")
    key = VariantKey("k", "sm_90", "x", "num_warps=4", test="t.py::k")
    store.save_run(
        path,
        RunInfo(run_id, "2026-01-01T00:00:00+00:00", "static", fp),
        [VariantResult(key, [Metric("registers", 32, "count")])],
    )


def only_meta(p: Path) -> None:
    with sqlite3.connect(p) as c:
        c.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
        c.execute(f"INSERT INTO meta VALUES ('schema_version', '{store.SCHEMA_VERSION}')")
    c.close()


def tampered(sql: str):
    def make(p: Path) -> None:
        good_run(p)
        with sqlite3.connect(p) as c:
            c.execute(sql)
        c.close()

    return make


CASES = {
    "only meta": (only_meta, "without its table(s) runs"),
    "metrics dropped": (tampered("DROP TABLE metrics"), "without its table(s) metrics"),
    "fingerprint not json": (tampered("UPDATE runs SET fingerprint = '{not json'"), "malformed run"),
    "fingerprint null": (tampered("UPDATE runs SET fingerprint = 'null'"), "malformed run"),
    "+Inf metric": (tampered("UPDATE metrics SET value = 9e999"), "not a finite number"),
    "unknown status": (tampered("UPDATE runs SET status = 'weird'"), "status 'weird'"),
}
COMMANDS = {
    "show": ("show", "--db", "bad.db", "--run", "r1"),
    "baseline update": ("baseline", "update", "--db", "bad.db", "--baseline", "out.db"),
    "merge": ("merge", "bad.db", "-o", "out.db"),
    "compare": ("compare", "--db", "bad.db", "--baseline", "good.db"),
}


@pytest.fixture(scope="module")
def crafted(tmp_path_factory) -> dict[str, Path]:
    """Each case's bad.db and the good.db, made once a module (each case's file was made again
    for each of the four commands): name -> the file, to be copied into a test's own directory.
    A run database is one self-contained file once written (no -wal is left beside it), so a
    copy is the same input as a file made in place."""
    root = tmp_path_factory.mktemp("crafted")
    files = {"good.db": root / "good.db"}
    good_run(files["good.db"])
    for i, (case, (make, _)) in enumerate(CASES.items()):
        files[case] = root / f"bad{i}.db"
        make(files[case])
    assert not list(root.glob("*-wal")), sorted(root.iterdir())
    return files


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("command", COMMANDS)
def test_malformed_database_is_exit_2_and_never_copied(tmp_path, crafted, case, command):
    _, needle = CASES[case]
    shutil.copyfile(crafted[case], tmp_path / "bad.db")
    shutil.copyfile(crafted["good.db"], tmp_path / "good.db")
    r = kperf(tmp_path, *COMMANDS[command])
    one_line_error(r, "bad.db", needle)
    assert not (tmp_path / "out.db").exists() or not store.list_runs(tmp_path / "out.db")


def test_import_into_a_database_without_its_tables_is_exit_2(tmp_path):
    only_meta(tmp_path / "bad.db")
    (tmp_path / "b.json").write_text(json.dumps({"benchmarks": [_bench("t.py::test_a")]}))
    one_line_error(kperf(tmp_path, "import", "b.json", "--db", "bad.db"), "bad.db", "without its table(s)")


def _bench(fullname: str) -> dict:
    name = fullname.rpartition("::")[2]
    stats = {"min": 1, "max": 2, "mean": 1.5, "median": 1.5, "stddev": 0.1, "rounds": 3, "data": [1, 1.5, 2]}
    return {"name": name, "fullname": fullname, "group": None, "params": None, "stats": stats}


def test_lone_surrogates_in_benchmark_json_import(tmp_path):
    text = json.dumps({"benchmarks": [_bench("t.py::test_a"), _bench("t.py::test_b")]})
    text = text.replace("test_a", "test_\\udc80a").replace("test_b", "test_\\ud800b")  # JSON escapes
    (tmp_path / "b.json").write_text(text)
    r = kperf(tmp_path, "import", "b.json", "--db", "run.db")
    assert r.returncode == 0, r.stderr
    r = kperf(tmp_path, "show", "--db", "run.db", "--run", store.list_runs(tmp_path / "run.db")[-1].run_id)
    assert r.returncode == 0 and "test_\\udc80a" in r.stdout and "test_\\ud800b" in r.stdout, r.stdout


@pytest.mark.parametrize("command", ["show", "compare", "report", "analyze", "baseline update"])
def test_an_empty_run_id_is_an_error_not_the_latest(tmp_path, command):
    good_run(tmp_path / "run.db")
    args = {
        "show": ("show", "--db", "run.db", "--run", ""),
        "compare": ("compare", "--db", "run.db", "--baseline", "run.db", "--run", ""),
        "report": ("report", "--db", "run.db", "--baseline", "run.db", "--run", "", "--format", "summary"),
        "analyze": ("analyze", "--db", "run.db", "--run", ""),
        "baseline update": ("baseline", "update", "--db", "run.db", "--baseline", "b.db", "--run", ""),
    }[command]
    one_line_error(kperf(tmp_path, *args), "run id is empty")


def test_a_huge_integer_in_benchmark_json_is_bad_input(tmp_path):
    """Python refuses to read an integer of more than 4,300 digits (ValueError): exit 2, one line."""
    from click.testing import CliRunner

    from kperf_ci.cli import main

    bench = tmp_path / "bench.json"
    bench.write_text('{"benchmarks": [{"name": "b", "params": {"n": ' + "9" * 100_000 + "}}]}")
    r = CliRunner().invoke(main, ["import", str(bench), "--db", str(tmp_path / "run.db")])
    assert r.exit_code == 2, r.output
    assert "not a readable JSON file" in r.output and len(r.output.strip().splitlines()) == 1
