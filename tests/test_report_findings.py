"""Intra-kernel findings in the reports: the ``findings`` artifact of the current run, stored in a
real run database, shown on the kernel pages and the summary (checked in headless Chromium, as
tests/test_report_html.py does) and in the PR comment and job summary.

The findings are real: kperf_ci.analysis.analyze_timeline on synthetic timelines. Only their
texts are made hostile where a test needs that.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from fixtures.sample import FINDINGS, synthetic_runs
from fixtures.synthetic import grid_timeline
from test_report_html import Browser, needs_chromium
from test_report_markdown import _check_details, _check_tables, _tables

from kperf_ci import store
from kperf_ci.analysis import analyze_timeline, to_metrics
from kperf_ci.analysis.findings import ARTIFACT, Finding, capped, findings_from_json, findings_to_json, ranked
from kperf_ci.cli import main
from kperf_ci.judge.compare import compare_runs
from kperf_ci.model import RunRecord
from kperf_ci.report import build_report, render_markdown, render_summary
from kperf_ci.report.build import load_findings
from kperf_ci.report.markdown import MAX_FINDINGS

HOSTILE = "<script>alert('finding')</script>"
HOSTILE_SUGGESTION = "<img src=x onerror=alert(2)> | *not bold* @octocat"


def _tail_findings() -> list[Finding]:
    """140 equal CTAs on 132 SMs: a second wave of 8, so the wave findings are flagged."""
    return analyze_timeline(grid_timeline([9000.0] * 140, num_sms=132), num_sms=132)


def _clean_findings() -> list[Finding]:
    return analyze_timeline(grid_timeline([9000.0] * 264, num_sms=132), num_sms=132)


def _hostile(findings: list[Finding]) -> list[Finding]:
    """The wave_tail finding with markup in both texts (the rest unchanged)."""
    return [
        replace(
            f, explanation=f"{HOSTILE} {f.explanation}", suggestion=f"{HOSTILE_SUGGESTION} {f.suggestion}"
        )
        if f.name == "wave_tail"
        else f
        for f in findings
    ]


def _with_findings(run: RunRecord, index: int, findings: list[Finding], *, touched: bool = True) -> None:
    """Give the run's variant ``index`` these findings, as the GPU plugin stores them; with
    ``touched`` its compiled code also differs from the baseline's (a kernel the change touched,
    whose findings a PR comment lists)."""
    r = run.results[index]
    r.artifacts[ARTIFACT] = findings_to_json(findings)
    r.metrics[:] = [m for m in r.metrics if m.kind != "analysis"] + to_metrics(findings)
    if touched:
        r.sass_hash = f"changed-{index}"


def _save(root: Path, bases: list[RunRecord], cur: RunRecord) -> tuple[Path, Path]:
    for b in bases:
        store.save_run(root / "base.db", b.info, b.results)
    store.save_run(root / "run.db", cur.info, cur.results)
    return root / "run.db", root / "base.db"


def _kperf(*args: str):
    r = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r


# ------------------------------------------------------------------------------- view


def test_sample_findings_are_real_analysis_output():
    bases, cur = synthetic_runs(12)
    by_index = {i: r for i, r in enumerate(cur.results)}
    for i, kind in FINDINGS.items():
        r = by_index[i]
        found = findings_from_json(r.artifacts[ARTIFACT])
        assert found and all(isinstance(f, Finding) for f in found)
        # The numbers are stored as analysis.* metrics too, one per finite finding.
        names = {m.name for m in r.metrics if m.kind == "analysis"}
        assert {f"analysis.{f.name}" for f in found if f.value == f.value} == names, kind
        flagged = [f for f in found if f.flagged]
        assert all(f.suggestion for f in flagged)
        assert bool(flagged) == (kind != "clean"), kind
    static_bases, static_cur = synthetic_runs(12, gpu=False)
    assert all(ARTIFACT not in r.artifacts for r in static_cur.results)  # static mode: no timelines


def test_report_view_flagged_first_and_new_since_baseline(tmp_path):
    bases, cur = synthetic_runs(12)
    _with_findings(bases[-1], 0, _clean_findings())
    _with_findings(cur, 0, _tail_findings())
    run_db, base_db = _save(tmp_path, bases, cur)
    # Only the findings artifact is read (what `kperf report --format markdown` asks for).
    cur_l = store.load_run(run_db, artifacts=(ARTIFACT,))
    base_l = store.load_run(base_db, artifacts=(ARTIFACT,))
    assert all(set(r.artifacts) <= {ARTIFACT} for r in cur_l.results)
    assert any(r.artifacts for r in cur_l.results)
    report = build_report(cur_l, base_l, compare_runs(base_l, cur_l))
    v = next(v for v in report.variants if v.id == cur.results[0].key.id)
    flags = [f.flagged for f in v.findings]
    assert flags == sorted(flags, reverse=True) and any(flags) and not all(flags)
    expected = {f.name for f in _tail_findings() if f.flagged}
    assert {f.name for f in v.flagged_findings} == expected
    assert all(v.is_new_flag(f) for f in v.flagged_findings)  # the baseline flagged none of them
    pairs = report.flagged_findings
    new = [vv.is_new_flag(f) for vv, f in pairs]
    assert new == sorted(new, reverse=True) and sum(new) >= len(expected)  # new flags lead
    # the summaries list the costliest findings of a kernel, at most findings_per_kernel of them
    assert [f for vv, f in pairs if vv is v] == v.top_findings(report.findings_per_kernel)
    costs = [f.cost_ns for f in v.flagged_findings]
    assert all(c is not None for c in costs) and costs == sorted(costs, reverse=True)
    # A variant flagged in both runs is not new.
    matmul = next(v for v in report.variants if v.id == cur.results[3].key.id)
    assert matmul.flagged_findings and not any(matmul.is_new_flag(f) for f in matmul.flagged_findings)


def test_malformed_findings_artifact_costs_only_its_section(caplog):
    bases, cur = synthetic_runs(10)
    cur.results[0].artifacts[ARTIFACT] = '{"not": "a list"'
    cur.results[2].artifacts[ARTIFACT] = json.dumps([{"name": "x"}])  # no value: not a finding
    report = build_report(cur, bases[-1], compare_runs(bases[-1], cur))
    for i in (0, 2):
        v = next(v for v in report.variants if v.id == cur.results[i].key.id)
        assert v.findings == []
    assert load_findings(cur.results[0]) is None
    assert "findings of" in caplog.text
    render_markdown(report)  # and the rest still renders


# ------------------------------------------------------------------------------- HTML in Chromium


@pytest.fixture(scope="module")
def browser():
    b = Browser()
    yield b
    b.close()


@pytest.fixture(scope="module")
def findings_site(tmp_path_factory):
    """A site made the way users make it: runs saved with store.save_run, then `kperf report`.
    Variant 0 of the current run carries tail findings whose wave_tail texts hold markup."""
    root = tmp_path_factory.mktemp("findings")
    bases, cur = synthetic_runs(12)
    _with_findings(bases[-1], 0, _tail_findings())
    _with_findings(cur, 0, _hostile(_tail_findings()))
    run_db, base_db = _save(root, bases, cur)
    _kperf("report", "--db", str(run_db), "--baseline", str(base_db), "-o", str(root / "site"))
    return root / "site", cur


def _text_visible(browser: Browser, selector: str, text: str) -> bool:
    """Whether an element matching ``selector`` shows ``text`` on screen (innerText honours CSS)."""
    return browser.eval(
        f"[...document.querySelectorAll({json.dumps(selector)})].some(e => e.offsetParent !== null"
        f" && e.getBoundingClientRect().height > 0 && e.innerText.includes({json.dumps(text)}))"
    )


@needs_chromium
def test_kernel_page_shows_flagged_findings_with_explanation_and_suggestion(browser, findings_site):
    site, cur = findings_site
    r = cur.results[0]
    page = site / "k" / f"{r.key.id}.html"
    browser.errors.clear()
    browser.dialogs.clear()
    browser.open(page)
    assert browser.errors == [] and browser.dialogs == []
    expected = [f for f in findings_from_json(r.artifacts[ARTIFACT])]
    flagged = [f for f in ranked(expected) if f.flagged]  # all of them on the page, costliest first
    shown = browser.eval(
        "[...document.querySelectorAll('#findings ~ .finding.flagged')].map(e => e.dataset.finding)"
    )
    assert shown == [f.name for f in flagged]
    for f in flagged:
        sel = f'.finding.flagged[data-finding="{f.name}"]'
        assert _text_visible(browser, f"{sel} .explanation", f.explanation), f.name
        assert _text_visible(browser, f"{sel} .suggestion", f.suggestion), f.name
        assert _text_visible(browser, f"{sel} .fhead", "flagged"), f.name
    ok = browser.eval("[...document.querySelectorAll('ul.findings-ok li')].map(e => e.dataset.finding)")
    assert ok == [f.name for f in expected if not f.flagged]
    # Flagged ones come before the compact list, and the header links to them.
    assert browser.eval(
        "document.querySelector('.finding.flagged').compareDocumentPosition("
        "document.querySelector('ul.findings-ok')) & Node.DOCUMENT_POSITION_FOLLOWING"
    )
    link = browser.eval("document.getElementById('findings-link').textContent")
    assert link == f"{len(flagged)} findings flagged"
    # Markup in a finding's text is shown as text: no script element, no dialog, no image load.
    assert _text_visible(browser, '.finding[data-finding="wave_tail"] .explanation', HOSTILE)
    assert _text_visible(browser, '.finding[data-finding="wave_tail"] .suggestion', HOSTILE_SUGGESTION)
    assert browser.eval("document.scripts.length") == 0
    assert browser.eval("document.querySelectorAll('.finding img, .finding script').length") == 0
    assert browser.dialogs == [] and browser.errors == []
    assert [u for u in browser.requests if not u.startswith("file://")] == []


@needs_chromium
def test_summary_names_variants_with_flagged_findings(browser, findings_site):
    site, cur = findings_site
    browser.errors.clear()
    browser.open(site / "index.html")
    assert browser.errors == [] and browser.dialogs == []
    items = browser.eval(
        "[...document.querySelectorAll('#findings-summary li')].map(li => ({"
        " href: li.querySelector('a').getAttribute('href'),"
        " names: [...li.querySelectorAll('.badge.flag')].map(b => b.textContent)}))"
    )
    by_href = {i["href"]: i["names"] for i in items}
    for r in cur.results:
        found = findings_from_json(r.artifacts[ARTIFACT]) if ARTIFACT in r.artifacts else []
        names = [f.name for f in capped(found, 3)[0]]  # the per-kernel cap's default
        href = f"k/{r.key.id}.html#findings"
        assert by_href.get(href, []) == names, r.key.kernel
    # The table counts them per row and sorts on the count.
    col = browser.eval(
        "[...document.querySelectorAll('#variants th')].findIndex(th => th.textContent === 'findings')"
    )
    assert col > 0
    cell = browser.eval(
        f"[...document.querySelectorAll('#variants tbody tr')].find(tr => tr.cells[0].querySelector('a')"
        f".getAttribute('href') === 'k/{cur.results[0].key.id}.html').cells[{col}].textContent.trim()"
    )
    n0 = sum(f.flagged for f in findings_from_json(cur.results[0].artifacts[ARTIFACT]))
    assert cell == f"{n0} flagged"
    # Typing a finding's name in the filter finds the kernels that have it flagged.
    browser.eval(
        "(() => { const e = document.getElementById('f-text'); e.value = 'memory_exposed_fraction';"
        " e.dispatchEvent(new Event('input')); })()"
    )
    visible = browser.eval(
        "[...document.querySelectorAll('#variants tbody tr')].filter(r => !r.hidden)"
        ".map(r => r.cells[0].querySelector('a').textContent)"
    )
    assert visible == ["matmul_kernel"]
    assert browser.eval("document.body.textContent.includes('alert(')") is False  # texts stay on k/ pages


# ------------------------------------------------------------------------------- markdown


def _report(bases: list[RunRecord], cur: RunRecord, link: str | None = "https://ci.example/r/"):
    return build_report(cur, bases[-1], compare_runs(bases[-1], cur), link=link)


def _findings_table(text: str) -> list[str]:
    start = text.index("### Analysis findings")
    return _tables(text[start:])[0]


def test_markdown_lists_flagged_findings_escaped():
    bases, cur = synthetic_runs(12)
    _with_findings(cur, 0, _hostile(_tail_findings()))
    report = _report(bases, cur)
    n = len(report.pr_findings)
    text = render_markdown(report)
    _check_tables(text)
    _check_details(text)
    assert f"### Analysis findings ({report.pr_flagged_total} flagged in " in text
    # After the regressions, before the verdict sections.
    assert text.index("### Regressions") < text.index("### Analysis findings") < text.index("<details")
    rows = _findings_table(text)[2:]
    assert len(rows) == min(n, MAX_FINDINGS)
    wave = next(r for r in rows if "| wave\\_tail |" in r)
    assert "add\\_kernel" in wave and "#findings" in wave  # kernel, linked to its page's section
    assert "(flagged below " in wave  # the value with its threshold
    assert "&lt;script&gt;alert(&#x27;finding&#x27;)&lt;/script&gt;" in wave  # explanation, as text
    assert "&lt;img src=x onerror=alert(2)&gt; \\| \\*not bold\\* @\u2060octocat" in wave  # suggestion
    assert "<script" not in text and "<img" not in text
    summary = render_summary(report)
    _check_tables(summary)
    assert "### Analysis findings" in summary and "<script" not in summary
    assert len(_findings_table(summary)) - 2 == min(n, MAX_FINDINGS // 2)


def test_markdown_findings_are_capped_with_a_count():
    bases, cur = synthetic_runs(40)
    for i in range(8, 30):  # 22 more variants with a wave tail: far more flags than the cap
        _with_findings(cur, i, _tail_findings())
    report = _report(bases, cur)
    n = report.pr_flagged_total  # the notes count every flagged finding, over the per-kernel cap too
    assert len(report.pr_findings) > MAX_FINDINGS + 5 and n > len(report.pr_findings)
    text = render_markdown(report)
    _check_tables(text)
    assert len(_findings_table(text)) - 2 == MAX_FINDINGS
    assert f"_… {n - MAX_FINDINGS} more flagged findings; see the full report._" in text
    summary = render_summary(report)
    assert f"{n - MAX_FINDINGS // 2} more flagged findings" in summary
    # Under a tight size limit the comment stays within it, well-formed.
    for limit in (2000, 4000, 8000):
        small = render_markdown(report, max_chars=limit)
        assert len(small) <= limit
        _check_tables(small)
        _check_details(small)
        if "### Analysis findings" in small:
            rows = len(_findings_table(small)) - 2
            assert re.search(rf"_… {n - rows} more flagged findings", small)
        else:
            assert "analysis findings" in small  # named among what was left out


def test_markdown_has_no_findings_section_when_nothing_is_flagged():
    bases, cur = synthetic_runs(12)
    for r in cur.results:
        r.artifacts.pop(ARTIFACT, None)
    _with_findings(cur, 0, _clean_findings())  # findings, none flagged
    report = _report(bases, cur)
    assert report.variants and not report.flagged_findings
    assert any(v.findings for v in report.variants)
    for text in (render_markdown(report), render_summary(report)):
        assert "Analysis findings" not in text and "flagged" not in text
    # And no findings artifact at all (static mode).
    bases, cur = synthetic_runs(12, gpu=False)
    assert "Analysis findings" not in render_markdown(_report(bases, cur))


def test_cli_markdown_reads_findings_from_the_database(tmp_path):
    bases, cur = synthetic_runs(12)
    run_db, base_db = _save(tmp_path, bases, cur)
    common = ["report", "--db", str(run_db), "--baseline", str(base_db)]
    comment = _kperf(*common, "--format", "markdown").output
    summary = _kperf(*common, "--format", "summary").output
    report = _report(bases, cur)  # the comment lists the kernels the change touched
    expected = sum(
        f.flagged
        for r in cur.results
        if ARTIFACT in r.artifacts
        for f in findings_from_json(r.artifacts[ARTIFACT])
    )
    assert expected > report.pr_flagged_total > 0
    untouched = expected - report.pr_flagged_total
    for text in (comment, summary):
        assert f"### Analysis findings ({report.pr_flagged_total} flagged in " in text
        assert "memory\\_exposed\\_fraction" in text
        assert f"_{untouched} more flagged findings on kernels this change did not touch" in text


def test_a_pr_comment_lists_no_finding_of_a_kernel_the_change_did_not_touch():
    """Findings that pre-date the change, on kernels it left alone (same verdict, same code),
    are not the change's: the comment and summary count them in one line; the HTML report, the
    full report, still lists them. A kernel whose code changed lists its findings."""
    bases, cur = synthetic_runs(12)
    for r in cur.results:
        r.artifacts.pop(ARTIFACT, None)
    i = next(i for i, r in enumerate(cur.results) if r.key.kernel == "add_kernel")
    _with_findings(cur, i, _tail_findings(), touched=False)
    report = _report(bases, cur)
    (v,) = [v for v in report.variants if v.findings]
    assert v.verdict == "unchanged" and not v.touched and v.flagged_findings
    n = len(v.flagged_findings)
    for text in (render_markdown(report), render_summary(report)):
        assert "### Analysis findings" not in text and "wave\\_tail" not in text
        assert f"_{n} more flagged findings on kernels this change did not touch" in text
    cur.results[i].sass_hash = "changed"  # the change recompiled it: its findings are listed
    report = _report(bases, cur)
    assert "### Analysis findings" in render_markdown(report) and "wave\\_tail" in render_markdown(report)


def test_cli_show_prints_flagged_findings(tmp_path):
    bases, cur = synthetic_runs(12)
    run_db, _ = _save(tmp_path, bases, cur)
    out = _kperf("show", "--db", str(run_db), "--kernel", "matmul_kernel", "--details").output
    (f,) = [f for f in findings_from_json(cur.results[3].artifacts[ARTIFACT]) if f.flagged]
    assert "findings: 1 of" in out
    flat = " ".join(out.split())  # rich wraps long lines
    assert f"[FLAG] {f.name}" in flat and " ".join(f.suggestion.split()) in flat
    clean = _kperf("show", "--db", str(run_db), "--kernel", "add_kernel", "--details").output
    assert "findings: 0 of" in clean and "[FLAG]" not in clean
