"""An A/B document read for people: each timed launch once, per kernel worst first, with its
times, effect and why it was or was not called slower; the headline and the static side.

Shared by the comment and summary (report/ab.py), the HTML page (report/ab_html.py) and the
terminal of `kperf ab`: one place decides what a launch is and what each verdict reads as.
The document is data (prcheck/document.py checks its shape); nothing here escapes: each
renderer escapes for its own medium.
"""

from __future__ import annotations

import re
from typing import Any

from kperf_ci.config import Settings
from kperf_ci.judge.group import launch_text, static_groups
from kperf_ci.units import fmt_value


def pct(v: float | None) -> str:
    return "?" if v is None else f"{v - 1:+.2%}"


def change_text(t: dict[str, Any]) -> str:
    if t.get("ratio") is None:
        return "?"
    ci = "" if t.get("ci_low") is None else f" [{pct(t['ci_low'])}, {pct(t['ci_high'])}]"
    return f"{pct(t['ratio'])}{ci}"


#: verdict order, worst first: what the reader should look at first comes first
_SEVERITY = {"slower": 0, "inconclusive": 1, "no-base": 2, "faster": 3, "unchanged": 4, "identical": 5}


def severity(x: dict[str, Any]) -> tuple[int, float]:
    ratio = x.get("ratio")
    r = float(ratio) if isinstance(ratio, (int, float)) else 1.0
    # slower: the largest slowdown first; faster: the largest speedup first
    return _SEVERITY.get(str(x.get("verdict")), 9), (-r if x.get("verdict") != "faster" else r)


def floor_ms(doc: dict[str, Any]) -> float:
    """The absolute floor the document was judged with (``ab_floor_ms``): the document's own
    when it says, else the setting's default (kperf_ci.config, its one home)."""
    v = doc.get("floor_ms")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else Settings.ab_floor_ms


def number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def why_not_called(x: dict[str, Any], floor: float) -> str:
    """Why a timed launch reads "unchanged" or "inconclusive", in words ("" for the others):
    the reader of a row that did not fail asks whether it was measured at all."""
    verdict = x.get("verdict")
    lo, hi, ratio = number(x.get("ci_low")), number(x.get("ci_high")), number(x.get("ratio"))
    if verdict not in ("unchanged", "inconclusive") or ratio is None:
        return ""
    base, head = number(x.get("base_ms")), number(x.get("head_ms"))
    th = number(x.get("threshold"))
    th_text = f"{th:.2%}" if th is not None else "the threshold"
    excludes = lo is not None and hi is not None and (lo > 1 or hi < 1)
    if verdict == "inconclusive":
        return f"the 99% interval is wider than the threshold ({th_text})"
    if excludes and base is not None and head is not None and abs(head - base) < floor:
        delta = abs(head - base)  # equal medians read "0", not "0 ms" beside "100 ns"
        return f"below the floor: {fmt_value(delta, 'ms') if delta else '0'} < {fmt_value(floor, 'ms')}"
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
            runs = sorted(runs, key=severity)
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
        launches.sort(key=severity)
        out.append(_kernel_row(g["kernel"], g["site"], launches, g["tests"]))
    out.sort(key=lambda k: severity(k["launches"][0]) if k["launches"] else (9, 0.0))
    return out


def _kernel_row(kernel: str, site: str, launches: list[dict[str, Any]], tests: list[str]) -> dict[str, Any]:
    ratios = [r for x in launches if (r := number(x.get("ratio"))) is not None]
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
        out.append({**k, "launches": sorted(launches, key=severity)})
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
    b, h = number(x.get("base_ms")), number(x.get("head_ms"))
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


def changed_tests(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for t in doc.get("tests") or [] if t.get("status") != "identical"]


def sides(doc: dict[str, Any]) -> tuple[str, str, str, bool]:
    """(base sha, base rev, head sha, head is the working tree of the base commit)."""
    base = doc.get("base") or {}
    base_sha = str(base.get("sha", ""))[:10]
    head_sha = str((doc.get("head") or {}).get("sha", ""))[:10]
    return base_sha, str(base.get("rev", "")), head_sha, bool(head_sha) and head_sha == base_sha


def static_gate(doc: dict[str, Any]) -> dict[str, str]:
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
