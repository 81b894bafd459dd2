"""benchmarks/fleet_eval.py's render step (issue 26) on synthetic part files: the JSON keys, and
the targets on a run that meets them, one whose 2-GPU runs are too slow, and one that lost a row."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
GPUS = [
    {"index": "0", "uuid": "GPU-a", "pci_bus_id": "00000000:1B:00.0", "name": "NVIDIA H100 80GB HBM3"},
    {"index": "1", "uuid": "GPU-b", "pci_bus_id": "00000000:2C:00.0", "name": "NVIDIA H100 80GB HBM3"},
]
BUS = {"0": "00000000:1b:00.0", "1": "00000000:2c:00.0"}  # as torch's properties spell it
FP = {"gpu": "NVIDIA H100 80GB HBM3", "torch": "2.9.0", "triton": "3.5.0", "driver": "570", "cuda": "12.8"}


@pytest.fixture(scope="module")
def fe() -> Any:
    spec = importlib.util.spec_from_file_location("fleet_eval", ROOT / "benchmarks" / "fleet_eval.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["fleet_eval"] = mod
    spec.loader.exec_module(mod)
    return mod


def row(test: str, median: float, gpu: str) -> dict[str, Any]:
    lo, hi = median * 0.998, median * 1.002
    return {
        "label": f"k{test}",
        "test": test,
        "median": median,
        "ci95": [lo, hi],
        "ci99": [lo, hi],
        "n": 100,
        "gpu_pci_bus_id": BUS[gpu],
        "gpu_uuid": None,
        "error": None,
    }


def proc(wall: float, cvd: str, workers: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "command": "python -m pytest ...",
        "cuda_visible_devices": cvd,
        "exit_code": 0,
        "wall_s": wall,
        "log": "x.log",
        "workers": workers or {},
        "summary": "2 passed",
    }


def parts(wall2: float = 55.0) -> dict[str, dict[str, Any]]:
    common = {
        "machine": {"gpus": GPUS},
        "dry_run_cpu": False,
        "selection": ["examples"],
        "timing_budget_s": 1.0,
        "kperf_commit": "abc1234",
    }
    one = {"v1": row("t1", 1.0, "0"), "v2": row("t2", 2.0, "0")}
    xd = {"v1": row("t1", 1.001, "0"), "v2": row("t2", 2.003, "1")}
    s1, s2 = {"v1": row("t1", 0.9995, "0")}, {"v2": row("t2", 2.0, "1")}
    db = lambda v: {"run": {"fingerprint": FP}, "variants": v}  # noqa: E731
    return {
        "one_gpu": {
            **common,
            "procs": {"gpu0": proc(100.0, "0")},
            "pinned": {"gpu0": "0"},
            "wall_s": 100.0,
            "db": db(one),
        },
        "xdist_2": {
            **common,
            "procs": {"xdist": proc(wall2, "0,1", {"t1": "gw0", "t2": "gw1"})},
            "pinned": {"gw0": "0", "gw1": "1"},
            "wall_s": wall2,
            "db": db(xd),
        },
        "shards_2": {
            **common,
            "procs": {"shard1": proc(wall2, "0"), "shard2": proc(wall2, "1")},
            "pinned": {"shard1": "0", "shard2": "1"},
            "wall_s": wall2,
            "merge": {"exit_code": 0, "output": ""},
            "shards": {"shard1": db(s1), "shard2": db(s2)},
            "merge_rows": {"shard_rows": 10, "merged_rows": 10, "missing": 0, "missing_examples": []},
            "db": db({**s1, **s2}),
        },
    }


def render(fe: Any, tmp_path: Path, p: dict[str, dict[str, Any]]) -> dict[str, Any]:
    for run, part in p.items():
        (tmp_path / f"fleet_eval.part-{run}.json").write_text(json.dumps(part))
    assert fe.main(["--out", str(tmp_path), "--steps", "render", "--results", str(tmp_path)]) == 0
    assert (tmp_path / "fleet_eval.md").read_text().startswith("# Fleet evaluation")
    return json.loads((tmp_path / "fleet_eval.json").read_text())


def test_a_run_that_meets_every_target(fe: Any, tmp_path: Path) -> None:
    r = render(fe, tmp_path, parts())
    assert {"device", "gpus", "variants", "wall_s", "median_ratio", "rows_lost", "missed"} <= set(r)
    assert set(r["wall_s"]) == {"one_gpu", "xdist_2", "shards_2"}
    assert r["device"] == "NVIDIA H100 80GB HBM3" and len(r["gpus"]) == 2
    assert r["median_ratio"]["kt2 @ t2"]["xdist_2"] == pytest.approx(1.0015)
    assert r["rows_lost"] == 0 and r["missed"] == [], r["targets"]
    assert "| wall xdist_2 | PASS | 0.55x" in (tmp_path / "fleet_eval.md").read_text()


def test_slow_two_gpu_runs_miss_the_wall_target(fe: Any, tmp_path: Path) -> None:
    r = render(fe, tmp_path, parts(wall2=61.0))
    assert r["missed"] == ["wall xdist_2", "wall shards_2"]


def test_a_lost_row_and_a_variant_on_the_wrong_gpu(fe: Any, tmp_path: Path) -> None:
    p = parts()
    del p["xdist_2"]["db"]["variants"]["v1"]  # a variant missing from the -n 2 run
    p["shards_2"]["merge_rows"].update(merged_rows=9, missing=1)  # a row the merge dropped
    p["shards_2"]["shards"]["shard2"]["variants"]["v2"]["gpu_pci_bus_id"] = BUS["0"]  # shard 2 on GPU 0
    r = render(fe, tmp_path, copy.deepcopy(p))
    assert r["rows_lost"] == 2 and r["lost_variants"] == [{"run": "xdist_2", "variant": "kt1 @ t1"}]
    assert set(r["missed"]) == {"no rows lost", "pinned GPU"}
    assert r["misplaced"]["shards_2"] == ["v2"]


def test_bad_input_is_one_line_and_exit_2(fe: Any, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert fe.main(["--out", str(tmp_path), "--steps", "render"]) == 2  # no reference part
    assert fe.main(["--out", str(tmp_path), "--steps", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("fleet_eval: ") for line in err)
