"""The Perfetto writer: timelines, findings and kernel records as Chrome-trace JSON (opens in
Perfetto and chrome://tracing).

Layout: one process per SM ("SM 007"), one thread per concurrently resident CTA slot; each
CTA is a slice with its regions (from its lowest warp, or CTA-level records) nested inside. A
"kperf analysis" process carries a busy-SM counter track (when given ``busy_series``, e.g.
:func:`kperf_ci.analysis.occupancy.busy_sm_series`: the writer computes nothing) and one
instant event per finding; a "GPU stream" process carries kernel records (launch gaps) when
given. With ``per_warp=True`` every CTA also gets its own process with one thread per warp.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from .kernel_records import KernelRecord
from .records import KERNEL_REGION, Timeline, group_slices

#: (timeline, bins) -> (times in ns, busy SMs): the counter track's values
BusySeries = Callable[..., tuple[np.ndarray, np.ndarray]]


class FindingLike(Protocol):
    """What the writer reads of a finding (kperf_ci.analysis.findings.Finding)."""

    name: str
    value: float
    unit: str
    flagged: bool
    explanation: str
    suggestion: str


_SM_PID_BASE = 100_000
_CTA_PID_BASE = 1_000_000
_ANALYSIS_PID = 1
_STREAM_PID = 2


def _meta(pid: int, name: str, sort: int, tid: int | None = None, tname: str | None = None) -> list[dict]:
    out = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}},
        {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": sort}},
    ]
    if tid is not None:
        out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": tname}})
    return out


def _slice(
    name: str, pid: int, tid: int, s_ns: float, e_ns: float, cat: str, args: dict | None = None
) -> dict:
    ev = {
        "ph": "X",
        "name": name,
        "cat": cat,
        "pid": pid,
        "tid": tid,
        "ts": round(s_ns / 1000.0, 4),
        "dur": round(max(e_ns - s_ns, 0.0) / 1000.0, 4),
    }
    if args:
        ev["args"] = args
    return ev


def _lanes(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Greedy lane (thread) per interval so that intervals on one lane never overlap."""
    lane = np.zeros(len(start), dtype=np.int64)
    starts, stops = start.tolist(), end.tolist()  # Python floats: the loop compares ~10k of them
    ends: list[float] = []
    for i in np.argsort(start, kind="stable").tolist():
        for j, last in enumerate(ends):
            if last <= starts[i]:
                lane[i] = j
                ends[j] = stops[i]
                break
        else:
            lane[i] = len(ends)
            ends.append(stops[i])
    return lane


def _nest(slices: list[tuple[str, float, float]]) -> list[tuple[str, float, float, int]]:
    """Give each (name, start, end) a depth lane: 0 when it nests properly with the slices before
    it (Chrome requires complete events on one thread to nest), else the next free overflow lane."""
    out = []
    order = sorted(slices, key=lambda x: (x[1], -(x[2] - x[1])))
    stacks: list[list[float]] = [[]]
    for name, s, e in order:
        placed = False
        for lane, stack in enumerate(stacks):
            while stack and stack[-1] <= s:
                stack.pop()
            if not stack or e <= stack[-1]:
                stack.append(e)
                out.append((name, s, e, lane))
                placed = True
                break
        if not placed:
            stacks.append([e])
            out.append((name, s, e, len(stacks) - 1))
    return out


def to_chrome_trace(
    timelines: Timeline | Sequence[Timeline],
    *,
    findings: Sequence[FindingLike] = (),
    records: Sequence[KernelRecord] = (),
    per_warp: bool = False,
    counter_bins: int = 200,
    busy_series: BusySeries | None = None,
) -> dict[str, Any]:
    """A Chrome/Perfetto trace of ``timelines``: per SM its CTAs in non-overlapping slots with
    their regions nested inside; per CTA its warps (``per_warp``); a busy-SM counter
    (``busy_series``); findings as instant events; the kernels on the GPU stream (``records``).
    Timelines with a trace start are placed on one clock, others one after another."""
    tls = [timelines] if isinstance(timelines, Timeline) else list(timelines)
    events: list[dict] = []
    events += _meta(_ANALYSIS_PID, "kperf analysis", 0)
    named = _Named()
    cursor = 0.0
    origin = min((float(t.meta.get("trace_t0_ns", 0.0)) for t in tls), default=0.0)
    for li, tl in enumerate(tls):
        if not len(tl):
            continue
        if "trace_t0_ns" in tl.meta:
            off = float(tl.meta["trace_t0_ns"]) - origin
        else:
            off = cursor
        cursor = max(cursor, off + tl.t1) + 1000.0
        regions = tl.region.astype(str)
        events += _sm_events(tl, off, regions, named)
        if per_warp:
            events += _warp_events(tl, li, off, regions, dict(group_slices(tl.cta)[1]))
        if busy_series is not None:
            events += _busy_counter(tl, off, busy_series, counter_bins)
    events += _finding_events(findings)
    events += _stream_events(records)
    return {
        "displayTimeUnit": "ns",
        "traceEvents": events,
        "otherData": {"producer": "kperf-ci analysis", "kernels": [t.kernel for t in tls]},
    }


@dataclass
class _Named:
    """SM processes and SM slot threads already given a name (each is named once per trace)."""

    sms: set[int] = field(default_factory=set)
    lanes: set[tuple[int, int]] = field(default_factory=set)


def _first_warp_regions(tl: Timeline, regions: np.ndarray) -> dict[int, list[int]]:
    """Per CTA, in record order, the rows of its lowest warp that are not the kernel region: the
    slices nested under the CTA. Whole-array operations: a numpy call per CTA (about 9k CTAs per
    kernel in an H100 run) took most of `kperf report`'s time."""
    if not len(tl):
        return {}
    order = np.argsort(tl.cta, kind="stable")  # as group_slices: each CTA's rows in record order
    ctas, first = np.unique(tl.cta[order], return_index=True)
    group = np.repeat(np.arange(len(ctas)), np.diff(np.append(first, len(order))))
    warp = tl.warp[order]
    keep = (warp == np.minimum.reduceat(warp, first)[group]) & (regions[order] != KERNEL_REGION)
    rows = order[keep].tolist()
    bounds = [0, *np.cumsum(np.bincount(group[keep], minlength=len(ctas))).tolist()]
    return {c: rows[bounds[k] : bounds[k + 1]] for k, c in enumerate(ctas.tolist())}


def _sm_events(tl: Timeline, off: float, regions: np.ndarray, named: _Named) -> list[dict]:
    """One process per SM: each CTA on a slot where it overlaps no other, with the first warp's
    regions nested under it."""
    events: list[dict] = []
    spans = tl.cta_spans()
    nested = _first_warp_regions(tl, regions)
    names, starts, ends = regions.tolist(), tl.start_ns.tolist(), tl.end_ns.tolist()
    span_cta, span_s, span_e = spans.cta.tolist(), spans.start_ns.tolist(), spans.end_ns.tolist()
    cat = tl.kernel or "kernel"
    for sm in np.unique(spans.sm):
        m = spans.sm == sm
        idx = np.flatnonzero(m).tolist()
        lanes = _lanes(spans.start_ns[m], spans.end_ns[m]).tolist()
        pid = _SM_PID_BASE + int(sm)
        if int(sm) not in named.sms:
            events += _meta(pid, f"SM {int(sm):03d}", 10 + int(sm))
            named.sms.add(int(sm))
        for i, lane in zip(idx, lanes, strict=True):
            cta = span_cta[i]
            slices = [(f"CTA {cta}", float(span_s[i]), float(span_e[i]))]
            slices += [(str(names[r]), float(starts[r]), float(ends[r])) for r in nested[cta]]
            for name, s, e, depth in _nest(slices):
                tid = lane * 16 + depth
                if (pid, tid) not in named.lanes:
                    events.append(
                        {
                            "ph": "M",
                            "name": "thread_name",
                            "pid": pid,
                            "tid": tid,
                            "args": {"name": f"slot {lane}" + (f" +{depth}" if depth else "")},
                        }
                    )
                    named.lanes.add((pid, tid))
                args = {"cta": cta, "sm": int(sm), "kernel": tl.kernel} if name.startswith("CTA ") else None
                events.append(_slice(name, pid, tid, s + off, e + off, cat, args))
    return events


def _warp_events(
    tl: Timeline, li: int, off: float, regions: np.ndarray, by_cta: dict[Any, np.ndarray]
) -> list[dict]:
    """One process per CTA (``per_warp``), one thread per warp with its regions nested."""
    events: list[dict] = []
    for cta, rows in by_cta.items():
        pid = _CTA_PID_BASE + li * 100_000 + int(cta)
        sm = int(tl.sm[rows[0]])
        events += _meta(pid, f"{tl.kernel} CTA {int(cta)} (SM {sm})", 1000 + int(cta))
        for w, wrows in group_slices(tl.warp[rows])[1]:
            wm = rows[wrows]
            slices = [
                (str(r), float(s), float(e))
                for r, s, e in zip(regions[wm], tl.start_ns[wm], tl.end_ns[wm], strict=True)
            ]
            for name, s, e, depth in _nest(slices):
                tid = (int(w) + 1) * 16 + depth
                events.append(_slice(name, pid, tid, s + off, e + off, "warp"))
            events.append(
                {
                    "ph": "M",
                    "name": "thread_name",
                    "pid": pid,
                    "tid": (int(w) + 1) * 16,
                    "args": {"name": f"warp {int(w)}" if w >= 0 else "CTA"},
                }
            )
    return events


def _busy_counter(tl: Timeline, off: float, busy_series: BusySeries, counter_bins: int) -> list[dict]:
    """The busy-SM counter over the timeline, back to 0 at its end."""
    events: list[dict] = []
    t, busy = busy_series(tl, bins=counter_bins)
    for a, v in zip(t, busy, strict=True):
        events.append(
            {
                "ph": "C",
                "name": "busy SMs",
                "pid": _ANALYSIS_PID,
                "tid": 0,
                "ts": round((a + off) / 1000.0, 4),
                "args": {"SMs": round(float(v), 2)},
            }
        )
    if len(t):
        events.append(
            {
                "ph": "C",
                "name": "busy SMs",
                "pid": _ANALYSIS_PID,
                "tid": 0,
                "ts": round((tl.t1 + off) / 1000.0, 4),
                "args": {"SMs": 0},
            }
        )
    return events


def _finding_events(findings: Sequence[FindingLike]) -> list[dict]:
    """Each finding as a global instant event at 0 on the analysis process."""
    events: list[dict] = []
    for f in findings:
        events.append(
            {
                "ph": "i",
                "s": "g",
                "name": f"{'FLAG ' if f.flagged else ''}{f.name} = {f.value:.4g} {f.unit}",
                "pid": _ANALYSIS_PID,
                "tid": 0,
                "ts": 0,
                "args": {"explanation": f.explanation, "suggestion": f.suggestion},
            }
        )
    return events


def _stream_events(records: Sequence[KernelRecord]) -> list[dict]:
    """The kernels on one GPU-stream thread, from the first kernel's start."""
    events: list[dict] = []
    if records:
        events += _meta(_STREAM_PID, "GPU stream", 1, 0, "kernels")
        base = min(r.start_ns for r in records)
        for r in records:
            events.append(_slice(r.name, _STREAM_PID, 0, r.start_ns - base, r.end_ns - base, "kernel"))
    return events


def write_chrome_trace(
    path: str | os.PathLike[str], timelines: Timeline | Sequence[Timeline], **kw: Any
) -> None:
    # json.dumps, not json.dump: dump streams through the pure-Python encoder (json's C
    # encoder serves one-shot dumps only), most of `kperf report`'s time on a run with traces
    # (9 of 13 s for the committed H100 run); the text written is the same
    text = json.dumps(to_chrome_trace(timelines, **kw), separators=(",", ":"))
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
