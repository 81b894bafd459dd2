"""Metric values for people, by unit: the one formatter behind the CLI, the reports and the charts.

Why one module: the terminal (``kperf compare``, ``kperf show``, the reasons of a regression) and
the HTML/markdown reports used to format values each their own way, so the same median read
"0.06003 ms" in one place and "60.03 µs" in the other. Everything that shows a metric value now
goes through :func:`fmt_value`; relative changes and their confidence intervals through
:func:`fmt_rel` and :func:`fmt_ci`.

Units (the ``unit`` of a ``Metric`` or an analysis finding):

* ``ms`` (device time): scaled to s / ms / µs / ns, whichever keeps the number at 1 or above;
* ``fraction``: a percentage with one decimal ("23.4%");
* ``count`` or no unit: the bare number;
* ``bytes``: the number followed by "B" ("4,096 B"), as the README writes sizes: "bytes" spelled
  out beside a metric's name read as part of it ("shared_bytes 3,072 bytes");
* anything else (``cycles``, ``ns``, ``ratio`` ...): the number followed by the unit.

Numbers keep up to 4 significant digits, thousands are separated ("17,360 B"), and the usual
ranges never show an exponent. A missing value (None or NaN) is an en dash.
"""

from __future__ import annotations

import math

__all__ = ["MISSING", "fmt_ci", "fmt_number", "fmt_rel", "fmt_value"]

#: what a missing value (None, NaN) reads as
MISSING = "–"

#: a stored unit as it is written after a number (the stored unit is data and stays as it is)
_SHOWN_UNITS = {"bytes": "B"}
# (milliseconds per unit, unit name), largest first: fmt_value picks the first one <= the value
_TIME_UNITS = ((1e3, "s"), (1.0, "ms"), (1e-3, "µs"), (1e-6, "ns"))


def fmt_number(v: float) -> str:
    """Up to 4 significant digits, thousands separated, no exponent in the usual ranges."""
    a = abs(v)
    if a == 0:
        return "0"
    if a >= 1e12 or a < 1e-4:
        return f"{v:.3g}"
    if a >= 1000:
        return f"{v:,.0f}"
    digits = max(0, 3 - math.floor(math.log10(a)))
    s = f"{v:.{digits}f}"
    return s.rstrip("0").rstrip(".") if "." in s else s


def fmt_value(v: float | None, unit: str = "") -> str:
    """Human-readable number with its unit; times in ms are shown in s/ms/µs/ns as fits."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return MISSING
    if unit == "ms" and v != 0:
        scale, name = next(((f, n) for f, n in _TIME_UNITS if abs(v) >= f), _TIME_UNITS[-1])
        return f"{fmt_number(v / scale)} {name}"
    if unit == "fraction":
        return f"{v:.1%}"
    if unit == "bool":  # flags stored as 0/1 metrics, e.g. time.graph
        return "yes" if v else "no"
    s = fmt_number(v)
    unit = _SHOWN_UNITS.get(unit, unit)
    return f"{s} {unit}" if unit and unit != "count" else s


def fmt_rel(rel: float | None) -> str:
    """A relative change: "+3.1%", "12.0×" for big ones, "from 0" when the base was zero."""
    if rel is None or math.isnan(rel):
        return ""
    if math.isinf(rel):
        return "from 0"
    return f"{rel:+.1%}" if abs(rel) < 10 else f"{rel + 1:.1f}×"


def fmt_ci(ci: tuple[float, float] | None) -> str:
    """A confidence interval of a relative change: "[+2.8%, +3.4%]"."""
    return f"[{ci[0]:+.1%}, {ci[1]:+.1%}]" if ci else ""


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, ending " …" when cut, at the last "; " or
    ", " in its second half (else the last space): never mid-token or between a value and what
    it changed to, as "BLOCK_N=204…" and "registers 16 …" were (issue 36's fourth walk, item 6)."""
    if len(text) <= limit:
        return text
    room = text[: max(limit - 2, 1)]
    for seps in (("; ", ", "), (" ",)):
        at = max(room.rfind(s) for s in seps)
        if at >= limit // 2:
            return room[:at].rstrip(" ,;:…") + " …"  # one ellipsis, never "… …"
    return room.rstrip(" …") + "…"
