"""Proton's intra-kernel Chrome trace (``proton.start(..., backend="instrumentation",
data="trace")``): the one reader of its slices, and the two shapes kperf makes of them.

Format written by Proton (``StreamChromeTraceWriter``), one slice per recorded scope:

    {"name": "<scope>", "ph": "X", "pid": "<kernel> Core<sm> CTA<cta>",
     "tid": "warp <unit> (line <n>)", "ts": t, "dur": d,
     "args": {"Init Time (ns)": ..., "Post Final Time (ns)": ..., "Finalization Time (ns)": ...,
              "Frequency (MHz)": 1000.0, "call_stack": [...]}}

Proton 3.6 itself (seen on an H100 with triton 3.6.0) writes the same ``ts``/``dur`` but only
``{"Finalization Time (ns)", "Frequency (MHz)", "call_stack"}`` as args: no per-CTA init time.
A CTA's earliest ``ts`` is then its start in ns relative to the earliest CTA, and CTA end times
are not known. Worse, ``ts`` subtracts each CTA's first cycle, so absolute SM cycles are gone too:
no clock can be measured from such a trace (the device buffer has them: :mod:`.proton_raw`).

``dur * Frequency`` is the scope's length in cycles (Proton assumes 1 GHz: the numbers shown
as microseconds are kilo-cycles). ``ts * Frequency`` is ``(init_ns - min_init_ns) + (cycle -
first cycle of the CTA)``: a CTA's start from ``%globaltimer`` plus cycles within the CTA.

Thread names. Proton 3.6 names every thread ``"warp <id> (line <n>)"``: it lowers only its warp
granularity (the real trace in tests/data/traces and the strings of its ``libproton.so`` have no
other spelling). :data:`TID_RE` also accepts ``wg``, ``warp_group`` and ``group`` followed by a
number, case-insensitively, so that a trace with one thread per warp group (a Proton that lowers
that granularity) keeps its units apart; reading only ``warp`` would fold them all into unit 0
and merge their slices. A thread name with no such number is its number when it is one, else
unit -1 (CTA level; unit 0 in a KernelTrace, whose units are unsigned).

- :func:`parse_events`: one :class:`~.kernel_trace.KernelTrace` per kernel (cycles), for the
  capture stage;
- :func:`load_proton_traces`: one :class:`~.records.Timeline` per launch (ns), for analyses.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from .clock import clock_ghz_from_stamps
from .kernel_trace import KernelTrace
from .records import KERNEL_REGION, Timeline, group_min

PID_RE = re.compile(r"^(?P<kernel>.*?) Core(?P<sm>\d+) CTA(?P<cta>\d+)")
TID_RE = re.compile(r"(?:warp|wg|warp_group|group)\s*(?P<unit>\d+)", re.IGNORECASE)
_DROPPED = re.compile(r"(\d+)\s+events are dropped")
_DEFAULT_MHZ = 1000.0  # what Proton writes, and assumes, when the argument is missing


class Slice(NamedTuple):
    """One recorded scope of one unit (warp) of one CTA; times in SM cycles as Proton wrote them."""

    kernel: str
    sm: int
    cta: int
    unit: int
    name: str
    ts: float  # cycles: CTA start (ns since the earliest CTA) + cycles since the CTA's first record
    dur: float  # cycles
    init_ns: int | None  # the CTA's globaltimer init stamp, when written
    post_ns: int | None  # the CTA's post-final stamp, when written
    fin_ns: int | None  # Proton's finalization time (copy-out), when written
    args: dict[str, Any]

    @property
    def final_ns(self) -> int | None:
        """The CTA's pre-final stamp (post-final minus finalization), when both are written."""
        if self.post_ns is None or self.fin_ns is None:
            return None
        return self.post_ns - self.fin_ns


def thread_unit(tid: str) -> int:
    """The unit (warp or warp group) a Proton thread name stands for; see the module docstring."""
    m = TID_RE.search(tid)
    if m:
        return int(m["unit"])
    return int(tid) if tid.isdigit() else -1


def load_trace(path_or_obj: str | Path | dict[str, Any] | list[Any]) -> list[dict[str, Any]]:
    """traceEvents of a Chrome trace: a file (one JSON object, or one object per line), a parsed
    object, or a list of events."""
    if isinstance(path_or_obj, list):
        return list(path_or_obj)
    if isinstance(path_or_obj, dict):
        return list(path_or_obj.get("traceEvents", []))
    text = Path(path_or_obj).read_text(encoding="utf-8")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        events: list[dict[str, Any]] = []
        for line in text.splitlines():
            line = line.strip()
            if line:
                events.extend(json.loads(line).get("traceEvents", []))
        return events
    return list(obj) if isinstance(obj, list) else list(obj.get("traceEvents", []))


def _key(args: dict[str, Any], *patterns: str) -> str | None:
    for k in args:
        low = k.lower()
        if all(p in low for p in patterns):
            return k
    return None


def read_slices(events: list[dict[str, Any]]) -> tuple[list[Slice], int]:
    """Every CTA slice (``ph == "X"`` with a ``<kernel> Core<sm> CTA<id>`` pid), and the number
    of complete slices without such a pid (e.g. the "Kernel Call Path" bars newer Protons add)."""
    out: list[Slice] = []
    skipped = 0
    pids: dict[str, tuple[str, int, int] | None] = {}
    tids: dict[str, int] = {}
    keys: dict[tuple, tuple] = {}  # arg key names seen -> (freq, init, post, fin) key names
    for e in events:
        if e.get("ph") != "X":  # a non-object event raises: the caller reports a malformed trace
            continue
        pid = str(e.get("pid", ""))
        p = pids.get(pid, False)
        if p is False:
            m = PID_RE.match(pid)
            p = pids[pid] = (m["kernel"], int(m["sm"]), int(m["cta"])) if m else None
        if p is None:
            skipped += 1
            continue
        tid = str(e.get("tid", ""))
        unit = tids.get(tid)
        if unit is None:
            unit = tids[tid] = thread_unit(tid)
        args = e.get("args") or {}
        ak = tuple(args)
        names = keys.get(ak)
        if names is None:
            names = keys[ak] = (
                _key(args, "freq"),
                _key(args, "init"),
                _key(args, "post", "final"),
                _key(args, "finalization"),
            )
        kf, ki, kp, kn = names
        freq = float((args[kf] if kf else None) or _DEFAULT_MHZ)  # ts [us] x MHz = cycles
        init = args[ki] if ki else None
        post = args[kp] if kp else None
        fin = args[kn] if kn else None
        out.append(
            Slice(
                p[0],
                p[1],
                p[2],
                unit,
                str(e.get("name", "")),
                float(e.get("ts", 0.0)) * freq,
                float(e.get("dur", 0.0)) * freq,
                None if init is None else int(init),
                None if post is None else int(post),
                None if fin is None else int(fin),
                args,
            )
        )
    return out, skipped


def is_proton_trace(obj: dict[str, Any] | list[Any]) -> bool:
    events = obj.get("traceEvents", []) if isinstance(obj, dict) else obj
    return any(PID_RE.match(str(e.get("pid", ""))) for e in list(events)[:200] if isinstance(e, dict))


def dropped_from_log(text: str) -> int:
    """Events Proton says it dropped (its 'N events are dropped' warnings), summed."""
    return sum(int(n) for n in _DROPPED.findall(text or ""))


# --------------------------------------------------------------------------------------------
# KernelTrace per kernel (the capture stage)


def parse_events(events: list[dict[str, Any]]) -> dict[str, KernelTrace]:
    """Group slices by kernel name and convert them to arrays (see the module docstring)."""
    slices, skipped = read_slices(events)
    rows: dict[str, list[Slice]] = {}
    for s in slices:
        rows.setdefault(s.kernel, []).append(s)
    out = {}
    for kernel, rs in rows.items():
        out[kernel] = _to_arrays(kernel, rs)
        if skipped:
            out[kernel].warnings.append(f"{skipped} trace slices without a CTA/SM pid were ignored")
    return out


def _col(rs: list[Slice], get: Any, dtype: Any) -> np.ndarray:
    return np.fromiter((get(r) for r in rs), dtype=dtype, count=len(rs))


def _to_arrays(kernel: str, rs: list[Slice]) -> KernelTrace:
    names: list[str] = []
    index: dict[str, int] = {}
    for r in rs:
        if r.name not in index:
            index[r.name] = len(names)
            names.append(r.name)
    region = _col(rs, lambda r: index[r.name], np.uint16)
    cta = _col(rs, lambda r: r.cta, np.uint32)
    sm = _col(rs, lambda r: r.sm, np.uint16)
    unit = _col(rs, lambda r: max(r.unit, 0), np.uint16)  # unsigned: CTA level is unit 0 here
    ts = _col(rs, lambda r: round(r.ts), np.int64)
    dur = _col(rs, lambda r: round(r.dur), np.int64)
    init = _col(rs, lambda r: -1 if r.init_ns is None else r.init_ns, np.int64)
    final = _col(rs, lambda r: -1 if r.final_ns is None else r.final_ns, np.int64)
    cta_ids, inv = np.unique(cta, return_inverse=True)
    cta_init = np.full(cta_ids.size, -1, dtype=np.int64)
    cta_final = np.full(cta_ids.size, -1, dtype=np.int64)
    if bool((init >= 0).all()):
        # ts = (init - min init) + (cycle - first cycle of the CTA)
        start = ts - (init - init.min())
        cta_init[inv] = init
        cta_final[inv] = final
    else:
        # Proton 3.6 writes the same ts but no "Init Time" argument: the CTA's earliest ts is its
        # (init - min init) in ns (its first record has cycle == first cycle). Start times are
        # then relative to the earliest CTA, and no end time per CTA is known.
        first_ts = np.full(cta_ids.size, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(first_ts, inv, ts)
        cta_init = first_ts
        start = ts - first_ts[inv]
    # normalise per CTA: cycles since the CTA's first recorded cycle
    first = np.full(cta_ids.size, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, inv, start)
    start = start - first[inv]
    cta_sm = np.zeros(cta_ids.size, dtype=np.uint16)
    cta_sm[inv] = sm
    raw = {"ts": ts}
    numeric = sorted({k for r in rs[:64] for k, v in r.args.items() if isinstance(v, (int, float))})[:8]
    for k in numeric:
        vals = (float(r.args[k]) if isinstance(r.args.get(k), (int, float)) else np.nan for r in rs)
        raw["arg:" + k] = np.fromiter(vals, dtype=np.float64, count=len(rs))
    return KernelTrace(
        kernel, names, region, cta, sm, unit, start, dur, cta_ids, cta_sm, cta_init, cta_final, [], raw
    )


# --------------------------------------------------------------------------------------------
# Timeline per launch (the analyses)


def _split_launches(spans: list[tuple[float, float, int]]) -> list[int]:
    """Assign CTAs (start, end, index) to launches: kernels of one stream do not overlap, so a
    CTA that starts after every CTA seen so far has ended begins a new launch."""
    order = sorted(range(len(spans)), key=lambda i: spans[i][0])
    launch = [0] * len(spans)
    cur, cur_end = -1, -np.inf
    for i in order:
        s, e, _ = spans[i]
        if s >= cur_end:
            cur += 1
        cur_end = max(cur_end, e) if s < cur_end else e
        launch[i] = cur
    return launch


def _split_repeated_ctas(groups: dict[tuple, list[Slice]]) -> dict[tuple, list[Slice]]:
    """Without init stamps, two launches of one kernel put the same CTA id on the same SM into
    one group; split such a group at each new start of the warp-0 (or CTA) ``kernel`` region."""
    out: dict[tuple, list[Slice]] = {}
    for key, evs in groups.items():
        if key[2] is not None:
            out[key] = evs
            continue
        low = min(e.unit for e in evs)
        kern = sorted(r.ts for r in evs if r.name == KERNEL_REGION and r.unit == low)
        if len(kern) <= 1:
            out[key] = evs
            continue
        for r in evs:
            k = int(np.searchsorted(kern, r.ts, side="right")) - 1
            out.setdefault((key[0], key[1], None, max(k, 0)), []).append(r)
    return out


def load_proton_traces(
    src: str | os.PathLike[str] | dict[str, Any] | list[Any],
    *,
    kernel: str | None = None,
    clock_mhz: float | str | None = "auto",
    num_sms: int | None = None,
) -> list[Timeline]:
    """Every kernel launch in a Proton Chrome trace, as one Timeline each, in time order.

    ``kernel``: keep only launches of kernels whose name contains this string.
    ``clock_mhz``: SM clock used to turn in-CTA cycles into ns; "auto" estimates it from the
    trace's global-timer stamps when they are there (:func:`.clock.clock_ghz_from_stamps`),
    None keeps Proton's 1-cycle-=-1-ns view.
    """
    slices, _ = read_slices(load_trace(src))
    if kernel is not None:
        slices = [r for r in slices if kernel in r.kernel]
    source = str(src) if isinstance(src, (str, os.PathLike)) else "<object>"
    by_kernel: dict[str, list[Slice]] = {}
    for r in slices:
        by_kernel.setdefault(r.kernel, []).append(r)

    timelines: list[Timeline] = []
    for kname, evs in by_kernel.items():
        # A launch's CTA ids are unique: group events by (cta, sm) occurrence and split by time.
        groups: dict[tuple, list[Slice]] = {}
        for r in evs:
            groups.setdefault((r.cta, r.sm, r.init_ns, 0), []).append(r)
        groups = _split_repeated_ctas(groups)
        keys = list(groups)
        spans = [
            (min(r.ts for r in groups[k]), max(r.ts + r.dur for r in groups[k]), i)
            for i, k in enumerate(keys)
        ]
        launch_of = _split_launches(spans) if len(keys) > 1 else [0] * len(keys)
        n_launch = max(launch_of) + 1 if launch_of else 0
        for li in range(n_launch):
            sel = [r for k, lo in zip(keys, launch_of, strict=True) if lo == li for r in groups[k]]
            timelines.append(_timeline_of_launch(kname, sel, clock_mhz, num_sms, source, li))
    timelines.sort(key=lambda t: t.t0)
    return timelines


def _timeline_of_launch(
    kname: str,
    evs: list[Slice],
    clock_mhz: float | str | None,
    num_sms: int | None,
    source: str,
    launch: int,
) -> Timeline:
    cta = np.array([r.cta for r in evs], dtype=np.int64)
    start = np.array([r.ts for r in evs], dtype=np.float64)
    end = start + np.array([r.dur for r in evs], dtype=np.float64)
    clock_used: float | None = None
    how = "assumed 1 GHz (Proton's view: in-CTA times are cycles)"
    if clock_mhz == "auto":
        if all(r.init_ns is not None and r.final_ns is not None for r in evs):
            init = np.array([r.init_ns for r in evs], dtype=np.float64)
            final = np.array([r.final_ns for r in evs], dtype=np.float64)
            ghz = clock_ghz_from_stamps(cta, start, end, init, final)
            if ghz is not None:
                clock_used, how = ghz * 1000.0, "estimated from global-timer stamps"
    elif clock_mhz is not None:
        clock_used = float(clock_mhz)
        how = "given"
    if clock_used is not None:
        scale = 1000.0 / clock_used
        base = group_min(cta, start)
        start, end = base + (start - base) * scale, base + (end - base) * scale
    t0 = float(start.min()) if len(start) else 0.0
    return Timeline(
        cta=cta,
        warp=[r.unit for r in evs],
        sm=[r.sm for r in evs],
        region=[r.name for r in evs],
        start_ns=start - t0,
        end_ns=end - t0,
        kernel=kname,
        num_sms=num_sms,
        meta={
            "source": source,
            "format": "proton-chrome-trace",
            "launch": launch,
            "trace_t0_ns": t0,  # where this launch starts on the trace's clock (for launch gaps)
            "clock_mhz": clock_used,
            "clock": how,
        },
    )


def load_proton_trace(
    src: str | os.PathLike[str] | dict[str, Any] | list[Any],
    *,
    kernel: str | None = None,
    launch: int = -1,
    clock_mhz: float | str | None = "auto",
    num_sms: int | None = None,
) -> Timeline:
    """One launch from a Proton Chrome trace (default: the last one, ``launch=-1``)."""
    tls = load_proton_traces(src, kernel=kernel, clock_mhz=clock_mhz, num_sms=num_sms)
    if not tls:
        what = f" of a kernel named like {kernel!r}" if kernel else ""
        raise ValueError(f"no Proton CTA events{what} in {src if isinstance(src, str) else 'trace'}")
    return tls[launch]
