"""One launch's region records in SM cycles, as parallel arrays (:class:`KernelTrace`), and its
conversion into a :class:`~kperf_ci.traces.records.Timeline` in ns.

A KernelTrace is what the capture stage works on (statistics in cycles, the clock fit) and what
it stores (``timeline.npz``, :mod:`.timeline_file`). It is produced by
:func:`kperf_ci.traces.proton_chrome.parse_events` (Proton's Chrome trace) and
:func:`kperf_ci.traces.proton_raw.parse_raw_buffer` (Proton's device buffer).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .clock import measured_clock_ghz
from .records import Timeline

#: The per-record and per-CTA arrays of a KernelTrace, in the order timeline.npz stores them.
ARRAY_FIELDS = (
    "region",
    "cta",
    "sm",
    "unit",
    "start",
    "dur",
    "cta_ids",
    "cta_sm",
    "cta_init_ns",
    "cta_final_ns",
)


@dataclass
class KernelTrace:
    """All recorded slices of one kernel (one launch), as parallel arrays.

    Per event: ``region`` (index into ``names``), ``cta``, ``sm``, ``unit`` (warp, warp group or
    0 for CTA granularity), ``start`` (cycles since the CTA's first recorded cycle) and ``dur``
    (cycles). Per CTA (sorted by id): ``cta_ids``, ``cta_sm``, ``cta_init_ns`` (globaltimer at
    the CTA's start), ``cta_final_ns`` (before Proton's copy-out; -1 when unknown).
    """

    kernel: str
    names: list[str]
    region: np.ndarray
    cta: np.ndarray
    sm: np.ndarray
    unit: np.ndarray
    start: np.ndarray
    dur: np.ndarray
    cta_ids: np.ndarray
    cta_sm: np.ndarray
    cta_init_ns: np.ndarray
    cta_final_ns: np.ndarray
    warnings: list[str] = field(default_factory=list)
    raw: dict[str, np.ndarray] = field(default_factory=dict)  # ts as written (x freq), numeric args

    @property
    def n_events(self) -> int:
        return int(self.region.size)

    def region_id(self, name: str) -> int | None:
        try:
            return self.names.index(name)
        except ValueError:
            return None

    def arrays(self) -> dict[str, np.ndarray]:
        return {k: getattr(self, k) for k in ARRAY_FIELDS}

    @classmethod
    def empty(cls, kernel: str) -> KernelTrace:
        """A launch that recorded nothing (e.g. a kernel compiled without instrumentation)."""
        i64 = np.zeros(0, dtype=np.int64)
        return cls(
            kernel,
            [],
            np.zeros(0, dtype=np.uint16),
            np.zeros(0, dtype=np.uint32),
            np.zeros(0, dtype=np.uint16),
            np.zeros(0, dtype=np.uint16),
            i64,
            i64.copy(),
            np.zeros(0, dtype=np.uint32),
            np.zeros(0, dtype=np.uint16),
            i64.copy(),
            i64.copy(),
        )


def to_timeline(kt: KernelTrace, *, clock_ghz: float | None = None, num_sms: int | None = None) -> Timeline:
    """Timeline in ns: CTAs placed by their globaltimer init stamp, in-CTA cycles converted with
    ``clock_ghz`` (default: :func:`~kperf_ci.traces.clock.measured_clock_ghz` over all records;
    1.0 when the trace has no stamps, Proton's own assumption)."""
    start_cyc = np.asarray(kt.start, dtype=np.float64)
    dur_cyc = np.asarray(kt.dur, dtype=np.float64)
    cta = np.asarray(kt.cta, dtype=np.int64)
    init = np.asarray(kt.cta_init_ns, dtype=np.float64)
    idx = np.searchsorted(np.asarray(kt.cta_ids, dtype=np.int64), cta)
    have_init = len(init) > 0 and bool((init >= 0).all())
    how = "given"
    if clock_ghz is None:
        est = measured_clock_ghz(kt, None)
        clock_ghz = est or 1.0
        how = "estimated from global-timer stamps" if est else "assumed 1 GHz (no stamps)"
    base = (init[idx] - init.min()) if have_init else np.zeros(len(cta))
    s = base + start_cyc / clock_ghz
    e = s + dur_cyc / clock_ghz
    names = list(kt.names)
    region = np.array([names[int(i)] for i in np.asarray(kt.region)], dtype=object)
    t0 = float(s.min()) if len(s) else 0.0
    return Timeline(
        cta=cta,
        warp=np.asarray(kt.unit, dtype=np.int64),
        sm=np.asarray(kt.sm, dtype=np.int64),
        region=region,
        start_ns=s - t0,
        end_ns=e - t0,
        kernel=str(kt.kernel),
        num_sms=num_sms,
        meta={
            "source": "KernelTrace",
            "clock_mhz": clock_ghz * 1000.0,
            "clock": how,
            "trace_t0_ns": t0 + (float(init.min()) if have_init else 0.0),
            "warnings": list(kt.warnings or []),
        },
    )
