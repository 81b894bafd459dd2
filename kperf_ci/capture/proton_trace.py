"""Parse Proton's intra-kernel Chrome trace (``data="trace"``) into compact numpy arrays.

Format written by Proton 3.6 (``StreamChromeTraceWriter``), one slice per recorded scope:

    {"name": "<scope>", "ph": "X", "pid": "<kernel> Core<sm> CTA<cta>",
     "tid": "warp <unit> (line <n>)", "ts": t, "dur": d,
     "args": {"Init Time (ns)": ..., "Post Final Time (ns)": ..., "Finalization Time (ns)": ...,
              "Frequency (MHz)": 1000.0, "call_stack": [...]}}

Proton 3.6 itself (seen on an H100 with triton 3.6.0) writes the same ``ts``/``dur`` but only
``{"Finalization Time (ns)", "Frequency (MHz)", "call_stack"}`` as args: no per-CTA init time.
A CTA's earliest ``ts`` is then its start in ns relative to the earliest CTA, and CTA end times
are not known (the clock cannot be measured from such a trace; callers fall back to NVML).

``dur * Frequency`` is the scope's length in cycles (Proton assumes 1 GHz: the numbers shown
as microseconds are kilo-cycles). ``ts * Frequency`` is ``(init_ns - min_init_ns) + (cycle -
first cycle of the CTA)``: a CTA's start from ``%globaltimer`` plus cycles within the CTA, so
``cycle - first cycle`` is recovered exactly from ``ts`` and the CTA's ``Init Time``. Cycles are
comparable within one CTA (one SM clock); across CTAs only the ns times are.

Nothing here needs a GPU: the unit tests feed synthetic traces in this format.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

_PID = re.compile(r"^(?P<kernel>.*) Core(?P<sm>\d+) CTA(?P<cta>\d+)$")
_TID = re.compile(r"warp\s*(?P<unit>\d+)")
_DROPPED = re.compile(r"(\d+)\s+events are dropped")


@dataclass
class KernelTrace:
    """All recorded slices of one kernel (one launch), as parallel arrays.

    Per event: ``region`` (index into ``names``), ``cta``, ``sm``, ``unit`` (warp, warp group or
    0 for CTA granularity), ``start`` (cycles since the CTA's first recorded cycle) and ``dur``
    (cycles). Per CTA (sorted by id): ``cta_ids``, ``cta_sm``, ``cta_init_ns`` (globaltimer at
    the CTA's start), ``cta_final_ns`` (before Proton's copy-out; -1 when unknown).
    """

    kernel: str
    names: list[str]
    region: np.ndarray
    cta: np.ndarray
    sm: np.ndarray
    unit: np.ndarray
    start: np.ndarray
    dur: np.ndarray
    cta_ids: np.ndarray
    cta_sm: np.ndarray
    cta_init_ns: np.ndarray
    cta_final_ns: np.ndarray
    warnings: list[str] = field(default_factory=list)
    raw: dict[str, np.ndarray] = field(default_factory=dict)  # ts as written (x freq), numeric args

    @property
    def n_events(self) -> int:
        return int(self.region.size)

    def region_id(self, name: str) -> int | None:
        try:
            return self.names.index(name)
        except ValueError:
            return None

    def arrays(self) -> dict[str, np.ndarray]:
        return {
            "region": self.region,
            "cta": self.cta,
            "sm": self.sm,
            "unit": self.unit,
            "start": self.start,
            "dur": self.dur,
            "cta_ids": self.cta_ids,
            "cta_sm": self.cta_sm,
            "cta_init_ns": self.cta_init_ns,
            "cta_final_ns": self.cta_final_ns,
        }


def load_trace(path_or_obj: str | Path | dict[str, Any]) -> list[dict[str, Any]]:
    """traceEvents of a Chrome trace file (one JSON object, or one object per line)."""
    if isinstance(path_or_obj, dict):
        return list(path_or_obj.get("traceEvents", []))
    text = Path(path_or_obj).read_text()
    try:
        return list(json.loads(text).get("traceEvents", []))
    except json.JSONDecodeError:
        events: list[dict[str, Any]] = []
        for line in text.splitlines():
            line = line.strip()
            if line:
                events.extend(json.loads(line).get("traceEvents", []))
        return events


def _key(args: dict[str, Any], *patterns: str) -> str | None:
    for k in args:
        low = k.lower()
        if all(p in low for p in patterns):
            return k
    return None


def parse_events(events: list[dict[str, Any]]) -> dict[str, KernelTrace]:
    """Group slices by kernel name and convert them to arrays (see module docstring)."""
    rows: dict[str, list[tuple]] = {}
    skipped = 0
    pids: dict[str, tuple[str, int, int] | None] = {}
    tids: dict[str, int] = {}
    keys: dict[tuple, tuple] = {}  # arg key names seen -> (freq, init, post, fin) key names
    for e in events:
        if e.get("ph") != "X":
            continue
        pid = str(e.get("pid", ""))
        p = pids.get(pid, False)
        if p is False:
            m = _PID.match(pid)
            p = pids[pid] = (m["kernel"], int(m["sm"]), int(m["cta"])) if m else None
        if p is None:
            skipped += 1
            continue
        tid = str(e.get("tid", ""))
        unit = tids.get(tid)
        if unit is None:
            t = _TID.search(tid)
            unit = tids[tid] = int(t["unit"]) if t else 0
        args = e.get("args") or {}
        ak = tuple(args)
        names = keys.get(ak)
        if names is None:
            names = keys[ak] = (
                _key(args, "freq"),
                _key(args, "init"),
                _key(args, "post", "final"),
                _key(args, "finalization"),
            )
        kf, ki, kp, kn = names
        freq = (args[kf] if kf else None) or 1000.0
        init = args[ki] if ki else None
        post = args[kp] if kp else None
        fin = args[kn] if kn else None
        rows.setdefault(p[0], []).append(
            (
                str(e.get("name", "")),
                p[2],
                p[1],
                unit,
                round(float(e.get("ts", 0.0)) * freq),
                round(float(e.get("dur", 0.0)) * freq),
                -1 if init is None else int(init),
                -1 if post is None else int(post),
                -1 if fin is None else int(fin),
                args,
            )
        )
    out = {}
    for kernel, rs in rows.items():
        out[kernel] = _to_arrays(kernel, rs)
        if skipped:
            out[kernel].warnings.append(f"{skipped} trace slices without a CTA/SM pid were ignored")
    return out


def _to_arrays(kernel: str, rs: list[tuple]) -> KernelTrace:
    names: list[str] = []
    index: dict[str, int] = {}
    for r in rs:
        if r[0] not in index:
            index[r[0]] = len(names)
            names.append(r[0])
    region = np.fromiter((index[r[0]] for r in rs), dtype=np.uint16, count=len(rs))
    cta = np.fromiter((r[1] for r in rs), dtype=np.uint32, count=len(rs))
    sm = np.fromiter((r[2] for r in rs), dtype=np.uint16, count=len(rs))
    unit = np.fromiter((r[3] for r in rs), dtype=np.uint16, count=len(rs))
    ts = np.fromiter((r[4] for r in rs), dtype=np.int64, count=len(rs))
    dur = np.fromiter((r[5] for r in rs), dtype=np.int64, count=len(rs))
    init = np.fromiter((r[6] for r in rs), dtype=np.int64, count=len(rs))
    post = np.fromiter((r[7] for r in rs), dtype=np.int64, count=len(rs))
    fin = np.fromiter((r[8] for r in rs), dtype=np.int64, count=len(rs))
    warnings = []
    have_init = bool((init >= 0).all())
    cta_ids, inv = np.unique(cta, return_inverse=True)
    cta_init = np.full(cta_ids.size, -1, dtype=np.int64)
    cta_final = np.full(cta_ids.size, -1, dtype=np.int64)
    if have_init:
        # ts = (init - min init) + (cycle - first cycle of the CTA)
        start = ts - (init - init.min())
        cta_init[inv] = init
        ok = (post >= 0) & (fin >= 0)
        cta_final[inv] = np.where(ok, post - fin, -1)
    else:
        # Proton 3.6 writes the same ts but no "Init Time" argument: the CTA's earliest ts is its
        # (init - min init) in ns (its first record has cycle == first cycle). Start times are
        # then relative to the earliest CTA, and no end time per CTA is known.
        first_ts = np.full(cta_ids.size, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(first_ts, inv, ts)
        cta_init = first_ts
        start = ts - first_ts[inv]
    # normalise per CTA: cycles since the CTA's first recorded cycle
    first = np.full(cta_ids.size, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, inv, start)
    start = start - first[inv]
    cta_sm = np.zeros(cta_ids.size, dtype=np.uint16)
    cta_sm[inv] = sm
    raw = {"ts": ts}
    numeric = sorted({k for r in rs[:64] for k, v in r[9].items() if isinstance(v, (int, float))})[:8]
    for k in numeric:
        vals = (float(r[9][k]) if isinstance(r[9].get(k), (int, float)) else np.nan for r in rs)
        raw["arg:" + k] = np.fromiter(vals, dtype=np.float64, count=len(rs))
    return KernelTrace(
        kernel, names, region, cta, sm, unit, start, dur, cta_ids, cta_sm, cta_init, cta_final, warnings, raw
    )


def dropped_from_log(text: str) -> int:
    """Events Proton says it dropped (its 'N events are dropped' warnings), summed."""
    return sum(int(n) for n in _DROPPED.findall(text or ""))


# --------------------------------------------------------------------------------------------
# derived quantities


def measured_clock_ghz(kt: KernelTrace, kernel_region: str | None = "kernel") -> float | None:
    """SM cycles per ns measured in the trace: sum over CTAs of the cycles between the CTA's
    first and last record, over the sum of the same CTAs' globaltimer span (init to pre-final).

    A ratio of sums, so the globaltimer's coarse ticks average out over many CTAs. The small
    gaps before the first and after the last record bias it low by (gap / CTA length).
    """
    if kt.n_events == 0 or (kt.cta_init_ns < 0).any() or (kt.cta_final_ns < 0).any():
        return None
    sel = np.ones(kt.n_events, dtype=bool)
    rid = kt.region_id(kernel_region) if kernel_region else None
    if rid is not None:
        sel = kt.region == rid
    idx = np.searchsorted(kt.cta_ids, kt.cta[sel])
    end = np.zeros(kt.cta_ids.size, dtype=np.int64)
    np.maximum.at(end, idx, kt.start[sel] + kt.dur[sel])
    beg = np.full(kt.cta_ids.size, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(beg, idx, kt.start[sel])
    have = beg != np.iinfo(np.int64).max
    cycles = (end - beg)[have].astype(np.float64)
    ns = (kt.cta_final_ns - kt.cta_init_ns)[have].astype(np.float64)
    good = ns > 0
    if not good.any() or ns[good].sum() <= 0:
        return None
    return float(cycles[good].sum() / ns[good].sum())


def cta_end_ns(kt: KernelTrace, clock_ghz: float, region: str | None = "kernel") -> np.ndarray:
    """Per CTA: globaltimer at start + cycles to the end of its last record (or of `region`)."""
    sel = np.ones(kt.n_events, dtype=bool)
    rid = kt.region_id(region) if region else None
    if rid is not None:
        sel = kt.region == rid
    idx = np.searchsorted(kt.cta_ids, kt.cta[sel])
    end = np.zeros(kt.cta_ids.size, dtype=np.int64)
    np.maximum.at(end, idx, kt.start[sel] + kt.dur[sel])
    return kt.cta_init_ns + end / clock_ghz


def kernel_span_ns(kt: KernelTrace, clock_ghz: float, region: str | None = "kernel") -> float | None:
    """First CTA start to last CTA end, in ns (cycles within a CTA converted with clock_ghz)."""
    if kt.n_events == 0 or (kt.cta_init_ns < 0).any() or not clock_ghz:
        return None
    ends = cta_end_ns(kt, clock_ghz, region)
    return float(ends.max() - kt.cta_init_ns.min())
