"""Re-warm after idle gaps (capture/timing/steps.py), on the CPU with a fake device that runs cold
after a pause."""

from __future__ import annotations

import statistics

import pytest
from test_timing import FakeDevice  # noqa: E402  (tests/ is on sys.path under pytest)

from kperf_ci.capture.timing.engine import (
    TimingConfig,
    Variant,
    rewarm_calls,
    time_callable,
    time_interleaved,
)


class ColdAfterIdle(FakeDevice):
    """The first calls after every sleep run slow: 2x, then 1.2x, then 1.05x (the pattern seen
    per round on an H100 under pacing: clock dropped while idle, then ramps)."""

    PENALTY = (2.0, 1.2, 1.05)

    def __init__(self, **kw):
        super().__init__(**kw)
        self.since_idle = 0

    def sleep(self, seconds):
        super().sleep(seconds)
        self.since_idle = 0

    def kernel(self, name, dur):
        def run(*args):
            self.log.append(name)
            k = self.since_idle
            self.since_idle += 1
            f = self.PENALTY[k] if k < len(self.PENALTY) else 1.0
            self.t += dur * f

        return run


def test_cold_first_calls_are_discarded_and_recorded():
    dev = ColdAfterIdle()
    cfg = TimingConfig(use_graph=False, rewarm_ms=3.0, rewarm_min_calls=1)
    r = time_callable(dev.kernel("k", 1.0), cfg, backend=dev)
    assert all(s == pytest.approx(1.0) for s in r.samples_ms)
    assert r.cv == pytest.approx(0.0) and r.median == pytest.approx(1.0)
    # every round started with 3 re-warm calls, the slow ones among them, kept apart
    rounds = r.n // cfg.round_samples
    assert len(r.discarded_ms) == 3 * rounds
    assert r.discarded_ms[:3] == pytest.approx([2.0, 1.2, 1.05])
    assert "re-warm" in r.discard_reason


def test_without_rewarm_the_cold_calls_land_in_the_samples():
    dev = ColdAfterIdle()
    cfg = TimingConfig(use_graph=False, rewarm_ms=0.0, rewarm_min_calls=0)
    r = time_callable(dev.kernel("k", 1.0), cfg, backend=dev)
    assert r.discarded_ms == [] and r.discard_reason == ""
    firsts = r.samples_ms[:: cfg.round_samples]
    assert statistics.median(firsts) == pytest.approx(2.0)
    assert r.cv > 0.2  # the outliers the H100 run showed (per-variant cv 0.1-1.1)


def test_interleaved_variants_each_rewarm_after_the_others_pause():
    dev = ColdAfterIdle()
    cfg = TimingConfig(use_graph=False, rewarm_ms=6.0)  # 6 calls of A, 3 of B (by warm median)
    res = time_interleaved({"A": dev.kernel("A", 1.0), "B": dev.kernel("B", 2.0)}, cfg, backend=dev)
    assert all(s == pytest.approx(1.0) for s in res["A"].samples_ms)
    assert all(s == pytest.approx(2.0) for s in res["B"].samples_ms)
    assert res["B"].discarded_ms[:3] == pytest.approx([4.0, 2.4, 2.1])


def test_rewarm_call_count():
    v = Variant("k", lambda: None)
    cfg = TimingConfig(rewarm_ms=1.0, rewarm_min_calls=1, round_samples=10)
    v.warm_median = 0.19
    assert rewarm_calls(v, cfg) == 6  # ceil(1.0 / 0.19)
    v.warm_median = 5.0
    assert rewarm_calls(v, cfg) == 1  # at least rewarm_min_calls
    v.warm_median = 0.001
    assert rewarm_calls(v, cfg) == 10  # at most a round
    assert rewarm_calls(v, TimingConfig(rewarm_ms=0.0, rewarm_min_calls=0)) == 0
