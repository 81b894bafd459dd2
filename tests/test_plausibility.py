"""Achieved bandwidth / FLOP rate against device peaks; above the peak is a measurement error."""

from __future__ import annotations

import pytest

from kperf_ci.hardware import PEAKS, device_peak
from kperf_ci.judge.plausibility import check, derive_bytes


@pytest.mark.parametrize(
    "name, expected",
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"),
        ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"),
        ("NVIDIA A100-SXM4-40GB", "A100 40GB"),
        ("NVIDIA A100-PCIE-40GB", "A100 40GB"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
    ],
)
def test_device_names(name, expected):
    assert device_peak(name).name == expected


def test_unknown_devices_and_table_sanity():
    assert device_peak("NVIDIA GeForce GT 710") is None and device_peak(None) is None
    h100 = device_peak("NVIDIA H100 80GB HBM3")
    assert h100.hbm_bytes_per_s == pytest.approx(3.35e12)
    assert h100.flops["fp16_tensor"] == pytest.approx(989.4e12) and h100.flops["fp32"] == pytest.approx(
        66.9e12
    )
    for p in PEAKS:
        assert 1e11 < p.hbm_bytes_per_s < 1e13 and p.flops["fp16_tensor"] > p.flops["fp32"] > 0 and p.l2_bytes


def test_vector_add_at_90pct_of_h100_bandwidth_is_plausible():
    n = 2**26
    r = check(0.27, device="NVIDIA H100 80GB HBM3", bytes=3 * 4 * n, flops=n)  # the field notes' add
    assert r.ok and 0.85 < r.bandwidth_fraction < 0.95
    assert r.bandwidth / 1e9 == pytest.approx(3 * 4 * n / 0.27e-3 / 1e9)
    assert r.flop_kind == "max" and r.flop_fraction < 0.01
    names = {m.name: m.value for m in r.to_metrics()}
    assert names["analysis.bandwidth_fraction"] == pytest.approx(r.bandwidth_fraction)
    assert set(names) == {
        "analysis.bandwidth_gbs",
        "analysis.bandwidth_fraction",
        "analysis.tflops",
        "analysis.flops_fraction",
    }
    assert "GB/s" in r.describe()


def test_above_peak_bandwidth_is_a_measurement_error():
    n = 2**26
    r = check(0.05, device="NVIDIA H100 80GB HBM3", bytes=3 * 4 * n)  # 16 TB/s: impossible
    assert (
        not r.ok and "above the H100 SXM peak" in r.problems[0] and "bytes= may be too large" in r.problems[0]
    )
    small = check(0.001, device="NVIDIA H100 80GB HBM3", bytes=8 << 20, bytes_source="derived")
    assert not small.ok and "L2" in small.problems[0] and "estimated from the arguments" in small.problems[0]
    assert check(0.27 * 0.9, device="NVIDIA H100 80GB HBM3", bytes=3 * 4 * n).ok  # within tolerance


def test_above_peak_flops_is_a_measurement_error():
    flops = 2 * 4096**3  # matmul 4096^3
    ok = check(0.24, device="NVIDIA H100 80GB HBM3", flops=flops, flop_kind="fp16_tensor")
    assert ok.ok and 0.5 < ok.flop_fraction < 0.65
    bad = check(0.1, device="NVIDIA H100 80GB HBM3", flops=flops, flop_kind="fp16_tensor")
    assert not bad.ok and "fp16_tensor peak" in bad.problems[0]
    # against the fastest unit (fp8) the same number is still plausible: that is the safe default
    assert check(0.1, device="NVIDIA H100 80GB HBM3", flops=flops).ok
    a100 = check(0.1, device="NVIDIA A100-SXM4-80GB", flops=flops, flop_kind="fp8_tensor")
    assert "no fp8_tensor peak" in a100.notes[0] and not a100.ok


def test_unknown_device_reports_rates_without_checking_and_bad_times():
    r = check(1.0, device="Some GPU", bytes=1e9, flops=1e12)
    assert r.ok and r.bandwidth == pytest.approx(1e12) and r.bandwidth_fraction is None and r.notes
    assert not check(0.0, device="NVIDIA L4", bytes=1).ok
    assert not check(float("nan"), device="NVIDIA L4").ok


def test_derive_bytes_counts_each_tensor_once():
    torch = pytest.importorskip("torch")
    x = torch.zeros(1000, dtype=torch.float32)
    y = torch.zeros(500, dtype=torch.float16)
    assert derive_bytes(x, y, 1000, BLOCK=128) == 4000 + 1000
    assert derive_bytes(x, x, [y, (y,)]) == 5000  # aliases counted once, nested containers seen
    assert derive_bytes(1, 2.0, "s") is None
