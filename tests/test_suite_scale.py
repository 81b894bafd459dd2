"""Results at suite scale (issue 15): one compiled kernel listed once however many tests reach it,
one regression count in compare / report / comment / show, `kperf show` compact by default,
specializations told apart, and findings that fit a small grid, ranked by cost and capped.

Runs are built with the store's own functions into tmp databases and read back, as the CLI does.
"""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner
from conftest import make_info
from fixtures.synthetic import grid_timeline

from kperf_ci import store
from kperf_ci.analysis import analyze_timeline
from kperf_ci.analysis.findings import ARTIFACT, Finding, capped, findings_to_json, ranked
from kperf_ci.analysis.waves import wave_quantization
from kperf_ci.cli import main
from kperf_ci.judge.compare import compare_runs
from kperf_ci.model import Metric, VariantKey, VariantResult
from kperf_ci.report import build_report, render_markdown, render_summary, write_site

SOURCE = "liger_kernel/ops/softmax.py::_softmax_forward_kernel"
SPEC = "X:*fp32:D, Y:*fp32:D, n_cols:i32:D, BLOCK_SIZE=1024"
CONFIG = "num_warps=4,num_stages=3,num_ctas=1"
# the softmax kernel's two tests reach one compiled variant: one row of the tables
ROWS = " in 3 rows"
TESTS = (
    "test/transformers/test_softmax.py::test_liger_softmax[2-128-1024]",
    "test/transformers/test_softmax.py::test_liger_softmax_functional[2-128-1024]",
)


def _variant(
    kernel: str,
    test: str,
    *,
    source: str = SOURCE,
    spec: str = SPEC,
    registers: float = 32,
    sass: str = "aaaa",
    findings: list[Finding] | None = None,
) -> VariantResult:
    r = VariantResult(
        key=VariantKey(kernel=kernel, arch="sm_90", spec=spec, config=CONFIG, test=test, source=source),
        metrics=[Metric("registers", registers, "count"), Metric("spills", 0.0, "bytes")],
        sass_hash=sass,
    )
    if findings is not None:
        r.artifacts[ARTIFACT] = findings_to_json(findings)
    return r


def _runs(tmp_path, *, regress: bool = True):
    """A baseline and a current run: the softmax kernel reached through two tests (two stored
    variants of one compiled kernel), a layernorm kernel, an add kernel. In the current run the
    softmax kernel (both tests) and the layernorm kernel regress on registers."""
    cur_regs = 64 if regress else 32
    base = [
        _variant("liger_softmax", TESTS[0]),
        _variant("liger_softmax_functional", TESTS[1]),
        _variant("layer_norm", "t.py::test_ln", source="ln.py::_ln_fwd", sass="bbbb"),
        _variant("add", "t.py::test_add", source="add.py::_add", sass="cccc"),
    ]
    cur = [
        _variant("liger_softmax", TESTS[0], registers=cur_regs, sass="dddd"),
        _variant("liger_softmax_functional", TESTS[1], registers=cur_regs, sass="dddd"),
        _variant("layer_norm", "t.py::test_ln", source="ln.py::_ln_fwd", registers=cur_regs, sass="eeee"),
        _variant("add", "t.py::test_add", source="add.py::_add", sass="cccc"),
    ]
    store.save_run(tmp_path / "base.db", make_info("base"), base)
    store.save_run(tmp_path / "run.db", make_info("cur"), cur)
    return store.load_run(tmp_path / "base.db"), store.load_run(tmp_path / "run.db", artifacts=True)


def _kperf(tmp_path, monkeypatch, *args: str, code: int = 0) -> str:
    monkeypatch.chdir(tmp_path)  # no pyproject.toml: only what the arguments say
    r = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert r.exit_code == code, r.output
    return " ".join(r.output.split())  # rich may wrap long cells


# ------------------------------------------------------------------------- one kernel, once


def test_two_tests_reaching_one_kernel_list_it_once_with_both_tests(tmp_path, monkeypatch):
    base, cur = _runs(tmp_path)
    assert len(cur.results) == 4  # storage keeps a variant per test
    comparison = compare_runs(base, cur)
    report = build_report(cur, base, comparison)
    softmax = [v for v in report.variants if v.key.source == SOURCE]
    assert len(softmax) == 1 and len(report.variants) == 3
    (v,) = softmax
    assert sorted(v.tests) == sorted(TESTS) and v.members == 2
    assert sorted(v.names) == ["liger_softmax", "liger_softmax_functional"]

    comment = render_markdown(report)
    rows = [ln for ln in comment.splitlines() if "\\_softmax" in ln or "liger\\_softmax" in ln]
    assert len(rows) == 1 and "2 tests" in rows[0]
    assert f"4 variants of 3 kernels{ROWS}" in comment

    site = tmp_path / "site"
    write_site(report, site, jobs=1)
    index = (site / "index.html").read_text()
    assert index.count(f'<a href="{v.page}">') == 1 and "2 tests" in index  # one table row
    page = (site / v.page).read_text()
    assert all(t in page for t in TESTS) and "liger_softmax_functional" in page

    out = _kperf(tmp_path, monkeypatch, "compare", "--db", "run.db", "--baseline", "base.db", code=1)
    assert out.count("liger_softmax") == 1  # one row: the kernel with the 2 tests that reach it
    assert re.search(r"liger_softmax │ sm_90 │ w4 s3 │ 2 │ registers │ 32 -> 64", out)

    shown = _kperf(tmp_path, monkeypatch, "show", "--db", "run.db", "--run", "cur")
    assert shown.count("liger_softmax") == 1 and f"4 variants of 3 kernels{ROWS}" in shown


def test_a_different_specialization_or_sass_is_another_kernel(tmp_path):
    fp16 = SPEC.replace("fp32", "fp16")
    cur = [
        _variant("liger_softmax", TESTS[0]),
        _variant("liger_softmax_functional", TESTS[1], spec=fp16),
        _variant("other_site", "t.py::x", source="other.py::_softmax_forward_kernel"),
    ]
    store.save_run(tmp_path / "run.db", make_info("cur"), cur)
    report = build_report(store.load_run(tmp_path / "run.db"), None)
    assert len(report.variants) == 3 and all(v.members == 1 for v in report.variants)


# ------------------------------------------------------------------------- one count


def test_the_regression_count_is_the_same_in_compare_report_comment_and_show(tmp_path, monkeypatch):
    base, cur = _runs(tmp_path)
    comparison = compare_runs(base, cur)
    # three metric rows regressed (registers of 3 variants), in two compiled kernels
    assert len(comparison.regressions) == 3 and comparison.regressed_kernels == 2
    report = build_report(cur, base, comparison)
    assert report.regressed_kernels == 2 and report.verdict_line == "2 regressed kernels"
    assert "## ❌ kperf: 2 regressed kernels" in render_markdown(report)
    assert "### Regressions (2 regressed kernels)" in render_markdown(report)
    assert "## ❌ kperf: 2 regressed kernels" in render_summary(report)
    args = ("--db", "run.db", "--baseline", "base.db")
    compared = _kperf(tmp_path, monkeypatch, "compare", *args, code=1)
    assert "2 regressed kernels (3 metric rows over threshold)" in compared
    assert '"regressed_kernels": 2' in _kperf(
        tmp_path, monkeypatch, "compare", *args, "--format", "json", code=1
    )
    shown = _kperf(tmp_path, monkeypatch, "show", "--run", "cur", *args)
    assert "2 regressed kernels (3 metric rows over threshold)" in shown
    assert shown.count("REGRESSION") == 2
    written = _kperf(tmp_path, monkeypatch, "report", *args, "-o", "rep", "--jobs", "1")
    assert f"(4 variants of 3 kernels{ROWS}; 2 regressed kernels)" in written


def test_no_regression_reads_alike_everywhere(tmp_path, monkeypatch):
    base, cur = _runs(tmp_path, regress=False)
    comparison = compare_runs(base, cur)
    assert comparison.regressed_kernels == 0 and not comparison.exit_code
    assert build_report(cur, base, comparison).verdict_line == "no regressions"
    shown = _kperf(tmp_path, monkeypatch, "show", "--run", "cur", "--db", "run.db", "--baseline", "base.db")
    assert "no regressions" in shown and "REGRESSION" not in shown


def test_removed_kernels_are_counted_in_kernels(tmp_path, monkeypatch):
    base = [_variant("liger_softmax", TESTS[0]), _variant("bwd", TESTS[0], source="s.py::_bwd")]
    base.append(_variant("bwd_f", TESTS[1], source="s.py::_bwd"))
    cur = [_variant("liger_softmax", TESTS[0]), _variant("liger_softmax_functional", TESTS[1])]
    store.save_run(tmp_path / "base.db", make_info("base"), base)
    store.save_run(tmp_path / "run.db", make_info("cur"), cur)
    b, c = store.load_run(tmp_path / "base.db"), store.load_run(tmp_path / "run.db")
    comparison = compare_runs(b, c)
    assert len(comparison.failing_removed) == 2 and comparison.removed_kernels == 1
    report = build_report(c, b, comparison)
    assert report.verdict_line == "1 removed kernel"
    out = _kperf(tmp_path, monkeypatch, "compare", "--db", "run.db", "--baseline", "base.db", code=1)
    assert out.endswith("1 removed kernel, 0 improvements")


# ------------------------------------------------------------------------- show


def test_show_is_compact_by_default_and_details_on_request(tmp_path, monkeypatch):
    results = [  # a variant per test: the marker names it after its test (k1, k1_1, k1_2)
        _variant(f"k{i}" + (f"_{j}" if j else ""), f"t.py::t{i}[{j}]", source=f"k.py::_k{i}", sass=f"{i}")
        for i in range(6)
        for j in range(3)  # every kernel reached by three tests
    ]
    store.save_run(tmp_path / "run.db", make_info("cur"), results)
    compact = CliRunner()
    monkeypatch.chdir(tmp_path)
    short = compact.invoke(main, ["show", "--db", "run.db", "--run", "cur"]).output.splitlines()
    long = compact.invoke(main, ["show", "--db", "run.db", "--run", "cur", "--details"]).output.splitlines()
    # the run line, the header, one line per kernel, the count line
    assert len(short) == 1 + 1 + 6 + 1, short
    kernel_lines = [ln for ln in short if re.match(r"\s*k\d ", ln)]
    assert len(kernel_lines) == 6 and all(re.search(r"\b3\b", ln) for ln in kernel_lines)
    assert "18 variants of 6 kernels in 6 rows" in short[-1] and "--details" in short[-1]
    # --details: today's output, every variant (18 of them) with its metric table
    assert sum("id=" in ln for ln in long) == 18 and sum(ln.split()[:1] == ["registers"] for ln in long) == 18
    assert len(long) > 5 * len(short)
    one = compact.invoke(main, ["show", "--db", "run.db", "--kernel", "k1_2"]).output
    assert "k1" in one and "k2" not in one and "3 variants of 1 kernel in 1 row;" in one


def test_show_lists_the_costliest_findings_up_to_the_setting(tmp_path, monkeypatch):
    found = _findings([("a", 100.0), ("b", 5000.0), ("c", 300.0), ("d", None)])
    store.save_run(tmp_path / "run.db", make_info("cur"), [_variant("k", "t.py::t", findings=found)])
    out = _kperf(tmp_path, monkeypatch, "show", "--db", "run.db", "--run", "cur")
    assert "b, c, a +1" in out and "the 3 costliest" in out
    monkeypatch.setenv("KPERF_FINDINGS_PER_KERNEL", "1")
    assert "b +3" in _kperf(tmp_path, monkeypatch, "show", "--db", "run.db", "--run", "cur")
    monkeypatch.setenv("KPERF_FINDINGS_PER_KERNEL", "0")
    out = _kperf(tmp_path, monkeypatch, "show", "--db", "run.db", "--run", "cur", code=2)
    assert "findings_per_kernel" in out and "positive" in out


# ------------------------------------------------------------------------- specializations


def test_specializations_that_read_alike_when_short_are_told_apart(tmp_path):
    long_tail = ", ".join(f"s{i}:i32" for i in range(30))
    cur = [
        _variant("k", "t.py::a", spec="x:*fp16:D, BLOCK=1024", sass="1"),
        _variant("k", "t.py::b", spec="x:*fp32:D, BLOCK=1024", sass="2"),
        _variant("j", "t.py::c", spec=f"x:*fp16:D, {long_tail}", sass="3"),
        _variant("j", "t.py::d", spec=f"x:*bf16:D, {long_tail}", sass="4"),
        _variant("m", "t.py::e", spec="x:*fp16:D, BLOCK=64", sass="5"),
    ]
    store.save_run(tmp_path / "run.db", make_info("cur"), cur)
    report = build_report(store.load_run(tmp_path / "run.db"), None)
    by_kernel: dict[str, list[str]] = {}
    for v in report.variants:
        by_kernel.setdefault(v.key.kernel, []).append(v.short_spec)
    assert len(set(by_kernel["k"])) == 2 and any("fp32" in s for s in by_kernel["k"])
    assert len(set(by_kernel["j"])) == 2 and any("x:*bf16:D" in s for s in by_kernel["j"])
    assert by_kernel["m"] == ["BLOCK=64"]  # nothing to tell apart: the short label as before
    comment = render_markdown(report)
    assert "x:\\*fp32:D" in comment and "x:\\*bf16:D" in comment


# ------------------------------------------------------------------------- findings


def test_a_grid_under_one_wave_is_too_little_work_not_a_wave_tail():
    # 16 CTAs of a layernorm on an H100: 8 CTAs of 8 warps per SM x 132 SMs = 1,056 slots
    found = {f.name: f for f in wave_quantization(16, num_warps=8, arch="sm_90")}
    fill = found["grid_fill"]
    assert fill.flagged and fill.value == pytest.approx(16 / 1056)
    assert "too little work to fill the GPU" in fill.explanation
    assert all(w in fill.suggestion for w in ("batch", "fuse", "split-K"))
    assert not found["wave_tail"].flagged and not found["wave_idle"].flagged
    assert not any("1056" in f.suggestion or "whole waves" in f.suggestion for f in found.values())
    # a grid over one wave still has a tail to trim, with the advice that fits it
    over = {f.name: f for f in wave_quantization(1100, num_warps=8, arch="sm_90")}
    assert over["wave_tail"].flagged and "whole waves" in over["wave_tail"].suggestion
    assert "grid_fill" not in over
    # a grid that fills one wave but for a few slots is not flagged at all
    near = {f.name: f for f in wave_quantization(1000, num_warps=8, arch="sm_90")}
    assert not near["grid_fill"].flagged and not near["wave_tail"].flagged


def test_a_short_small_grid_from_its_timeline():
    """The launch of the issue: 16 CTAs of 2 us. Its cost is known and it is flagged as
    too little work; the measured tail is explained by the partial wave, not flagged again."""
    found = {f.name: f for f in analyze_timeline(grid_timeline([2000.0] * 16, num_sms=132), num_sms=132)}
    assert found["grid_fill"].flagged and found["grid_fill"].cost_ns > 1000
    assert not found["wave_tail_idle_measured"].flagged and not found["wave_tail"].flagged
    assert not any("whole waves" in f.suggestion for f in found.values())
    # the same grid with uneven CTAs: the measured tail is more than the partial wave explains
    uneven = analyze_timeline(grid_timeline([2000.0] * 15 + [40000.0], num_sms=132), num_sms=132)
    tail = next(f for f in uneven if f.name == "wave_tail_idle_measured")
    assert tail.flagged and "uneven" in tail.suggestion


def _findings(costs: list[tuple[str, float | None]]) -> list[Finding]:
    return [
        Finding(name, 0.5, "fraction", True, f"{name} explained", f"try {name}", cost_ns=cost)
        for name, cost in costs
    ]


def test_findings_rank_by_cost_and_cap_per_kernel():
    found = [
        Finding("ok", 0.1, "fraction", False, "fine"),
        *_findings([("small", 100.0), ("unknown", None), ("big", 9000.0), ("mid", 2000.0)]),
    ]
    assert [f.name for f in ranked(found)] == ["big", "mid", "small", "unknown", "ok"]
    shown, more = capped(found, 2)
    assert [f.name for f in shown] == ["big", "mid"] and more == 2
    # two findings with the same advice are one problem: one place under the cap
    twin = Finding("twin", 0.5, "fraction", True, "x", "try big", cost_ns=8000.0)
    shown, more = capped([*found, twin], 2)
    assert [f.name for f in shown] == ["big", "mid"] and more == 3


def test_reports_cap_findings_per_kernel_costliest_first(tmp_path):
    found = _findings([("a", 100.0), ("b", 5000.0), ("c", 300.0), ("d", 50.0)])
    cur = [_variant("k", "t.py::t", findings=found), _variant("j", "t.py::u", source="j.py::_j", sass="x")]
    store.save_run(tmp_path / "run.db", make_info("cur"), cur)
    run = store.load_run(tmp_path / "run.db", artifacts=(ARTIFACT,))
    report = build_report(run, None, findings_per_kernel=2)
    assert [f.name for _v, f in report.flagged_findings] == ["b", "c"] and report.flagged_total == 4
    comment = render_markdown(report)
    assert "### Analysis findings (4 flagged in 1 kernel; the 2 costliest per kernel listed)" in comment
    assert "_… 2 more flagged findings" in comment
    site = tmp_path / "site"
    write_site(report, site, jobs=1)
    index = (site / "index.html").read_text()
    assert (
        index.index(">b<") < index.index(">c<") and ">a<" not in index and "and 2 more on its page" in index
    )
    k = next(v for v in report.variants if v.key.kernel == "k")
    page = (site / k.page).read_text()
    order = [page.index(f'data-finding="{n}"') for n in "bcad"]
    assert order == sorted(order) and "costs ~5 µs per launch" in page
