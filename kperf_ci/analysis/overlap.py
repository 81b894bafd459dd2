"""Overlap of memory waits with tensor-core work inside a CTA, and the pipeline bubbles left.

Needs regions that name what a warp is doing, e.g. ``tma_wait``/``load_wait`` (memory) and
``mma``/``wgmma_wait`` (tensor core), as a warp-specialized or hand-instrumented pipelined
kernel records them. Regions are classified by regular expressions (changeable).

Per CTA, over all its warps:
- compute = union of tensor-core regions; memory = union of memory-wait regions;
- window = the main-loop span (``loopN`` regions) or, without them, first to last compute;
- overlap = |memory ∩ compute| / |memory|: memory waits hidden behind tensor work of other
  warps (warp specialization, ping-pong);
- exposed memory = |memory \\ compute| / |window|: the loop waits for data with no tensor
  work running. **This is the flagged number** (default above 25%): it is what a deeper
  pipeline, earlier loads or warp specialization remove;
- bubbles = parts of the window with no tensor-core region open; bubble fraction = their sum
  / |window|. It splits into exposed memory and time in no tracked region (load issue code,
  loop overhead, the instrumentation's own records). It is reported, stored and compared like
  any metric, and flagged only when the kernel names no memory regions (then it is the only
  sign of starved tensor cores).

Why exposed memory and not the bubble carries the flag: on an H100, a 3-stage TMA pipeline
hid the loads (exposed 10.5%, 47% with 1 stage) but still showed a 27% bubble, 16 points of it
outside every region, which more stages cannot remove (benchmarks/results/analyses/README.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from . import intervals
from .findings import Finding, pct, us
from .timeline import Timeline, group_slices, is_loop_region

COMPUTE_RE = r"(?i)(w?gmma|mma|dot|tensor|tcgen)"
MEMORY_RE = r"(?i)(tma|load|copy|mem|prefetch|cp_async)"
WAIT_RE = r"(?i)wait"


def classify(names: list[str], compute_re: str = COMPUTE_RE, memory_re: str = MEMORY_RE) -> dict[str, str]:
    """name -> "compute" | "memory" | "memory_wait" | "other" (compute wins ties)."""
    c, m, w = re.compile(compute_re), re.compile(memory_re), re.compile(WAIT_RE)
    out = {}
    for n in names:
        if c.search(n):
            out[n] = "compute"
        elif m.search(n):
            out[n] = "memory_wait" if w.search(n) else "memory"
        else:
            out[n] = "other"
    return out


def overlap(
    tl: Timeline,
    *,
    compute_re: str = COMPUTE_RE,
    memory_re: str = MEMORY_RE,
    exposed_threshold: float = 0.25,
    bubble_threshold: float = 0.25,
    min_bubble_ns: float = 0.0,
    max_bubbles: int = 20,
    region_kinds: dict[str, str] | None = None,
) -> list[Finding]:
    """Findings ``memory_exposed_fraction`` (flagged above ``exposed_threshold``),
    ``pipeline_bubble_fraction`` (flagged above ``bubble_threshold`` only when no memory regions
    are tracked), ``mma_busy_fraction`` and ``memory_compute_overlap`` (medians over CTAs).

    Memory regions whose name says "wait" are the memory waits when any exist; otherwise all
    memory regions count. ``region_kinds`` overrides the classification by name (values
    "compute", "memory", "memory_wait", "other"), e.g. for the capture stage's ``wait<i>``
    regions, whose names do not say what they wait for. Empty when the timeline has no compute
    regions."""
    regions = tl.region.astype(str)
    kinds = {**classify(tl.regions(), compute_re, memory_re), **(region_kinds or {})}
    comp_names = [n for n, k in kinds.items() if k == "compute"]
    if not comp_names:
        return []
    wait_names = [n for n, k in kinds.items() if k == "memory_wait"]
    mem_names = wait_names or [n for n, k in kinds.items() if k == "memory"]
    is_comp = np.isin(regions, comp_names)
    is_mem = np.isin(regions, mem_names)
    is_loop = np.array([is_loop_region(r) for r in regions], dtype=bool)

    per_cta = _per_cta(tl, regions, is_comp, is_mem, is_loop, min_bubble_ns)
    if not per_cta.busy:
        return []
    return _findings(
        per_cta,
        comp_names,
        mem_names,
        exposed_threshold=exposed_threshold,
        bubble_threshold=bubble_threshold,
        max_bubbles=max_bubbles,
    )


@dataclass
class _PerCta:
    """Per CTA with compute regions and a main loop: the fractions of its window that were
    tensor-core busy, bubble and exposed memory, memory overlapped (CTAs with memory waits only),
    and every bubble of every CTA."""

    busy: list[float] = field(default_factory=list)
    bubble: list[float] = field(default_factory=list)
    exposed: list[float] = field(default_factory=list)
    ovl: list[float] = field(default_factory=list)
    bubbles: list[dict] = field(default_factory=list)


def _per_cta(
    tl: Timeline,
    regions: np.ndarray,
    is_comp: np.ndarray,
    is_mem: np.ndarray,
    is_loop: np.ndarray,
    min_bubble_ns: float,
) -> _PerCta:
    """Step 1: each CTA's main-loop window, its compute and memory unions within it, and the gaps
    between compute regions (the bubbles, with the named regions open during each)."""
    out = _PerCta()
    for c, idx in group_slices(tl.cta)[1]:
        comp, mem, lp = is_comp[idx], is_mem[idx], is_loop[idx]
        if not comp.any():
            continue
        st, en, rg = tl.start_ns[idx], tl.end_ns[idx], regions[idx]
        cs, ce = st[comp], en[comp]
        if lp.any():
            lo, hi = st[lp].min(), en[lp].max()
        else:
            lo, hi = cs.min(), ce.max()
        window = hi - lo
        if window <= 0:
            continue
        cu = intervals.union(np.clip(cs, lo, hi), np.clip(ce, lo, hi))
        comp_len = float(np.sum(cu[1] - cu[0]))
        ms, me = st[mem], en[mem]
        mu = intervals.union(np.clip(ms, lo, hi), np.clip(me, lo, hi))
        mem_len = float(np.sum(mu[1] - mu[0]))
        both = intervals.intersect(mu, cu)
        both_len = float(np.sum(both[1] - both[0]))
        out.busy.append(comp_len / window)
        out.exposed.append((mem_len - both_len) / window)
        if mem_len > 0:
            out.ovl.append(both_len / mem_len)
        gs, ge = intervals.gaps(cu[0], cu[1], lo, hi)
        out.bubble.append(float(np.sum(ge - gs)) / window)
        named = ~lp & (rg != "kernel")
        rn, rs, re_ = rg[named], st[named], en[named]
        for a, z in zip(gs, ge, strict=True):
            if z - a >= min_bubble_ns:
                open_regions = sorted(set(rn[(rs < z) & (re_ > a)].tolist()))
                out.bubbles.append(
                    {
                        "cta": int(c),
                        "start_ns": float(a),
                        "end_ns": float(z),
                        "ns": float(z - a),
                        "during": open_regions,
                    }
                )
    return out


def _findings(
    per_cta: _PerCta,
    comp_names: list[str],
    mem_names: list[str],
    *,
    exposed_threshold: float,
    bubble_threshold: float,
    max_bubbles: int,
) -> list[Finding]:
    """Step 2: medians over CTAs, the flags, and the four findings with their wording."""
    busy, bubble, exposed, ovl, bubbles = (
        per_cta.busy,
        per_cta.bubble,
        per_cta.exposed,
        per_cta.ovl,
        per_cta.bubbles,
    )
    bubbles.sort(key=lambda b: -b["ns"])
    n = len(busy)
    b_med = float(np.median(bubble))
    e_med = float(np.median(exposed))
    # the bubble splits into memory waits not hidden by tensor work and time in no tracked region
    u_med = max(float(np.median(np.asarray(bubble) - np.asarray(exposed))), 0.0)
    mem_label = ", ".join(mem_names)
    has_mem = bool(mem_names)
    exposed_flag = has_mem and e_med > exposed_threshold
    bubble_flag = not has_mem and b_med > bubble_threshold
    split = (
        f": {pct(e_med)} waiting on memory ({mem_label}), {pct(u_med)} in no tracked region "
        "(load issue code, loop overhead, instrumentation)"
        if has_mem
        else " (no memory regions are tracked: name the waits, e.g. pl.scope('tma_wait'), to split it)"
    )
    return [
        Finding(
            "memory_exposed_fraction",
            e_med if has_mem else float("nan"),
            "fraction",
            exposed_flag,
            (
                f"memory waits ({mem_label}) with no tensor-core work running take {pct(e_med)} of the "
                f"main loop (median over {n} CTAs)"
                if has_mem
                else "no memory regions are tracked"
            ),
            (
                "the tensor cores wait for data: deepen the software pipeline (num_stages 3-4), issue loads "
                "earlier (TMA/cp.async prefetch), or warp-specialize producer and consumer warps so loads "
                "overlap MMAs"
                if exposed_flag
                else ""
            ),
            better="lower",
            threshold=exposed_threshold,
            details={"memory_regions": mem_names},
        ),
        Finding(
            "pipeline_bubble_fraction",
            b_med,
            "fraction",
            bubble_flag,
            f"no tensor-core region was open for {pct(b_med)} of the main loop (median over {n} CTAs){split}",
            (
                "the tensor cores idle between MMAs: overlap the loads with the MMAs (more stages, "
                "asynchronous wgmma with num_outstanding > 0) or move other work out of the main loop"
                if bubble_flag
                else ""
            ),
            better="lower",
            threshold=bubble_threshold if not has_mem else None,
            details={
                "bubbles": bubbles[:max_bubbles],
                "compute_regions": comp_names,
                "memory_regions": mem_names,
                "exposed_fraction": e_med if has_mem else None,
                "untracked_fraction": u_med if has_mem else None,
            },
        ),
        Finding(
            "mma_busy_fraction",
            float(np.median(busy)),
            "fraction",
            False,
            f"tensor-core regions cover {pct(float(np.median(busy)))} of the main loop",
            better="higher",
        ),
        Finding(
            "memory_compute_overlap",
            float(np.median(ovl)) if ovl else float("nan"),
            "fraction",
            False,
            (
                f"{pct(float(np.median(ovl)))} of memory-wait time overlaps tensor-core work in other warps"
                if ovl
                else "no memory-wait regions to overlap"
            ),
            better="higher",
        ),
    ]


def largest_bubbles(findings: list[Finding]) -> list[str]:
    """One line per listed bubble of a ``pipeline_bubble_fraction`` finding."""
    for f in findings:
        if f.name == "pipeline_bubble_fraction":
            return [
                f"CTA {b['cta']}: {us(b['ns'])} at {us(b['start_ns'])} during {', '.join(b['during']) or '-'}"
                for b in f.details.get("bubbles", [])
            ]
    return []
