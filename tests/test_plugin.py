"""The pytest plugin end to end, on sample test files run by pytester in a subprocess.

A subprocess per run because static mode must switch Triton to its interpreter before any kernel
is defined, exactly as it does for users.
"""

from __future__ import annotations

import sqlite3
import textwrap

import pytest

pytest.importorskip("triton")
pytest.importorskip("torch")

ADD_KERNEL = """
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


def add(x, y):
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, 256),)](x, y, out, n, BLOCK=256)
    return out
"""


@pytest.fixture
def sample(pytester: pytest.Pytester):
    pytester.makepyfile(kernels_add=ADD_KERNEL)
    return pytester


def _rows(db, sql: str) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


# one marked test that benchmarks the sample's add kernel once
ONE_ADD_TEST = """
import pytest, torch
from kernels_add import add

@pytest.mark.kperf
def test_add(kperf):
    kperf.bench(add, torch.rand(64), torch.rand(64))
"""


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


def test_disabled_plugin_is_a_plain_call(sample: pytest.Pytester) -> None:
    sample.makepyfile(
        test_plain="""
        import pytest

        @pytest.mark.kperf(name="add")
        def test_add(kperf):
            assert kperf.mode == "off"
            assert kperf.bench(lambda a, b: a + b, 1, 2) == 3
        """
    )
    result = run(sample)
    result.assert_outcomes(passed=1)
    assert not (sample.path / "reports").exists()
    assert "kperf:" not in result.stdout.str()


def test_static_mode_stores_variants_per_arch(sample: pytest.Pytester) -> None:
    sample.makepyfile(
        test_add="""
        import pytest, torch
        from kernels_add import add

        @pytest.mark.kperf(name="vector_add", tags=["memory-bound"], thresholds={"registers": 0.2})
        @pytest.mark.parametrize("n", [4096, 1000])
        def test_add(kperf, n):
            assert kperf.mode == "static"
            x = torch.rand(n); y = torch.rand(n)
            torch.testing.assert_close(kperf.bench(add, x, y), x + y)
        """
    )
    result = run(sample, "--kperf", "--kperf-arch", "sm_80,sm_90", "--kperf-db", "run.db")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*kperf: 4 variant(s) captured in static mode for sm_80, sm_90*"])
    db = sample.path / "run.db"
    variants = _rows(db, "select kernel_id, arch, spec from variants order by arch, spec")
    # n=4096 is divisible by 16, n=1000 is not: two specializations, each for two archs.
    assert len(variants) == 4
    assert {v[1] for v in variants} == {"sm_80", "sm_90"}
    names = {r[0] for r in _rows(db, "select name from metrics")}
    assert {"registers", "spills", "shared_bytes", "sass.instructions", "sass.global_load"} <= names
    tags = _rows(db, "select distinct tags, thresholds from run_variants")
    assert tags and "memory-bound" in tags[0][0] and "registers" in tags[0][1]


def test_autotuned_kernel_without_bench_call_is_captured(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        kernels_scale="""
        import torch, triton
        import triton.language as tl

        @triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=2),
                                  triton.Config({"BLOCK": 128}, num_warps=4)], key=["n"])
        @triton.jit
        def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)

        def scale(x):
            out = torch.empty_like(x)
            scale_kernel[lambda m: (triton.cdiv(x.numel(), m["BLOCK"]),)](x, out, x.numel())
            return out
        """
    )
    pytester.makepyfile(
        test_scale="""
        import pytest, torch
        from kernels_scale import scale

        @pytest.mark.kperf
        def test_scale():
            x = torch.rand(512)
            torch.testing.assert_close(scale(x), 2 * x)
        """
    )
    result = run(pytester, "--kperf", "--kperf-arch", "sm_90", "--kperf-db", "run.db")
    result.assert_outcomes(passed=1)
    configs = {r[0] for r in _rows(pytester.path / "run.db", "select config from variants")}
    assert len(configs) == 2, configs  # every autotune config is a variant


def test_bad_marker_fails_only_that_test(sample: pytest.Pytester) -> None:
    sample.makepyfile(
        test_marker="""
        import pytest

        @pytest.mark.kperf(nmae="typo")
        def test_bad(kperf):
            pass

        @pytest.mark.kperf(thresholds={"registers": "ten"})
        def test_bad_threshold(kperf):
            pass

        # a NaN threshold compares False with everything: it silently switched the gate off
        @pytest.mark.kperf(thresholds={"time": float("nan")})
        def test_nan_threshold(kperf):
            pass

        # stored as given, this crashed a later `kperf compare`
        @pytest.mark.kperf(metrics=[42])
        def test_metric_number(kperf):
            pass

        # was a raw TypeError (iterating an int)
        @pytest.mark.kperf(metrics=42)
        def test_metrics_not_a_list(kperf):
            pass

        @pytest.mark.kperf(tags=7)
        def test_tags_not_a_list(kperf):
            pass

        @pytest.mark.kperf(bytes=float("inf"))
        def test_infinite_bytes(kperf):
            pass

        def test_other():
            pass
        """
    )
    result = run(sample, "--kperf", "--kperf-db", "run.db")
    result.assert_outcomes(passed=1, errors=7)
    result.stdout.fnmatch_lines_random(
        [
            "*test_bad*unknown kperf marker argument(s) nmae; allowed: name, tags*",
            "*test_bad_threshold*kperf marker threshold 'registers' must be a finite number >= 0*'ten'",
            "*test_nan_threshold*kperf marker threshold 'time' must be a finite number >= 0*nan",
            "*test_metric_number*kperf marker metrics= must be a string or a list of strings*[[]42]",
            "*test_metrics_not_a_list*kperf marker metrics= must be a string or a list of strings*42",
            "*test_tags_not_a_list*kperf marker tags= must be a string or a list of strings*7",
            "*test_infinite_bytes*kperf marker bytes= must be a finite number >= 0*inf",
        ]
    )
    assert "TypeError" not in result.stdout.str()


def _write_mixed(sample: pytest.Pytester) -> None:
    """A good kernel and one that runs in the interpreter but does not compile."""
    # The interpreter runs an 8x8 tl.dot; the real compiler requires blocks of at least 16.
    sample.makepyfile(
        kernels_bad="""
        import torch, triton
        import triton.language as tl

        @triton.jit
        def dot_kernel(a_ptr, b_ptr, c_ptr, B: tl.constexpr):
            r = tl.arange(0, B)
            a = tl.load(a_ptr + r[:, None] * B + r[None, :])
            b = tl.load(b_ptr + r[:, None] * B + r[None, :])
            tl.store(c_ptr + r[:, None] * B + r[None, :], tl.dot(a, b))

        def dot(a, b):
            c = torch.empty_like(a)
            dot_kernel[(1,)](a, b, c, B=a.shape[0])
            return c
        """
    )
    sample.makepyfile(
        test_mixed="""
        import pytest, torch
        from kernels_add import add
        from kernels_bad import dot

        @pytest.mark.kperf
        def test_good(kperf):
            x = torch.rand(256)
            kperf.bench(add, x, x)

        @pytest.mark.kperf
        def test_bad(kperf):
            a = torch.rand(8, 8)
            torch.testing.assert_close(kperf.bench(dot, a, a), a @ a, atol=1e-3, rtol=1e-3)
        """
    )


def test_compile_failure_is_reported_per_test(sample: pytest.Pytester) -> None:
    _write_mixed(sample)
    result = run(sample, "--kperf", "--kperf-arch", "sm_90", "--kperf-db", "run.db")
    assert result.ret == 1, result.stdout.str()
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*kperf ERROR test_mixed.py::test_bad: dot_kernel*sm_90*"])
    # The good kernel is stored all the same: one failure does not lose the session.
    kernels = {r[0] for r in _rows(sample.path / "run.db", "select name from kernels")}
    assert "add_kernel" in kernels  # named by its Triton kernel: the marker names none


@pytest.mark.slow
def test_xdist_workers_write_one_run_without_losing_rows(sample: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    sample.makepyfile(
        test_many="""
        import pytest, torch
        from kernels_add import add

        @pytest.mark.kperf(name="add")
        @pytest.mark.parametrize("n", [4096, 1000, 4097, 1])
        def test_add(kperf, n):
            x = torch.rand(n)
            kperf.bench(add, x, x)
        """
    )
    result = run(sample, "-n", "2", "--kperf", "--kperf-arch", "sm_90", "--kperf-db", "run.db")
    result.assert_outcomes(passed=4)
    db = sample.path / "run.db"
    runs = _rows(db, "select run_id, status from runs")
    assert len(runs) == 1 and runs[0][1] == "complete"  # marked complete by the controller at the end
    # n=4096 (divisible by 16), 1000 and 4097 (not), 1 (== 1): three specializations.
    per_run = _rows(db, "select count(*) from run_variants")
    assert per_run[0][0] == 3


def test_pytest_benchmark_fixture_is_stored(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("pytest_benchmark")
    # pytest-benchmark switches itself off in an xdist worker, which it detects by this variable;
    # the child session here is not one, even when this test runs under xdist.
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    pytester.makepyfile(
        test_bench="""
        import pytest

        @pytest.mark.kperf(name="sorting")
        def test_sort(benchmark):
            benchmark(sorted, list(range(1000, 0, -1)))
        """
    )
    result = run(pytester, "--kperf", "--kperf-db", "run.db")
    result.assert_outcomes(passed=1)
    rows = _rows(
        pytester.path / "run.db",
        "select m.name, m.value, v.arch from metrics m join variants v on v.id = m.variant_id",
    )
    names = {r[0] for r in rows}
    assert {"time.median", "time.mean", "time.min"} <= names
    assert all(r[2] == "host" and r[1] > 0 for r in rows)
    assert _rows(pytester.path / "run.db", "select count(*) from samples")[0][0] > 0


def test_corrupt_database_is_reported_not_overwritten(sample: pytest.Pytester) -> None:
    sample.makepyfile(test_one=ONE_ADD_TEST)
    db = sample.path / "run.db"
    garbage = b"this is not a database" * 100
    db.write_bytes(garbage)
    result = run(sample, "--kperf", "--kperf-arch", "sm_90", "--kperf-db", "run.db")
    # reported before any test runs (one usage line), the file left as it was
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*kperf: *run.db*"])
    assert db.read_bytes() == garbage


def test_bad_pyproject_setting_is_one_usage_line(sample: pytest.Pytester) -> None:
    sample.makepyprojecttoml(
        textwrap.dedent(
            """
            [tool.kperf]
            mode = "fast"
            """
        )
    )
    sample.makepyfile(test_x="def test_x():\n    pass\n")
    result = run(sample, "--kperf")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*kperf:*mode*"])


def test_bench_interleaved_in_static_mode_records_both(sample: pytest.Pytester) -> None:
    sample.makepyfile(
        kernels_add2="""
        import torch, triton
        import triton.language as tl

        @triton.jit
        def add2_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            m = offs < n
            tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)

        def add2(x, y):
            out = torch.empty_like(x)
            add2_kernel[(triton.cdiv(x.numel(), 128),)](x, y, out, x.numel(), BLOCK=128)
            return out
        """
    )
    sample.makepyfile(
        test_ab="""
        import pytest, torch
        from kernels_add import add
        from kernels_add2 import add2

        @pytest.mark.kperf(name="add")
        def test_old_vs_new(kperf):
            x = torch.rand(1024)
            out = kperf.bench_interleaved({"old": add, "new": add2}, x, x)
            assert set(out) == {"old", "new"}
            torch.testing.assert_close(out["old"], out["new"])
        """
    )
    result = run(sample, "--kperf", "--kperf-arch", "sm_90", "--kperf-db", "run.db")
    result.assert_outcomes(passed=1)
    kernels = {r[0] for r in _rows(sample.path / "run.db", "select name from kernels")}
    assert kernels == {"add/add_kernel", "add/add2_kernel"}


def test_missing_baseline_is_one_error_line(sample: pytest.Pytester) -> None:
    sample.makepyfile(test_one=ONE_ADD_TEST)
    result = run(
        sample, "--kperf", "--kperf-arch", "sm_90", "--kperf-db", "run.db", "--kperf-baseline", "nope.db"
    )
    # a usage error before any test runs (issue 23): not exit 1, which means a regression
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "kperf: baseline " in err and "nope.db (--kperf-baseline) does not exist; create it with" in err
    assert not (sample.path / "run.db").exists() and "passed" not in result.stdout.str()


@pytest.mark.slow
def test_regression_against_baseline_fails_the_session(sample: pytest.Pytester) -> None:
    sample.makepyfile(
        test_one="""
        import os, pytest, torch
        from kernels_add import add

        @pytest.mark.kperf(name="add")
        def test_add(kperf):
            kperf.bench(add, torch.rand(4096), torch.rand(4096))
        """
    )
    run(sample, "--kperf", "--kperf-arch", "sm_90", "--kperf-db", "base.db").assert_outcomes(passed=1)
    same = run(
        sample, "--kperf", "--kperf-arch", "sm_90", "--kperf-db", "run.db", "--kperf-baseline", "base.db"
    )
    assert same.ret == 0, same.stdout.str()
    # More arithmetic per element: more SASS instructions than the default +5% allows.
    sample.makepyfile(kernels_add=ADD_KERNEL.replace("x + y", "x * 1.5 + y * 0.5 + x * y"))
    worse = run(
        sample, "--kperf", "--kperf-arch", "sm_90", "--kperf-db", "run.db", "--kperf-baseline", "base.db"
    )
    assert worse.ret == 1, worse.stdout.str()
    worse.stdout.fnmatch_lines(["*REGRESSION*"])


@pytest.mark.slow
def test_compile_failure_under_xdist_fails_the_session(sample: pytest.Pytester) -> None:
    """A worker's exit status does not reach the controller; its kperf errors must (they were
    lost before: exit 0 with a kernel that does not compile)."""
    pytest.importorskip("xdist")
    _write_mixed(sample)
    result = run(sample, "-n", "2", "--kperf", "--kperf-arch", "sm_90", "--kperf-db", "run.db")
    assert result.ret == 1, result.stdout.str()
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*kperf ERROR test_mixed.py::test_bad: dot_kernel*sm_90*"])
    kernels = {r[0] for r in _rows(sample.path / "run.db", "select name from kernels")}
    assert "add_kernel" in kernels  # named by its Triton kernel: the marker names none


def test_collect_only_stores_nothing_and_gives_no_marking_advice(pytester: pytest.Pytester) -> None:
    """Issue 34's walk, item 10: `--kperf --kperf-all --collect-only` advised adding
    --kperf-all (given) and stored an empty run in reports/run.db, an untracked folder."""
    pytester.makepyfile(test_x="def test_x():\n    assert True\n")
    r = run(pytester, "--kperf", "--kperf-all", "--collect-only", "-q")
    assert r.ret == 0, r.stdout.str()
    out = r.stdout.str()
    assert "kperf: --collect-only: no test ran, nothing captured or stored" in out
    assert "no test ran marked" not in out and "stored in" not in out
    assert not (pytester.path / "reports" / "run.db").exists()
