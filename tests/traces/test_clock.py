"""traces.clock: the one clock estimate from per-CTA stamps, used by the Chrome-trace loader,
the KernelTrace conversion and the capture stage alike."""

from __future__ import annotations

import numpy as np
import pytest
from fixtures.synthetic import proton_chrome_trace

from kperf_ci.traces.clock import PLAUSIBLE_GHZ, clock_ghz_from_stamps, kernel_span_ns, measured_clock_ghz
from kperf_ci.traces.kernel_trace import to_timeline
from kperf_ci.traces.proton_chrome import load_proton_traces, parse_events


def _ctas(n: int = 40, dur_ns: float = 10_000.0) -> list:
    return [(c, c % 8, 2_000 * (c // 8), [(w, "kernel", 0, dur_ns) for w in range(2)]) for c in range(n)]


@pytest.mark.parametrize("ghz", [0.8, 1.41, 1.98])
def test_every_path_recovers_the_clock_of_the_trace(ghz):
    tr = proton_chrome_trace(_ctas(), clock_ghz=ghz)
    kt = parse_events(tr["traceEvents"])["k"]
    assert measured_clock_ghz(kt) == pytest.approx(ghz, rel=1e-3)
    # the analyses' loader and the KernelTrace conversion use the same estimate
    (tl,) = load_proton_traces(tr)
    assert tl.meta["clock_mhz"] == pytest.approx(ghz * 1000, rel=1e-3)
    assert to_timeline(kt).meta["clock_mhz"] == pytest.approx(ghz * 1000, rel=1e-3)
    assert tl.cta_spans().duration_ns == pytest.approx(np.full(40, 10_000.0), rel=1e-3)


def test_ratio_of_sums_weights_ctas_by_their_length():
    # two CTAs: 1000 cycles in 1000 ns and 3000 cycles in 1000 ns -> 4000 / 2000, not mean(1, 3)
    got = clock_ghz_from_stamps(
        np.array([0, 1]), np.array([0, 0]), np.array([1000, 3000]), np.array([0, 0]), np.array([1000, 1000])
    )
    assert got == pytest.approx(2.0)


def test_ctas_that_say_nothing_about_the_clock_are_left_out():
    # CTA 1 recorded one instant (no cycles elapsed) over 5000 ns: counting its ns would give 0.33
    cta, start, end = np.array([0, 1]), np.array([0, 500]), np.array([2000, 500])
    init, final = np.array([0, 0]), np.array([1000, 5000])
    assert clock_ghz_from_stamps(cta, start, end, init, final) == pytest.approx(2.0)
    # and a CTA without elapsed ns is left out too
    assert clock_ghz_from_stamps(cta, start, end, init, np.array([1000, 0])) == pytest.approx(2.0)


def test_implausible_clock_or_no_stamps_is_none():
    one = (np.array([0]), np.array([0]), np.array([10_000]), np.array([0]))
    assert clock_ghz_from_stamps(*one, np.array([1000])) is None  # 10 GHz
    assert clock_ghz_from_stamps(*one, np.array([10_000_000])) is None  # 0.001 GHz
    lo, hi = PLAUSIBLE_GHZ
    assert clock_ghz_from_stamps(*one, np.array([10_000 / lo])) == pytest.approx(lo)
    assert clock_ghz_from_stamps(*one, np.array([10_000 / hi])) == pytest.approx(hi)
    assert clock_ghz_from_stamps(np.array([]), np.array([]), np.array([]), np.array([]), np.array([])) is None
    kt = parse_events(proton_chrome_trace(_ctas(), stamps=False)["traceEvents"])["k"]
    assert measured_clock_ghz(kt) is None
    (tl,) = load_proton_traces(proton_chrome_trace(_ctas(), stamps=False))
    assert tl.meta["clock_mhz"] is None


def test_region_selects_the_records_measured():
    # loop0 covers half of each CTA: over it alone, the cycles are half as many per stamp ns
    ctas = [(c, c, 0, [(0, "kernel", 0, 10_000), (0, "loop0", 0, 5_000)]) for c in range(4)]
    kt = parse_events(proton_chrome_trace(ctas, clock_ghz=1.5)["traceEvents"])["k"]
    assert measured_clock_ghz(kt, "kernel") == pytest.approx(1.5, rel=1e-3)
    assert measured_clock_ghz(kt, "loop0") == pytest.approx(0.75, rel=1e-3)
    assert measured_clock_ghz(kt, "absent") == measured_clock_ghz(kt, None)


def test_kernel_span_uses_the_clock_within_ctas():
    ctas = [(0, 0, 0, [(0, "kernel", 0, 10_000)]), (1, 1, 4_000, [(0, "kernel", 0, 10_000)])]
    kt = parse_events(proton_chrome_trace(ctas, clock_ghz=2.0)["traceEvents"])["k"]
    assert kernel_span_ns(kt, 2.0) == pytest.approx(14_000, rel=1e-3)
    assert kernel_span_ns(kt, 1.0) == pytest.approx(24_000, rel=1e-3)  # wrong clock, wrong span
