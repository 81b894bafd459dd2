"""Each analysis on synthetic timelines: one case that must be flagged, one control that must not."""

from __future__ import annotations

import numpy as np
import pytest
from fixtures.synthetic import grid_timeline, pipelined_timeline, schedule

from kperf_ci.analysis import (
    LaunchConfig,
    analyze_timeline,
    launch_gaps,
    load_imbalance,
    overlap,
    prologue_epilogue,
    sm_utilization,
    to_metrics,
    wave_quantization,
)
from kperf_ci.analysis.findings import Finding, flagged
from kperf_ci.analysis.occupancy import occupancy
from kperf_ci.hardware import arch_limits
from kperf_ci.traces.kernel_records import KernelRecord, records_from_chrome_trace
from kperf_ci.traces.records import Timeline


def by_name(fs: list[Finding]) -> dict[str, Finding]:
    return {f.name: f for f in fs}


# -- scheduler model used by the synthetic timelines ----------------------------------------------


def test_schedule_fills_one_slot_on_every_sm_before_doubling_up():
    sm, start, end = schedule([10.0] * 5, num_sms=2, ctas_per_sm=2)
    assert sm.tolist() == [0, 1, 0, 1, 0]
    assert start.tolist() == [0, 0, 0, 0, 10]


# -- SM utilization --------------------------------------------------------------------------------


def test_sm_utilization_flags_a_half_empty_launch_and_names_the_tail():
    f = sm_utilization(grid_timeline([100_000] * 133, num_sms=132))
    assert f.flagged and f.value == pytest.approx(133 / 264, rel=1e-6)
    assert f.details["idle"]["tail"] == pytest.approx(131 / 264, rel=1e-6)
    assert "tail" in f.suggestion


def test_sm_utilization_control_full_wave():
    f = sm_utilization(grid_timeline([100_000] * 132, num_sms=132))
    assert not f.flagged and f.value == pytest.approx(1.0)


def test_sm_utilization_counts_sms_that_ran_nothing():
    f = sm_utilization(grid_timeline([100_000] * 66, num_sms=132))
    assert f.flagged and f.value == pytest.approx(0.5)
    assert f.details["sms_used"] == 66 and "without work" in f.suggestion


# -- load imbalance --------------------------------------------------------------------------------


def test_imbalance_flags_skewed_ctas_and_blames_the_ctas():
    d = np.full(132, 100_000.0)
    d[::16] *= 4
    fs = by_name(load_imbalance(grid_timeline(d, num_sms=132)))
    assert fs["sm_finish_skew"].flagged
    assert fs["sm_finish_skew"].value == pytest.approx(3.0)
    assert fs["cta_duration_max_over_median"].value == pytest.approx(4.0)
    assert "unequal work" in fs["sm_finish_skew"].suggestion


def test_imbalance_control_equal_ctas_with_small_jitter():
    rng = np.random.default_rng(0)
    d = 100_000.0 * (1 + 0.02 * rng.standard_normal(264))
    fs = by_name(load_imbalance(grid_timeline(d, num_sms=132)))
    assert not fs["sm_finish_skew"].flagged
    assert fs["cta_duration_cv"].value < 0.05


def test_imbalance_from_a_wave_tail_blames_the_grid():
    fs = by_name(load_imbalance(grid_timeline([100_000] * 133, num_sms=132)))
    assert fs["sm_finish_skew"].flagged and "wave tail" in fs["sm_finish_skew"].suggestion


# -- wave quantization -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "expected", "limited_by"),
    [
        (dict(num_warps=8, registers=255), 1, "registers"),  # 8 warps x 8192 regs = the whole file
        (dict(num_warps=8, registers=128), 2, "registers"),
        (dict(num_warps=4, registers=32), 16, "registers+warps"),
        (dict(num_warps=4, registers=24), 16, "warps"),
        (dict(num_warps=1, registers=16), 32, "blocks"),
        (dict(num_warps=8, registers=64, shared_bytes=196608), 1, "shared_memory"),
        (dict(num_warps=4, registers=64, shared_bytes=100 * 1024), 2, "shared_memory"),
    ],
)
def test_occupancy_sm90(kw, expected, limited_by):
    occ = occupancy(arch="sm_90", **kw)
    assert occ.ctas_per_sm == expected and occ.limited_by == limited_by


def test_occupancy_other_archs_and_gpu_names():
    assert occupancy(num_warps=4, shared_bytes=48 * 1024, arch="sm_86").ctas_per_sm == 2  # 100 KB per SM
    assert occupancy(num_warps=4, arch="sm_80").ctas_per_sm == 16
    assert arch_limits("NVIDIA H100 80GB HBM3").sm_count == 132
    assert arch_limits("NVIDIA H100 PCIe").sm_count == 114
    assert arch_limits("NVIDIA A100-SXM4-80GB").arch == "sm_80"
    assert arch_limits(90, sm_count=100).sm_count == 100
    with pytest.raises(ValueError, match="unknown arch"):
        arch_limits("sm_1")
    with pytest.raises(ValueError, match="per-CTA limit"):
        occupancy(num_warps=4, shared_bytes=300_000)


def test_wave_tail_flags_133_ctas_on_132_sms_from_static_numbers():
    fs = by_name(wave_quantization(133, num_warps=8, registers=128, shared_bytes=196608, arch="sm_90"))
    assert fs["ctas_per_sm"].value == 1
    assert fs["waves"].value == pytest.approx(133 / 132)
    assert fs["wave_tail"].flagged and fs["wave_tail"].value == pytest.approx(1 / 132)
    assert fs["wave_idle"].value == pytest.approx(1 - 133 / 264)
    assert "132 or 264" in fs["wave_idle"].suggestion and "persistent" in fs["wave_idle"].suggestion


def test_wave_tail_control_whole_waves_and_many_waves():
    fs = by_name(wave_quantization(132, num_warps=8, registers=128, shared_bytes=196608))
    assert not fs["wave_tail"].flagged and fs["wave_tail"].value == 1.0 and fs["wave_idle"].value == 0.0
    # 8 partial waves: 1000 / (8 x 132) -> 5.3% idle, under the 10% default
    fs = by_name(wave_quantization(1000, ctas_per_sm=1, sm_count=132))
    assert not fs["wave_idle"].flagged and fs["wave_idle"].value == pytest.approx(1 - 1000 / 1056)


def test_wave_tail_checked_against_the_timeline():
    fs = by_name(
        wave_quantization(
            133, ctas_per_sm=1, sm_count=132, timeline=grid_timeline([50_000] * 133, num_sms=132)
        )
    )
    assert fs["wave_tail_idle_measured"].flagged
    assert fs["wave_tail_idle_measured"].value == pytest.approx(fs["wave_idle"].value, rel=1e-6)
    assert fs["ctas_per_sm_observed"].value == 1
    fs = by_name(
        wave_quantization(
            132, ctas_per_sm=1, sm_count=132, timeline=grid_timeline([50_000] * 132, num_sms=132)
        )
    )
    assert not fs["wave_tail_idle_measured"].flagged
    # a prediction of 2 CTAs/SM that the timeline contradicts is reported
    fs = by_name(
        wave_quantization(
            132, ctas_per_sm=2, sm_count=132, timeline=grid_timeline([50_000] * 132, num_sms=132)
        )
    )
    assert "predicted 2" in fs["wave_tail_idle_measured"].explanation


# -- prologue / epilogue ---------------------------------------------------------------------------


def test_heavy_prologue_is_flagged_light_is_not():
    heavy = by_name(prologue_epilogue(grid_timeline([10_000] * 8, num_sms=132, warps=4, prologue=0.45)))
    assert heavy["prologue_fraction"].flagged and heavy["prologue_fraction"].value == pytest.approx(0.45)
    assert not heavy["epilogue_fraction"].flagged
    light = by_name(prologue_epilogue(grid_timeline([10_000] * 8, num_sms=132, prologue=0.02, epilogue=0.03)))
    assert not light["prologue_fraction"].flagged and not light["epilogue_fraction"].flagged
    assert light["epilogue_fraction"].value == pytest.approx(0.03)


def test_heavy_epilogue_and_explicit_phase_regions_without_loops():
    fs = by_name(prologue_epilogue(grid_timeline([10_000] * 4, num_sms=132, epilogue=0.5)))
    assert fs["epilogue_fraction"].flagged
    tl = Timeline.from_records(
        [(0, 0, 0, "kernel", 0, 100), (0, 0, 0, "prologue", 0, 30), (0, 0, 0, "epilogue", 90, 100)]
    )
    fs = by_name(prologue_epilogue(tl))
    assert fs["prologue_fraction"].value == pytest.approx(0.3) and fs["prologue_fraction"].flagged
    assert prologue_epilogue(Timeline.from_records([(0, 0, 0, "kernel", 0, 100)])) == []


# -- overlap / pipeline bubbles --------------------------------------------------------------------


def test_unpipelined_matmul_exposes_memory_pipelined_does_not():
    s1 = by_name(overlap(pipelined_timeline(stages=1, load_ns=800, mma_ns=400)))
    assert s1["memory_exposed_fraction"].flagged
    assert s1["memory_exposed_fraction"].value == pytest.approx(800 / 1200, rel=0.01)
    assert "pipeline" in s1["memory_exposed_fraction"].suggestion
    assert "tma_wait" in s1["memory_exposed_fraction"].explanation
    assert s1["pipeline_bubble_fraction"].value == pytest.approx(800 / 1200, rel=0.01)
    assert s1["pipeline_bubble_fraction"].details["bubbles"][0]["during"] == ["tma_wait"]
    # with memory regions tracked, the bubble is reported, not flagged
    assert not s1["pipeline_bubble_fraction"].flagged
    s3 = by_name(overlap(pipelined_timeline(stages=3, load_ns=800, mma_ns=400)))
    assert not s3["memory_exposed_fraction"].flagged
    assert s3["mma_busy_fraction"].value > 0.9


def test_bubble_outside_every_region_is_split_out_not_flagged_as_memory():
    # loads hidden by 3 stages (only the first wait shows), but 40% of each iteration in no region
    tl = pipelined_timeline(stages=3, load_ns=800, mma_ns=600, untracked_ns=400)
    fs = by_name(overlap(tl))
    assert fs["pipeline_bubble_fraction"].value == pytest.approx(0.4, abs=0.02)
    assert fs["memory_exposed_fraction"].value < 0.05 and not fs["memory_exposed_fraction"].flagged
    assert fs["pipeline_bubble_fraction"].details["untracked_fraction"] == pytest.approx(0.4, abs=0.02)
    assert "in no tracked region" in fs["pipeline_bubble_fraction"].explanation
    # the same loop with 1 stage: the waits show and are flagged
    fs1 = by_name(overlap(pipelined_timeline(stages=1, load_ns=800, mma_ns=600, untracked_ns=400)))
    assert fs1["memory_exposed_fraction"].flagged
    assert fs1["memory_exposed_fraction"].value == pytest.approx(800 / 1800, rel=0.01)


def test_without_memory_regions_the_bubble_carries_the_flag():
    tl = pipelined_timeline(stages=1, load_ns=800, mma_ns=400)
    tl = tl.where(tl.region.astype(str) != "tma_wait")
    fs = by_name(overlap(tl))
    assert (
        fs["pipeline_bubble_fraction"].flagged
        and "no memory regions" in fs["pipeline_bubble_fraction"].explanation
    )
    assert fs["memory_exposed_fraction"].value != fs["memory_exposed_fraction"].value  # NaN: not measurable
    assert not fs["memory_exposed_fraction"].flagged
    assert "analysis.memory_exposed_fraction" not in {m.name for m in to_metrics(fs.values())}


def test_warp_specialized_overlap_is_measured_across_warps():
    ws = by_name(overlap(pipelined_timeline(stages=3, warp_specialized=True)))
    assert ws["memory_compute_overlap"].value > 0.9
    assert not ws["memory_exposed_fraction"].flagged
    plain = by_name(overlap(pipelined_timeline(stages=1)))
    assert plain["memory_compute_overlap"].value == 0.0


def test_overlap_needs_compute_regions():
    assert overlap(grid_timeline([1000] * 4, num_sms=132)) == []


# -- launch gaps -----------------------------------------------------------------------------------


def test_chain_of_tiny_kernels_is_launch_bound():
    recs = [KernelRecord("tiny", i * 10_000.0, i * 10_000.0 + 2_000.0) for i in range(20)]
    fs = by_name(launch_gaps(recs))
    assert fs["launch_gap_fraction"].flagged
    assert fs["launch_gap_fraction"].value == pytest.approx(19 * 8_000 / (19 * 10_000 + 2_000))
    assert (
        "CUDA graph" in fs["launch_gap_fraction"].suggestion
        and "launch-bound" in fs["launch_gap_fraction"].suggestion
    )
    assert fs["launch_gap_median_ns"].value == pytest.approx(8_000)


def test_fused_kernel_and_back_to_back_long_kernels_are_not_flagged():
    assert not by_name(launch_gaps([KernelRecord("fused", 0.0, 40_000.0)]))["launch_gap_fraction"].flagged
    recs = [KernelRecord("big", i * 1_005_000.0, i * 1_005_000.0 + 1_000_000.0) for i in range(5)]
    f = by_name(launch_gaps(recs))["launch_gap_fraction"]
    assert not f.flagged and f.value < 0.01


def test_kernel_records_from_a_profiler_trace_overlap_counts_once():
    tr = {
        "traceEvents": [
            {"ph": "X", "cat": "kernel", "name": "a", "ts": 0.0, "dur": 10.0},
            {"ph": "X", "cat": "kernel", "name": "b", "ts": 5.0, "dur": 10.0},  # overlaps a
            {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 0.0, "dur": 100.0},
            {"ph": "X", "cat": "kernel", "name": "c", "ts": 25.0, "dur": 5.0},
        ]
    }
    recs = records_from_chrome_trace(tr)
    assert [r.name for r in recs] == ["a", "b", "c"]
    f = by_name(launch_gaps(recs))["launch_gap_fraction"]
    assert f.value == pytest.approx(10 / 30)


# -- all together, and as metrics ------------------------------------------------------------------


def test_analyze_timeline_and_metrics():
    tl = grid_timeline([100_000] * 133, num_sms=132, warps=2)
    fs = analyze_timeline(tl, launch=LaunchConfig(grid=133, num_warps=8, registers=128, shared_bytes=196608))
    names = {f.name for f in fs if f.flagged}
    assert {"sm_utilization", "sm_finish_skew", "wave_tail", "wave_idle", "wave_tail_idle_measured"} <= names
    assert "prologue_fraction" not in names
    ms = to_metrics(fs)
    m = {x.name: x for x in ms}
    assert m["analysis.sm_utilization"].kind == "analysis" and m["analysis.sm_utilization"].better == "higher"
    assert m["analysis.wave_idle"].better == "lower"
    assert all(x.name.startswith("analysis.") for x in ms)
    # without launch numbers, waves are sized from what the timeline shows
    fs2 = by_name(analyze_timeline(grid_timeline([100_000] * 133, num_sms=132)))
    assert fs2["ctas_per_sm"].details["limits"] == {"given": 1} and fs2["wave_idle"].flagged
    control = analyze_timeline(grid_timeline([100_000] * 132, num_sms=132))
    assert not [f.name for f in control if f.flagged]
    assert analyze_timeline(Timeline.from_records([])) == []


def test_threshold_overrides():
    tl = grid_timeline([10_000] * 8, num_sms=132, prologue=0.15)
    assert not by_name(analyze_timeline(tl))["prologue_fraction"].flagged
    assert by_name(analyze_timeline(tl, thresholds={"prologue_fraction": 0.1}))["prologue_fraction"].flagged


def test_analysis_metrics_from_a_timeline_or_region_result():
    from types import SimpleNamespace

    from kperf_ci.analysis import analysis_metrics

    tl = grid_timeline([100_000] * 133, num_sms=132)
    ms = {m.name: m for m in analysis_metrics(tl)}
    assert ms["analysis.wave_idle"].value == pytest.approx(1 - 133 / 264)
    rr = SimpleNamespace(timeline=tl)
    assert [m.name for m in analysis_metrics(rr)] == list(ms)
    # the grid from the capture stage counts CTAs that recorded nothing
    tl.meta["grid"] = [264, 1, 1]
    assert {m.name: m for m in analysis_metrics(tl)}["analysis.waves"].value == pytest.approx(2.0)


def test_overlap_region_kinds_override_the_names():
    tl = pipelined_timeline(stages=1)
    tl.region = np.array(["wait0" if r == "tma_wait" else r for r in tl.region], dtype=object)
    plain = by_name(overlap(tl))
    assert plain["memory_compute_overlap"].explanation == "no memory-wait regions to overlap"
    told = by_name(overlap(tl, region_kinds={"wait0": "memory_wait"}))
    assert told["memory_exposed_fraction"].value == pytest.approx(800 / 1200, rel=0.01)


def test_subset_timelines_get_only_per_cta_analyses():
    tl = grid_timeline([100_000] * 2, num_sms=132)
    tl.meta["subset"] = "2 CTAs"
    names = {f.name for f in analyze_timeline(tl)}
    assert "prologue_fraction" in names and "sm_utilization" not in names and "wave_idle" not in names


def test_findings_that_cost_under_the_floor_are_reported_not_flagged():
    # 16 CTAs of 0.5 us on 132 SMs: SMs idle 88% of a 0.5 us launch, which costs 0.44 us
    tiny = grid_timeline([500] * 16, num_sms=132)
    fs = by_name(analyze_timeline(tiny))
    assert fs["sm_utilization"].value < 0.2 and not fs["sm_utilization"].flagged
    assert "under the 1.00 us floor" in fs["sm_utilization"].explanation
    assert fs["sm_utilization"].suggestion == ""
    assert not flagged(list(fs.values()))
    loud = by_name(analyze_timeline(tiny, thresholds={"min_cost_ns": 0}))
    assert loud["sm_utilization"].flagged and "floor" not in loud["sm_utilization"].explanation
    # the same shape 10x longer costs 4.4 us: flagged
    assert by_name(analyze_timeline(grid_timeline([5_000] * 16, num_sms=132)))["sm_utilization"].flagged
