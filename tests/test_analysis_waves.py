"""Wave quantization with more than one CTA per SM: a wave is SMs x CTAs per SM slots."""

from __future__ import annotations

import pytest

from kperf_ci.analysis import wave_quantization
from kperf_ci.hardware import arch_limits


def by_name(findings):
    return {f.name: f for f in findings}


def test_wave_tail_is_the_fill_of_the_last_wave_in_cta_slots():
    # 2 CTAs per SM on 132 SMs: a wave is 264 slots; 265 CTAs leave 1 CTA in the second wave,
    # 1/264 full (1/132 would count SMs, not slots)
    fs = by_name(wave_quantization(265, ctas_per_sm=2, sm_count=132))
    assert fs["waves"].value == pytest.approx(265 / 264)
    assert fs["wave_tail"].value == pytest.approx(1 / 264)
    assert fs["wave_idle"].value == pytest.approx(1 - 265 / 528)
    assert "runs 1 of 264 CTA slots" in fs["wave_tail"].explanation


def test_wave_tail_from_occupancy_limits():
    # 4 warps and 100 KB of shared memory: 2 CTAs per SM on sm_90 (101 KB each of 228 KB),
    # so 400 CTAs are one full wave of 264 and a tail of 136 (136/264 full)
    fs = by_name(wave_quantization(400, num_warps=4, shared_bytes=100 * 1024, arch="NVIDIA H100 80GB HBM3"))
    assert fs["ctas_per_sm"].value == 2
    assert fs["wave_tail"].value == pytest.approx(136 / 264)
    assert fs["wave_idle"].value == pytest.approx(1 - 400 / 528)
    # the same kernel on an H100 PCIe (114 SMs): 228 slots, 400 = 228 + 172
    fs = by_name(wave_quantization(400, num_warps=4, shared_bytes=100 * 1024, arch="NVIDIA H100 PCIe"))
    assert fs["wave_tail"].value == pytest.approx(172 / 228)
    assert arch_limits("NVIDIA H100 PCIe").sm_count == 114
