"""Prologue and epilogue: time before the first main-loop iteration and after the last, as a
share of CTA time."""

from __future__ import annotations

import numpy as np

from .findings import Finding, pct, us
from .timeline import KERNEL_REGION, Timeline, group_slices, is_loop_region


def phase_shares(tl: Timeline) -> dict[str, np.ndarray]:
    """Per unit (a warp, or a CTA at CTA granularity): prologue and epilogue time and the
    unit's total time, in ns. Uses the loop regions (``loopN``) when the unit has them:
    prologue = first loop start - unit start, epilogue = unit end - last loop end; otherwise the
    ``prologue``/``epilogue`` regions. Units with neither are left out."""
    regions = tl.region.astype(str)
    loop = np.array([is_loop_region(r) for r in regions], dtype=bool)
    unit_key = tl.cta * 100003 + (tl.warp + 1)
    pro, epi, tot, ctas = [], [], [], []
    for _, idx in group_slices(unit_key)[1]:
        r, st, en, lp = regions[idx], tl.start_ns[idx], tl.end_ns[idx], loop[idx]
        k = r == KERNEL_REGION
        span_s = st[k].min() if k.any() else st.min()
        span_e = en[k].max() if k.any() else en.max()
        total = span_e - span_s
        if total <= 0:
            continue
        if lp.any():
            p = st[lp].min() - span_s
            e = span_e - en[lp].max()
        else:
            pm, em = r == "prologue", r == "epilogue"
            if not (pm.any() or em.any()):
                continue
            p = float(np.sum(en[pm] - st[pm]))
            e = float(np.sum(en[em] - st[em]))
        pro.append(max(p, 0.0))
        epi.append(max(e, 0.0))
        tot.append(total)
        ctas.append(int(tl.cta[idx[0]]))
    return {
        "prologue_ns": np.array(pro),
        "epilogue_ns": np.array(epi),
        "total_ns": np.array(tot),
        "cta": np.array(ctas, dtype=np.int64),
    }


def prologue_epilogue(
    tl: Timeline, *, prologue_threshold: float = 0.20, epilogue_threshold: float = 0.20
) -> list[Finding]:
    """``prologue_fraction`` and ``epilogue_fraction``: medians over warps (or CTAs) of the
    phase's share of the unit's time; flagged above their thresholds (default 20%).
    Empty when the timeline has neither loop nor prologue/epilogue regions."""
    sh = phase_shares(tl)
    if len(sh["total_ns"]) == 0:
        return []
    out = []
    for phase, thr, advice in (
        (
            "prologue",
            prologue_threshold,
            "shrink or amortize the setup before the main loop: precompute index/pointer math or "
            "descriptors on the host, prefetch the first tiles while setting up, or make the kernel "
            "persistent so one CTA's setup serves many tiles",
        ),
        (
            "epilogue",
            epilogue_threshold,
            "shrink the work after the main loop: store with wider/TMA stores, fuse or defer the extra "
            "element-wise work, or overlap one tile's epilogue with the next tile's main loop (persistent, "
            "warp-specialized kernel)",
        ),
    ):
        frac = sh[f"{phase}_ns"] / sh["total_ns"]
        med = float(np.median(frac))
        p90 = float(np.percentile(frac, 90))
        med_ns = float(np.median(sh[f"{phase}_ns"]))
        flagged = med > thr
        out.append(
            Finding(
                f"{phase}_fraction",
                med,
                "fraction",
                flagged,
                f"the {phase} takes {pct(med)} of CTA time (median {us(med_ns)}; p90 {pct(p90)}) "
                f"over {len(frac)} {'warps' if (tl.warp >= 0).any() else 'CTAs'}",
                advice if flagged else "",
                better="lower",
                threshold=thr,
                details={"p90": p90, "median_ns": med_ns},
            )
        )
    return out
