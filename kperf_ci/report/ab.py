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

import jinja2

from kperf_ci.judge.group import kernel_groups, launch_text, static_groups, static_launch_text
from kperf_ci.report.html import no_control_chars
from kperf_ci.report.markdown import md_field
from kperf_ci.report.plots import sweep_svg
from kperf_ci.report.sweeps import MAX_SWEEPS

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


def kernels_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The timed launches per Triton kernel (stored since document version 2; grouped here for
    older documents)."""
    kernels = doc.get("kernels")
    return list(kernels) if isinstance(kernels, list) else kernel_groups(doc.get("timed") or [])


def kernel_change(k: dict[str, Any]) -> str:
    """One launch: its change with the interval; several: the range of their changes."""
    launches = k.get("launches") or []
    if len(launches) == 1:
        return change_text(launches[0])
    lo, hi = k.get("ratio_min"), k.get("ratio_max")
    if lo is None:
        return "?"
    return pct(lo) if lo == hi else f"{pct(lo)} .. {pct(hi)}"


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


def render_markdown(doc: dict[str, Any], *, max_chars: int = MAX_CHARS) -> str:
    base_sha, base_rev, head_sha, same = _sides(doc)
    head_words = f"the working tree of `{md(head_sha)}`" if same else f"head `{md(head_sha)}`"
    lines = [
        MARKER,
        "## kperf ab: " + headline(doc),  # our own words and numbers only
        "",
        f"Base `{md(base_sha)}` ({md(base_rev)}) vs {head_words}"
        + (f" on {md(doc['device'])}" if doc.get("device") else " (static only)"),
        "",
    ]
    kernels = kernels_of(doc)
    if note := timing_note(doc):
        lines += [md(note), ""]
    if kernels:
        lines += [
            "| | kernel | launches | change [99% CI] | tests | what moved |",
            "|---|---|---|---|---|---|",
        ]
        for k in kernels:
            n_tests = len(k.get("tests") or [])
            lines.append(
                f"| {_ICON.get(k['verdict'], '')} {md(k['verdict'])} | {md(k['kernel'])} ({md(k['site'])}) "
                f"| {len(k.get('launches') or [])} | {md(kernel_change(k))} | {n_tests} "
                f"| {md('; '.join(k.get('changes') or [])) or '-'} |"
            )
        lines += ["", "<details><summary>Each timed launch</summary>", ""]
        for k in kernels:
            lines.append(f"- **{md(k['kernel'])}**")
            for x in k.get("launches") or []:
                lines.append(
                    f"  - {_ICON.get(x['verdict'], '')} {md(x['verdict'])} {md(change_text(x))}: "
                    f"{md(x['launch']) or '-'} ({md(', '.join(x.get('tests') or []))})"
                )
        lines += ["", "</details>", ""]
    groups = static_kernels_of(doc)
    if groups:
        lines += ["**Static regressions** (launches not timed)", ""]
        for g in groups:
            lines.append(f"- {md(g['kernel'])} ({md(g['site'])}) {md(g['arch'])}: {md(static_summary(g))}")
            for x in g["launches"][:8]:
                tests = ", ".join(x["tests"][:3]) + (" …" if len(x["tests"]) > 3 else "")
                lines.append(f"  - {md(static_launch_text(x)) or '-'}: {md(x['reason'])} ({md(tests)})")
        lines.append("")
    changed = _changed_tests(doc)
    if changed:
        lines += ["<details><summary>Static diff: what changed per test</summary>", ""]
        for t in changed:
            lines.append(f"- **{md(t['status'])}** {md(t['test'])}")
            lines += [f"  - {md(c)}" for c in t.get("changes") or []]
        lines += ["", "</details>", ""]
    for m in doc.get("messages") or []:
        lines.append(f"> {md(m)}")
    text = "\n".join(lines).rstrip() + "\n"
    if len(text) > max_chars:
        cut = text[: max_chars - 200].rsplit("\n", 1)[0]
        text = cut + "\n\n… (truncated: the full report is in the job's artifacts)\n"
    return text


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


def render_summary(doc: dict[str, Any]) -> str:
    """For $GITHUB_STEP_SUMMARY: the comment without the hidden marker."""
    return render_markdown(doc).replace(MARKER + "\n", "", 1)


_HTML = jinja2.Environment(
    autoescape=True, finalize=no_control_chars, undefined=jinja2.StrictUndefined
).from_string(
    """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>kperf ab</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}
.slower{background:#fdd}.faster{background:#dfd}.inconclusive{background:#ffd}
code{font-size:12px}ul{margin:0;padding-left:1.2em}
</style></head><body>
<h1 id="verdict">{{ head }}</h1>
<p>Base <code>{{ base_sha }}</code> ({{ base_rev }}) vs
{% if same %}the working tree of{% else %}head{% endif %} <code>{{ head_sha }}</code>
{% if device %}on {{ device }}{% else %}(static only){% endif %}</p>
{% if timing_note %}<p id="timing-method">{{ timing_note }}</p>{% endif %}
{% if kernels %}
<h2>Timed A/B per kernel (interleaved, paired)</h2>
<table id="kernels"><tr><th>verdict</th><th>kernel</th><th>change [99% CI]</th><th>launches</th>
<th>tests</th><th>what moved</th></tr>
{% for k in kernels %}<tr class="{{ k.verdict }}"><td>{{ k.verdict }}</td>
<td>{{ k.kernel }}<br><code>{{ k.site }}</code></td><td>{{ k.change }}</td>
<td><ul>{% for x in k.launches %}<li>{{ x.verdict }} {{ x.change }}:
<code>{{ x.launch }}</code></li>{% endfor %}</ul></td>
<td><ul>{% for t in k.tests %}<li>{{ t }}</li>{% endfor %}</ul></td>
<td><ul>{% for m in k.changes %}<li>{{ m }}</li>{% endfor %}</ul></td></tr>
{% endfor %}</table>
{% endif %}
{% if sweeps %}<h2>Benchmark sweeps (base and head medians per do_bench call)</h2>
{% for s in sweeps %}<figure class="sweep"><figcaption>{{ s.title }}</figcaption>{{ s.svg }}</figure>
{% endfor %}{% endif %}
{% if timed %}
<h2>Timed A/B per test</h2>
<table id="timed"><tr><th>verdict</th><th>kernel</th><th>test</th><th>change [99% CI]</th>
<th>base / head median</th><th>pairs</th><th>what moved</th></tr>
{% for t in timed %}<tr class="{{ t.verdict }}"><td>{{ t.verdict }}</td><td>{{ t.kernel }}</td>
<td>{{ t.test }}</td>
<td>{{ t.change }}</td><td>{{ t.medians }}</td><td>{{ t.pairs }}</td>
<td><ul>{% for m in t.moved %}<li>{{ m }}</li>{% endfor %}</ul></td></tr>
{% endfor %}</table>
{% endif %}
{% if regs %}<h2>Static regressions (launches not timed)</h2>
<table id="static"><tr><th>kernel</th><th>arch</th><th>what regressed</th><th>launches</th><th>tests</th></tr>
{% for g in regs %}<tr><td>{{ g.kernel }}<br><code>{{ g.site }}</code></td><td>{{ g.arch }}</td>
<td>{{ g.summary }}</td>
<td><ul>{% for x in g.launches %}<li><code>{{ x.launch }}</code>: {{ x.reason }}</li>{% endfor %}</ul></td>
<td><ul>{% for t in g.tests %}<li>{{ t }}</li>{% endfor %}</ul></td></tr>
{% endfor %}</table>{% endif %}
<h2>Static diff per test</h2>
<table id="tests"><tr><th>test</th><th>status</th><th>what changed</th></tr>
{% for t in tests %}<tr><td>{{ t.test }}</td><td>{{ t.status }}</td>
<td><ul>{% for c in t.changes %}<li>{{ c }}</li>{% endfor %}</ul></td></tr>
{% endfor %}</table>
{% if messages %}<h2>Notes</h2><ul>{% for m in messages %}<li>{{ m }}</li>{% endfor %}</ul>{% endif %}
</body></html>
"""
)


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


def render_html(doc: dict[str, Any]) -> str:
    moved_by_test = {t["test"]: t.get("changes") or [] for t in doc.get("tests") or []}
    timed = [
        {
            "verdict": str(t["verdict"]),
            "kernel": str(t["kernel"]),
            "test": str(t["test"]),
            "change": change_text(t),
            "medians": f"{_ms(t.get('base_median_ms'))} / {_ms(t.get('head_median_ms'))}",
            "pairs": int(t.get("pairs") or 0),
            "moved": [str(m) for m in (t.get("regions_moved") or [])]
            + [str(m) for m in (t.get("changes") or moved_by_test.get(t["test"], []))],
        }
        for t in doc.get("timed") or []
    ]
    kernels = [
        {
            "verdict": str(k["verdict"]),
            "kernel": str(k["kernel"]),
            "site": str(k["site"]),
            "change": kernel_change(k),
            "launches": [
                {"verdict": str(x["verdict"]), "change": change_text(x), "launch": str(x.get("launch") or "")}
                for x in k.get("launches") or []
            ],
            "tests": [str(t) for t in k.get("tests") or []],
            "changes": [str(c) for c in k.get("changes") or []],
        }
        for k in kernels_of(doc)
    ]
    base_sha, base_rev, head_sha, same = _sides(doc)
    return _HTML.render(
        head=headline(doc),
        base_sha=base_sha,
        base_rev=base_rev,
        head_sha=head_sha,
        same=same,
        device=doc.get("device"),
        timing_note=timing_note(doc),
        timed=timed,
        kernels=kernels,
        sweeps=script_sweeps(doc),
        regs=[
            {
                "kernel": str(g["kernel"]),
                "arch": str(g["arch"]),
                "site": str(g["site"]),
                "summary": static_summary(g),
                "launches": [
                    {"launch": static_launch_text(x), "reason": str(x["reason"])} for x in g["launches"]
                ],
                "tests": [str(t) for t in g["tests"]],
            }
            for g in static_kernels_of(doc)
        ],
        tests=[
            {
                "test": str(t["test"]),
                "status": str(t["status"]),
                "changes": [str(c) for c in t.get("changes") or []],
            }
            for t in doc.get("tests") or []
        ],
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
