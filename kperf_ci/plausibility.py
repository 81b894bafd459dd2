"""Physical plausibility of a timing: achieved bandwidth and FLOP/s against the device's peaks.

A kernel cannot move data faster than the memory system nor compute faster than its fastest
units.  A result above the physical peak is a measurement error (the work did not run, ran on
another stream than the one timed, was served from L2 because the cache was not flushed, or the
declared ``bytes=``/``flops=`` are too large) -- never a speed-up to celebrate.  Below the peak,
the fraction of peak says how much headroom is left.

Peaks are data (:data:`PEAKS`), matched by device name (``torch.cuda.get_device_name()``),
dense (no structured sparsity), at boost clock, from the vendors' datasheets.  Bytes and FLOPs
come from the marker (``@pytest.mark.kperf(bytes=..., flops=...)``, "declared") or, for bytes,
from the arguments (every distinct tensor read or written once, "derived" -- an estimate).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kperf_ci.model import Metric

TB = 1e12
MiB = 1 << 20

FLOP_KINDS = ("fp64", "fp32", "tf32_tensor", "fp16_tensor", "bf16_tensor", "fp8_tensor", "int8_tensor")


@dataclass(frozen=True)
class DevicePeak:
    name: str
    pattern: str  # regex, case-insensitive, searched in the device name
    hbm_bytes_per_s: float  # DRAM bandwidth
    flops: Mapping[str, float]  # per FLOP_KINDS key, FLOP/s (dense)
    l2_bytes: int
    source: str = ""

    def matches(self, device_name: str) -> bool:
        return re.search(self.pattern, device_name, re.IGNORECASE) is not None

    @property
    def max_flops(self) -> float:
        return max(self.flops.values())


def _f(fp64, fp32, tf32, fp16, fp8=None, int8=None) -> dict[str, float]:
    d = {
        "fp64": fp64 * TB,
        "fp32": fp32 * TB,
        "tf32_tensor": tf32 * TB,
        "fp16_tensor": fp16 * TB,
        "bf16_tensor": fp16 * TB,
    }
    if fp8:
        d["fp8_tensor"] = fp8 * TB
    if int8:
        d["int8_tensor"] = int8 * TB
    return d


#: Most specific patterns first: the first match wins.
PEAKS: tuple[DevicePeak, ...] = (
    DevicePeak(
        "H100 NVL",
        r"H100.*NVL",
        3.9 * TB,
        _f(30, 60, 417.5, 835.5, 1670.5, 1670.5),
        50 * MiB,
        "NVIDIA H100 datasheet (NVL, per GPU)",
    ),
    DevicePeak(
        "H100 PCIe",
        r"H100.*PCIe",
        2.0 * TB,
        _f(25.6, 51.2, 378, 756.5, 1513, 1513),
        50 * MiB,
        "NVIDIA H100 datasheet (PCIe)",
    ),
    DevicePeak(
        "H100 SXM",
        r"H100",
        3.35 * TB,
        _f(34, 66.9, 494.7, 989.4, 1978.9, 1978.9),
        50 * MiB,
        "NVIDIA H100 datasheet (SXM5)",
    ),
    DevicePeak(
        "H200 NVL",
        r"H200.*NVL",
        4.8 * TB,
        _f(30, 60, 417.5, 835.5, 1670.5, 1670.5),
        50 * MiB,
        "NVIDIA H200 datasheet (NVL)",
    ),
    DevicePeak(
        "H200 SXM",
        r"H200",
        4.8 * TB,
        _f(34, 66.9, 494.7, 989.4, 1978.9, 1978.9),
        50 * MiB,
        "NVIDIA H200 datasheet (SXM)",
    ),
    DevicePeak(
        "A100 80GB PCIe",
        r"A100.*(80GB.*PCIe|PCIe.*80GB)",
        1.935 * TB,
        _f(9.7, 19.5, 156, 312, None, 624),
        40 * MiB,
        "NVIDIA A100 datasheet (80GB PCIe)",
    ),
    DevicePeak(
        "A100 80GB SXM",
        r"A100.*80GB",
        2.039 * TB,
        _f(9.7, 19.5, 156, 312, None, 624),
        40 * MiB,
        "NVIDIA A100 datasheet (80GB SXM)",
    ),
    DevicePeak(
        "A100 40GB",
        r"A100",
        1.555 * TB,
        _f(9.7, 19.5, 156, 312, None, 624),
        40 * MiB,
        "NVIDIA A100 datasheet (40GB)",
    ),
    DevicePeak(
        "L40S", r"L40S", 0.864 * TB, _f(1.4, 91.6, 183, 362.05, 733, 733), 96 * MiB, "NVIDIA L40S datasheet"
    ),
    DevicePeak(
        "L4",
        r"\bL4(?![0-9S])",
        0.3 * TB,
        _f(0.49, 30.3, 60, 121, 242.5, 242.5),
        48 * MiB,
        "NVIDIA L4 datasheet",
    ),
)


def device_peak(device_name: str | None) -> DevicePeak | None:
    """The peaks of a device by name ("NVIDIA H100 80GB HBM3" -> H100 SXM), or None if unknown."""
    if not device_name:
        return None
    return next((p for p in PEAKS if p.matches(device_name)), None)


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
    peak: DevicePeak | None
    bytes: float | None = None
    bytes_source: str | None = None  # "declared" | "derived"
    flops: float | None = None
    flop_kind: str | None = None  # the FLOP_KINDS key compared with ("max": the fastest unit)
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
        """analysis.* metrics (better="none": the time metrics already carry the verdict)."""
        out = []
        for name, value, unit in (
            ("analysis.bandwidth_gbs", None if self.bandwidth is None else self.bandwidth / 1e9, "GB/s"),
            ("analysis.bandwidth_fraction", self.bandwidth_fraction, "fraction"),
            ("analysis.tflops", None if self.flop_rate is None else self.flop_rate / TB, "TFLOP/s"),
            ("analysis.flops_fraction", self.flop_fraction, "fraction"),
        ):
            if value is not None and math.isfinite(value):
                out.append(Metric(name, float(value), unit=unit, kind="analysis", better="none"))
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

    ``flop_kind``: which peak the FLOPs are compared with (a FLOP_KINDS key); None compares with
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
