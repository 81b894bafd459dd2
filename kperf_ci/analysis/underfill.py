"""A grid smaller than one wave: too little work to fill the GPU, not a wave tail.

``wave_quantization`` reads any partly full last wave as a tail and advises resizing the grid to
whole waves. When the grid is less than one wave that advice is wrong: a 16-row layernorm
launch of 2 us was told to grow to 1,056 CTAs. Such a launch gets ``grid_fill`` (the share of
one wave's CTA slots the grid uses) with advice that fits (batch, fuse, split the work), and its
wave findings stay as numbers, unflagged, so one problem is reported once.
"""

from __future__ import annotations

from dataclasses import replace

from .findings import Finding, pct

__all__ = ["FEWER_CTAS_ADVICE", "single_partial_wave"]

FEWER_CTAS_ADVICE = (
    "batch more work into one launch (more rows, heads or problems per call), fuse the kernel with "
    "its neighbours, or split each CTA's work (split-K, smaller tiles) so that more CTAs run"
)
#: Measured idle this far above the prediction is more than the partial wave explains
#: (the same tolerance waves._measured uses to note a difference).
_EXPLAINED = 0.10


def single_partial_wave(
    findings: list[Finding], *, grid: int, capacity: int, resources: str, threshold: float
) -> list[Finding]:
    """The findings of ``wave_quantization`` for a grid of fewer CTAs than one wave holds
    (``capacity``), recast: ``grid_fill`` flagged when the idle share exceeds ``threshold``;
    ``wave_tail``/``wave_idle`` unflagged; a measured tail unflagged when the partial wave
    explains it, else kept with advice about uneven CTAs."""
    fill = grid / capacity
    idle = 1.0 - fill
    flagged = idle > threshold
    out: list[Finding] = []
    for f in findings:
        if f.name in ("wave_tail", "wave_idle"):
            f = replace(
                f,
                flagged=False,
                suggestion="",
                explanation=f"{f.explanation}; a single partial wave, no tail to trim (see grid_fill)",
            )
        elif f.name == "wave_tail_idle_measured" and f.flagged:
            if f.value - idle <= _EXPLAINED:
                f = replace(
                    f,
                    flagged=False,
                    suggestion="",
                    explanation=f"{f.explanation}; the single partial wave explains it (see grid_fill)",
                )
            else:
                f = replace(
                    f,
                    suggestion="SMs idle longer than the partial wave explains: CTAs are uneven or start "
                    "late; see sm_finish_skew and cta_duration_max_over_median",
                )
        out.append(f)
        if f.name == "ctas_per_sm":
            out.append(
                Finding(
                    "grid_fill",
                    fill,
                    "fraction",
                    flagged,
                    f"{grid} CTAs fill {pct(fill)} of one wave ({capacity} CTA slots on {resources}): "
                    "too little work to fill the GPU",
                    FEWER_CTAS_ADVICE if flagged else "",
                    better="higher",
                    threshold=1.0 - threshold,
                    details={"grid": grid, "capacity": capacity},
                )
            )
    return out
