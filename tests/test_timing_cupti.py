"""CUPTI kernel durations (kperf_ci.capture.timing.cupti), with the device faked only at its
boundary: activity records in, samples out.

The fake device runs a stream: each launch waits ``launch_ns`` (the launch overhead events
see), then runs for its duration; a CUPTI record is written for every kernel, memset and copy,
as Kineto hands them over. A marker is torch's spin kernel plus an event.
"""

from __future__ import annotations

import math

import pytest

from kperf_ci.capture.timing import cupti, engine
from kperf_ci.capture.timing.cupti import ActivityRecord, AttributionError, CuptiBackend, kernel_windows
from kperf_ci.capture.timing.interleaved import adaptive_ab
from kperf_ci.config import ABPolicy, Settings
from kperf_ci.judge.ab import stop_rule
from kperf_ci.sample_stats import median

FILL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<unsigned char>>"
SPIN = "at::cuda::(anonymous namespace)::spin_kernel(long)"


class FakeStream:
    """The event backend (inner) and the CUPTI source of one fake GPU stream."""

    def __init__(self, launch_ns: int = 2500, flush_ns: int = 30_000, lose_markers: int = 0):
        self.t = 0  # device ns
        self.host = 0.0
        self.launch_ns = launch_ns
        self.flush_ns = flush_ns
        self.records: list[ActivityRecord] = []
        self.running = False
        self.lose_markers = lose_markers  # marker records dropped per collection (a lost buffer)
        self.corr = 0
        self.starts = 0

    # --- activity source
    def start(self) -> None:
        assert not self.running
        self.running, self.records = True, []
        self.starts += 1

    def stop(self) -> list[ActivityRecord]:
        self.running = False
        out = list(self.records)
        for _ in range(self.lose_markers):
            i = next((k for k, r in enumerate(out) if r.is_marker), None)
            if i is not None:
                out.pop(i)
        return out[::-1]  # Kineto's order is not launch order: attribution must sort

    # --- the stream
    def launch(self, kind: str, name: str, dur_ns: int) -> None:
        self.t += self.launch_ns
        self.corr += 1
        if self.running:
            self.records.append(ActivityRecord(kind, name, self.t, self.t + dur_ns, 7, self.corr))
        self.t += dur_ns
        self.host += 5e-6

    def spin(self) -> None:
        self.launch("kernel", SPIN, 1000)

    def kernel(self, name: str, dur_ns: int):
        return lambda: self.launch("kernel", name, dur_ns)

    # --- inner (event) backend
    def marker(self) -> int:
        return self.t

    def elapsed_ms(self, a: int, b: int) -> float:
        return (b - a) / 1e6

    def synchronize(self) -> None:
        pass

    def flush(self) -> None:
        self.launch("kernel", FILL, self.flush_ns)

    def l2_bytes(self) -> int:
        return 50 << 20

    def state(self) -> dict:
        return {"sm_clock_mhz": 1980, "temperature_c": 40}

    def host_time(self) -> float:
        return self.host

    def sleep(self, s: float) -> None:
        self.host += s


def _backend(stream: FakeStream) -> CuptiBackend:
    return CuptiBackend(stream, source=stream, spin=stream.spin)


CFG = engine.TimingConfig(
    warmup_min_s=0.0, warmup_budget_s=0.01, min_time_s=0.0, budget_s=0.05, duty_cycle=1.0, rewarm_ms=0.0
)


def rec(kind: str, name: str, start: int, end: int, corr: int = 0) -> ActivityRecord:
    return ActivityRecord(kind, name, start, end, 7, corr)


# ---------------------------------------------------------------- attribution (pure)


def test_windows_are_the_kernels_between_markers_in_launch_order() -> None:
    records = [
        rec("kernel", FILL, 0, 30),  # the flush: before the first marker, in no window
        rec("kernel", SPIN, 40, 41),
        rec("kernel", "k_a", 50, 60),
        rec("gpu_memset", "Memset (Device)", 61, 62),  # not a kernel: never counted
        rec("kernel", "k_b", 63, 70),
        rec("kernel", SPIN, 71, 72),
        rec("kernel", FILL, 80, 110),  # the next flush, between two samples: in no window asked for
        rec("kernel", SPIN, 111, 112),
        rec("gpu_memcpy", "Memcpy DtoD (Device -> Device)", 113, 120),
        rec("kernel", "k_a", 121, 131),
        rec("kernel", SPIN, 140, 141),
    ]
    windows = kernel_windows(list(reversed(records)), 4)
    assert [[r.name for r in w] for w in windows] == [["k_a", "k_b"], [FILL], ["k_a"]]
    assert sum(r.end_ns - r.start_ns for r in windows[0]) == 17


def test_ties_in_start_time_keep_launch_order() -> None:
    """CUPTI timestamps come in 32 ns steps: two records can share a start."""
    records = [rec("kernel", SPIN, 0, 1, 1), rec("kernel", "b", 32, 64, 3), rec("kernel", "a", 32, 32, 2)]
    records.append(rec("kernel", SPIN, 96, 97, 4))
    assert [r.name for r in kernel_windows(records, 2)[0]] == ["a", "b"]


def test_lost_marker_records_are_an_attribution_error() -> None:
    records = [rec("kernel", SPIN, 0, 1), rec("kernel", "k", 2, 5)]
    with pytest.raises(AttributionError, match="1 marker record"):
        kernel_windows(records, 2)


# ---------------------------------------------------------------- the timing loop on CUPTI


def test_a_sample_is_the_kernel_duration_without_launch_or_flush() -> None:
    s = FakeStream(launch_ns=2500)
    r = engine.time_callable(s.kernel("geglu_fwd", 6_624), CFG, backend=_backend(s))
    assert r.method == "cupti" and r.method_note == ""
    assert set(r.samples_ms) == {0.006624}  # the kernel alone: no launch gap, no flush
    # the events beside it read what do_bench reads: the launch is in it
    assert median(r.event_samples_ms) == pytest.approx(0.006624 + 0.0025 + 0.0025 + 0.001, abs=1e-9)
    assert len(r.event_samples_ms) == len(r.samples_ms)
    assert {m.name: m.value for m in r.to_metrics()}["time.cupti"] == 1.0


def test_several_kernels_of_one_call_are_summed_and_memsets_left_out() -> None:
    s = FakeStream()

    def call() -> None:
        s.launch("kernel", "fwd", 4_000)
        s.launch("gpu_memset", "Memset (Device)", 9_000)  # the call's own memset: not a kernel
        s.launch("kernel", "bwd", 6_000)

    be = _backend(s)
    r = engine.time_callable(call, CFG, backend=be)
    assert set(r.samples_ms) == {0.010}


def test_no_graphs_and_no_collection_left_running() -> None:
    s = FakeStream(launch_ns=50_000)  # host-bound and short: events would pick a graph
    r = engine.time_callable(s.kernel("tiny", 1_200), CFG, backend=_backend(s))
    assert r.method == "cupti" and not s.running  # closed: later launches of the test pay nothing
    assert not any("graph" in w for w in r.warnings)


def test_lost_records_fall_back_to_events_and_say_why() -> None:
    s = FakeStream(lose_markers=1)
    r = engine.time_callable(s.kernel("k", 10_000), CFG, backend=_backend(s))
    assert r.method == "events"
    assert "CUPTI timing abandoned" in r.method_note and "marker record" in r.method_note
    assert median(r.samples_ms) == pytest.approx(0.0125, abs=1e-9)  # events: the launch is in it


def test_a_call_that_launches_no_kernel_is_timed_with_events_not_read_as_zero() -> None:
    """A plain device copy (``y.copy_(x)``) is a memcpy record, not a kernel: CUPTI's window is
    empty. It read 0 ms and the loop's CI arithmetic divided by it (ZeroDivisionError on the H200)."""
    s = FakeStream()
    r = engine.time_callable(lambda: s.launch("gpu_memcpy", "Memcpy DtoD (Device -> Device)", 40_000), CFG,
                             backend=_backend(s))  # fmt: skip
    assert r.method == "events" and "launched no kernel" in r.method_note
    assert median(r.samples_ms) == pytest.approx(0.0425, abs=1e-9)  # events: the copy and its launch


def test_ab_effect_is_the_kernels_not_diluted_by_launch_overhead() -> None:
    """+5% on a 10 us kernel with 2.5 us of launch overhead: events read +4%, CUPTI +5%."""
    s = FakeStream(launch_ns=2500)
    res = adaptive_ab(
        s.kernel("base", 10_000), s.kernel("head", 10_500), backend=_backend(s), cfg=CFG, budget_s=0.05,
        stop_rule=stop_rule(ABPolicy(ab_threshold=0.01, ab_floor_ms=0.0, ab_precision=Settings.ab_precision)),
    )  # fmt: skip
    assert res.method == "cupti" and res.verdict == "slower"
    assert res.ratio == pytest.approx(1.05, abs=1e-9)
    assert not s.running


def test_markers_of_an_earlier_collection_are_refused() -> None:
    s = FakeStream()
    be = _backend(s)
    a = be.marker()
    be.synchronize()
    b = be.marker()
    be.synchronize()
    with pytest.raises(AttributionError, match="another collection"):
        be.elapsed_ms(a, b)


def test_events_are_forced_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cupti.ENV_TIMING, "events")
    assert cupti.unavailable_reason() == "KPERF_TIMING=events"


def test_durations_are_milliseconds() -> None:
    assert rec("kernel", "k", 1_000, 7_624).duration_ms == pytest.approx(0.006624)
    assert math.isclose(rec("kernel", "k", 0, 32).duration_ms, 3.2e-5)
