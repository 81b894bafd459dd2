"""Kernel replay on a GPU (skipped without CUDA): a marked test that never calls the kperf
fixture yields timed variants, its own tensors untouched by the replay; replayed timing of a
launch agrees with kperf.bench of the same launch."""

from __future__ import annotations

import sqlite3

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

KERNELS = """
import triton
import triton.language as tl


@triton.jit
def double_inplace(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2, mask=m)


@triton.jit
def atomic_sum(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.atomic_add(out_ptr, tl.sum(x, axis=0))
"""


def _load_plugin() -> list[str]:
    from importlib.metadata import entry_points

    installed = any(ep.value == "kperf_ci.plugin" for ep in entry_points(group="pytest11"))
    return [] if installed else ["-p", "kperf_ci.plugin"]


def test_a_marked_test_without_the_fixture_yields_timed_variants(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(replay_kernels=KERNELS)
    pytester.makepyfile(
        test_inplace="""
        import pytest, torch, triton
        from replay_kernels import atomic_sum, double_inplace

        N = 1 << 20  # sums stay exact in fp32 whatever the order of the atomics
        STATE = {}


        @pytest.fixture
        def tensors():
            x = torch.arange(N, device="cuda", dtype=torch.float32) % 7
            out = torch.zeros(1, device="cuda")
            STATE.update(x=x, out=out)
            yield x, out
            # teardown runs after kperf replayed the launches: the test's results stand
            torch.cuda.synchronize()
            expected = (torch.arange(N, device="cuda", dtype=torch.float32) % 7) * 2
            assert torch.equal(x, expected), "replay changed the test's tensor"
            assert out.item() == expected.sum().item(), "replay added to the test's accumulator"


        @pytest.mark.kperf(name="inplace")
        def test_inplace(tensors):
            x, out = tensors
            grid = (triton.cdiv(N, 1024),)
            double_inplace[grid](x, N, BLOCK=1024)
            atomic_sum[grid](x, out, N, BLOCK=1024)
            atomic_sum[grid](torch.ones(N, device="cuda"), torch.zeros(1, device="cuda"), N, BLOCK=1024)
        """
    )
    result = pytester.runpytest_subprocess(
        *_load_plugin(), "-p", "no:cacheprovider", "--kperf", "--kperf-mode", "gpu", "--kperf-db", "run.db"
    )
    result.assert_outcomes(passed=1)
    con = sqlite3.connect(pytester.path / "run.db")
    rows = con.execute(
        "select k.name, m.name, m.value from metrics m join variants v on v.id = m.variant_id "
        "join kernels k on k.id = v.kernel_id"
    ).fetchall()
    by: dict[str, dict[str, float]] = {}
    for kernel, metric, value in rows:
        by.setdefault(kernel, {})[metric] = value
    # the two atomic_sum launches have the same shapes: replayed once
    assert set(by) == {"inplace/double_inplace", "inplace/atomic_sum"}, sorted(by)
    for kernel, metrics in by.items():
        assert metrics["time.median"] > 0, kernel
        assert metrics["registers"] > 0, kernel
        assert "region.kernel.cycles" in metrics or "region.body.cycles" in metrics, sorted(metrics)


def test_replayed_timing_agrees_with_kperf_bench() -> None:
    """Vector add of 2^24 floats, timed by kperf.bench and by replay in the order ABBA."""
    import triton
    import triton.language as tl

    from kperf_ci.capture.launches.replay import LaunchCopier, ReplayDevice
    from kperf_ci.measure import measure, measure_replay

    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)

    n = 1 << 24
    x, y, out = (torch.rand(n, device="cuda") for _ in range(3))

    def launch():
        add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)

    req = measure.Request(nodeid="t::add", name="add", resolve=lambda key: 12 * n if key == "bytes" else None)

    def by_bench() -> float:
        m = measure.bench(req, {"fn": launch}, (), {})
        return {mm.name: mm.value for mm in m.variants[0].metrics}["time.median"]

    def by_replay() -> float:
        copier = LaunchCopier()
        with copier.capturing():
            launch()
        m = measure_replay.replay(req, copier, ReplayDevice.cuda())
        (v,) = m.variants
        return {mm.name: mm.value for mm in v.metrics}["time.median"]

    a1, b1, b2, a2 = by_bench(), by_replay(), by_replay(), by_bench()
    bench_ms, replay_ms = (a1 + a2) / 2, (b1 + b2) / 2
    assert abs(replay_ms / bench_ms - 1) <= 0.02, (bench_ms, replay_ms, a1, b1, b2, a2)
