"""`kperf import` of a Liger-Kernel benchmark CSV, run as a subprocess on real files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kperf_ci import store

DATA = Path(__file__).parent / "data" / "liger"
HEADER = (
    "kernel_name,kernel_provider,kernel_operation_mode,metric_name,metric_unit,x_name,x_label,x_value,"
    "y_value_50,y_value_20,y_value_80,extra_benchmark_config_str,gpu_name,timestamp,liger_version\n"
)
H100 = "NVIDIA H100 80GB HBM3"
CFG = '"{""B"": 8, ""T"": 2048}"'


def _row(
    kernel: str, provider: str, mode: str, metric: str, unit: str, x: str, y: str, when: str, *, v="0.8.1"
):
    return (
        f"{kernel},{provider},{mode},{metric},{unit},V,vocab size,{x},{y},0.5,0.9,{CFG},{H100},{when},{v}\n"
    )


# Liger's real layout: one timestamp per sweep, seconds apart within a sitting; a second sitting
# a week later with another liger version; a row of a unit kperf does not import.
SMALL = HEADER + "".join(
    [
        _row("cross_entropy", "liger", "forward", "speed", "ms", "4096", "0.61", "2026-07-26 00:09:43"),
        _row("cross_entropy", "liger", "forward", "speed", "ms", "8192", "0.83", "2026-07-26 00:09:43"),
        _row("cross_entropy", "liger", "forward", "memory", "MB", "4096", "1024.5", "2026-07-26 00:09:45"),
        _row("cross_entropy", "liger", "forward", "throughput", "GB/s", "4096", "900", "2026-07-26 00:09:46"),
        _row(
            "cross_entropy",
            "liger",
            "forward",
            "speed",
            "ms",
            "4096",
            "0.58",
            "2026-08-02 10:00:00",
            v="0.8.2",
        ),
    ]
)


def kperf(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kperf_ci", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_import_liger_csv_stores_one_run_per_sitting(tmp_path: Path) -> None:
    (tmp_path / "all_benchmark_data.csv").write_text(SMALL, encoding="utf-8")
    r = kperf("import", "all_benchmark_data.csv", "--db", "run.db", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "as 2 runs (3 variants)" in r.stdout
    assert "skipped 1 rows of throughput in GB/s" in r.stderr
    runs = store.list_runs(tmp_path / "run.db")
    assert [i.started_at for i in runs] == ["2026-07-26T00:09:43", "2026-08-02T10:00:00"]  # oldest first
    assert runs[0].fingerprint.gpu == H100 and runs[0].fingerprint.extra["liger_version"] == "0.8.1"
    first = store.load_run(tmp_path / "run.db", runs[0].run_id, artifacts=True)
    by_x = {json.loads(v.artifacts["bench_call"])["label"]: v for v in first.results}
    v = by_x["4096"]
    assert {(m.name, m.value, m.unit) for m in v.metrics} == {
        ("time.median", 0.61, "ms"),
        ("time.p20", 0.5, "ms"),
        ("time.p80", 0.9, "ms"),
        ("memory.peak", 1024.5, "MB"),  # the memory row of the same call joins its variant
    }
    site = 'liger/forward {"B": 8, "T": 2048}'
    assert json.loads(v.artifacts["bench_call"]) == {
        "script": "liger-csv:cross_entropy",
        "site": site,
        "index": 0,
        "label": "4096",
        "x": 4096,
    }
    assert v.key.test == f"liger-csv:cross_entropy::{site}[4096]" and v.key.arch == H100
    # the same variant in the later sitting: one key, so history and compare match it
    later = store.load_run(tmp_path / "run.db", runs[1].run_id)
    assert later.results[0].key.id == v.key.id


def test_import_liger_csv_twice_adds_nothing(tmp_path: Path) -> None:
    (tmp_path / "b.csv").write_text(SMALL, encoding="utf-8")
    outs = [kperf("import", "b.csv", "--db", "run.db", cwd=tmp_path) for _ in range(2)]
    assert [r.returncode for r in outs] == [0, 0]
    assert "already there" not in outs[0].stdout
    assert "2 of these runs were already there and were replaced, not added" in outs[1].stdout
    runs = store.list_runs(tmp_path / "run.db")
    assert len(runs) == 2
    assert sum(len(store.load_run(tmp_path / "run.db", i.run_id).results) for i in runs) == 3


def test_import_real_liger_excerpt(tmp_path: Path) -> None:
    r = kperf("import", str(DATA / "all_benchmark_data_excerpt.csv"), "--db", "run.db", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    runs = store.list_runs(tmp_path / "run.db")
    assert [(i.fingerprint.gpu, i.fingerprint.extra["liger_version"]) for i in runs] == [
        ("NVIDIA A100-SXM4-80GB", "0.2.1"),
        ("NVIDIA H100 80GB HBM3", "0.8.1"),
    ]
    results = [v for i in runs for v in store.load_run(tmp_path / "run.db", i.run_id).results]
    assert len(results) == 52
    assert any(v.metric("memory.peak") for v in results)
    # show lists them, the trend commands read them
    assert kperf("show", "--db", "run.db", cwd=tmp_path).returncode == 0


@pytest.mark.parametrize(
    ("content", "expect"),
    [
        (HEADER.replace(",gpu_name", ""), "no column gpu_name"),
        (
            HEADER + _row("k", "liger", "full", "speed", "ms", "1", "fast", "2026-07-26 00:09:43"),
            "not a number",
        ),
        (
            HEADER + _row("k", "liger", "full", "speed", "ms", "1", "nan", "2026-07-26 00:09:43"),
            "not a finite",
        ),
        (
            HEADER + _row("k", "liger", "full", "speed", "ms", "1", "inf", "2026-07-26 00:09:43"),
            "not a finite",
        ),
        (HEADER + _row("k", "liger", "full", "speed", "ms", "1", "1.0", "yesterday"), "not a date"),
        (HEADER + "k,liger,full\n", "not one per column"),
        (
            HEADER + _row("k", "liger", "full", "speed", "s", "1", "1.0", "2026-07-26 00:09:43"),
            "no row of a metric",
        ),
        (HEADER + 2 * _row("k", "liger", "full", "speed", "ms", "1", "1", "2026-07-26 00:09:43"), "keep one"),
        (b"\xff\xfe" + HEADER.encode(), "not UTF-8"),
    ],
)
def test_bad_liger_csv_is_one_line_exit_2(tmp_path: Path, content: str | bytes, expect: str) -> None:
    p = tmp_path / "bad.csv"
    p.write_bytes(content if isinstance(content, bytes) else content.encode())
    r = kperf("import", "bad.csv", "--db", "run.db", cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert expect in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "run.db").exists()  # nothing written for a bad file


def test_huge_liger_csv_is_refused_unread(tmp_path: Path) -> None:
    p = tmp_path / "huge.csv"
    with p.open("wb") as f:  # sparse: 65 MiB on paper, nothing on disk
        f.write(HEADER.encode())
        f.truncate(65 * 2**20)
    r = kperf("import", "huge.csv", "--format", "liger-csv", "--db", "run.db", cwd=tmp_path)
    assert r.returncode == 2 and "MiB" in r.stderr and "Traceback" not in r.stderr


def test_format_option_and_detection_by_header(tmp_path: Path) -> None:
    (tmp_path / "data.txt").write_text(SMALL, encoding="utf-8")  # not .csv: found by its header
    assert kperf("import", "data.txt", "--db", "run.db", cwd=tmp_path).returncode == 0
    r = kperf("import", "data.txt", "--format", "pytest-benchmark", "--db", "run.db", cwd=tmp_path)
    assert r.returncode == 2 and "not a readable JSON" in r.stderr
    assert os.path.exists(tmp_path / "run.db")
