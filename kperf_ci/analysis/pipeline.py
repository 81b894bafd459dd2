"""The ``kperf analyze`` pipeline as a library: the launches of a trace file or of a stored run,
each analyzed (:func:`kperf_ci.analysis.analyze_timeline`), launch gaps over a sequence, and a
Perfetto file on request. :mod:`kperf_ci.commands.analyze` reads the run and prints; this
module does the work and returns an :class:`AnalyzeReport`.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kperf_ci import store
from kperf_ci.model import RunRecord
from kperf_ci.traces.kernel_records import (
    KernelRecord,
    load_records,
    records_from_json,
    records_from_timelines,
)
from kperf_ci.traces.perfetto import write_chrome_trace
from kperf_ci.traces.proton_chrome import load_proton_traces
from kperf_ci.traces.records import Timeline
from kperf_ci.traces.timeline_file import load_timelines, timeline_from_json, timeline_from_npz

from . import FLAG_THRESHOLDS, LaunchConfig, analyze_timeline
from .findings import Finding, flagged
from .launch_gaps import launch_gaps
from .occupancy import busy_sm_series

__all__ = ["MALFORMED", "AnalyzeReport", "LaunchReport", "analyze"]

#: What the parsers raise on a document of the wrong shape: they index, call methods on and
#: recurse into whatever JSON they are given. For a file or an artifact that is bad input (the
#: file is named, exit 2), not a crash.
#: (BadZipFile, EOFError: a blob that starts like a timeline npz and is not one.)
MALFORMED = (
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    AttributeError,
    RecursionError,
    UnicodeDecodeError,
    zipfile.BadZipFile,
    EOFError,
)


def _short(e: BaseException, limit: int = 200) -> str:
    text = str(e) if isinstance(e, ValueError) else f"{type(e).__name__}: {e}"
    return text if len(text) <= limit else text[:limit] + "..."


def _read_file(path: str, what: str, load: Callable[..., Any], **kw: Any) -> Any:
    """``load(path, **kw)``, with every way a bad file fails as one ValueError naming the file."""
    try:
        return load(path, **kw)
    except OSError as e:
        raise ValueError(f"{path}: cannot read it ({e.strerror or e})") from None
    except MALFORMED as e:
        raise ValueError(f"{path}: not {what} ({_short(e)})") from None


@dataclass
class LaunchReport:
    label: str
    findings: list[Finding]
    timeline: Timeline | None = None


@dataclass
class AnalyzeReport:
    launches: list[LaunchReport] = field(default_factory=list)
    sequence: list[Finding] = field(default_factory=list)  # launch gaps over all launches
    notes: list[str] = field(default_factory=list)

    @property
    def flagged(self) -> list[Finding]:
        return flagged([f for lr in self.launches for f in lr.findings] + self.sequence)

    def to_dict(self) -> dict[str, Any]:
        return {
            "launches": [
                {"label": lr.label, "findings": [f.to_dict() for f in lr.findings]} for lr in self.launches
            ],
            "sequence": [f.to_dict() for f in self.sequence],
            "notes": self.notes,
        }


def _json_document(text: str) -> dict[str, Any] | list[Any]:
    """A JSON object or array. Anything else is refused here: the timeline loaders take a
    non-container for a file to open, and ``open(3)`` would read (and close) file descriptor 3."""
    obj = json.loads(text)
    if not isinstance(obj, (dict, list)):
        raise ValueError(f"JSON {type(obj).__name__}, not an object or a list")
    return obj


def _load_trace_file(path: str, **kw: Any) -> list[Timeline]:
    with open(path, encoding="utf-8") as f:
        return load_timelines(_json_document(f.read()), **kw)  # type: ignore[arg-type]


def _timelines_from_text(text: str, kernel: str | None, num_sms: int | None) -> list[Timeline]:
    obj = _json_document(text)
    if isinstance(obj, dict) and obj.get("format") == "kperf-timeline":
        return [timeline_from_json(obj)]
    return load_proton_traces(obj, kernel=kernel, num_sms=num_sms)


def _artifact_timelines(
    db: str, run_id: str, variant_id: str, name: str, text: str, sms: int | None
) -> list[Timeline]:
    """A trace artifact as timelines: Chrome-trace/kperf JSON text, or the capture stage's binary
    npz (``RegionResult.timeline_bytes``, read back as bytes). Never a path to open: a database
    is data, and a crafted one must not make ``kperf analyze`` read local files."""
    stripped = text.strip()
    if stripped.startswith(("{", "[")):
        try:
            return _timelines_from_text(stripped, None, sms)
        except json.JSONDecodeError as e:
            raise ValueError(f"bad JSON: {e}") from None
    raw = store.load_blob(db, run_id, variant_id, name)
    if raw and raw[:2] == b"PK":
        return [timeline_from_npz(raw, num_sms=sms)]
    raise ValueError("neither trace JSON nor a timeline npz")


def _launch_config(
    m: dict[str, float], grid: float | None, arch: str, sms: int | None
) -> LaunchConfig | None:
    """A variant's launch numbers from its stored metrics; None without a grid or warps."""
    if not grid or not m.get("num_warps"):
        return None
    return LaunchConfig(
        grid=int(grid),
        num_warps=int(m["num_warps"]),
        registers=int(m["registers"]) if m.get("registers") else None,
        shared_bytes=int(m["shared_bytes"]) if m.get("shared_bytes") else None,
        arch=arch,
        sm_count=sms,
    )


def _from_db(
    db: str,
    rec: RunRecord,
    kernel: str | None,
    num_sms: int | None,
    report: AnalyzeReport,
    thresholds: dict[str, float] | None = None,
) -> list[tuple[str, Timeline | None, LaunchConfig | None]]:
    """The launches of a stored run (``rec``, read from ``db`` with its artifacts): timelines of
    its trace artifacts, launch numbers of its metrics; launch gaps and notes go to ``report``."""
    sms = num_sms or rec.info.fingerprint.sm_count
    out: list[tuple[str, Timeline | None, LaunchConfig | None]] = []
    for res in rec.results:
        if kernel and kernel not in res.key.kernel:
            continue
        m = {x.name: x.value for x in res.metrics}
        cfg = _launch_config(m, m.get("grid") or m.get("launch.grid"), res.key.arch, sms)
        if "kernel_records" in res.artifacts:  # a callable that launched several kernels
            try:
                recs = records_from_json(res.artifacts["kernel_records"])
                gaps = launch_gaps(recs, threshold=(thresholds or FLAG_THRESHOLDS)["launch_gap_fraction"])
                report.launches.append(LaunchReport(f"{res.key.label()} [launch gaps]", gaps))
            except MALFORMED as e:
                report.notes.append(
                    f"{res.key.label()}: artifact 'kernel_records' is unreadable ({_short(e)})"
                )
        found = False
        for name, text in sorted(res.artifacts.items()):
            if "trace" not in name and "timeline" not in name:
                continue
            try:
                tls = _artifact_timelines(db, rec.info.run_id, res.key.id, name, text, sms)
            except (*MALFORMED, OSError) as e:
                report.notes.append(f"{res.key.label()}: artifact {name!r} is not a timeline ({_short(e)})")
                continue
            for i, tl in enumerate(tls):
                tl.num_sms = tl.num_sms or sms
                lc = cfg
                if lc is None and tl.meta.get("grid"):
                    lc = _launch_config(m, int(np.prod(tl.meta["grid"])), res.key.arch, sms)
                out.append((f"{res.key.label()} [{name}#{i}]", tl, lc))
                found = True
        if not found:
            stored = [x for x in res.metrics if x.kind == "analysis"]
            if "kernel_records" in res.artifacts:  # analyzed above; a callable variant has no more
                stored = [
                    x
                    for x in stored
                    if not x.name.startswith("analysis.launch_gap") and x.name != "analysis.kernel_median_ns"
                ]
            if cfg is not None:
                out.append((res.key.label(), None, cfg))
            elif stored:
                report.launches.append(
                    LaunchReport(
                        res.key.label(),
                        [
                            Finding(
                                x.name.removeprefix("analysis."),
                                x.value,
                                x.unit,
                                False,
                                "stored analysis metric",
                                better=x.better,
                            )
                            for x in stored
                        ],
                    )
                )
            elif "kernel_records" not in res.artifacts:
                report.notes.append(f"{res.key.label()}: no trace artifact and no launch numbers to analyze")
    return out


_Item = tuple[str, Timeline | None, LaunchConfig | None]  # (label, timeline, launch numbers)


def _trace_items(
    trace: str, kernel: str | None, num_sms: int | None, clock_mhz: float | None, launch: LaunchConfig | None
) -> list[_Item]:
    """The launches of a trace file (those of kernels named like ``kernel``), each with the
    launch numbers given on the command line. Raises ValueError on a bad file or no launch."""
    kw: dict[str, Any] = {"num_sms": num_sms}
    if clock_mhz is not None:
        kw["clock_mhz"] = clock_mhz
    loaded = _read_file(trace, "a Proton Chrome trace or kperf timeline JSON", _load_trace_file, **kw)
    tls = [t for t in loaded if not kernel or kernel in t.kernel]
    if not tls:
        raise ValueError(f"{trace}: no timeline" + (f" of a kernel named like {kernel!r}" if kernel else ""))
    items: list[_Item] = []
    for i, tl in enumerate(tls):
        tl.num_sms = tl.num_sms or num_sms
        items.append((f"{tl.kernel or 'kernel'} launch {i}", tl, launch))
    return items


def _analyze_items(
    items: list[_Item], th: dict[str, float], report: AnalyzeReport, *, from_db: bool
) -> list[Timeline]:
    """Each launch analyzed into ``report`` (its timeline's findings, else its launch numbers'
    wave findings); returns the timelines analyzed, for the sequence and the Perfetto file."""
    timelines: list[Timeline] = []
    for label, tl, cfg in items:
        try:
            if tl is not None:
                fs = analyze_timeline(tl, launch=cfg, num_sms=tl.num_sms, thresholds=th)
            else:
                assert cfg is not None
                fs = cfg.wave_findings(threshold=th["wave_idle"])
        except ValueError as e:
            if not from_db:
                raise
            # one variant's stored numbers (an arch no table knows, a grid of 0) cost that
            # variant's analysis, never the others'
            report.notes.append(f"{label}: not analyzed ({_short(e)})")
            continue
        if tl is not None:
            if tl.meta.get("clock_mhz") is None and tl.meta.get("format") == "proton-chrome-trace":
                report.notes.append(
                    f"{label}: SM clock unknown, in-CTA times are cycles read as ns "
                    "(pass --clock-mhz); cross-SM analyses may be off"
                )
            timelines.append(tl)
        report.launches.append(LaunchReport(label, fs, tl))
    return timelines


def _sequence_records(
    records: str | None, trace: str | None, timelines: list[Timeline]
) -> list[KernelRecord]:
    """The launch sequence to look for gaps in: the ``records`` file when given, else the
    launches of one trace file (timelines of a run database come from different tests and
    variants; their gaps are the stored kernel_records' findings). Raises ValueError on a
    records file with no record in it."""
    if records:
        recs = _read_file(records, "kernel records JSON or a profiler trace", load_records)
        if not recs:
            raise ValueError(
                f"{records}: no kernel records in it; pass kperf kernel-record JSON, a list of "
                "{name, start_ns, end_ns} or a torch.profiler/Kineto trace with kernel events"
            )
        return recs
    return records_from_timelines(timelines) if trace and len(timelines) > 1 else []


def launch_report(launch: LaunchConfig, label: str, thresholds: dict[str, float]) -> AnalyzeReport:
    """What the launch numbers alone tell, with no timeline: wave quantization of the grid."""
    fs = launch.wave_findings(threshold=thresholds.get("wave_idle", FLAG_THRESHOLDS["wave_idle"]))
    return AnalyzeReport([LaunchReport(label, fs)])


def analyze(
    *,
    trace: str | None = None,
    db: str | None = None,
    record: RunRecord | None = None,
    kernel: str | None = None,
    perfetto: str | None = None,
    records: str | None = None,
    num_sms: int | None = None,
    launch: LaunchConfig | None = None,
    thresholds: dict[str, float] | None = None,
    per_warp: bool = False,
    clock_mhz: float | None = None,
) -> AnalyzeReport:
    """Analyze every launch found, in a trace file or in ``record`` (a run read from ``db`` with
    its artifacts); write a Perfetto file when asked. Raises ValueError on bad input."""
    if bool(trace) == bool(db) and not records:
        raise ValueError("give exactly one of --trace FILE or --db run.db (or --records FILE)")
    th = {**FLAG_THRESHOLDS, **(thresholds or {})}
    report = AnalyzeReport()
    items: list[_Item] = []
    if trace:
        items = _trace_items(trace, kernel, num_sms, clock_mhz, launch)
    elif db:
        assert record is not None, "a run database comes with the run read from it"
        items = _from_db(db, record, kernel, num_sms, report, th)
    timelines = _analyze_items(items, th, report, from_db=bool(db))
    recs = _sequence_records(records, trace, timelines)
    if recs:
        report.sequence = launch_gaps(recs, threshold=th["launch_gap_fraction"])
    if perfetto:
        all_f = [f for lr in report.launches for f in lr.findings] + report.sequence
        write_chrome_trace(
            perfetto, timelines, findings=all_f, records=recs, per_warp=per_warp, busy_series=busy_sm_series
        )
    return report
