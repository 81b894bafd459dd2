"""traces.kernel_trace: KernelTrace and its conversion into a Timeline in ns."""

from __future__ import annotations

import pytest
from fixtures.synthetic import proton_chrome_trace

from kperf_ci.traces.kernel_trace import KernelTrace, to_timeline
from kperf_ci.traces.proton_chrome import parse_events


def test_ctas_placed_by_init_stamp_and_cycles_converted_with_the_clock():
    ctas = [(0, 0, 0, [(0, "kernel", 0, 4_000)]), (1, 1, 3_000, [(0, "kernel", 0, 4_000)])]
    kt = parse_events(proton_chrome_trace(ctas, clock_ghz=2.0)["traceEvents"])["k"]
    tl = to_timeline(kt, clock_ghz=2.0, num_sms=132)
    sp = tl.cta_spans()
    assert sp.start_ns.tolist() == pytest.approx([0, 3_000]) and sp.duration_ns == pytest.approx([4_000] * 2)
    assert tl.num_sms == 132 and tl.meta["clock"] == "given"
    half = to_timeline(kt, clock_ghz=1.0).cta_spans()
    assert half.duration_ns == pytest.approx([8_000] * 2)  # the clock given is the one used


def test_no_stamps_means_proton_s_1_ghz():
    kt = parse_events(
        proton_chrome_trace([(0, 0, 0, [(0, "kernel", 0, 1_000)])], stamps=False)["traceEvents"]
    )["k"]
    tl = to_timeline(kt)
    assert tl.meta["clock_mhz"] == 1000.0 and tl.meta["clock"] == "assumed 1 GHz (no stamps)"


def test_empty_trace_converts_to_an_empty_timeline():
    kt = KernelTrace.empty("k")
    assert kt.n_events == 0 and kt.region_id("kernel") is None
    assert len(to_timeline(kt)) == 0
