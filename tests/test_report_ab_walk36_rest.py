"""Issue 36's reviewer walk, the rest (.walk36-notes.md items 13 to 17): the occupancy cause names
what limits it, in both modes; metric ids read as words; shapes in the kernel's order; one kernel
cell and one column order for the timed and the static tables."""

from __future__ import annotations

from typing import Any

from kperf_ci.judge.launch_diff import LaunchChange, launch_changes
from kperf_ci.judge.launch_diff import TestDiff as ABTestDiff
from kperf_ci.judge.policy import ThresholdPolicy
from kperf_ci.judge.static_verdict import judge
from kperf_ci.report import ab
from tests.test_report_ab import document, static_entry

CODE = {"sass": "a", "spills": 0, "spill_loads": 0, "shared_bytes": 0, "sass.instructions": 100}


def _row(warps: int, registers: int, sass: str) -> dict[str, Any]:
    return {
        "config": f"num_warps={warps},num_stages=3",
        "args": {"X": "fp32[37x1000]", "N": "1000"},
        "grid": [37, 1, 1],
        "code": {"sm_90": {**CODE, "registers": registers, "sass": sass}},
    }


def test_the_occupancy_cause_names_what_limits_it_on_each_side():
    """num_warps 4 -> 1 at 40 registers already gives 50% (32 blocks per SM at most): the
    registers 40 -> 128 explain only 50% -> 25%, and the cause said "(registers 40 -> 128)"."""
    lc = LaunchChange(
        "layernorm", "k.py::layernorm", "changed", ["num_warps 4 -> 1"], _row(4, 40, "a"), _row(1, 128, "b")
    )
    (reg,) = judge([ABTestDiff("t.py::t", "changed", [lc])], ThresholdPolicy()).regressions
    assert reg["reason"] == (
        "theoretical occupancy 75% -> 25% (num_warps 4 -> 1: at most 32 blocks per SM; registers 40 -> 128)"
    )
    # the report's per-launch line keeps the option change (it said only the occupancy)
    doc = {**document([]), "device": None, "timed": [], "kernels": []}
    doc["tests"] = [
        {"test": "t.py::t", "status": "changed", "changes": [],
         "launches": [{"site": "ops.py::k", "status": "changed",
                       "changes": ["num_warps 4 -> 1", "BLOCK 8 -> 16"]}]},
    ]  # fmt: skip
    doc["static_regressions"], doc["static_kernels"] = (
        [static_entry("k", reg["reason"], test="t.py::t")],
        None,
    )
    launch_line = next(
        x for x in ab.render_markdown(doc).splitlines() if x.startswith("- ") and "regressed" in x
    )
    assert (
        "BLOCK 8 -&gt; 16; theoretical occupancy 75% -&gt; 25% (num\\_warps 4 -&gt; 1: at most" in launch_line
    )


def test_a_timed_launch_says_its_occupancy_change_too():
    """GPU mode showed no occupancy for 16 -> 4 warps, registers 37 -> 110 (75% -> 25%) while
    static mode led with it: the launch diff, which both modes show, says it."""
    b, h = _row(16, 37, "a"), _row(4, 110, "b")
    changes = launch_changes(b, h)
    assert "sm_90 theoretical occupancy 75% -> 25% (registers 37 -> 110)" in changes
    assert changes[0] == "num_warps 16 -> 4"
    # num_warps alone moving it is said with its limit
    assert "sm_90 theoretical occupancy 75% -> 50% (num_warps 4 -> 1: at most 32 blocks per SM)" in (
        launch_changes(_row(4, 40, "a"), _row(1, 40, "b"))
    )
