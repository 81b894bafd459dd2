"""traces.perfetto: the writer computes nothing; the busy-SM counter comes from its caller."""

from __future__ import annotations

import json
import random

import numpy as np
from fixtures.synthetic import grid_timeline

from kperf_ci.traces.kernel_records import KernelRecord
from kperf_ci.traces.perfetto import _nest, _round4, to_chrome_trace, write_chrome_trace
from kperf_ci.traces.records import Timeline


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


def _tricky_timeline(seed: int, kernel: str = 'mm "é"') -> Timeline:
    """CTAs whose regions run one after another, nest, cross, stick out of the kernel region,
    start together or last 0 ns, at times with fractional ns (some on a rounding tie)."""
    rng = random.Random(seed)
    rows = []
    for cta in range(40):
        sm, t0 = rng.randrange(3), rng.choice([0.0, rng.uniform(0, 5_000), rng.randrange(100) * 0.05])
        for warp in rng.sample([-1, 0, 1, 2], rng.randint(1, 3)):
            if rng.random() < 0.8:
                rows.append((cta, warp, sm, "kernel", t0, t0 + rng.randint(1, 3_000)))
            t = t0
            for _ in range(rng.randint(0, 5)):
                name = rng.choice(["loop0", "prologue", "épilogue", 'q"\\', "CTA x"])
                s = rng.choice([t, t0 + rng.uniform(-200, 3_000), t0 + rng.randrange(3) * 10])
                e = s + rng.choice([0.0, 10.0, rng.uniform(0, 800), rng.randrange(100) * 0.05])
                rows.append((cta, warp, sm, name, s, e))
                t = e + rng.choice([0.0, 1.0])
    return Timeline.from_records(rows, kernel=kernel)


def _one_nest_per_cta(tl: Timeline) -> list[tuple]:
    """The SM slices as the writer made them before it worked on whole arrays: one _nest per CTA
    of its span and its lowest warp's regions, in SM order."""
    spans, out = tl.cta_spans(), []
    for i in np.argsort(spans.sm, kind="stable").tolist():
        cta = int(spans.cta[i])
        rows = np.flatnonzero(tl.cta == cta)
        rows = [r for r in rows if tl.warp[r] == tl.warp[rows].min() and tl.region[r] != "kernel"]
        slices = [(f"CTA {cta}", float(spans.start_ns[i]), float(spans.end_ns[i]))]
        slices += [(str(tl.region[r]), float(tl.start_ns[r]), float(tl.end_ns[r])) for r in rows]
        out += [(n, round(s / 1e3, 4), round(max(e - s, 0.0) / 1e3, 4), d) for n, s, e, d in _nest(slices)]
    return out


def test_sm_slices_are_those_of_one_nest_per_cta():
    for seed in range(20):
        tl = _tricky_timeline(seed)
        got = [
            (e["name"], e["ts"], e["dur"], e["tid"] % 16)
            for e in to_chrome_trace(tl)["traceEvents"]
            if e["ph"] == "X"
        ]
        assert got == _one_nest_per_cta(tl)


def test_the_text_written_is_json_dumps_of_the_trace(tmp_path):
    def series(tl, bins):
        return np.linspace(tl.t0, tl.t1, bins), np.linspace(0.0, 3.0, bins)

    tls = [_tricky_timeline(1), _tricky_timeline(2, kernel=""), _tricky_timeline(3, kernel="k")]
    tls[2].meta["trace_t0_ns"] = 12_345.678
    kw = {"findings": [_F()], "records": [KernelRecord("k", 0, 10)], "busy_series": series, "per_warp": True}
    p = tmp_path / "t.json"
    for timelines in (tls, tls[0], grid_timeline([1_000] * 5, num_sms=2, ctas_per_sm=2, warps=2)):
        write_chrome_trace(p, timelines, **kw)
        assert p.read_text(encoding="utf-8") == json.dumps(
            to_chrome_trace(timelines, **kw), separators=(",", ":")
        )


def test_round4_is_pythons_round_bit_for_bit():
    rng = np.random.default_rng(0)
    x = np.concatenate(
        [
            rng.uniform(-1e4, 1e4, 20_000),
            (rng.integers(0, 10**9, 20_000) + 0.5) / 1e4,  # ties and near-ties at the 4th decimal
            rng.integers(0, 10**9, 20_000) / 1e3 / 1e3,  # ns on the grid, in µs
            [0.0, -0.0, 5e-5, -5e-5, 2.675, 0.03125, -0.03125, 1e-320, 1.2e8, 1e300, np.inf, -np.inf],
        ]
    )
    want = [round(v, 4) for v in x.tolist()]
    assert np.array_equal(np.array(_round4(x)).view(np.int64), np.array(want).view(np.int64))
