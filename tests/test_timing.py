"""Timing loop logic against a fake device clock (CPU only), plus GPU checks marked `gpu`."""

from __future__ import annotations

import math
import random

import pytest
from conftest import needs_gpu

from kperf_ci.capture.timing import cupti, engine
from kperf_ci.capture.timing.engine import TimingConfig, time_callable, time_interleaved
from kperf_ci.config import ENV_TIMING
from kperf_ci.sample_stats import median, median_ci


class FakeDevice:
    """A device whose clock only advances when work runs: calls advance it by their duration.

    Markers are the device time at which they are reached; a flush costs `flush_ms` of device
    time (it must stay outside every sample). Host time advances by `host_per_op_s` per marker.
    """

    def __init__(self, *, flush_ms=5.0, host_per_op_s=1e-4, l2=50 << 20, graph_ok=True, states=None):
        self.t = 0.0
        self.flush_ms = flush_ms
        self.host = 0.0
        self.host_per_op_s = host_per_op_s
        self.l2 = l2
        self.graph_ok = graph_ok
        self.flushes = 0
        self.syncs = 0
        self.log: list[str] = []
        self.states = list(states or [])
        self.captured = 0
        self.slept = 0.0

    # --- DeviceBackend
    def marker(self):
        self.host += self.host_per_op_s
        return self.t

    def elapsed_ms(self, a, b):
        return b - a

    def synchronize(self):
        self.syncs += 1

    def flush(self):
        self.flushes += 1
        self.t += self.flush_ms

    def l2_bytes(self):
        return self.l2

    def capture_graph(self, call):
        if not self.graph_ok:
            raise RuntimeError("operation not permitted when stream is capturing")
        self.captured += 1
        return call

    def state(self):
        if self.states:
            return self.states.pop(0) if len(self.states) > 1 else self.states[0]
        return {"sm_clock_mhz": 1980, "mem_clock_mhz": 2619, "temperature_c": 40}

    def host_time(self):
        return self.host

    def sleep(self, seconds):
        self.slept += seconds
        self.host += seconds

    # --- work
    def kernel(self, name, dur):
        """A callable that runs for dur() ms of device time and logs its name."""

        def run(*args):
            self.log.append(name if not args else f"{name}{args}")
            self.t += dur() if callable(dur) else dur

        return run


def test_median_ci_order_statistics():
    assert median_ci(list(range(1, 101))) == (40, 61)  # textbook ranks for n=100, 95%
    assert median_ci(list(range(1, 21))) == (6, 15)
    assert median_ci([3.0, 1.0, 2.0]) == (1.0, 3.0)  # tiny n: the range
    lo, hi = median_ci([1.0] * 50)
    assert lo == hi == 1.0
    assert all(math.isnan(x) for x in median_ci([]))


def test_ci_narrows_with_n():
    rng = random.Random(0)
    xs = [1.0 + rng.gauss(0, 0.01) for _ in range(2000)]
    w100 = (lambda c: c[1] - c[0])(median_ci(xs[:100]))
    w2000 = (lambda c: c[1] - c[0])(median_ci(xs))
    assert w2000 < w100 / 3


def test_flush_is_outside_the_timed_window_and_samples_are_exact():
    dev = FakeDevice(flush_ms=7.0)
    r = time_callable(dev.kernel("k", 0.25), TimingConfig(use_graph=False), backend=dev)
    assert r.flushed_l2 and dev.flushes > 0
    assert r.samples_ms and all(s == pytest.approx(0.25) for s in r.samples_ms)
    assert r.median == pytest.approx(0.25) and r.ci_low == r.ci_high == pytest.approx(0.25)
    assert r.stopped_by == "ci" and r.n >= TimingConfig().min_samples
    assert r.method == "events" and r.warmup_converged


def test_no_flush_when_inputs_exceed_l2():
    dev = FakeDevice()
    cfg = TimingConfig(input_bytes=10 * dev.l2, use_graph=False)
    r = time_callable(dev.kernel("k", 1.0), cfg, backend=dev)
    assert not r.flushed_l2 and dev.flushes == 0
    cfg = TimingConfig(input_bytes=dev.l2 // 2, use_graph=False)
    small = FakeDevice()
    assert time_callable(small.kernel("k", 1.0), cfg, backend=small).flushed_l2


def test_adaptive_stops_on_ci_and_noisy_runs_take_more_samples():
    rng = random.Random(1)
    quiet, noisy = FakeDevice(), FakeDevice()
    cfg = TimingConfig(use_graph=False, budget_s=100.0, min_time_s=0.0, warmup_min_s=0.0)
    rq = time_callable(quiet.kernel("k", lambda: 1.0 + rng.gauss(0, 0.001)), cfg, backend=quiet)
    rn = time_callable(noisy.kernel("k", lambda: 1.0 + rng.gauss(0, 0.02)), cfg, backend=noisy)
    assert rq.stopped_by == rn.stopped_by == "ci"
    assert rn.n > rq.n
    for r in (rq, rn):
        assert (r.ci_high - r.ci_low) / r.median <= cfg.ci_rel_width
        assert len(r.samples_ms) == r.n  # every sample is kept


def test_time_floor_and_drift_gate():
    # clean samples would satisfy the CI at 20 samples; the floor keeps measuring for min_time_s
    dev = FakeDevice(host_per_op_s=1e-3)
    cfg = TimingConfig(use_graph=False, min_time_s=0.5, rewarm_ms=0.0, rewarm_min_calls=0)
    r = time_callable(dev.kernel("k", 1.0), cfg, backend=dev)
    assert r.stopped_by == "ci" and r.elapsed_s >= 0.5 and r.n >= 240
    # a slow monotone drift: every CI is narrow, but the halves disagree, so it never stops on CI
    dev = FakeDevice(host_per_op_s=1e-3)
    state = {"n": 0}

    def drifting():
        state["n"] += 1
        return 1.0 * (1 + 2e-4 * state["n"])

    cfg = TimingConfig(use_graph=False, min_time_s=0.0, warmup_min_s=0.0, budget_s=1.0, min_samples=100)
    r = time_callable(dev.kernel("k", drifting), cfg, backend=dev)
    assert r.stopped_by == "budget"
    first = r.samples_ms[:100]
    lo, hi = median_ci(first)
    assert (hi - lo) / median(first) < cfg.ci_rel_width  # the CI alone would have stopped here


def test_pacing_keeps_the_device_busy_at_most_duty_cycle():
    dev = FakeDevice(host_per_op_s=1e-3)
    r = time_callable(dev.kernel("k", 1.0), TimingConfig(use_graph=False, duty_cycle=0.5), backend=dev)
    assert dev.slept == pytest.approx(dev.host / 2, rel=0.05)  # idle as long as busy
    assert r.elapsed_s >= TimingConfig().min_time_s  # the floor counts busy time
    dev = FakeDevice(host_per_op_s=1e-3)
    time_callable(dev.kernel("k", 1.0), TimingConfig(use_graph=False, duty_cycle=1.0), backend=dev)
    assert dev.slept == 0


def test_budget_stops_a_hopelessly_noisy_variant_and_says_so():
    rng = random.Random(2)
    dev = FakeDevice(host_per_op_s=0.01)
    cfg = TimingConfig(use_graph=False, budget_s=1.0, warmup_budget_s=0.2, duty_cycle=1.0)
    r = time_callable(dev.kernel("k", lambda: rng.uniform(0.5, 1.5)), cfg, backend=dev)
    assert r.stopped_by == "budget"
    assert any("stopped by budget" in w for w in r.warnings)
    assert r.elapsed_s == pytest.approx(1.0, abs=0.3)


def test_warmup_runs_until_batch_medians_settle():
    # clocks ramping: 1.5 ms cold, decaying towards 1.0 ms; warm-up must outlast the ramp.
    dev = FakeDevice()
    count = {"n": 0}

    def dur():
        count["n"] += 1
        return 1.0 + 0.5 * math.exp(-count["n"] / 15)

    r = time_callable(dev.kernel("k", dur), TimingConfig(use_graph=False), backend=dev)
    assert r.warmup_converged and r.warmup_calls >= 50
    assert r.median == pytest.approx(1.0, rel=0.01)


def test_warmup_that_never_settles_is_a_warning():
    dev = FakeDevice(host_per_op_s=0.01)
    state = {"d": 1.0}

    def dur():
        state["d"] *= 1.002  # keeps creeping: consecutive batches differ by 2%
        return state["d"]

    cfg = TimingConfig(use_graph=False, warmup_budget_s=0.5, budget_s=0.5, duty_cycle=1.0)
    r = time_callable(dev.kernel("k", dur), cfg, backend=dev)
    assert not r.warmup_converged
    assert any("warm-up did not settle" in w for w in r.warnings)
    assert any("drift" in w for w in r.warnings)


def test_short_kernels_use_graphs_and_fall_back_cleanly():
    dev = FakeDevice()
    r = time_callable(dev.kernel("k", 0.01), TimingConfig(), backend=dev)
    assert r.method == "graph" and dev.captured == 1
    bad = FakeDevice(graph_ok=False)
    r = time_callable(bad.kernel("k", 0.01), TimingConfig(), backend=bad)
    assert r.method == "events"
    assert any("graph capture failed" in w for w in r.warnings)
    assert r.median == pytest.approx(0.01)
    long = FakeDevice(host_per_op_s=1e-6)  # a host that issues a call in 2 us
    assert time_callable(long.kernel("k", 0.2), TimingConfig(), backend=long).method == "events"


def test_host_bound_calls_use_graphs_whatever_their_length():
    # the host needs 2 x 0.1 ms to issue a 0.15 ms call: events would time the host
    slow_host = FakeDevice(host_per_op_s=1e-4)
    r = time_callable(slow_host.kernel("k", 0.15), TimingConfig(), backend=slow_host)
    assert r.method == "graph" and slow_host.captured == 1
    fast_host = FakeDevice(host_per_op_s=1e-6)
    assert time_callable(fast_host.kernel("k", 0.2), TimingConfig(), backend=fast_host).method == "events"
    # the threshold is a ratio: host time equal to the device time is not host-bound at 1.5
    d = FakeDevice()
    r = time_callable(d.kernel("k", 0.2), TimingConfig(host_bound_rel=1.5), backend=d)
    assert r.method == "events"
    d = FakeDevice()  # nor is a host that needs 0.2 ms for a 0.25 ms call at the default
    assert time_callable(d.kernel("k", 0.25), TimingConfig(), backend=d).method == "events"
    d = FakeDevice()
    r = time_callable(d.kernel("k", 0.2), TimingConfig(use_graph=False), backend=d)
    assert r.method == "events" and any("event timing includes host time" in w for w in r.warnings)
    no_graph = FakeDevice(host_per_op_s=1e-4, graph_ok=False)
    r = time_callable(no_graph.kernel("k", 0.2), TimingConfig(), backend=no_graph)
    assert r.method == "events" and any("graph capture failed" in w for w in r.warnings)


def test_input_sets_rotate():
    dev = FakeDevice()
    r = time_callable(
        dev.kernel("k", 1.0), TimingConfig(use_graph=False), backend=dev, inputs=[(0,), (1,), (2,)]
    )
    assert r.n > 0
    seq = dev.log[:9]
    assert seq == ["k(0,)", "k(1,)", "k(2,)"] * 3


def test_interleaving_alternates_order_and_shares_drift():
    dev = FakeDevice()
    # the device slows down by 0.1% per call: drift hits whichever variant runs later
    state = {"calls": 0}

    def drifting(base):
        def d():
            state["calls"] += 1
            return base * (1 + 0.001 * state["calls"])

        return d

    cfg = TimingConfig(
        use_graph=False,
        round_samples=2,
        warmup_batch=2,
        warmup_min_batches=2,
        min_samples=10,
        ci_rel_width=1.0,
        rewarm_ms=0.0,  # (re-warm calls would interleave with the order checked below)
        rewarm_min_calls=0,
    )
    res = time_interleaved(
        {"A": dev.kernel("A", drifting(1.0)), "B": dev.kernel("B", drifting(1.0))}, cfg, backend=dev
    )
    # measured part: A,A,B,B then B,B,A,A ...
    measured = [x for x in dev.log if x in "AB"]
    warm = res["A"].warmup_calls + res["B"].warmup_calls
    rounds = measured[warm:]
    assert rounds[:8] == ["A", "A", "B", "B", "B", "B", "A", "A"]
    ratio = res["B"].median / res["A"].median
    assert ratio == pytest.approx(1.0, abs=0.002)  # identical kernels read identical despite drift
    assert res["A"].n == res["B"].n


def test_interleaved_detects_a_real_difference():
    rng = random.Random(3)
    dev = FakeDevice()
    res = time_interleaved(
        {
            "base": dev.kernel("base", lambda: 1.0 + rng.gauss(0, 0.002)),
            "head": dev.kernel("head", lambda: 1.03 + rng.gauss(0, 0.002)),
        },
        TimingConfig(use_graph=False),
        backend=dev,
    )
    assert res["head"].ci_low > res["base"].ci_high


def test_clock_and_temperature_moves_are_warnings():
    start = {"sm_clock_mhz": 1980, "mem_clock_mhz": 2619, "temperature_c": 40}
    end = {
        "sm_clock_mhz": 1755,
        "mem_clock_mhz": 2619,
        "temperature_c": 52,
        "throttle_reasons": ["sw_thermal"],
    }
    dev = FakeDevice(states=[start, end])
    r = time_callable(dev.kernel("k", 1.0), TimingConfig(use_graph=False), backend=dev)
    text = " | ".join(r.warnings)
    assert "SM clock moved" in text and "temperature moved" in text and "sw_thermal" in text
    assert r.gpu_state_start == start and r.gpu_state_end["sm_clock_mhz"] == 1755
    quiet = FakeDevice()
    assert time_callable(quiet.kernel("k", 1.0), TimingConfig(use_graph=False), backend=quiet).warnings == []


def test_metrics_use_the_contract_names():
    dev = FakeDevice()
    r = time_callable(dev.kernel("k", 0.5), TimingConfig(use_graph=False), backend=dev)
    names = {m.name: m for m in r.to_metrics()}
    assert set(names) == {
        "time.median",
        "time.mean",
        "time.min",
        "time.iqr",
        "time.ci_low",
        "time.ci_high",
        "time.cv",
        "time.graph",
        "time.cupti",
        "time.l2_read_flush",
    }
    assert names["time.l2_read_flush"].value == float(r.flushed_l2)
    assert names["time.graph"].value == 0.0 and names["time.graph"].better == "none"
    assert names["time.cupti"].value == 0.0  # a plain event backend
    assert names["time.median"].unit == "ms" and names["time.median"].kind == "time"
    assert names["time.cv"].better == "none" and names["time.cv"].unit == "fraction"
    d = r.to_dict()
    assert d["median"] == pytest.approx(0.5) and len(d["samples_ms"]) == r.n


def test_state_warnings_pure():
    cfg = TimingConfig()
    assert engine.state_warnings({}, {}, cfg) == []
    assert engine.state_warnings({"sm_clock_mhz": 1000}, {"sm_clock_mhz": 1010}, cfg) == []
    assert engine.state_warnings({"temperature_c": 40}, {"temperature_c": 50}, cfg)


# ---------------------------------------------------------------------------------------------
# on a GPU


@pytest.mark.gpu
@needs_gpu
def test_gpu_events_match_a_known_copy():
    import torch

    x = torch.randn(64 << 20, device="cuda")
    y = torch.empty_like(x)
    r = time_callable(lambda: y.copy_(x), TimingConfig(budget_s=0.5))
    # a device copy launches no kernel, so CUPTI (the default, where it starts) hands it to events,
    # saying why; without CUPTI it is events from the start
    assert r.method == "events", r.method_note
    if cupti.unavailable_reason() is None:
        assert "launched no kernel" in r.method_note, r.method_note
    assert r.n >= 20 and r.median > 0
    gbps = 2 * x.numel() * 4 / (r.median * 1e-3) / 1e9
    assert 200 < gbps < 5000, gbps  # a plausible device copy bandwidth
    assert "sm_clock_mhz" in r.gpu_state_start or r.gpu_state_start == {}


@pytest.mark.gpu
@needs_gpu
def test_gpu_graph_that_replays_stale_host_data_is_refused(monkeypatch):
    """A call that copies new host data each time: its graph would replay the bytes of capture
    time, so the timing keeps plain events and says why (the event backend's choice: CUPTI, the
    default, replays no graphs)."""
    import torch

    monkeypatch.setenv(ENV_TIMING, "events")

    x = torch.zeros(1024, device="cuda")
    count = [0]

    def fresh_host_data():
        count[0] += 1  # 0, 1, 0, 1: consecutive calls differ by 1, whatever the count
        t = torch.full((1,), float(count[0] % 2), pin_memory=True)
        return x + t.to("cuda", non_blocking=True)

    r = time_callable(fresh_host_data, TimingConfig(budget_s=0.3))
    assert r.method == "events", r.warnings
    assert any("GraphReplayMismatch" in w for w in r.warnings), r.warnings
    # the same shape of call without host state keeps its graph
    y = torch.ones(1024, device="cuda")
    assert time_callable(lambda: x + y, TimingConfig(budget_s=0.3)).method == "graph"


@pytest.mark.gpu
@needs_gpu
def test_gpu_short_kernel_uses_a_graph(monkeypatch):
    import torch

    monkeypatch.setenv(ENV_TIMING, "events")  # the event backend's choice: CUPTI replays no graphs

    x = torch.randn(1024, device="cuda")
    r = time_callable(lambda: x.mul_(1.0), TimingConfig(budget_s=0.3))
    assert r.method == "graph", r.warnings
    assert r.median < 0.05


def test_graph_replay_check_compares_every_output_tensor():
    torch = pytest.importorskip("torch")
    from kperf_ci.capture.timing.backend import _same_tensors, _tensors

    a = torch.arange(6.0).reshape(2, 3)
    out = {"y": a, "aux": (a.sum(), 3, "text")}
    flat = _tensors(torch, out)
    assert len(flat) == 2 and _tensors(torch, None) == []
    assert _same_tensors(torch, flat, [t.clone() for t in flat])
    assert _same_tensors(torch, [a], [a * (1 + 1e-5)])  # reordered sums round differently
    assert not _same_tensors(torch, [a], [a + 1])
    assert not _same_tensors(torch, [a], [a.reshape(3, 2)]) and not _same_tensors(torch, [a], [a, a])
    assert not _same_tensors(torch, [a.long()], [a.long() + 1]) and _same_tensors(
        torch, [a.long()], [a.long()]
    )


def test_a_warning_about_a_median_of_zero_says_so_instead_of_raising():
    # a clock that reads 0 for every call (no tick): the loop runs to its budget and warns
    dev = FakeDevice()
    r = time_callable(dev.kernel("k", 0.0), TimingConfig(use_graph=False, budget_s=0.05), backend=dev)
    assert r.median == 0.0 and any("unbounded, the median is 0" in w for w in r.warnings), r.warnings
    assert engine._ci_width([1.0, 1.0, 1.0], 0.99, 1.01) == "2.00%"
