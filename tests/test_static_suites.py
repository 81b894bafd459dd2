"""Static capture of existing suites, unmodified (issue 15): --kperf-all / mark globs, capture
without execution, fake CUDA tensors, interpreter gaps, autotune pruning, partial and empty runs.

End to end runs are pytester subprocesses (static mode switches Triton to its interpreter before
any kernel is defined); the kernels are tiny so the compile stays short.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
pytest.importorskip("torch")

from kperf_ci import store  # noqa: E402
from kperf_ci.capture.static.autotune import AutotunePolicy, over_shared_limit  # noqa: E402
from kperf_ci.config import ConfigError, load_settings  # noqa: E402
from kperf_ci.plugin.marker import mark_matches  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

KERNELS = """
import torch
import triton
import triton.language as tl
from triton.language.extra.libdevice import rsqrt
from triton.language.extra.cuda import libdevice


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def add(x, y):
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 64),)](x, y, out, x.numel(), BLOCK=64)
    return out


@triton.jit
def norm_kernel(x_ptr, out_ptr, eps, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    e = eps.to(tl.float32)  # a float scalar argument: fails in the plain 3.6 interpreter
    tl.store(out_ptr + offs, rsqrt(x + e) + libdevice.tanh(x))


def norm(x, eps):
    out = torch.empty_like(x)
    norm_kernel[(1,)](x, out, eps, N=x.numel())
    return out


@triton.jit
def bessel_kernel(x_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(out_ptr + offs, libdevice.j0(tl.load(x_ptr + offs)))  # no numpy version: not interpretable


def bessel(x):
    out = torch.empty_like(x)
    bessel_kernel[(1,)](x, out, N=x.numel())
    return out
"""

# An unedited suite: no marker, no fixture.
SUITE = """
import math
import torch
from kernels_s import add, bessel, norm


def test_add():
    x, y = torch.rand(100), torch.rand(100)
    torch.testing.assert_close(add(x, y), x + y)


def test_norm_float_scalar_and_libdevice():
    x = torch.rand(16) + 1
    torch.testing.assert_close(norm(x, 1e-5), torch.rsqrt(x + 1e-5) + torch.tanh(x))


def test_bessel_cannot_be_interpreted():
    x = torch.rand(16)
    out = bessel(x)
    assert math.isclose(float(out[0]), 1.0, abs_tol=0.3)  # checks outputs that were never computed


def test_cuda_tensors():
    x = torch.rand(64, device="cuda")
    y = torch.ones(64).cuda()
    torch.cuda.synchronize()
    torch.testing.assert_close(add(x, y), x + 1)


def test_fails_after_launch():
    add(torch.rand(8), torch.rand(8))
    assert 1 == 2, "the user's own bug"


def test_no_triton():
    assert torch.ones(2).sum() == 2
"""

AUTOTUNE = """
import torch
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"BM": 32, "BN": 32, "BK": 32}, num_stages=2, num_warps=4),
        # 256x256 + 256x256 fp16 tiles over 4 stages: ~768 KB of shared memory, far above sm_90's
        # 232,448 B: the autotuner on an H100 skips it (OutOfResources)
        triton.Config({"BM": 256, "BN": 256, "BK": 256}, num_stages=4, num_warps=8),
    ],
    key=["M"],
)
@triton.jit
def mm_kernel(a, b, c, M, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, M, BK):
        ka = k + rk
        x = tl.load(a + rm[:, None] * M + ka[None, :], mask=(rm[:, None] < M) & (ka[None, :] < M), other=0.0)
        y = tl.load(b + ka[:, None] * M + rn[None, :], mask=(ka[:, None] < M) & (rn[None, :] < M), other=0.0)
        acc += tl.dot(x, y)
    out = c + rm[:, None] * M + rn[None, :]
    tl.store(out, acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < M))


def test_mm():
    M = 32
    a = torch.randn(M, M, dtype=torch.float16)
    b = torch.randn(M, M, dtype=torch.float16)
    c = torch.empty(M, M, dtype=torch.float16)
    mm_kernel[(1,)](a, b, c, M)
"""


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rxX", *args)


def _variants(db: Path) -> list[tuple[str, str, str]]:
    return [
        (r.key.kernel, r.key.test, f"{r.key.spec} {r.key.config}") for r in store.load_run(str(db)).results
    ]


@pytest.fixture(scope="module")
def suite_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path]:
    """One static run of the unedited suite with --kperf-all (shared: the compile is the cost)."""
    d = tmp_path_factory.mktemp("suite")
    (d / "kernels_s.py").write_text(KERNELS)
    (d / "test_suite.py").write_text(SUITE)
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rxX", "test_suite.py"]
    cmd += [
        "--kperf",
        "--kperf-all",
        "--kperf-mode",
        "static",
        "--kperf-arch",
        "sm_90",
        "--kperf-db",
        "run.db",
    ]
    env = {**__import__("os").environ, "PYTHONPATH": f"{ROOT}:{d}", "KPERF_PROGRESS": "0"}
    proc = subprocess.run(cmd, cwd=d, capture_output=True, text=True, timeout=600, env=env)
    return proc, d / "run.db"


@pytest.mark.slow
def test_kperf_all_captures_tests_that_never_call_the_fixture(suite_run) -> None:
    proc, db = suite_run
    out = proc.stdout + proc.stderr
    rows = _variants(db)
    tests = {t.split("::")[-1] for _, t, _ in rows}
    assert {
        "test_add",
        "test_norm_float_scalar_and_libdevice",
        "test_bessel_cannot_be_interpreted",
    } <= tests, out
    assert "test_no_triton" not in tests


def test_interpreter_gaps_are_patched_where_execution_is_kept(suite_run) -> None:
    proc, _ = suite_run
    out = proc.stdout
    # the float-scalar / rsqrt / tanh kernel ran and the test's own assert_close held
    assert "test_norm_float_scalar_and_libdevice PASSED" in out or "1 failed" in out, out
    assert "FAILED test_suite.py::test_norm_float_scalar_and_libdevice" not in out, out


def test_kernel_the_interpreter_cannot_run_is_captured_statically(suite_run) -> None:
    proc, db = suite_run
    out = proc.stdout
    assert any(t.endswith("::test_bessel_cannot_be_interpreted") for _, t, _ in _variants(db)), out
    # its test failed on outputs that were never computed: an expected failure, said so
    assert "XFAIL test_suite.py::test_bessel_cannot_be_interpreted" in out, out
    assert "results not checked: bessel_kernel: interpreter unsupported op" in out, out
    assert "libdevice.j0 (no numpy version" in out, out
    # in words a reviewer does not read as a broken kernel (issue 38's second walk, finding 15)
    assert "the test then failed on outputs the interpreter did not compute (expected)" in out, out


def test_cuda_tensors_are_captured_on_a_cpu_machine(suite_run) -> None:
    proc, db = suite_run
    assert "FAILED test_suite.py::test_cuda_tensors" not in proc.stdout, proc.stdout
    assert any(t.endswith("::test_cuda_tensors") for _, t, _ in _variants(db))


def test_partial_capture_is_reported_with_counts_and_reasons(suite_run) -> None:
    proc, _ = suite_run
    out = proc.stdout
    assert "1 failed" in out, out  # the user's own failure stays a failure
    assert "test_fails_after_launch: test failed: 1 captured launch(es) dropped (AssertionError" in out, out
    assert "no Triton launch captured in this marked test" in out  # test_no_triton


def test_user_failures_are_not_blamed_on_kperf(suite_run) -> None:
    proc, _ = suite_run
    assert "kperf_ci/capture/static/record.py" not in proc.stdout, proc.stdout


def test_mark_globs_select_tests(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(kernels_s=KERNELS)
    pytester.makepyfile(test_suite=SUITE)
    pytester.makepyprojecttoml('[tool.kperf]\nmark = ["*::test_add"]\n')
    result = run(
        pytester,
        "test_suite.py",
        "-k",
        "test_add or test_cuda",
        "--kperf",
        "--kperf-mode",
        "static",
        "--kperf-arch",
        "sm_90",
        "--kperf-db",
        "run.db",
    )
    rows = _variants(pytester.path / "run.db")
    assert {t.split("::")[-1] for _, t, _ in rows} == {"test_add"}, result.stdout.str()


@pytest.mark.slow
def test_pruned_autotune_config_is_never_stored_or_flagged(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_at=AUTOTUNE)
    result = run(
        pytester,
        "--kperf",
        "--kperf-all",
        "--kperf-mode",
        "static",
        "--kperf-arch",
        "sm_90",
        "--kperf-autotune",
        "all",
        "--kperf-db",
        "run.db",
    )
    result.assert_outcomes(passed=1)
    configs = [c for _, t, c in _variants(pytester.path / "run.db") if t.endswith("::test_mm")]
    assert configs and all("BM=256" not in c for c in configs), configs
    assert any("BM=32" in c for c in configs), configs
    # a run compared with itself: nothing to flag
    shutil.copy(pytester.path / "run.db", pytester.path / "base.db")
    proc = subprocess.run(
        [sys.executable, "-m", "kperf_ci", "compare", "--baseline", "base.db", "--db", "run.db"],
        cwd=pytester.path,
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_autotune_policy() -> None:
    twenty = [f'{{"num_warps": "{w}", "BLOCK": "{b}"}}' for w in (1, 2, 4, 8, 16) for b in (32, 64, 128, 256)]
    assert AutotunePolicy.parse("all").select(twenty, "k") == list(range(20))
    assert AutotunePolicy.parse("chosen").select(twenty, "k") == []
    capped = AutotunePolicy.parse(4)
    picked = capped.select(twenty, "kernel_a")
    assert len(picked) == 4 and picked == sorted(picked) and picked == capped.select(twenty, "kernel_a")
    assert capped.select(twenty[:3], "kernel_a") == [0, 1, 2]
    # a config is sampled for its own values, not its position: a pull request that cuts one
    # config keeps every other sampled config in the sample (issue 34: a shifted sample read as
    # configs dropped and added)
    for cut in range(20):
        rest = twenty[:cut] + twenty[cut + 1 :]
        before = {twenty[i] for i in picked} - {twenty[cut]}
        assert before <= {rest[i] for i in capped.select(rest, "kernel_a")}, cut
    for bad in ("some", 0, -1, 2.5, True):
        with pytest.raises(ValueError):
            AutotunePolicy.parse(bad)
    assert over_shared_limit(496_640, "sm_90") and not over_shared_limit(232_448, "sm_90")
    assert not over_shared_limit(None, "sm_90") and not over_shared_limit(10**9, "sm_1")


def test_settings_mark_autotune_static_execute(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.kperf]\nmark = ["tests/ops/*"]\nautotune = "chosen"\nstatic_execute = "never"\n'
    )
    s = load_settings(tmp_path)
    assert (s.mark, s.autotune, s.static_execute) == (["tests/ops/*"], "chosen", "never")
    assert load_settings(tmp_path, {"mark": "all", "autotune": "3"}).autotune == 3
    for key, bad in (("mark", 5), ("autotune", "many"), ("autotune", 0), ("static_execute", "always")):
        with pytest.raises(ConfigError, match=key):
            load_settings(tmp_path, {key: bad})


class _Item:
    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid


def test_mark_matches_node_ids_and_paths() -> None:
    item = _Item("tests/ops/test_softmax.py::test_fwd[dtype0-shape1]")
    assert mark_matches(item, "all")
    assert mark_matches(item, ["tests/ops/*"])
    assert mark_matches(item, ["*softmax*"])
    assert mark_matches(item, ["tests/ops/test_softmax.py::test_fwd[dtype0-shape1]"])  # exact id
    assert not mark_matches(item, ["tests/other/*"])
    assert not mark_matches(item, None) and not mark_matches(item, [])


def test_empty_run_is_never_a_baseline(tmp_path: Path) -> None:
    from kperf_ci.model import Fingerprint, Metric, RunInfo, VariantKey, VariantResult

    db = str(tmp_path / "base.db")

    def info(rid: str, at: str) -> RunInfo:
        return RunInfo(
            run_id=rid,
            started_at=at,
            mode="static",
            fingerprint=Fingerprint(),
            git_sha=None,
            git_branch=None,
            kperf_version="t",
        )

    res = VariantResult(
        key=VariantKey(kernel="k", arch="sm_90", spec="", config="", test="t"),
        metrics=[Metric("registers", 32.0, "", "static", "lower")],
    )
    store.save_run(db, info("full", "2026-01-01T00:00:00+00:00"), [res])
    store.save_run(db, info("empty", "2026-01-02T00:00:00+00:00"), [])
    assert store.run_statuses(db)["empty"] == store.EMPTY
    assert store.load_run(db).info.run_id == "empty"  # kperf show still sees the latest run
    picked = store.load_run(db, baseline=True)
    assert picked.info.run_id == "full" and ("empty", store.EMPTY) in picked.skipped


def test_fake_cuda_puts_cuda_tensors_on_the_cpu_and_restores() -> None:
    import torch

    from kperf_ci.capture.static.fake_device import fake_cuda

    sync = torch.cuda.synchronize
    with fake_cuda():
        made = [
            torch.randn(4, device="cuda"),
            torch.zeros(2, device=torch.device("cuda", 0)),
            torch.ones(2).cuda(),
            torch.ones(2).to("cuda"),
            torch.ones(2).to("cuda:0", torch.float16),
            torch.empty_like(torch.ones(2), device="cuda"),
            torch.nn.Linear(2, 2).to("cuda").weight,
        ]
        torch.cuda.synchronize()
        assert torch.cuda.current_device() == 0
    assert all(t.device.type == "cpu" for t in made)
    assert made[4].dtype == torch.float16
    assert torch.cuda.synchronize is sync  # nothing left patched
    if not torch.cuda.is_available():
        with pytest.raises((AssertionError, RuntimeError)):
            torch.zeros(1, device="cuda")


@pytest.mark.slow
def test_no_save_with_a_baseline_still_judges_the_run(tmp_path: Path) -> None:
    """--kperf-no-save stores nothing, yet a baseline given with it still decides the exit code
    (a new user's walkthrough found the comparison silently skipped: a regression exited 0)."""
    (tmp_path / "kernels_s.py").write_text(KERNELS)
    test = (
        "from kernels_s import add\nimport torch\n\ndef test_add():\n    x = torch.ones(256)\n    add(x, x)\n"
    )
    (tmp_path / "test_one.py").write_text(test)
    env = {**__import__("os").environ, "PYTHONPATH": f"{ROOT}:{tmp_path}", "KPERF_PROGRESS": "0"}
    base = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "test_one.py", "--kperf", "--kperf-all"]
    base += ["--kperf-mode", "static", "--kperf-arch", "sm_90"]

    def pytest_run(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(base + list(extra), cwd=tmp_path, capture_output=True, text=True, env=env)

    first = pytest_run("--kperf-db", "base.db")
    assert first.returncode == 0, first.stdout[-2000:]
    (tmp_path / "kernels_s.py").write_text(KERNELS.replace("BLOCK=64)", "BLOCK=64, num_warps=1)", 1))
    again = pytest_run("--kperf-no-save", "--kperf-baseline", "base.db")
    assert again.returncode == 1, again.stdout[-3000:]
    assert "regressed kernel" in again.stdout
    assert not (tmp_path / "reports").exists() and sorted(p.name for p in tmp_path.glob("*.db")) == [
        "base.db"
    ]
