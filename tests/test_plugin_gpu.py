"""GPU mode of the plugin end to end (skipped without CUDA): times, regions, interleaved A/B."""

from __future__ import annotations

import sqlite3

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

KERNELS = """
import torch, triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, FACTOR: tl.constexpr, EXTRA: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    for _ in tl.static_range(EXTRA):  # planted arithmetic, same result
        x = x * 1.0000001 + 0.0
    tl.store(out_ptr + offs, x * FACTOR, mask=m)


def scale(x, extra=0):
    out = torch.empty_like(x)
    scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), FACTOR=2.0, EXTRA=extra, BLOCK=1024)
    return out


def scale_slow(x):
    return scale(x, extra=64)
"""


def _load_plugin() -> list[str]:
    """`-p kperf_ci.plugin` where kperf-ci is importable but not installed (e.g. a GPU machine
    running from a checkout); an installed plugin is loaded through its entry point already."""
    from importlib.metadata import entry_points

    installed = any(ep.value == "kperf_ci.plugin" for ep in entry_points(group="pytest11"))
    return [] if installed else ["-p", "kperf_ci.plugin"]


def test_gpu_mode_stores_times_regions_and_interleaved_variants(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(kernels_scale=KERNELS)
    pytester.makepyfile(
        test_scale="""
        import pytest, torch
        from kernels_scale import scale, scale_slow

        @pytest.mark.kperf(name="scale", bytes=lambda: 8 * (1 << 24))
        def test_scale(kperf):
            assert kperf.mode == "gpu"
            x = torch.rand(1 << 24, device="cuda")
            torch.testing.assert_close(kperf.bench(scale, x), 2 * x)

        @pytest.mark.kperf(name="scale_ab")
        def test_scale_ab(kperf):
            x = torch.rand(1 << 24, device="cuda")
            out = kperf.bench_interleaved({"fast": scale, "slow": scale_slow}, x)
            torch.testing.assert_close(out["fast"], out["slow"], rtol=1e-4, atol=1e-4)
        """
    )
    result = pytester.runpytest_subprocess(
        *_load_plugin(), "-p", "no:cacheprovider", "--kperf", "--kperf-mode", "gpu", "--kperf-db", "run.db"
    )
    result.assert_outcomes(passed=2)
    con = sqlite3.connect(pytester.path / "run.db")
    rows = con.execute(
        "select k.name, m.name, m.value from metrics m join variants v on v.id = m.variant_id "
        "join kernels k on k.id = v.kernel_id"
    ).fetchall()
    by = {}
    for kernel, metric, value in rows:
        by.setdefault(kernel, {})[metric] = value
    assert set(by) == {"scale", "scale_ab[fast]", "scale_ab[slow]"}
    for kernel, metrics in by.items():
        assert metrics["time.median"] > 0, kernel
        assert metrics["time.ci_low"] <= metrics["time.median"] <= metrics["time.ci_high"]
        assert "region.kernel.cycles" in metrics or "region.body.cycles" in metrics, sorted(metrics)
        assert metrics["registers"] > 0
    # Bandwidth declared on the marker: below the device's peak, or the timing is flagged.
    assert 0 < by["scale"]["analysis.bandwidth_fraction"] < 1
    # The planted arithmetic shows in the instruction mix of the slow variant.
    assert by["scale_ab[slow]"]["sass.fma_alu"] > by["scale_ab[fast]"]["sass.fma_alu"]
    assert con.execute("select count(*) from samples").fetchone()[0] > 100
    assert con.execute("select count(*) from blobs where name = 'timeline.npz'").fetchone()[0] == 3
