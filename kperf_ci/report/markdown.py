"""GitHub-flavoured markdown: a PR comment (``render_markdown``) and a job summary (``render_summary``).

A short "Analysis findings" table lists the current run's flagged intra-kernel findings (what
was measured, why it is a problem, what to try), capped at ``MAX_FINDINGS`` rows.

The PR comment stays under GitHub's 65,536-character limit for comment bodies: sections are
added worst first (regressions, then slower, ..., unchanged), each in a collapsible
``<details>`` block except the regressions, and when the budget runs out a table is cut with a
note pointing at the full report; every opened ``<details>`` is closed. Text from the runs
(kernel names, configs, reasons) goes through ``safe_text.markdown_safe`` so that it renders
literally: no markup, no broken table, no link, no @-mention.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..metrics import VERDICT_RANK
from ..units import clip, fmt_value
from .comment_budget import CommentBudget
from .safe_text import markdown_safe
from .view import Report, VariantView, threshold_text

#: GitHub refuses comment bodies longer than 65,536 characters; keep a margin.
COMMENT_LIMIT = 65_000
#: The first line of the comment: lets a bot find and update its own comment.
MARKER = "<!-- kperf-report -->"
#: Most flagged findings listed in the comment (the job summary lists half); the rest are counted.
MAX_FINDINGS = 10

_SECTIONS: tuple[tuple[str, str, bool], ...] = (
    # verdict, title, open by default
    ("slower", "Slower", True),
    ("worse", "Worse static metrics", True),
    ("error", "Errors", True),
    ("inconclusive", "Inconclusive", False),
    ("new", "New", False),
    ("removed", "Removed", False),
    ("not-run", "Not run here", False),
    ("faster", "Faster", False),
    ("better", "Better static metrics", False),
    ("unchanged", "Unchanged", False),
)
_ICON = {
    "slower": "🔴",
    "worse": "🟠",
    "error": "💥",
    "inconclusive": "⚪",
    "new": "🆕",
    "removed": "➖",
    "not-run": "⏭️",
    "faster": "🟢",
    "better": "🟢",
    "unchanged": "▫️",
}


#: Stored text as literal markdown (kperf_ci.report.safe_text.markdown_safe), under its old name.
md_escape = markdown_safe

#: The most characters of one stored field (a kernel name, a branch, a GPU name, a reason) the
#: comment shows: its 65,000 characters are for rows, and one 70,000-character name in a crafted
#: or unlucky database must neither break the limit nor leave room for only two rows.
FIELD_CHARS = 200
#: The most differing fingerprint fields and notes the comment lists; the rest are counted.
MAX_LISTED = 8


def md_field(value: object, limit: int = FIELD_CHARS) -> str:
    """Stored text cut to ``limit`` characters (an ellipsis says so), as literal markdown."""
    return markdown_safe(clip("" if value is None else str(value), limit))


def _row_cells(v: VariantView, kernel_link: Callable[[VariantView], str | None], what: str) -> list[str]:
    name = md_field(v.key.kernel)
    href = kernel_link(v)
    if href:
        name = f"[{name}]({href})"
    if len(v.tests) > 1:  # one compiled kernel reached through several tests: one row
        name += f"<br><sub>{len(v.tests)} tests</sub>"
    return [
        "❌" if v.regression else _ICON.get(v.verdict, ""),
        name,
        md_field(v.key.arch),
        md_field(" · ".join(x for x in (v.shown_config, v.short_spec) if x)),
        md_field(v.headline_text),
        md_field(what, 2 * FIELD_CHARS),
    ]


_HEADER = ["", "kernel", "arch", "config · specialization", "change", "what moved"]


def table_lines(rows: Sequence[Sequence[str]], header: Sequence[str] = _HEADER) -> list[str]:
    """A GFM table, one line per row; cells must already be escaped."""

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(cells) + " |"

    return [line(header), line(["---"] * len(header))] + [line(r) for r in rows]


def _runs_line(report: Report) -> str:
    def side(info) -> str:  # noqa: ANN001
        if info is None:
            return "none"
        bits = [md_field(info.run_id[:12])]
        where = " @ ".join(md_field(x) for x in (info.git_branch, (info.git_sha or "")[:10]) if x)
        if where:
            bits.append(f"({where})")
        return " ".join(bits)

    fp = report.current.fingerprint
    machine = md_field(fp.gpu or fp.cpu or "unknown machine")
    runs = f"**current** {side(report.current)} vs **baseline** {side(report.baseline)}"
    return f"{runs} · {md_field(report.current.mode)} · {machine}"


def _counts_line(report: Report) -> str:
    c = report.counts
    # zero time verdicts are news only where times were taken: a static run that said
    # "0 slower, 0 faster" would read as timed and clean
    timed = report.current.mode != "static"
    always = ("slower", "faster", "unchanged", "inconclusive") if timed else ()
    # rows not run are the baseline's, counted after this run's in their own words and unit
    parts = [f"{c[k]} {k.replace('-', ' ')}" for k in c if (c[k] or k in always) and k != "not-run"]
    gone = f"; {report.not_run_words}" if report.not_run_words else ""
    return f"{report.ran_words}: " + (", ".join(parts) or "none") + gone


def _headline(report: Report) -> str:
    icon = {"bad": "❌", "warn": "⚠️", "good": "✅"}[report.verdict_state]
    return f"## {icon} kperf: {md_field(report.verdict_line)}"


def _warnings(report: Report) -> list[str]:
    out = []
    differ = report.fingerprints_differ
    if differ:
        rows = {f: (b, c) for f, b, c, _d in report.fingerprint_rows}
        detail = ", ".join(
            f"{md_field(f)} {md_field(rows[f][0] or '-')} → {md_field(rows[f][1] or '-')}"
            for f in differ[:MAX_LISTED]
        ) + (f" and {len(differ) - MAX_LISTED} more" if len(differ) > MAX_LISTED else "")
        out += ["> [!WARNING]", f"> The two runs come from different machines or software: {detail}.", ""]
    for n in report.notes[:MAX_LISTED]:
        out.append(f"> {md_field(n, 2 * FIELD_CHARS)}")
    if len(report.notes) > MAX_LISTED:
        out.append(f"> _… {len(report.notes) - MAX_LISTED} more notes; see the full report._")
    if report.notes:
        out.append("")
    return out


def _link_fn(report: Report) -> Callable[[VariantView], str | None]:
    """Per-kernel links only when the report is hosted as a site (link ends with '/')."""
    link = report.link
    if link and link.endswith("/"):
        return lambda v: f"{link}{v.page}"
    return lambda v: None


_FINDINGS_HEADER = ["", "kernel", "finding", "value", "explanation", "suggestion"]


def _findings_head(report: Report) -> str:
    """The section's title, over the kernels the change touched (a PR comment lists no finding
    that pre-dates the change on a kernel it left alone; they are counted, in the full report)."""
    pairs = report.pr_findings
    n_var = len({id(v) for v, _f in pairs})
    total = report.pr_flagged_total
    cap = f"; the {report.findings_per_kernel} costliest per kernel listed" if total > len(pairs) else ""
    return f"### Analysis findings ({total} flagged in {n_var} kernel{'s' if n_var != 1 else ''}{cap})"


def _untouched_line(report: Report) -> str:
    """ "_12 more flagged findings on kernels this change did not touch: in the full report._" """
    n = report.flagged_total - report.pr_flagged_total
    if not n:
        return ""
    what = f"{n} more flagged finding{'s' if n != 1 else ''}"
    return f"_{what} on kernels this change did not touch: in the full report._"


def _findings_rows(report: Report, link: Callable[[VariantView], str | None]) -> list[list[str]]:
    """One escaped table row per flagged finding, new flags first. A suggestion the row above
    (same variant) already gave is not repeated: the wave findings of one grid share theirs."""
    rows = []
    prev: tuple[int, str] | None = None
    for v, f in report.pr_findings:
        name = md_field(v.key.kernel)
        href = link(v)
        if href:
            name = f"[{name}]({href}#findings)"
        variant = md_field(" · ".join(x for x in (v.shown_config, v.short_spec) if x))
        if variant:
            name += f"<br><sub>{variant}</sub>"
        value = md_field(fmt_value(f.value, f.unit))
        th = threshold_text(f)
        if th:
            value += f" ({md_field(th)})"
        same = prev == (id(v), f.suggestion)
        prev = (id(v), f.suggestion)
        rows.append(
            [
                "🆕" if v.is_new_flag(f) else "⚠️",
                name,
                md_field(f.name),
                value,
                md_field(f.explanation, 2 * FIELD_CHARS),
                "_same as above_" if same else md_field(f.suggestion, 2 * FIELD_CHARS),
            ]
        )
    return rows


def findings_lines(report: Report, max_rows: int = MAX_FINDINGS) -> list[str]:
    """The "Analysis findings" section of the current run (empty when nothing is flagged):
    at most ``max_rows`` rows, then how many more the full report has."""
    rows = _findings_rows(report, _link_fn(report))
    untouched = _untouched_line(report)
    if not rows:
        return [untouched, ""] if untouched else []
    out = [_findings_head(report), "", *table_lines(rows[:max_rows], _FINDINGS_HEADER)]
    shown = min(len(rows), max_rows)
    if report.pr_flagged_total > shown:
        out += ["", f"_… {report.pr_flagged_total - shown} more flagged findings; see the full report._"]
    return out + ([""] + [untouched] if untouched else []) + [""]


# Room kept for the note that closes a cut table and the final truncation note.
_RESERVE = 400


def _add_variant_table(
    out: CommentBudget,
    variants: list[VariantView],
    link: Callable[[VariantView], str | None],
    what: Callable[[VariantView], str],
) -> int:
    """Adds as many rows as fit; returns how many were left out."""
    lines = table_lines([])
    if not out.fits("\n".join(lines), _RESERVE):
        return len(variants)
    for ln in lines:
        out.add(ln)
    for i, v in enumerate(variants):
        row = table_lines([_row_cells(v, link, what(v))])[2]
        if not out.fits(row, _RESERVE):
            return len(variants) - i
        out.add(row)
    return 0


def _add_regressions(out: CommentBudget, report: Report, link: Callable[[VariantView], str | None]) -> None:
    """The regressions' table (what fails the gate), each with its reasons."""
    regs = report.regressions
    if not regs:
        return
    out.add(f"### Regressions ({md_field(report.verdict_line)})")
    out.add("")
    left = _add_variant_table(out, regs, link, lambda v: "; ".join(v.reasons) or v.summary)
    out.add("")
    if left:
        out.add(f"_… {left} more regressions not shown (comment size limit); see the full report._")
        out.add("")


def _add_findings(
    out: CommentBudget, report: Report, link: Callable[[VariantView], str | None]
) -> str | None:
    """The flagged analysis findings' table, as many rows as fit; returns what to name as left
    out when not even its head fits, else None."""
    findings = _findings_rows(report, link)
    if not findings:
        return None
    lines = [_findings_head(report), "", *table_lines([], _FINDINGS_HEADER)]
    if not out.fits("\n".join(lines), _RESERVE):
        return f"analysis findings ({report.pr_flagged_total} flagged)"
    for ln in lines:
        out.add(ln)
    n = 0
    for cells in findings[:MAX_FINDINGS]:
        row = table_lines([cells], _FINDINGS_HEADER)[2]
        if not out.fits(row, _RESERVE):
            break
        out.add(row)
        n += 1
    out.add("")
    if n < report.pr_flagged_total:
        out.add(f"_… {report.pr_flagged_total - n} more flagged findings; see the full report._")
        out.add("")
    return None


def _add_verdict_sections(
    out: CommentBudget, report: Report, link: Callable[[VariantView], str | None]
) -> list[str]:
    """One collapsible section per verdict, worst first, of the variants not already shown as
    regressions; returns the sections left out for want of room."""
    omitted: list[str] = []
    shown = {id(v) for v in report.regressions}
    for verdict, title, is_open in _SECTIONS:
        vs = [v for v in report.variants if v.verdict == verdict and id(v) not in shown]
        if not vs:
            continue
        kernels = report.not_run_kernels if verdict == "not-run" else None
        count = (
            f"{sum(n for _k, n, _a in kernels)} variants of {len(kernels)} kernels" if kernels else len(vs)
        )
        opening = f"<details{' open' if is_open else ''}><summary><b>{title}</b> ({count})</summary>"
        if not out.open_fold(opening):
            omitted.append(f"{title.lower()} ({count})")
            continue
        if kernels is None:
            left = _add_variant_table(out, vs, link, lambda v: v.summary or "; ".join(v.notes))
        else:  # none of this run's variants compared: the baseline's per kernel, not row by row
            lines = [
                f"- {md_field(k)}: {n} variant{'s' * (n != 1)} ({md_field(', '.join(a))})"
                for k, n, a in kernels
            ]
            left = next((len(lines) - i for i, ln in enumerate(lines) if not out.add_if_fits(ln)), 0)
        out.add("")
        if left:
            out.add(f"_… {left} more not shown (comment size limit); see the full report._")
            out.add("")
        out.close_fold()
    return omitted


def render_markdown(report: Report, *, max_chars: int = COMMENT_LIMIT) -> str:
    """The PR comment: verdict, counts, machine warning, regressions, then one collapsible
    section per verdict, worst first; at most ``max_chars`` characters."""
    if max_chars < 2000:
        raise ValueError("max_chars below 2000 leaves no room for a report")
    link = _link_fn(report)
    out = CommentBudget(max_chars, reserve=_RESERVE)
    head = [
        MARKER,
        _headline(report),
        "",
        _runs_line(report),
        "",
        _counts_line(report),
        "",
        *_warnings(report),
    ]
    if report.link:
        head += [f"**[Full report]({report.link})** (plots, distributions, SASS diffs, history)", ""]
    for line in head:  # bounded by the caps above; checked all the same, the limit is GitHub's
        if out.fits(line, _RESERVE):
            out.add(line)
    omitted: list[str] = []
    _add_regressions(out, report, link)
    # After the regressions (what fails the gate), before the verdict sections: a flagged
    # finding says why a kernel is slow and what to try, which an author should see.
    if (findings_left_out := _add_findings(out, report, link)) is not None:
        omitted.append(findings_left_out)
    if (untouched := _untouched_line(report)) and out.fits(untouched, _RESERVE):
        out.add(untouched)
        out.add("")
    omitted += _add_verdict_sections(out, report, link)
    if omitted:
        out.add(
            f"_Not shown for the comment size limit: {', '.join(omitted)}. The full report has everything._"
        )
    return out.text()


def render_summary(report: Report, *, max_rows: int = 10) -> str:
    """A short summary for ``$GITHUB_STEP_SUMMARY``: verdict, counts, warnings, worst variants,
    then the flagged analysis findings (a few)."""
    lines = [_headline(report), "", _runs_line(report), "", _counts_line(report), "", *_warnings(report)]
    # nothing failed the gate (or nothing judged it): the variants that moved the wrong way are
    # listed, the verdicts ranked at least as bad as "worse" (error, slower, worse)
    worst = report.regressions or [
        v for v in report.variants if VERDICT_RANK.get(v.verdict, len(VERDICT_RANK)) <= VERDICT_RANK["worse"]
    ]
    if worst:
        link = _link_fn(report)
        lines += table_lines(
            [_row_cells(v, link, "; ".join(v.reasons) or v.summary) for v in worst[:max_rows]]
        )
        if len(worst) > max_rows:
            lines.append(f"\n_… and {len(worst) - max_rows} more._")
        lines.append("")
    lines += findings_lines(report, max_rows=MAX_FINDINGS // 2)
    if report.link:
        lines.append(f"[Full report]({report.link})")
    return "\n".join(lines).rstrip() + "\n"
