"""The static HTML site: index.html (summary + all variants) and one page per variant under k/.

Each variant page shows the current run's intra-kernel findings (the ``findings`` artifact:
flagged ones with their explanation and suggestion, the rest as a list); the summary names the
variants with flagged findings and counts them per row.

Self-contained: CSS and the few lines of JavaScript are inlined into each page, charts are inline
SVG, and a Content-Security-Policy allows nothing else (no network, no injected script: the only
script allowed is the one whose hash the page carries). Jinja2 autoescape is on for every
template, so text from the runs (kernel names, configs, tags, SASS) is always shown as text.
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import json
import logging
import math
import multiprocessing
import os
import re
from collections.abc import Iterable
from functools import cache, lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup, escape

from .. import __version__
from ..analysis.occupancy import busy_sm_series
from ..judge.changepoint import detect_change_points
from ..model import VariantResult
from ..traces.perfetto import write_chrome_trace
from ..traces.proton_chrome import load_proton_trace
from ..traces.timeline_file import timeline_from_json, timeline_from_npz
from ..units import fmt_ci, fmt_rel, fmt_value
from . import plots
from .safe_text import terminal_safe  # warnings quote stored names and reach the terminal
from .view import (
    INSTRUCTION_CLASSES,
    MAIN_VERDICTS,
    STATIC_HEADLINE,
    VERDICTS,
    MetricRow,
    Report,
    VariantView,
    threshold_text,
)

log = logging.getLogger(__name__)

#: Most lines of a SASS/PTX diff shown on a page (the rest is summarised in a note).
MAX_DIFF_LINES = 1500
#: Inputs longer than this (lines) are not diffed line by line (difflib is quadratic at worst).
MAX_DIFF_INPUT = 60_000
#: Trace artifacts up to this size (characters) are written into the site; larger ones are not.
MAX_TRACE_COPY = 64 * 1024 * 1024
#: Timelines up to this many records are exported as a Perfetto trace when the run has none.
MAX_TRACE_RECORDS = 200_000
#: History: the metrics charted (the first present of each group).
HISTORY_METRICS = (("time.median",), ("registers",), ("sass.instructions",))
TIMELINE_ARTIFACTS = ("timeline", "trace")  # artifact names starting with these hold timelines
TRACE_ARTIFACTS = ("trace", "perfetto", "proton")


# --------------------------------------------------------------------------- formatting


def fmt_delta(r: MetricRow) -> str:
    d = r.delta
    if d is None or d == 0:
        return ""
    return ("+" if d > 0 else "−") + fmt_value(abs(d), r.unit)


def sort_num(v: float | None) -> str:
    """data-sort value for a numeric cell (empty sorts first)."""
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else repr(float(v))


# --------------------------------------------------------------------------- environment


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def no_control_chars(value: object) -> object:
    """Every value a template prints: control characters (terminal escapes) as visible ``\\x1b``,
    so `cat index.html` in a terminal runs nothing.  Markup stays autoescape's job."""
    if isinstance(value, str) and _CONTROL.search(value):
        return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", value)
    return value


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("kperf_ci.report", "templates"),
        autoescape=True,  # every template, whatever its name
        finalize=no_control_chars,  # a stored ESC/BEL is shown, never written raw into the page
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters.update(
        fmt=fmt_value,
        fmt_rel=fmt_rel,
        fmt_ci=fmt_ci,
        fmt_delta=fmt_delta,
        sort_num=sort_num,
        threshold_text=threshold_text,
    )
    return env


@cache
def _asset(name: str) -> str:
    return resources.files("kperf_ci.report").joinpath("static", name).read_text(encoding="utf-8")


def _csp(script: str | None) -> str:
    """Nothing from anywhere; inline styles; only the page's own script (by hash); data: images."""
    parts = [
        "default-src 'none'",
        "style-src 'unsafe-inline'",
        "img-src data:",
        "base-uri 'none'",
        "form-action 'none'",
    ]
    if script:
        digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode()
        parts.append(f"script-src 'sha256-{digest}'")
    return "; ".join(parts)


def _page(template: str, *, script: str | None = None, **ctx: Any) -> str:
    return (
        _env()
        .get_template(template)
        .render(
            css=Markup(_asset("report.css")),
            script=Markup(script) if script else None,
            csp=_csp(script),
            version=__version__,
            verdicts=VERDICTS,
            main_verdicts=MAIN_VERDICTS,
            **ctx,
        )
    )


# --------------------------------------------------------------------------- artifacts


def _artifact(r: VariantResult | None, *prefixes: str) -> tuple[str, Any] | None:
    """(name, value) of the first artifact whose name is or starts with one of the prefixes.

    A value is the text itself or (in memory) bytes. Never a path: a database is data, and a
    crafted one must not make the report read ``/etc/passwd`` or ``/proc/self/environ``."""
    if r is None or not r.artifacts:
        return None
    for p in prefixes:
        for name, value in r.artifacts.items():
            low = name.lower()
            if low == p or low.startswith(p + ".") or low.startswith(p + "_") or low.endswith("." + p):
                return name, value
    return None


def _artifact_text(r: VariantResult | None, *prefixes: str) -> str | None:
    found = _artifact(r, *prefixes)
    if found is None:
        return None
    value = found[1]
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value


_ADDR = re.compile(r"/\*\s*(?:0x)?[0-9a-fA-F]{4,}\s*\*/")
_SPACES = re.compile(r"[ \t]+")


def _normalize_asm(text: str) -> list[str]:
    """Lines of SASS/PTX without instruction addresses and encodings, so a diff shows code changes
    rather than every address after the first inserted instruction."""
    out = []
    for line in text.splitlines():
        line = _SPACES.sub(" ", _ADDR.sub("", line)).strip()
        if line:
            out.append(line)
    return out


def asm_diff(base: str | None, cur: str | None, label: str) -> dict[str, Any] | None:
    """Unified diff of two listings as classified lines, or None when there is nothing to diff."""
    if base is None or cur is None:
        return None
    a, b = _normalize_asm(base), _normalize_asm(cur)
    if a == b:
        return {"label": label, "lines": [], "identical": True, "note": ""}
    note = ""
    if len(a) + len(b) > MAX_DIFF_INPUT:
        a, b = a[: MAX_DIFF_INPUT // 2], b[: MAX_DIFF_INPUT // 2]
        note = f"Listings longer than {MAX_DIFF_INPUT // 2} lines: only their beginnings were compared."
    lines = []
    added = removed = 0
    for i, line in enumerate(difflib.unified_diff(a, b, "baseline", "current", n=3, lineterm="")):
        if i < 2:
            cls = "head"
        elif line.startswith("@@"):
            cls = "hunk"
        elif line.startswith("+"):
            cls, added = "add", added + 1
        elif line.startswith("-"):
            cls, removed = "del", removed + 1
        else:
            cls = ""
        lines.append((cls, line))
    shown = lines[:MAX_DIFF_LINES]
    if len(lines) > MAX_DIFF_LINES:
        note = (note + " " if note else "") + f"{len(lines) - MAX_DIFF_LINES} more diff lines not shown."
    return {
        "label": label,
        "lines": shown,
        "identical": False,
        "note": note,
        "added": added,
        "removed": removed,
        "base_lines": len(a),
        "cur_lines": len(b),
    }


# --------------------------------------------------------------------------- per-variant sections


_REGION_RE = re.compile(r"^region\.(.+)\.(cycles|ms)$")
# Regions that contain others: stacked only when nothing finer is there.
_REGION_CONTAINERS = ("kernel", "body")


def region_segments(r: VariantResult | None) -> tuple[list[tuple[str, float]], str]:
    """Non-overlapping region parts for a stacked bar, and their unit (cycles preferred).

    ``kernel`` is the whole and ``body`` contains the loops, so they are not stacked next to their
    parts; what the named parts do not cover of ``kernel`` is shown as "other"."""
    if r is None:
        return [], ""
    by_unit: dict[str, dict[str, float]] = {"cycles": {}, "ms": {}}
    for m in r.metrics:
        mm = _REGION_RE.match(m.name)
        if mm:
            by_unit[mm.group(2)][mm.group(1)] = float(m.value)
    unit = "cycles" if by_unit["cycles"] else "ms"
    vals = by_unit[unit]
    if not vals:
        return [], ""
    parts = {n: v for n, v in vals.items() if n not in _REGION_CONTAINERS}
    if not parts and "body" in vals:
        parts = {"body": vals["body"]}
    if not parts:
        return [("kernel", vals["kernel"])] if "kernel" in vals else [], unit
    order = sorted(parts, key=_region_order)
    segs = [(n, parts[n]) for n in order]
    whole = vals.get("kernel")
    if whole is not None:
        rest = whole - sum(parts.values())
        if rest > 0.005 * whole:
            segs.append(("other", rest))
    return segs, unit


def _region_order(name: str) -> tuple:
    fixed = {"prologue": 0, "epilogue": 3}
    if name in fixed:
        return (fixed[name], 0, name)
    m = re.match(r"loop(\d+)$", name)
    if m:
        return (1, int(m.group(1)), name)
    return (2, 0, name)


def _timeline(report: Report, side: str, r: VariantResult | None) -> Any:
    """The launch timeline of one side (``kperf_ci.traces.records.Timeline``), when there is a
    parseable artifact: kperf-timeline JSON, a Proton Chrome trace (its text), or the capture
    stage's binary npz, which is read as bytes through ``report.blob``."""
    found = _artifact(r, *TIMELINE_ARTIFACTS)
    if r is None or found is None:
        return None
    name, value = found
    try:
        raw = value if isinstance(value, bytes) else None
        if raw is None and not value.lstrip().startswith(("{", "[")):
            raw = report.blob(side, r.key.id, name) if report.blob else None  # binary: the stored bytes
        if raw is not None:
            if raw[:2] != b"PK":
                raise ValueError(f"artifact {name!r} is neither JSON nor a timeline npz")
            return timeline_from_npz(raw, num_sms=_sm_count(report, side))
        obj = json.loads(value)
        if not isinstance(obj, (dict, list)):  # the loaders would open() any other value
            raise ValueError(f"artifact {name!r} is JSON but not a trace")
        if isinstance(obj, dict) and obj.get("format") == "kperf-timeline":
            return timeline_from_json(obj)
        if isinstance(obj, dict) and obj.get("format") == "kperf-timelines":
            return timeline_from_json(obj["timelines"][-1])
        return load_proton_trace(obj)
    except Exception as e:  # a malformed artifact costs its chart, never the report
        log.warning("timeline of %s (%s) not shown: %s", terminal_safe(r.key.label()), side, terminal_safe(e))
        return None


def _sm_count(report: Report, side: str) -> int | None:
    info = report.current if side == "current" else report.baseline
    return info.fingerprint.sm_count if info else None


def gantt_lanes(tl: Any) -> list[tuple[str, list[tuple[float, float, str]]]]:
    """Per-SM lanes of CTA spans in µs from the launch start."""
    spans = tl.cta_spans()
    if not len(spans):
        return []
    t0 = float(spans.start_ns.min())
    lanes: dict[int, list[tuple[float, float, str]]] = {}
    for sm, s, e in zip(spans.sm.tolist(), spans.start_ns.tolist(), spans.end_ns.tolist(), strict=True):
        lanes.setdefault(int(sm), []).append(((s - t0) / 1000.0, (e - t0) / 1000.0, "CTA"))
    return [(f"SM {sm}", sorted(bars)) for sm, bars in sorted(lanes.items())]


def _trace_link(v: VariantView, out_dir: Path, timelines: dict[str, Any]) -> dict[str, str] | None:
    """A Perfetto-loadable trace next to the page: the run's own trace artifact (its JSON text
    written out), else one exported from the timeline by kperf_ci.traces.perfetto."""
    for side, r in (("current", v.cur), ("baseline", v.base)):
        found = _artifact(r, *TRACE_ARTIFACTS)
        if found is None or isinstance(found[1], bytes):
            continue
        value = found[1]
        target = out_dir / "k" / f"{v.id}.{side}.trace.json"
        if not value.lstrip().startswith(("{", "[")) or len(value) > MAX_TRACE_COPY:
            continue
        target.write_text(value, encoding="utf-8")
        return {"href": target.name, "side": side, "note": ""}
    for side in ("current", "baseline"):
        tl = timelines.get(side)
        if tl is None or len(tl) > MAX_TRACE_RECORDS:
            continue
        target = out_dir / "k" / f"{v.id}.{side}.trace.json"
        write_chrome_trace(target, tl, busy_series=busy_sm_series)
        return {"href": target.name, "side": side, "note": "exported from the stored timeline"}
    return None


def _history(report: Report, v: VariantView) -> list[dict[str, Any]]:
    if report.history is None or v.cur is None:
        return []
    charts = []
    for group in HISTORY_METRICS:
        name = next((n for n in group if v.cur.metric(n) is not None), None)
        if name is None:
            continue
        try:
            points = report.history(v.id, name)
        except Exception as e:  # history is a bonus; a failing store read costs only the chart
            log.warning(
                "history of %s %s not shown: %s", terminal_safe(v.key.label()), name, terminal_safe(e)
            )
            continue
        if len(points) < 3:  # two points are a line, not a history
            continue
        values = [val for _info, val in points]
        if min(values) == max(values):  # a flat line says less than one sentence
            charts.append(
                {"metric": name, "svg": None, "n": len(points), "flat": values[0], "change_points": []}
            )
            continue
        labels = [(info.git_sha or info.run_id)[:8] for info, _ in points]
        cps = change_points(values, labels)
        unit = v.cur.metric(name).unit  # type: ignore[union-attr]
        svg = plots.history_svg(
            list(zip(labels, values, strict=True)),
            [c["index"] for c in cps],
            unit=unit,
            title=f"History of {name}",
        )
        if svg is not None:
            charts.append({"metric": name, "svg": svg, "n": len(points), "flat": None, "change_points": cps})
    return charts


def change_points(values: list[float], labels: list[str]) -> list[dict[str, Any]]:
    """Change points of a metric's history (kperf_ci.judge.changepoint)."""
    if len(values) < 6:
        return []

    try:
        cps = detect_change_points(values, labels=labels, log=all(x > 0 for x in values))
    except Exception as e:
        log.warning("change point detection failed: %s", terminal_safe(e))
        return []
    return [{"index": c.index, "run": c.run, "rel": c.rel, "p": c.p_value} for c in cps]


def kernel_context(report: Report, v: VariantView, out_dir: Path) -> dict[str, Any]:
    """Everything a variant page shows; charts only where there is data."""
    b, c = v.base, v.cur
    ctx: dict[str, Any] = {"v": v}
    ctx["dyn_rows"] = [r for r in v.rows if r.kind in ("time", "region")]
    ctx["analysis_rows"] = [r for r in v.rows if r.kind not in ("time", "region", "static")]
    static = [r for r in v.rows if r.kind == "static"]
    mix = [
        r
        for r in static
        if r.name.startswith(("sass.", "ptx.")) and r.name.split(".", 1)[1] in INSTRUCTION_CLASSES
    ]
    ctx["static_rows"] = [r for r in static if r not in mix]
    ctx["mix_rows"] = mix
    ctx["headline_static"] = STATIC_HEADLINE
    ctx["dist"] = plots.distribution_svg(b.samples if b else [], c.samples if c else [])
    segs_b, unit_b = region_segments(b)
    segs_c, unit_c = region_segments(c)
    unit = unit_c or unit_b
    rows = []
    if segs_b and unit_b == unit:
        rows.append(("baseline", segs_b))
    if segs_c:
        rows.append(("current", segs_c))
    ctx["regions"] = plots.stacked_bars_svg(rows, unit=unit) if rows else None
    sass_mix = [
        (
            cls,
            (b.metric(f"sass.{cls}").value if b and b.metric(f"sass.{cls}") else 0),
            (c.metric(f"sass.{cls}").value if c and c.metric(f"sass.{cls}") else 0),
        )
        for cls in INSTRUCTION_CLASSES
    ]
    ctx["mix_chart"] = plots.paired_bars_svg(sass_mix, title="SASS instruction mix") if b or c else None
    diffs = []
    if v.sass_changed or (b and c and not (b.sass_hash and c.sass_hash)):
        for kind in ("sass", "ptx"):
            d = asm_diff(_artifact_text(b, kind), _artifact_text(c, kind), kind.upper())
            if d is not None:
                diffs.append(d)
    ctx["diffs"] = diffs
    ctx["history"] = _history(report, v)
    timelines = {side: _timeline(report, side, r) for side, r in (("baseline", b), ("current", c))}
    timelines = {side: tl for side, tl in timelines.items() if tl is not None}
    lanes = {side: gantt_lanes(tl) for side, tl in timelines.items()}
    t_max = max((e for ls in lanes.values() for _, bars in ls for _, e, _ in bars), default=None)
    gantts = []
    for side, ls in lanes.items():
        svg = plots.gantt_svg(ls, unit="µs", title=f"Per-SM timeline, {side}", t_max=t_max)
        if svg is not None:
            gantts.append({"side": side, "svg": svg})
    ctx["gantts"] = gantts
    ctx["trace"] = _trace_link(v, out_dir, timelines)
    return ctx


# --------------------------------------------------------------------------- site


#: Variants listed by name in the summary's findings box (the table column counts them all).
MAX_FINDING_VARIANTS = 10


def _index_rows(report: Report, variants: Iterable[VariantView]) -> Iterable[dict[str, Any]]:
    for v in variants:
        h = v.headline
        flagged = [f.name for f in v.flagged_findings]
        yield {
            "v": v,
            "h": h,
            # flagged finding names are searchable: typing "wave_tail" finds every such kernel
            "text": " ".join(
                [v.key.kernel, v.key.arch, v.key.config, v.key.spec, v.key.test, v.summary, *v.tags, *flagged]
            ).lower(),
            "tags_json": json.dumps(v.tags),
            "flagged": flagged,
        }


#: Most variants with a page of their own (k/<id>.html) and a row in the index table, worst
#: first. A larger run (100,000 imported benchmarks) also gets pages per kernel listing every
#: variant, KERNEL_PAGE_ROWS to a page: a site of a few hundred files, not one per variant.
MAX_VARIANT_PAGES = 1000
KERNEL_PAGE_ROWS = 1000


def _detailed(report: Report) -> list[VariantView]:
    """The variants that get a page: all, or the worst MAX_VARIANT_PAGES and every variant the
    summary's findings box links to."""
    if len(report.variants) <= MAX_VARIANT_PAGES:
        return list(report.variants)
    chosen = list(report.variants[:MAX_VARIANT_PAGES])
    ids = {v.id for v in chosen}
    for v in [v for v in report.variants if v.flagged_findings][:MAX_FINDING_VARIANTS]:
        if v.id not in ids:
            chosen.append(v)
            ids.add(v.id)
    return chosen


def write_site(report: Report, out_dir: str | os.PathLike[str], *, jobs: int | None = None) -> Path:
    """Write index.html and k/<variant id>.html under ``out_dir``; returns the index path.

    A run of more than MAX_VARIANT_PAGES variants gets pages for its worst ones only (and the
    index lists those), plus kernels/<kernel>-<n>.html listing every variant of each kernel.

    ``jobs`` > 1 renders the variant pages in that many forked processes (default: the CPU
    count, capped at 8; serial for small reports or where fork is unavailable). The report's
    history source is asked to ``prefetch`` first, when it can, so workers share what it read.
    """
    out = Path(out_dir)
    (out / "k").mkdir(parents=True, exist_ok=True)
    index = out / "index.html"
    detailed = _detailed(report)
    kernel_pages = None
    if len(detailed) < len(report.variants):
        kernel_pages = _write_kernel_pages(report, out, {v.id for v in detailed})
    index.write_text(
        _page(
            "index.html.j2",
            script=_asset("table.js"),
            report=report,
            rows=list(_index_rows(report, detailed)),
            total=len(report.variants),
            kernel_pages=kernel_pages,
            finding_variants=[v for v in report.variants if v.flagged_findings],
            max_finding_variants=MAX_FINDING_VARIANTS,
        ),
        encoding="utf-8",
    )
    n = len(detailed)
    jobs = min(jobs or min(os.cpu_count() or 1, 8), max(1, n // PAGES_PER_JOB))
    prefetch = getattr(report.history, "prefetch", None)
    if prefetch is not None:
        prefetch([name for group in HISTORY_METRICS for name in group])
    if jobs > 1 and "fork" in multiprocessing.get_all_start_methods():
        global _FORKED
        _FORKED = (report, out, jobs, detailed)
        try:
            with multiprocessing.get_context("fork").Pool(jobs) as pool:
                pool.map(_render_share, range(jobs))
        finally:
            _FORKED = None
    else:
        _render_pages(report, out, detailed)
    return index


def _kernel_slug(name: str) -> str:
    """A file name for a kernel's pages whatever its name holds (hostile names included)."""
    return hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _write_kernel_pages(report: Report, out: Path, detailed: set[str]) -> list[dict[str, Any]]:
    """kernels/<slug>-<n>.html: every variant of each kernel, worst first, KERNEL_PAGE_ROWS a
    page; a variant with its own page links there. Returns the index's rows, one per kernel.

    Rows are built as escaped strings, not through the template: at 100,000 variants the
    template engine's per-cell cost is most of a report's time."""
    by_kernel: dict[str, list[VariantView]] = {}
    for v in report.variants:
        by_kernel.setdefault(v.key.kernel, []).append(v)
    (out / "kernels").mkdir(parents=True, exist_ok=True)
    e = escape
    listed = []
    for name in sorted(by_kernel):
        variants = by_kernel[name]
        slug = _kernel_slug(name)
        chunks = [variants[i : i + KERNEL_PAGE_ROWS] for i in range(0, len(variants), KERNEL_PAGE_ROWS)]
        pages = [f"kernels/{slug}-{i + 1}.html" for i in range(len(chunks))]
        counts: dict[str, int] = {}
        for v in variants:
            counts[v.verdict] = counts.get(v.verdict, 0) + 1
        for i, chunk in enumerate(chunks):
            rows = []
            for v in chunk:
                k = v.key
                shown = v.short_spec or k.test or k.spec or k.id
                label = e(shown)
                test = f'<div class="note mono">{e(k.test)}</div>' if k.test and k.test != shown else ""
                cell = f'<a href="../{v.page}">{label}</a>' if v.id in detailed else str(label)
                reg = ' class="regression"' if v.regression else ""
                gate = ' <span class="badge gate">gate</span>' if v.regression else ""
                verdict = e(v.verdict)
                rows.append(
                    f'<tr id="v-{e(v.id)}"{reg}><td class="mono small">{cell}{test}</td>'
                    f'<td>{e(k.arch)}</td><td class="mono small">{e(k.config)}</td>'
                    f'<td><span class="badge {verdict}">{verdict}</span>{gate}</td>'
                    f'<td class="small">{e(v.headline_text)}</td><td class="small">{e(v.summary)}</td></tr>'
                )
            nav = " ".join(
                f"<b>{j + 1}</b>" if j == i else f'<a href="{slug}-{j + 1}.html">{j + 1}</a>'
                for j in range(len(chunks))
            )
            html = _page(
                "kernel_list.html.j2",
                report=report,
                name=name,
                page=i + 1,
                n_pages=len(chunks),
                nav=Markup(nav),
                first=i * KERNEL_PAGE_ROWS + 1,
                last=i * KERNEL_PAGE_ROWS + len(chunk),
                n_variants=len(variants),
                counts=counts,
                rows=Markup("\n".join(rows)),
            )
            (out / pages[i]).write_text(html, encoding="utf-8")
        listed.append({"name": name, "n": len(variants), "counts": counts, "pages": pages})
    return listed


#: Below this many pages per process, forking costs more than it saves.
PAGES_PER_JOB = 40
_FORKED: tuple[Report, Path, int, list[VariantView]] | None = None  # set before the fork


def _render_share(k: int) -> None:
    report, out, jobs, variants = _FORKED  # type: ignore[misc]
    _render_pages(report, out, variants[k::jobs])


def _render_pages(report: Report, out: Path, variants: Iterable[VariantView]) -> None:
    for v in variants:
        html = _page("kernel.html.j2", report=report, **kernel_context(report, v, out))
        (out / v.page).write_text(html, encoding="utf-8")
