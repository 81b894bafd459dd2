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


def test_gpu_mode_flags_launch_gaps_of_a_launch_bound_sequence(pytester: pytest.Pytester) -> None:
    """16 launches of a tiny kernel: the GPU idles between them (host-bound), and kperf says so;
    one launch of a large kernel has no sequence to analyze."""
    pytester.makepyfile(kernels_scale=KERNELS)
    pytester.makepyfile(
        test_chain="""
        import pytest, torch
        from kernels_scale import scale

        def chain(x):
            for _ in range(16):
                x = scale(x)
            return x

        @pytest.mark.kperf(name="chain")
        def test_chain(kperf):
            x = torch.ones(4096, device="cuda")
            torch.testing.assert_close(kperf.bench(chain, x), x * 2**16)

        @pytest.mark.kperf(name="single")
        def test_single(kperf):
            x = torch.rand(1 << 24, device="cuda")
            torch.testing.assert_close(kperf.bench(scale, x), 2 * x)
        """
    )
    result = pytester.runpytest_subprocess(
        *_load_plugin(), "-p", "no:cacheprovider", "--kperf", "--kperf-mode", "gpu", "--kperf-db", "run.db"
    )
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["*analysis finding(s) flagged*", "*kperf finding chain*launch_gap_fraction*"]
    )
    con = sqlite3.connect(pytester.path / "run.db")
    rows = con.execute(
        "select k.name, m.name, m.value from metrics m join variants v on v.id = m.variant_id "
        "join kernels k on k.id = v.kernel_id where m.name like 'analysis.%'"
    ).fetchall()
    by: dict[str, dict[str, float]] = {}
    for kernel, metric, value in rows:
        by.setdefault(kernel, {})[metric] = value
    assert by["chain"]["analysis.launch_gap_fraction"] > 0.2, by["chain"]
    assert "analysis.launch_gap_fraction" not in by["single"]
    assert "analysis.sm_utilization" in by["single"]  # the region analyses of the instrumented launch
    from kperf_ci import store
    from kperf_ci.analysis.findings import findings_from_json
    from kperf_ci.commands.analyze import run as analyze

    db = str(pytester.path / "run.db")
    chain = next(r for r in store.load_run(db, artifacts=True).results if r.key.kernel == "chain")
    assert "kernel_records" in chain.artifacts
    flagged = {f.name for f in findings_from_json(chain.artifacts["findings"]) if f.flagged}
    assert "launch_gap_fraction" in flagged
    rep = analyze(db=db, kernel="chain")
    gaps = [lr for lr in rep.launches if lr.label.endswith("[launch gaps]")]
    assert gaps and {f.name: f for f in gaps[0].findings}["launch_gap_fraction"].flagged
