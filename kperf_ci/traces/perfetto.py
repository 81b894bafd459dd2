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

import inspect
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from .kernel_records import KernelRecord
from .records import KERNEL_REGION, CtaSpans, Timeline, group_slices

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


def _slice(name: str, pid: int, tid: int, s_ns: float, e_ns: float, cat: str) -> dict:
    ts, dur = round(s_ns / 1000.0, 4), round(max(e_ns - s_ns, 0.0) / 1000.0, 4)
    return {"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid, "ts": ts, "dur": dur}


def _slots(sm: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per CTA span, a greedy slot (thread) on its SM so that spans on one slot never overlap:
    in order of start (ties: in span order), each takes the lowest slot free by then. One
    Python loop over all SMs: a numpy call or three per SM (132 per kernel) cost more than it."""
    lane = [0] * len(sm)
    sms, starts, stops = sm.tolist(), start.tolist(), end.tolist()  # Python floats compare faster
    ends: list[float] = []
    current = None
    for i in np.lexsort((np.arange(len(sm)), start, sm)).tolist():
        if sms[i] != current:
            ends, current = [], sms[i]
        for j, last in enumerate(ends):
            if last <= starts[i]:
                lane[i] = j
                ends[j] = stops[i]
                break
        else:
            lane[i] = len(ends)
            ends.append(stops[i])
    return np.asarray(lane, dtype=np.int64)


def _depths(starts: Sequence[float], ends: Sequence[float]) -> list[int]:
    """Depth lanes of slices already in :func:`_nest`'s order: 0 where a slice nests properly
    in the ones before it, else the first overflow lane where it does (or a new one)."""
    out = []
    stacks: list[list[float]] = [[]]
    for s, e in zip(starts, ends, strict=True):
        for lane, stack in enumerate(stacks):
            while stack and stack[-1] <= s:
                stack.pop()
            if not stack or e <= stack[-1]:
                stack.append(e)
                out.append(lane)
                break
        else:
            stacks.append([e])
            out.append(len(stacks) - 1)
    return out


def _nest(slices: list[tuple[str, float, float]]) -> list[tuple[str, float, float, int]]:
    """Give each (name, start, end) a depth lane: 0 when it nests properly with the slices before
    it (Chrome requires complete events on one thread to nest), else the next free overflow lane."""
    order = sorted(slices, key=lambda x: (x[1], -(x[2] - x[1])))
    depths = _depths([s for _, s, _ in order], [e for _, _, e in order])
    return [(name, s, e, d) for (name, s, e), d in zip(order, depths, strict=True)]


def _round4(x: np.ndarray) -> list[float]:
    """``[round(v, 4) for v in x.tolist()]``, bit for bit, without a Python call per value.
    Python's round(v, 4) is the double nearest N / 10**4, N the integer nearest the exact v * 10**4
    (ties to even). For |y| < 2**40, y = fl(v * 1e4) is within 2**-52 * |y| < 2**-12 of v * 10**4,
    so rint(y) is N unless y is within 2**-12 of a half; N is then exact and the IEEE quotient
    N / 1e4 is that nearest double (-0.0 included). Values near a half (1 in 2000 at random),
    huge or not finite go to Python's round. (np.round(2.675, 2) is 2.68, round's 2.67.)"""
    with np.errstate(all="ignore"):  # inf or NaN: those values go to Python's round below
        y = x * 1e4
        n = np.rint(y)
        out = n / 1e4
        unsure = ~(np.abs(y) < 2.0**40) | (np.abs(y - n) > 0.5 - 2.0**-11)
    values = out.tolist()
    for i in np.flatnonzero(unsure).tolist():
        values[i] = round(float(x[i]), 4)
    return values


_SEP = (",", ":")  # json.dumps' separators: the trace is written without spaces


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
    parts, kernels = _trace_parts(timelines, findings, records, per_warp, counter_bins, busy_series)
    return _document([ev for p in parts for ev in (p if isinstance(p, list) else p.events())], kernels)


def _document(events: list[dict], kernels: list[str]) -> dict[str, Any]:
    return {
        "displayTimeUnit": "ns",
        "traceEvents": events,
        "otherData": {"producer": "kperf-ci analysis", "kernels": kernels},
    }


def _trace_parts(
    timelines: Timeline | Sequence[Timeline],
    findings: Sequence[FindingLike],
    records: Sequence[KernelRecord],
    per_warp: bool,
    counter_bins: int,
    busy_series: BusySeries | None,
) -> tuple[list[_Part], list[str]]:
    """The trace's events in order, in parts, and its kernels (see :func:`to_chrome_trace`)."""
    tls = [timelines] if isinstance(timelines, Timeline) else list(timelines)
    parts: list[_Part] = [_meta(_ANALYSIS_PID, "kperf analysis", 0)]
    named = _Named()
    cursor = 0.0
    origin = min((float(t.meta.get("trace_t0_ns", 0.0)) for t in tls), default=0.0)
    for li, tl in enumerate(tls):
        if not len(tl):
            continue
        off = float(tl.meta["trace_t0_ns"]) - origin if "trace_t0_ns" in tl.meta else cursor
        cursor = max(cursor, off + tl.t1) + 1000.0
        regions = tl.region.astype(str)
        parts.append(_sm_events(tl, off, regions, named))
        if per_warp:
            parts.append(_warp_events(tl, li, off, regions, dict(group_slices(tl.cta)[1])))
        if busy_series is not None:
            parts.append(_busy_counter(tl, off, busy_series, counter_bins))
    parts += [_finding_events(findings), _stream_events(records)]
    return parts, [t.kernel for t in tls]


@dataclass
class _Named:
    """SM processes and SM slot threads already given a name (each is named once per trace)."""

    sms: set[int] = field(default_factory=set)
    lanes: set[tuple[int, int]] = field(default_factory=set)


def _first_warp_rows(tl: Timeline, regions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per CTA (in id order, as :meth:`Timeline.cta_spans`), in record order, the rows of its lowest
    warp that are not the kernel region, nested under the CTA: CTA k's are rows[bounds[k]:bounds[k+1]].
    Whole-array operations: a numpy call per CTA (about 9k per kernel in an H100 run) was slow."""
    order = np.argsort(tl.cta, kind="stable")  # as group_slices: each CTA's rows in record order
    ctas, first = np.unique(tl.cta[order], return_index=True)
    group = np.repeat(np.arange(len(ctas)), np.diff(np.append(first, len(order))))
    warp = tl.warp[order]
    keep = (warp == np.minimum.reduceat(warp, first)[group]) & (regions[order] != KERNEL_REGION)
    bounds = np.concatenate(([0], np.cumsum(np.bincount(group[keep], minlength=len(ctas)))))
    return order[keep], bounds


@dataclass
class _CtaSlices:
    """Each CTA's slice and the regions nested under it, flat, in the order they are written:
    CTA by CTA (SM by SM, each SM's CTAs in id order), each CTA's slices as :func:`_nest`
    orders them. Whole arrays, where a Python list per CTA was most of the writer's time."""

    group: np.ndarray  # per slice: its CTA (the CTA's place in that order)
    first: np.ndarray  # per CTA: where its slices begin (its own slice, the first of them)
    start: np.ndarray
    end: np.ndarray
    name: list[str]
    args: np.ndarray  # per slice: whether it carries the CTA's args (its name starts "CTA ")
    depth: np.ndarray  # per slice: its depth lane, as _nest gives it


def _cta_slices(tl: Timeline, spans: CtaSpans, by_sm: np.ndarray, regions: np.ndarray) -> _CtaSlices:
    """The CTAs' slices (``spans`` taken in ``by_sm`` order) with their depths, as _nest gives them."""
    rows, bounds = _first_warp_rows(tl, regions)
    lo, size = bounds[by_sm], bounds[by_sm + 1] - bounds[by_sm] + 1  # + 1: the CTA's own slice
    group = np.repeat(np.arange(len(by_sm)), size)
    first = np.cumsum(size) - size
    pos = np.arange(len(group)) - first[group]
    cta = pos == 0  # each CTA first, then its regions in record order: _nest's input
    row = rows[(lo[group] + pos - 1)[~cta]]
    start, end = np.empty(len(group)), np.empty(len(group))
    start[cta], end[cta] = spans.start_ns[by_sm], spans.end_ns[by_sm]
    start[~cta], end[~cta] = tl.start_ns[row], tl.end_ns[row]
    name = np.empty(len(group), dtype=object)
    name[cta] = [f"CTA {c}" for c in spans.cta[by_sm].tolist()]
    name[~cta] = regions[row].tolist()
    args = cta.copy()
    args[~cta] = np.char.startswith(regions[row], "CTA ")  # as ever (np.char: numpy 1.26 too)
    # _nest's stable sort by (start, -duration) within each CTA; the index breaks ties as it
    order = np.lexsort((np.arange(len(group)), -(end - start), start, group))
    start, end = start[order], end[order]
    depth = _slice_depths(group, first, start, end, cta[order])
    return _CtaSlices(group, first, start, end, name[order].tolist(), args[order], depth)


def _slice_depths(
    group: np.ndarray, first: np.ndarray, start: np.ndarray, end: np.ndarray, cta: np.ndarray
) -> np.ndarray:
    """_nest's depth of each slice. All 0, checked for all CTAs at once, where a CTA's slices
    nest trivially: the CTA sorts first, each region ends within it or starts after it, and each
    region after the first starts at or after the end of the one before (so the ends only
    grow: each region pops the one before it off _depths' stack and nests under the CTA, or
    pops that too). The rest (regions that cross, or nest in one another) go through _depths."""
    n = len(group)
    head = np.zeros(n, dtype=bool)
    head[first] = True
    cta_end = end[first][group]
    ok = (head == cta) & (head | (end <= cta_end) | (start >= cta_end))
    follows = np.ones(n, dtype=bool)  # the region before it has ended (or it is the first)
    follows[1:] = head[:-1] | (start[1:] >= end[:-1])
    ok &= head | follows
    depth = np.zeros(n, dtype=np.int64)
    stops = np.append(first[1:], n)
    for j in np.unique(group[~ok]).tolist():
        a, b = first[j], stops[j]
        depth[a:b] = _depths(start[a:b].tolist(), end[a:b].tolist())
    return depth


@dataclass
class _SmSlices:
    """One timeline's SM-process events: its CTA and region slices ("X") as columns, and the
    names ("M" events) placed before some of them. :meth:`events` makes them the trace's dicts;
    :meth:`json` writes the text that json.dumps makes of those dicts, without making them:
    encoding 490k small dicts (the committed H100 run) was half the writer's time."""

    name: list[str]
    pid: list[int]
    tid: list[int]
    ts: list[float]
    dur: list[float]
    args: dict[int, tuple[int, int]]  # slice -> (cta, sm): the slices that carry the CTA's args
    cat: Any  # the timeline's kernel, or "kernel"
    kernel: Any
    finite: bool  # every ts and dur is finite (json writes others as Infinity or NaN)
    before: dict[int, list[dict]]  # slice -> the names placed just before it

    def events(self) -> list[dict]:
        out = [
            {"ph": "X", "name": n, "cat": self.cat, "pid": p, "tid": t, "ts": a, "dur": d}
            for n, p, t, a, d in zip(self.name, self.pid, self.tid, self.ts, self.dur, strict=True)
        ]
        for i, (cta, sm) in self.args.items():
            out[i]["args"] = {"cta": cta, "sm": sm, "kernel": self.kernel}
        return _interleave(out, self.before)

    def json(self) -> str:
        """``json.dumps(self.events(), separators=_SEP)[1:-1]``: each value written as json's C
        encoder writes it (strings by encode_basestring_ascii, as ensure_ascii does; ints and
        finite floats by their repr)."""
        if not self.finite:
            return json.dumps(self.events(), separators=_SEP)[1:-1]
        cat, kernel = json.dumps(self.cat, separators=_SEP), json.dumps(self.kernel, separators=_SEP)
        tail = [""] * len(self.name)
        for i, (cta, sm) in self.args.items():
            tail[i] = f',"args":{{"cta":{cta},"sm":{sm},"kernel":{kernel}}}'
        esc = json.encoder.encode_basestring_ascii
        out = [
            f'{{"ph":"X","name":{esc(n)},"cat":{cat},"pid":{p},"tid":{t},"ts":{a!r},"dur":{d!r}{x}}}'
            for n, p, t, a, d, x in zip(self.name, self.pid, self.tid, self.ts, self.dur, tail, strict=True)
        ]
        before = {i: [json.dumps(ev, separators=_SEP) for ev in evs] for i, evs in self.before.items()}
        return ",".join(_interleave(out, before))


#: One part of a trace's events: plain events, or one timeline's SM slices
_Part = list[dict] | _SmSlices


def _sm_events(tl: Timeline, off: float, regions: np.ndarray, named: _Named) -> _SmSlices:
    """One process per SM: each CTA on a slot where it overlaps no other, with the first warp's
    regions nested under it. The events, their order and their values are those of one
    _nest and one _slice per CTA (as this writer was), made from whole arrays."""
    spans = tl.cta_spans()
    by_sm = np.argsort(spans.sm, kind="stable")  # SM by SM, each SM's CTAs in id order
    sm, cta = spans.sm[by_sm], spans.cta[by_sm].tolist()
    sl = _cta_slices(tl, spans, by_sm, regions)
    lane = _slots(sm, spans.start_ns[by_sm], spans.end_ns[by_sm])[sl.group]
    pid, tid = _SM_PID_BASE + sm[sl.group], lane * 16 + sl.depth
    with np.errstate(all="ignore"):  # inf and NaN (from an absurd offset only) are written as ever
        s_ns, e_ns = sl.start + off, sl.end + off
        dur = np.where(e_ns - s_ns < 0, 0.0, e_ns - s_ns)  # max(dur, 0.0): -0.0 kept as max keeps it
    sms = sm.tolist()
    with_args = np.flatnonzero(sl.args).tolist()
    args = {i: (cta[g], sms[g]) for i, g in zip(with_args, sl.group[with_args].tolist(), strict=True)}
    before: dict[int, list[dict]] = {}
    for j in np.flatnonzero(np.diff(sm, prepend=-1)).tolist():  # each SM's first CTA
        if sms[j] not in named.sms:
            before[int(sl.first[j])] = _meta(_SM_PID_BASE + sms[j], f"SM {sms[j]:03d}", 10 + sms[j])
            named.sms.add(sms[j])
    _, at = np.unique(pid * (int(tid.max(initial=0)) + 1) + tid, return_index=True)  # each thread's first
    for i in np.sort(at).tolist():
        key, slot, depth = (int(pid[i]), int(tid[i])), int(lane[i]), int(sl.depth[i])
        if key not in named.lanes:
            label = f"slot {slot}" + (f" +{depth}" if depth else "")
            meta = {"ph": "M", "name": "thread_name", "pid": key[0], "tid": key[1], "args": {"name": label}}
            before.setdefault(i, []).append(meta)
            named.lanes.add(key)
    finite = bool(np.isfinite(s_ns).all() and np.isfinite(dur).all())
    ts, durs = _round4(s_ns / 1000.0), _round4(dur / 1000.0)
    cat = tl.kernel or "kernel"
    return _SmSlices(sl.name, pid.tolist(), tid.tolist(), ts, durs, args, cat, tl.kernel, finite, before)


def _interleave(items: list[Any], before: dict[int, list[Any]]) -> list[Any]:
    """``items`` with the items ``before[i]`` placed just before ``items[i]``."""
    out: list[Any] = []
    prev = 0
    for i in sorted(before):
        out += items[prev:i]
        out += before[i]
        prev = i
    out += items[prev:]
    return out


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
            label = {"name": f"warp {int(w)}" if w >= 0 else "CTA"}
            events.append(
                {"ph": "M", "name": "thread_name", "pid": pid, "tid": (int(w) + 1) * 16, "args": label}
            )
    return events


def _busy_counter(tl: Timeline, off: float, busy_series: BusySeries, counter_bins: int) -> list[dict]:
    """The busy-SM counter over the timeline, back to 0 at its end."""
    t, busy = busy_series(tl, bins=counter_bins)
    events = [
        _counter(round((a + off) / 1000.0, 4), round(float(v), 2)) for a, v in zip(t, busy, strict=True)
    ]
    if len(t):
        events.append(_counter(round((tl.t1 + off) / 1000.0, 4), 0))
    return events


def _counter(ts: float, sms: float) -> dict:
    return {"ph": "C", "name": "busy SMs", "pid": _ANALYSIS_PID, "tid": 0, "ts": ts, "args": {"SMs": sms}}


def _finding_events(findings: Sequence[FindingLike]) -> list[dict]:
    """Each finding as a global instant event at 0 on the analysis process."""
    return [
        {
            "ph": "i",
            "s": "g",
            "name": f"{'FLAG ' if f.flagged else ''}{f.name} = {f.value:.4g} {f.unit}",
            "pid": _ANALYSIS_PID,
            "tid": 0,
            "ts": 0,
            "args": {"explanation": f.explanation, "suggestion": f.suggestion},
        }
        for f in findings
    ]


def _stream_events(records: Sequence[KernelRecord]) -> list[dict]:
    """The kernels on one GPU-stream thread, from the first kernel's start."""
    if not records:
        return []
    base = min(r.start_ns for r in records)
    slices = [_slice(r.name, _STREAM_PID, 0, r.start_ns - base, r.end_ns - base, "kernel") for r in records]
    return _meta(_STREAM_PID, "GPU stream", 1, 0, "kernels") + slices


_PARAMS = inspect.signature(to_chrome_trace).parameters.values()  # its defaults' one home:
_DEFAULTS = {p.name: p.default for p in _PARAMS if p.default is not p.empty}  # write_chrome_trace's too


def write_chrome_trace(
    path: str | os.PathLike[str], timelines: Timeline | Sequence[Timeline], **kw: Any
) -> None:
    """Write :func:`to_chrome_trace`'s trace as json.dumps(trace, separators=_SEP) writes it, the
    SM slices written straight from their columns (:meth:`_SmSlices.json`)."""
    # json.dumps, not json.dump: dump streams through the pure-Python encoder (json's C
    # encoder serves one-shot dumps only); the text written is the same
    parts, kernels = _trace_parts(timelines, **{**_DEFAULTS, **kw})
    texts = [json.dumps(p, separators=_SEP)[1:-1] if isinstance(p, list) else p.json() for p in parts]
    events = ",".join(t for t in texts if t)
    # the document without its events, its events put in its "traceEvents":[] (the only one)
    shell = json.dumps(_document([], kernels), separators=_SEP)
    text = shell.replace('"traceEvents":[]', f'"traceEvents":[{events}]', 1)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
