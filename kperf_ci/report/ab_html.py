"""The A/B HTML page (`kperf ab`'s index.html, `kperf report --ab --format html`): the run
report's design through html.render_page and templates/ab.html.j2, with one interval plot per
kernel and a sweep per benchmark-script call site. Autoescaped: names from the PR are text."""

from __future__ import annotations

import re
from typing import Any

from markupsafe import Markup, escape

from kperf_ci.judge.group import severity, static_groups
from kperf_ci.judge.launch_diff import stopped_early_text
from kperf_ci.judge.verdict import regression
from kperf_ci.report.ab_static_view import sides, static_gate, static_rows
from kperf_ci.report.ab_view import (
    SHAPE_RULE,
    cause_text,
    change_text,
    changes_of_test,
    floor_ms,
    headline,
    identical_kernels,
    identical_notes,
    kernel_change,
    kernel_where,
    kernels_of,
    largest_abs_text,
    number,
    run_threshold,
    shape_text,
    slower_count,
    static_kernels_of,
    test_status_word,
    times_text,
    timing_note,
    where_text,
)
from kperf_ci.report.ab_words import cause_order, readable
from kperf_ci.report.html import render_page
from kperf_ci.report.plots import ab_intervals_svg, sweep_svg
from kperf_ci.report.sweeps import MAX_SWEEPS
from kperf_ci.units import fmt_value

#: where a long name may wrap: after a test id's "::" and before its parameter id's "[", so a
#: path ("src/ops/geglu.py"), a shape ("a=bf16[369x4231]") and a parameter id ("[dtype0-1e-05]")
#: each stay whole (a shape split as "bf16[" / "369x4231]" was easy to misread)
_BREAK = re.compile(r"(::|(?<=\w)(?=\[))")


def breakable(text: Any) -> Markup:
    """``text`` escaped, with a line-break opportunity (<wbr>) only where a reader expects one
    (:data:`_BREAK`): "tests/test_geglu.py::|test_x|[dtype0-1e-05]"; never inside a name, a
    path or a shape (the stylesheet wraps at spaces, not anywhere)."""
    return Markup("").join(
        Markup(escape(part)) + (Markup("<wbr>") if part == "::" or (not part and i) else Markup(""))
        for i, part in enumerate(_BREAK.split(str(text)))
    )


def arrows(text: Any) -> Markup:
    """``text`` escaped, each arrow kept on the line of the value before it ("375 →" never
    "375 |→ 1,252"); an arrow the document still spells "->" kept whole."""
    out = str(escape(str(text))).replace("-&gt;", '<span class="nw">-&gt;</span>')
    return Markup(out.replace(" → ", "\u00a0→ "))


def _cell(text: str, *, after_arrow: bool = False) -> str:
    """A time or change cell that wraps only before its interval: "6.05 µs → 7.97 µs" and
    "+32.18%" / "[+31.70%, +32.64%]" each stay whole (the tables fit the page at 1400 px).
    ``after_arrow``: the times may also wrap after their arrow ("6.05 µs →" / "7.97 µs"), which
    gives the top table's cause the room to read in three lines (issue 36's third walk)."""
    value, bracket, rest = text.partition(" [")
    value = value.replace(" ", "\u00a0")
    if after_arrow:
        value = value.replace("\u00a0→\u00a0", "\u00a0→ ")
    return value + (f" [{rest.replace(' ', chr(0xA0))}" if bracket else "")


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
    if improved := {g["site"] for g in static_groups(doc.get("static_improved") or [])} - {
        g["site"] for g in regs
    }:
        tiles.append({"cls": "better", "n": len(improved), "label": "kernels improved (static)"})
    for status, label in (
        ("changed", "tests changed"),
        # the banner counts them; a tile did not (issue 36's fourth walk item 14, fifth item 9)
        ("unknown", "tests unknown (could not be compared)"),
        ("identical", "tests identical (not timed)"),
        ("skipped", "tests skipped"),
    ):
        if c.get(status):
            tiles.append({"cls": test_status_word(status), "n": int(c[status]), "label": label})
    return tiles


def _state(kernels: list[dict[str, Any]], doc: dict[str, Any]) -> str:
    """The banner: "bad" exactly when :func:`regression` says so (the exit code's answer), else
    "warn" for what is not settled (an inconclusive kernel, changed tests not timed)."""
    if regression(doc):
        return "bad"
    changed = int((doc.get("counts") or {}).get("changed", 0) or 0)
    if any(k["verdict"] == "inconclusive" for k in kernels) or (changed and not kernels):
        return "warn"
    return "good"


def _plot(k: dict[str, Any], floor: float, threshold: float) -> Any:
    rows = []
    for i, x in enumerate(k["launches"], 1):
        ratio, lo, hi, base = (number(x.get(f)) for f in ("ratio", "ci_low", "ci_high", "base_ms"))
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
                number(x.get("threshold")),
            )
        )
    return ab_intervals_svg(rows, threshold, f"{k['kernel']}: change per launch")


def _static(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The static table's rows (report/ab_view.static_rows), escaped and breakable for the page."""
    return [
        {
            **{f: str(k[f]) for f in ("gate", "arch", "shape", "count")},
            "cause": arrows(k["cause"]),
            # the timed table's kernel cell: name, then the file (kernel_where)
            "kernel": breakable(kernel_where(k)[0]),
            "site": breakable(kernel_where(k)[1]),
            "launches": [
                {
                    "gate": str(x["gate"]),
                    "launch": str(x["launch"]),  # wraps at its spaces: never inside a shape
                    "reason": arrows(x.get("reason") or ""),
                }
                for x in k["launches"]
            ],
            "tests": [breakable(t) for t in k["tests"]],
        }
        for k in static_rows(doc)
    ]


def render_html(doc: dict[str, Any]) -> str:
    """The A/B page: the run report's design (its stylesheet, banner and tiles), wide tables
    scrolling inside their box, kernels worst first, one interval plot per kernel."""
    doc = readable(doc)  # an older document's metric ids in today's words
    moved_by_test = {t["test"]: t.get("changes") or [] for t in doc.get("tests") or []}
    timed = [
        {
            "verdict": str(t["verdict"]),
            "kernel": breakable(t["kernel"]),
            "test": breakable(t["test"]),
            "change": _cell(change_text(t)),
            "medians": _cell(
                times_text({"base_ms": t.get("base_median_ms"), "head_ms": t.get("head_median_ms")})
            ),
            "pairs": int(t.get("pairs") or 0),
            "moved": [arrows(m) for m in (t.get("regions_moved") or [])]
            + [arrows(m) for m in cause_order(t.get("changes") or moved_by_test.get(t["test"], []))],
        }
        for t in sorted(doc.get("timed") or [], key=severity)
    ]
    floor, threshold = floor_ms(doc), run_threshold(doc)
    gate = static_gate(doc)
    kernels = []
    for k in kernels_of(doc):
        svg = _plot(k, floor, threshold)
        w = (k.get("launches") or [{}])[0]
        name, path = kernel_where(k)  # one kernel cell for the timed and the static tables
        kernels.append(
            {
                "verdict": str(k["verdict"]),
                "kernel": breakable(name),
                "site": breakable(path),
                "shape": shape_text(w),
                "largest": arrows(largest_abs_text(k)),
                "times": _cell(times_text(w), after_arrow=True),
                "change": _cell(kernel_change(k)),
                "count": slower_count(k),
                "gate": gate.get(str(k["site"]), ""),
                "cause": arrows(cause_text(k)),
                "svg": svg,
                "launches": [
                    {
                        "verdict": str(x["verdict"]),
                        "change": _cell(change_text(x)),
                        "times": _cell(times_text(x)),
                        "cause": [arrows(c) for c in cause_order(x.get("changes") or [])]
                        + ([str(x["why"])] if x.get("why") else []),
                        "launch": str(x.get("launch") or ""),  # wraps at its spaces
                        "tests": [breakable(t) for t in [*(x.get("tests") or []), *identical_notes(x)]],
                    }
                    for x in k.get("launches") or []
                ],
            }
        )
    regs = static_kernels_of(doc)
    static = _static(doc)
    base_sha, base_rev, head_sha, same = sides(doc)
    return render_page(
        "ab.html.j2",
        styles=("ab.css",),
        head=headline(doc),
        state=_state(kernels, doc),
        tiles=_tiles(doc, kernels, regs),
        base_sha=base_sha,
        base_rev=base_rev,
        head_sha=head_sha,
        same=same,
        where=where_text(doc),
        timing_note=timing_note(doc),
        # the comment's warning, on the page too (a fresh walk found it only in the markdown)
        stopped_early=stopped_early_text(doc.get("tests") or []),
        shape_rule=f"A worst launch is shown by {SHAPE_RULE}.",
        floor=fmt_value(floor, "ms"),
        timed=timed,
        kernels=kernels,
        sweeps=script_sweeps(doc),
        static=static,
        # the tests whose launches differ, each with its cause; the identical ones as a count
        tests=[
            {
                "test": breakable(t["test"]),
                "status": test_status_word(t["status"]),
                "changes": [arrows(c) for c in changes_of_test(t)],
            }
            for t in doc.get("tests") or []
            if t.get("status") != "identical"
        ],
        identical=sum(1 for t in doc.get("tests") or [] if t.get("status") == "identical"),
        # named as the comment's fold names them: "softmax (softmax_kernel) in ... (2 tests)"
        identical_kernels=[breakable(k) for k in identical_kernels(doc)],
        messages=[str(m) for m in doc.get("messages") or []],
    )
