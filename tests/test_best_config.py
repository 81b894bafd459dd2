"""Best against best (issue 34): a changed autotuned call is compared on what each side can
achieve, every config that survives each side's own pruning timed under one measurement, never
on which config each run's autotuner happened to pick.

The device is faked at its boundary: a clock (the timing backend) that charges each launch a
device time set by the launched config, and a kernel object under a real ``triton`` Autotuner
whose launches are logged. Everything between (the config enumeration through the autotuner's
own ``prune_configs``, the two passes, the A/B itself) is kperf-ci's real code.
"""

from __future__ import annotations

import pytest

pytest.importorskip("triton")

from triton import Config  # noqa: E402
from triton.runtime.autotuner import Autotuner  # noqa: E402

from kperf_ci.capture.launches.best_config import Side, candidates  # noqa: E402
from kperf_ci.capture.timing.best_of import best_pair as _best_pair  # noqa: E402
from kperf_ci.capture.timing.interleaved import adaptive_ab  # noqa: E402
from kperf_ci.config import ABPolicy, Settings  # noqa: E402
from kperf_ci.judge.ab import stop_rule  # noqa: E402

LAUNCHED: list[tuple[str, int]] = []
RULE = stop_rule(ABPolicy(ab_threshold=0.005, ab_floor_ms=0.0001, ab_precision=Settings.ab_precision))


def best_pair(base: Side, head: Side, **kw):
    """measure_replay's join: each side's candidates, then the search."""
    return _best_pair(
        candidates(base)[0], candidates(head)[0], **kw
    )  # (side, num_warps) of every launch, in order


def _kernel(x_ptr, n, BLOCK):  # the function under the decorators (never run)
    pass


class FakeJit:
    """The innermost kernel object: launching it logs which side and config ran."""

    arg_names = ["x_ptr", "n", "BLOCK"]
    fn = staticmethod(_kernel)

    def __init__(self, side: str):
        self.side = side

    def run(self, *args, grid, warmup, **kwargs):
        LAUNCHED.append((self.side, kwargs["num_warps"]))


class Clock:
    """The device: each launch takes the time its side's table gives its num_warps."""

    def __init__(self, us: dict[str, dict[int, float]]):
        self.us, self.host = us, 0.0

    def marker(self):
        self.host += 0.001
        return len(LAUNCHED)

    def elapsed_ms(self, a, b):
        return sum(self.us[s][w] / 1000 for s, w in LAUNCHED[a:b])

    def synchronize(self): ...
    def flush(self): ...
    def l2_bytes(self):
        return 50 << 20

    def capture_graph(self, call):
        return call

    def state(self):
        return {}

    def host_time(self):
        return self.host

    def sleep(self, s):
        self.host += s


def _side(side: str, warps: list[int], prune=None) -> Side:
    configs = [Config({"BLOCK": 128}, num_warps=w) for w in warps]
    tuner = Autotuner(FakeJit(side), FakeJit.arg_names, configs, ["n"], None, None,
                      prune_configs_by={"early_config_prune": prune} if prune else None)  # fmt: skip
    return Side(tuner, ["x", 1000], {}, (8, 1, 1))


def test_each_sides_fastest_config_is_compared_not_the_picks():
    LAUNCHED.clear()
    # base: 2 warps is its fastest (8 us); the PR cut that config, so the head's best is 4 (9 us)
    us = {"base": {1: 10.0, 2: 8.0, 4: 9.0, 8: 12.0}, "head": {1: 10.0, 4: 9.0, 8: 12.0}}
    clock = Clock(us)
    pair = best_pair(
        _side("base", [1, 2, 4, 8]), _side("head", [1, 4, 8]), backend=clock, clock=clock.host_time
    )
    assert pair is not None
    assert (pair.base_best, pair.head_best) == (
        "BLOCK=128,num_ctas=1,num_stages=3,num_warps=2",
        "BLOCK=128,num_ctas=1,num_stages=3,num_warps=4",
    )
    assert pair.timed == {"base": 4, "head": 3}
    assert pair.doc()["compare"] == "best_of_configs"
    # the document shows each config's ranking time, fastest first: why each side's best won
    ranked = pair.doc()["configs_ranked_us"]
    assert ranked[0][0] == "base BLOCK=128,num_ctas=1,num_stages=3,num_warps=2"
    assert dict(ranked)["head BLOCK=128,num_ctas=1,num_stages=3,num_warps=4"] == pytest.approx(9.0, rel=0.01)
    assert len(ranked) == 7 and [us for _, us in ranked] == sorted(us for _, us in ranked)
    # every surviving config of both sides ran in the search
    assert {x for x in LAUNCHED} >= {("base", w) for w in (1, 2, 4, 8)} | {("head", w) for w in (1, 4, 8)}
    ab = adaptive_ab(pair.base, pair.head, stop_rule=RULE, backend=clock)
    assert ab.verdict == "slower" and ab.ratio == pytest.approx(9 / 8, rel=1e-6)


def test_identical_config_lists_compare_equal_whatever_the_picks():
    LAUNCHED.clear()
    us = {"base": {1: 10.0, 2: 8.0, 4: 9.0}, "head": {1: 10.0, 2: 8.0, 4: 9.0}}
    clock = Clock(us)
    pair = best_pair(_side("base", [1, 2, 4]), _side("head", [4, 2, 1]), backend=clock, clock=clock.host_time)
    assert pair is not None and pair.base_best == pair.head_best
    ab = adaptive_ab(pair.base, pair.head, stop_rule=RULE, backend=clock)
    assert ab.verdict == "unchanged" and ab.ratio == pytest.approx(1.0)


def test_the_autotuners_own_pruning_decides_what_is_timed():
    LAUNCHED.clear()

    def keep_wide(configs, named_args, **kwargs):  # the repository's early_config_prune
        return [c for c in configs if c.num_warps >= 4]

    calls, left_out = candidates(_side("head", [1, 2, 4, 8], prune=keep_wide))
    assert sorted(calls) == [
        "BLOCK=128,num_ctas=1,num_stages=3,num_warps=4",
        "BLOCK=128,num_ctas=1,num_stages=3,num_warps=8",
    ]
    assert left_out == 0


def test_a_side_without_an_autotuner_is_its_own_only_candidate():
    LAUNCHED.clear()
    us = {"base": {4: 9.0}, "head": {1: 10.0, 4: 7.0}}
    clock = Clock(us)
    plain = Side(FakeJit("base"), ["x", 1000, 128], {"num_warps": 4}, (8, 1, 1))
    pair = best_pair(plain, _side("head", [1, 4]), backend=clock, clock=clock.host_time)
    assert pair is not None and pair.base_best == "" and pair.head_best.endswith("num_warps=4")
    # neither side autotuned: nothing to search, the launch is compared as it is
    assert best_pair(plain, plain, backend=clock, clock=clock.host_time) is None


def test_a_config_that_does_not_launch_is_left_out_and_named():
    LAUNCHED.clear()

    class Failing(FakeJit):
        def run(self, *args, grid, warmup, **kwargs):
            if kwargs["num_warps"] == 8:
                raise RuntimeError("OutOfResources: shared memory")
            super().run(*args, grid=grid, warmup=warmup, **kwargs)

    us = {"base": {1: 10.0, 8: 5.0}, "head": {1: 10.0, 8: 5.0}}
    clock = Clock(us)
    base = _side("base", [1, 8])
    base.obj.fn = Failing("base")
    pair = best_pair(base, _side("head", [1, 8]), backend=clock, clock=clock.host_time)
    assert pair is not None and pair.base_best.endswith("num_warps=1")
    assert pair.failed and "base" in pair.failed[0] and "OutOfResources" in pair.failed[0]


def test_a_config_one_sides_first_pass_ranked_low_gets_a_second_look_as_the_other_sides_winner():
    """The first pass is short: a config it ranks low on one side (here the base's 4-warp config,
    slow for its first launches) must not leave the head's same config compared against the
    base's second best. The head's winner is timed again on the base too."""
    LAUNCHED.clear()
    seen: dict[tuple[str, int], int] = {}

    class Cold(Clock):
        def elapsed_ms(self, a, b):
            total = 0.0
            for s, w in LAUNCHED[a:b]:
                n = seen[(s, w)] = seen.get((s, w), 0) + 1
                cold = s == "base" and w == 4 and n <= 20  # the base's 4-warp config starts slow
                total += (12.0 if cold else self.us[s][w]) / 1000
            return total

    us = {"base": {1: 10.0, 4: 8.0, 8: 8.4}, "head": {1: 10.0, 4: 8.0, 8: 8.4}}
    clock = Cold(us)
    pair = best_pair(_side("base", [1, 4, 8]), _side("head", [1, 4, 8]), backend=clock, clock=clock.host_time)
    assert pair is not None and pair.base_best == pair.head_best, (pair.base_best, pair.head_best)
    ab = adaptive_ab(pair.base, pair.head, stop_rule=RULE, backend=clock)
    assert ab.verdict == "unchanged", ab.describe()


def test_a_second_pass_timed_by_another_method_does_not_rank_with_the_first(monkeypatch):
    """CUPTI hands a pass to events (a window without a kernel, lost records): events read the
    launch too, so the two passes' medians are on different clocks and must not be ranked
    together (the second look's alternative is read from the ranking)."""
    from kperf_ci.capture.timing import engine

    LAUNCHED.clear()
    real, passes = engine.time_interleaved, []

    def second_pass_on_events(calls, cfg, **kw):
        out = real(calls, cfg, **kw)
        passes.append(set(calls))
        for r in out.values():
            r.method = "cupti" if len(passes) == 1 else "events"
            r.median += 0.0 if len(passes) == 1 else 0.0025  # the launch, in events only
        return out

    monkeypatch.setattr(engine, "time_interleaved", second_pass_on_events)
    us = {"base": {1: 10.0, 4: 8.0, 8: 8.1}, "head": {1: 10.0, 4: 8.0, 8: 8.1}}
    clock = Clock(us)
    pair = best_pair(_side("base", [1, 4, 8]), _side("head", [1, 4, 8]), backend=clock, clock=clock.host_time)
    assert pair is not None and len(passes) == 2
    assert set(pair.ranked) == passes[1] and len(passes[1]) < len(passes[0])


def test_an_identical_autotuned_launch_is_compared_best_against_best_too():
    """kperf ab --time-all (an A/A) on attorch timed identical autotuned launches pick against
    pick: each process's own tuning noise, 4 false alarms of 56. Identical or changed, an
    autotuned launch is timed best against best; a plain one is not."""
    from kperf_ci.capture.launches.ab_launch import PlanEntry
    from kperf_ci.measure.measure_replay import compares_best_configs

    tuned = {"tuned": True}
    assert compares_best_configs(PlanEntry("t", "k.py::k", "identical", head=tuned, base=tuned))
    assert compares_best_configs(PlanEntry("t", "k.py::k", "changed", head={}, base=tuned))
    assert not compares_best_configs(PlanEntry("t", "k.py::k", "identical", head={}, base={}))


class Lucky(Clock):
    """The search's ranking noise, made certain: while ``searching``, the head's 32-warp config
    reads faster than it is (a short pass's lucky draw, as attorch's rms_norm_backward on an
    H200, where six configs sat within 0.1 us of each other at 1.6 us)."""

    searching = True

    def elapsed_ms(self, a, b):
        lucky = self.searching
        us = [7.0 if lucky and (s, w) == ("head", 32) else self.us[s][w] for s, w in LAUNCHED[a:b]]
        return sum(us) / 1000


def _run_ab(clock):
    return lambda b, h: adaptive_ab(b, h, stop_rule=RULE, backend=clock)


def test_a_loss_read_on_the_searchs_lucky_pick_gets_a_second_look_and_does_not_stand():
    """The arithmetic-only false alarm of attorch on an H200: the search ranked the head's
    num_warps=32 first, the A/B then read it slower than the base's num_warps=4, while the
    head's own num_warps=4 is as fast as the base's. Before a change is called the losing side
    is timed again with the winner's config: the head's best is num_warps=4, unchanged."""
    from kperf_ci.measure.measure_replay import second_look
    from kperf_ci.prcheck.document import best_of_configs_text

    LAUNCHED.clear()
    us = {"base": {4: 8.0, 32: 9.0}, "head": {4: 8.0, 32: 9.0}}
    clock = Lucky(us)
    pair = best_pair(_side("base", [4, 32]), _side("head", [4, 32]), backend=clock, clock=clock.host_time)
    assert pair is not None and pair.head_best.endswith("num_warps=32")
    assert pair.base_best.endswith("num_warps=4")
    clock.searching = False
    ab = adaptive_ab(pair.base, pair.head, stop_rule=RULE, backend=clock)
    assert ab.verdict == "slower"  # what kperf ab said before the second look
    searched = pair.seconds
    pair, ab = second_look(pair, ab, _run_ab(clock), pytest.fail)
    assert ab.verdict == "unchanged" and ab.ratio == pytest.approx(1.0)
    assert pair.head_best.endswith("num_warps=4") and pair.second_look["kept"] == "second"
    assert pair.seconds > searched  # the look not kept is GPU time the search spent
    doc = {**pair.doc(), "base_pick": None, "head_pick": None}
    text = best_of_configs_text(doc)
    assert "the head's num_warps=4 timed again: +0.0% where num_warps=32 read +12.5%" in text, text
    assert text.endswith("so the head's best is num_warps=4"), text


def test_a_loss_on_every_config_stands_after_its_second_look():
    """A real regression is slower on each config of the head: the second look reads it slower
    too and the first A/B stands (the head's config cut of issue 34's first test: the base's
    best config is gone, so the head's next-ranked is timed)."""
    from kperf_ci.measure.measure_replay import second_look

    LAUNCHED.clear()
    us = {"base": {1: 10.0, 2: 8.0, 4: 9.0}, "head": {1: 10.0, 4: 9.0}}
    clock = Clock(us)
    pair = best_pair(_side("base", [1, 2, 4]), _side("head", [1, 4]), backend=clock, clock=clock.host_time)
    ab = adaptive_ab(pair.base, pair.head, stop_rule=RULE, backend=clock)
    pair, ab = second_look(pair, ab, _run_ab(clock), pytest.fail)
    assert ab.verdict == "slower" and ab.ratio == pytest.approx(9 / 8, rel=1e-6)
    assert pair.second_look["config"].endswith("num_warps=1") and pair.second_look["kept"] == "first"
    assert pair.head_best.endswith("num_warps=4")


def test_an_unchanged_verdict_takes_no_second_look():
    from kperf_ci.measure.measure_replay import second_look

    LAUNCHED.clear()
    us = {"base": {1: 10.0, 4: 8.0}, "head": {1: 10.0, 4: 8.0}}
    clock = Clock(us)
    pair = best_pair(_side("base", [1, 4]), _side("head", [1, 4]), backend=clock, clock=clock.host_time)
    ab = adaptive_ab(pair.base, pair.head, stop_rule=RULE, backend=clock)
    seen = []
    same, ab2 = second_look(pair, ab, lambda b, h: seen.append(1), pytest.fail)
    assert ab2 is ab and same is pair and not seen and "second_look" not in pair.doc()


def test_a_second_look_config_that_cannot_be_captured_again_keeps_the_searchs_and_says_so():
    """After the head's second look stood, its config's kernel is captured again for the static
    metrics; a capture that fails keeps the search pick's kernel with one warning, and the timed
    launch stands (it raised out of the timing pass before)."""
    from types import SimpleNamespace

    from kperf_ci.measure.measure_replay import capture_again

    old = [SimpleNamespace(name="k")]
    new = [SimpleNamespace(name="other"), SimpleNamespace(name="k")]
    warned: list[str] = []
    device = SimpleNamespace(capture=lambda fn: fn())
    assert capture_again(device, lambda: new, "k", old, warned.append) == new[1:] and not warned

    def broken():
        raise RuntimeError("out of resources")

    assert capture_again(device, broken, "k", old, warned.append) is old
    assert warned == [
        "the second look's config could not be captured again (RuntimeError: out of resources); "
        "its static metrics are those of the search's pick"
    ]


def test_a_second_look_that_fails_leaves_the_first_ab_standing_and_says_so():
    """The look's A/B raising (a CUDA error on the other config) threw away the first A/B and,
    out of the timing pass, the test's other timed launches with it."""
    from kperf_ci.measure.measure_replay import second_look

    LAUNCHED.clear()
    clock = Lucky({"base": {4: 8.0, 32: 9.0}, "head": {4: 8.0, 32: 9.0}})
    pair = best_pair(_side("base", [4, 32]), _side("head", [4, 32]), backend=clock, clock=clock.host_time)
    clock.searching = False
    ab = adaptive_ab(pair.base, pair.head, stop_rule=RULE, backend=clock)
    assert ab.verdict == "slower"

    def broken(b, h):
        raise RuntimeError("CUDA error: out of memory")

    warned: list[str] = []
    same, ab2 = second_look(pair, ab, broken, warned.append)
    assert same is pair and ab2 is ab and "second_look" not in pair.doc()
    (line,) = warned
    assert line.startswith("the second look (head ") and line.endswith(
        "failed (RuntimeError: CUDA error: out of memory); the first A/B stands"
    ), line
