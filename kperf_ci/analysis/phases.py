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
    names, inverse = np.unique(regions, return_inverse=True)
    loop = np.array([is_loop_region(r) for r in names], dtype=bool)[inverse.reshape(-1)]
    unit_key = tl.cta * 100003 + (tl.warp + 1)
    if not len(unit_key):
        return _shares([], [], [], [])
    # every unit's minima and maxima at once (reduceat over the units' rows in group_slices'
    # order): a loop over tens of thousands of warps was most of `kperf analyze` on a traced run
    _, groups = group_slices(unit_key)
    order = np.concatenate([idx for _, idx in groups])
    first = np.cumsum([0] + [len(idx) for _, idx in groups[:-1]])
    st, en = tl.start_ns[order], tl.end_ns[order]
    k, lp = (regions == KERNEL_REGION)[order], loop[order]

    def lowest(v: np.ndarray, m: np.ndarray | None = None) -> np.ndarray:
        return np.minimum.reduceat(v if m is None else np.where(m, v, np.inf), first)

    def highest(v: np.ndarray, m: np.ndarray | None = None) -> np.ndarray:
        return np.maximum.reduceat(v if m is None else np.where(m, v, -np.inf), first)

    has_k, has_lp = np.logical_or.reduceat(k, first), np.logical_or.reduceat(lp, first)
    has_phase = np.logical_or.reduceat(np.isin(regions, ("prologue", "epilogue"))[order], first)
    span_s = np.where(has_k, lowest(st, k), lowest(st))
    span_e = np.where(has_k, highest(en, k), highest(en))
    lp_s, lp_e = lowest(st, lp), highest(en, lp)
    pro, epi, tot, ctas = [], [], [], []
    for u, (_, idx) in enumerate(groups):
        total = span_e[u] - span_s[u]  # scalar arithmetic, per unit, as before
        if total <= 0:
            continue
        if has_lp[u]:
            p = lp_s[u] - span_s[u]
            e = span_e[u] - lp_e[u]
        elif not has_phase[u]:
            continue
        else:
            r, s0, e0 = regions[idx], tl.start_ns[idx], tl.end_ns[idx]
            pm, em = r == "prologue", r == "epilogue"
            p = float(np.sum(e0[pm] - s0[pm]))
            e = float(np.sum(e0[em] - s0[em]))
        pro.append(max(p, 0.0))
        epi.append(max(e, 0.0))
        tot.append(total)
        ctas.append(int(tl.cta[idx[0]]))
    return _shares(pro, epi, tot, ctas)


def _shares(pro: list, epi: list, tot: list, ctas: list) -> dict[str, np.ndarray]:
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
