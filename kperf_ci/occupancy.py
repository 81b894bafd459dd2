"""CTAs of a kernel that fit on one SM at once, and its theoretical occupancy: CUDA's occupancy
rules (``cuda_occupancy.h``) on the per-SM limits of :mod:`kperf_ci.hardware`.

Below both readers: the wave analysis (:mod:`kperf_ci.analysis.waves`) sizes a wave from it, and
`kperf ab`'s static verdict (:mod:`kperf_ci.judge.static_verdict`) judges registers and shared
memory by the occupancy they cost; the judge may not import the analyses, so the rule lives here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kperf_ci.hardware import ArchLimits, arch_limits

__all__ = ["Occupancy", "limit_text", "occupancy"]


@dataclass(frozen=True)
class Occupancy:
    """CTAs of one kernel that fit on an SM at once, the resource that limits them, and each
    resource's own count."""

    ctas_per_sm: int
    limited_by: str  # "warps", "registers", "shared_memory", "blocks" (joined by "+" on ties), or "given"
    limits: dict[str, int]
    #: resident warps over the arch's maximum (theoretical occupancy, 0..1); None where the warps
    #: per CTA or the arch's maximum are not known (an Occupancy "given" by the caller)
    fraction: float | None = None


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def occupancy(
    *,
    num_warps: int,
    registers: int | None = None,
    shared_bytes: int | None = None,
    arch: str | ArchLimits = "sm_90",
) -> Occupancy:
    """CTAs that fit on one SM at once, and the resource that limits it.

    Registers are allocated per warp in ``reg_alloc_unit`` units within each sub-partition;
    shared memory per CTA is its request plus the reserved 1 KB, rounded up to
    ``smem_alloc_unit``: 114 KB on sm_90 takes 115 KB of the SM's 228 KB, so one CTA fits, not two.
    These are the rules of CUDA's occupancy calculator (``cuda_occupancy.h``); ``fraction`` is its
    theoretical occupancy, resident warps over the SM's maximum: on sm_90, 4 warps of 64 registers
    fit 8 CTAs (32 of 64 warps, 50%), of 128 registers 4 CTAs (25%).
    """
    # per-SM fields are set: arch_limits refuses a row without them
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
    k = max(min(limits.values()), 0)
    order = ["shared_memory", "registers", "warps", "blocks"]  # all resources at the minimum, joined
    limited_by = "+".join(n for n in order if limits.get(n) == k)
    return Occupancy(k, limited_by, limits, k * num_warps / lim.max_warps_per_sm)


#: what limits the CTAs per SM, in words ("at most 32 blocks per SM"): the reports name it
_LIMIT_WORDS = {
    "blocks": "at most {k} blocks per SM",
    "warps": "{k} blocks fill the SM's warps",
    "registers": "registers fit {k} blocks per SM",
    "shared_memory": "shared memory fits {k} blocks per SM",
}


def limit_text(o: Occupancy) -> str:
    """What limits ``o``'s CTAs per SM, in words: "at most 32 blocks per SM" (the arch's blocks
    limit), "registers fit 4 blocks per SM"; ties joined by " and "."""
    words = [_LIMIT_WORDS[n].format(k=o.ctas_per_sm) for n in o.limited_by.split("+") if n in _LIMIT_WORDS]
    return " and ".join(words) or f"{o.ctas_per_sm} blocks per SM"


def _blocks(grid: Any) -> int | None:
    """CTAs of a recorded grid ([37, 1, 1] -> 37); None when it is not a list of positive ints."""
    if not isinstance(grid, (list, tuple)) or not grid:
        return None
    n = 1
    for g in grid:
        if not isinstance(g, int) or isinstance(g, bool) or g <= 0:
            return None
        n *= g
    return n


def grid_within_sms(b_row: dict[str, Any], h_row: dict[str, Any], arch: str) -> tuple[int, int] | None:
    """(blocks, SMs), e.g. (37, 132), when both sides of a launch pair launch at most as many blocks
    as ``arch`` has SMs (the hardware table's usual part): a single partial wave, at most one
    block on each SM, so the blocks-per-SM limits behind theoretical occupancy do not bind. None
    when the grid is larger, not recorded, or the arch's SM count is not known."""
    try:
        sms = arch_limits(arch).sm_count
    except ValueError:
        return None
    sizes = [_blocks(row.get("grid")) for row in (b_row, h_row)]
    if not sms or None in sizes:
        return None
    n = max(s for s in sizes if s is not None)
    if n > sms:
        return None
    return n, sms
