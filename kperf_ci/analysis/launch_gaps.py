"""Launch gaps: GPU idle time between consecutive kernels of a sequence."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import intervals
from .findings import Finding, pct, us
from .timeline import Timeline


@dataclass(frozen=True)
class KernelRecord:
    """One kernel execution on the GPU (from CUDA events, a profiler, or a Proton trace)."""

    name: str
    start_ns: float
    end_ns: float

    @property
    def duration_ns(self) -> float:
        return self.end_ns - self.start_ns


def records_from_dicts(rows: Iterable[dict[str, Any]]) -> list[KernelRecord]:
    """Dicts with name and start_ns/end_ns (or start_us/end_us, or ts/dur in us)."""
    out = []
    for r in rows:
        if "start_ns" in r:
            s, e = float(r["start_ns"]), float(r["end_ns"])
        elif "start_us" in r:
            s, e = float(r["start_us"]) * 1e3, float(r["end_us"]) * 1e3
        else:
            s = float(r["ts"]) * 1e3
            e = s + float(r.get("dur", 0.0)) * 1e3
        out.append(KernelRecord(str(r.get("name", "")), s, e))
    return out


def records_from_chrome_trace(obj: dict[str, Any] | list[Any]) -> list[KernelRecord]:
    """Kernel slices of a profiler Chrome trace (torch.profiler / Kineto: ``cat`` "kernel")."""
    events = obj.get("traceEvents", []) if isinstance(obj, dict) else obj
    rows = [
        e for e in events if e.get("ph") == "X" and str(e.get("cat", "")).lower() in ("kernel", "gpu_kernel")
    ]
    return records_from_dicts(rows)


def records_from_timelines(tls: Sequence[Timeline]) -> list[KernelRecord]:
    """One record per Proton launch timeline, placed by its ``meta["trace_t0_ns"]``."""
    out = []
    for t in tls:
        base = float(t.meta.get("trace_t0_ns", 0.0))
        out.append(KernelRecord(t.kernel, base + t.t0, base + t.t1))
    return out


def load_records(path: str | os.PathLike[str]) -> list[KernelRecord]:
    with open(path, encoding="utf-8") as f:
        return records_from_json(f.read())


def records_document(records: Sequence[KernelRecord]) -> dict[str, Any]:
    """kperf's kernel-record document (what :func:`load_records` and ``kperf analyze --records``
    read), as a JSON-ready dict."""
    return {
        "format": "kperf-kernel-records",
        "version": 1,
        "records": [{"name": r.name, "start_ns": r.start_ns, "end_ns": r.end_ns} for r in records],
    }


def records_to_json(records: Sequence[KernelRecord]) -> str:
    return json.dumps(records_document(records))


def records_from_json(text: str) -> list[KernelRecord]:
    """Records from kperf's kernel-record JSON, a plain list of record dicts, or a profiler's
    Chrome trace."""
    obj = json.loads(text)
    if isinstance(obj, dict) and obj.get("format") == "kperf-kernel-records":
        return records_from_dicts(obj["records"])
    if isinstance(obj, list) and obj and "name" in obj[0] and "ph" not in obj[0]:
        return records_from_dicts(obj)
    return records_from_chrome_trace(obj)


def save_records(records: Sequence[KernelRecord], path: str | os.PathLike[str]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(records_to_json(records))


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
