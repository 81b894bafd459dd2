"""The PR-comment markdown and the job summary: GitHub's limits, table syntax, escaping."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from fixtures.sample import synthetic_runs

from kperf_ci.judge.compare import compare_runs
from kperf_ci.report import build_report, render_markdown, render_summary
from kperf_ci.report.markdown import COMMENT_LIMIT, MARKER, md_escape

HOSTILE = "<script>alert(1)</script>"


def _report(n: int, *, gpu: bool = True, link: str | None = "https://ci.example/run/7/", **kw):
    bases, cur = synthetic_runs(n, gpu=gpu, **kw)
    return build_report(cur, bases[-1], compare_runs(bases[-1], cur), link=link)


def _split_row(line: str) -> list[str]:
    """Cells of a GFM table row: split on pipes that are not backslash-escaped."""
    assert line.startswith("|") and line.endswith("|"), line
    return [c.strip() for c in re.split(r"(?<!\\)\|", line[1:-1])]


def _tables(text: str) -> list[list[str]]:
    tables, cur = [], []
    for line in text.splitlines():
        if line.startswith("|"):
            cur.append(line)
        elif cur:
            tables.append(cur)
            cur = []
    if cur:
        tables.append(cur)
    return tables


def _check_tables(text: str) -> int:
    """Every table: a delimiter row, the same number of cells on every row. Returns the rows."""
    rows = 0
    for t in _tables(text):
        widths = {len(_split_row(line)) for line in t}
        assert len(widths) == 1, (widths, t[:3])
        assert all(re.fullmatch(r"-{3,}", c) for c in _split_row(t[1])), t[1]
        rows += len(t) - 2
    return rows


def _check_details(text: str) -> None:
    depth = 0
    for m in re.finditer(r"<(/?)details\b", text):
        depth += -1 if m.group(1) else 1
        assert depth >= 0
    assert depth == 0
    assert text.count("<summary>") == text.count("</summary>")


@pytest.fixture(scope="module")
def big():
    """2,000 variants: far more than fits in one comment."""
    return _report(2000)


def test_large_suite_fits_github_comment_limit(big):
    text = render_markdown(big)
    assert len(text) <= COMMENT_LIMIT < 65_536
    assert len(text) > COMMENT_LIMIT - 5_000  # the budget is used, not wasted
    assert text.startswith(MARKER + "\n")
    _check_details(text)
    assert _check_tables(text) > 100
    assert "comment size limit" in text  # cut with a note, not silently
    assert "full report" in text.lower()


@pytest.mark.parametrize("limit", [2000, 5000, 20_000])
def test_smaller_limits_are_respected_and_stay_well_formed(big, limit):
    text = render_markdown(big, max_chars=limit)
    assert len(text) <= limit
    _check_details(text)
    _check_tables(text)
    assert "## " in text  # the verdict survives any cut


def test_worst_first(big):
    text = render_markdown(big)
    regs = text.index("### Regressions")
    first_details = text.index("<details")
    assert regs < first_details
    order = [m.group(1) for m in re.finditer(r"<summary><b>([^<]+)</b>", text)]
    sections = ("Slower", "Inconclusive", "New", "Removed", "Not run here", "Faster", "Unchanged")
    expected = [t for t in sections if t in order]
    assert order == expected
    # Within the regressions, the planted 12% slowdown leads.
    first_row = _tables(text[regs:])[0][2]
    assert "softmax" in first_row and ("+11" in first_row or "+12" in first_row)


def test_escaping_keeps_tables_intact_and_text_literal():
    bases, cur = synthetic_runs(30, hostile_name=HOSTILE)
    # A kernel name and a config full of markdown and table syntax.
    evil = cur.results[-2]
    cur.results[-2] = replace(
        evil, key=replace(evil.key, kernel="a|b*c_[x](http://e.vil)`@octocat", config="num_warps=4 | x\ny")
    )
    report = build_report(cur, bases[-1], compare_runs(bases[-1], cur), link="https://ci.example/r/")
    for text in (render_markdown(report), render_summary(report)):
        _check_tables(text)
        _check_details(text)
        assert HOSTILE not in text and "<script" not in text
    text = render_markdown(report)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    # the URL is broken with a word joiner: GitHub's autolinker would make it a live link
    assert "a\\|b\\*c\\_\\[x\\](http\u2060://e.vil)\\`@" in text
    assert "@\u2060octocat" in text  # no mention of a GitHub user
    assert "x y" in text  # the newline did not end the table row


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("plain_name", r"plain\_name"),
        ("a|b", r"a\|b"),
        ("<b>&", "&lt;b&gt;&amp;"),
        ("two\nlines", "two lines"),
        ("@user", "@\u2060user"),
        ("[x](y)", r"\[x\](y)"),
        ("see https://e.vil/x", "see https\u2060://e.vil/x"),
        ("www.e.vil", "www\u2060.e.vil"),
        ("fix #12", "fix #\u206012"),
        ("it's", "it&#x27;s"),  # the entity's # is not an issue reference
        ("esc\x1b]0;t\x07", r"esc\\x1b\]0;t\\x07"),
    ],
)
def test_md_escape(raw, expected):
    assert md_escape(raw) == expected


def test_links_per_kernel_only_for_a_hosted_site():
    hosted = render_markdown(_report(20, link="https://ci.example/report/"))
    assert "](https://ci.example/report/k/" in hosted
    artifact = render_markdown(_report(20, link="https://github.com/o/r/actions/runs/1/artifacts/2"))
    assert "(https://github.com/o/r/actions/runs/1/artifacts/2)" in artifact
    assert "/k/" not in artifact
    none = render_markdown(_report(20, link=None))
    assert "Full report" not in none


def test_summary_is_short_and_names_regressions(big):
    text = render_summary(big)
    assert len(text) < 6000
    assert "3 regressed kernels" in text
    _check_tables(text)
    assert len(_tables(text)[0]) - 2 == 3  # the regressions (a findings table may follow)
    assert "Full report" in text


def test_static_mode_and_machine_warning():
    report = _report(40, gpu=False)
    text = render_markdown(report)
    _check_tables(text)
    assert "static" in text
    # Both sides ran on the same (CPU) machine: no warning.
    assert "[!WARNING]" not in text
    gpu = render_markdown(_report(10))
    assert "[!WARNING]" in gpu and "driver" in gpu


def test_no_baseline():
    _bases, cur = synthetic_runs(10)
    report = build_report(cur, None)
    text = render_markdown(report)
    assert "no baseline" in text
    assert all(v.verdict == "new" for v in report.variants)
    _check_tables(text)
    _check_details(text)


def test_a_report_against_the_previous_run_is_not_a_gate(tmp_path):
    """A new user's `kperf run` without baselines/main.db: the run exited 0 (nothing gated it) while
    its comment read "❌ kperf: 1 regressed kernel", compared with the run before it in the same
    database. The previous run stands in for the baseline: what moved is shown, the headline
    says it was not gated, and no ❌. With a baseline database the same change is a ❌ regression."""
    import subprocess
    import sys

    from conftest import make_info, make_result

    from kperf_ci import store

    db, base_db = tmp_path / "run.db", tmp_path / "base.db"
    older, newer = make_info("older"), make_info("newer")
    store.save_run(str(db), older, [make_result(registers=32, spills=0)])
    store.save_run(str(db), newer, [make_result(registers=32, spills=64)])
    store.save_run(str(base_db), older, [make_result(registers=32, spills=0)])

    def comment(*extra: str) -> str:
        r = subprocess.run(
            [sys.executable, "-m", "kperf_ci", "report", "--db", str(db), "--format", "markdown", *extra],
            capture_output=True, text=True, cwd=tmp_path,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        return r.stdout

    implicit = comment()
    head = implicit.splitlines()[0] if not implicit.startswith("<!--") else implicit.splitlines()[1]
    assert "❌" not in head and "⚠️" in head, head
    assert "since the previous run (no baseline database: not gated)" in head, head
    gated = comment("--baseline", str(base_db))
    assert "## ❌ kperf: 1 regressed kernel" in gated, gated[:400]


def test_a_changed_variant_is_said_once_and_specs_are_cut_between_items():
    """Issue 35's walk: the run comment's cell read "variant changed: num_warps 8 -> 4" once per
    regressed metric, and the specialization column was cut from the left inside a name
    ("…OCK_N=2048")."""
    from conftest import make_info, make_result

    from kperf_ci.judge.policy import ThresholdPolicy

    spec = ", ".join(f"STRIDE_{i}=1" for i in range(14)) + ", BLOCK_N=2048"
    base = make_result(config="num_warps=8", spec=spec, registers=32, spills=0)
    cur = make_result(config="num_warps=4", spec=spec, registers=96, spills=64)
    bi, ci = make_info("b"), make_info("c")
    from kperf_ci.model import RunRecord

    b, c = RunRecord(info=bi, results=[base]), RunRecord(info=ci, results=[cur])
    comparison = compare_runs(b, c, ThresholdPolicy())
    md = render_markdown(build_report(c, b, comparison))
    row = next(ln for ln in md.splitlines() if ln.startswith("| ❌"))
    assert row.count("variant changed") == 1, row
    assert "…OCK" not in md and "…, " in row, row
