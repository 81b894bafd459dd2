"""Physical plausibility of a timing: achieved bandwidth and FLOP/s against the device's peaks.

A kernel cannot move data faster than the memory system nor compute faster than its fastest
units.  A result above the physical peak is a measurement error (the work did not run, ran on
another stream than the one timed, was served from L2 because the cache was not flushed, or the
declared ``bytes=``/``flops=`` are too large) -- never a speed-up to celebrate.  Below the peak,
the fraction of peak says how much headroom is left.

Peaks are data (:data:`kperf_ci.hardware.PEAKS`, with every other hardware fact), matched by
device name (``torch.cuda.get_device_name()``), dense (no structured sparsity), at boost clock,
from the vendors' datasheets.  Bytes and FLOPs come from the marker
(``@pytest.mark.kperf(bytes=..., flops=...)``, "declared") or, for bytes, from the arguments
(every distinct tensor read or written once, "derived" -- an estimate).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kperf_ci.hardware import TB, GpuSpec, MiB, device_peak
from kperf_ci.metrics import metric
from kperf_ci.model import Metric


def derive_bytes(*args: Any, **kwargs: Any) -> int | None:
    """Bytes of the distinct tensors among the arguments (each counted once): the traffic of a
    kernel that reads or writes each of them once in full.  None when there is no tensor."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for a in _flatten(list(args) + list(kwargs.values())):
        nbytes = _nbytes(a)
        if nbytes is None:
            continue
        try:
            ptr = int(a.data_ptr())
        except Exception:
            ptr = id(a)
        if (ptr, nbytes) not in seen:
            seen.add((ptr, nbytes))
            total += nbytes
    return total if seen else None


def _flatten(xs: Iterable[Any]) -> Iterable[Any]:
    for x in xs:
        if isinstance(x, (list, tuple)):
            yield from _flatten(x)
        else:
            yield x


def _nbytes(x: Any) -> int | None:
    if not hasattr(x, "data_ptr"):
        return None
    n = getattr(x, "nbytes", None)
    if isinstance(n, int):
        return n
    try:
        return int(x.numel()) * int(x.element_size())
    except Exception:
        return None


@dataclass
class Plausibility:
    time_ms: float
    device: str | None
    peak: GpuSpec | None
    bytes: float | None = None
    bytes_source: str | None = None  # "declared" | "derived"
    flops: float | None = None
    flop_kind: str | None = None  # the hardware.FLOP_KINDS key compared with ("max": the fastest unit)
    bandwidth: float | None = None  # achieved bytes/s
    bandwidth_fraction: float | None = None  # of the DRAM peak
    flop_rate: float | None = None  # achieved FLOP/s
    flop_fraction: float | None = None
    problems: list[str] = field(default_factory=list)  # each one a measurement error
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def describe(self) -> str:
        parts = []
        if self.bandwidth is not None:
            frac = "" if self.bandwidth_fraction is None else f" ({self.bandwidth_fraction:.0%} of peak)"
            parts.append(f"{self.bandwidth / 1e9:.1f} GB/s{frac}")
        if self.flop_rate is not None:
            frac = "" if self.flop_fraction is None else f" ({self.flop_fraction:.0%} of peak)"
            parts.append(f"{self.flop_rate / TB:.2f} TFLOP/s{frac}")
        return ", ".join(parts + self.problems)

    def to_metrics(self) -> list[Metric]:
        """analysis.* metrics (the catalogue gives them no direction: time carries the verdict)."""
        out = []
        for name, value in (
            ("analysis.bandwidth_gbs", None if self.bandwidth is None else self.bandwidth / 1e9),
            ("analysis.bandwidth_fraction", self.bandwidth_fraction),
            ("analysis.tflops", None if self.flop_rate is None else self.flop_rate / TB),
            ("analysis.flops_fraction", self.flop_fraction),
        ):
            if value is not None and math.isfinite(value):
                out.append(metric(name, value))
        return out


def check(
    time_ms: float,
    *,
    device: str | None,
    bytes: float | None = None,
    flops: float | None = None,
    flop_kind: str | None = None,
    bytes_source: str = "declared",
    tolerance: float = 0.05,
) -> Plausibility:
    """Achieved bandwidth / FLOP rate of one timing and whether they are physically possible.

    ``flop_kind``: which peak the FLOPs are compared with (a hardware.FLOP_KINDS key); None compares with
    the device's fastest unit, the only bound that holds whatever the kernel computes with.
    ``tolerance``: slack above the datasheet peak before calling it an error (rounded datasheet
    numbers, clocks above boost).
    """
    peak = device_peak(device)
    res = Plausibility(time_ms=time_ms, device=device, peak=peak, bytes=bytes, flops=flops)
    if not (time_ms > 0 and math.isfinite(time_ms)):
        res.problems.append(f"time {time_ms} ms is not a positive duration")
        return res
    seconds = time_ms / 1000.0
    if peak is None:
        res.notes.append(f"no peak data for device {device!r}: rates reported, not checked")
    if bytes:
        res.bytes_source = bytes_source
        res.bandwidth = bytes / seconds
        if peak is not None:
            res.bandwidth_fraction = res.bandwidth / peak.hbm_bytes_per_s
            if res.bandwidth_fraction > 1 + tolerance:
                why = (
                    "the declared bytes= may be too large"
                    if bytes_source == "declared"
                    else "the bytes were estimated from the arguments (every tensor once in full)"
                )
                l2 = (
                    f"; the data ({bytes / MiB:.1f} MiB) fits in the {peak.l2_bytes // MiB} MiB L2: "
                    "was it flushed?"
                    if bytes <= peak.l2_bytes
                    else ""
                )
                res.problems.append(
                    f"achieved {res.bandwidth / TB:.2f} TB/s is above the {peak.name} peak of "
                    f"{peak.hbm_bytes_per_s / TB:.2f} TB/s ({res.bandwidth_fraction:.0%}): "
                    f"a measurement error, or {why}{l2}"
                )
    if flops:
        res.flop_rate = flops / seconds
        if peak is not None:
            if flop_kind is not None and flop_kind not in peak.flops:
                res.notes.append(
                    f"{peak.name} has no {flop_kind} peak in the table; compared with its fastest unit"
                )
                flop_kind = None
            res.flop_kind = flop_kind or "max"
            limit = peak.flops[flop_kind] if flop_kind else peak.max_flops
            res.flop_fraction = res.flop_rate / limit
            if res.flop_fraction > 1 + tolerance:
                res.problems.append(
                    f"achieved {res.flop_rate / TB:.1f} TFLOP/s is above the {peak.name} {res.flop_kind} "
                    f"peak of {limit / TB:.1f} TFLOP/s ({res.flop_fraction:.0%}): a measurement error, "
                    "or flops= is too large"
                )
    return res
