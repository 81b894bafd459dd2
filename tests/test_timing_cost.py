"""kperf's own cost per timed variant (capture/timing*.py), on the fake device of test_timing:
pacing by the device's busy share, a short warm-up once the device is warm, warm-up batches
sized by device time, several calls per marker pair without a flush, and a sample cap for short
kernels whose CI cannot get narrow enough. Each keeps the result the old loop gave."""

from __future__ import annotations

import random

import pytest
from test_timing import FakeDevice  # noqa: E402  (tests/ is on sys.path under pytest)

from kperf_ci.capture.timing.engine import TimingConfig, time_callable


class CountingDevice(FakeDevice):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.markers = 0

    def marker(self):
        self.markers += 1
        return super().marker()


def test_a_host_bound_short_kernel_is_not_paced():
    # 10 us of device work per call (flush included) against 200 us of host time to issue it:
    # the device idles 95% of the window already
    dev = FakeDevice(flush_ms=0.001, host_per_op_s=1e-4)
    r = time_callable(dev.kernel("k", 0.01), TimingConfig(use_graph=False), backend=dev)
    assert dev.slept == 0.0 and r.median == pytest.approx(0.01)
    # a device-bound one still is (test_timing: idle as long as busy)
    dev = FakeDevice(host_per_op_s=1e-3)
    time_callable(dev.kernel("k", 1.0), TimingConfig(use_graph=False), backend=dev)
    assert dev.slept == pytest.approx(dev.host / 2, rel=0.05)


def test_a_second_variant_on_a_warm_device_warms_briefly_and_still_settles():
    dev = FakeDevice(host_per_op_s=1e-3)
    cfg = TimingConfig(use_graph=False)
    first = time_callable(dev.kernel("a", 1.0), cfg, backend=dev)
    t = dev.host
    second = time_callable(dev.kernel("b", 1.0), cfg, backend=dev)
    assert first.warmup_converged and second.warmup_converged
    assert second.warmup_calls < first.warmup_calls / 2
    assert second.median == first.median == pytest.approx(1.0)
    assert dev.host - t < t  # the second variant cost less host time
    dev.sleep(cfg.warm_reuse_s + 1)  # idle for long: a full warm-up again
    third = time_callable(dev.kernel("c", 1.0), cfg, backend=dev)
    assert third.warmup_calls == first.warmup_calls


def test_short_noisy_kernel_settles_with_batches_sized_by_device_time():
    rng = random.Random(4)
    dev = FakeDevice(flush_ms=0.04, host_per_op_s=2e-5)
    cfg = TimingConfig()
    r = time_callable(dev.kernel("k", lambda: 0.005 * (1 + rng.gauss(0, 0.03))), cfg, backend=dev)
    assert r.method == "graph" and dev.captured == 1
    assert r.warmup_converged, r.warnings
    assert r.median == pytest.approx(0.005, rel=0.01)


def test_without_flush_short_calls_share_a_marker_pair():
    cfg = TimingConfig(flush_l2=False, use_graph=False)
    dev = CountingDevice(host_per_op_s=1e-5)
    r = time_callable(dev.kernel("k", 0.005), cfg, backend=dev)
    assert r.median == pytest.approx(0.005) and r.ci_low == pytest.approx(r.ci_high)
    # each sample (and re-warm sample) of the measured part: one pair of markers, 20 calls;
    # re-warm: 10 calls per round (1 ms by the warm median, at most a round), now one sample
    # of 20 calls: never less re-warm than before
    measured_calls = len(dev.log) - r.warmup_calls
    assert measured_calls == 20 * (r.n + len(r.discarded_ms))
    assert len(r.discarded_ms) * TimingConfig().round_samples == r.n
    # with the flush, each call keeps its own pair (a batch would time a warm L2)
    dev = CountingDevice(host_per_op_s=1e-5)
    r = time_callable(dev.kernel("k", 0.005), TimingConfig(use_graph=False), backend=dev)
    assert len(dev.log) - r.warmup_calls == r.n + len(r.discarded_ms)


def test_short_kernel_whose_ci_cannot_narrow_stops_early_and_says_so():
    rng = random.Random(5)
    dev = FakeDevice(flush_ms=0.04, host_per_op_s=2e-5)
    cfg = TimingConfig()
    r = time_callable(dev.kernel("k", lambda: 0.005 * rng.uniform(0.5, 1.5)), cfg, backend=dev)
    assert r.stopped_by == "futile" and r.n < cfg.max_samples
    # as soon as the time floor allowed, far from the budget
    assert cfg.min_time_s <= r.elapsed_s < cfg.min_time_s * 1.1
    assert any("stopped early" in w for w in r.warnings)
    assert r.ci_low <= 0.005 <= r.ci_high  # the interval is wider, and still honest
    # a long kernel with the same noise keeps its whole budget (test_timing's budget test)
    dev = FakeDevice(host_per_op_s=0.01)
    cfg = TimingConfig(use_graph=False, budget_s=1.0, warmup_budget_s=0.2, duty_cycle=1.0)
    r = time_callable(dev.kernel("k", lambda: rng.uniform(0.5, 1.5)), cfg, backend=dev)
    assert r.stopped_by == "budget"
