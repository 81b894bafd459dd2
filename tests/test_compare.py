"""compare.py: default rules, override precedence, timing verdicts, matching, fingerprints."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import make_info, make_result

from kperf_ci.judge.compare import compare_runs
from kperf_ci.judge.policy import ThresholdPolicy, compare_timing, gated
from kperf_ci.model import Fingerprint, RunInfo, RunRecord


def rec(*results, info: RunInfo | None = None) -> RunRecord:
    return RunRecord(info or make_info(), list(results))


def one(base_metrics: dict, cur_metrics: dict, *, policy=None, thresholds=None, arch="sm_90"):
    c = compare_runs(
        rec(make_result(arch=arch, **base_metrics)),
        rec(make_result(arch=arch, thresholds=thresholds, **cur_metrics)),
        policy or ThresholdPolicy(),
    )
    return c, {ch.metric: ch for ch in c.changes}


@pytest.mark.parametrize(
    "metric, base, cur, regression",
    [
        ("spills", 0, 0, False),
        ("spills", 0, 8, True),  # any increase
        ("spills", 16, 8, False),
        ("registers", 100, 110, False),  # +10% is the limit, not over it
        ("registers", 100, 111, True),
        ("sass.instructions", 1000, 1050, False),
        ("sass.instructions", 1000, 1051, True),
        ("ptx.instructions", 1000, 2000, False),  # no default threshold: reported, not failed
        ("sass.mma", 10, 20, False),
    ],
)
def test_default_static_rules(metric, base, cur, regression):
    c, ch = one({metric: base}, {metric: cur})
    assert ch[metric].regression is regression
    assert c.exit_code == int(regression)
    if regression:
        assert "(default)" in ch[metric].reason


def test_directions():
    _, ch = one(
        {"registers": 40, "num_warps": 4, "sass.global_load": 5, "spills": 8, "ptx.instructions": 10},
        {"registers": 32, "num_warps": 8, "sass.global_load": 9, "spills": 8, "ptx.instructions": 11},
    )
    assert ch["registers"].direction == "better" and ch["registers"].rel == pytest.approx(-0.2)
    assert ch["num_warps"].direction == "n/a" and ch["sass.global_load"].direction == "n/a"
    assert ch["spills"].direction == "same" and ch["ptx.instructions"].direction == "worse"


def test_higher_is_better_metric_with_threshold():
    policy = ThresholdPolicy(thresholds={"analysis.sm_utilization": 0.1})
    _, ch = one({"analysis.sm_utilization": 0.9}, {"analysis.sm_utilization": 0.7}, policy=policy)
    assert ch["analysis.sm_utilization"].regression and ch["analysis.sm_utilization"].direction == "worse"
    _, ch = one({"analysis.sm_utilization": 0.7}, {"analysis.sm_utilization": 0.9}, policy=policy)
    assert (
        not ch["analysis.sm_utilization"].regression and ch["analysis.sm_utilization"].direction == "better"
    )


def test_shared_memory_arch_limit():
    _, ch = one({"shared_bytes": 100_000}, {"shared_bytes": 240_000})
    assert ch["shared_bytes"].regression and "sm_90 limit of 232,448 B" in ch["shared_bytes"].reason
    _, ch = one({"shared_bytes": 100_000}, {"shared_bytes": 200_000})  # below sm_90's limit
    assert not ch["shared_bytes"].regression
    _, ch = one({"shared_bytes": 100_000}, {"shared_bytes": 102_000}, arch="sm_86")
    assert ch["shared_bytes"].regression
    _, ch = one({"shared_bytes": 100_000}, {"shared_bytes": 240_000}, arch="sm_90a")
    assert ch["shared_bytes"].regression


def test_override_precedence():
    project = ThresholdPolicy(thresholds={"registers": 0.5, "spills": 64, "ptx.instructions": 0.01})
    _, ch = one(
        {"registers": 100, "spills": 0, "ptx.instructions": 100},
        {"registers": 140, "spills": 32, "ptx.instructions": 102},
        policy=project,
    )
    assert not ch["registers"].regression and ch["registers"].threshold_source == "[tool.kperf.thresholds]"
    assert not ch["spills"].regression  # 64 bytes allowed by the project
    assert ch["ptx.instructions"].regression  # a metric without a default gets one from the project
    # the marker (stored with the current run) beats the project
    _, ch = one(
        {"registers": 100, "spills": 0},
        {"registers": 140, "spills": 32},
        policy=project,
        thresholds={"registers": 0.2, "spills": 0},
    )
    assert ch["registers"].regression and ch["registers"].threshold_source == "marker"
    assert ch["spills"].regression and "marker" in ch["spills"].reason
    # a baseline's marker thresholds do not count
    c = compare_runs(
        rec(make_result(thresholds={"registers": 5.0}, registers=100)), rec(make_result(registers=140))
    )
    assert c.regressions[0].threshold_source == "default"


def test_timing_with_samples():
    rng = np.random.default_rng(1)
    base = list(1.0 + rng.normal(0, 0.005, 60))
    slow = list(1.10 + rng.normal(0, 0.005, 60))
    same = list(1.0 + rng.normal(0, 0.005, 60))
    c, ch = one({"time.median": 1.0}, {"time.median": 1.1})  # no samples: medians only
    assert ch["time.median"].regression and "medians only" in ch["time.median"].reason
    b = make_result(samples=base, **{"time.median": 1.0, "time.mean": 1.0})
    for cur_samples, regression, verdict in ((slow, True, "slower"), (same, False, "unchanged")):
        cur = make_result(
            samples=cur_samples, **{"time.median": float(np.median(cur_samples)), "time.mean": 1.2}
        )
        c = compare_runs(rec(b), rec(cur))
        ch = {x.metric: x for x in c.changes}
        assert ch["time.median"].regression is regression and ch["time.median"].verdict == verdict
        assert ch["time.mean"].direction == "n/a" and not ch["time.mean"].regression
    # a 10% slowdown under a 20% marker threshold passes
    cur = make_result(samples=slow, thresholds={"time": 0.2}, **{"time.median": 1.1})
    assert not compare_runs(rec(b), rec(cur)).regressions
    # absolute floor: a big relative change of a tiny kernel is ignored
    tiny_b = make_result(samples=[x * 1e-4 for x in base], **{"time.median": 1e-4})
    tiny_c = make_result(samples=[x * 1e-4 for x in slow], **{"time.median": 1.1e-4})
    assert not compare_runs(rec(tiny_b), rec(tiny_c), ThresholdPolicy(time_floor_ms=0.001)).regressions
    assert compare_runs(rec(tiny_b), rec(tiny_c), ThresholdPolicy(time_floor_ms=0.0)).regressions


def test_a_change_of_timing_method_is_named_in_the_reason():
    rng = np.random.default_rng(2)
    base = list(1.0 + rng.normal(0, 0.005, 60))
    slow = list(1.10 + rng.normal(0, 0.005, 60))
    b = make_result(samples=base, **{"time.median": 1.0, "time.graph": 0.0})
    flipped = make_result(samples=slow, **{"time.median": 1.1, "time.graph": 1.0})
    (ch,) = [x for x in compare_runs(rec(b), rec(flipped)).changes if x.metric == "time.median"]
    assert ch.regression and "timing method changed (events -> graph replay)" in ch.reason
    kept = make_result(samples=slow, **{"time.median": 1.1, "time.graph": 0.0})
    (ch,) = [x for x in compare_runs(rec(b), rec(kept)).changes if x.metric == "time.median"]
    assert "method" not in ch.reason
    old = make_result(samples=base, **{"time.median": 1.0})  # stored before time.graph existed
    (ch,) = [x for x in compare_runs(rec(old), rec(flipped)).changes if x.metric == "time.median"]
    assert "method" not in ch.reason


def test_a_baseline_flushed_by_zeroing_is_named_against_a_read_flush():
    """Runs before time.l2_read_flush zeroed the flush buffer, and timed its write-back with the
    kernel: a CUPTI run flushed by reading is a change of method, said next to the verdict."""
    rng = np.random.default_rng(3)
    base = list(1.0 + rng.normal(0, 0.005, 60))
    fast = list(0.8 + rng.normal(0, 0.005, 60))
    zeroed = make_result(samples=base, **{"time.median": 1.0, "time.cupti": 1.0, "time.graph": 0.0})
    read = make_result(
        samples=fast, **{"time.median": 0.8, "time.cupti": 1.0, "time.graph": 0.0, "time.l2_read_flush": 1.0}
    )
    (ch,) = [x for x in compare_runs(rec(zeroed), rec(read)).changes if x.metric == "time.median"]
    assert "timing method changed (cupti -> cupti, L2 read-flushed)" in ch.reason
    # neither run flushed (inputs over twice the L2): nothing about the flush changed
    unflushed = make_result(
        samples=fast, **{"time.median": 0.8, "time.cupti": 1.0, "time.graph": 0.0, "time.l2_read_flush": 0.0}
    )
    (ch,) = [x for x in compare_runs(rec(zeroed), rec(unflushed)).changes if x.metric == "time.median"]
    assert "method" not in ch.reason


def test_timing_result_records_its_method():
    from kperf_ci.capture.timing.engine import TimingResult

    r = TimingResult([1.0, 1.1], 1.05, 1.0, 1.1, "graph", 2)
    assert {m.name: m.value for m in r.to_metrics()}["time.graph"] == 1.0
    r.method = "events"
    assert {m.name: m.value for m in r.to_metrics()}["time.graph"] == 0.0


def test_compare_timing_and_plugging(monkeypatch):
    """compare_timing is stats.compare_samples (the fallback of its own was dead code: stats is
    part of the package); a policy can plug in another rule."""
    rng = np.random.default_rng(2)
    base = list(1.0 + rng.normal(0, 0.01, 40))
    slow = list(1.2 + rng.normal(0, 0.01, 40))
    v, rel, (lo, hi) = compare_timing(base, slow, 0.05, 0.001)
    assert v == "slower" and 0.15 < rel < 0.25 and lo > 1
    assert compare_timing(base, base[::-1], 0.05, 0.001)[0] == "unchanged"
    assert compare_timing([1.0], slow, 0.05, 0.001)[0] == "inconclusive"
    calls = []
    policy = ThresholdPolicy(timing=lambda b, c, t, f: calls.append(t) or ("slower", 0.5, (1.4, 1.6)))
    r = make_result(samples=[1.0, 1.0], **{"time.median": 1.0})
    assert compare_runs(rec(r), rec(r), policy).exit_code == 1 and calls == [0.05]


def test_matching_added_removed_rematched():
    base = rec(
        make_result("k1", registers=10),
        make_result("k2", spec="x:*fp32:D", registers=10),
        make_result("gone", registers=1),
    )
    cur = rec(
        make_result("k1", registers=10),
        make_result("k2", spec="x:*fp16:D", registers=20),
        make_result("new", registers=1),
    )
    c = compare_runs(base, cur)
    assert [k.kernel for k in c.added] == ["new"]
    # "gone"'s test did not run in the current run: not run, not a removal that fails
    assert not c.removed and [n.variant.kernel for n in c.not_run] == ["gone"] and c.exit_code == 1
    assert [(b.spec, k.spec) for b, k in c.rematched] == [("x:*fp32:D", "x:*fp16:D")]
    reg = c.regressions[0]
    assert reg.variant.kernel == "k2" and reg.key_change == "x *fp32:D -> *fp16:D"
    assert "variant changed: x *fp32:D -> *fp16:D" in reg.reason
    # across tests (no common test or launch site) ambiguous matches are not guessed
    from dataclasses import replace

    def at(r, test):
        r.key = replace(r.key, test=test)
        return r

    base = rec(
        at(make_result("k", spec="a:i32", registers=1), "t::a"), at(make_result("k", spec="b:i32"), "t::b")
    )
    cur = rec(
        at(make_result("k", spec="c:i32", registers=1), "t::c"), at(make_result("k", spec="d:i32"), "t::d")
    )
    c = compare_runs(base, cur)
    assert len(c.added) == 2 and len(c.not_run) == 2 and not c.changes and not c.rematched


def test_incomparable_fingerprints():
    base_info = make_info(triton="3.5.0", gpu="A100")
    cur_info = make_info(triton="3.6.0", gpu="H100")
    r = make_result(samples=[1.0, 2.0], registers=10, **{"time.median": 1.0})
    r2 = make_result(samples=[5.0, 6.0], registers=50, **{"time.median": 5.0})
    c = compare_runs(rec(r, info=base_info), rec(r2, info=cur_info))
    assert not c.changes and c.exit_code == 0
    assert {(i.kind, i.reason) for i in c.incomparable} == {
        ("static", "triton 3.5.0 vs 3.6.0"),
        ("time", "GPU A100 vs H100"),
    }
    # same GPU, other triton: timing compares, static does not
    c = compare_runs(rec(r, info=make_info(triton="3.5.0", gpu="H100")), rec(r2, info=cur_info))
    assert [ch.metric for ch in c.changes] == ["time.median"]


def test_errors_new_metrics_and_sorting():
    bad = make_result("k1")
    bad.error = "compile failed"
    c = compare_runs(
        rec(make_result("k1", registers=10), make_result("k2", registers=10, spills=0)),
        rec(bad, make_result("k2", registers=9, spills=4, **{"sass.instructions": 5})),
    )
    ch = c.sorted_changes()
    assert [x.metric for x in ch] == ["error", "spills", "registers"]  # regressions first, new metric hidden
    assert "sass.instructions" in [x.metric for x in c.sorted_changes(all=True)]
    assert len(c.improvements) == 1 and c.exit_code == 1
    d = c.to_dict()
    assert d["exit_code"] == 1 and d["regressions"] == 2 and d["changes"][0]["variant"]["kernel"] == "k1"


def test_fingerprint_none_gpu_for_static_runs():
    # Two static runs without a GPU: static metrics compare.
    info = make_info()
    assert info.fingerprint == Fingerprint(cpu="cpu", triton="3.6.0", python="3.11", host_hash="abc")
    c = compare_runs(
        rec(make_result(registers=10), info=info), rec(make_result(registers=12), info=make_info())
    )
    assert c.changes and not c.incomparable


def test_marker_metrics_selection_limits_what_gates():
    assert gated("time.median", ["time"]) and gated("registers", None)
    assert not gated("registers", ["spills", "time"])
    base = RunRecord(make_info(), [make_result(registers=32, spills=0)])
    only_spills = RunRecord(
        make_info(), [make_result(registers=64, spills=0, thresholds={"metrics": ["spills"]})]
    )
    everything = RunRecord(make_info(), [make_result(registers=64, spills=0)])
    assert compare_runs(base, everything, ThresholdPolicy()).exit_code == 1
    comp = compare_runs(base, only_spills, ThresholdPolicy())
    assert comp.exit_code == 0
    (reg,) = [ch for ch in comp.changes if ch.metric == "registers"]
    assert reg.direction == "worse" and "not gated" in reg.reason
