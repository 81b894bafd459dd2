"""Parse Proton's intra-kernel Chrome trace (``data="trace"``) into compact numpy arrays.

Format written by Proton 3.6 (``StreamChromeTraceWriter``), one slice per recorded scope:

    {"name": "<scope>", "ph": "X", "pid": "<kernel> Core<sm> CTA<cta>",
     "tid": "warp <unit> (line <n>)", "ts": t, "dur": d,
     "args": {"Init Time (ns)": ..., "Post Final Time (ns)": ..., "Finalization Time (ns)": ...,
              "Frequency (MHz)": 1000.0, "call_stack": [...]}}

Proton 3.6 itself (seen on an H100 with triton 3.6.0) writes the same ``ts``/``dur`` but only
``{"Finalization Time (ns)", "Frequency (MHz)", "call_stack"}`` as args: no per-CTA init time.
A CTA's earliest ``ts`` is then its start in ns relative to the earliest CTA, and CTA end times
are not known. Worse, ``ts`` subtracts each CTA's first cycle, so absolute SM cycles are gone too:
no clock can be measured from such a trace. The device buffer has what is missing; see
:func:`parse_raw_buffer` (its layout), :func:`fit_clock` and :func:`spans_from_raw` below.

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
    sel, idx, end = _last_cycle_per_cta(kt, kernel_region)
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
    _, _, end = _last_cycle_per_cta(kt, region)
    return kt.cta_init_ns + end / clock_ghz


def _last_cycle_per_cta(kt: KernelTrace, region: str | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(selected records, their CTA index, per CTA the cycle at which its last selected record ends).
    Records of `region` when the trace has it, else all records."""
    sel = np.ones(kt.n_events, dtype=bool)
    rid = kt.region_id(region) if region else None
    if rid is not None:
        sel = kt.region == rid
    idx = np.searchsorted(kt.cta_ids, kt.cta[sel])
    end = np.zeros(kt.cta_ids.size, dtype=np.int64)
    np.maximum.at(end, idx, kt.start[sel] + kt.dur[sel])
    return sel, idx, end


def kernel_span_ns(kt: KernelTrace, clock_ghz: float, region: str | None = "kernel") -> float | None:
    """First CTA start to last CTA end, in ns (cycles within a CTA converted with clock_ghz)."""
    if kt.n_events == 0 or (kt.cta_init_ns < 0).any() or not clock_ghz:
        return None
    ends = cta_end_ns(kt, clock_ghz, region)
    return float(ends.max() - kt.cta_init_ns.min())


# --------------------------------------------------------------------------------------------
# the raw profile buffer (Proton 3.6, read from the device without Proton's host parser)
#
# Layout per CTA, at ``cta_linear_id * profile_scratch_size`` (read off the PTX of an sm_90
# build with Proton 3.6's lowering; thread 0 of the CTA writes the header):
#   +0  u32 preamble 0xdeadbeef      +4  u32 linear CTA id      +8  u32 %smid
#   +12 u32 buffer bytes (shared)    +16 u64 init  %globaltimer (kernel entry, before any record)
#   +24 u64 pre-final %globaltimer (after the kernel's last record and a CTA barrier)
#   +32 u64 post-final %globaltimer (after the records were copied out)
#   +40 u32 words written per warp (num_warps entries; 2 words a record), then the copied shared
#   buffer: one segment per recording warp, 8-byte records
#   word0 = is_end << 31 | scope_id << 23 | (%clock_hi & 0x7ff), word1 = %clock (low 32 bits)
# so each record carries 43 bits of the SM's clock64: absolute cycles, comparable between all
# CTAs that ran on the same SM. The Chrome trace that Proton 3.6 writes drops exactly that (it
# subtracts each CTA's first cycle) and the CTA's pre/post-final times.

PREAMBLE = 0xDEADBEEF
HEADER_BYTES = 40


def raw_header_bytes(num_warps: int, max_records: int) -> int:
    """Bytes per CTA worth copying off the device for `max_records` records of warp 0."""
    return HEADER_BYTES + 4 * num_warps + 8 * max_records


def parse_raw_buffer(
    blocks: np.ndarray,
    num_warps: int,
    scope_names: dict[int, str],
    kernel: str = "kernel",
    recording_warps: tuple[int, ...] = (0,),
) -> KernelTrace:
    """KernelTrace from the per-CTA head of Proton's device buffer (``blocks``: uint8, one row
    per CTA, at least ``raw_header_bytes`` wide). Records are paired per scope in order, as
    Proton's own parser does. ``start`` stays cycles since the CTA's first record (as from the
    Chrome trace); the absolute clock of that first record is ``raw["cycle0"]`` (per CTA) and
    the per-CTA globaltimer stamps are ``cta_init_ns`` / ``cta_final_ns`` (pre-final) and
    ``raw["cta_post_ns"]``. Records beyond the copied width are not seen (warned)."""
    b = np.ascontiguousarray(blocks, dtype=np.uint8)
    n, width = b.shape
    u32 = b[:, : width - width % 4].view("<u4")
    ok = u32[:, 0] == PREAMBLE
    warnings = []
    if not ok.all():
        warnings.append(
            f"{int((~ok).sum())} of {n} CTAs have no valid Proton header (not run or not written)"
        )
    b, u32 = b[ok], u32[ok]
    u64 = b[:, 16:40].copy().view("<u8")
    cta_ids = u32[:, 1].astype(np.int64)
    sm = u32[:, 2].astype(np.int64)
    buf_bytes = u32[:, 3].astype(np.int64)
    counts = u32[:, 10 : 10 + num_warps].astype(np.int64)
    payload = HEADER_BYTES + 4 * num_warps
    nseg = len(recording_warps)
    rows: list[tuple[int, int, int, int, int, int]] = []  # region, cta, sm, unit, start, end
    dropped = 0
    for i in range(b.shape[0]):
        seg_bytes = int(buf_bytes[i]) // nseg
        for s, w in enumerate(recording_warps):
            cnt = int(counts[i, w]) // 2  # the header counts 4-byte words; a record is two
            cap = seg_bytes // 8
            if cnt > cap:
                dropped += cnt - cap
            take = min(cnt, cap)
            off = payload + s * seg_bytes
            avail = max(0, (width - off) // 8)
            if take > avail:
                warnings.append(
                    f"CTA {int(cta_ids[i])} warp {w}: {take - avail} records beyond the copied width"
                )
                take = avail
            if take <= 0:
                continue
            w32 = b[i, off : off + 8 * take].view("<u4").reshape(take, 2)
            open_: dict[int, int] = {}
            for w0, w1 in w32.tolist():
                sid = (w0 >> 23) & 0xFF
                cyc = ((w0 & 0x7FF) << 32) | w1
                if not w0 >> 31:
                    open_[sid] = cyc
                elif sid in open_:
                    rows.append((sid, int(cta_ids[i]), int(sm[i]), w, open_.pop(sid), cyc))
    if dropped:
        warnings.append(f"{dropped} events are dropped (Proton's buffer was too small)")
    arr = np.array(rows, dtype=np.int64).reshape(-1, 6)
    sids = np.unique(arr[:, 0])  # region index in scope-id order (Proton's order of first start)
    names = [scope_names.get(int(k), f"scope_{int(k)}") for k in sids]
    arr[:, 0] = np.searchsorted(sids, arr[:, 0])
    order = np.argsort(cta_ids, kind="stable")
    ids_sorted = cta_ids[order]
    pos = np.searchsorted(ids_sorted, arr[:, 1])
    cycle0 = np.full(ids_sorted.size, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(cycle0, pos, arr[:, 4])
    start = arr[:, 4] - cycle0[pos]
    return KernelTrace(
        kernel=kernel,
        names=names,
        region=arr[:, 0].astype(np.uint16),
        cta=arr[:, 1].astype(np.uint32),
        sm=arr[:, 2].astype(np.uint16),
        unit=arr[:, 3].astype(np.uint16),
        start=start,
        dur=arr[:, 5] - arr[:, 4],
        cta_ids=ids_sorted.astype(np.uint32),
        cta_sm=sm[order].astype(np.uint16),
        cta_init_ns=u64[order, 0].astype(np.int64),
        cta_final_ns=u64[order, 1].astype(np.int64),
        warnings=warnings,
        raw={"cycle0": cycle0, "cta_post_ns": u64[order, 2].astype(np.int64)},
    )


@dataclass
class ClockFit:
    """SM clock measured in one launch: per SM, the absolute cycle of each CTA's first record
    regressed on that CTA's globaltimer init stamp, one common slope (cycles per ns = GHz) and
    one intercept per SM (clock64 counters of different SMs are unrelated)."""

    ghz: float  # pooled least-squares slope
    ghz_median_sm: float | None  # median of per-SM slopes (SMs with >= 3 CTAs)
    n_ctas: int
    n_sms: int
    rms_residual_ns: float  # of the pooled fit, in ns
    intercepts: dict[int, tuple[float, float]]  # sm -> (mean init ns - base_ns, mean first cycle)
    rejected: int = 0  # CTAs left out of the fit as outliers
    base_ns: int = 0  # earliest CTA init stamp (globaltimer values exceed float64's exact range)

    def to_ns(self, sm: np.ndarray, cycles: np.ndarray) -> np.ndarray:
        """Absolute SM cycles -> globaltimer ns since ``base_ns``, through each SM's fitted line."""
        x0 = np.array([self.intercepts[int(s)][0] for s in sm], dtype=np.float64)
        y0 = np.array([self.intercepts[int(s)][1] for s in sm], dtype=np.float64)
        return x0 + (cycles.astype(np.float64) - y0) / self.ghz


def _sm_line_fit(x: np.ndarray, y: np.ndarray, inv: np.ndarray, rows: np.ndarray, n: int) -> tuple | None:
    """One slope for every SM, intercepts per SM: least squares of ``y`` on ``x`` over ``rows``,
    each centred on its SM's means. (counts per SM, x means, y means, rows used: those of SMs
    with 2 or more, centred x, centred y, slope); None when x does not vary or nothing is used."""
    cnt = np.bincount(inv, weights=rows.astype(np.float64), minlength=n)
    xm = np.bincount(inv, weights=np.where(rows, x, 0.0), minlength=n) / np.maximum(cnt, 1)
    ym = np.bincount(inv, weights=np.where(rows, y, 0.0), minlength=n) / np.maximum(cnt, 1)
    use = rows & (cnt[inv] >= 2)
    if not use.any():
        return None
    xc = x - xm[inv]
    yc = y - ym[inv]
    sxx = float((xc[use] ** 2).sum())
    if sxx <= 0:
        return None
    return cnt, xm, ym, use, xc, yc, float((xc[use] * yc[use]).sum() / sxx)


def fit_clock(kt: KernelTrace) -> ClockFit | None:
    """Fit the SM clock from a trace with absolute cycles (``raw["cycle0"]``, from
    :func:`parse_raw_buffer`). Needs an SM that ran at least two CTAs at different times.

    Why this and not cycles / ns within a CTA: the within-CTA ratio needs each CTA's end in ns,
    and its short span (a few us) against the globaltimer's coarse ticks (32 ns seen on an H100)
    and the fixed gaps around the records bias it. Across the CTAs of one SM the pairs spread
    over the whole kernel, and each pair's fixed offset (init stamp to first record, the same
    code in every CTA) is absorbed by the SM's intercept."""
    c0 = kt.raw.get("cycle0")
    if c0 is None or kt.cta_ids.size < 2 or (kt.cta_init_ns < 0).any():
        return None
    sm = kt.cta_sm.astype(np.int64)
    base = int(kt.cta_init_ns.min())
    x = (kt.cta_init_ns - base).astype(np.float64)
    y = c0.astype(np.float64)
    sms, inv = np.unique(sm, return_inverse=True)
    first = _sm_line_fit(x, y, inv, np.ones(x.size, dtype=bool), sms.size)
    if first is None:
        return None
    cnt, xm, ym, use, xc, yc, slope = first
    if not slope > 0:
        return None
    resid = (yc[use] - slope * xc[use]) / slope
    # one pass of outlier rejection (a CTA whose pair is off its SM's line by far more than the
    # clock's own wander under DVFS, a few hundred ns), then the same fit on the rest
    mad = float(np.median(np.abs(resid)))
    bad = np.zeros(x.size, dtype=bool)
    bad[np.flatnonzero(use)[np.abs(resid) > max(2000.0, 8.0 * mad)]] = True
    rejected = int(bad.sum())
    if rejected:
        second = _sm_line_fit(x, y, inv, use & ~bad, sms.size)
        if second is None:
            return None
        cnt, xm, ym, use, xc, yc, slope = second
        resid = (yc[use] - slope * xc[use]) / slope
    per_sm = []
    for k in range(sms.size):
        sel = (inv == k) & use
        if sel.sum() >= 3:
            sx = float((xc[sel] ** 2).sum())
            if sx > 0:
                per_sm.append(float((xc[sel] * yc[sel]).sum() / sx))
    return ClockFit(
        ghz=slope,
        ghz_median_sm=float(np.median(per_sm)) if per_sm else None,
        n_ctas=int(use.sum()),
        n_sms=int((cnt >= 2).sum()),
        rms_residual_ns=float(np.sqrt(np.mean(resid**2))),
        intercepts={int(s): (float(xm[k]), float(ym[k])) for k, s in enumerate(sms)},
        rejected=rejected,
        base_ns=base,
    )


def region_bounds_ns(
    kt: KernelTrace, fit: ClockFit, region: str | None = "kernel"
) -> tuple[np.ndarray, np.ndarray]:
    """Per CTA (order of ``cta_ids``): start and end of `region` (all records when absent) in
    ns since ``fit.base_ns``, converted through the SM's fitted clock line (NaN: no record)."""
    sel = np.ones(kt.n_events, dtype=bool)
    rid = kt.region_id(region) if region else None
    if rid is not None:
        sel = kt.region == rid
    idx = np.searchsorted(kt.cta_ids, kt.cta[sel])
    beg = np.full(kt.cta_ids.size, np.iinfo(np.int64).max, dtype=np.int64)
    end = np.full(kt.cta_ids.size, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(beg, idx, kt.start[sel])
    np.maximum.at(end, idx, kt.start[sel] + kt.dur[sel])
    have = beg != np.iinfo(np.int64).max
    c0 = kt.raw["cycle0"]
    t0 = np.full(kt.cta_ids.size, np.nan)
    t1 = np.full(kt.cta_ids.size, np.nan)
    t0[have] = fit.to_ns(kt.cta_sm[have], c0[have] + beg[have])
    t1[have] = fit.to_ns(kt.cta_sm[have], c0[have] + end[have])
    return t0, t1


def spans_from_raw(kt: KernelTrace, fit: ClockFit, region: str | None = "kernel") -> dict[str, float]:
    """Whole-kernel spans of one launch, in ns:

    - ``regions``: earliest start to latest end of `region` over all CTAs, each CTA's cycles
      put on the globaltimer axis by its SM's fitted clock line (what the regions say);
    - ``cta``: earliest CTA init stamp to the latest post-final stamp (globaltimer only: Proton's
      entry and its copy-out of the records included, which the instrumented kernel pays too);
    - ``regions_plus_edges``: ``regions`` widened by the median entry gap (init stamp to the
      region's start) and the copy-out of the last CTA (its post-final minus its region end).
    """
    t0, t1 = region_bounds_ns(kt, fit, region)
    out = {"regions": float(np.nanmax(t1) - np.nanmin(t0))}
    post = kt.raw.get("cta_post_ns")
    init = (kt.cta_init_ns - fit.base_ns).astype(np.float64)
    if post is not None and (post > 0).all():
        post = (post - fit.base_ns).astype(np.float64)
        out["cta"] = float(post.max() - init.min())
        last = int(np.nanargmax(t1))
        entry = float(np.nanmedian(t0 - init))
        out["regions_plus_edges"] = float(max(post[last], t1[last]) - (np.nanmin(t0) - max(entry, 0.0)))
    return out
