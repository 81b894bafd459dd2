"""traces.perfetto: the writer computes nothing; the busy-SM counter comes from its caller."""

from __future__ import annotations

import json

import numpy as np
from fixtures.synthetic import grid_timeline

from kperf_ci.traces.perfetto import to_chrome_trace, write_chrome_trace


def _counters(tr: dict) -> list[dict]:
    return [e for e in tr["traceEvents"] if e["ph"] == "C"]


def test_counter_track_only_from_the_series_given(tmp_path):
    tl = grid_timeline([10_000] * 3, num_sms=2)
    assert _counters(to_chrome_trace(tl)) == []
    calls = []

    def series(t, bins):
        calls.append(bins)
        return np.array([0.0, 5_000.0]), np.array([2.0, 1.0])

    tr = to_chrome_trace(tl, busy_series=series, counter_bins=7)
    assert calls == [7]
    c = _counters(tr)
    assert [e["args"]["SMs"] for e in c] == [2.0, 1.0, 0]  # and a closing zero at the launch end
    assert c[-1]["ts"] == round(tl.t1 / 1000.0, 4)
    p = tmp_path / "t.json"
    write_chrome_trace(p, tl, busy_series=series)
    assert json.loads(p.read_text())["otherData"]["kernels"] == [tl.kernel]


class _F:
    name, value, unit, flagged, explanation, suggestion = "wave_idle", 0.25, "fraction", True, "why", "fix"


def test_findings_are_instant_events_read_by_their_attributes():
    tr = to_chrome_trace(grid_timeline([1_000] * 2, num_sms=2), findings=[_F()])
    (inst,) = [e for e in tr["traceEvents"] if e["ph"] == "i"]
    assert inst["name"] == "FLAG wave_idle = 0.25 fraction" and inst["args"]["suggestion"] == "fix"
