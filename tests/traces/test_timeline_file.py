"""traces.timeline_file: kperf-timeline JSON and timeline.npz, one writer and one reader each."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from fixtures.sample import timeline_blob, timeline_npz
from fixtures.synthetic import proton_chrome_trace

from kperf_ci.traces.kernel_trace import ARRAY_FIELDS, KernelTrace
from kperf_ci.traces.proton_chrome import parse_events
from kperf_ci.traces.records import Timeline
from kperf_ci.traces.timeline_file import (
    kernel_trace_from_npz,
    kernel_trace_npz,
    load_timelines,
    read_npz,
    save_timeline,
    timeline_document,
    timeline_from_json,
    timeline_from_npz,
    write_npz,
)


def _kt() -> KernelTrace:
    ctas = [(c, c % 2, 1_000 * c, [(0, "kernel", 0, 8_000), (0, "loop0", 1_000, 7_000)]) for c in range(4)]
    return parse_events(proton_chrome_trace(ctas, clock_ghz=1.6)["traceEvents"])["k"]


def test_npz_round_trip_keeps_arrays_header_and_dtypes():
    kt = _kt()
    data = kernel_trace_npz(kt, {"clock_ghz": 1.6, "grid": [4, 1, 1]})
    header, arrays = read_npz(data)
    assert header == {"clock_ghz": 1.6, "grid": [4, 1, 1], "kernel": "k", "names": ["kernel", "loop0"]}
    assert set(arrays) == set(ARRAY_FIELDS)
    for k in ARRAY_FIELDS:
        assert np.array_equal(arrays[k], getattr(kt, k)) and arrays[k].dtype == getattr(kt, k).dtype
    _, back = kernel_trace_from_npz(data)
    assert back.names == kt.names and np.array_equal(back.start, kt.start)
    # canonical header: equal launches give equal bytes, whatever the key order given
    assert data == kernel_trace_npz(kt, {"grid": [4, 1, 1], "clock_ghz": 1.6})


def test_npz_timeline_uses_the_header_clock_and_meta():
    kt = _kt()
    tl = timeline_from_npz(kernel_trace_npz(kt, {"clock_ghz": 1.6, "grid": [4, 1, 1], "dropped_events": 3}))
    assert tl.meta["clock_mhz"] == pytest.approx(1600.0) and tl.meta["clock"] == "given"
    assert tl.meta["grid"] == [4, 1, 1] and tl.meta["dropped_events"] == 3
    kern = tl.only("kernel").cta_spans()
    assert kern.duration_ns == pytest.approx([8_000] * 4, rel=1e-3)
    # header without a clock: estimated from the stamps, the same estimate as everywhere
    est = timeline_from_npz(kernel_trace_npz(kt, {"clock_ghz": None}))
    assert est.meta["clock_mhz"] == pytest.approx(1600.0, rel=1e-3)


def test_npz_missing_array_or_pickled_object_is_refused():
    kt = _kt()
    arrays = kt.arrays()
    buf = io.BytesIO()
    np.savez_compressed(
        buf, header=np.frombuffer(b'{"kernel":"k","names":["kernel"]}', dtype=np.uint8), cta=arrays["cta"]
    )
    with pytest.raises(KeyError):
        kernel_trace_from_npz(buf.getvalue())
    buf = io.BytesIO()
    np.savez(buf, header=np.frombuffer(b"{}", dtype=np.uint8), cta=np.array([object()], dtype=object))
    with pytest.raises(ValueError, match="allow_pickle"):
        read_npz(buf.getvalue())


def test_json_round_trip_and_version_check(tmp_path):
    tl = Timeline.from_records([(0, -1, 3, "kernel", 0.04, 1000.26)], kernel="k", num_sms=132, meta={"a": 1})
    doc = timeline_document(tl)
    assert doc["columns"]["start_ns"] == [0.0] and doc["columns"]["end_ns"] == [1000.3]  # 0.1 ns
    back = timeline_from_json(json.loads(json.dumps(doc)))
    assert back.kernel == "k" and back.num_sms == 132 and back.meta == {"a": 1}
    p = tmp_path / "tl.json"
    save_timeline(tl, p)
    assert [t.kernel for t in load_timelines(p)] == ["k"]
    assert len(load_timelines({"format": "kperf-timelines", "timelines": [doc, doc]})) == 2
    with pytest.raises(ValueError, match="version 2"):
        timeline_from_json({**doc, "version": 2})
    with pytest.raises(ValueError, match="not a kperf-timeline"):
        timeline_from_json({"format": "other"})


def test_load_timelines_falls_back_to_a_proton_trace():
    tr = proton_chrome_trace([(0, 0, 0, [(0, "kernel", 0, 1000)])], kernel="matmul")
    assert [t.kernel for t in load_timelines(tr)] == ["matmul"]


def test_the_sample_fixtures_go_through_the_writers():
    blob = json.loads(timeline_blob(num_sms=4, ctas=8))
    assert blob["format"] == "kperf-timeline" and blob["num_sms"] == 4
    header, arrays = read_npz(timeline_npz(num_sms=4, ctas=8))
    assert header["clock_ghz"] == 1.755 and set(arrays) == set(ARRAY_FIELDS)
    a = timeline_from_json(blob).cta_spans()
    b = timeline_from_npz(timeline_npz(num_sms=4, ctas=8)).cta_spans()
    assert b.duration_ns == pytest.approx(a.duration_ns, abs=0.2)


def test_write_npz_needs_every_array():
    with pytest.raises(KeyError):
        write_npz({"kernel": "k"}, {"cta": np.zeros(1)})
