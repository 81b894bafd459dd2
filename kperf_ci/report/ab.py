"""Reports of a same-job A/B (`kperf ab`): PR comment, job summary and one HTML page.

Input is the A/B document stored in the A/B database (``kperf_ci.prcheck.document.AB_BLOB``): plain
JSON, treated as data.  Every string from it is escaped for its medium: markdown gets no links,
no HTML and no table breaks; HTML is rendered by jinja2 with autoescaping.

For each test the reader gets: the verdict (slower / faster / unchanged / inconclusive, with the
change and its 99% interval), the kernel, and what moved (launch options, arguments, grid, SASS
with registers / spills / instructions, region shares of CTA time).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from kperf_ci.config import Settings
from kperf_ci.judge.group import launch_text, static_groups
from kperf_ci.report.html import render_page
from kperf_ci.report.markdown import CommentBudget, md_field, table_lines
from kperf_ci.report.plots import ab_intervals_svg, sweep_svg
from kperf_ci.report.sweeps import MAX_SWEEPS
from kperf_ci.units import fmt_value

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


def pct(v: float | None) -> str:
    return "?" if v is None else f"{v - 1:+.2%}"


def change_text(t: dict[str, Any]) -> str:
    if t.get("ratio") is None:
        return "?"
    ci = "" if t.get("ci_low") is None else f" [{pct(t['ci_low'])}, {pct(t['ci_high'])}]"
    return f"{pct(t['ratio'])}{ci}"


#: verdict order, worst first: what the reader should look at first comes first
_SEVERITY = {"slower": 0, "inconclusive": 1, "no-base": 2, "faster": 3, "unchanged": 4, "identical": 5}


def _severity(x: dict[str, Any]) -> tuple[int, float]:
    ratio = x.get("ratio")
    r = float(ratio) if isinstance(ratio, (int, float)) else 1.0
    # slower: the largest slowdown first; faster: the largest speedup first
    return _SEVERITY.get(str(x.get("verdict")), 9), (-r if x.get("verdict") != "faster" else r)


def floor_ms(doc: dict[str, Any]) -> float:
    """The absolute floor the document was judged with (``ab_floor_ms``): the document's own
    when it says, else the setting's default (kperf_ci.config, its one home)."""
    v = doc.get("floor_ms")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else Settings.ab_floor_ms


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def why_not_called(x: dict[str, Any], floor: float) -> str:
    """Why a timed launch reads "unchanged" or "inconclusive", in words ("" for the others):
    the reader of a row that did not fail asks whether it was measured at all."""
    verdict = x.get("verdict")
    lo, hi, ratio = _num(x.get("ci_low")), _num(x.get("ci_high")), _num(x.get("ratio"))
    if verdict not in ("unchanged", "inconclusive") or ratio is None:
        return ""
    base, head = _num(x.get("base_ms")), _num(x.get("head_ms"))
    th = _num(x.get("threshold"))
    th_text = f"{th:.2%}" if th is not None else "the threshold"
    excludes = lo is not None and hi is not None and (lo > 1 or hi < 1)
    if verdict == "inconclusive":
        return f"the 99% interval is wider than the threshold ({th_text})"
    if excludes and base is not None and head is not None and abs(head - base) < floor:
        return f"below the floor: {fmt_value(abs(head - base), 'ms')} < {fmt_value(floor, 'ms')}"
    if excludes:
        return f"below the threshold: {pct(ratio)} within ±{th_text}"
    return "the 99% interval includes zero"


def launch_identity(t: dict[str, Any]) -> tuple[str, ...]:
    """What makes two timed rows one launch: its kernel, shapes, options and constexprs (the
    launch text). A `kperf.bench` callable's row carries no launch text; its stored name (with
    its shape suffix), options and test stand in, so distinct launches are never merged under
    an empty label."""
    launch = str(t.get("launch") or "")
    if launch:
        return ("launch", launch)
    return ("variant", str(t.get("kernel") or ""), str(t.get("config") or ""), str(t.get("test") or ""))


def _launch_label(t: dict[str, Any]) -> str:
    if t.get("launch"):
        return str(t["launch"])
    bits = [str(t.get("kernel") or ""), str(t.get("config") or ""), f"in {t.get('test')}"]
    return "; ".join(b for b in bits if b)


def _kernels_from_timed(timed: list[dict[str, Any]], floor: float) -> list[dict[str, Any]]:
    groups: dict[str, dict[str, Any]] = {}
    for t in timed:
        name = str(t["kernel"]).split("#", 1)[0]
        site = str(t.get("site") or name)
        g = groups.setdefault(site, {"kernel": name, "site": site, "launches": {}, "tests": []})
        if t["test"] not in g["tests"]:
            g["tests"].append(t["test"])
        g["launches"].setdefault(launch_identity(t), []).append(t)
    out = []
    for g in groups.values():
        launches = []
        for runs in g["launches"].values():
            runs = sorted(runs, key=_severity)
            w = runs[0]
            x = {
                "launch": _launch_label(w),
                "verdict": str(w["verdict"]),
                "ratio": w.get("ratio"),
                "ci_low": w.get("ci_low"),
                "ci_high": w.get("ci_high"),
                "threshold": w.get("threshold"),
                "base_ms": w.get("base_median_ms"),
                "head_ms": w.get("head_median_ms"),
                "tests": list(dict.fromkeys(str(r["test"]) for r in runs)),
                "changes": [str(c) for c in (w.get("changes") or [])]
                + [str(c) for c in (w.get("regions_moved") or [])],
            }
            x["why"] = why_not_called(x, floor)
            launches.append(x)
        launches.sort(key=_severity)
        out.append(_kernel_row(g["kernel"], g["site"], launches, g["tests"]))
    out.sort(key=lambda k: _severity(k["launches"][0]) if k["launches"] else (9, 0.0))
    return out


def _kernel_row(kernel: str, site: str, launches: list[dict[str, Any]], tests: list[str]) -> dict[str, Any]:
    ratios = [r for x in launches if (r := _num(x.get("ratio"))) is not None]
    return {
        "kernel": kernel,
        "site": site,
        "verdict": launches[0]["verdict"] if launches else "?",
        "ratio_min": min(ratios) if ratios else None,
        "ratio_max": max(ratios) if ratios else None,
        "launches": launches,
        "tests": tests,
        "changes": list(dict.fromkeys(c for x in launches for c in x.get("changes") or [])),
    }


def kernels_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The timed launches per Triton kernel, worst first, each launch once (its identity:
    :func:`launch_identity`) with its base and head times and why it was not called slower.
    Built from the document's timed rows; a document that holds only ``kernels`` (a slimmed
    one) is read as it is."""
    floor = floor_ms(doc)
    timed = doc.get("timed")
    if isinstance(timed, list) and timed:
        return _kernels_from_timed(timed, floor)
    kernels = doc.get("kernels")
    out = []
    for k in kernels if isinstance(kernels, list) else []:
        launches = [{**x, "why": why_not_called(x, floor)} for x in k.get("launches") or []]
        out.append({**k, "launches": sorted(launches, key=_severity)})
    return out


def kernel_change(k: dict[str, Any]) -> str:
    """The kernel's worst launch: its change with the 99% interval (never a range across
    launches, which would hide which launch moved and how surely)."""
    launches = k.get("launches") or []
    if launches:
        return change_text(launches[0])
    lo, hi = k.get("ratio_min"), k.get("ratio_max")
    if lo is None:
        return "?"
    return pct(lo) if lo == hi else f"{pct(lo)} .. {pct(hi)}"


def times_text(x: dict[str, Any]) -> str:
    """ "6.62 µs → 7.09 µs": the medians of base and head (units: kperf_ci.units)."""
    b, h = _num(x.get("base_ms")), _num(x.get("head_ms"))
    if b is None and h is None:
        return "-"
    return f"{fmt_value(b, 'ms')} → {fmt_value(h, 'ms')}"


_SHAPE = re.compile(r"\b[a-z]+\d*\[[0-9x]*\]")


def shape_text(x: dict[str, Any]) -> str:
    """The launch's tensor shapes, each distinct one once ("bf16[4096x4096]"), and its grid."""
    launch = str(x.get("launch") or "")
    shapes = list(dict.fromkeys(_SHAPE.findall(launch)))
    grid = re.search(r"grid ([0-9x]+)", launch)
    bits = [", ".join(shapes[:3]) + (" …" if len(shapes) > 3 else "")] if shapes else []
    if grid:
        bits.append(f"grid {grid.group(1)}")
    return "; ".join(bits) or (launch[:60] if launch else "-")


def slower_count(k: dict[str, Any]) -> str:
    launches = k.get("launches") or []
    n = sum(1 for x in launches if x.get("verdict") == "slower")
    return f"{n} of {len(launches)} launches slower"


def cause_text(k: dict[str, Any]) -> str:
    """What changed in the worst launch, in words: the launch diff's option and constexpr
    changes, registers / spills, region shares (or the kernel's when its worst launch has none)."""
    launches = k.get("launches") or []
    changes = (launches[0].get("changes") if launches else None) or k.get("changes") or []
    return "; ".join(str(c) for c in changes) or "-"


def headline(doc: dict[str, Any]) -> str:
    c = doc.get("counts") or {}
    if "kernels" in doc:  # kernels, not launches: one kernel launched at 4 shapes is one kernel
        c = {**c, **{v: c.get(f"kernels_{v}", 0) for v in ("slower", "faster", "unchanged", "inconclusive")}}
    slower, faster = int(c.get("slower", 0)), int(c.get("faster", 0))
    groups = static_kernels_of(doc)
    static_reg = len({g["site"] for g in groups})  # kernels, as the README counts them
    if slower:
        head = f"🔴 {slower} kernel(s) slower than the base revision"
    elif static_reg:
        # distinct launches, whatever the number of archs or tests (the body lists them so)
        n = len(
            {
                (g["site"], launch_text(x["args"], x["grid"], x["config"]))
                for g in groups
                for x in g["launches"]
            }
        )
        per = f" ({n} launches)" if n != static_reg else ""
        head = f"🔴 {static_reg} kernel(s) with static regressions{per} in changed launches"
    elif int(c.get("changed", 0)) and not doc.get("timed"):
        head = f"🟡 {int(c['changed'])} test(s) changed; not timed (no GPU on this runner)"
    elif int(c.get("inconclusive", 0)):
        head = f"🟡 {int(c['inconclusive'])} kernel(s) inconclusive; none slower with confidence"
    else:
        head = "🟢 no kernel slower than the base revision"
    extra = []
    if faster:
        extra.append(f"{faster} faster")
    if c.get("unchanged"):
        extra.append(f"{int(c['unchanged'])} unchanged")
    if c.get("identical"):
        extra.append(f"{int(c['identical'])} test(s) identical code, not timed")
    return head + (" · " + ", ".join(extra) if extra else "")


_METHOD_WORDS = {
    "cupti": "CUPTI kernel durations (launch overhead excluded)",
    "events": "CUDA events around each call (launch overhead included: CUPTI was not available)",
    "graph": "CUDA-graph replays timed with events (CUPTI was not available)",
}


def timing_note(doc: dict[str, Any]) -> str:
    """How the timed launches were timed, in words ("" when none was timed): every place that
    shows an A/B time says it (terminal, comment, HTML), from the rows' own ``method``."""
    methods = sorted({str(t.get("method") or "events") for t in doc.get("timed") or []})
    if not methods:
        return ""
    words = "; ".join(_METHOD_WORDS.get(m, m) for m in methods)
    return f"Times: {words}, L2 flushed before each call, base and head interleaved."


def _changed_tests(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for t in doc.get("tests") or [] if t.get("status") != "identical"]


def _sides(doc: dict[str, Any]) -> tuple[str, str, str, bool]:
    """(base sha, base rev, head sha, head is the working tree of the base commit)."""
    base = doc.get("base") or {}
    base_sha = str(base.get("sha", ""))[:10]
    head_sha = str((doc.get("head") or {}).get("sha", ""))[:10]
    return base_sha, str(base.get("rev", "")), head_sha, bool(head_sha) and head_sha == base_sha


#: kernels in the comment's top table; the rest are counted in a "… N more" row
MAX_KERNEL_ROWS = 30
#: room kept for the rows and lines that close a cut section and for the truncation notice
_RESERVE = 300
_TOP = ["", "kernel", "worst launch", "base → head", "change [99% CI]", "launches", "static", "cause"]


def _static_gate(doc: dict[str, Any]) -> dict[str, str]:
    """Per kernel site, the static gate's word (its own column, never a time verdict):
    regressed (a static regression of a launch not timed) or changed (its code changed)."""
    out: dict[str, str] = {}
    for t in doc.get("tests") or []:
        for lc in t.get("launches") or [] if isinstance(t, dict) else []:
            if isinstance(lc, dict) and lc.get("status") == "changed":
                out.setdefault(str(lc.get("site") or lc.get("name") or ""), "changed")
    for g in static_kernels_of(doc):
        out[str(g["site"])] = "regressed"
    return out


def _kernel_cells(k: dict[str, Any], gate: dict[str, str]) -> list[str]:
    w = (k.get("launches") or [{}])[0]
    verdict = str(k.get("verdict"))
    return [
        f"{_ICON.get(verdict, '')} {md(verdict)}",
        f"{md(k['kernel'])} ({md(k['site'])})",
        md(shape_text(w)),
        md(times_text(w)),
        md(kernel_change(k)),
        md(slower_count(k)),
        md(gate.get(str(k["site"]), "-")),
        md(cause_text(k)),
    ]


def _launch_line(x: dict[str, Any]) -> str:
    why = f" ({md(x['why'])})" if x.get("why") else ""
    tests = ", ".join(str(t) for t in (x.get("tests") or [])[:3])
    more = f" +{len(x['tests']) - 3} more" if len(x.get("tests") or []) > 3 else ""
    return (
        f"  - {_ICON.get(str(x['verdict']), '')} {md(x['verdict'])} {md(change_text(x))}, "
        f"{md(times_text(x))}{why}: {md(x['launch']) or '-'} ({md(tests)}{md(more)})"
    )


def _folded_line(rest: list[dict[str, Any]]) -> str:
    """Launches that did not move, folded into a count with why (the reasons, each once)."""
    whys = list(dict.fromkeys(str(x.get("why") or x.get("verdict")) for x in rest))
    shown = "; ".join(whys[:3]) + ("; …" if len(whys) > 3 else "")
    return f"  - ⚪ {len(rest)} more launch(es) unchanged: {md(shown)}"


def render_markdown(doc: dict[str, Any], *, max_chars: int = MAX_CHARS, link: str | None = None) -> str:
    """The PR comment, at most ``max_chars`` characters. Cut by the run comment's rules
    (markdown.CommentBudget): every fold closed, and the timing note, the link and the
    truncation notice outside every fold."""
    base_sha, base_rev, head_sha, same = _sides(doc)
    head_words = f"the working tree of `{md(head_sha)}`" if same else f"head `{md(head_sha)}`"
    out = CommentBudget(max_chars, reserve=_RESERVE)
    head = [
        MARKER,
        "## kperf ab: " + headline(doc),  # our own words and numbers only
        "",
        f"Base `{md(base_sha)}` ({md(base_rev)}) vs {head_words}"
        + (f" on {md(doc['device'])}" if doc.get("device") else " (static only)"),
        "",
    ]
    if note := timing_note(doc):
        head += [md(note), ""]
    if link:
        head += [f"**[Full report]({link})**", ""]
    for line in head:  # bounded by md()'s field limit; checked all the same
        out.add_if_fits(line)
    left: dict[str, int] = {}  # what was cut, for the notice: "kernels" -> how many

    def cut(what: str, n: int) -> None:
        if n > 0:
            left[what] = left.get(what, 0) + n

    kernels = kernels_of(doc)
    if kernels:
        gate = _static_gate(doc)
        header = table_lines([], _TOP)
        if out.add_if_fits("\n".join(header)):
            shown = 0
            for k in kernels[:MAX_KERNEL_ROWS]:
                if not out.add_if_fits(table_lines([_kernel_cells(k, gate)], _TOP)[2]):
                    break
                shown += 1
            if shown < len(kernels):
                more = ["", f"… {len(kernels) - shown} more"] + [""] * (len(_TOP) - 2)
                out.add(table_lines([more], _TOP)[2])  # kept room: _RESERVE
            cut("kernels", len(kernels) - shown)
            out.add("")
        else:
            cut("kernels", len(kernels))
        n_launches = sum(len(k.get("launches") or []) for k in kernels)
        first = f"- **{md(kernels[0]['kernel'])}** ({md(slower_count(kernels[0]))})"
        if out.open_fold(f"<details><summary>Each timed launch ({n_launches})</summary>", first):
            for i, k in enumerate(kernels):
                moved = [x for x in k.get("launches") or [] if x.get("verdict") != "unchanged"]
                rest = [x for x in k.get("launches") or [] if x.get("verdict") == "unchanged"]
                lines = [f"- **{md(k['kernel'])}** ({md(slower_count(k))})"]
                if not out.add_if_fits(lines[0]):
                    cut("launches", sum(len(kk.get("launches") or []) for kk in kernels[i:]))
                    break
                for j, x in enumerate(moved):
                    if not out.add_if_fits(_launch_line(x)):
                        cut("launches", len(moved) - j + len(rest))
                        rest = []
                        break
                if rest and not out.add_if_fits(_folded_line(rest)):
                    cut("launches", len(rest))
            out.close_fold()
        else:
            cut("launches", n_launches)
    groups = static_kernels_of(doc)
    if groups and out.add_if_fits("**Static regressions** (launches not timed)"):
        out.add("")
        for i, g in enumerate(groups):
            line = f"- {md(g['kernel'])} ({md(g['site'])}) {md(g['arch'])}: {md(static_summary(g))}"
            if not out.add_if_fits(line):
                cut("static regressions", len(groups) - i)
                break
            for x in g["launches"][:8]:
                tests = ", ".join(x["tests"][:3]) + (" …" if len(x["tests"]) > 3 else "")
                if not out.add_if_fits(
                    f"  - {md(launch_text(x['args'], x['grid'], x['config'])) or '-'}: {md(x['reason'])} "
                    f"({md(tests)})"
                ):
                    break
        out.add("")
    elif groups:
        cut("static regressions", len(groups))
    diffs = [
        "\n".join([f"- **{md(t['status'])}** {md(t['test'])}", *(f"  - {md(c)}" for c in t["changes"] or [])])
        for t in _changed_tests(doc)
    ]
    if diffs and out.open_fold("<details><summary>Static diff: what changed per test</summary>", diffs[0]):
        for i, text in enumerate(diffs):
            if not out.add_if_fits(text):
                cut("changed tests", len(diffs) - i)
                break
        out.close_fold()
    elif diffs:
        cut("changed tests", len(diffs))
    messages = doc.get("messages") or []
    for i, m in enumerate(messages):
        if not out.add_if_fits(f"> {md(m)}"):
            cut("notes", len(messages) - i)
            break
    notice = None
    if left:
        more = ", ".join(f"{n} more {what}" for what, n in left.items())
        notice = f"… truncated: {more} in the full report"
    return out.text(notice)


def static_kernels_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Static regressions per Triton kernel and arch (stored since document version 2)."""
    groups = doc.get("static_kernels")
    return list(groups) if isinstance(groups, list) else static_groups(doc.get("static_regressions") or [])


def static_summary(g: dict[str, Any]) -> str:
    """ "registers +244.8% > +10% (default) (+3 other change(s)); 4 launch(es) in 4 test(s)" """
    reasons = [str(r) for r in g.get("reasons") or []]
    more = f" (+{len(reasons) - 1} other change(s))" if len(reasons) > 1 else ""
    return (
        f"{reasons[0] if reasons else '?'}{more}; {len(g.get('launches') or [])} launch(es) in "
        f"{len(g.get('tests') or [])} test(s)"
    )


def render_summary(doc: dict[str, Any], *, max_chars: int = MAX_CHARS, link: str | None = None) -> str:
    """For $GITHUB_STEP_SUMMARY: the comment without the hidden marker."""
    return render_markdown(doc, max_chars=max_chars, link=link).replace(MARKER + "\n", "", 1)


def _ms(v: Any) -> str:
    return "?" if v is None else f"{float(v):.4g} ms"


#: a benchmark script's call as kperf stores it: "<script>::<module>.<function>#k[<label>]"
_SCRIPT_CALL = re.compile(r"^(?P<script>[^:]+)::(?P<site>[^\[\]]+#(?:\d+|L\d+))\[(?P<label>[^\]]*)\]$")


def script_sweeps(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Per (script, call site, kernel) of a `kperf ab --bench` run: the base's and the head's
    median of each timed call in call order, drawn as a sweep (base beside head)."""
    groups: dict[tuple[str, str, str], list[tuple[str, Any, Any]]] = {}
    for t in doc.get("timed") or []:
        m = _SCRIPT_CALL.match(str(t.get("test") or ""))
        if m is None:
            continue
        key = (m["script"], m["site"], str(t.get("kernel") or ""))
        groups.setdefault(key, []).append((m["label"], t.get("base_median_ms"), t.get("head_median_ms")))
    out = []
    for (script, site, kernel), points in list(groups.items())[:MAX_SWEEPS]:
        labels = list(dict.fromkeys(label for label, _, _ in points))
        series = [
            ("base", "base", [(label, float(b)) for label, b, _ in points if isinstance(b, (int, float))]),
            ("cur", "head", [(label, float(h)) for label, _, h in points if isinstance(h, (int, float))]),
        ]
        svg = sweep_svg(series, labels=labels, unit="ms", title=f"{kernel}: {script} {site}")
        if svg is not None:
            out.append({"title": f"{kernel}: {script} {site}", "svg": svg})
    return out


def _tiles(
    doc: dict[str, Any], kernels: list[dict[str, Any]], regs: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The summary tiles: kernels per time verdict where something was timed (never a row of
    zeros for a static-only run), then the static side in its own words."""
    tiles = []
    if kernels:
        for v in ("slower", "faster", "inconclusive", "unchanged"):
            tiles.append(
                {"cls": v, "n": sum(1 for k in kernels if k["verdict"] == v), "label": f"kernels {v}"}
            )
    c = doc.get("counts") or {}
    if regs:
        tiles.append(
            {"cls": "worse", "n": len({g["site"] for g in regs}), "label": "kernels regressed (static)"}
        )
    for status, label in (("changed", "tests changed"), ("identical", "tests identical, not timed")):
        if c.get(status):
            tiles.append({"cls": status, "n": int(c[status]), "label": label})
    return tiles


def _state(kernels: list[dict[str, Any]], regs: list[dict[str, Any]], doc: dict[str, Any]) -> str:
    if any(k["verdict"] == "slower" for k in kernels) or regs:
        return "bad"
    changed = int((doc.get("counts") or {}).get("changed", 0) or 0)
    if any(k["verdict"] == "inconclusive" for k in kernels) or (changed and not kernels):
        return "warn"
    return "good"


def _plot(k: dict[str, Any], floor: float) -> Any:
    rows = []
    for i, x in enumerate(k["launches"], 1):
        ratio, lo, hi, base = (_num(x.get(f)) for f in ("ratio", "ci_low", "ci_high", "base_ms"))
        if ratio is None:
            continue
        rows.append(
            (
                f"#{i} {shape_text(x)}",
                str(x["verdict"]),
                ratio - 1,
                None if lo is None else lo - 1,
                None if hi is None else hi - 1,
                floor / base if base else None,
            )
        )
    th = next(
        (t for x in k["launches"] if (t := _num(x.get("threshold"))) is not None), Settings.ab_threshold
    )
    return ab_intervals_svg(rows, th, f"{k['kernel']}: change per launch"), th


def render_html(doc: dict[str, Any]) -> str:
    """The A/B page: the run report's design (its stylesheet, banner and tiles), wide tables
    scrolling inside their box, kernels worst first, one interval plot per kernel."""
    moved_by_test = {t["test"]: t.get("changes") or [] for t in doc.get("tests") or []}
    timed = [
        {
            "verdict": str(t["verdict"]),
            "kernel": str(t["kernel"]),
            "test": str(t["test"]),
            "change": change_text(t),
            "medians": times_text({"base_ms": t.get("base_median_ms"), "head_ms": t.get("head_median_ms")}),
            "pairs": int(t.get("pairs") or 0),
            "moved": [str(m) for m in (t.get("regions_moved") or [])]
            + [str(m) for m in (t.get("changes") or moved_by_test.get(t["test"], []))],
        }
        for t in sorted(doc.get("timed") or [], key=_severity)
    ]
    floor = floor_ms(doc)
    gate = _static_gate(doc)
    kernels = []
    for k in kernels_of(doc):
        svg, th = _plot(k, floor)
        w = (k.get("launches") or [{}])[0]
        kernels.append(
            {
                "verdict": str(k["verdict"]),
                "kernel": str(k["kernel"]),
                "site": str(k["site"]),
                "shape": shape_text(w),
                "times": times_text(w),
                "change": kernel_change(k),
                "count": slower_count(k),
                "gate": gate.get(str(k["site"]), ""),
                "cause": cause_text(k),
                "svg": svg,
                "threshold": f"{th:.2%}",
                "launches": [
                    {
                        "verdict": str(x["verdict"]),
                        "change": change_text(x),
                        "times": times_text(x),
                        "why": str(x.get("why") or ""),
                        "launch": str(x.get("launch") or ""),
                        "changes": [str(c) for c in x.get("changes") or []],
                        "tests": [str(t) for t in x.get("tests") or []],
                    }
                    for x in k.get("launches") or []
                ],
            }
        )
    regs = [
        {
            "kernel": str(g["kernel"]),
            "arch": str(g["arch"]),
            "site": str(g["site"]),
            "summary": static_summary(g),
            "launches": [
                {"launch": launch_text(x["args"], x["grid"], x["config"]), "reason": str(x["reason"])}
                for x in g["launches"]
            ],
            "tests": [str(t) for t in g["tests"]],
        }
        for g in static_kernels_of(doc)
    ]
    base_sha, base_rev, head_sha, same = _sides(doc)
    return render_page(
        "ab.html.j2",
        head=headline(doc),
        state=_state(kernels, regs, doc),
        tiles=_tiles(doc, kernels, regs),
        base_sha=base_sha,
        base_rev=base_rev,
        head_sha=head_sha,
        same=same,
        device=doc.get("device"),
        timing_note=timing_note(doc),
        floor=fmt_value(floor, "ms"),
        timed=timed,
        kernels=kernels,
        sweeps=script_sweeps(doc),
        regs=regs,
        tests=sorted(
            (
                {
                    "test": str(t["test"]),
                    "status": str(t["status"]),
                    "changes": [str(c) for c in t.get("changes") or []],
                }
                for t in doc.get("tests") or []
            ),
            key=lambda t: t["status"] == "identical",  # changed tests first
        ),
        messages=[str(m) for m in doc.get("messages") or []],
    )


def write_ab_reports(doc: dict[str, Any], out_dir: Path) -> list[Path]:
    """index.html, comment.md and summary.md in ``out_dir`` (created)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "index.html", out_dir / "comment.md", out_dir / "summary.md"]
    for path, text in zip(paths, (render_html(doc), render_markdown(doc), render_summary(doc)), strict=True):
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)  # never a half-written report
    return paths
