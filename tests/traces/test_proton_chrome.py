"""traces.proton_chrome: the one reader of Proton's Chrome trace, both thread-name spellings,
and the two shapes made of it (KernelTrace per kernel, Timeline per launch)."""

from __future__ import annotations

import json

import pytest
from fixtures.synthetic import proton_chrome_trace

from kperf_ci.traces.proton_chrome import (
    is_proton_trace,
    load_proton_traces,
    load_trace,
    parse_events,
    read_slices,
    thread_unit,
)


def _trace(tids: list[str], kernel: str = "k") -> dict:
    """One CTA, one slice per thread name, each unit's kernel region 1000 cycles long."""
    events = [
        {
            "name": "kernel",
            "ph": "X",
            "pid": f"{kernel} Core3 CTA7",
            "tid": tid,
            "ts": 0.0,
            "dur": 1.0 + i,  # us at 1 GHz: 1000 + 1000*i cycles, so units stay distinguishable
            "args": {"Frequency (MHz)": 1000.0, "Finalization Time (ns)": 10},
        }
        for i, tid in enumerate(tids)
    ]
    return {"traceEvents": events}


@pytest.mark.parametrize(
    ("tid", "unit"),
    [
        ("warp 3 (line 0)", 3),  # what Proton 3.6 writes
        ("warp3", 3),
        ("wg 2", 2),
        ("warp_group 1 (line 4)", 1),
        ("Group 5", 5),
        ("7", 7),
        ("main", -1),  # no unit in the name: CTA level
    ],
)
def test_thread_unit_reads_both_spellings(tid, unit):
    assert thread_unit(tid) == unit


def test_warp_group_threads_keep_their_units_in_both_shapes():
    """A per-group trace must not fold its groups into one unit (what a reader of 'warp' only
    did): both the capture stage's KernelTrace and the analyses' Timeline keep units 0 and 1."""
    tr = _trace(["warp_group 0 (line 0)", "warp_group 1 (line 0)"])
    kt = parse_events(tr["traceEvents"])["k"]
    assert sorted(kt.unit.tolist()) == [0, 1]
    assert sorted(kt.dur.tolist()) == [1000, 2000]
    (tl,) = load_proton_traces(tr)
    assert sorted(tl.warp.tolist()) == [0, 1]
    warp = load_proton_traces(_trace(["warp 0 (line 0)", "warp 1 (line 0)"]))[0]
    assert sorted(warp.warp.tolist()) == [0, 1]


def test_cta_level_thread_is_unit_zero_in_a_kernel_trace_and_minus_one_in_a_timeline():
    tr = _trace(["main"])
    assert parse_events(tr["traceEvents"])["k"].unit.tolist() == [0]  # unsigned there
    assert load_proton_traces(tr)[0].warp.tolist() == [-1]


def test_slices_without_a_cta_pid_are_counted_and_warned():
    tr = _trace(["warp 0"])
    tr["traceEvents"].append({"name": "call path", "ph": "X", "pid": "Kernel Call Path", "tid": 0, "ts": 0})
    tr["traceEvents"].append({"ph": "M", "name": "process_name", "pid": "k Core3 CTA7"})
    slices, skipped = read_slices(tr["traceEvents"])
    assert len(slices) == 1 and skipped == 1
    assert parse_events(tr["traceEvents"])["k"].warnings == [
        "1 trace slices without a CTA/SM pid were ignored"
    ]


def test_pid_with_a_suffix_and_kernel_names_with_spaces():
    ctas = [(0, 2, 0, [(0, "kernel", 0, 1000)])]
    tr = proton_chrome_trace(ctas, kernel="my kernel", suffix=" [measure in clock cycle (assume 1GHz)]")
    (s,), _ = read_slices(tr["traceEvents"])
    assert (s.kernel, s.sm, s.cta) == ("my kernel", 2, 0)
    assert set(parse_events(tr["traceEvents"])) == {"my kernel"}
    assert is_proton_trace(tr) and not is_proton_trace({"traceEvents": [{"pid": 1}]})


def test_frequency_scales_ts_and_dur_to_cycles():
    tr = _trace(["warp 0"])
    tr["traceEvents"][0]["args"]["Frequency (MHz)"] = 500.0
    (s,), _ = read_slices(tr["traceEvents"])
    assert s.dur == pytest.approx(500.0)


def test_stamps_give_pre_final_time():
    ctas = [(0, 0, 100, [(0, "kernel", 0, 1000)])]
    (s,), _ = read_slices(proton_chrome_trace(ctas)["traceEvents"])
    assert s.init_ns == 100 and s.final_ns == 100 + 1000  # post-final minus finalization
    (s,), _ = read_slices(proton_chrome_trace(ctas, stamps=False)["traceEvents"])
    assert s.init_ns is None and s.final_ns is None


def test_load_trace_reads_objects_lists_files_and_json_lines(tmp_path):
    tr = _trace(["warp 0", "warp 1"])
    assert len(load_trace(tr)) == 2 and len(load_trace(tr["traceEvents"])) == 2
    p = tmp_path / "t.json"
    p.write_text(json.dumps(tr))
    assert len(load_trace(p)) == 2
    q = tmp_path / "t.jsonl"
    q.write_text(json.dumps(tr) + "\n" + json.dumps(tr) + "\n")
    assert len(load_trace(q)) == 4
