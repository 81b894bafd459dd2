"""Wave quantization: a grid runs in waves of (SMs x CTAs resident per SM); a last wave that is
only partly full leaves SMs idle while it runs.

Works from static numbers alone (grid size, warps, registers, shared memory, arch) and, when a
timeline is given, checks the prediction against what the SMs did.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from kperf_ci.hardware import ArchLimits, arch_limits

from .findings import Finding, pct
from .occupancy import Occupancy, occupancy, sm_busy
from .timeline import Timeline
from .underfill import single_partial_wave


def wave_quantization(
    grid: int,
    *,
    num_warps: int | None = None,
    registers: int | None = None,
    shared_bytes: int | None = None,
    arch: str | ArchLimits = "sm_90",
    sm_count: int | None = None,
    ctas_per_sm: int | None = None,
    timeline: Timeline | None = None,
    threshold: float = 0.10,
) -> list[Finding]:
    """Findings ``waves``, ``ctas_per_sm``, ``wave_tail`` (fill of the last wave, 1 = full) and
    ``wave_idle`` (SM-time the partial last wave leaves idle, assuming equal CTAs); with a
    timeline also ``wave_tail_idle_measured`` and ``ctas_per_sm_observed``.

    Flags when the idle share exceeds ``threshold`` (default 10%). Give either ``ctas_per_sm``
    or ``num_warps`` (+ ``registers``, ``shared_bytes``) to size a wave."""
    lim = arch if isinstance(arch, ArchLimits) else arch_limits(arch, sm_count)
    if sm_count:
        lim = replace(lim, sm_count=sm_count)
    if grid <= 0:
        raise ValueError("grid must be a positive number of CTAs")
    if ctas_per_sm is not None:
        occ = Occupancy(int(ctas_per_sm), "given", {"given": int(ctas_per_sm)})
    elif num_warps is not None:
        occ = occupancy(num_warps=num_warps, registers=registers, shared_bytes=shared_bytes, arch=lim)
    else:
        raise ValueError("wave_quantization needs ctas_per_sm or num_warps")
    if occ.ctas_per_sm < 1:
        raise ValueError(f"a CTA does not fit on one SM ({occ.limits})")
    cap = lim.sm_count * occ.ctas_per_sm
    waves = grid / cap
    n_waves = math.ceil(waves)
    tail_ctas = grid - (n_waves - 1) * cap
    tail_eff = tail_ctas / cap
    idle = 1.0 - grid / (n_waves * cap)
    flagged = idle > threshold
    lower = (grid // cap) * cap
    upper = n_waves * cap
    options = [str(g) for g in sorted({lower, upper}) if g > 0 and g != grid]
    suggestion = ""
    if flagged:
        suggestion = (
            f"resize the grid to whole waves ({' or '.join(options)} CTAs: change the tile/block size or "
            f"split-K), raise CTAs per SM (fewer registers or less shared memory than limits it now: "
            f"{occ.limited_by}), or make it persistent: {cap} programs that loop over the {grid} tiles"
        )
    res = f"{lim.sm_count} SMs x {occ.ctas_per_sm} CTA/SM ({occ.limited_by})"
    out = [
        Finding(
            "waves",
            waves,
            "waves",
            False,
            f"{grid} CTAs on {res} = {waves:.2f} waves",
            better="none",
            details={"capacity": cap, "grid": grid, "arch": lim.arch, "sm_count": lim.sm_count},
        ),
        Finding(
            "ctas_per_sm",
            float(occ.ctas_per_sm),
            "count",
            False,
            f"{occ.ctas_per_sm} CTAs fit on an SM, limited by {occ.limited_by} {occ.limits}",
            better="none",
            details={"limits": occ.limits},
        ),
        Finding(
            "wave_tail",
            tail_eff,
            "fraction",
            flagged,
            f"the last of {n_waves} waves runs {tail_ctas} of {cap} CTA slots ({pct(tail_eff)} full)",
            suggestion,
            better="higher",
            threshold=threshold,
        ),
        Finding(
            "wave_idle",
            idle,
            "fraction",
            flagged,
            f"quantization idles {pct(idle)} of SM-time over {n_waves} waves (equal CTAs assumed)",
            suggestion,
            better="lower",
            threshold=threshold,
        ),
    ]
    if timeline is not None and len(timeline):
        out.extend(_measured(timeline, lim.sm_count, occ.ctas_per_sm, idle, threshold, suggestion))
    if grid < cap:  # less than one wave: too little work, not a tail (see analysis.underfill)
        out = single_partial_wave(out, grid=grid, capacity=cap, resources=res, threshold=threshold)
    return out


def _measured(
    tl: Timeline, sm_count: int, k: int, predicted_idle: float, threshold: float, suggestion: str
) -> list[Finding]:
    b = sm_busy(tl, max(sm_count, tl.num_sms or 0))
    span = b.span_ns
    if span <= 0:
        return []
    used = b.used
    tail = float(np.sum(b.t1 - b.last_end[used])) + float((~used).sum()) * span
    measured = tail / (b.num_sms * span)
    observed_k = int(b.max_resident.max()) if b.num_sms else 0
    flagged = measured > threshold
    note = ""
    if abs(measured - predicted_idle) > 0.10:
        note = f"; predicted {pct(predicted_idle)}"
    if observed_k != k:
        note += f"; SMs held up to {observed_k} CTAs at once (predicted {k})"
    if flagged and not suggestion:
        suggestion = (
            "the tail is longer than wave quantization explains: CTAs are uneven or start late; "
            "see sm_finish_skew and cta_duration_max_over_median"
        )
    return [
        Finding(
            "wave_tail_idle_measured",
            measured,
            "fraction",
            flagged,
            f"after their last CTA (or never used) SMs idled {pct(measured)} of SM-time "
            f"({tail / 1000:.1f} SM-us){note}",
            suggestion if flagged else "",
            better="lower",
            threshold=threshold,
            details={"idle_sm_ns": tail, "span_ns": span, "num_sms": b.num_sms},
        ),
        Finding(
            "ctas_per_sm_observed",
            float(observed_k),
            "count",
            False,
            f"most CTAs resident at once on one SM in the timeline: {observed_k}",
            better="none",
        ),
    ]
