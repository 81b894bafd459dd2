"""Every producer of metrics, run on small inputs: each Metric it emits carries the unit, kind and
direction of its catalogue entry (kperf_ci/metrics.py is the only source of them). Static metrics
are checked where a compiled kernel is at hand (tests/test_capture_sass.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from fixtures.catalogue import uncatalogued
from fixtures.synthetic import grid_timeline, pipelined_timeline
from pytest_benchmark.stats import Stats

from kperf_ci.analysis import (
    analysis_metrics,
    analyze_timeline,
    launch_gaps,
    prologue_epilogue,
    wave_quantization,
)
from kperf_ci.analysis.findings import Finding, to_metrics
from kperf_ci.capture.imported import BadInput
from kperf_ci.capture.imported.pytest_benchmark import from_json
from kperf_ci.capture.regions.result import RegionResult, RegionStats
from kperf_ci.capture.timing.engine import TimingResult
from kperf_ci.capture.timing.interleaved import ABResult
from kperf_ci.judge import plausibility
from kperf_ci.metrics import metric, spec
from kperf_ci.model import Metric
from kperf_ci.plugin.marker import KperfMarker
from kperf_ci.plugin.session import benchmark_fixture_results
from kperf_ci.traces.kernel_records import KernelRecord, load_records

DATA = Path(__file__).parent / "data" / "traces"


def test_metric_takes_everything_but_the_value_from_the_catalogue():
    m = metric("region.kernel.cycles", 3)
    assert (m.value, m.unit, m.kind, m.better) == (3.0, "cycles", "region", "none")
    with pytest.raises(KeyError, match="not in the metric catalogue"):
        metric("time.medain", 1.0)


def test_timing_result():
    samples = [1.0, 1.1, 0.9, 1.05]
    for method in ("events", "graph"):
        res = TimingResult(samples, median=1.02, ci_low=0.95, ci_high=1.08, method=method, n=4)
        ms = res.to_metrics()
        assert {m.name for m in ms} >= {"time.median", "time.cv", "time.graph"}
        assert not uncatalogued(ms)


def test_region_result():
    st = RegionStats("kernel", 4, 4, 100.0, 100.0, 90.0, 110.0, 80.0, 120.0, 400.0, 1.0, 50.0)
    loop = RegionStats("loop0", 4, 4, 60.0, 60.0, 50.0, 70.0, 40.0, 80.0, 240.0, 0.6, 30.0)
    res = RegionResult("k", None, {"kernel": st, "loop0": loop}, None, 2.0, "trace")  # type: ignore[arg-type]
    ms = res.to_metrics()
    names = {m.name for m in ms}
    assert {"region.kernel.cycles", "region.kernel.ms", "region.loop0.fraction"} <= names
    # per-CTA medians: shown, never judged (the catalogue says "none"; this once said "lower")
    assert {m.better for m in ms} == {"none"}
    assert not uncatalogued(ms)


def test_pytest_benchmark_importer():
    doc = {
        "machine_info": {},
        "commit_info": {},
        "benchmarks": [
            {
                "name": "test_add",
                "group": "add",
                "fullname": "tests/test_x.py::test_add",
                "stats": {
                    "min": 0.001,
                    "max": 0.003,
                    "mean": 0.002,
                    "stddev": 0.0005,
                    "median": 0.002,
                    "iqr": 0.0004,
                    "rounds": 5,
                    "data": [0.001, 0.002, 0.002, 0.0025, 0.003],
                },
            }
        ],
    }
    _info, results = from_json(doc, source="x.json")
    names = {m.name for r in results for m in r.metrics}
    assert {"time.median", "time.max", "time.stddev", "time.cv"} <= names
    assert not uncatalogued(m for r in results for m in r.metrics)


def test_pytest_benchmark_fixture_in_the_plugin():
    """The live fixture is converted as its JSON is: the same metrics and samples either way."""
    data = [0.001, 0.002, 0.0015, 0.0012, 0.0018, 0.0016, 0.0014]
    stats = Stats()
    for x in data:
        stats.update(x)
    item = SimpleNamespace(
        funcargs={"benchmark": SimpleNamespace(stats=SimpleNamespace(stats=stats))},
        nodeid="t.py::t",
        path=Path("t.py"),
    )
    (res,) = benchmark_fixture_results(item, KperfMarker(name="k"))  # type: ignore[arg-type]
    assert not uncatalogued(res.metrics)
    doc = {"benchmarks": [{"name": "t", "fullname": "t.py::t", "stats": {**stats.as_dict(), "data": data}}]}
    _info, (imported,) = from_json(doc, source="x.json")
    assert [(m.name, m.value) for m in res.metrics] == [(m.name, m.value) for m in imported.metrics]
    assert res.samples == imported.samples
    assert {"time.median", "time.max", "time.iqr", "time.cv", "time.ci_low"} <= {m.name for m in res.metrics}


def test_ab_result():
    res = ABResult("faster", 0.9, 0.85, 0.95, -0.1, 40, 4, 1.5, 0.2, "certain", 0.02, None)  # type: ignore[arg-type]
    ms = res.to_metrics()
    assert {m.name for m in ms} >= {"ab.ratio", "ab.pairs", "ab.threshold"}
    assert not uncatalogued(ms)


def test_plausibility():
    p = plausibility.check(0.5, device="NVIDIA H100 80GB HBM3", bytes=1e9, flops=1e12)
    ms = p.to_metrics()
    assert {m.name for m in ms} == {
        "analysis.bandwidth_gbs",
        "analysis.bandwidth_fraction",
        "analysis.tflops",
        "analysis.flops_fraction",
    }
    assert not uncatalogued(ms)


def _findings() -> list[Finding]:
    """One launch of every analysis: imbalance, waves, phases, overlap, launch gaps."""
    out: list[Finding] = []
    tl = grid_timeline([1000] * 133, num_sms=132)
    out += wave_quantization(133, ctas_per_sm=1, sm_count=132, timeline=tl)
    out += prologue_epilogue(pipelined_timeline(ctas=4, stages=1))
    out += launch_gaps([KernelRecord("tiny", i * 10_000.0, i * 10_000.0 + 2_000.0) for i in range(8)])
    out += launch_gaps(load_records(DATA / "launch_chain_8_large.json"))
    return out


def test_analyses():
    tl = pipelined_timeline(ctas=4, stages=1)
    ms = analysis_metrics(tl, num_sms=132) + to_metrics(_findings())
    names = {m.name for m in ms}
    assert {"analysis.sm_utilization", "analysis.wave_tail", "analysis.launch_gap_fraction"} <= names
    assert {"analysis.prologue_fraction", "analysis.memory_exposed_fraction"} <= names
    assert not uncatalogued(ms)


def test_findings_show_the_catalogue_direction_and_unit():
    """A finding's own unit and direction (printed with it) are the catalogue's too."""
    for f in _findings() + analyze_timeline(pipelined_timeline(ctas=4, stages=1), num_sms=132):
        s = spec(f"analysis.{f.name}")
        assert s is not None, f.name
        assert (f.unit, f.better) == (s.unit, s.better), f.name


def test_the_check_sees_a_wrong_direction():
    assert uncatalogued([Metric("region.kernel.cycles", 1.0, "cycles", "region", "lower")])
    assert uncatalogued([Metric("nonsense", 1.0)])
    assert uncatalogued([metric("registers", 1)]) == []


def test_a_fixture_with_a_non_finite_statistic_is_bad_input_naming_the_test():
    """The plugin turns this into a warning on the test (plugin/session.py), never a crash."""
    stats = SimpleNamespace(data=[0.001, 0.002], as_dict=lambda: {"median": float("nan")})
    item = SimpleNamespace(
        funcargs={"benchmark": SimpleNamespace(stats=SimpleNamespace(stats=stats))},
        nodeid="t.py::t",
        path=Path("t.py"),
    )
    with pytest.raises(BadInput, match="benchmark fixture of t.py::t"):
        benchmark_fixture_results(item, KperfMarker(name="k"))  # type: ignore[arg-type]
