"""The report's model (view), its charts and page sections, and `kperf report` end to end (no browser)."""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import replace

import pytest
from click.testing import CliRunner
from conftest import make_info, make_result
from fixtures.sample import synthetic_runs, timeline_blob, timeline_npz

from kperf_ci import store
from kperf_ci.cli import main
from kperf_ci.judge.compare import compare_runs
from kperf_ci.model import Fingerprint, Metric, RunRecord
from kperf_ci.report import build_report, plots, write_site
from kperf_ci.report.kernel_page import _timeline, asm_diff, gantt_lanes, region_segments

HOSTILE = "<script>alert(1)</script>"


def _pair(base_metrics: dict, cur_metrics: dict, **kw):
    base = RunRecord(make_info("b1"), [make_result("k", **base_metrics, **kw)])
    cur = RunRecord(make_info("c1"), [make_result("k", **cur_metrics, **kw)])
    return base, cur


# ------------------------------------------------------------------------------- view


def test_verdicts_follow_the_comparison():
    bases, cur = synthetic_runs(40)
    report = build_report(cur, bases[-1], compare_runs(bases[-1], cur))
    by_kernel = {}
    for v in report.variants:
        by_kernel.setdefault((v.key.kernel, v.verdict), []).append(v)
    assert report.verdict_line == "3 regressed kernels"
    regs = report.regressions
    assert [v.key.kernel for v in regs] == ["softmax_kernel", "layer_norm_fwd", "grouped_gemm"]
    assert regs[0].verdict == "slower" and "time slower" in regs[0].reasons[0]
    assert any("spills" in r for r in regs[1].reasons)
    assert report.variants[: len(regs)] == regs  # worst first
    assert report.counts["new"] == 1 and report.counts["not-run"] == 1  # its test did not run
    t = regs[0].row("time.median")
    assert t.regression and t.ci and t.ci[0] > 0.1  # the interval of a +12% change
    assert "epilogue" in regs[0].summary


def test_headline_places_carry_no_internal_ids_or_moves_that_read_alike(tmp_path):
    """A multi-kernel callable's timing is keyed "callable:<hash>": its row shows no such id; a
    metric whose two values print alike ("0.1 -> 0.1") is no "what moved"."""
    from kperf_ci.report import render_markdown

    base, cur = _pair(
        {"registers": 32, "analysis.epilogue_fraction": 0.10001},
        {"registers": 40, "analysis.epilogue_fraction": 0.10004},
        config="callable:311ceb2d",
    )
    report = build_report(cur, base, compare_runs(base, cur))
    (v,) = report.variants
    assert v.shown_config == "" and v.key.config == "callable:311ceb2d"
    assert v.summary == "registers 32 -> 40", v.summary
    text = render_markdown(report)
    assert "callable:" not in text and "epilogue" not in text
    write_site(report, tmp_path, jobs=1)
    index = (tmp_path / "index.html").read_text(encoding="utf-8")
    table = index.split('id="variants"')[1].split("</table>")[0]
    assert "callable:" not in re.sub(r'data-text="[^"]*"', "", table)  # the filter still finds it


def test_static_mode_verdicts_are_worse_better_unchanged():
    base, cur = _pair({"registers": 32, "spills": 0}, {"registers": 40, "spills": 0})
    report = build_report(cur, base, compare_runs(base, cur))
    (v,) = report.variants
    assert v.verdict == "worse" and v.regression  # +25% registers > +10%
    assert v.row("registers").verdict == "worse" and v.row("spills").verdict == "same"
    base, cur = _pair({"registers": 40}, {"registers": 32})
    (v,) = build_report(cur, base, compare_runs(base, cur)).variants
    assert v.verdict == "better" and not v.regression


def test_incomparable_machines_are_shown_not_judged():
    base, cur = _pair({"time.median": 1.0}, {"time.median": 2.0}, samples=[1.0, 1.1, 0.9])
    cur = RunRecord(replace(cur.info, fingerprint=Fingerprint(gpu="NVIDIA A100")), cur.results)
    base = RunRecord(replace(base.info, fingerprint=Fingerprint(gpu="NVIDIA H100")), base.results)
    report = build_report(cur, base, compare_runs(base, cur))
    (v,) = report.variants
    assert not v.regression
    assert v.row("time.median").verdict == "n/a"
    assert v.verdict == "inconclusive"
    assert any("GPU" in n for n in report.notes) and any("GPU" in n for n in v.notes)
    assert "gpu" in report.fingerprints_differ


def test_rematched_specialization_is_one_variant():
    base = RunRecord(make_info("b"), [make_result("k", spec="fp32, n%16", registers=32)])
    cur = RunRecord(make_info("c"), [make_result("k", spec="fp32", registers=48)])
    report = build_report(cur, base, compare_runs(base, cur))
    (v,) = report.variants
    assert v.base is not None and v.cur is not None
    assert v.regression and any("specialization" in n for n in v.notes)


def test_without_comparison_or_baseline():
    bases, cur = synthetic_runs(12)
    plain = build_report(cur, bases[-1])
    assert {v.verdict for v in plain.variants} <= {
        "slower",
        "faster",
        "unchanged",
        "new",
        "removed",
        "inconclusive",
    }
    assert plain.regressions == []
    alone = build_report(cur, None)
    assert {v.verdict for v in alone.variants} == {"new"}
    assert alone.verdict_line == "no baseline to compare with"


# ------------------------------------------------------------------------------- plots


@pytest.mark.parametrize("timing", ["slower", "faster", "unchanged", "inconclusive"])
def test_a_variants_verdict_is_the_timing_verdict_its_time_row_was_decided_by(timing):
    """The row keeps the samples' verdict, and the variant's verdict is that verdict, not the
    row's word (worse / better / same / inconclusive) decoded back."""
    from types import SimpleNamespace

    from kperf_ci.report.build import _apply_change_to_row, plain_verdict
    from kperf_ci.report.view import MetricRow

    r = MetricRow("time.median", "ms", "time", "lower", 1.0, 1.1, "worse")
    ch = SimpleNamespace(base=1.0, current=1.1, direction="worse", verdict=timing, rel=0.1, ci=None)
    ch.threshold, ch.regression, ch.reason = 0.05, timing == "slower", ""
    _apply_change_to_row(ch, r)
    assert r.timing == timing
    assert plain_verdict(make_result("k"), make_result("k"), [r]) == timing


def test_plots_escape_text_and_skip_missing_data():
    assert plots.distribution_svg([], []) is None
    assert plots.history_svg([("a", 1.0)]) is None
    assert plots.stacked_bars_svg([("baseline", [])]) is None
    assert plots.gantt_svg([]) is None
    svg = plots.stacked_bars_svg([(HOSTILE, [(HOSTILE, 1.0)])])
    assert "<script" not in svg and "&lt;script&gt;" in svg
    svg = plots.history_svg([(HOSTILE, 1.0), ("b", 2.0), ("c", 1.5)], change_points=[1])
    assert "<script" not in svg and svg.count('class="changepoint"') == 1


def test_a_value_near_the_largest_float_gets_an_axis_not_an_overflow():
    """Found by tests/test_fuzz_cli.py: a stored region.loop0.cycles of 1.797693134362316e+308
    ended `kperf report` in "internal error ... OverflowError: int too large to convert to
    float" (plots.py): the tick step was an int (10 ** 307 * 5) and the last tick, past the
    largest float, could not be placed."""
    big = 1.797693134362316e308
    ticks = plots.nice_ticks(0, big)
    assert ticks and all(isinstance(t, float) and math.isfinite(t) for t in ticks)
    assert plots.stacked_bars_svg([("head", [("loop0", big)])], unit="cycles") is not None


def test_distribution_keeps_outliers_off_axis():
    base = [1.0 + 0.001 * i for i in range(100)] + [50.0]  # one preempted call
    svg = plots.distribution_svg(base, base)
    assert "1 off-axis" in svg
    ticks = [float(t) for t in re.findall(r'class="tick"[^>]*>([\d.]+)<', svg)]
    assert max(ticks) < 2  # the axis is the bulk of the data, not 1..50


def test_distribution_marks_the_packages_median_of_an_even_count():
    """An even count of samples: the median line is sample_stats.median's (the mean of the middle
    two), the number the tables show; the hand-written sorted(x)[n // 2] it replaced marked the
    upper one (4 and 40 here)."""
    svg = plots.distribution_svg([10.0, 20.0, 30.0, 40.0], [1.0, 2.0, 3.0, 4.0])
    assert re.findall(r"<title>(median [^<]*)</title>", svg) == ["median 25 ms", "median 2.5 ms"]


def test_gantt_thins_huge_traces():
    lanes = [(f"SM {i}", [(j * 10.0, j * 10.0 + 9, "CTA") for j in range(300)]) for i in range(132)]
    svg = plots.gantt_svg(lanes, max_bars=5000)
    assert svg.count("<rect") <= 5000 + 132  # rounding: at most one extra bar per lane
    assert "every 8th shown" in svg


# ------------------------------------------------------------------------------- sections


def test_region_segments_stack_parts_not_containers():
    _b, cur = _pair({}, {})
    r = cur.results[0]
    r.metrics += [
        Metric("region.kernel.cycles", 1000, "cycles", "region"),
        Metric("region.body.cycles", 900, "cycles", "region"),
        Metric("region.loop0.cycles", 700, "cycles", "region"),
        Metric("region.prologue.cycles", 100, "cycles", "region"),
        Metric("region.epilogue.cycles", 100, "cycles", "region"),
        Metric("region.epilogue.fraction", 0.1, "fraction", "region"),
    ]
    segs, unit = region_segments(r)
    assert unit == "cycles"
    assert segs == [("prologue", 100.0), ("loop0", 700.0), ("epilogue", 100.0), ("other", 100.0)]


def test_asm_diff_ignores_addresses():
    a = "/*0000*/ MOV R1, c[0x0][0x28] ; /* 0x000fe40000000f00 */\n/*0010*/ EXIT ;\n"
    b = a.replace("/*0010*/ EXIT", "/*0010*/ FFMA R2, R3, R4 ;\n/*0020*/ EXIT")
    d = asm_diff(a, b, "SASS")
    assert d["added"] == 1 and d["removed"] == 0
    assert [line for cls, line in d["lines"] if cls == "add"] == ["+FFMA R2, R3, R4 ;"]
    same = asm_diff(a, a.replace("/*0010*/", "/*0020*/"), "SASS")
    assert same["identical"]
    assert asm_diff(None, b, "SASS") is None


# ------------------------------------------------------------------------------- site + CLI


def test_site_is_self_contained(tmp_path):
    bases, cur = synthetic_runs(20, hostile_name=HOSTILE)
    cur.results[5].artifacts["trace"] = json.dumps({"traceEvents": []})
    report = build_report(cur, bases[-1], compare_runs(bases[-1], cur))
    index = write_site(report, tmp_path, jobs=1)
    pages = [index, *sorted((tmp_path / "k").glob("*.html"))]
    assert len(pages) == 1 + len(report.variants)
    for p in pages:
        html = p.read_text(encoding="utf-8")
        assert 'http-equiv="Content-Security-Policy" content="default-src &#39;none&#39;;' in html
        # No external resource of any kind: only inline CSS/JS/SVG and relative links.
        assert not re.search(r"""(?:src|href)=["']?(?:https?:)?//""", html), p
        assert "<script>alert(1)" not in html
    assert (tmp_path / "k" / f"{cur.results[5].key.id}.current.trace.json").exists()


def test_parallel_and_serial_sites_are_identical(tmp_path):
    bases, cur = synthetic_runs(90)
    report = build_report(cur, bases[-1], compare_runs(bases[-1], cur), generated_at="fixed")
    write_site(report, tmp_path / "a", jobs=1)
    write_site(report, tmp_path / "b", jobs=2)
    for p in sorted((tmp_path / "a").rglob("*.html")):
        assert p.read_bytes() == (tmp_path / "b" / p.relative_to(tmp_path / "a")).read_bytes(), p


@pytest.fixture
def dbs(tmp_path):
    bases, cur = synthetic_runs(16, history=7)
    for b in bases:
        store.save_run(tmp_path / "base.db", b.info, b.results)
    store.save_run(tmp_path / "run.db", cur.info, cur.results)
    return tmp_path


def _kperf(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_cli_html_with_history(dbs):
    r = _kperf(
        "report", "--db", str(dbs / "run.db"), "--baseline", str(dbs / "base.db"), "-o", str(dbs / "site")
    )
    assert r.exit_code == 0, r.output
    assert "3 regressed kernels" in r.output
    pages = list((dbs / "site" / "k").glob("*.html"))
    assert len(pages) == 17
    with_history = [p for p in pages if "time.median over 9 runs" in p.read_text(encoding="utf-8")]
    assert len(with_history) >= 10  # 8 baseline runs + this one, for every variant still there
    timeline = [p for p in pages if "<h3>CTAs per SM" in p.read_text(encoding="utf-8")]
    assert len(timeline) == 1


def test_cli_markdown_and_summary(dbs, tmp_path):
    common = ["report", "--db", str(dbs / "run.db"), "--baseline", str(dbs / "base.db")]
    r = _kperf(*common, "--format", "markdown", "--link", "https://ci.example/r/")
    assert r.exit_code == 0 and r.output.startswith("<!-- kperf-report -->")
    assert "https://ci.example/r/k/" in r.output
    out = tmp_path / "out"
    out.mkdir()
    r = _kperf(*common, "--format", "summary", "-o", str(out))
    assert r.exit_code == 0
    assert "3 regressed kernels" in (out / "summary.md").read_text(encoding="utf-8")


def test_cli_baseline_defaults_to_previous_run_in_same_db(tmp_path, monkeypatch):
    for key in [k for k in os.environ if k.startswith("KPERF_")]:
        monkeypatch.delenv(key)
    (tmp_path / "pyproject.toml").write_text("[tool.kperf]\n")  # no baseline configured
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "run.db"
    store.save_run(db, make_info("old", started_at="2026-01-01T00:00:00+00:00"), [make_result(registers=32)])
    store.save_run(db, make_info("new", started_at="2026-01-02T00:00:00+00:00"), [make_result(registers=64)])
    r = _kperf("report", "--db", str(db), "--baseline", str(tmp_path / "missing.db"), "--format", "summary")
    assert r.exit_code == 0, r.output
    assert "1 regressed kernel" in r.output and "old" in r.output
    lone = tmp_path / "lone.db"
    store.save_run(lone, make_info("only"), [make_result(registers=32)])
    r = _kperf("report", "--db", str(lone), "--format", "summary")
    assert r.exit_code == 0 and "no baseline" in r.output


def test_cli_bad_database_is_one_line(tmp_path):
    bad = tmp_path / "bad.db"
    bad.write_text("not a database")
    r = CliRunner().invoke(main, ["report", "--db", str(bad)])
    assert r.exit_code == 2
    assert "not a SQLite database" in r.output and "Traceback" not in r.output


def test_timelines_json_npz_and_broken():
    bases, cur = synthetic_runs(4)
    report = build_report(cur, bases[-1])
    r = cur.results[0]
    r.artifacts["timeline"] = timeline_blob(num_sms=4, ctas=10)
    lanes = gantt_lanes(_timeline(report, "current", r))
    assert [lab for lab, _ in lanes] == ["SM 0", "SM 1", "SM 2", "SM 3"]
    assert sum(len(b) for _, b in lanes) == 10
    del r.artifacts["timeline"]
    r.artifacts["timeline.npz"] = timeline_npz(num_sms=4, ctas=10)  # bytes, as captured
    npz_lanes = gantt_lanes(_timeline(report, "current", r))
    assert sum(len(b) for _, b in npz_lanes) == 10
    # Same launch, same CTA spans (to float rounding), whichever form it was stored in.
    assert [round(s, 2) for _, bars in npz_lanes for s, _e, _ in bars] == [
        round(s, 2) for _, bars in lanes for s, _e, _ in bars
    ]
    r.artifacts["timeline.npz"] = "{not json"
    assert _timeline(report, "current", r) is None  # a broken artifact costs its chart only


def test_npz_timeline_read_from_the_database(dbs):
    """load_run decodes blobs as text, which binary npz does not survive: the report reads the
    bytes through store.load_blob, draws both Gantt charts and exports a Perfetto trace."""
    r = _kperf(
        "report", "--db", str(dbs / "run.db"), "--baseline", str(dbs / "base.db"), "-o", str(dbs / "s")
    )
    assert r.exit_code == 0, r.output
    (page,) = [
        p for p in (dbs / "s" / "k").glob("*.html") if "<h3>CTAs per SM" in p.read_text(encoding="utf-8")
    ]
    html = page.read_text(encoding="utf-8")
    assert html.count('class="chart gantt"') == 2  # baseline (JSON) and current (npz)
    trace = next((dbs / "s" / "k").glob("*.trace.json"))
    assert f'href="{trace.name}"' in html
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e.get("ph") == "X" for e in events)
