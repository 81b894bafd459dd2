"""Perfetto export and the `kperf analyze` command."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from fixtures.synthetic import grid_timeline, pipelined_timeline

from kperf_ci.analysis import analyze_timeline
from kperf_ci.analysis.occupancy import busy_sm_series
from kperf_ci.capture.regions.result import build_result
from kperf_ci.capture.regions.ttgir_pass import RegionConfig
from kperf_ci.commands.analyze import analyze_cmd, run
from kperf_ci.traces.kernel_records import KernelRecord, save_records
from kperf_ci.traces.perfetto import _nest, to_chrome_trace, write_chrome_trace
from kperf_ci.traces.proton_chrome import parse_events
from kperf_ci.traces.timeline_file import save_timeline


def _slices(trace, pid_name):
    pids = {
        e["pid"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "process_name" and e["args"]["name"] == pid_name
    }
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] in pids]


def test_perfetto_has_per_sm_tracks_with_nested_regions_and_counters():
    tl = grid_timeline([10_000] * 3, num_sms=2, warps=2)  # SM 0 runs CTA 0 then CTA 2
    fs = analyze_timeline(tl)
    tr = to_chrome_trace(
        tl,
        findings=fs,
        records=[KernelRecord("k", 0, 10), KernelRecord("k", 20, 30)],
        busy_series=busy_sm_series,
    )
    json.dumps(tr)  # serialisable
    sm0 = _slices(tr, "SM 000")
    assert sorted(e["name"] for e in sm0 if e["name"].startswith("CTA")) == ["CTA 0", "CTA 2"]
    assert {e["name"] for e in sm0} >= {"prologue", "loop0", "epilogue"}
    assert all(e["tid"] == 0 for e in sm0)  # sequential CTAs share one slot, regions nest inside
    assert any(e["ph"] == "C" and e["name"] == "busy SMs" for e in tr["traceEvents"])
    assert any(e["ph"] == "i" and e["name"].startswith("FLAG sm_utilization") for e in tr["traceEvents"])
    assert len(_slices(tr, "GPU stream")) == 2


def test_perfetto_concurrent_ctas_get_separate_slots_and_per_warp_view():
    tl = grid_timeline([10_000] * 4, num_sms=2, ctas_per_sm=2)
    tr = to_chrome_trace(tl, per_warp=True)
    ctas = [e for e in _slices(tr, "SM 000") if e["name"].startswith("CTA")]
    assert len({e["tid"] for e in ctas}) == 2
    assert any(e["ph"] == "M" and "CTA 3 (SM 1)" in str(e["args"].get("name")) for e in tr["traceEvents"])


def test_nest_moves_crossing_slices_to_an_overflow_lane():
    out = _nest([("a", 0, 10), ("b", 2, 5), ("c", 4, 12)])
    lanes = {n: lane for n, _, _, lane in out}
    assert lanes["a"] == 0 and lanes["b"] == 0 and lanes["c"] == 1


def test_run_on_a_trace_file_writes_perfetto(tmp_path):
    p = tmp_path / "tl.json"
    save_timeline(grid_timeline([100_000] * 133, num_sms=132), p)
    out = tmp_path / "perfetto.json"
    rep = run(trace=str(p), perfetto=str(out))
    assert {f.name for f in rep.flagged} >= {"sm_utilization", "wave_idle"}
    assert json.loads(out.read_text())["traceEvents"]


def test_cli_trace_and_fail_on_flag(tmp_path):
    bad, good = tmp_path / "bad.json", tmp_path / "good.json"
    save_timeline(grid_timeline([100_000] * 133, num_sms=132), bad)
    save_timeline(grid_timeline([100_000] * 132, num_sms=132), good)
    r = CliRunner().invoke(analyze_cmd, ["--trace", str(bad), "--fail-on-flag"])
    assert r.exit_code == 1, r.output
    assert "[FLAG] wave_idle" in r.output and "->" in r.output
    r = CliRunner().invoke(analyze_cmd, ["--trace", str(good), "--fail-on-flag", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["launches"][0]["findings"]


def test_cli_static_waves_records_thresholds_and_errors(tmp_path):
    r = CliRunner().invoke(
        analyze_cmd,
        [
            "--grid",
            "133",
            "--num-warps",
            "8",
            "--registers",
            "128",
            "--shared-bytes",
            "196608",
            "--arch",
            "NVIDIA H100 80GB HBM3",
        ],
    )
    assert r.exit_code == 0 and "[FLAG] wave_tail" in r.output
    rec = tmp_path / "rec.json"
    save_records([KernelRecord("tiny", i * 10_000.0, i * 10_000.0 + 1_000.0) for i in range(10)], rec)
    r = CliRunner().invoke(analyze_cmd, ["--records", str(rec)])
    assert r.exit_code == 0 and "[FLAG] launch_gap_fraction" in r.output
    r = CliRunner().invoke(analyze_cmd, ["--records", str(rec), "--threshold", "launch_gap_fraction=0.95"])
    assert "[ok  ] launch_gap_fraction" in r.output
    r = CliRunner().invoke(analyze_cmd, ["--records", str(rec), "--threshold", "nope=1"])
    assert r.exit_code == 2 and "expected NAME=VALUE" in r.output
    r = CliRunner().invoke(analyze_cmd, [])
    assert r.exit_code == 2 and "exactly one of --trace" in r.output
    junk = tmp_path / "junk.json"
    junk.write_text("{}")
    r = CliRunner().invoke(analyze_cmd, ["--trace", str(junk)])
    assert r.exit_code == 2 and "no timeline" in r.output


def test_cli_overlap_on_a_pipelined_timeline(tmp_path):
    p = tmp_path / "s1.json"
    save_timeline(pipelined_timeline(stages=1), p)
    r = CliRunner().invoke(analyze_cmd, ["--trace", str(p)])
    assert "[FLAG] memory_exposed_fraction" in r.output
    assert "bubble: CTA" in r.output


def test_cli_db_reads_trace_artifacts(tmp_path):
    store = pytest.importorskip("kperf_ci.store")
    from kperf_ci.model import Fingerprint, Metric, RunInfo, VariantKey, VariantResult

    db = tmp_path / "run.db"
    info = RunInfo("r1", "2026-11-22T00:00:00+00:00", "gpu", Fingerprint(gpu="NVIDIA H100", sm_count=132))
    key = VariantKey("mm", "NVIDIA H100 80GB HBM3", config="w8")
    res = VariantResult(
        key,
        metrics=[
            Metric("num_warps", 8, "count"),
            Metric("registers", 128, "count"),
            Metric("shared_bytes", 196608, "bytes"),
            Metric("grid", 133, "count"),
        ],
    )
    other = VariantResult(VariantKey("add", "sm_90"), metrics=[Metric("registers", 20, "count")])
    store.save_run(db, info, [res, other])
    tl_path = tmp_path / "tl.json"
    save_timeline(grid_timeline([100_000] * 133, num_sms=132), tl_path)
    store.save_blob(db, "r1", key.id, "proton_trace", tl_path.read_text())
    rep = run(db=str(db), kernel="mm")
    assert len(rep.launches) == 1
    f = {x.name: x for x in rep.launches[0].findings}
    assert f["ctas_per_sm"].details["limits"]["shared_memory"] == 1  # launch numbers from the metrics
    assert f["wave_tail_idle_measured"].flagged
    rep = run(db=str(db))
    assert any("add" in n and "no trace artifact" in n for n in rep.notes)
    r = CliRunner().invoke(analyze_cmd, ["--db", str(tmp_path / "missing.db")])
    assert r.exit_code == 2


def test_write_chrome_trace(tmp_path):
    p = tmp_path / "x.json"
    write_chrome_trace(p, [grid_timeline([1000] * 2, num_sms=2)])
    assert json.loads(p.read_text())["displayTimeUnit"] == "ns"


def test_cli_db_reads_the_capture_stage_npz_blob(tmp_path):
    store = pytest.importorskip("kperf_ci.store")

    from fixtures.synthetic import proton_chrome_trace as proton_trace

    from kperf_ci.model import Fingerprint, Metric, RunInfo, VariantKey, VariantResult

    ctas = [(c, c % 132, 0 if c < 132 else 20_000, [(0, "kernel", 0, 19_000)]) for c in range(133)]
    kts = parse_events(proton_trace(ctas, clock_ghz=1.7)["traceEvents"])
    rr = build_result(kts["k"], RegionConfig(), grid=(133, 1, 1))
    db = tmp_path / "run.db"
    info = RunInfo("r2", "2026-11-22T00:00:00+00:00", "gpu", Fingerprint(gpu="NVIDIA H100", sm_count=132))
    key = VariantKey("k", "NVIDIA H100 80GB HBM3")
    res = VariantResult(
        key, metrics=[Metric("num_warps", 8, "count"), Metric("shared_bytes", 196608, "bytes")]
    )
    store.save_run(db, info, [res])
    store.save_blob(db, "r2", key.id, "timeline", rr.timeline_bytes())
    rep = run(db=str(db))
    f = {x.name: x for x in rep.launches[0].findings}
    assert f["waves"].details["grid"] == 133  # grid from the blob, warps/smem from the metrics
    assert f["wave_idle"].flagged and f["wave_tail_idle_measured"].flagged
