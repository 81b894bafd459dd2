"""The static verdict of `kperf ab` (kperf_ci/judge/static_verdict.py) and the occupancy it rests
on, against numbers worked by hand (sm_80, sm_86, sm_89, sm_90) from CUDA's occupancy rules
(cuda_occupancy.h: registers allocated per warp in units of 256 within each of 4 sub-partitions
of the 64K register file; shared memory per CTA plus 1 KB reserved, in units of 128 bytes; warps
and CTAs per SM capped by the arch). `tests/test_pr_check_static_verdict.py` runs the same
verdict on real repositories."""

from __future__ import annotations

import pytest

from kperf_ci.judge.launch_diff import LaunchChange, static_regressions
from kperf_ci.judge.launch_diff import TestDiff as ABTestDiff
from kperf_ci.judge.policy import ThresholdPolicy
from kperf_ci.judge.static_verdict import judge
from kperf_ci.occupancy import occupancy

# (arch, num_warps, registers, shared bytes) -> (CTAs per SM, theoretical occupancy)
HAND = [
    # sm_90: 64 warps, 32 CTAs, 228 KB an SM
    # 64 regs: 2048 a warp, 16384 / 2048 = 8 warps a sub-partition, 32 warps, 8 CTAs of 4
    ("sm_90", 4, 64, None, 8, 0.5),
    # 128 regs: 4096 a warp, 4 a sub-partition, 16 warps, 4 CTAs
    ("sm_90", 4, 128, None, 4, 0.25),
    # 72 regs: 2304 a warp, 7 a sub-partition, 28 warps, 7 CTAs: 28 / 64
    ("sm_90", 4, 72, None, 7, 0.4375),
    # 32 regs: 16 a sub-partition, 64 warps: 16 CTAs, as many as the warp limit allows
    ("sm_90", 4, 32, None, 16, 1.0),
    # one warp a CTA, 61 regs (2048 a warp): 32 warps, but 32 CTAs is the block limit: 50%
    ("sm_90", 1, 61, None, 32, 0.5),
    # 48 KB of shared memory: 49152 + 1024 = 50176 a CTA, 233472 / 50176 = 4 CTAs
    ("sm_90", 4, 32, 49152, 4, 0.25),
    # 114 KB: 117760 a CTA, one fits
    ("sm_90", 4, 32, 116736, 1, 0.0625),
    # sm_80: 64 warps, 32 CTAs, 164 KB an SM; the same register file as sm_90
    ("sm_80", 4, 64, None, 8, 0.5),
    # 48 KB: 167936 / 50176 = 3 CTAs, 12 of 64 warps
    ("sm_80", 4, 32, 49152, 3, 0.1875),
    # 8 warps of 40 regs: 1280 a warp, 12 a sub-partition, 48 warps, 6 CTAs
    ("sm_80", 8, 40, None, 6, 0.75),
    # sm_86: 48 warps an SM: 4 warps of 32 regs fit 16 by registers, 12 by warps
    ("sm_86", 4, 32, None, 12, 1.0),
    # sm_89: 48 warps, 24 CTAs an SM: one warp of 32 regs a CTA stops at 24 CTAs, 24 of 48 warps
    ("sm_89", 1, 32, None, 24, 0.5),
    # sm_89, 100 KB an SM: 32 KB a CTA (33792 with the reserve) fits 3, 12 of 48 warps
    ("sm_89", 4, 32, 32768, 3, 0.25),
]


@pytest.mark.parametrize("arch,warps,regs,smem,ctas,fraction", HAND)
def test_occupancy_matches_the_cuda_rules_worked_by_hand(arch, warps, regs, smem, ctas, fraction):
    occ = occupancy(num_warps=warps, registers=regs, shared_bytes=smem, arch=arch)
    assert occ.ctas_per_sm == ctas
    assert occ.fraction == pytest.approx(fraction)


# --------------------------------------------------------------------------- the verdict


def _code(**metrics: float) -> dict:
    base = {"sass": "a", "registers": 32, "spills": 0, "spill_loads": 0, "shared_bytes": 0,
            "sass.instructions": 100}  # fmt: skip
    return {**base, **metrics}


# a grid of more blocks than any tabulated arch has SMs: the occupancy rules bind
BIG_GRID = [4096]


def _lc(base: dict, head: dict, *, warps: int = 4, gate: dict | None = None, autotune=None, arch="sm_90"):
    b = {"config": f"num_warps={warps}", "code": {arch: base}, "args": {"n": "4096"}, "grid": BIG_GRID}
    h = {
        "config": f"num_warps={warps}",
        "code": {arch: {**head, "sass": "b"}},
        "args": {"n": "4096"},
        "grid": BIG_GRID,
        "gate": gate or {},
        "autotune": autotune,
    }
    return LaunchChange("k", "k.py::k", "changed", ["sm_90 SASS changed"], b, h)


def _regs(*lcs: LaunchChange, policy: ThresholdPolicy | None = None, timed=None) -> list[dict]:
    return static_regressions(
        [ABTestDiff("t.py::t", "changed", list(lcs))], policy or ThresholdPolicy(), timed=timed
    )


def test_an_instruction_count_alone_is_changed_not_a_regression():
    lc = _lc(_code(), _code(**{"sass.instructions": 115}))  # the issue's +15%
    assert _regs(lc) == []
    verdict = judge([ABTestDiff("t.py::t", "changed", [lc])], ThresholdPolicy())
    (moved,) = verdict.changed
    assert moved["reason"] == "SASS instructions 100 -> 115 (+15.0%)"


def test_registers_fail_only_when_they_lower_the_occupancy():
    # the issue's +54.5% (22 -> 34) at one warp a CTA: 32 CTAs (the block limit) either way
    assert _regs(_lc(_code(registers=22), _code(registers=34), warps=1)) == []
    # the same registers at 4 warps: 16 CTAs -> 12 (34 regs: 1280 a warp, 12 a sub-partition)
    (reg,) = _regs(_lc(_code(registers=22), _code(registers=34)))
    assert reg["reason"] == "theoretical occupancy 100% -> 75% (registers 22 -> 34)"
    (reg,) = _regs(_lc(_code(registers=64), _code(registers=128)))
    assert reg["reason"] == "theoretical occupancy 50% -> 25% (registers 64 -> 128)"


def test_shared_memory_is_judged_by_occupancy_and_its_limit():
    # 16 KB -> 32 KB at 4 warps of 32 registers: 233472 / 17408 = 13 CTAs an SM on sm_90 (52 of
    # 64 warps), 233472 / 33792 = 6 (24 warps)
    (reg,) = _regs(_lc(_code(shared_bytes=16384), _code(shared_bytes=32768)))
    assert reg["reason"] == "theoretical occupancy 81.2% -> 37.5% (shared memory 16,384 B -> 32,768 B)"
    # 1 KB -> 2 KB: 16 CTAs either way (the warp limit)
    assert _regs(_lc(_code(shared_bytes=1024), _code(shared_bytes=2048))) == []
    (reg,) = _regs(_lc(_code(shared_bytes=1024), _code(shared_bytes=240000)))
    assert reg["reason"] == "shared memory 240,000 B above the sm_90 limit of 232,448 B"


def test_spills_still_fail():
    (reg,) = _regs(_lc(_code(), _code(spills=16, **{"sass.instructions": 140})))
    assert reg["reason"] == "spills +16 B > 0 B allowed (default)"


def _verdict(*lcs: LaunchChange, policy: ThresholdPolicy | None = None):
    return judge([ABTestDiff("t.py::t", "changed", list(lcs))], policy or ThresholdPolicy())


def test_fewer_spills_and_a_higher_occupancy_read_improved():
    """The static gate's words are regressed / improved / changed: a change that gets better is
    improved, never merely changed (and never a regression)."""
    # fewer spills (with more instructions beside them: still improved, the rest is said too)
    v = _verdict(_lc(_code(spills=184), _code(spills=0, **{"sass.instructions": 120})))
    (x,) = v.improved
    assert v.regressions == [] and v.changed == []
    assert x["reason"] == "spills 184 B -> 0 B, SASS instructions 100 -> 120 (+20.0%)"
    # fewer registers that raise the occupancy: 128 -> 64 at 4 warps is 25% -> 50%
    (x,) = _verdict(_lc(_code(registers=128), _code(registers=64))).improved
    assert x["reason"] == "theoretical occupancy 25% -> 50% (registers 128 -> 64)"
    # fewer registers that leave it as it was (16 CTAs of 4 warps either way) are changed
    v = _verdict(_lc(_code(registers=32), _code(registers=24)))
    assert v.improved == [] and [c["reason"] for c in v.changed] == ["registers 32 -> 24"]
    # a regression beside an improvement is a regression, listed once
    v = _verdict(_lc(_code(spills=184), _code(spills=0, registers=128)))
    assert len(v.regressions) == 1 and v.improved == [] and v.changed == []


def test_an_arch_without_per_sm_limits_shows_registers_as_changed():
    lc = _lc(_code(registers=32), _code(registers=128), arch="sm_120")
    assert _regs(lc) == []
    (moved,) = judge([ABTestDiff("t.py::t", "changed", [lc])], ThresholdPolicy()).changed
    assert moved["reason"] == "registers 32 -> 128 (occupancy unknown on sm_120)"


def test_occupancy_lost_to_num_warps_alone_is_no_register_regression():
    # 8 -> 16 warps a CTA, 32 -> 36 registers: 8 CTAs (64 warps) -> 3 (48 warps); the base's 32
    # registers at 16 warps would fit 4 CTAs (64 warps): the registers lost the 16 warps
    b = {"config": "num_warps=8", "code": {"sm_90": _code(registers=32)}}
    h = {"config": "num_warps=16", "code": {"sm_90": _code(registers=36, sass="b")}}
    (reg,) = _regs(LaunchChange("k", "k.py::k", "changed", [], b, h))
    assert reg["reason"] == "theoretical occupancy 100% -> 75% (registers 32 -> 36)"
    # 4 -> 32 warps, 33 -> 40 registers (1280 a warp either way): 12 CTAs (48 warps) -> 1 (32
    # warps); the base's registers at 32 warps fit 1 CTA too: num_warps lost it, not registers
    b = {"config": "num_warps=4", "code": {"sm_90": _code(registers=33)}}
    h = {"config": "num_warps=32", "code": {"sm_90": _code(registers=40, sass="b")}}
    lc = LaunchChange("k", "k.py::k", "changed", [], b, h)
    assert _regs(lc) == []
    (moved,) = judge([ABTestDiff("t.py::t", "changed", [lc])], ThresholdPolicy()).changed
    assert moved["reason"] == "registers 33 -> 40 (occupancy 75% -> 50%: not lowered by registers)"


def test_an_occupancy_drop_on_a_grid_that_does_not_fill_the_gpu_is_judged_and_says_so():
    """Issue 36's third walk: layernorm at num_warps 4 -> 1 on a 37x1x1 grid read "regressed:
    theoretical occupancy 75% -> 25%", as if the test's own launch were occupancy-bound, where
    37 blocks on sm_90's 132 SMs put at most one on an SM. A static pass runs the tests' small
    shapes: the verdict stands for what the change does at production sizes, and the reason says
    the test's grid does not fill the GPU."""

    def pair(grid: list[int]) -> LaunchChange:
        b = {"config": "num_warps=4", "code": {"sm_90": _code(registers=40)}, "grid": grid}
        h = {"config": "num_warps=1", "code": {"sm_90": _code(registers=128, sass="b")}, "grid": grid}
        return LaunchChange("k", "k.py::k", "changed", [], b, h)

    chain = (
        "theoretical occupancy 75% -> 50% (num_warps 4 -> 1: at most 32 blocks per SM) -> 25% "
        "(registers 40 -> 128)"
    )
    (reg,) = _verdict(pair([37, 1, 1])).regressions
    assert (
        reg["reason"] == f"{chain}, judged for a grid that fills the GPU "
        "(this test's 37 blocks put at most one on each of its 132 SMs)"
    )
    (reg,) = _verdict(pair([132])).regressions
    assert reg["reason"].endswith("(this test's 132 blocks put at most one on each of its 132 SMs)")
    (reg,) = _verdict(pair([1])).regressions  # one block, said as one (attorch's 1x768 softmax)
    assert reg["reason"].endswith("(this test's 1 block put at most one on each of its 132 SMs)")
    (reg,) = _verdict(pair([133])).regressions
    assert reg["reason"] == chain  # a second block shares an SM: nothing to add
    b = {"config": "num_warps=4", "code": {"sm_90": _code(registers=128)}, "grid": [8]}
    h = {"config": "num_warps=4", "code": {"sm_90": _code(registers=64, sass="b")}, "grid": [8]}
    v = _verdict(LaunchChange("k", "k.py::k", "changed", [], b, h))
    assert [c["reason"] for c in v.improved] == [
        "theoretical occupancy 25% -> 50% (registers 128 -> 64), judged for a grid that fills the GPU "
        "(this test's 8 blocks put at most one on each of its 132 SMs)"
    ]


@pytest.mark.parametrize(
    "policy,gate",
    [
        (ThresholdPolicy(thresholds={"registers": 0.1}), {}),  # [tool.kperf.thresholds]
        (ThresholdPolicy(), {"registers": 0.1}),  # a marker's thresholds=
        (ThresholdPolicy(), {"metrics": ["registers"]}),  # a marker's metrics=, default +10%
    ],
)
def test_a_register_threshold_the_user_names_gates_as_configured(policy, gate):
    lc = _lc(_code(registers=22), _code(registers=34), warps=1, gate=gate)  # occupancy kept
    (reg,) = _regs(lc, policy=policy)
    assert reg["reason"].startswith("registers +54.5% > +10% ("), reg
    assert _regs(_lc(_code(registers=22), _code(registers=34), warps=1)) == []  # unnamed: no


def test_a_named_instruction_count_gates_and_other_metrics_of_the_marker_do_not():
    head = _code(registers=64, **{"sass.instructions": 115})
    (reg,) = _regs(_lc(_code(registers=32), head, gate={"metrics": ["sass"]}))
    # the marker gates sass only: the occupancy lost to registers is not its business
    assert reg["reason"] == "SASS instructions +15.0% > +5% (default)"
    (reg,) = _regs(
        _lc(_code(), _code(**{"sass.instructions": 115})), policy=ThresholdPolicy({"sass.instructions": 0.1})
    )
    assert reg["reason"] == "SASS instructions +15.0% > +10% ([tool.kperf.thresholds])"
    assert _regs(_lc(_code(), _code(**{"sass.instructions": 115}))) == []  # the same, unnamed


def test_a_timed_launch_fails_on_static_metrics_only_when_named():
    lc = _lc(_code(registers=64), _code(registers=128, spills=8))
    assert _regs(lc, timed={("t.py::t", "k")}) == []
    lc = _lc(_code(registers=64), _code(registers=128), gate={"registers": 0.5})
    (reg,) = _regs(lc, timed={("t.py::t", "k")})
    assert reg["reason"] == "registers +100.0% > +50% (marker)"
    # the same launch untimed: its registers fail by the occupancy they lose
    (reg,) = _regs(_lc(_code(registers=64), _code(registers=128)), timed=set())
    assert reg["reason"] == "theoretical occupancy 50% -> 25% (registers 64 -> 128)"


def test_autotune_configs_of_one_call_collapse_to_the_worst():
    def config(block: int, regs: int, info: dict, n: str = "4096") -> LaunchChange:
        lc = _lc(_code(registers=32), _code(registers=regs), autotune=info)
        lc.head["args"] = {"n": n, "BLOCK": str(block)}
        return lc

    # as the static pass records them: each config kept ({"index": i, "count": 3}), then the one
    # the autotuner chose; then a second call of the kernel at another size
    first = [
        config(256, 40, {"index": 0, "count": 3}),
        config(512, 128, {"index": 1, "count": 3}),
        config(1024, 64, {"index": 2, "count": 3}),
        config(256, 40, {"count": 3, "chosen": True}),
    ]
    second = [config(256 << i, 40, {"index": i, "count": 3}, n="8192") for i in range(3)]
    regs = _regs(*first, *second)
    assert len(regs) == 2, regs
    worst, other = regs
    assert worst["reason"] == "theoretical occupancy 100% -> 25% (registers 32 -> 128)"
    assert worst["args"]["BLOCK"] == "512" and worst["autotune"] == {"configs": 3, "regressed": 3}
    # all three alike (75%): the first is named
    assert other["args"] == {"n": "8192", "BLOCK": "256"} and other["autotune"] == {
        "configs": 3,
        "regressed": 3,
    }


def test_odd_values_in_a_manifest_do_not_raise():
    for head in (
        _code(registers=300),
        _code(registers=-1),
        _code(registers=float("nan")),
        _code(registers=True),
    ):
        lc = _lc(_code(), head)
        _regs(lc)
    b = {"config": "num_warps=abc", "code": {"sm_90": _code()}}
    h = {"config": "num_warps=abc", "code": {"sm_90": _code(registers=128, sass="b")}}
    assert _regs(LaunchChange("k", "k.py::k", "changed", [], b, h)) == []
    b = {"config": "", "code": {"sm_90": "oops"}}
    assert _regs(LaunchChange("k", "k.py::k", "changed", [], b, h)) == []


def test_a_changed_call_no_metric_moved_is_listed_as_changed_with_its_own_cause():
    """Walk 2 of issue 38, finding 11: attorch's dropped autotune config left the configs compiled
    on both sides alike, so no static metric moved and, untimed, the call had no kernel row."""
    cause = "autotune configs: num_warps=32 dropped, 5 unchanged"
    lc = _lc(_code(), _code())
    lc.changes = [cause]
    (moved,) = _verdict(lc).changed
    assert moved["reason"] == cause and moved["kernel"] == "k" and moved["site"] == "k.py::k"
    assert moved["arch"] == "sm_90" and moved["test"] == "t.py::t"
    # timed on a GPU, its time is its row: not listed again
    assert (
        judge([ABTestDiff("t.py::t", "changed", [lc])], ThresholdPolicy(), timed={("t.py::t", "k")}).changed
        == []
    )
    # a metric that moved is the cause, as before; the launch's own change is not added
    lc = _lc(_code(), _code(**{"sass.instructions": 115}))
    lc.changes = [cause]
    (moved,) = _verdict(lc).changed
    assert moved["reason"] == "SASS instructions 100 -> 115 (+15.0%)"


def test_a_cause_names_an_option_change_once():
    """Issue 38's third walk: the new 'changed' row of a dropped autotune config read its cause
    twice, the launch's change and the same change as the reason."""
    from kperf_ci.report.ab_words import options_first

    dropped = "autotune configs: num_warps=32 dropped, 5 unchanged"
    assert options_first([dropped], [dropped]) == [dropped]
    assert options_first([dropped], [f"{dropped}; grid 1 -> 2"]) == [dropped, "grid 1 -> 2"]
    # nothing named twice: the reasons as they were, each one element
    assert options_first(["num_warps 4 -> 1"], ["a; b", "c"]) == ["num_warps 4 -> 1", "a; b", "c"]


def test_a_changed_autotune_set_is_one_entry_of_no_named_config():
    """Walk 3 of issue 38, J2-4 and J2-5: attorch's dropped config read "num_warps=1, num_stages=3
    (worst of 5 autotune configs, 1 changed)" beside "5 unchanged", and its kernel row "8 of 8
    changed launches changed"."""
    from kperf_ci.judge.group import static_launch_text
    from kperf_ci.report.ab_static_view import _count

    cause = "autotune configs: num_warps=32 dropped, 5 unchanged"
    calls = []
    for i in range(5):  # five configs compiled alike on both sides, one call
        lc = _lc(_code(), _code(), autotune={"index": i, "count": 5})
        lc.head["code"]["sm_90"]["sass"] = "a"
        lc.changes = [cause]
        calls.append(lc)
    (moved,) = _verdict(*calls).changed
    assert moved["reason"] == cause and moved["config"] == "" and "autotune" not in moved
    text = static_launch_text(moved, "changed")
    assert "worst of" not in text and "num_warps" not in text and text == "n=4096; grid 4096"
    # a call of one config keeps its options
    (one,) = _verdict(calls[0]).changed
    assert one["config"] == "num_warps=4"
    assert _count(8, 8, "changed") == "8 changed launches"
    assert _count(1, 3, "changed") == "1 changed launch of 3"
    assert _count(2, 3, "regress") == "2 of 3 changed launches regress"
