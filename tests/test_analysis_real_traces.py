"""The analyses on timelines recorded on an H100 (benchmarks/analyses/run.py, exported with
export_traces.py): every case must be flagged and every control must not, on the CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kperf_ci.analysis import launch_gaps, load_imbalance, overlap, prologue_epilogue, wave_quantization
from kperf_ci.analysis.occupancy import sm_busy
from kperf_ci.traces.kernel_records import load_records
from kperf_ci.traces.timeline_file import load_timelines

DATA = Path(__file__).parent / "data" / "traces"
MANIFEST = json.loads((DATA / "manifest.json").read_text()) if (DATA / "manifest.json").exists() else []


def run_case(entry: dict):
    path = DATA / entry["file"]
    group = entry["analysis"]
    if group == "launch_gaps":
        return launch_gaps(load_records(path))
    (tl,) = load_timelines(path)[-1:]
    n_sms = tl.num_sms or 132
    if group == "waves":
        k = int(sm_busy(tl, n_sms).max_resident.max())
        return wave_quantization(len(tl.cta_spans()), ctas_per_sm=k, sm_count=n_sms, timeline=tl)
    if group == "imbalance":
        return load_imbalance(tl, num_sms=n_sms)
    if group == "prologue":
        return prologue_epilogue(tl)
    if group == "overlap":
        return overlap(tl)
    raise ValueError(group)


def _params():
    out = []
    for e in MANIFEST:
        marks = [pytest.mark.xfail(reason=e["known_failure"], strict=True)] if e.get("known_failure") else []
        out.append(pytest.param(e, id=e["case"], marks=marks))
    return out


@pytest.mark.skipif(not MANIFEST, reason="no recorded traces (run benchmarks/analyses/run.py on a GPU)")
@pytest.mark.parametrize("entry", _params())
def test_recorded_case(entry):
    assert (DATA / entry["file"]).stat().st_size < 300 * 1024
    f = {x.name: x for x in run_case(entry)}[entry["finding"]]
    assert f.flagged == entry["expected"], f.line()


@pytest.mark.skipif(not (DATA / "proton_wave_133.json").exists(), reason="no recorded Proton trace")
def test_raw_proton_trace_loads_with_a_plausible_clock():
    (tl,) = load_timelines(DATA / "proton_wave_133.json")
    assert len(tl.cta_spans()) == 133
    clock = tl.meta["clock_mhz"]
    assert clock is None or 800 <= clock <= 2200, clock
    assert tl.sm.max() < 132
