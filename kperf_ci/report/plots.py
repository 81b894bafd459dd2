"""Small static SVG charts for the HTML report, written by hand.

Why not a plotting library: a report of 500 variants must render in well under 10 s on a
2-core CI machine. Measured here (benchmarks/report_speed.py has the numbers): matplotlib's SVG
backend takes 15-46 ms per chart (about 40 s for 500 kernel pages of three charts), pygal 3.4-6.5 ms
per chart plus 18-36 kB of per-chart CSS, and neither draws a per-SM Gantt chart or change-point
markers; these functions take well under a millisecond and emit a few kB. Every chart is a pure
function of its data returning `Markup`; all text goes through `escape`, so kernel or region names
can never inject markup. Colours come from CSS classes (see static/report.css), so the charts
follow the page theme and need no inline style.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from markupsafe import Markup, escape

from ..sample_stats import median
from ..units import fmt_value

PALETTE_SIZE = 8  # region / series colours are classes c0..c7 in report.css


def _fmt(v: float) -> str:
    """Number for an SVG attribute: short, no exponent noise."""
    if v == int(v) and abs(v) < 1e12:
        return str(int(v))
    return f"{v:.2f}"


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About `n` round tick values covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(n, 1)
    mag = 10.0 ** math.floor(math.log10(raw))  # a float: int steps of 1.8e308 passed the float range
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = float(math.ceil(lo / step)) * step
    ticks = []
    t = first
    while t <= hi + step * 1e-9 and math.isfinite(t) and len(ticks) < 50:
        ticks.append(round(t, 12))
        t += step
    return ticks


class _Scale:
    def __init__(self, d0: float, d1: float, r0: float, r1: float):
        if d1 == d0:
            d0, d1 = d0 - 0.5, d1 + 0.5
        self.d0, self.d1, self.r0, self.r1 = d0, d1, r0, r1

    def __call__(self, v: float) -> float:
        return self.r0 + (v - self.d0) / (self.d1 - self.d0) * (self.r1 - self.r0)


def _svg(width: int, height: int, title: str, body: list[str], cls: str) -> Markup:
    head = (
        f'<svg class="chart {cls}" xmlns="http://www.w3.org/2000/svg" role="img" '
        f'viewBox="0 0 {width} {height}" width="{width}" height="{height}">'
        f"<title>{escape(title)}</title>"
    )
    return Markup(head + "".join(body) + "</svg>")


def _text(cls: str, x: float, y: float, text: str, anchor: str = "start") -> str:
    a = "" if anchor == "start" else f' text-anchor="{anchor}"'
    return f'<text class="{cls}" x="{_fmt(x)}" y="{_fmt(y)}"{a}>{escape(text)}</text>'


def _rect(cls: str, x: float, y: float, w: float, h: float, title: str | None = None) -> str:
    attrs = f'class="{cls}" x="{_fmt(x)}" y="{_fmt(y)}" width="{_fmt(w)}" height="{_fmt(h)}"'
    if title is None:
        return f"<rect {attrs}/>"
    return f"<rect {attrs}><title>{escape(title)}</title></rect>"


def _vline(cls: str, x: float, y0: float, y1: float, title: str | None = None) -> str:
    attrs = f'class="{cls}" x1="{_fmt(x)}" x2="{_fmt(x)}" y1="{_fmt(y0)}" y2="{_fmt(y1)}"'
    if title is None:
        return f"<line {attrs}/>"
    return f"<line {attrs}><title>{escape(title)}</title></line>"


def _hline(cls: str, x0: float, x1: float, y: float) -> str:
    return f'<line class="{cls}" x1="{_fmt(x0)}" x2="{_fmt(x1)}" y1="{_fmt(y)}" y2="{_fmt(y)}"/>'


def _x_axis(body: list[str], sx: _Scale, ticks: list[float], y: float, top: float, unit: str) -> None:
    body.append(_hline("axis", sx.r0, sx.r1, y))
    for t in ticks:
        x = sx(t)
        body.append(_vline("grid", x, top, y))
        body.append(_text("tick", x, y + 14, fmt_value(t), "middle"))
    if unit:
        body.append(_text("unit", sx.r1, y + 28, unit, "end"))


def _legend(
    body: list[str], items: Sequence[tuple[str, str]], x: float, y: float, wrap_at: float = 1e9
) -> float:
    """items: (css class, label), left to right, wrapping past ``wrap_at``; returns the last y."""
    x0 = x
    for cls, label in items:
        w = 24 + 7 * len(label)
        if x + w > wrap_at and x > x0:
            x, y = x0, y + 16
        body.append(_rect(cls, x, y - 9, 10, 10))
        body.append(_text("legend", x + 14, y, label))
        x += w
    return y


def distribution_svg(
    baseline: Sequence[float],
    current: Sequence[float],
    unit: str = "ms",
    width: int = 640,
    height: int = 220,
    bins: int = 40,
) -> Markup | None:
    """Overlaid histograms of two timing-sample sets on shared bins, medians marked. Returns None
    when neither side has samples (the page then shows no chart at all)."""
    a = [float(v) for v in baseline if math.isfinite(v)]
    b = [float(v) for v in current if math.isfinite(v)]
    if not a and not b:
        return None
    allv = sorted(a + b)
    # Axis within Tukey's far-out fences (3 IQR beyond the quartiles): outliers (a preempted
    # call, a clock dip) land in the edge bins and are counted in the legend instead of
    # squeezing the distribution into one bar.
    # When more than 2% would fall outside, they are a mode of the distribution, not outliers.
    q1, q3 = allv[len(allv) // 4], allv[(3 * len(allv)) // 4]
    lo, hi = max(allv[0], q1 - 3 * (q3 - q1)), min(allv[-1], q3 + 3 * (q3 - q1))
    if sum(1 for v in allv if v < lo or v > hi) > 0.02 * len(allv):
        lo, hi = allv[0], allv[-1]
    if hi == lo:
        lo, hi = lo - abs(lo) * 0.01 - 1e-9, hi + abs(hi) * 0.01 + 1e-9
    nb = max(5, min(bins, int(math.sqrt(len(allv))) * 2))
    w = (hi - lo) / nb

    def hist(vals: list[float]) -> list[float]:
        counts = [0] * nb
        for v in vals:
            counts[min(nb - 1, max(0, int((v - lo) / w)))] += 1
        n = len(vals) or 1
        return [c / n for c in counts]  # fractions, so sides with different sample counts compare

    ha, hb = hist(a), hist(b)
    ml, mr, mt, mb = 40, 12, 22, 34
    sx = _Scale(lo, hi, ml, width - mr)
    sy = _Scale(0, (max(ha + hb) or 1.0) * 1.08, height - mb, mt)
    body: list[str] = []
    _x_axis(body, sx, nice_ticks(lo, hi), height - mb, mt, unit)
    for cls, h, vals in (("base", ha, a), ("cur", hb, b)):
        if not vals:
            continue
        for i, f in enumerate(h):
            if f > 0:
                x0, x1 = sx(lo + i * w), sx(lo + (i + 1) * w)
                body.append(_rect(f"{cls} hist", x0, sy(f), max(x1 - x0 - 0.5, 0.5), sy(0) - sy(f)))
        med = median(vals)  # the package's one median: the line and its label match the tables
        body.append(_vline(f"{cls} median", sx(med), mt, height - mb, f"median {fmt_value(med, unit)}"))

    def label(side: str, vals: list[float]) -> str:
        out = sum(1 for v in vals if v < lo or v > hi)
        return f"{side} (n={len(vals)}" + (f", {out} off-axis)" if out else ")")

    _legend(body, [("base", label("baseline", a)), ("cur", label("current", b))], ml, 14)
    return _svg(width, height, "Timing distribution, baseline vs current", body, "dist")


def stacked_bars_svg(
    rows: Sequence[tuple[str, Sequence[tuple[str, float]]]],
    unit: str = "",
    width: int = 640,
    title: str = "Region breakdown",
) -> Markup | None:
    """Horizontal stacked bars, one per row (e.g. baseline / current), one segment per part.

    Segments keep one colour per name across rows; names beyond the palette cycle.
    """
    rows = [(label, [(n, float(v)) for n, v in segs if v and v > 0]) for label, segs in rows]
    rows = [r for r in rows if r[1]]
    if not rows:
        return None
    names = list(dict.fromkeys(n for _, segs in rows for n, _v in segs))
    colour = {n: f"c{i % PALETTE_SIZE}" for i, n in enumerate(names)}
    total = max(sum(v for _, v in segs) for _, segs in rows)
    bar_h, gap, ml, mr = 22, 10, 70, 12
    body: list[str] = []
    top = _legend(body, [(colour[n], n) for n in names], ml, 18, wrap_at=width) + 12
    height = top + len(rows) * (bar_h + gap) + 34
    sx = _Scale(0, total * 1.02, ml, width - mr)
    _x_axis(body, sx, nice_ticks(0, total), top + len(rows) * (bar_h + gap), top, unit)
    for i, (label, segs) in enumerate(rows):
        y = top + i * (bar_h + gap)
        body.append(_text("rowlabel", ml - 6, y + bar_h / 2 + 4, label, "end"))
        acc, row_total = 0.0, sum(v for _, v in segs)
        for n, v in segs:
            x0, x1 = sx(acc), sx(acc + v)
            tip = f"{label} {n}: {fmt_value(v, unit)} ({100 * v / row_total:.1f}%)"
            body.append(_rect(f"{colour[n]} seg", x0, y, max(x1 - x0, 0.5), bar_h, tip))
            acc += v
    return _svg(width, int(height), title, body, "stacked")


def history_svg(
    points: Sequence[tuple[str, float]],
    change_points: Sequence[int] = (),
    unit: str = "",
    highlight_last: bool = True,
    width: int = 640,
    height: int = 200,
    title: str = "History",
) -> Markup | None:
    """Line of a metric over past runs (oldest first); change points (indices where a new
    level starts) drawn as dashed vertical lines; the last point (this run) highlighted."""
    pts = [(lab, float(v)) for lab, v in points if v is not None and math.isfinite(v)]
    if len(pts) < 2:
        return None
    vals = [v for _, v in pts]
    lo, hi = min(vals), max(vals)
    pad = (hi - lo) * 0.1 or abs(hi) * 0.05 or 1.0
    ml, mr, mt, mb = 56, 12, 12, 24
    sx = _Scale(0, len(pts) - 1, ml, width - mr)
    sy = _Scale(lo - pad, hi + pad, height - mb, mt)
    body: list[str] = []
    for t in nice_ticks(lo - pad, hi + pad, 4):
        body.append(_hline("grid", ml, width - mr, sy(t)))
        body.append(_text("tick", ml - 4, sy(t) + 4, fmt_value(t), "end"))
    body.append(_hline("axis", ml, width - mr, height - mb))
    if unit and unit != "count":
        body.append(_text("unit", 4, mt - 2, unit))
    for cp in change_points:
        if 0 < cp < len(pts):
            x = (sx(cp - 1) + sx(cp)) / 2
            body.append(_vline("changepoint", x, mt, height - mb, f"change point before {pts[cp][0]}"))
    d = " ".join(f"{'M' if i == 0 else 'L'}{_fmt(sx(i))},{_fmt(sy(v))}" for i, (_, v) in enumerate(pts))
    body.append(f'<path class="line" d="{d}"/>')
    step = max(1, math.ceil(len(pts) / ((width - ml - mr) // 64)))  # labels ~64 px apart
    for i, (lab, v) in enumerate(pts):
        last = highlight_last and i == len(pts) - 1
        body.append(
            f'<circle class="{"pt last" if last else "pt"}" cx="{_fmt(sx(i))}" cy="{_fmt(sy(v))}" '
            f'r="{4 if last else 2.5}"><title>{escape(lab)}: {escape(fmt_value(v, unit))}</title></circle>'
        )
        if last or (i % step == 0 and len(pts) - 1 - i >= step / 2):
            body.append(_text("tick", sx(i), height - mb + 14, lab[:8], "middle"))
    return _svg(width, height, title, body, "history")


def gantt_svg(
    lanes: Sequence[tuple[str, Sequence[tuple[float, float, str]]]],
    unit: str = "cycles",
    width: int = 760,
    lane_h: int = 6,
    max_bars: int = 20000,
    title: str = "Per-SM timeline",
    t_max: float | None = None,
) -> Markup | None:
    """One lane per SM, one bar per CTA (start, end, name); bars coloured by name.

    ``t_max`` fixes the end of the time axis (e.g. the longer of two launches being compared,
    so both charts share one scale). More than `max_bars` bars are thinned evenly per lane (the
    chart notes it), so a pathological trace cannot make a page of many megabytes.
    """
    lanes = [(lab, [s for s in bars if s[1] > s[0]]) for lab, bars in lanes]
    lanes = [ln for ln in lanes if ln[1]]
    if not lanes:
        return None
    n_bars = sum(len(b) for _, b in lanes)
    keep = 1 if n_bars <= max_bars else math.ceil(n_bars / max_bars)
    t0 = min(s for _, bars in lanes for s, _, _ in bars)
    t1 = max(e for _, bars in lanes for _, e, _ in bars)
    names = list(dict.fromkeys(n for _, bars in lanes for _, _, n in bars))
    colour = {n: f"c{i % PALETTE_SIZE}" for i, n in enumerate(names)}
    ml, mr, mt = 56, 12, 22
    height = mt + len(lanes) * lane_h + 34
    span = max(t1 - t0, t_max or 0.0)
    sx = _Scale(0, span, ml, width - mr)
    shown = f"every {keep}th shown" if keep > 1 else f"on {len(lanes)} SMs"
    body: list[str] = [_text("legend", ml, 14, f"{n_bars} CTAs {shown}")]
    label_step = max(1, math.ceil(40 / lane_h))  # a lane label every ~40 px
    for i, (lab, bars) in enumerate(lanes):
        y = mt + i * lane_h
        if i % label_step == 0:
            body.append(_text("tick", ml - 4, y + lane_h, lab, "end"))
        for j, (s, e, n) in enumerate(bars):
            if j % keep == 0:
                x0, x1 = sx(s - t0), sx(e - t0)
                body.append(_rect(f"{colour[n]} seg", x0, y, max(x1 - x0, 0.3), lane_h - 1))
    _x_axis(body, sx, nice_ticks(0, span), mt + len(lanes) * lane_h, mt, unit)
    return _svg(width, height, title, body, "gantt")


def paired_bars_svg(
    rows: Sequence[tuple[str, float, float]],
    unit: str = "",
    width: int = 640,
    title: str = "Baseline vs current",
) -> Markup | None:
    """Pairs of horizontal bars (baseline above current) per label: e.g. the instruction mix."""
    rows = [(lab, float(a or 0), float(b or 0)) for lab, a, b in rows if (a or b)]
    if not rows:
        return None
    ml, mr, mt, bh = 110, 60, 22, 8
    row_h = 2 * bh + 6
    height = mt + len(rows) * row_h + 30
    vmax = max(max(a, b) for _, a, b in rows)
    sx = _Scale(0, vmax * 1.02, ml, width - mr)
    body: list[str] = []
    _legend(body, [("base", "baseline"), ("cur", "current")], ml, 14)
    for i, (lab, a, b) in enumerate(rows):
        y = mt + i * row_h
        body.append(_text("rowlabel", ml - 6, y + bh + 3, lab, "end"))
        for k, (cls, side, v) in enumerate((("base", "baseline", a), ("cur", "current", b))):
            body.append(
                _rect(cls, ml, y + k * bh, max(sx(v) - ml, 0), bh - 1, f"{lab} {side}: {fmt_value(v, unit)}")
            )
        body.append(_text("tick", sx(max(a, b)) + 4, y + bh + 3, f"{fmt_value(a)} → {fmt_value(b)}"))
    _x_axis(body, sx, nice_ticks(0, vmax, 4), mt + len(rows) * row_h, mt, unit)
    return _svg(width, int(height), title, body, "paired")


#: Stroke of a sweep's series, the colours of report.css's base and cur.
_SERIES_COLOUR = {"base": "#7a8fb8", "cur": "#e8833a"}


def sweep_svg(
    series: Sequence[tuple[str, str, Sequence[tuple[float | str, float]]]],
    labels: Sequence[str] | None = None,
    unit: str = "",
    width: int = 640,
    height: int = 220,
    title: str = "Sweep",
) -> Markup | None:
    """Lines of a value over the calls of a benchmark sweep, one per series (css class, legend
    name, points). Points are (x, y): x a number (``labels`` None: a numeric axis, logarithmic
    when the values are positive and span 8x or more, as a doubling sweep does) or a label out of
    ``labels`` (evenly spaced, in that order). None when no series has a finite point."""
    clean = [(cls, name, [(x, float(y)) for x, y in pts if math.isfinite(y)]) for cls, name, pts in series]
    clean = [s for s in clean if s[2]]
    if not clean:
        return None
    ml, mr, mt, mb = 56, 12, 24, 40
    if labels is not None:
        pos = {lab: float(i) for i, lab in enumerate(labels)}
        sx = _Scale(0, max(len(labels) - 1, 0), ml, width - mr)
        place = lambda x: sx(pos.get(str(x), 0.0))  # noqa: E731
        ticks = [(sx(i), lab) for i, lab in enumerate(labels)]
    else:
        xs = sorted({float(x) for _, _, pts in clean for x, _ in pts})  # type: ignore[arg-type]
        log = xs[0] > 0 and xs[-1] / xs[0] >= 8
        f = math.log2 if log else float
        sx = _Scale(f(xs[0]), f(xs[-1]), ml, width - mr)
        place = lambda x: sx(f(float(x)))  # noqa: E731
        ticks = [(sx(f(x)), fmt_value(x)) for x in xs]
    ys = [y for _, _, pts in clean for _, y in pts]
    lo, hi = min(ys), max(ys)
    pad = (hi - lo) * 0.1 or abs(hi) * 0.05 or 1.0
    sy = _Scale(max(lo - pad, 0.0) if lo >= 0 else lo - pad, hi + pad, height - mb, mt)
    body: list[str] = []
    for t in nice_ticks(sy.d0, sy.d1, 4):
        body.append(_hline("grid", ml, width - mr, sy(t)))
        body.append(_text("tick", ml - 4, sy(t) + 4, fmt_value(t), "end"))
    body.append(_hline("axis", ml, width - mr, height - mb))
    if unit and unit != "count":
        body.append(_text("unit", 4, mt - 10, unit))
    step = max(1, math.ceil(len(ticks) / ((width - ml - mr) // 56)))  # tick labels ~56 px apart
    for i, (x, lab) in enumerate(ticks):
        if i % step == 0:
            body.append(_text("tick", x, height - mb + 14, lab[:10], "middle"))
    _legend(body, [(cls, name) for cls, name, _ in clean], ml, 12)
    for cls, name, pts in clean:
        # Colour by presentation attribute, not a class: report.css is inlined into every page, so
        # a new rule there would change the bytes of every report, sweeps or not.
        colour = _SERIES_COLOUR.get(cls, "#0969da")
        d = " ".join(
            f"{'M' if i == 0 else 'L'}{_fmt(place(x))},{_fmt(sy(y))}" for i, (x, y) in enumerate(pts)
        )
        body.append(
            f'<path class="series {cls}" data-series="{escape(name)}" fill="none" stroke="{colour}" '
            f'stroke-width="1.6" d="{d}"/>'
        )
        for x, y in pts:
            lab = fmt_value(x) if isinstance(x, float) else str(x)
            body.append(
                f'<circle class="spt {cls}" fill="{colour}" cx="{_fmt(place(x))}" cy="{_fmt(sy(y))}" r="2.5">'
                f"<title>{escape(name)} {escape(lab)}: {escape(fmt_value(y, unit))}</title></circle>"
            )
    return _svg(width, height, title, body, "sweep")


def ab_intervals_svg(
    launches: Sequence[tuple[str, str, float, float | None, float | None, float | None, float | None]],
    threshold: float,
    title: str = "",
) -> Markup | None:
    """One A/B kernel's launches as a forest plot: per launch (label, verdict, change, interval
    low, interval high, floor, threshold), all relative to the base (0.0123 = +1.23%); the
    interval of each against zero, and on its own row the threshold it was judged with (the
    relative threshold or the floor over its base time, the larger; ``threshold`` where the row
    has none) shaded, its floor band (the absolute floor over its base time) in grey; labels
    whole, no band under them. None when nothing has a change. Why: a launch is called slower
    when its interval clears zero, the threshold and the floor at once."""
    if not (rows := [r for r in launches if math.isfinite(r[2])]):
        return None
    left = min(360, max(120, int(max(len(r[0]) for r in rows) * 6.2) + 14))
    w, right, top, row_h = left + 560, 16, 8, 18
    ends = [0.0, threshold, -threshold]
    for _l, _v, mid, lo, hi, _f, _t in rows:
        ends += [mid] + [x for x in (lo, hi) if x is not None and math.isfinite(x)]
    lo_d, hi_d = min(ends), max(ends)
    pad = (hi_d - lo_d) * 0.08 or 0.01
    ticks = nice_ticks(lo_d - pad, hi_d + pad, 6)
    sx = _Scale(min([lo_d - pad, *ticks]), max([hi_d + pad, *ticks]), left, w - right)
    y_axis = top + row_h * len(rows) + 4
    h = int(y_axis + 34)  # the labels' column (left) fits the longest label, 6.2 px a character

    def band(cls: str, half: float, y: float, inset: float, title: str) -> str:
        x0, x1 = max(left, sx(-half)), min(w - right, sx(half))  # never under the labels
        return _rect(cls, x0, y - row_h / 2 + inset, max(0.0, x1 - x0), row_h - 2 * inset, title)

    body = []
    for i, (label, verdict, mid, lo, hi, floor, th) in enumerate(rows):
        y = top + row_h * i + row_h / 2
        th = th if th is not None and math.isfinite(th) else threshold
        body.append(band("band threshold", th, y, 1, f"threshold ±{th:.2%} for this launch"))
        if floor is not None and math.isfinite(floor) and floor > 0:
            body.append(band("band floor", floor, y, 5, f"floor ±{floor:.2%} of this launch's base time"))
        body.append(_text("tick", left - 6, y + 4, label, "end"))
        if lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi):
            body.append(
                f'<line class="ci {escape(verdict)}" x1="{_fmt(sx(lo))}" x2="{_fmt(sx(hi))}" '
                f'y1="{_fmt(y)}" y2="{_fmt(y)}"><title>{escape(label)}: {mid:+.2%} '
                f"[{lo:+.2%}, {hi:+.2%}]</title></line>"
            )
        body.append(f'<circle class="mid {escape(verdict)}" cx="{_fmt(sx(mid))}" cy="{_fmt(y)}" r="3.5"/>')
    body.append(_vline("zero", sx(0.0), top, y_axis))
    body.append(_hline("axis", left, w - right, y_axis))
    for t in ticks:
        body.append(_text("tick", sx(t), y_axis + 14, f"{t:+.1%}" if t else "0", "middle"))
    body.append(_text("unit", w - right, y_axis + 28, "head vs base (99% interval)", "end"))
    return _svg(w, h, title or "A/B change per launch", body, "ab-intervals")
