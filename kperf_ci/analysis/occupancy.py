"""SM occupancy: how many CTAs of a kernel fit on an SM at once (:func:`occupancy`, whose home is
:mod:`kperf_ci.occupancy`, below the judge that uses it too), and over a traced launch when each SM
held at least one CTA and what share of the machine's SM-time that was."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kperf_ci.occupancy import Occupancy as Occupancy
from kperf_ci.occupancy import occupancy as occupancy

from ..traces.records import check_sm_count
from . import intervals
from .findings import Finding, pct, us
from .timeline import Timeline

# --------------------------------------------------------------------------- busy SMs over a launch


@dataclass
class SmBusy:
    """Per SM (index = SM id, 0..num_sms-1): merged busy intervals and their totals (ns)."""

    num_sms: int
    t0: float
    t1: float
    busy: list[tuple[np.ndarray, np.ndarray]]  # per SM: (starts, ends), disjoint, sorted
    busy_ns: np.ndarray
    first_start: np.ndarray  # NaN for SMs that ran nothing
    last_end: np.ndarray
    ctas: np.ndarray  # CTAs that ran on each SM
    max_resident: np.ndarray  # most CTAs resident at once on each SM

    @property
    def span_ns(self) -> float:
        return self.t1 - self.t0

    @property
    def used(self) -> np.ndarray:
        return self.ctas > 0


def sm_busy(tl: Timeline, num_sms: int | None = None) -> SmBusy:
    spans = tl.cta_spans()
    n = max(num_sms or 0, tl.sm_count())
    check_sm_count(n or None)  # num_sms may come from a run's fingerprint or be set after load
    t0 = float(spans.start_ns.min()) if len(spans) else 0.0
    t1 = float(spans.end_ns.max()) if len(spans) else 0.0
    busy, busy_ns = [], np.zeros(n)
    first = np.full(n, np.nan)
    last = np.full(n, np.nan)
    ctas = np.zeros(n, dtype=np.int64)
    resident = np.zeros(n, dtype=np.int64)
    for sm in range(n):
        m = spans.sm == sm
        s, e = intervals.union(spans.start_ns[m], spans.end_ns[m])
        busy.append((s, e))
        busy_ns[sm] = float(np.sum(e - s))
        ctas[sm] = int(m.sum())
        if ctas[sm]:
            first[sm] = float(spans.start_ns[m].min())
            last[sm] = float(spans.end_ns[m].max())
            resident[sm] = intervals.max_concurrency(spans.start_ns[m], spans.end_ns[m])
    return SmBusy(n, t0, t1, busy, busy_ns, first, last, ctas, resident)


def busy_sm_series(
    tl: Timeline, num_sms: int | None = None, bins: int = 200
) -> tuple[np.ndarray, np.ndarray]:
    """Average number of busy SMs in each of ``bins`` equal time bins: (bin starts ns, SMs)."""
    b = sm_busy(tl, num_sms)
    if b.span_ns <= 0:
        return np.zeros(0), np.zeros(0)
    edges = np.linspace(b.t0, b.t1, bins + 1)
    width = edges[1] - edges[0]
    acc = np.zeros(bins)
    for s, e in b.busy:
        for a, z in zip(s, e, strict=True):
            # spread [a, z) over the bins it touches
            lo = np.clip(edges[:-1], a, z)
            hi = np.clip(edges[1:], a, z)
            acc += np.maximum(hi - lo, 0.0)
    return edges[:-1], acc / width


def sm_utilization(tl: Timeline, *, num_sms: int | None = None, threshold: float = 0.80) -> Finding:
    """Busy SM-time / (SMs x launch span). An SM is busy while it holds at least one CTA.

    Flags when below ``threshold``. Idle SM-time is split into SMs that never ran a CTA, time
    before an SM's first CTA (launch ramp), gaps between its CTAs, and the tail after its last
    CTA while other SMs still work."""
    b = sm_busy(tl, num_sms)
    n, span = b.num_sms, b.span_ns
    if n == 0 or span <= 0:
        return Finding(
            "sm_utilization",
            float("nan"),
            "fraction",
            False,
            "no CTA spans in the timeline",
            better="higher",
            threshold=threshold,
        )
    total = n * span
    util = float(b.busy_ns.sum() / total)
    used = b.used
    never = float((~used).sum() * span)
    head = float(np.nansum(b.first_start[used] - b.t0))
    tail = float(np.nansum(b.t1 - b.last_end[used]))
    gaps = float(total - b.busy_ns.sum() - never - head - tail)
    idle = {
        "never_used": never / total,
        "ramp": head / total,
        "tail": tail / total,
        "between_ctas": max(gaps, 0) / total,
    }
    flagged = util < threshold
    main = max(idle, key=idle.get)
    expl = (
        f"SMs were busy {pct(util)} of the {us(span)} launch on {n} SMs "
        f"({int(used.sum())} ran CTAs); largest idle share: {main.replace('_', ' ')} {pct(idle[main])}"
    )
    suggestion = ""
    if flagged:
        suggestion = {
            "never_used": "the grid leaves SMs without work: use smaller tiles, split-K/stream-K, or "
            "more CTAs so every SM gets one",
            "tail": "SMs sit idle at the end (wave tail or uneven CTAs): see wave_tail / sm_finish_skew; "
            "resize the grid to whole waves or use a persistent kernel with dynamic tile assignment",
            "ramp": "CTAs start late (long launch ramp): the kernel is too short for its grid; fuse it with "
            "neighbours or give each CTA more work",
            "between_ctas": "SMs wait between CTAs: CTAs are short compared with block launch cost; give "
            "each CTA more work (larger tiles, a loop over items) or use a persistent kernel",
        }[main]
    return Finding(
        "sm_utilization",
        util,
        "fraction",
        flagged,
        expl,
        suggestion,
        better="higher",
        threshold=threshold,
        details={
            "num_sms": n,
            "sms_used": int(used.sum()),
            "span_ns": span,
            "idle": idle,
            "max_resident_ctas_per_sm": int(b.max_resident.max()) if n else 0,
        },
    )
