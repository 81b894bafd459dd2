"""The static HTML site: index.html (summary + all variants) and one page per variant under k/
(what a variant page shows is computed in :mod:`.kernel_page`).

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
import hashlib
import json
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
from ..units import fmt_ci, fmt_rel, fmt_value
from .kernel_page import HISTORY_METRICS, kernel_context
from .sweeps import sweeps
from .view import MAIN_VERDICTS, VERDICTS, MetricRow, Report, VariantView, threshold_text

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


def render_page(template: str, *, styles: tuple[str, ...] = (), **ctx: Any) -> str:
    """One self-contained page from ``templates/`` with the report's stylesheet, CSP and
    version: the A/B page (report/ab_html.py) shares the run report's design through it.
    ``styles``: more stylesheets from ``static/``, inlined after report.css as ``extra_css``
    (kept out of report.css, which every page of the run report inlines)."""
    return _page(template, extra_css=Markup("\n".join(_asset(n) for n in styles)), **ctx)


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
    drawn, sweeps_left = sweeps(report)
    index.write_text(
        _page(
            "index.html.j2",
            sweeps=drawn,
            sweeps_left=sweeps_left,
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
