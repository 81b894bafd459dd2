"""Hardware facts: architecture names, per-arch limits, per-GPU SM counts and peaks, in one place.

Readers share these facts, so each is written once here: compare gates shared memory against
the per-CTA limit, capture lowers Proton's regions within it, the wave analysis sizes a wave from
the per-SM limits and the SM count, `kperf ab`'s static verdict judges registers and shared
memory by the occupancy they cost (both through :mod:`kperf_ci.occupancy`, CUDA's occupancy rules
on these limits), and plausibility checks a timing against the GPU's peaks.
Nothing here probes a device (that is :mod:`kperf_ci.device`); the one subprocess is the
toolchain's ``ptxas --help``, to learn which targets the installed Triton compiles for.

**One spelling of an arch.** :func:`normalize_arch` gives ``"sm_<capability>"`` and drops a
feature suffix (``"sm_90a"`` -> ``"sm_90"``). Triton targets a capability number
(``GPUTarget("cuda", 90, 32)``) and itself compiles capability 90 and up as the ``a`` target
(``triton.backends.nvidia.compiler.sm_arch_from_capability``), so ``sm_90`` and ``sm_90a`` are one
compile. Variant keys in every stored database say ``"sm_90"``, and a baseline must keep matching
them; ``[tool.kperf] arch`` accepts both spellings (each checked against what ptxas supports, see
``kperf_ci.config``) and keeps one.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

__all__ = [
    "ARCHS",
    "GPUS",
    "MAX_SHARED_PER_BLOCK",
    "PEAKS",
    "ArchLimits",
    "GpuSpec",
    "arch_capability",
    "arch_limits",
    "device_peak",
    "gpu_spec",
    "max_shared_per_block",
    "normalize_arch",
    "parse_arch",
    "supported_archs",
]

# --------------------------------------------------------------------------- arch names

# "sm_90", "sm90", "90", "SM_90a": what a person may write for a target
_ARCH_RE = re.compile(r"^(?:sm_?)?(\d{2,3})([a-z]?)$")


def parse_arch(value: Any) -> tuple[int, str] | None:
    """(capability, feature suffix) of a strictly spelled arch ("sm_90a" -> (90, "a")); None when
    ``value`` is not an arch spelling (a GPU name, a typo). For input a person typed."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return None
    m = _ARCH_RE.match(str(value).strip().lower())
    return (int(m.group(1)), m.group(2)) if m else None


def arch_capability(arch: str | int) -> int:
    """ "sm_90" / "sm_90a" / "90" / 90 -> 90: the first number in ``arch``.

    Lenient on purpose: it reads what compiled kernels report (``metadata.target.arch``, an int or
    a string) as well as what a person wrote, and the variant keys already stored were made by it."""
    if isinstance(arch, int):
        return arch
    m = re.search(r"(\d+)", str(arch))
    if not m:
        raise ValueError(f"bad arch {arch!r}: expected e.g. 'sm_90'")
    return int(m.group(1))


def normalize_arch(arch: str | int) -> str:
    """The one stored spelling of an arch: "90" / 90 / "sm_90" / "sm_90a" -> "sm_90" (see the
    module docstring for why the suffix goes)."""
    return f"sm_{arch_capability(arch)}"


# --------------------------------------------------------------------------- per-arch limits


@dataclass(frozen=True)
class ArchLimits:
    """Limits of one architecture (the CUDA occupancy calculator's numbers).

    Every row knows ``smem_per_block`` (a kernel that asks for more cannot launch). The per-SM
    fields are None for an arch whose per-SM numbers are not tabulated here: an occupancy for it
    is an error (:func:`arch_limits`), never a guess."""

    arch: str
    smem_per_block: int  # max shared memory per CTA, dynamic and opt-in, bytes
    sm_count: int | None = None  # of the usual flagship part; pass the real count when known
    smem_per_sm: int | None = None
    max_warps_per_sm: int | None = None
    max_blocks_per_sm: int | None = None
    smem_reserved_per_block: int = 1024  # sm_80+ reserve 1 KB of shared memory per CTA
    smem_alloc_unit: int = 128  # a CTA's shared memory is allocated in units of this
    regs_per_sm: int = 65536
    max_regs_per_thread: int = 255
    reg_alloc_unit: int = 256  # registers per warp are allocated in units of this
    sub_partitions: int = 4  # register file is split per SM sub-partition (warp scheduler)
    warp_size: int = 32

    @property
    def capability(self) -> int:
        return arch_capability(self.arch)

    @property
    def has_sm_limits(self) -> bool:
        return None not in (self.sm_count, self.smem_per_sm, self.max_warps_per_sm, self.max_blocks_per_sm)


def _arch(arch: str, smem_per_block: int, **sm: Any) -> tuple[str, ArchLimits]:
    return arch, ArchLimits(arch, smem_per_block, **sm)


# sm_count is the usual part's: H100 PCIe has 114, H100/H200 SXM 132, A100 108, B200 148.
ARCHS: dict[str, ArchLimits] = dict(
    [
        _arch(
            "sm_75",
            65536,
            sm_count=40,
            smem_per_sm=65536,
            smem_reserved_per_block=0,
            max_warps_per_sm=32,
            max_blocks_per_sm=16,
        ),
        _arch("sm_80", 166912, sm_count=108, smem_per_sm=167936, max_warps_per_sm=64, max_blocks_per_sm=32),
        _arch("sm_86", 101376, sm_count=84, smem_per_sm=102400, max_warps_per_sm=48, max_blocks_per_sm=16),
        _arch("sm_87", 166912),
        _arch("sm_89", 101376, sm_count=58, smem_per_sm=102400, max_warps_per_sm=48, max_blocks_per_sm=24),
        _arch("sm_90", 232448, sm_count=132, smem_per_sm=233472, max_warps_per_sm=64, max_blocks_per_sm=32),
        _arch("sm_100", 232448, sm_count=148, smem_per_sm=233472, max_warps_per_sm=64, max_blocks_per_sm=32),
        _arch("sm_101", 232448),
        _arch("sm_103", 232448),
        _arch("sm_120", 101376, sm_count=170),  # RTX 5090; its per-SM limits are not tabulated
    ]
)

#: The most SMs a trace or a run may name: 8x the largest part in the table above. Per-SM
#: work and arrays follow this number, so an SM id or count read from a file is checked against
#: it (an ``sm`` of 10**7 in a trace cost 476 s and 4.4 GB; 10**9 ran out of memory).
#: Rows with per-SM limits only: sm_120's SM count (for a device stand-in) does not move a bound
#: that stored runs and the fuzz tests pin at 8 x 148.
MAX_SMS = 8 * max(a.sm_count for a in ARCHS.values() if a.has_sm_limits and a.sm_count)

#: Max shared memory per CTA (dynamic, opt-in), bytes, by compute capability.
MAX_SHARED_PER_BLOCK: dict[int, int] = {a.capability: a.smem_per_block for a in ARCHS.values()}


# --------------------------------------------------------------------------- per-GPU facts

TB = 1e12
MiB = 1 << 20

FLOP_KINDS = ("fp64", "fp32", "tf32_tensor", "fp16_tensor", "bf16_tensor", "fp8_tensor", "int8_tensor")


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model, matched by its device name (``torch.cuda.get_device_name()``): arch, SM
    count and, where tabulated, its peaks (dense, no structured sparsity, at boost clock, from
    the vendor's datasheet)."""

    name: str
    pattern: str  # regex, case-insensitive, searched in the device name
    arch: str
    sm_count: int
    hbm_bytes_per_s: float | None = None  # DRAM bandwidth
    flops: Mapping[str, float] = field(default_factory=dict)  # per FLOP_KINDS key, FLOP/s (dense)
    l2_bytes: int | None = None
    source: str = ""

    def matches(self, device_name: str) -> bool:
        return re.search(self.pattern, device_name, re.IGNORECASE) is not None

    @property
    def has_peaks(self) -> bool:
        return self.hbm_bytes_per_s is not None and bool(self.flops)

    @property
    def max_flops(self) -> float:
        return max(self.flops.values())


def _f(fp64, fp32, tf32, fp16, fp8=None, int8=None) -> dict[str, float]:  # noqa: ANN001
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
GPUS: tuple[GpuSpec, ...] = (
    GpuSpec(
        "H100 NVL",
        r"H100.*NVL",
        "sm_90",
        132,
        3.9 * TB,
        _f(30, 60, 417.5, 835.5, 1670.5, 1670.5),
        50 * MiB,
        "NVIDIA H100 datasheet (NVL, per GPU)",
    ),
    GpuSpec(
        "H100 PCIe",
        r"H100.*PCIe",
        "sm_90",
        114,
        2.0 * TB,
        _f(25.6, 51.2, 378, 756.5, 1513, 1513),
        50 * MiB,
        "NVIDIA H100 datasheet (PCIe)",
    ),
    GpuSpec(
        "H100 SXM",
        r"H100",
        "sm_90",
        132,
        3.35 * TB,
        _f(34, 66.9, 494.7, 989.4, 1978.9, 1978.9),
        50 * MiB,
        "NVIDIA H100 datasheet (SXM5)",
    ),
    GpuSpec(
        "H200 NVL",
        r"H200.*NVL",
        "sm_90",
        132,
        4.8 * TB,
        _f(30, 60, 417.5, 835.5, 1670.5, 1670.5),
        50 * MiB,
        "NVIDIA H200 datasheet (NVL)",
    ),
    GpuSpec(  # also GH200: its GPU is an H200-class part
        "H200 SXM",
        r"H200",
        "sm_90",
        132,
        4.8 * TB,
        _f(34, 66.9, 494.7, 989.4, 1978.9, 1978.9),
        50 * MiB,
        "NVIDIA H200 datasheet (SXM)",
    ),
    GpuSpec("H800", r"H800", "sm_90", 132),
    GpuSpec(
        "A100 80GB PCIe",
        r"A100.*(80GB.*PCIe|PCIe.*80GB)",
        "sm_80",
        108,
        1.935 * TB,
        _f(9.7, 19.5, 156, 312, None, 624),
        40 * MiB,
        "NVIDIA A100 datasheet (80GB PCIe)",
    ),
    GpuSpec(
        "A100 80GB SXM",
        r"A100.*80GB",
        "sm_80",
        108,
        2.039 * TB,
        _f(9.7, 19.5, 156, 312, None, 624),
        40 * MiB,
        "NVIDIA A100 datasheet (80GB SXM)",
    ),
    GpuSpec(
        "A100 40GB",
        r"A100",
        "sm_80",
        108,
        1.555 * TB,
        _f(9.7, 19.5, 156, 312, None, 624),
        40 * MiB,
        "NVIDIA A100 datasheet (40GB)",
    ),
    GpuSpec("A800", r"A800", "sm_80", 108),
    GpuSpec("A30", r"A30", "sm_80", 56),
    GpuSpec("A10G", r"A10G", "sm_86", 80),
    GpuSpec("A10", r"A10", "sm_86", 72),
    GpuSpec("RTX 3090", r"RTX 3090", "sm_86", 82),
    GpuSpec(
        "L40S",
        r"L40S",
        "sm_89",
        142,
        0.864 * TB,
        _f(1.4, 91.6, 183, 362.05, 733, 733),
        96 * MiB,
        "NVIDIA L40S datasheet",
    ),
    # the L40 is an L40S-class part (142 SMs), not an L4: the L4 pattern below excludes it
    GpuSpec("L40", r"L40(?!S)", "sm_89", 142),
    GpuSpec(
        "L4",
        r"\bL4(?![0-9S])",
        "sm_89",
        58,
        0.3 * TB,
        _f(0.49, 30.3, 60, 121, 242.5, 242.5),
        48 * MiB,
        "NVIDIA L4 datasheet",
    ),
    GpuSpec("RTX 4090", r"RTX 4090", "sm_89", 128),
    GpuSpec("B200", r"B200", "sm_100", 148),
    GpuSpec("T4", r"T4", "sm_75", 40),
)

#: The GPUs whose peaks are tabulated, in match order.
PEAKS: tuple[GpuSpec, ...] = tuple(g for g in GPUS if g.has_peaks)


def gpu_spec(device_name: str | None) -> GpuSpec | None:
    """The table's row for a device name ("NVIDIA H100 80GB HBM3" -> H100 SXM), or None."""
    if not device_name:
        return None
    return next((g for g in GPUS if g.matches(device_name)), None)


def device_peak(device_name: str | None) -> GpuSpec | None:
    """The row with peaks for a device name, or None if its peaks are unknown."""
    if not device_name:
        return None
    return next((g for g in PEAKS if g.matches(device_name)), None)


def max_shared_per_block(capability: int) -> int:
    """Max shared memory per CTA of a capability; for one the table does not know, the largest of
    any arch: an ahead-of-time lowering needs a limit, and the largest rejects no kernel that
    might fit on the part it will run on."""
    return MAX_SHARED_PER_BLOCK.get(capability, max(MAX_SHARED_PER_BLOCK.values()))


# --------------------------------------------------------------------------- per-SM limits of a part


def arch_limits(arch: str | int, sm_count: int | None = None) -> ArchLimits:
    """Per-SM limits for "sm_90", "sm_90a", "90", 90, or a GPU name like "NVIDIA H100 80GB HBM3"
    (whose SM count then replaces the flagship's). ValueError for an arch without per-SM limits."""
    lim: ArchLimits | None = None
    if parse_arch(arch) is not None:
        lim = ARCHS.get(normalize_arch(arch))
    elif (gpu := gpu_spec(str(arch).strip())) is not None:
        lim = replace(ARCHS[gpu.arch], sm_count=gpu.sm_count)
    if lim is None or not lim.has_sm_limits:
        known = sorted((a for a, v in ARCHS.items() if v.has_sm_limits), key=arch_capability)
        raise ValueError(f"unknown arch {arch!r}: expected one of {known} or a known GPU name")
    return replace(lim, sm_count=sm_count) if sm_count else lim


# --------------------------------------------------------------------------- toolchain targets

# Without Triton's ptxas to ask: every tabulated arch, and the "a" target Triton compiles
# capability 90 and up as
_FALLBACK_ARCHS: tuple[str, ...] = tuple(
    sorted(
        {*ARCHS, *(f"{a}a" for a, v in ARCHS.items() if v.capability >= 90)},
        key=lambda a: (arch_capability(a), a),
    )
)


@functools.lru_cache(maxsize=1)
def supported_archs() -> tuple[str, ...]:
    """Targets the installed Triton's nvidia backend can compile for: what its bundled ptxas
    (sm < 100) and ptxas-blackwell (sm >= 100) accept, from sm_75 on; the table's archs without
    Triton."""
    try:
        import importlib.util

        spec = importlib.util.find_spec("triton")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return _FALLBACK_ARCHS
    bindir = Path(next(iter(spec.submodule_search_locations))) / "backends" / "nvidia" / "bin"
    found: set[str] = set()
    for tool, env, keep in (
        ("ptxas", "TRITON_PTXAS_PATH", lambda n: n < 100),
        ("ptxas-blackwell", "TRITON_PTXAS_BLACKWELL_PATH", lambda n: n >= 100),
    ):
        exe = os.environ.get(env) or str(bindir / tool)
        try:
            out = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        for num, suffix in re.findall(r"'sm_(\d+)(a?)'", out):
            if int(num) >= 75 and keep(int(num)):
                found.add(f"sm_{num}{suffix}")
    if not found:
        return _FALLBACK_ARCHS
    return tuple(sorted(found, key=lambda a: (arch_capability(a), a)))
