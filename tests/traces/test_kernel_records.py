"""traces.kernel_records: kperf's record JSON, profiler (Kineto) traces, plain dicts."""

from __future__ import annotations

import pytest

from kperf_ci.traces.kernel_records import (
    KernelRecord,
    load_records,
    records_document,
    records_from_chrome_trace,
    records_from_dicts,
    records_from_json,
    records_from_timelines,
    records_to_json,
    save_records,
)
from kperf_ci.traces.records import Timeline


def test_kineto_trace_gives_its_kernel_slices_only():
    trace = {
        "traceEvents": [
            {"ph": "X", "cat": "kernel", "name": "k1", "ts": 10.0, "dur": 2.0},
            {"ph": "X", "cat": "gpu_kernel", "name": "k2", "ts": 20.0, "dur": 1.5},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 9.0, "dur": 1.0},
            {"ph": "i", "cat": "kernel", "name": "marker", "ts": 5.0},
        ]
    }
    recs = records_from_chrome_trace(trace)
    assert recs == [KernelRecord("k1", 10_000.0, 12_000.0), KernelRecord("k2", 20_000.0, 21_500.0)]
    assert records_from_chrome_trace(trace["traceEvents"]) == recs


def test_json_document_round_trip_and_other_shapes(tmp_path):
    recs = [KernelRecord("a", 0.0, 5.0), KernelRecord("b", 7.0, 9.5)]
    assert records_from_json(records_to_json(recs)) == recs
    assert records_document(recs)["format"] == "kperf-kernel-records"
    p = tmp_path / "r.json"
    save_records(recs, p)
    assert load_records(p) == recs
    assert records_from_json('[{"name": "a", "start_us": 1, "end_us": 2}]') == [KernelRecord("a", 1e3, 2e3)]
    assert records_from_dicts([{"name": "x", "ts": 1.0, "dur": 0.5}]) == [KernelRecord("x", 1e3, 1.5e3)]
    assert recs[1].duration_ns == pytest.approx(2.5)


def test_records_from_launch_timelines_are_placed_by_their_trace_origin():
    tl = Timeline.from_records([(0, 0, 0, "kernel", 0.0, 100.0)], kernel="k", meta={"trace_t0_ns": 5_000.0})
    assert records_from_timelines([tl]) == [KernelRecord("k", 5_000.0, 5_100.0)]
