"""Load imbalance: do CTAs take different times, and do SMs finish at different times?"""

from __future__ import annotations

import numpy as np

from .findings import Finding, pct, us
from .occupancy import sm_busy
from .timeline import Timeline


def load_imbalance(
    tl: Timeline,
    *,
    num_sms: int | None = None,
    threshold: float = 0.10,
    cta_ratio_note: float = 1.5,
) -> list[Finding]:
    """Four numbers; one flag.

    - ``sm_finish_skew``: (last SM finish - median SM finish) / (median SM finish - launch start).
      Flagged above ``threshold`` (default 10%): the slowest SM keeps the launch alive while
      the others are done.
    - ``cta_duration_max_over_median``, ``cta_duration_cv``: spread of CTA durations.
    - ``sm_work_max_over_mean``: busiest SM's total CTA time over the mean of SMs that ran CTAs.
    The suggestion says whether the cause is uneven CTAs or the distribution of even ones.
    """
    spans = tl.cta_spans()
    if len(spans) == 0:
        return []
    dur = spans.duration_ns
    med = float(np.median(dur))
    cta_ratio = float(dur.max() / med) if med > 0 else float("nan")
    cv = float(dur.std() / dur.mean()) if dur.mean() > 0 else float("nan")

    b = sm_busy(tl, num_sms)
    used = b.used
    work = np.zeros(b.num_sms)
    np.add.at(work, spans.sm, dur)
    work_used = work[used]
    work_ratio = float(work_used.max() / work_used.mean()) if work_used.mean() > 0 else float("nan")

    finish = b.last_end[used] - b.t0
    f_med = float(np.median(finish))
    f_max = float(finish.max())
    skew = (f_max - f_med) / f_med if f_med > 0 else float("nan")
    slowest = int(np.flatnonzero(used)[int(np.argmax(finish))])
    flagged = bool(skew > threshold)

    uneven_ctas = cta_ratio >= cta_ratio_note
    suggestion = ""
    if flagged:
        if uneven_ctas:
            suggestion = (
                "CTAs do unequal work: split the heaviest work items, order work heaviest-first, or use a "
                "persistent kernel that pulls items from a queue (stream-K style) so SMs finish together"
            )
        else:
            suggestion = (
                "CTAs are even but SMs get different numbers of them (wave tail): resize the grid to a "
                "multiple of SMs x CTAs-per-SM or use a persistent kernel; see wave_tail"
            )
    top = np.argsort(dur)[::-1][:5]
    return [
        Finding(
            "sm_finish_skew",
            float(skew),
            "fraction",
            flagged,
            f"the slowest SM ({slowest}) finished {us(f_max - f_med)} ({pct(skew)}) after the median SM "
            f"(median finish {us(f_med)} after launch start)",
            suggestion,
            better="lower",
            threshold=threshold,
            details={"slowest_sm": slowest, "finish_median_ns": f_med, "finish_max_ns": f_max},
        ),
        Finding(
            "cta_duration_max_over_median",
            cta_ratio,
            "ratio",
            False,
            f"longest CTA {us(float(dur.max()))} vs median {us(med)} over {len(dur)} CTAs",
            better="lower",
            details={
                "longest_ctas": [
                    {"cta": int(spans.cta[i]), "sm": int(spans.sm[i]), "ns": float(dur[i])} for i in top
                ]
            },
        ),
        Finding(
            "cta_duration_cv",
            cv,
            "fraction",
            False,
            f"CTA durations vary by {pct(cv)} (coefficient of variation)",
            better="lower",
        ),
        Finding(
            "sm_work_max_over_mean",
            work_ratio,
            "ratio",
            False,
            f"busiest SM ran {us(float(work_used.max()))} of CTA time vs a mean of "
            f"{us(float(work_used.mean()))} over {int(used.sum())} SMs",
            better="lower",
        ),
    ]
