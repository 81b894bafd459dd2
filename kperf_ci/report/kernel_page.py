"""What one variant page of the HTML site shows (:func:`kernel_context`): metric tables, charts
(timing distribution, regions, instruction mix, history with its change points, per-SM
timelines), SASS/PTX diffs and a Perfetto-loadable trace written next to the page. Artifacts are
data from the run: a malformed one costs its section (a warning), never the report.
"""

from __future__ import annotations

import difflib
import json
import logging
import re
from pathlib import Path
from typing import Any

from ..analysis.occupancy import busy_sm_series
from ..judge.changepoint import detect_change_points
from ..model import VariantResult
from ..traces.perfetto import write_chrome_trace
from ..traces.proton_chrome import load_proton_trace
from ..traces.timeline_file import timeline_from_json, timeline_from_npz
from . import plots
from .safe_text import terminal_safe  # warnings quote stored names and reach the terminal
from .view import INSTRUCTION_CLASSES, STATIC_HEADLINE, Report, VariantView

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
