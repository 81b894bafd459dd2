"""The input of every intra-kernel analysis: :class:`Timeline`, a flat table of timed region
records (defined with the trace formats in :mod:`kperf_ci.traces.records`), and the helpers the
analyses share.

Every file format is read in :mod:`kperf_ci.traces`: Proton's Chrome trace
(:mod:`~kperf_ci.traces.proton_chrome`), its raw device buffer
(:mod:`~kperf_ci.traces.proton_raw`), kperf's timeline JSON and npz
(:mod:`~kperf_ci.traces.timeline_file`). :func:`from_region_result` adapts the capture stage's
result without importing the GPU-side capture code.
"""

from __future__ import annotations

import re
from typing import Any

from ..traces.kernel_trace import to_timeline
from ..traces.proton_chrome import load_proton_trace
from ..traces.records import KERNEL_REGION, CtaSpans, Timeline, group_min, group_slices

__all__ = [
    "KERNEL_REGION",
    "CtaSpans",
    "Timeline",
    "from_region_result",
    "group_min",
    "group_slices",
    "is_loop_region",
]

_LOOP_RE = re.compile(r"^loop\d+$")


def is_loop_region(name: str) -> bool:
    return bool(_LOOP_RE.match(name))


def from_region_result(rr: Any, *, num_sms: int | None = None) -> Timeline:
    """Timeline from kperf_ci.capture.regions.result.RegionResult (duck-typed, so the analysis
    package does not import the GPU-side capture code).

    Accepted shapes, tried in order:
    - ``rr.timeline`` already a :class:`Timeline`;
    - ``rr.trace``: a :class:`kperf_ci.traces.kernel_trace.KernelTrace` (cycles per CTA +
      global-timer init stamps), converted with ``rr.clock_ghz``
      (:func:`kperf_ci.traces.kernel_trace.to_timeline`);
    - ``rr.records`` / ``rr.events``: iterable of objects or dicts with cta, warp, sm, region
      (or name), and start_ns/end_ns (or start/end in ns);
    - ``rr.trace_path``: a Proton Chrome trace on disk.
    """
    tl = getattr(rr, "timeline", None)
    if isinstance(tl, Timeline):
        return tl
    n_sms = num_sms or getattr(rr, "num_sms", None)
    kt = getattr(rr, "trace", None)
    if kt is not None and hasattr(kt, "cta_init_ns"):
        out = to_timeline(kt, clock_ghz=getattr(rr, "clock_ghz", None), num_sms=n_sms)
        out.meta["source"] = "RegionResult"
        out.meta["clock"] = f"RegionResult ({getattr(rr, 'clock_source', '?')})"
        out.meta["dropped_events"] = int(getattr(rr, "dropped_events", 0) or 0)
        grid = getattr(rr, "grid", None)
        if grid:
            out.meta["grid"] = list(grid)
        return out
    kname = str(getattr(rr, "kernel", "") or getattr(rr, "name", "") or "")
    for attr in ("records", "events"):
        recs = getattr(rr, attr, None)
        if recs:
            rows = []
            for r in recs:
                get = r.get if isinstance(r, dict) else (lambda k, d=None, _r=r: getattr(_r, k, d))
                start = get("start_ns", None)
                end = get("end_ns", None)
                if start is None:
                    start, end = get("start"), get("end")
                warp = get("warp", -1)
                rows.append(
                    (
                        get("cta"),
                        -1 if warp is None else warp,
                        get("sm"),
                        get("region", None) or get("name"),
                        start,
                        end,
                    )
                )
            out = Timeline.from_records(rows, kernel=kname, num_sms=n_sms, meta={"source": "RegionResult"})
            return out.shifted() if len(out) else out
    path = getattr(rr, "trace_path", None)
    if path:
        return load_proton_trace(path, num_sms=n_sms)
    raise TypeError(
        f"cannot build a Timeline from {type(rr).__name__}: no timeline, trace, records, events or trace_path"
    )
