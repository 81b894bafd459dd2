"""Recorded launches -> AOT compile in worker processes -> static metrics
(kperf_ci.capture.static.compile)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("triton")
pytest.importorskip("torch")

from test_capture_record import record  # noqa: E402  (the interpreter run of record_script.py)

from kperf_ci.capture.static.compile import compile_variants, source_location  # noqa: E402
from kperf_ci.capture.static.record import LaunchSpec  # noqa: E402

ROOT = Path(__file__).parent.parent
ARCHS = ["sm_80", "sm_90"]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("static")
    launches = record(tmp)
    cache = str(tmp / "triton-cache")  # cold cache for the first run, warm for the second
    first = compile_variants(launches, ARCHS, jobs=2, cache_dir=cache, rootdir=str(ROOT))
    return {"launches": launches, "cache": cache, "results": first}


def find(results, test, arch, kernel=None):
    out = [
        r
        for r in results
        if r.key.test.endswith("::" + test)
        and r.key.arch == arch
        and (kernel is None or r.key.kernel == kernel)
    ]
    assert out, (test, arch)
    return out


def m(r, name):
    metric = r.metric(name)
    assert metric is not None, (name, r.key, r.error)
    return metric.value


@pytest.mark.slow
def test_one_result_per_unique_variant_and_arch(env):
    launches, results = env["launches"], env["results"]
    unique = {(ls.identity, ls.display_name) for ls in launches}
    assert len(results) == len(unique) * len(ARCHS)
    assert len({(r.key.id, r.key.source) for r in results}) == len(results)
    # test_add[2048] compiles to the same kernel as test_add[1024]: deduplicated, first test kept
    assert not [r for r in results if r.key.test.endswith("test_add[2048]")]


def test_vector_add_metrics(env):
    for arch in ARCHS:
        (r,) = find(env["results"], "test_add[1024]", arch)
        assert r.error is None
        assert r.key.kernel == "add_kernel" and r.key.arch == arch
        assert r.key.source == "tests/data/capture/kernels.py::add_kernel"
        assert m(r, "sass.global_load") >= 2 and m(r, "sass.global_store") >= 1
        assert m(r, "ptx.global_load") >= 2 and m(r, "ptx.global_store") >= 1
        assert m(r, "sass.mma") == 0 and m(r, "sass.wgmma") == 0
        assert 0 < m(r, "registers") <= 255
        assert m(r, "spills") == 0 and m(r, "local_bytes") == 0
        assert m(r, "num_warps") == 4
        assert m(r, "sass.instructions") >= sum(m(r, f"sass.{c}") for c in ("global_load", "global_store"))
        assert m(r, "cubin_bytes") > 0 and m(r, "ptx.instructions") > 0
        assert r.sass_hash and len(r.sass_hash) == 64
        assert "LDG" in r.artifacts["sass"] and ".entry add_kernel" in r.artifacts["ptx"]
        assert "/*0" not in r.artifacts["sass"]  # addresses stripped
        assert "fixture" in r.tags


def test_metric_names_follow_contract(env):
    (r,) = find(env["results"], "test_add[1024]", "sm_90")
    names = {x.name for x in r.metrics}
    for n in [
        "registers",
        "spills",
        "stack_bytes",
        "local_bytes",
        "shared_bytes",
        "num_warps",
        "num_stages",
        "cubin_bytes",
        "ptx.instructions",
        "sass.instructions",
        "sass.fma_alu",
        "sass.branch",
        "ptx.convert",
        "sass.other",
    ]:
        assert n in names
    assert all(x.kind == "static" for x in r.metrics)
    assert r.metric("num_warps").better == "none" and r.metric("registers").better == "lower"


def test_dot_uses_tensor_cores(env):
    (r80,) = find(env["results"], "test_matmul", "sm_80")
    (r90,) = find(env["results"], "test_matmul", "sm_90")
    assert m(r80, "sass.mma") > 0 and m(r80, "sass.wgmma") == 0
    assert m(r90, "sass.wgmma") > 0
    assert m(r90, "ptx.wgmma") > 0 and m(r80, "ptx.mma") > 0
    assert m(r80, "shared_bytes") > 0 and m(r90, "shared_bytes") > 0
    assert m(r90, "num_stages") == 3
    # pipelined loads go through async copies
    assert m(r80, "sass.async_copy") > 0
    assert r80.sass_hash != r90.sass_hash


def test_specialization_gives_different_variants(env):
    (a,) = find(env["results"], "test_add[1024]", "sm_90")
    (b,) = find(env["results"], "test_add[1000]", "sm_90")
    assert a.key.id != b.key.id and a.key.spec != b.key.spec
    assert a.sass_hash != b.sass_hash


def test_autotune_configs_all_compiled(env):
    rs = find(env["results"], "test_autotune", "sm_90")
    assert len(rs) == 3 and all(r.error is None for r in rs)
    assert sorted(m(r, "num_warps") for r in rs) == [2, 4, 4]
    assert len({r.key.id for r in rs}) == 3


def test_compile_failure_is_reported_per_variant(env):
    for arch in ARCHS:
        (r,) = find(env["results"], "test_broken", arch)
        assert r.error and "\n" not in r.error and not r.metrics
        assert " at 0x" not in r.error  # no object addresses: the same failure reads the same
    # the others still compiled
    ok = [r for r in env["results"] if r.key.kernel not in ("broken_kernel", "local_kernel")]
    assert all(r.error is None for r in ok)


def test_a_failed_kernel_reads_the_same_whichever_worker_compiled_it(env):
    """Triton keeps a placeholder hash after a failed dependency walk: a worker that compiled the
    kernel for sm_80 first failed sm_90 with another error (a NameError from codegen)."""
    broken = [ls for ls in env["launches"] if ls.test.endswith("::test_broken")]
    one_worker = compile_variants(broken, ARCHS, jobs=1, cache_dir=env["cache"], rootdir=str(ROOT))
    assert len({r.error for r in one_worker}) == 1, [r.error for r in one_worker]
    assert {r.error for r in one_worker} == {r.error for r in find(env["results"], "test_broken", "sm_90")}


def test_closure_reported_not_importable(env):
    for arch in ARCHS:
        (r,) = find(env["results"], "test_closure", arch)
        assert r.error.startswith("not importable: define the kernel at module level")


def test_deterministic_warm_recompile(env):
    again = compile_variants(env["launches"], ARCHS, jobs=1, cache_dir=env["cache"], rootdir=str(ROOT))
    assert [r.key for r in again] == [r.key for r in env["results"]]
    for a, b in zip(env["results"], again, strict=True):
        assert a.metrics == b.metrics
        assert a.sass_hash == b.sass_hash
        assert a.artifacts == b.artifacts
        assert a.error == b.error or (a.error and b.error)


def test_timeout_gives_error(env, tmp_path):
    (ls,) = [x for x in env["launches"] if x.test.endswith("::test_matmul")]
    (r,) = compile_variants([ls], ["sm_90"], jobs=1, timeout=0.01, cache_dir=str(tmp_path / "cold"))
    assert r.error and "timed out" in r.error


def test_source_location_relative():
    src = str(ROOT / "examples" / "kernels" / "a.py")
    ls = LaunchSpec(
        kernel="k",
        qualname="k",
        module="m",
        source_file=src,
        args=(),
        options={},
        grid=(),
        spec="",
        config="",
    )
    assert source_location(ls, str(ROOT)) == "examples/kernels/a.py::k"
    assert source_location(ls, "/nonexistent-root").endswith("examples/kernels/a.py::k")


def test_worker_crash_is_reported_and_pool_recovers(env, tmp_path):
    mod = tmp_path / "crashing_kernels.py"
    mod.write_text("import os\nos._exit(3)  # dies when imported by a compile worker\n")
    (good,) = [x for x in env["launches"] if x.test.endswith("::test_add[1024]")]
    bad = LaunchSpec(
        kernel="k",
        qualname="k",
        module="crashing_kernels",
        source_file=str(mod),
        args=(),
        options={},
        grid=(1, 1, 1),
        spec="",
        config="num_warps=4,num_stages=3,num_ctas=1",
    )
    res = compile_variants([bad, good], ["sm_90"], jobs=1, cache_dir=env["cache"], rootdir=str(ROOT))
    assert "compile worker died (exit code 3)" in res[0].error
    assert res[1].error is None and res[1].metric("registers") is not None


def test_tensor_descriptor_uses_tma_on_hopper(env):
    (r80,) = find(env["results"], "test_tma", "sm_80")
    (r90,) = find(env["results"], "test_tma", "sm_90")
    assert r80.error is None and r90.error is None
    assert m(r90, "sass.tma") > 0 and m(r90, "ptx.tma") > 0
    assert m(r80, "sass.tma") == 0 and m(r80, "sass.global_load") > 0
