"""The SM clock of one instrumented launch, and the spans that need it. One home for both
estimates kperf makes:

- :func:`clock_ghz_from_stamps` (and :func:`measured_clock_ghz` over a :class:`KernelTrace`):
  cycles a CTA spent between its first and last record over the globaltimer ns between its init
  and pre-final stamps, as a ratio of sums over CTAs. Used for Chrome traces that carry the
  per-CTA stamps and as the fallback of the capture stage.
- :func:`fit_clock`: from a raw device buffer (absolute SM cycles), per SM the first-record
  cycle of each CTA regressed on its init stamp. Preferred when available: see its docstring.

Proton writes cycles as if the clock ran at 1 GHz; turning them into ns needs one of these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # kernel_trace converts with these estimates: a runtime import would be a cycle
    from .kernel_trace import KernelTrace

#: SM clocks (GHz) a measurement may give. A ratio outside this range comes from broken stamps
#: (e.g. a CTA whose pre-final stamp was taken before its records), not from a real GPU.
PLAUSIBLE_GHZ = (0.3, 3.5)


def clock_ghz_from_stamps(
    cta: np.ndarray, start_cyc: np.ndarray, end_cyc: np.ndarray, init_ns: np.ndarray, final_ns: np.ndarray
) -> float | None:
    """SM cycles per ns from per-record arrays: each record's CTA, its start and end in cycles
    (any origin within the CTA) and its CTA's globaltimer init and pre-final stamps.

    A ratio of sums over CTAs (cycles between a CTA's first and last record / ns between its
    stamps), so the globaltimer's coarse ticks (32 ns on an H100) average out over many CTAs.
    The small gaps before the first and after the last record bias it low by gap / CTA length.
    CTAs with no elapsed ns or no elapsed cycles say nothing about the clock and are left out.
    None when nothing is left or the result is outside :data:`PLAUSIBLE_GHZ`."""
    cta = np.asarray(cta).reshape(-1)
    if cta.size == 0:
        return None
    _, inv = np.unique(cta, return_inverse=True)
    inv = inv.reshape(-1)
    n = int(inv.max()) + 1
    lo = np.full(n, np.inf)
    hi = np.full(n, -np.inf)
    np.minimum.at(lo, inv, np.asarray(start_cyc, dtype=np.float64))
    np.maximum.at(hi, inv, np.asarray(end_cyc, dtype=np.float64))
    ns = np.zeros(n)
    ns[inv] = np.asarray(final_ns, dtype=np.float64) - np.asarray(init_ns, dtype=np.float64)
    cyc = hi - lo
    ok = (ns > 0) & (cyc > 0)
    ns_sum = float(ns[ok].sum())
    if ns_sum <= 0:
        return None
    ghz = float(cyc[ok].sum()) / ns_sum
    return ghz if PLAUSIBLE_GHZ[0] <= ghz <= PLAUSIBLE_GHZ[1] else None


def measured_clock_ghz(kt: KernelTrace, region: str | None = "kernel") -> float | None:
    """:func:`clock_ghz_from_stamps` over the records of `region` (all records when the trace
    has no such region, or `region` is None). None without per-CTA init and pre-final stamps."""
    if kt.n_events == 0 or (kt.cta_init_ns < 0).any() or (kt.cta_final_ns < 0).any():
        return None
    sel = region_mask(kt, region)
    idx = np.searchsorted(kt.cta_ids, kt.cta[sel])
    start = kt.start[sel]
    return clock_ghz_from_stamps(
        kt.cta[sel], start, start + kt.dur[sel], kt.cta_init_ns[idx], kt.cta_final_ns[idx]
    )


def region_mask(kt: KernelTrace, region: str | None) -> np.ndarray:
    """Records of `region` when the trace has it, else all records."""
    rid = kt.region_id(region) if region else None
    if rid is None:
        return np.ones(kt.n_events, dtype=bool)
    return kt.region == rid


def _last_cycle_per_cta(kt: KernelTrace, region: str | None) -> np.ndarray:
    """Per CTA (order of ``cta_ids``), the cycle at which its last record of `region` ends."""
    sel = region_mask(kt, region)
    idx = np.searchsorted(kt.cta_ids, kt.cta[sel])
    end = np.zeros(kt.cta_ids.size, dtype=np.int64)
    np.maximum.at(end, idx, kt.start[sel] + kt.dur[sel])
    return end


def cta_end_ns(kt: KernelTrace, clock_ghz: float, region: str | None = "kernel") -> np.ndarray:
    """Per CTA: globaltimer at start + cycles to the end of its last record (or of `region`)."""
    return kt.cta_init_ns + _last_cycle_per_cta(kt, region) / clock_ghz


def kernel_span_ns(kt: KernelTrace, clock_ghz: float, region: str | None = "kernel") -> float | None:
    """First CTA start to last CTA end, in ns (cycles within a CTA converted with clock_ghz)."""
    if kt.n_events == 0 or (kt.cta_init_ns < 0).any() or not clock_ghz:
        return None
    ends = cta_end_ns(kt, clock_ghz, region)
    return float(ends.max() - kt.cta_init_ns.min())


# --------------------------------------------------------------------------------------------
# the fit on a raw buffer's absolute cycles


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
    :func:`kperf_ci.traces.proton_raw.parse_raw_buffer`). Needs an SM that ran at least two
    CTAs at different times.

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
    sel = region_mask(kt, region)
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
