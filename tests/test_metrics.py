"""The metric catalogue and the verdict vocabulary (kperf_ci/metrics.py): directions users see,
the judging rules that follow from them, and docs/METRICS.md generated from the catalogue.

Every test here runs on stored rows or synthetic samples: nothing depends on host timing."""

from __future__ import annotations

import dataclasses
import importlib.util
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import make_info, make_result

from kperf_ci import analysis, metrics, store
from kperf_ci.analysis import KernelRecord, LaunchConfig, analyze_timeline, launch_gaps
from kperf_ci.capture.static import sass
from kperf_ci.capture.timing.engine import TimingResult
from kperf_ci.capture.timing.interleaved import ABResult
from kperf_ci.cli import main
from kperf_ci.judge.compare import compare_runs
from kperf_ci.judge.gate import GatePolicy, gate_against_run, gate_history
from kperf_ci.judge.launch_diff import LaunchChange, launch_changes, static_regressions
from kperf_ci.judge.launch_diff import TestDiff as ABTestDiff
from kperf_ci.judge.plausibility import Plausibility
from kperf_ci.judge.policy import ThresholdPolicy
from kperf_ci.judge.stats import compare_samples
from kperf_ci.judge.verdict import is_regression
from kperf_ci.model import Metric, RunRecord, VariantResult
from kperf_ci.prcheck.document import ABReport
from kperf_ci.report.build import build_report
from kperf_ci.report.markdown import render_markdown

ROOT = Path(__file__).resolve().parents[1]
H100_DB = ROOT / "tests/data/gpu/h100_examples.db"
GEMM = "grouped_gemm"  # a variant whose last wave is full (analysis.wave_tail 1.0) on the H100


# --------------------------------------------------------------------------- the H100 case


def _h100_pair(tmp_path: Path) -> tuple[RunRecord, RunRecord]:
    """Base: a stored H100 variant with a full last wave. Head: the same launch with one extra
    tail CTA, as the issue measured it: time +46.7%, wave_tail 100% -> 0.4%, the per-CTA median
    of the kernel region 129 -> 84 us (the lone CTA of the last wave runs fast)."""
    db = tmp_path / "h100.db"
    shutil.copy2(H100_DB, db)  # the store migrates old schemas in place: never the committed file
    run = store.load_run(db)
    base = next(r for r in run.results if r.key.kernel == GEMM and r.samples)
    assert base.metric("analysis.wave_tail").value == 1.0  # the premise of the case
    slow = 1.467
    region_scale = 84 / 129
    changed = {
        "analysis.wave_tail": 1 / 264,
        "analysis.waves": 1 + 1 / 264,
        "analysis.wave_idle": 0.498,
        "analysis.wave_tail_idle_measured": 0.48,
        "analysis.sm_utilization": base.metric("analysis.sm_utilization").value * 0.7,
    }
    head_metrics = []
    for m in base.metrics:
        value = m.value
        if m.kind == "time" and m.unit == "ms":
            value = m.value * slow
        elif m.name in changed:
            value = changed[m.name]
        elif m.name.startswith("region.") and m.name.endswith((".cycles", ".ms")):
            value = m.value * region_scale  # every per-CTA region median fell
        head_metrics.append(dataclasses.replace(m, value=value))
    head = dataclasses.replace(base, metrics=head_metrics, samples=[x * slow for x in base.samples])
    base_run = RunRecord(dataclasses.replace(run.info, run_id="base"), [base])
    head_run = RunRecord(dataclasses.replace(run.info, run_id="head"), [head])
    return base_run, head_run


def test_h100_extra_tail_cta_lists_no_improvement_next_to_the_slower_launch(tmp_path):
    base, head = _h100_pair(tmp_path)
    comp = compare_runs(base, head)
    by = {c.metric: c for c in comp.changes}
    assert [c.metric for c in comp.regressions] == ["time.median"]
    assert by["time.median"].verdict == "slower" and by["time.median"].direction == "worse"
    # the last wave went from full to one CTA: worse, never better
    assert by["analysis.wave_tail"].direction == "worse"
    for name in ("analysis.wave_idle", "analysis.wave_tail_idle_measured", "analysis.sm_utilization"):
        assert by[name].direction == "worse", name
    # per-CTA medians fell while the launch got slower: shown, not judged
    regions = [
        c for c in comp.changes if c.metric.startswith("region.") and c.metric.endswith((".cycles", ".ms"))
    ]
    assert {"region.kernel.ms", "region.kernel.cycles"} <= {c.metric for c in regions}
    assert all(c.direction == "n/a" for c in regions), [(c.metric, c.direction) for c in regions]
    assert comp.improvements == []
    # the report says the same: no "better" row, the variant is slower
    report = build_report(head, base, comp)
    (v,) = report.variants
    assert v.verdict == "slower" and v.regression
    rows = {r.name: r for r in v.rows}
    assert rows["analysis.wave_tail"].verdict == "worse"
    assert rows["region.kernel.ms"].verdict == "changed" and rows["region.kernel.cycles"].verdict == "changed"
    assert not [r.name for r in v.rows if r.verdict == "better"]
    assert "region" not in v.summary and "kernel" not in v.summary


def test_h100_extra_tail_cta_in_kperf_compare(tmp_path, monkeypatch):
    """The command users run: one regression, 0 improvements, no row called better."""
    base, head = _h100_pair(tmp_path)
    store.save_run(tmp_path / "base.db", base.info, base.results)
    store.save_run(tmp_path / "head.db", head.info, head.results)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "250")
    r = CliRunner().invoke(main, ["compare", "--db", "head.db", "--baseline", "base.db"])
    assert r.exit_code == 1, r.output
    assert "1 regressed kernel (1 metric row over threshold), 0 improvements" in r.output
    assert " better " not in r.output


# --------------------------------------------------------------------------- catalogue


def test_every_metric_capture_writes_agrees_with_the_catalogue():
    """Producers of metrics and the catalogue say the same unit, kind and direction."""
    produced: list[Metric] = []
    asm_metrics = [
        metrics.metric(n, 1.0) for n in ("registers", "spills", "sass.instructions", "sass.mma", "ptx.tma")
    ]
    produced += asm_metrics
    produced += TimingResult([1.0, 1.1, 1.2], 1.1, 1.0, 1.2, "graph", 3).to_metrics()
    produced += Plausibility(
        time_ms=1.0,
        device="x",
        peak=None,
        bandwidth=1e12,
        bandwidth_fraction=0.5,
        flop_rate=1e14,
        flop_fraction=0.2,
    ).to_metrics()
    ab = ABResult(
        "slower",
        1.1,
        1.05,
        1.15,
        0.1,
        40,
        2,
        0.5,
        0.1,
        "certain",
        0.01,
        compare_samples([1.0, 1.0], [1.1, 1.1]),
    )
    produced += ab.to_metrics()
    for m in produced:
        s = metrics.spec(m.name)
        assert s is not None, m.name
        assert (m.unit, m.kind, m.better) == (s.unit, s.kind, s.better), m.name


def _records_133_ctas() -> list[tuple]:
    """133 CTAs on 132 SMs (a wave tail), each with a prologue, a main loop holding a memory
    wait and a tensor-core region, and an epilogue: enough for every timeline analysis."""
    rows = []
    for cta in range(133):
        sm, t0 = cta % 132, (0.0 if cta < 132 else 2000.0)
        t1 = t0 + 1000.0 + 5 * cta
        rows += [
            (cta, 0, sm, "kernel", t0, t1),
            (cta, 0, sm, "prologue", t0, t0 + 100),
            (cta, 0, sm, "loop0", t0 + 100, t1 - 100),
            (cta, 0, sm, "tma_wait", t0 + 100, t0 + 400),
            (cta, 0, sm, "mma", t0 + 400, t1 - 100),
            (cta, 0, sm, "epilogue", t1 - 100, t1),
        ]
    return rows


def test_every_finding_direction_agrees_with_the_catalogue():
    """The analyses flag in the direction the catalogue judges (a finding flagged when high is
    'lower is better'), with the catalogue's unit. Runs every analysis on a synthetic launch."""
    tl = analysis.Timeline.from_records(_records_133_ctas(), kernel="k", num_sms=132)
    launch = LaunchConfig(grid=133, num_warps=4, registers=128, shared_bytes=196_608, arch="sm_90")
    findings = analyze_timeline(tl, launch=launch, num_sms=132)
    findings += launch_gaps([KernelRecord("k", i * 1000.0, i * 1000.0 + 700.0) for i in range(6)])
    names = set()
    for f in findings:
        s = metrics.spec(f"analysis.{f.name}")
        assert s is not None, f.name
        assert (f.unit, f.better) == (s.unit, s.better), f.name
        names.add(f.name)
    assert {"wave_tail", "sm_utilization", "memory_exposed_fraction", "launch_gap_fraction"} <= names
    # every flag threshold names a finding of the catalogue
    for name in analysis.FLAG_THRESHOLDS:
        assert name == "min_cost_ns" or metrics.spec(f"analysis.{name}") is not None, name


def test_static_capture_builds_its_metrics_from_the_catalogue():
    names = ["registers", "spills", "spill_loads", "stack_bytes", "local_bytes", "shared_bytes", "num_warps",
             "num_stages", "cubin_bytes", "ptx.instructions", "sass.instructions"]  # fmt: skip
    names += [f"sass.{c}" for c in sass.CLASSES] + [f"ptx.{c}" for c in sass.CLASSES]
    for n in names:
        s = metrics.spec(n)
        assert s is not None and s.kind == "static", n
    assert metrics.direction_of("cubin_bytes") == "none"  # line tables move it: never judged


@pytest.mark.parametrize(
    "name, better",
    [
        ("analysis.wave_tail", "higher"),
        ("analysis.sm_utilization", "higher"),
        ("region.kernel.ms", "none"),
        ("region.loop0.cycles", "none"),
        ("region.my.scope.cycles", "none"),
        ("region.kernel.fraction", "none"),
        ("region.dropped_events", "lower"),
        ("time.median", "lower"),
        ("time.cv", "none"),
        ("sass.mma", "none"),
        ("registers", "lower"),
    ],
)
def test_directions_of_the_catalogue(name, better):
    assert metrics.direction_of(name, "lower") == better


def test_unknown_names_keep_their_stored_direction():
    assert metrics.spec("user.metric") is None
    assert metrics.direction_of("user.metric", "higher") == "higher"
    with pytest.raises(KeyError):
        metrics.metric("user.metric", 1.0)


def test_catalogue_tables_that_consumers_read():
    assert metrics.DEFAULT_THRESHOLDS == {
        "registers": 0.10,
        "spills": 0.0,
        "sass.instructions": 0.05,
        "time": 0.05,
    }
    assert metrics.ABSOLUTE_KEYS == {"spills"}
    assert metrics.headline("static")[:3] == ("registers", "spills", "shared_bytes")
    assert metrics.headline("time")[0] == "time.median"
    assert metrics.MOVED_METRICS == (
        "registers",
        "spills",
        "spill_loads",
        "shared_bytes",
        "sass.instructions",
    )
    assert metrics.CODE_METRICS == (*metrics.MOVED_METRICS, "ptx.instructions")
    patterns = [s.pattern for s in metrics.CATALOGUE]
    assert len(patterns) == len(set(patterns))


def test_stored_direction_is_overridden_by_the_catalogue():
    """Runs stored before a direction was fixed are judged by the catalogue: a stored
    region.kernel.cycles says 'lower', and a stored analysis.wave_tail (conftest) says 'lower'."""
    base = make_result(**{"region.kernel.cycles": 1000.0, "analysis.wave_tail": 1.0})
    cur = make_result(**{"region.kernel.cycles": 600.0, "analysis.wave_tail": 0.01})
    assert {m.better for m in cur.metrics} == {"lower"}
    comp = compare_runs(RunRecord(make_info(), [base]), RunRecord(make_info(), [cur]))
    by = {c.metric: c.direction for c in comp.changes}
    assert by == {"region.kernel.cycles": "n/a", "analysis.wave_tail": "worse"}


def test_kperf_ab_what_moved_uses_the_catalogue_units_and_rules():
    """kperf ab lists the code metrics the catalogue marks, formatted as kperf compare formats
    them, and judges them with compare's rules."""
    code = {"sass": "a", "registers": 32, "spills": 0, "spill_loads": 0, "shared_bytes": 99328,
            "sass.instructions": 388, "ptx.instructions": 500}  # fmt: skip
    head = {**code, "sass": "b", "spills": 16, "shared_bytes": 33792, "sass.instructions": 1028}
    b, h = (
        {"config": "num_warps=4", "code": {"sm_90": code}},
        {"config": "num_warps=4", "code": {"sm_90": head}},
    )
    occupancy, line = launch_changes(b, h)  # the occupancy before the code, as a cause reads
    assert line == (
        "sm_90 SASS changed: spills 0 B -> 16 B, shared memory 99,328 B -> 33,792 B, "
        "SASS instructions 388 -> 1,028"
    )
    assert occupancy == "sm_90 theoretical occupancy 12.5% -> 37.5% (shared memory 99,328 B -> 33,792 B)"
    lc = LaunchChange("k", "k.py::k", "changed", [line], b, h)
    (reg,) = static_regressions([ABTestDiff("t", "changed", [lc])], ThresholdPolicy())
    # without timing the instruction count is shown, not judged (the catalogue's "untimed")
    assert reg["reason"] == "spills +16 B > 0 B allowed (default)"


# --------------------------------------------------------------------------- verdicts


def _timed(samples: list[float]) -> VariantResult:
    return make_result(
        "k", "NVIDIA H100 80GB HBM3", samples=samples, **{"time.median": float(np.median(samples))}
    )


def _gpu_run(*results: VariantResult) -> RunRecord:
    return RunRecord(make_info(mode="gpu", gpu="NVIDIA H100 80GB HBM3"), list(results))


def test_timing_direction_slower_is_worse_faster_is_better():
    """Deterministic samples (no host timing): +20% is slower, worse, a regression; -20% faster,
    better, none. Catches the timing direction flipped in compare."""
    base = [1.0 + 0.001 * i for i in range(40)]
    for factor, verdict, direction, regression in (
        (1.2, "slower", "worse", True),
        (0.8, "faster", "better", False),
    ):
        cur = [x * factor for x in base]
        comp = compare_runs(_gpu_run(_timed(base)), _gpu_run(_timed(cur)))
        (ch,) = [c for c in comp.changes if c.metric == "time.median"]
        assert (ch.verdict, ch.direction, ch.regression) == (verdict, direction, regression)
        assert comp.exit_code == int(regression)
        assert [c.metric for c in comp.improvements] == ([] if regression else ["time.median"])
        report = build_report(_gpu_run(_timed(cur)), _gpu_run(_timed(base)), comp)
        assert report.variants[0].verdict == verdict


#: too few samples for an interval at 99%: inconclusive whatever the medians say (+30% here)
FEW_BASE = [1.0, 1.01, 0.99]
FEW_CUR = [1.3, 1.31, 1.29]


def test_inconclusive_is_never_a_regression():
    """compare, the report and the release gate on a +30% change that the samples cannot settle."""
    assert compare_samples(FEW_BASE, FEW_CUR, threshold=0.05).verdict == "inconclusive"
    base, cur = _gpu_run(_timed(FEW_BASE)), _gpu_run(_timed(FEW_CUR))
    comp = compare_runs(base, cur)
    (ch,) = [c for c in comp.changes if c.metric == "time.median"]
    assert ch.verdict == "inconclusive" and not ch.regression and ch.direction == "same"
    assert comp.regressions == [] and comp.exit_code == 0
    report = build_report(cur, base, comp)
    assert report.variants[0].verdict == "inconclusive" and not report.regressions
    assert report.counts["inconclusive"] == 1 and report.verdict_line == "no regressions"
    assert "inconclusive" in render_markdown(report)
    assert not gate_against_run(base, cur, GatePolicy()).blocked


def test_inconclusive_against_history_does_not_block():
    """The history gate: the current run's samples straddle the threshold (inconclusive)."""
    rng = np.random.default_rng(0)
    hist = [_gpu_run(_timed((1.0 * np.exp(rng.normal(0, 0.005, 50))).tolist())) for _ in range(20)]
    cur_samples = [0.9, 1.05, 1.3]
    pooled = [x for h in hist for x in h.results[0].samples]
    assert compare_samples(pooled, cur_samples, threshold=0.05, floor=0.001).verdict == "inconclusive"
    rep = gate_history(hist, _gpu_run(_timed(cur_samples)), GatePolicy(against="history"))
    assert rep.checked == 1 and not rep.blocked, rep.render()
    slower = [x * 1.2 for x in pooled[:50]]  # the control: a real slowdown does block
    assert gate_history(hist, _gpu_run(_timed(slower)), GatePolicy(against="history")).blocked


def test_kperf_ab_fails_on_slower_only():
    """`kperf ab`'s exit status: an inconclusive A/B comparison is not a regression."""
    for verdict, code in (("slower", 1), ("inconclusive", 0), ("unchanged", 0), ("faster", 0)):
        rep = ABReport("origin/main", "abc", timed=[{"verdict": verdict}])
        assert rep.exit_code == code, verdict


@pytest.mark.parametrize(
    "verdict, regression",
    [("slower", True), ("faster", False), ("unchanged", False), ("inconclusive", False)],
)
def test_vocabulary_maps(verdict, regression):
    assert is_regression(verdict) is regression
    row = metrics.row_verdict_of_timing(verdict)
    assert metrics.variant_verdict_of_time_row(row) == verdict
    assert metrics.timing_change(verdict) == {"slower": "worse", "faster": "better"}.get(verdict, "same")


def test_vocabulary_maps_fall_back_as_they_always_did():
    """The one table's fallbacks (kperf_ci.metrics: a word outside it): no change for a Change,
    inconclusive for a row and for a variant (a time row that is new, removed or not compared)."""
    assert metrics.timing_change("") == "same" and metrics.row_verdict_of_timing("") == "inconclusive"
    for row in ("n/a", "changed", "new", "removed", "inconclusive"):
        assert metrics.variant_verdict_of_time_row(row) == "inconclusive"


def test_change_of():
    assert metrics.change_of("lower", 10, 8) == "better"
    assert metrics.change_of("lower", 8, 10) == "worse"
    assert metrics.change_of("higher", 10, 8) == "worse"
    assert metrics.change_of("none", 10, 8) == "n/a"
    assert metrics.change_of("higher", 8, 8) == "same"


def test_a_user_threshold_on_a_higher_is_better_metric_fails_on_a_drop():
    policy = ThresholdPolicy(thresholds={"analysis.wave_tail": 0.5})
    base = make_result(**{"analysis.wave_tail": 1.0})
    cur = make_result(**{"analysis.wave_tail": 0.004})
    comp = compare_runs(RunRecord(make_info(), [base]), RunRecord(make_info(), [cur]), policy)
    assert [c.metric for c in comp.regressions] == ["analysis.wave_tail"]


# --------------------------------------------------------------------------- docs/METRICS.md


def _doc_module():
    spec = importlib.util.spec_from_file_location("gen_metrics_doc", ROOT / "scripts/gen_metrics_doc.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def test_committed_metrics_doc_is_up_to_date():
    """docs/METRICS.md is generated: `python scripts/gen_metrics_doc.py` after changing the
    catalogue (kperf_ci/metrics.py) or an analysis flag threshold."""
    committed = (ROOT / "docs/METRICS.md").read_text(encoding="utf-8")
    assert committed == _doc_module().render(), (
        "docs/METRICS.md is stale: run python scripts/gen_metrics_doc.py"
    )


def test_metrics_doc_lists_every_entry_with_its_direction():
    text = _doc_module().render()
    for s in metrics.CATALOGUE:
        assert f"`{s.pattern}`" in text, s.pattern
    assert "| `analysis.wave_tail` | last-wave fullness | fraction | analysis | higher |" in text
    assert "| `region.<name>.ms` | <name> time | ms | region | none |" in text
