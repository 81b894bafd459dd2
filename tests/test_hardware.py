"""kperf_ci.hardware: arch names, the per-arch and per-GPU table, occupancy from its limits
(computed in kperf_ci.analysis.occupancy)."""

from __future__ import annotations

import pytest

from kperf_ci import hardware
from kperf_ci.analysis.occupancy import occupancy
from kperf_ci.hardware import (
    ARCHS,
    GPUS,
    MAX_SHARED_PER_BLOCK,
    PEAKS,
    arch_capability,
    arch_limits,
    device_peak,
    gpu_spec,
    normalize_arch,
    parse_arch,
)

KB = 1024

# --------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    "value, expected",
    [
        ("sm_90", "sm_90"),
        ("sm_90a", "sm_90"),
        ("90", "sm_90"),
        (90, "sm_90"),
        ("SM_100a", "sm_100"),
        (80, "sm_80"),
    ],
)
def test_one_stored_spelling_drops_the_feature_suffix(value, expected):
    # variant keys in every committed database say "sm_90": a baseline must keep matching them
    assert normalize_arch(value) == expected
    assert arch_capability(value) == int(expected[3:])


def test_parse_arch_is_strict_and_keeps_the_suffix():
    assert parse_arch("SM90A") == (90, "a") and parse_arch("sm_80") == (80, "") and parse_arch(75) == (75, "")
    for not_an_arch in ("NVIDIA H100 80GB HBM3", "hopper", "sm_1", "", None, True, 9.0):
        assert parse_arch(not_an_arch) is None
    with pytest.raises(ValueError, match="bad arch"):
        arch_capability("hopper")


# --------------------------------------------------------------------------- the table


def test_one_table_serves_every_reader():
    # compare's and the Proton lowering's per-CTA cap is the same row the wave analysis reads
    assert MAX_SHARED_PER_BLOCK == {arch_capability(a): lim.smem_per_block for a, lim in ARCHS.items()}
    assert MAX_SHARED_PER_BLOCK[90] == 232448 and MAX_SHARED_PER_BLOCK[86] == 101376
    assert arch_limits("sm_90").smem_per_block == MAX_SHARED_PER_BLOCK[90]
    for gpu in GPUS:  # every GPU row names an arch whose per-SM limits are known
        assert ARCHS[gpu.arch].has_sm_limits, gpu.name
        assert arch_limits(f"NVIDIA {gpu.name}").sm_count == gpu.sm_count, gpu.name
    for lim in ARCHS.values():
        if lim.has_sm_limits:
            assert lim.smem_per_block <= lim.smem_per_sm  # a CTA that fits the cap fits an SM
    assert PEAKS == tuple(g for g in GPUS if g.has_peaks) and len(PEAKS) == 10


@pytest.mark.parametrize(
    "name, row, arch, sms",
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM", "sm_90", 132),
        ("NVIDIA H100 PCIe", "H100 PCIe", "sm_90", 114),
        ("NVIDIA GH200 480GB", "H200 SXM", "sm_90", 132),
        ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM", "sm_80", 108),
        ("NVIDIA A10G", "A10G", "sm_86", 80),
        ("NVIDIA A10", "A10", "sm_86", 72),
        ("NVIDIA L40S", "L40S", "sm_89", 142),
        ("NVIDIA L40", "L40", "sm_89", 142),  # not an L4 (58 SMs)
        ("NVIDIA L4", "L4", "sm_89", 58),
        ("Tesla T4", "T4", "sm_75", 40),
    ],
)
def test_gpu_rows_most_specific_first(name, row, arch, sms):
    g = gpu_spec(name)
    assert (g.name, g.arch, g.sm_count) == (row, arch, sms)
    lim = arch_limits(name)
    assert (lim.arch, lim.sm_count) == (arch, sms)


def test_peaks_only_where_tabulated():
    assert device_peak("NVIDIA L40") is None and gpu_spec("NVIDIA L40") is not None
    assert device_peak("NVIDIA H800") is None and device_peak("") is None and gpu_spec(None) is None
    h100 = device_peak("NVIDIA H100 80GB HBM3")
    assert h100.hbm_bytes_per_s == pytest.approx(3.35e12) and h100.max_flops == pytest.approx(1978.9e12)


def test_arch_limits_refuses_what_it_does_not_know():
    # sm_120's per-CTA cap is known, its per-SM numbers are not tabulated: no occupancy guess
    assert "sm_120" in ARCHS and not ARCHS["sm_120"].has_sm_limits
    for unknown in ("sm_120", "sm_1", "NVIDIA GeForce GT 710", 61):
        with pytest.raises(ValueError, match="unknown arch"):
            arch_limits(unknown)
    assert arch_limits("sm_90a") == arch_limits("sm_90")
    assert arch_limits(90, sm_count=100).sm_count == 100


def test_fallback_targets_without_triton():
    fallback = hardware._FALLBACK_ARCHS
    assert {"sm_75", "sm_80", "sm_90", "sm_90a", "sm_100", "sm_100a", "sm_120"} <= set(fallback)
    assert "sm_80a" not in fallback  # Triton compiles the "a" target from capability 90 on only
    assert list(fallback) == sorted(fallback, key=lambda a: (arch_capability(a), a))


# --------------------------------------------------------------------------- occupancy


def test_shared_memory_counts_the_reserved_kilobyte():
    # sm_90: 228 KB per SM. 114 KB per CTA + 1 KB reserved = 115 KB: two would need 230 KB
    occ = occupancy(num_warps=4, shared_bytes=114 * KB, arch="sm_90")
    assert occ.limits["shared_memory"] == 1 and occ.ctas_per_sm == 1 and occ.limited_by == "shared_memory"
    # just under: 112 KB + 1 KB twice fits in 228 KB
    assert occupancy(num_warps=4, shared_bytes=112 * KB, arch="sm_90").limits["shared_memory"] == 2
    # sm_75 reserves nothing: 32 KB twice fills its 64 KB exactly
    assert occupancy(num_warps=4, shared_bytes=32 * KB, arch="sm_75").limits["shared_memory"] == 2


def test_shared_memory_is_allocated_in_128_byte_units():
    # 45,600 B + 1 KB = 46,624 B, rounded up to 46,720 B (365 x 128): 5 x 46,720 > 233,472 B,
    # so 4 CTAs fit, where the unrounded 46,624 B would let 5 in
    occ = occupancy(num_warps=1, shared_bytes=45_600, arch="sm_90")
    assert occ.limits["shared_memory"] == 4 and occ.ctas_per_sm == 4


def test_registers_are_allocated_per_warp_per_sub_partition():
    # 168 registers x 32 threads = 5376, rounded to 5376 (21 x 256); 16384 per sub-partition
    # hold 3 such warps, 12 per SM: one 8-warp CTA (and the 64-warp limit would allow 8)
    occ = occupancy(num_warps=8, registers=168, arch="sm_90")
    assert occ.limits["registers"] == 1 and occ.limits["warps"] == 8
    with pytest.raises(ValueError, match="exceed the sm_90 limit 255"):
        occupancy(num_warps=4, registers=256, arch="sm_90")
    with pytest.raises(ValueError, match="per-CTA limit 232448"):
        occupancy(num_warps=4, shared_bytes=232449, arch="sm_90")
