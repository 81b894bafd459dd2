"""The input of every intra-kernel analysis: a flat table of timed region records.

One record = one region (``kernel``, ``prologue``, ``loop0``, ``epilogue``, ``body`` or a user
scope) executed by one warp (or one CTA, at CTA granularity) of one CTA on one SM, with a
start and an end time in nanoseconds from the start of the launch.

Loaders:
- :func:`load_proton_trace` / :func:`load_proton_traces`: Proton's Chrome-trace JSON
  (``proton.start(..., backend="instrumentation", data="trace")``): one process per CTA named
  ``"<kernel> Core<sm> CTA<id>"``, one thread per warp named ``"warp <id> (line <n>)"``.
- :func:`from_region_result`: the capture stage's ``RegionResult`` (kperf_ci.capture).
- :meth:`Timeline.from_records`: plain tuples/dicts, for tests and other tools.

Clock: Proton places each CTA on the global timer (ns) but measures inside a CTA in SM
cycles and writes them as if the clock ran at 1 GHz. The loader rescales the in-CTA offsets
to nanoseconds when the clock is known (``clock_mhz=``) or can be estimated from the trace's
per-CTA init/final global-timer stamps (``clock_mhz="auto"``, the default); ``meta["clock"]``
says which was used. Analyses that compare CTAs across SMs (occupancy, waves, imbalance)
need this; ratios inside a CTA (prologue share, overlap) do not.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

KERNEL_REGION = "kernel"
_PID_RE = re.compile(r"^(?P<kernel>.*?) Core(?P<sm>\d+) CTA(?P<cta>\d+)")
_TID_RE = re.compile(r"(?:warp|wg|warp_group|group)\s*(?P<warp>\d+)", re.IGNORECASE)
_LOOP_RE = re.compile(r"^loop\d+$")


def group_min(keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """For each element, the minimum of ``values`` over the elements with the same key."""
    _, inv = np.unique(keys, return_inverse=True)
    inv = inv.reshape(-1)
    lo = np.full(int(inv.max()) + 1 if len(inv) else 0, np.inf)
    np.minimum.at(lo, inv, values)
    return lo[inv]


def group_slices(keys: np.ndarray) -> tuple[np.ndarray, list[tuple[int, np.ndarray]]]:
    """Indices of the elements of each key, without one pass over all elements per key:
    (unique keys, [(key, indices)])."""
    keys = np.asarray(keys)
    order = np.argsort(keys, kind="stable")
    uniq, first = np.unique(keys[order], return_index=True)
    bounds = list(first) + [len(keys)]
    return uniq, [(uniq[i], order[bounds[i] : bounds[i + 1]]) for i in range(len(uniq))]


def is_loop_region(name: str) -> bool:
    return bool(_LOOP_RE.match(name))


@dataclass
class CtaSpans:
    """One row per CTA: where it ran and from when to when (ns)."""

    cta: np.ndarray
    sm: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray

    def __len__(self) -> int:
        return len(self.cta)

    @property
    def duration_ns(self) -> np.ndarray:
        return self.end_ns - self.start_ns


@dataclass
class Timeline:
    """Region records of one kernel launch, as parallel numpy arrays (one entry per record).

    ``warp`` is -1 for CTA-granularity records. ``num_sms`` is the device's SM count when known
    (SMs that ran nothing are idle time too); ``meta`` carries provenance (source file, clock,
    dropped events, arch, ...).
    """

    cta: np.ndarray
    warp: np.ndarray
    sm: np.ndarray
    region: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    kernel: str = ""
    num_sms: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.cta = np.asarray(self.cta, dtype=np.int64).reshape(-1)
        self.warp = np.asarray(self.warp, dtype=np.int64).reshape(-1)
        self.sm = np.asarray(self.sm, dtype=np.int64).reshape(-1)
        self.region = np.asarray(self.region, dtype=object).reshape(-1)
        self.start_ns = np.asarray(self.start_ns, dtype=np.float64).reshape(-1)
        self.end_ns = np.asarray(self.end_ns, dtype=np.float64).reshape(-1)
        n = len(self.cta)
        for name in ("warp", "sm", "region", "start_ns", "end_ns"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"Timeline.{name} has {len(getattr(self, name))} entries, cta has {n}")
        if n and np.any(self.end_ns < self.start_ns):
            bad = int(np.argmax(self.end_ns < self.start_ns))
            raise ValueError(
                f"record {bad} ends before it starts ({self.start_ns[bad]} > {self.end_ns[bad]})"
            )

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def from_records(
        cls,
        records: Iterable[Sequence[Any] | dict[str, Any]],
        *,
        kernel: str = "",
        num_sms: int | None = None,
        meta: dict[str, Any] | None = None,
    ) -> Timeline:
        """Records as dicts with keys cta, warp, sm, region, start_ns, end_ns (warp optional)
        or as tuples in that order."""
        cols: dict[str, list[Any]] = {k: [] for k in ("cta", "warp", "sm", "region", "start_ns", "end_ns")}
        for r in records:
            if isinstance(r, dict):
                cols["cta"].append(r["cta"])
                cols["warp"].append(r.get("warp", -1))
                cols["sm"].append(r["sm"])
                cols["region"].append(r["region"])
                cols["start_ns"].append(r["start_ns"])
                cols["end_ns"].append(r["end_ns"])
            else:
                cta, warp, sm, region, s, e = r
                for k, v in zip(cols, (cta, warp, sm, region, s, e), strict=True):
                    cols[k].append(v)
        return cls(**cols, kernel=kernel, num_sms=num_sms, meta=dict(meta or {}))

    def to_records(self) -> list[dict[str, Any]]:
        return [
            {
                "cta": int(c),
                "warp": int(w),
                "sm": int(s),
                "region": str(r),
                "start_ns": float(a),
                "end_ns": float(b),
            }
            for c, w, s, r, a, b in zip(
                self.cta, self.warp, self.sm, self.region, self.start_ns, self.end_ns, strict=True
            )
        ]

    # -- views --------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.cta)

    @property
    def empty(self) -> bool:
        return len(self) == 0

    @property
    def t0(self) -> float:
        return float(self.start_ns.min()) if len(self) else 0.0

    @property
    def t1(self) -> float:
        return float(self.end_ns.max()) if len(self) else 0.0

    @property
    def span_ns(self) -> float:
        return self.t1 - self.t0

    @property
    def duration_ns(self) -> np.ndarray:
        return self.end_ns - self.start_ns

    def regions(self) -> list[str]:
        """Region names in order of first appearance."""
        seen: dict[str, None] = {}
        for r in self.region:
            seen.setdefault(str(r), None)
        return list(seen)

    def where(self, mask: np.ndarray) -> Timeline:
        mask = np.asarray(mask, dtype=bool)
        return Timeline(
            self.cta[mask],
            self.warp[mask],
            self.sm[mask],
            self.region[mask],
            self.start_ns[mask],
            self.end_ns[mask],
            kernel=self.kernel,
            num_sms=self.num_sms,
            meta=dict(self.meta),
        )

    def only(self, *names: str) -> Timeline:
        return self.where(np.isin(self.region.astype(str), list(names)))

    def sm_count(self) -> int:
        """Device SM count if known, else the SMs seen in the trace (a lower bound)."""
        seen = int(self.sm.max()) + 1 if len(self) else 0
        return max(self.num_sms or 0, seen)

    def cta_spans(self) -> CtaSpans:
        """Per CTA: its SM and its span, from the ``kernel`` region when the CTA has one
        (union over its warps), else from all of its records."""
        if self.empty:
            z = np.zeros(0)
            return CtaSpans(z.astype(np.int64), z.astype(np.int64), z, z)
        has_kernel = self.region.astype(str) == KERNEL_REGION
        ctas_with_kernel = set(np.unique(self.cta[has_kernel]).tolist())
        use = has_kernel | ~np.isin(self.cta, list(ctas_with_kernel))
        cta = self.cta[use]
        order = np.argsort(cta, kind="stable")
        cta_sorted = cta[order]
        uniq, first = np.unique(cta_sorted, return_index=True)
        starts = np.minimum.reduceat(self.start_ns[use][order], first)
        ends = np.maximum.reduceat(self.end_ns[use][order], first)
        sms = self.sm[use][order][first]
        return CtaSpans(uniq.astype(np.int64), sms.astype(np.int64), starts, ends)

    def shifted(self, t0: float | None = None) -> Timeline:
        """The same timeline with times measured from ``t0`` (default: its first start)."""
        base = self.t0 if t0 is None else t0
        out = self.where(np.ones(len(self), dtype=bool))
        out.start_ns = self.start_ns - base
        out.end_ns = self.end_ns - base
        return out


# -- Proton Chrome trace ------------------------------------------------------------------------


def _read_json(src: str | os.PathLike[str] | dict[str, Any] | list[Any]) -> dict[str, Any] | list[Any]:
    if isinstance(src, (dict, list)):
        return src
    with open(src, encoding="utf-8") as f:
        return json.load(f)


def _events(obj: dict[str, Any] | list[Any]) -> list[dict[str, Any]]:
    if isinstance(obj, dict):
        return list(obj.get("traceEvents", []))
    return list(obj)


@dataclass
class _RawEvent:
    kernel: str
    sm: int
    cta: int
    warp: int
    region: str
    ts_ns: float
    dur_ns: float
    init_ns: float | None
    final_ns: float | None


def _parse_proton_events(obj: dict[str, Any] | list[Any]) -> list[_RawEvent]:
    out: list[_RawEvent] = []
    for ev in _events(obj):
        if ev.get("ph") != "X":
            continue
        m = _PID_RE.match(str(ev.get("pid", "")))
        if not m:
            continue  # e.g. the "Kernel Call Path" bars newer Proton versions add
        tid = str(ev.get("tid", ""))
        tm = _TID_RE.search(tid)
        warp = int(tm.group("warp")) if tm else (int(tid) if tid.isdigit() else -1)
        args = ev.get("args") or {}
        init = args.get("Init Time (ns)")
        post = args.get("Post Final Time (ns)")
        fin = args.get("Finalization Time (ns)")
        final = None
        if post is not None:
            final = float(post) - float(fin or 0)
        out.append(
            _RawEvent(
                kernel=m.group("kernel"),
                sm=int(m.group("sm")),
                cta=int(m.group("cta")),
                warp=warp,
                region=str(ev.get("name", "")),
                ts_ns=float(ev["ts"]) * 1000.0,
                dur_ns=float(ev.get("dur", 0.0)) * 1000.0,
                init_ns=float(init) if init is not None else None,
                final_ns=final,
            )
        )
    return out


def _estimate_clock_mhz(cta: np.ndarray, start: np.ndarray, end: np.ndarray, init, final) -> float | None:
    """SM clock from the CTAs' global-timer init/final stamps around their cycle-counted spans.

    Ratio of sums over CTAs (cycles between a CTA's first and last record / ns between its init
    and pre-final stamps), so the global timer's coarse ticks average out; the short gaps before
    the first and after the last record bias it low by gap / CTA length. None without stamps or
    when the result is not a plausible SM clock."""
    if init is None or final is None:
        return None
    _, inv = np.unique(cta, return_inverse=True)
    inv = inv.reshape(-1)
    n = int(inv.max()) + 1 if len(inv) else 0
    lo = np.full(n, np.inf)
    hi = np.full(n, -np.inf)
    np.minimum.at(lo, inv, start)
    np.maximum.at(hi, inv, end)
    ns = np.zeros(n)
    ns[inv] = np.asarray(final, dtype=np.float64) - np.asarray(init, dtype=np.float64)
    cyc = hi - lo
    ok = (ns > 0) & (cyc > 0)
    cyc_sum, ns_sum = float(cyc[ok].sum()), float(ns[ok].sum())
    if ns_sum <= 0:
        return None
    est = cyc_sum / ns_sum * 1000.0
    return est if 300.0 <= est <= 3500.0 else None


def _split_launches(spans: list[tuple[float, float, int]]) -> list[int]:
    """Assign CTAs (start, end, index) to launches: kernels of one stream do not overlap, so a
    CTA that starts after every CTA seen so far has ended begins a new launch."""
    order = sorted(range(len(spans)), key=lambda i: spans[i][0])
    launch = [0] * len(spans)
    cur, cur_end = -1, -np.inf
    for i in order:
        s, e, _ = spans[i]
        if s >= cur_end:
            cur += 1
        cur_end = max(cur_end, e) if s < cur_end else e
        launch[i] = cur
    return launch


def _split_repeated_ctas(groups):
    """Without init stamps, two launches of one kernel put the same CTA id on the same SM into
    one group; split such a group at each new start of the warp-0 (or CTA) ``kernel`` region."""
    out = {}
    for key, evs in groups.items():
        if key[2] is not None:
            out[key] = evs
            continue
        kern = sorted(
            r.ts_ns for r in evs if r.region == KERNEL_REGION and r.warp == min(e.warp for e in evs)
        )
        if len(kern) <= 1:
            out[key] = evs
            continue
        for r in evs:
            k = int(np.searchsorted(kern, r.ts_ns, side="right")) - 1
            out.setdefault((key[0], key[1], None, max(k, 0)), []).append(r)
    return out


def load_proton_traces(
    src: str | os.PathLike[str] | dict[str, Any] | list[Any],
    *,
    kernel: str | None = None,
    clock_mhz: float | str | None = "auto",
    num_sms: int | None = None,
) -> list[Timeline]:
    """Every kernel launch in a Proton Chrome trace, as one Timeline each, in time order.

    ``kernel``: keep only launches of kernels whose name contains this string.
    ``clock_mhz``: SM clock used to turn in-CTA cycles into ns; "auto" estimates it from the
    trace's global-timer stamps when they are there, None keeps Proton's 1-cycle-=-1-ns view.
    """
    obj = _read_json(src)
    raw = _parse_proton_events(obj)
    if kernel is not None:
        raw = [r for r in raw if kernel in r.kernel]
    source = str(src) if isinstance(src, (str, os.PathLike)) else "<object>"
    by_kernel: dict[str, list[_RawEvent]] = {}
    for r in raw:
        by_kernel.setdefault(r.kernel, []).append(r)

    timelines: list[Timeline] = []
    for kname, evs in by_kernel.items():
        # A launch's CTA ids are unique: group events by (cta, sm) occurrence and split by time.
        groups: dict[tuple[int, int, float | None, int], list[_RawEvent]] = {}
        for r in evs:
            groups.setdefault((r.cta, r.sm, r.init_ns, 0), []).append(r)
        groups = _split_repeated_ctas(groups)
        keys = list(groups)
        spans = [
            (min(r.ts_ns for r in groups[k]), max(r.ts_ns + r.dur_ns for r in groups[k]), i)
            for i, k in enumerate(keys)
        ]
        launch_of = _split_launches(spans) if len(keys) > 1 else [0] * len(keys)
        n_launch = max(launch_of) + 1 if launch_of else 0
        for li in range(n_launch):
            sel = [r for k, lo in zip(keys, launch_of, strict=True) if lo == li for r in groups[k]]
            timelines.append(_timeline_from_raw(kname, sel, clock_mhz, num_sms, source, li))
    timelines.sort(key=lambda t: t.t0)
    return timelines


def _timeline_from_raw(
    kname: str,
    evs: list[_RawEvent],
    clock_mhz: float | str | None,
    num_sms: int | None,
    source: str,
    launch: int,
) -> Timeline:
    cta = np.array([r.cta for r in evs], dtype=np.int64)
    start = np.array([r.ts_ns for r in evs])
    end = start + np.array([r.dur_ns for r in evs])
    have_stamps = all(r.init_ns is not None and r.final_ns is not None for r in evs)
    init = np.array([r.init_ns for r in evs], dtype=np.float64) if have_stamps else None
    final = np.array([r.final_ns for r in evs], dtype=np.float64) if have_stamps else None
    clock_used: float | None = None
    how = "assumed 1 GHz (Proton's view: in-CTA times are cycles)"
    if clock_mhz == "auto":
        clock_used = _estimate_clock_mhz(cta, start, end, init, final)
        if clock_used is not None:
            how = "estimated from global-timer stamps"
    elif clock_mhz is not None:
        clock_used = float(clock_mhz)
        how = "given"
    if clock_used is not None:
        scale = 1000.0 / clock_used
        base = group_min(cta, start)
        start, end = base + (start - base) * scale, base + (end - base) * scale
    t0 = float(start.min()) if len(start) else 0.0
    return Timeline(
        cta=cta,
        warp=[r.warp for r in evs],
        sm=[r.sm for r in evs],
        region=[r.region for r in evs],
        start_ns=start - t0,
        end_ns=end - t0,
        kernel=kname,
        num_sms=num_sms,
        meta={
            "source": source,
            "format": "proton-chrome-trace",
            "launch": launch,
            "trace_t0_ns": t0,  # where this launch starts on the trace's clock (for launch gaps)
            "clock_mhz": clock_used,
            "clock": how,
        },
    )


def load_proton_trace(
    src: str | os.PathLike[str] | dict[str, Any] | list[Any],
    *,
    kernel: str | None = None,
    launch: int = -1,
    clock_mhz: float | str | None = "auto",
    num_sms: int | None = None,
) -> Timeline:
    """One launch from a Proton Chrome trace (default: the last one, ``launch=-1``)."""
    tls = load_proton_traces(src, kernel=kernel, clock_mhz=clock_mhz, num_sms=num_sms)
    if not tls:
        what = f" of a kernel named like {kernel!r}" if kernel else ""
        raise ValueError(f"no Proton CTA events{what} in {src if isinstance(src, str) else 'trace'}")
    return tls[launch]


def is_proton_trace(obj: dict[str, Any] | list[Any]) -> bool:
    return any(_PID_RE.match(str(e.get("pid", ""))) for e in _events(obj)[:200] if isinstance(e, dict))


# -- kperf's own timeline JSON (what `kperf analyze --trace` also reads) ------------------------


def timeline_document(tl: Timeline, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """kperf's timeline JSON as a dict: a compact, versioned form (columns, not objects), small
    enough for test data. ``meta`` replaces ``tl.meta`` (e.g. only its JSON-safe entries)."""
    return {
        "format": "kperf-timeline",
        "version": 1,
        "kernel": tl.kernel,
        "num_sms": tl.num_sms,
        "meta": tl.meta if meta is None else meta,
        "columns": {
            "cta": tl.cta.tolist(),
            "warp": tl.warp.tolist(),
            "sm": tl.sm.tolist(),
            "region": [str(r) for r in tl.region],
            "start_ns": [round(float(x), 1) for x in tl.start_ns],
            "end_ns": [round(float(x), 1) for x in tl.end_ns],
        },
    }


def save_timeline(tl: Timeline, path: str | os.PathLike[str]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(timeline_document(tl), f, separators=(",", ":"))


def timeline_from_json(obj: dict[str, Any]) -> Timeline:
    if obj.get("format") != "kperf-timeline":
        raise ValueError("not a kperf-timeline JSON object")
    if int(obj.get("version", 0)) != 1:
        raise ValueError(f"kperf-timeline version {obj.get('version')} is not supported (expected 1)")
    c = obj["columns"]
    return Timeline(
        c["cta"],
        c["warp"],
        c["sm"],
        c["region"],
        c["start_ns"],
        c["end_ns"],
        kernel=obj.get("kernel", ""),
        num_sms=obj.get("num_sms"),
        meta=dict(obj.get("meta") or {}),
    )


def load_timelines(src: str | os.PathLike[str], **kw: Any) -> list[Timeline]:
    """Any timeline file kperf knows: its own format or a Proton Chrome trace."""
    obj = _read_json(src)
    if isinstance(obj, dict) and obj.get("format") == "kperf-timeline":
        return [timeline_from_json(obj)]
    if isinstance(obj, dict) and obj.get("format") == "kperf-timelines":
        return [timeline_from_json(o) for o in obj["timelines"]]
    return load_proton_traces(obj, **kw)


# -- adapter for the capture stage ------------------------------------------------------------


def from_region_result(rr: Any, *, num_sms: int | None = None) -> Timeline:
    """Timeline from kperf_ci.capture.instrument.RegionResult (duck-typed, so the analysis
    package does not import the GPU-side capture code).

    Accepted shapes, tried in order:
    - ``rr.timeline`` already a :class:`Timeline`;
    - ``rr.trace``: a ``proton_trace.KernelTrace`` (cycles per CTA + global-timer init stamps),
      converted with ``rr.clock_ghz`` (see :func:`from_kernel_trace`);
    - ``rr.records`` / ``rr.events``: iterable of objects or dicts with cta, warp, sm, region
      (or name), and start_ns/end_ns (or start/end in ns);
    - ``rr.trace_path``: a Proton Chrome trace on disk.
    """
    tl = getattr(rr, "timeline", None)
    if isinstance(tl, Timeline):
        return tl
    n_sms = num_sms or getattr(rr, "num_sms", None)
    kt = getattr(rr, "trace", None)
    if kt is not None and hasattr(kt, "cta_init_ns"):
        out = from_kernel_trace(kt, clock_ghz=getattr(rr, "clock_ghz", None), num_sms=n_sms)
        out.meta["source"] = "RegionResult"
        out.meta["clock"] = f"RegionResult ({getattr(rr, 'clock_source', '?')})"
        out.meta["dropped_events"] = int(getattr(rr, "dropped_events", 0) or 0)
        grid = getattr(rr, "grid", None)
        if grid:
            out.meta["grid"] = list(grid)
        return out
    kname = str(getattr(rr, "kernel", "") or getattr(rr, "name", "") or "")
    for attr in ("records", "events"):
        recs = getattr(rr, attr, None)
        if recs:
            rows = []
            for r in recs:
                get = r.get if isinstance(r, dict) else (lambda k, d=None, _r=r: getattr(_r, k, d))
                start = get("start_ns", None)
                end = get("end_ns", None)
                if start is None:
                    start, end = get("start"), get("end")
                warp = get("warp", -1)
                rows.append(
                    (
                        get("cta"),
                        -1 if warp is None else warp,
                        get("sm"),
                        get("region", None) or get("name"),
                        start,
                        end,
                    )
                )
            out = Timeline.from_records(rows, kernel=kname, num_sms=n_sms, meta={"source": "RegionResult"})
            return out.shifted() if len(out) else out
    path = getattr(rr, "trace_path", None)
    if path:
        return load_proton_trace(path, num_sms=n_sms)
    raise TypeError(
        f"cannot build a Timeline from {type(rr).__name__}: no timeline, trace, records, events or trace_path"
    )


def timeline_from_npz(data: bytes, *, num_sms: int | None = None) -> Timeline:
    """Timeline from ``RegionResult.timeline_bytes()`` (the compact npz the capture stage stores:
    a JSON header with kernel, names and clock_ghz, plus the KernelTrace arrays)."""
    import io
    from types import SimpleNamespace

    with np.load(io.BytesIO(data)) as z:
        header = json.loads(bytes(z["header"]).decode())
        arrays = {k: z[k] for k in z.files if k != "header"}
    kt = SimpleNamespace(kernel=header.get("kernel", ""), names=list(header.get("names", [])), **arrays)
    out = from_kernel_trace(kt, clock_ghz=header.get("clock_ghz"), num_sms=num_sms)
    out.meta["source"] = "RegionResult.timeline_bytes"
    out.meta["dropped_events"] = int(header.get("dropped_events") or 0)
    if header.get("grid"):
        out.meta["grid"] = list(header["grid"])
    return out


def from_kernel_trace(kt: Any, *, clock_ghz: float | None = None, num_sms: int | None = None) -> Timeline:
    """Timeline from kperf_ci.capture.proton_trace.KernelTrace (duck-typed): per event
    ``start``/``dur`` in cycles since the CTA's first record, per CTA ``cta_init_ns``.

    CTAs are placed by their global-timer init stamp; in-CTA cycles become ns with
    ``clock_ghz`` (default: estimated from the stamps like ``measured_clock_ghz``; 1.0 when
    there are none, Proton's own assumption)."""
    start_cyc = np.asarray(kt.start, dtype=np.float64)
    dur_cyc = np.asarray(kt.dur, dtype=np.float64)
    cta = np.asarray(kt.cta, dtype=np.int64)
    cta_ids = np.asarray(kt.cta_ids, dtype=np.int64)
    init = np.asarray(kt.cta_init_ns, dtype=np.float64)
    final = np.asarray(kt.cta_final_ns, dtype=np.float64)
    idx = np.searchsorted(cta_ids, cta)
    have_init = len(init) > 0 and bool((init >= 0).all())
    how = "given"
    if clock_ghz is None:
        est = None
        if have_init and bool((final >= 0).all()):
            est = _estimate_clock_mhz(cta, start_cyc, start_cyc + dur_cyc, init[idx], final[idx])
        clock_ghz = est / 1000.0 if est else 1.0
        how = "estimated from global-timer stamps" if est else "assumed 1 GHz (no stamps)"
    base = (init[idx] - init.min()) if have_init else np.zeros(len(cta))
    s = base + start_cyc / clock_ghz
    e = s + dur_cyc / clock_ghz
    names = list(kt.names)
    region = np.array([names[int(i)] for i in np.asarray(kt.region)], dtype=object)
    t0 = float(s.min()) if len(s) else 0.0
    return Timeline(
        cta=cta,
        warp=np.asarray(kt.unit, dtype=np.int64),
        sm=np.asarray(kt.sm, dtype=np.int64),
        region=region,
        start_ns=s - t0,
        end_ns=e - t0,
        kernel=str(kt.kernel),
        num_sms=num_sms,
        meta={
            "source": "KernelTrace",
            "clock_mhz": clock_ghz * 1000.0,
            "clock": how,
            "trace_t0_ns": t0 + (float(init.min()) if have_init else 0.0),
            "warnings": list(getattr(kt, "warnings", []) or []),
        },
    )
