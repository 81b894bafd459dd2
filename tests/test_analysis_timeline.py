"""Timeline: construction, CTA spans, and the loaders (Proton Chrome trace, kperf JSON, adapters)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from fixtures.synthetic import proton_chrome_trace as proton_trace

from kperf_ci.analysis import intervals
from kperf_ci.analysis.timeline import Timeline, from_region_result
from kperf_ci.capture.regions import instrument
from kperf_ci.traces.kernel_trace import to_timeline as from_kernel_trace
from kperf_ci.traces.proton_chrome import load_proton_trace, load_proton_traces, parse_events
from kperf_ci.traces.timeline_file import load_timelines, save_timeline, timeline_from_npz


def test_timeline_validates_lengths_and_order():
    with pytest.raises(ValueError, match="warp has 1 entries"):
        Timeline([0, 1], [0], [0, 0], ["kernel", "kernel"], [0, 0], [1, 1])
    with pytest.raises(ValueError, match="ends before it starts"):
        Timeline([0], [0], [0], ["kernel"], [5.0], [1.0])


def test_cta_spans_prefer_kernel_region_and_fall_back_to_all_records():
    tl = Timeline.from_records(
        [
            (0, 0, 3, "kernel", 0, 100),
            (0, 1, 3, "kernel", 5, 110),
            (0, 0, 3, "loop0", 10, 90),
            (1, 0, 4, "loop0", 20, 60),
            (1, 0, 4, "epilogue", 60, 70),
        ]
    )
    sp = tl.cta_spans()
    assert sp.cta.tolist() == [0, 1]
    assert sp.sm.tolist() == [3, 4]
    assert sp.start_ns.tolist() == [0, 20]
    assert sp.end_ns.tolist() == [110, 70]
    assert tl.regions() == ["kernel", "loop0", "epilogue"]
    assert len(tl.only("loop0")) == 2


def test_intervals():
    s, e = intervals.union(np.array([0, 5, 20, 1]), np.array([4, 10, 30, 6]))
    assert s.tolist() == [0, 20] and e.tolist() == [10, 30]
    gs, ge = intervals.gaps(np.array([2, 6]), np.array([4, 8]), 0, 10)
    assert list(zip(gs, ge, strict=True)) == [(0, 2), (4, 6), (8, 10)]
    a = (np.array([0.0, 10.0]), np.array([5.0, 20.0]))
    b = (np.array([3.0]), np.array([12.0]))
    i = intervals.intersect(a, b)
    assert i[0].tolist() == [3, 10] and i[1].tolist() == [5, 12]
    assert intervals.max_concurrency(np.array([0, 1, 5]), np.array([5, 6, 7])) == 2  # end at 5 closes first


def test_proton_loader_rescales_cycles_with_the_estimated_clock():
    ctas = [
        (0, 0, 0, [(0, "kernel", 0, 10_000), (0, "loop0", 1_000, 9_000)]),
        (1, 1, 2_000, [(0, "kernel", 0, 10_000), (0, "loop0", 2_000, 9_500)]),
    ]
    tl = load_proton_trace(proton_trace(ctas, clock_ghz=2.0))
    # the 500 ns between last record and pre-final stamp is 0: the estimate is exact here
    assert tl.meta["clock_mhz"] == pytest.approx(2000.0)
    k1 = (tl.cta == 1) & (tl.region == "kernel")
    assert tl.start_ns[k1][0] == pytest.approx(2000.0)
    assert tl.end_ns[k1][0] == pytest.approx(12_000.0)
    l0 = (tl.cta == 0) & (tl.region == "loop0")
    assert (tl.start_ns[l0][0], tl.end_ns[l0][0]) == pytest.approx((1000.0, 9000.0))
    # without rescaling the spans are Proton's cycles-as-ns
    raw = load_proton_trace(proton_trace(ctas, clock_ghz=2.0), clock_mhz=None)
    assert raw.end_ns[(raw.cta == 0) & (raw.region == "kernel")][0] == pytest.approx(20_000.0)
    given = load_proton_trace(proton_trace(ctas, clock_ghz=2.0), clock_mhz=2000)
    assert given.end_ns.max() == pytest.approx(12_000.0)


def test_proton_loader_splits_launches_and_filters_kernels():
    one = [(c, c, c * 10, [(0, "kernel", 0, 5_000)]) for c in range(3)]
    tr = proton_trace(one, kernel="a", launch_offset_ns=0)
    tr["traceEvents"] += proton_trace(one, kernel="a", launch_offset_ns=50_000)["traceEvents"]
    tr["traceEvents"] += proton_trace(one, kernel="b", launch_offset_ns=100_000)["traceEvents"]
    tr["traceEvents"].append(
        {"name": "a", "ph": "X", "pid": "Kernel Call Path", "tid": "path 0", "ts": 0, "dur": 1}
    )
    tls = load_proton_traces(tr)
    assert [t.kernel for t in tls] == ["a", "a", "b"]
    assert all(len(t) == 3 for t in tls)
    assert tls[1].meta["trace_t0_ns"] == pytest.approx(50_000.0)
    assert [t.kernel for t in load_proton_traces(tr, kernel="b")] == ["b"]
    assert load_proton_trace(tr, kernel="a").meta["launch"] == 1  # the last launch by default
    with pytest.raises(ValueError, match="no Proton CTA events"):
        load_proton_trace(tr, kernel="zzz")


def test_proton_loader_reads_the_older_pid_format_without_stamps():
    ctas = [(0, 7, 0, [(0, "kernel", 0, 1_000)]), (1, 8, 0, [(0, "kernel", 0, 2_000)])]
    tr = proton_trace(ctas, stamps=False, clock_ghz=1.0, suffix=" [measure in clock cycle (assume 1GHz)]")
    tl = load_proton_trace(tr)
    assert sorted(tl.sm.tolist()) == [7, 8]
    assert tl.meta["clock_mhz"] is None and "1 GHz" in tl.meta["clock"]


def test_kperf_timeline_json_round_trip(tmp_path):
    tl = Timeline.from_records([(0, -1, 2, "kernel", 0.0, 10.5)], kernel="x", num_sms=4, meta={"a": 1})
    p = tmp_path / "t.json"
    save_timeline(tl, p)
    (back,) = load_timelines(p)
    assert back.kernel == "x" and back.num_sms == 4 and back.meta == {"a": 1}
    assert back.to_records() == tl.to_records()
    obj = json.loads(p.read_text())
    obj["version"] = 2
    p.write_text(json.dumps(obj))
    with pytest.raises(ValueError, match="version 2 is not supported"):
        load_timelines(p)


def test_adapters_for_the_capture_stage(tmp_path):
    recs = [
        SimpleNamespace(cta=0, warp=0, sm=1, region="kernel", start_ns=100.0, end_ns=200.0),
        {"cta": 1, "sm": 2, "name": "kernel", "start": 150.0, "end": 260.0},
    ]
    tl = from_region_result(SimpleNamespace(records=recs, kernel="k", num_sms=132))
    assert tl.num_sms == 132 and tl.kernel == "k"
    assert tl.start_ns.tolist() == [0.0, 50.0] and tl.warp.tolist() == [0, -1]
    p = tmp_path / "trace.json"
    p.write_text(json.dumps(proton_trace([(0, 0, 0, [(0, "kernel", 0, 1000)])])))
    assert len(from_region_result(SimpleNamespace(trace_path=str(p)))) == 1
    assert from_region_result(SimpleNamespace(timeline=tl)) is tl
    with pytest.raises(TypeError, match="cannot build a Timeline"):
        from_region_result(object())


def test_from_kernel_trace_matches_the_chrome_trace_loader():
    ctas = [
        (0, 0, 0, [(0, "kernel", 0, 10_000), (0, "loop0", 1_000, 9_000)]),
        (1, 5, 3_000, [(0, "kernel", 0, 8_000), (0, "loop0", 500, 7_000)]),
    ]
    tr = proton_trace(ctas, clock_ghz=1.5)
    kts = parse_events(tr["traceEvents"])
    a = from_kernel_trace(kts["k"])
    b = load_proton_trace(tr)
    key = lambda t: sorted(
        zip(t.cta.tolist(), t.region.tolist(), t.start_ns.round(1), t.end_ns.round(1), strict=True)
    )  # noqa: E731
    assert key(a) == key(b)


def _region_result(ctas, granularity="warp"):
    kts = parse_events(proton_trace(ctas, clock_ghz=1.5)["traceEvents"])
    return instrument.build_result(
        kts["k"], instrument.RegionConfig(granularity=granularity), grid=(len(ctas), 1, 1)
    )


def test_from_region_result_of_the_capture_stage():
    ctas = [(c, c % 2, 1000 * (c // 2) * 10, [(w, "kernel", 0, 10_000) for w in range(2)]) for c in range(4)]
    rr = _region_result(ctas)
    tl = from_region_result(rr, num_sms=2)
    assert tl.meta["source"] == "RegionResult" and tl.meta["grid"] == [4, 1, 1]
    sp = tl.cta_spans()
    assert sp.duration_ns == pytest.approx([10_000] * 4, rel=0.01)
    assert sorted(sp.start_ns.round()) == [0, 0, 10_000, 10_000]
    cta_level = from_region_result(_region_result(ctas, "cta"), num_sms=2)
    assert len(cta_level) == 4


def test_timeline_npz_from_the_capture_stage(tmp_path):
    ctas = [(c, c, 0, [(0, "kernel", 0, 5_000), (0, "loop0", 1_000, 4_000)]) for c in range(3)]
    rr = _region_result(ctas)
    tl = timeline_from_npz(rr.timeline_bytes(), num_sms=132)
    assert tl.num_sms == 132 and tl.meta["grid"] == [3, 1, 1]
    assert sorted(tl.region.tolist()) == ["kernel"] * 3 + ["loop0"] * 3
    assert tl.end_ns.max() == pytest.approx(5_000, rel=0.01)
