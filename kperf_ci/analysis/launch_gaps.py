"""Launch gaps: GPU idle time between consecutive kernels of a sequence."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# load_records / records_to_json: re-exported for capture/launches/gpu.py and plugin/gpu_bench.py until
# they import kperf_ci.traces.kernel_records themselves (other branches own them)
from ..traces.kernel_records import KernelRecord, load_records, records_to_json  # noqa: F401
from . import intervals
from .findings import Finding, pct, us


def launch_gaps(records: Sequence[KernelRecord], *, threshold: float = 0.20) -> list[Finding]:
    """``launch_gap_fraction``: idle GPU time between the first kernel's start and the last
    kernel's end, as a share of that span (overlapping kernels count once). Flagged above
    ``threshold`` (default 20%). Also ``launch_gap_median_ns`` and ``kernel_median_ns``."""
    if not records:
        return []
    s = np.array([r.start_ns for r in records], dtype=np.float64)
    e = np.array([r.end_ns for r in records], dtype=np.float64)
    lo, hi = float(s.min()), float(e.max())
    span = hi - lo
    gs, ge = intervals.gaps(s, e, lo, hi)
    idle = float(np.sum(ge - gs))
    frac = idle / span if span > 0 else 0.0
    order = np.argsort(s)
    # gap after each kernel to the next one's start (0 when they overlap)
    run_end = np.maximum.accumulate(e[order])
    per_gap = np.maximum(s[order][1:] - run_end[:-1], 0.0)
    gap_med = float(np.median(per_gap)) if len(per_gap) else 0.0
    k_med = float(np.median(e - s))
    flagged = frac > threshold
    suggestion = ""
    if flagged:
        if gap_med > k_med:
            suggestion = (
                f"kernels ({us(k_med)}) are shorter than the gaps between them ({us(gap_med)}): the "
                "sequence is launch-bound; capture it in a CUDA graph, fuse the kernels, or run them as "
                "one persistent megakernel"
            )
        else:
            suggestion = (
                "the GPU waits between kernels: capture the sequence in a CUDA graph, remove host "
                "synchronisations between launches, or fuse neighbouring kernels"
            )
    names = sorted({r.name for r in records})
    return [
        Finding(
            "launch_gap_fraction",
            frac,
            "fraction",
            flagged,
            f"the GPU idled {pct(frac)} of {us(span)} between {len(records)} kernels ({len(names)} distinct)",
            suggestion,
            better="lower",
            threshold=threshold,
            details={"idle_ns": idle, "span_ns": span, "kernels": len(records)},
        ),
        Finding(
            "launch_gap_median_ns",
            gap_med,
            "ns",
            False,
            f"median gap between consecutive kernels {us(gap_med)}",
            better="lower",
        ),
        Finding("kernel_median_ns", k_med, "ns", False, f"median kernel duration {us(k_med)}", better="none"),
    ]
