"""Wave quantization: a grid runs in waves of (SMs x CTAs resident per SM); a last wave that is
only partly full leaves SMs idle while it runs.

Works from static numbers alone (grid size, warps, registers, shared memory, arch) and, when a
timeline is given, checks the prediction against what the SMs did.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from .findings import Finding, pct
from .occupancy import sm_busy
from .timeline import Timeline
from .underfill import single_partial_wave


@dataclass(frozen=True)
class ArchLimits:
    """Per-SM resource limits of one architecture (CUDA occupancy calculator's numbers)."""

    arch: str
    sm_count: int  # of the usual flagship part; pass the real count when known
    regs_per_sm: int = 65536
    max_regs_per_thread: int = 255
    reg_alloc_unit: int = 256  # registers per warp are allocated in units of this
    sub_partitions: int = 4  # register file is split per SM sub-partition (warp scheduler)
    smem_per_sm: int = 233472
    smem_per_block: int = 232448
    smem_alloc_unit: int = 128
    smem_reserved_per_block: int = 1024  # sm_80+ reserve 1 KB of shared memory per CTA
    max_warps_per_sm: int = 64
    max_blocks_per_sm: int = 32
    warp_size: int = 32


# sm_count is the usual part's; H100 PCIe has 114, H100/H200 SXM 132, A100 108, B200 148.
ARCHS: dict[str, ArchLimits] = {
    "sm_75": ArchLimits(
        "sm_75",
        40,
        smem_per_sm=65536,
        smem_per_block=65536,
        smem_reserved_per_block=0,
        max_warps_per_sm=32,
        max_blocks_per_sm=16,
    ),
    "sm_80": ArchLimits("sm_80", 108, smem_per_sm=167936, smem_per_block=166912),
    "sm_86": ArchLimits(
        "sm_86", 84, smem_per_sm=102400, smem_per_block=101376, max_warps_per_sm=48, max_blocks_per_sm=16
    ),
    "sm_89": ArchLimits(
        "sm_89", 58, smem_per_sm=102400, smem_per_block=101376, max_warps_per_sm=48, max_blocks_per_sm=24
    ),
    "sm_90": ArchLimits("sm_90", 132),
    "sm_100": ArchLimits("sm_100", 148),
}

# GPU names (as torch / nvidia-smi print them) -> (arch, SM count)
GPU_NAMES: list[tuple[str, str, int]] = [
    ("H100 PCIe", "sm_90", 114),
    ("H100", "sm_90", 132),
    ("H200", "sm_90", 132),
    ("GH200", "sm_90", 132),
    ("H800", "sm_90", 132),
    ("A100", "sm_80", 108),
    ("A800", "sm_80", 108),
    ("A30", "sm_80", 56),
    ("A10G", "sm_86", 80),
    ("A10", "sm_86", 72),
    ("RTX 3090", "sm_86", 82),
    ("L40S", "sm_89", 142),
    ("L4", "sm_89", 58),
    ("RTX 4090", "sm_89", 128),
    ("B200", "sm_100", 148),
    ("T4", "sm_75", 40),
]


def arch_limits(arch: str | int, sm_count: int | None = None) -> ArchLimits:
    """Limits for "sm_90", "90", 90, or a GPU name like "NVIDIA H100 80GB HBM3"."""
    key = str(arch).strip()
    lim: ArchLimits | None = None
    if key.isdigit():
        key = f"sm_{key}"
    if key in ARCHS:
        lim = ARCHS[key]
    else:
        for needle, a, n in GPU_NAMES:
            if needle.lower() in key.lower():
                lim = replace(ARCHS[a], sm_count=n)
                break
    if lim is None:
        raise ValueError(f"unknown arch {arch!r}: expected one of {sorted(ARCHS)} or a known GPU name")
    return replace(lim, sm_count=sm_count) if sm_count else lim


@dataclass(frozen=True)
class Occupancy:
    ctas_per_sm: int
    limited_by: str  # "warps", "registers", "shared_memory", "blocks" (joined by "+" on ties), or "given"
    limits: dict[str, int]


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def occupancy(
    *,
    num_warps: int,
    registers: int | None = None,
    shared_bytes: int | None = None,
    arch: str | ArchLimits = "sm_90",
) -> Occupancy:
    """CTAs that fit on one SM at once, and the resource that limits it (None = not limiting)."""
    lim = arch if isinstance(arch, ArchLimits) else arch_limits(arch)
    if num_warps <= 0:
        raise ValueError("num_warps must be positive")
    limits: dict[str, int] = {
        "blocks": lim.max_blocks_per_sm,
        "warps": lim.max_warps_per_sm // num_warps,
    }
    if registers:
        if registers > lim.max_regs_per_thread:
            raise ValueError(
                f"{registers} registers per thread exceed the {lim.arch} limit {lim.max_regs_per_thread}"
            )
        per_warp = _round_up(registers * lim.warp_size, lim.reg_alloc_unit)
        warps_per_part = (lim.regs_per_sm // lim.sub_partitions) // per_warp
        limits["registers"] = (warps_per_part * lim.sub_partitions) // num_warps
    if shared_bytes:
        if shared_bytes > lim.smem_per_block:
            raise ValueError(
                f"{shared_bytes} bytes of shared memory exceed the {lim.arch} per-CTA limit "
                f"{lim.smem_per_block}"
            )
        per_block = _round_up(shared_bytes + lim.smem_reserved_per_block, lim.smem_alloc_unit)
        limits["shared_memory"] = lim.smem_per_sm // per_block
    k = min(limits.values())
    order = ["shared_memory", "registers", "warps", "blocks"]  # all resources at the minimum, joined
    limited_by = "+".join(n for n in order if limits.get(n) == k)
    return Occupancy(max(k, 0), limited_by, limits)


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
