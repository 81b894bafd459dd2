"""The PR comment and job summary of a same-job A/B (`kperf ab`), and the reports' entry points.

Input is the A/B document stored in the A/B database (``kperf_ci.prcheck.document.AB_BLOB``):
plain JSON, treated as data. What it says is read by report/ab_view.py (one row per kernel,
each distinct launch once, why a launch was not called slower); the HTML page is
report/ab_html.py. Every string is escaped for its medium: markdown gets no links, no HTML and
no table breaks (safe_text.markdown_safe); the comment is cut by the run comment's budget
(report/comment_budget.CommentBudget), so every fold is closed and the notice stays outside them.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any

from kperf_ci.judge.launch_diff import stopped_early_text
from kperf_ci.report.ab_html import render_html, script_sweeps
from kperf_ci.report.ab_static_view import (
    changed_test_groups,
    sides,
    static_gate,
    static_rows,
    static_summary,
)
from kperf_ci.report.ab_view import (
    SHAPE_RULE,
    cause_text,
    change_text,
    floor_ms,
    headline,
    identical_kernels,
    identical_notes,
    kernel_change,
    kernel_where,
    kernels_of,
    largest_abs_text,
    launch_cause,
    pct,
    shape_text,
    slower_count,
    static_kernels_of,
    terminal_lines,
    test_status_word,
    times_text,
    timing_note,
    where_text,
    why_not_called,
)
from kperf_ci.report.ab_words import readable
from kperf_ci.report.comment_budget import CommentBudget
from kperf_ci.report.markdown import FIELD_CHARS, md_field, table_lines

#: what other modules import from here (the comment's module was the A/B reports' only one)
__all__ = [
    "MARKER", "MAX_CHARS", "cause_text", "change_text", "floor_ms", "headline", "kernel_change",
    "kernels_of", "pct", "render_html", "render_markdown", "render_summary",
    "script_sweeps", "shape_text", "slower_count", "static_kernels_of", "static_summary",
    "terminal_lines", "times_text", "timing_note", "why_not_called", "write_ab_reports",
]  # fmt: skip

MARKER = "<!-- kperf-ab -->"  # lets a bot find and edit its own comment
MAX_CHARS = 65_000

_ICON = {
    "slower": "🔴",
    "faster": "🟢",
    "unchanged": "⚪",
    "inconclusive": "🟡",
    "no-base": "🟡",
}


def md(text: Any) -> str:
    """Stored text as inert markdown, cut to the comment's field limit (report/markdown.py): one
    70,000-character kernel name must not leave room for no row at all."""
    return md_field(text)


#: kernels in the comment's top table; the rest are counted in a "… N more" row
MAX_KERNEL_ROWS = 30
#: room kept for the rows and lines that close a cut section and for the truncation notice
_RESERVE = 300
#: the kernel table, narrow enough for a PR comment (about 900 px): the cause, the longest cell,
#: is a line of its own under the table (_cause_lines) and the kernel's file is said there
_TOP = [
    "time", "kernel", "worst launch (largest %)", "base → head", "paired change [99% CI]",
    "launches", "static",
]  # fmt: skip


def _kernel_cells(k: dict[str, Any], gate: dict[str, str]) -> list[str]:
    w = (k.get("launches") or [{}])[0]
    verdict = str(k.get("verdict"))
    return [
        f"{_ICON.get(verdict, '')} {md(verdict)}",
        md(kernel_where(k)[0]),
        md(shape_text(w)),
        _nbsp(md(times_text(w, True))),
        md(kernel_change(k)),
        # "7 of 9 slower": the column says launches (the narrow table of a PR comment)
        md(slower_count(k).replace(" launches slower", " slower").replace(" launch slower", " slower")),
        md(gate.get(str(k["site"]), "-")),
    ]


def _cause_line(k: dict[str, Any], cause: str) -> str:
    """ "- **kernel** in path: cause": a kernel's why on a line of its own under its table,
    where a PR comment shows it without scrolling sideways."""
    name, path = kernel_where(k)
    where = f" in {md(path)}" if path else ""
    return f"- **{md(name)}**{where}: {md_field(cause, 2 * FIELD_CHARS)}"


def _nbsp(text: str) -> str:
    """ "6.05 µs → 7.97 µs" kept on one line in a narrow table cell (a number never apart from
    its unit or from its arrow)."""
    return text.replace(" ", "\u00a0")


def _launch_md(x: dict[str, Any]) -> str:
    """A launch's text for the comment, timed or not, with room for all of it: cut at the plain
    field limit, a static launch lost its grid, options and "(worst of 6 autotune configs, 5
    regress)"."""
    return md_field(x["launch"], 2 * FIELD_CHARS) or "-"


def _launch_line(x: dict[str, Any]) -> str:
    tests = ", ".join(str(t) for t in (x.get("tests") or [])[:3])
    more = f" +{len(x['tests']) - 3} more" if len(x.get("tests") or []) > 3 else ""
    same = identical_notes(x)
    if same:  # the tests whose identical launch this one stands for
        more += f"; {same[0]}" + (f" (and {len(same) - 1} more test(s))" if len(same) > 1 else "")
    # the launch's own cause (its option and code changes, why it was not called slower)
    # in a fold: room for the whole cause and launch (a cut one ends at a separator, " …")
    cause = f"cause: {md_field(launch_cause(x), 2 * FIELD_CHARS)}; " if launch_cause(x) else ""
    launch = _launch_md(x)
    return (
        f"  - {_ICON.get(str(x['verdict']), '')} {md(x['verdict'])} {md(change_text(x))}, "
        f"{_nbsp(md(times_text(x, True)))}; {cause}launch: {launch} ({md(tests)}{md(more)})"
    )


def _unchanged_line(x: dict[str, Any]) -> str:
    """A launch that did not move, on one short line: its shapes and its own reason."""
    return (
        f"  - ⚪ unchanged {md(change_text(x))}, {_nbsp(md(times_text(x, True)))}: "
        f"{md(shape_text(x))}; {md(x.get('why') or '-')}"
    )


class _Cut(dict):
    """What a cut left out, by kind ("kernels" -> 231), for the one truncation notice."""

    def __call__(self, what: str, n: int) -> None:
        if n > 0:
            self[what] = self.get(what, 0) + n

    def notice(self) -> str | None:
        if not self:
            return None
        return f"… truncated: {', '.join(f'{n} more {what}' for what, n in self.items())} in the full report"


def _kernel_table(out: CommentBudget, kernels: list[dict[str, Any]], gate: dict[str, str], cut: _Cut) -> None:
    """The top table, one row per kernel, capped with a "… N more" row; then each kernel's cause
    (its worst launch's) on a line of its own."""
    title = (
        "**Timed A/B per kernel**, worst first; a kernel's worst launch is its largest relative "
        f"change ({SHAPE_RULE})"
    )
    if not out.add_if_fits(title + "\n\n" + "\n".join(table_lines([], _TOP))):
        cut("kernels", len(kernels))
        return
    shown = 0
    for k in kernels[:MAX_KERNEL_ROWS]:
        if not out.add_if_fits(table_lines([_kernel_cells(k, gate)], _TOP)[2]):
            break
        shown += 1
    if shown < len(kernels):
        more = ["", f"… {len(kernels) - shown} more"] + [""] * (len(_TOP) - 2)
        out.add(table_lines([more], _TOP)[2])  # in the room kept back (_RESERVE)
    cut("kernels", len(kernels) - shown)
    out.add("")
    if shown and out.add_if_fits("Why (the worst launch's cause):"):
        for k in kernels[:shown]:
            largest = largest_abs_text(k)  # the µs a reviewer may quote, when not the worst's
            if not out.add_if_fits(_cause_line(k, cause_text(k) + (f" · {largest}" if largest else ""))):
                break
        out.add("")


def _launch_fold(out: CommentBudget, kernels: list[dict[str, Any]], cut: _Cut) -> None:
    """Every timed launch with its base → head times; the unchanged ones of a kernel as a count."""
    n_launches = sum(len(k.get("launches") or []) for k in kernels)
    first = f"- **{md(kernels[0]['kernel'])}** ({md(slower_count(kernels[0]))})"
    if not out.open_fold(f"<details><summary>Each timed launch ({n_launches})</summary>", first):
        cut("launches", n_launches)
        return
    for i, k in enumerate(kernels):
        moved = [x for x in k.get("launches") or [] if x.get("verdict") != "unchanged"]
        rest = [x for x in k.get("launches") or [] if x.get("verdict") == "unchanged"]
        if not out.add_if_fits(f"- **{md(k['kernel'])}** ({md(slower_count(k))})"):
            cut("launches", sum(len(kk.get("launches") or []) for kk in kernels[i:]))
            break
        for j, x in enumerate(moved):
            if not out.add_if_fits(_launch_line(x)):
                cut("launches", len(moved) - j + len(rest))
                rest = []
                break
        for j, x in enumerate(rest):
            if not out.add_if_fits(_unchanged_line(x)):
                cut("launches", len(rest) - j)
                break
    out.close_fold()


#: the timed table's columns in its order (_TOP): the verdict, the kernel, its worst launch,
#: what it was judged on, the launches; the cause under the table, as the timed one's
_STATIC_TOP = ["static", "kernel", "worst launch", "arch", "launches"]
_GATE_ICON = {"regressed": "🔴", "improved": "🟢", "changed": "⚪"}


def _static_table(out: CommentBudget, rows: list[dict[str, Any]], cut: _Cut) -> None:
    """The launches not timed, one row per kernel and arch in the static gate's words (capped
    as the timed table is), then each launch with its own word, folded."""
    title = f"**Static verdict per kernel** (launches not timed); a worst launch is shown by {SHAPE_RULE}"
    if not out.add_if_fits(title):
        cut("static kernels", len(rows))
        return
    out.add("")
    out.add("\n".join(table_lines([], _STATIC_TOP)))
    shown = 0
    for k in rows[:MAX_KERNEL_ROWS]:
        cells = [
            f"{_GATE_ICON.get(k['gate'], '')} {md(k['gate'])}", md(kernel_where(k)[0]),
            md(k["shape"]), md(k["arch"]), md(k["count"]),
        ]  # fmt: skip
        if not out.add_if_fits(table_lines([cells], _STATIC_TOP)[2]):
            break
        shown += 1
    if shown < len(rows):
        out.add(table_lines([["", f"… {len(rows) - shown} more", "", "", ""]], _STATIC_TOP)[2])
    cut("static kernels", len(rows) - shown)
    out.add("")
    if shown and out.add_if_fits("Why (the worst launch's cause):"):
        for k in rows[:shown]:
            if not out.add_if_fits(_cause_line(k, f"{k['arch']}: {k['cause']}")):
                break
        out.add("")
    n = sum(len(k["launches"]) for k in rows)
    lines = [
        f"- {md(k['kernel'])} {md(k['arch'])}: {_GATE_ICON.get(x['gate'], '')} {md(x['gate'])}: "
        f"{md(x.get('reason'))}; {_launch_md(x)} ({md(', '.join(x.get('tests') or []))})"
        for k in rows
        for x in k["launches"]
    ]
    if lines and out.open_fold(f"<details><summary>Each launch not timed ({n})</summary>", lines[0]):
        for i, line in enumerate(lines):
            if not out.add_if_fits(line):
                cut("launches not timed", len(lines) - i)
                break
        out.close_fold()
    else:
        cut("launches not timed", len(lines))


#: a group of tests alike too long for the room left names this many, the rest counted
_GROUP_NAMES = 3


def _group_names(tests: list[dict[str, Any]]) -> list[str]:
    """A group's tests by test function: a function's parametrizations as one name and their
    count (attorch: one function's 48 ids were 4,000 of the comment's 5,400 characters); a
    function with one test here keeps its id. The HTML report names every id."""
    by_function: dict[str, list[str]] = {}
    for t in tests:
        tid = str(t["test"])
        by_function.setdefault(tid.split("[", 1)[0], []).append(tid)
    return [
        md(ids[0]) if len(ids) == 1 else f"{md(function)} ({len(ids)} parametrizations)"
        for function, ids in by_function.items()
    ]


def _test_group(tests: list[dict[str, Any]], causes: list[str], names: int | None = None) -> str:
    """One entry of the static diff per test. A test alone: "- **changed** test", its causes
    under it. Tests whose causes are the same (:func:`changed_test_groups`): "- **changed** in
    each of these 30 tests: f (30 parametrizations)", the causes once, as the terminal says
    them; ``names`` names at most that many, the rest as "+27 more"."""
    status = md(test_status_word(tests[0]["status"]))
    if len(tests) == 1:
        head = f"- **{status}** {md(tests[0]['test'])}"
    else:
        every = _group_names(tests)
        shown = every[:names] if names is not None else every
        more = f" +{len(every) - len(shown)} more" if len(shown) < len(every) else ""
        head = f"- **{status}** in each of these {len(tests)} tests: {', '.join(shown)}{more}"
    # in a fold: room for the occupancy and the code's lines (a cut one ends "…")
    return "\n".join([head, *(f"  - {md_field(c, 2 * FIELD_CHARS)}" for c in causes)])


def _test_groups_fold(out: CommentBudget, doc: dict[str, Any], cut: _Cut) -> None:
    """The static diff per test, folded: each group of tests alike once, every test named where
    the room allows (else its first ones and a count); a group left out counts its tests."""
    groups = changed_test_groups(doc)
    first = _test_group(*groups[0], names=_GROUP_NAMES) if groups else ""
    if not groups or not out.open_fold("<details><summary>Static diff per test</summary>", first):
        cut("changed tests", sum(len(tests) for tests, _ in groups))
        return
    for i, (tests, causes) in enumerate(groups):
        if out.add_if_fits(_test_group(tests, causes)):
            continue
        named = len(_group_names(tests))
        if named > _GROUP_NAMES and out.add_if_fits(_test_group(tests, causes, _GROUP_NAMES)):
            cut("test names", named - _GROUP_NAMES)  # the page names them all
            continue
        cut("changed tests", sum(len(g) for g, _ in groups[i:]))
        break
    out.close_fold()


def _static_sections(out: CommentBudget, doc: dict[str, Any], cut: _Cut) -> None:
    """The launches not timed per kernel, in the static gate's words, then the static diff per
    test, folded."""
    rows = static_rows(doc)
    if rows:
        _static_table(out, rows, cut)
    _test_groups_fold(out, doc, cut)


def render_markdown(doc: dict[str, Any], *, max_chars: int = MAX_CHARS, link: str | None = None) -> str:
    """The PR comment, at most ``max_chars`` characters. Cut by the run comment's rules
    (report/comment_budget.CommentBudget): every fold closed, and the timing note, the link and the
    truncation notice outside every fold."""
    doc = readable(doc)  # an older document's metric ids in today's words
    base_sha, base_rev, head_sha, same = sides(doc)
    # a slimmed document may not record the revisions: said, never an empty `` ()
    base_words = " ".join(
        filter(None, [f"`{md(base_sha)}`" if base_sha else "", f"({md(base_rev)})" if base_rev else ""])
    )
    if not head_sha:
        head_words = "head"
    else:
        head_words = f"the working tree of `{md(head_sha)}`" if same else f"head `{md(head_sha)}`"
    if not base_sha and not head_sha:
        base_words, head_words = "(revisions not recorded in this document)", "head"
    out = CommentBudget(max_chars, reserve=_RESERVE)
    head = [
        MARKER,
        "## kperf ab: " + headline(doc),  # our own words and numbers only
        "",
        f"Base {base_words or '(not recorded)'} vs {head_words} {md(where_text(doc))}",
        "",
    ]
    if note := timing_note(doc):
        head += [md_field(note, 2 * FIELD_CHARS), ""]
    if early := stopped_early_text(doc.get("tests") or []):
        head += [f"⚠️ {md_field(early, 2 * FIELD_CHARS)}", ""]
    if link:
        head += [f"**[Full report]({link})**", ""]
    for line in head:  # bounded by md()'s field limit; checked all the same
        out.add_if_fits(line)
    cut = _Cut()
    kernels = kernels_of(doc)
    if kernels:
        _kernel_table(out, kernels, static_gate(doc), cut)
        _launch_fold(out, kernels, cut)
    _static_sections(out, doc, cut)
    same = identical_kernels(doc)
    fold = f"<details><summary>Identical kernels, not timed ({len(same)})</summary>"
    if same and out.open_fold(fold, f"- {md(same[0])}"):
        for i, name in enumerate(same):
            if not out.add_if_fits(f"- {md(name)}"):
                cut("identical kernels", len(same) - i)
                break
        out.close_fold()
    messages = doc.get("messages") or []
    for i, m in enumerate(messages):
        if not out.add_if_fits(f"> {md(m)}"):
            cut("notes", len(messages) - i)
            break
    return out.text(cut.notice())


def render_summary(doc: dict[str, Any], *, max_chars: int = MAX_CHARS, link: str | None = None) -> str:
    """For $GITHUB_STEP_SUMMARY: the comment without the hidden marker."""
    return render_markdown(doc, max_chars=max_chars, link=link).replace(MARKER + "\n", "", 1)


AB_REPORTS = ("index.html", "comment.md", "summary.md")


def earlier_reports_line(out_dir: Path) -> str | None:
    """What a stopped `kperf ab` says of ``out_dir`` when an earlier run's reports are there:
    they stay, and read as this run's unless told (walk 2 of issue 38, finding 25)."""
    found = [out_dir / name for name in AB_REPORTS if (out_dir / name).is_file()]
    if not found:
        return None
    when = max(p.stat().st_mtime for p in found)
    stamp = _dt.datetime.fromtimestamp(when, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return f"kperf ab: stopped before its reports; {out_dir}/ holds an earlier run's (written {stamp})"


def write_ab_reports(doc: dict[str, Any], out_dir: Path) -> list[Path]:
    """index.html, comment.md and summary.md in ``out_dir`` (created)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / name for name in AB_REPORTS]
    for path, text in zip(paths, (render_html(doc), render_markdown(doc), render_summary(doc)), strict=True):
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)  # never a half-written report
    return paths
