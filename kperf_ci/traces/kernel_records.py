"""Kernel records: when each kernel of a sequence ran on the GPU (the input of the launch-gap
analysis), and the files they come from:

- kperf's ``kperf-kernel-records`` JSON (version 1; ``kperf analyze --records``, the
  ``kernel_records`` blob of a variant);
- a profiler's Chrome trace (torch.profiler / Kineto: its slices of ``cat`` "kernel"): what
  the GPU-mode plugin exports from torch.profiler's CUPTI records;
- a plain list of record dicts, and launch timelines of a Proton trace.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .records import Timeline


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
