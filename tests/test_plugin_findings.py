"""GPU mode's analyses without a GPU: launch gaps of a multi-kernel callable (the profiler is
faked at the device boundary, ``capture.launches.gpu.kernel_records``), findings stored as metrics and as
an artifact in a real SQLite run, the terminal summary, and ``kperf analyze --db`` reading them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kperf_ci.analysis.findings import ARTIFACT, Finding, findings_from_json
from kperf_ci.measure import measure
from kperf_ci.model import Fingerprint, Metric, RunInfo, VariantKey, VariantResult
from kperf_ci.plugin import finish
from kperf_ci.plugin.session import KperfSession
from kperf_ci.traces.kernel_records import KernelRecord, records_from_json, records_to_json

ITEM = SimpleNamespace(nodeid="test_layer.py::test_layer")


def _ks() -> measure.Measurement:
    """Where the measurement's helpers leave warnings and flagged findings."""
    return measure.Measurement(ITEM.nodeid)


def _plugin_session() -> KperfSession:
    """A KperfSession without a pytest config: the worker hand-over uses none of it."""
    return KperfSession(config=None, settings=None, mode="gpu", run_id="r1")  # type: ignore[arg-type]


@pytest.fixture
def session():
    return _ks()


def _chain(n: int, kernel_ns: float, gap_ns: float) -> list[KernelRecord]:
    return [
        KernelRecord(f"k{i % 3}", i * (kernel_ns + gap_ns), i * (kernel_ns + gap_ns) + kernel_ns)
        for i in range(n)
    ]


def test_launch_bound_chain_is_flagged_and_kept(session, monkeypatch):
    from kperf_ci.capture.launches import gpu

    calls = []

    def profiled(call, calls_):
        calls.append(calls_)
        return _chain(12 * calls_, 2_000, 20_000)

    monkeypatch.setattr(gpu, "kernel_records", lambda call, calls: profiled(call, calls))
    findings, records = measure.measure_launch_gaps(session, lambda: None, 12)
    assert calls == [measure.GAP_CALLS] and len(records) == 12 * (measure.GAP_CALLS - 1)
    f = {x.name: x for x in findings}["launch_gap_fraction"]
    n = len(records)
    assert f.flagged and f.value == pytest.approx((n - 1) * 20_000 / ((n - 1) * 22_000 + 2_000))
    assert "CUDA graph" in f.suggestion


def test_back_to_back_chain_is_not_flagged(session, monkeypatch):
    from kperf_ci.capture.launches import gpu

    monkeypatch.setattr(gpu, "kernel_records", lambda call, calls: _chain(9 * calls, 500_000, 2_000))
    findings, _ = measure.measure_launch_gaps(session, lambda: None, 9)
    assert not {x.name: x for x in findings}["launch_gap_fraction"].flagged


def test_single_launch_is_not_profiled_and_a_failing_profiler_only_warns(session, monkeypatch):
    from kperf_ci.capture.launches import gpu

    def boom(call, calls):
        raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")

    monkeypatch.setattr(gpu, "kernel_records", boom)
    assert measure.measure_launch_gaps(session, lambda: None, 1) is None
    assert session.warnings == []
    assert measure.measure_launch_gaps(session, lambda: None, 4) is None
    assert "torch.profiler failed" in session.warnings[0][1] and "CUPTI" in session.warnings[0][1]
    monkeypatch.setattr(gpu, "kernel_records", lambda call, calls: _chain(calls + 1, 1_000, 0))
    assert measure.measure_launch_gaps(session, lambda: None, 4) is None
    assert "do not split into equal calls" in session.warnings[-1][1]
    monkeypatch.setattr(gpu, "kernel_records", lambda call, calls: _chain(calls, 1_000, 0))
    assert measure.measure_launch_gaps(session, lambda: None, 4) is None  # one kernel per call


def test_split_calls_needs_the_same_kernels_in_each_call():
    a, b = KernelRecord("a", 0, 1), KernelRecord("b", 2, 3)
    assert measure.split_calls([a, b, a, b], 2) == [[a, b], [a, b]]
    assert measure.split_calls([a, b, b, a], 2) is None
    assert measure.split_calls([a, b, a], 2) is None and measure.split_calls([], 2) is None


def test_the_first_call_is_dropped(session, monkeypatch):
    from kperf_ci.capture.launches import gpu

    def profiled(call, calls):
        out, t = [], 0.0
        for i in range(calls * 4):
            out.append(KernelRecord("k", t, t + 100_000))
            t += 100_000 + (400_000 if i == 1 else 1_000)  # the first call stalls once
        return out

    monkeypatch.setattr(gpu, "kernel_records", profiled)
    findings, records = measure.measure_launch_gaps(session, lambda: None, 4)
    f = {x.name: x for x in findings}["launch_gap_fraction"]
    n = 4 * (measure.GAP_CALLS - 1)
    assert len(records) == n and records[0].start_ns > 400_000
    assert not f.flagged and f.value == pytest.approx((n - 1) * 1_000 / ((n - 1) * 101_000 + 100_000))


def _finding(name, flagged, value=0.5):
    return Finding(
        name, value, "fraction", flagged, f"{name} explained", "try this" if flagged else "", "lower", 0.2
    )


def test_attach_findings_adds_metrics_artifact_and_summary_lines(session):
    v = VariantResult(VariantKey("layer", "NVIDIA H100 80GB HBM3", test=ITEM.nodeid))
    measure.attach_findings(session, v, [_finding("wave_idle", True), _finding("prologue_fraction", False)])
    measure.attach_findings(session, v, [_finding("launch_gap_fraction", True, value=float("nan"))])
    assert [m.name for m in v.metrics] == [
        "analysis.wave_idle",
        "analysis.prologue_fraction",
    ]  # NaN is no metric
    stored = findings_from_json(v.artifacts[ARTIFACT])
    assert [f.name for f in stored] == ["wave_idle", "prologue_fraction", "launch_gap_fraction"]
    assert stored[0].suggestion == "try this" and stored[2].value != stored[2].value
    assert [f.name for _, _, f in session.findings] == ["wave_idle", "launch_gap_fraction"]


class _TR:
    def __init__(self):
        self.lines = []

    def write_line(self, line, **kw):
        self.lines.append(line)


def test_terminal_summary_lists_flagged_findings_with_a_cap():
    tr = _TR()
    finish.write_findings([], tr)
    assert tr.lines == []
    found = [("t", f"k{i}", _finding("wave_idle", True)) for i in range(25)]
    finish.write_findings(found, tr, db="run.db", limit=20)
    text = "\n".join(tr.lines)
    assert "25 analysis finding(s) flagged" in text
    assert "kperf finding k0: [FLAG] wave_idle" in text and "-> try this" in text
    assert "k19:" in text and "k20:" not in text
    assert "5 more finding(s) not shown (all of them: kperf analyze --db run.db)" in text


def test_records_json_round_trip():
    recs = _chain(5, 1_000, 3_000)
    assert records_from_json(records_to_json(recs)) == recs


def test_analyze_db_shows_launch_gaps_of_a_stored_callable(tmp_path):
    from kperf_ci import store
    from kperf_ci.commands.analyze import run

    db = tmp_path / "run.db"
    info = RunInfo("r1", "2026-11-22T00:00:00+00:00", "gpu", Fingerprint(gpu="NVIDIA H100", sm_count=132))
    v = VariantResult(
        VariantKey("layer", "NVIDIA H100 80GB HBM3", config="callable:abc"),
        metrics=[Metric("time.median", 0.3, "ms", "time", "lower")],
    )
    session = _ks()
    from kperf_ci.analysis import launch_gaps

    recs = _chain(12, 2_000, 20_000)
    measure.attach_findings(session, v, launch_gaps(recs))
    v.artifacts["kernel_records"] = records_to_json(recs)
    store.save_run(db, info, [v])
    rec = store.load_run(db, "r1", artifacts=True)
    (loaded,) = rec.results
    assert {m.name for m in loaded.metrics} >= {
        "analysis.launch_gap_fraction",
        "analysis.launch_gap_median_ns",
    }
    assert findings_from_json(loaded.artifacts[ARTIFACT])[0].flagged
    rep = run(db=str(db))
    (lr,) = rep.launches
    assert lr.label.endswith("[launch gaps]")
    assert {f.name: f for f in lr.findings}["launch_gap_fraction"].flagged
    assert not rep.notes


def test_analyze_db_makes_no_sequence_of_different_tests_timelines(tmp_path):
    from fixtures.synthetic import grid_timeline

    from kperf_ci import store
    from kperf_ci.commands.analyze import run
    from kperf_ci.traces.timeline_file import save_timeline

    db = tmp_path / "run.db"
    info = RunInfo("r1", "2026-11-22T00:00:00+00:00", "gpu", Fingerprint(gpu="NVIDIA H100", sm_count=132))
    keys = [VariantKey(k, "NVIDIA H100 80GB HBM3", test=f"t.py::{k}") for k in ("a", "b")]
    store.save_run(db, info, [VariantResult(k) for k in keys])
    for i, k in enumerate(keys):
        p = tmp_path / f"{k.kernel}.json"
        save_timeline(grid_timeline([10_000 * (i + 1)] * 132, num_sms=132), p)
        store.save_blob(db, "r1", k.id, "proton_trace", p.read_text())
    rep = run(db=str(db))
    assert len(rep.launches) == 2 and rep.sequence == []


def test_worker_output_round_trips_errors_warnings_and_findings():
    """xdist: what a worker hands the controller is plain data and comes back whole."""
    import json

    worker = _plugin_session()
    worker.errors, worker.ab_results = [("t.py::a", "bad sm_90: ptxas error")], [("t", "k", "d", "slower")]
    worker.warn("t.py::b", "drift")
    worker.findings = [("t.py::c", "k sm_90", _finding("wave_idle", True))]
    out = finish.worker_output(worker)
    assert json.loads(json.dumps(out)) == out  # execnet carries plain types only
    controller = _plugin_session()
    controller.errors, controller.ab_results = [], []
    finish.merge_worker_output(controller, out)
    assert controller.interrupted is None
    finish.merge_worker_output(controller, None)  # a worker that crashed before sessionfinish
    # its unsaved results are lost: the run must not be marked complete
    assert controller.interrupted == "an xdist worker ended before storing its results"
    assert controller.errors == [("t.py::a", "bad sm_90: ptxas error")]
    assert controller.warnings == [("t.py::b", "drift")] and controller.ab_results == [
        ("t", "k", "d", "slower")
    ]
    ((nodeid, label, f),) = controller.findings
    assert (nodeid, label, f.name, f.flagged, f.suggestion) == (
        "t.py::c",
        "k sm_90",
        "wave_idle",
        True,
        "try this",
    )
