"""Recording launches under the Triton interpreter (kperf_ci.capture.static.record)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
pytest.importorskip("torch")

from kperf_ci.capture.static.record import (  # noqa: E402
    NOT_IMPORTABLE,
    ArgSpec,
    LaunchSpec,
    config_string,
    describe_args,
    load_launches,
    make_launch_spec,
)

DATA = Path(__file__).parent / "data" / "capture"
ROOT = Path(__file__).parent.parent


def record(tmp_path: Path, *only: str) -> list[LaunchSpec]:
    """Run the test-like script under TRITON_INTERPRET=1 in a subprocess; return its launches."""
    out = tmp_path / "launches.jsonl"
    env = dict(os.environ, TRITON_INTERPRET="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    r = subprocess.run(
        [sys.executable, str(DATA / "record_script.py"), str(out), *only],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return load_launches(out)


@pytest.fixture(scope="module")
def launches(tmp_path_factory) -> list[LaunchSpec]:
    return record(tmp_path_factory.mktemp("rec"))


def by_test(launches, name):
    return [ls for ls in launches if ls.test.endswith("::" + name)]


def test_records_every_launch_and_runs_it(launches):
    # the script itself asserts the kernels' results, so reaching here means they ran for real
    tests = {ls.test.split("::")[1] for ls in launches}
    assert {
        "test_add[1024]",
        "test_matmul",
        "test_autotune",
        "test_heuristics",
        "test_broken",
        "test_closure",
        "test_add_misaligned",
    } <= tests


def test_launch_fields(launches):
    (ls,) = by_test(launches, "test_add[1024]")
    assert ls.kernel == "add_kernel" and ls.qualname == "add_kernel"
    assert ls.module == "kernels"
    assert os.path.samefile(ls.source_file, DATA / "kernels.py")
    assert [a.name for a in ls.args] == ["x_ptr", "y_ptr", "out_ptr", "n", "BLOCK"]
    x, _, _, n, block = ls.args
    assert x.kind == "tensor" and x.dtype == "fp32" and x.aligned is True
    assert n.kind == "int" and n.value == 1024 and not n.constexpr
    assert block.constexpr and block.value == 256
    assert ls.grid == (4, 1, 1)
    assert ls.options == {}
    assert ls.config == "num_warps=4,num_stages=3,num_ctas=1"
    assert ls.spec == "x_ptr:*fp32:D, y_ptr:*fp32:D, out_ptr:*fp32:D, n:i32:D, BLOCK=256"
    assert ls.importable and ls.reason is None and ls.executed
    assert ls.tags == ("fixture",)


def test_specialization_distinguishes_divisibility_and_alignment(launches):
    (a1024,) = by_test(launches, "test_add[1024]")
    (a1000,) = by_test(launches, "test_add[1000]")
    (a2048,) = by_test(launches, "test_add[2048]")
    (mis,) = by_test(launches, "test_add_misaligned")
    assert a1024.spec != a1000.spec  # 1024 % 16 == 0, 1000 % 16 != 0
    assert a1024.identity == a2048.identity  # same compiled kernel
    assert a1024.grid != a2048.grid
    assert mis.args[0].aligned is False and "x_ptr:*fp32," in mis.spec


def test_matmul_options_and_stride_one_constexpr(launches):
    (ls,) = by_test(launches, "test_matmul")
    assert ls.options == {"num_warps": 4, "num_stages": 3}
    assert "stride_ak=1" in ls.spec  # an int equal to 1 is specialized to a constant
    assert ls.args[0].dtype == "fp16"


def test_autotune_records_every_config_but_runs_one(launches):
    at = by_test(launches, "test_autotune")
    recorded_only = [ls for ls in at if not ls.executed]
    executed = [ls for ls in at if ls.executed]
    assert len(recorded_only) == 3
    assert sorted(ls.autotune["index"] for ls in recorded_only) == [0, 1, 2]
    assert len({(ls.spec, ls.config) for ls in recorded_only}) == 3
    assert len(executed) == 1 and executed[0].autotune["chosen"]
    blocks = sorted(ls.args[-1].value for ls in recorded_only)
    assert blocks == [64, 128, 256]
    assert {ls.config for ls in recorded_only} == {
        "num_warps=2,num_stages=3,num_ctas=1",
        "num_warps=4,num_stages=3,num_ctas=1",
        "num_warps=4,num_stages=2,num_ctas=1",
    }


def test_heuristics_value_recorded(launches):
    (ls,) = by_test(launches, "test_heuristics")
    assert ls.args[-1].name == "BLOCK" and ls.args[-1].value == 128


def test_closure_not_importable(launches):
    (ls,) = by_test(launches, "test_closure")
    assert not ls.importable
    assert ls.reason.startswith(NOT_IMPORTABLE)


def test_json_round_trip(launches):
    for ls in launches:
        d = json.loads(ls.to_json())
        assert LaunchSpec.from_dict(d) == ls


def test_describe_args_on_compiled_jit_function():
    """describe_args also works outside the interpreter (GPU launches): JITFunction + tensors."""
    import torch

    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("needs JITFunction (no interpreter)")
    sys.path.insert(0, str(DATA))
    try:
        import kernels
    finally:
        sys.path.remove(str(DATA))
    x = torch.empty(1024)
    d = describe_args(kernels.add_kernel, (x, x, x, 1000), {"BLOCK": 128, "num_warps": 2})
    assert d["spec"] == "x_ptr:*fp32:D, y_ptr:*fp32:D, out_ptr:*fp32:D, n:i32, BLOCK=128"
    assert d["config"] == "num_warps=2,num_stages=3,num_ctas=1"
    ls = make_launch_spec(
        kernels.scale_kernel, (x, x, 16, 1.5), {"BLOCK": 64}, grid=lambda m: (16 // m["BLOCK"] + 1,)
    )
    assert ls.kernel == "scale_kernel" and ls.grid == (1, 1, 1)
    assert ls.args[3] == ArgSpec("scale", "float", value=1.5)


def test_config_string_defaults():
    assert config_string({}) == config_string({"num_warps": 4, "num_stages": 3, "num_ctas": 1})
    assert config_string({"maxnreg": 128}) == "num_warps=4,num_stages=3,num_ctas=1,maxnreg=128"


def _interpreted_add():
    """An InterpretedFunction for the fixture add kernel, built in this process (no env var)."""
    from triton.runtime.interpreter import InterpretedFunction

    sys.path.insert(0, str(DATA))
    try:
        import kernels
    finally:
        sys.path.remove(str(DATA))
    inner = kernels.add_kernel
    fn = inner.fn if hasattr(inner, "fn") else inner
    return InterpretedFunction(fn)


def test_recorder_patches_symmetrically_in_process():
    import torch
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.interpreter import InterpretedFunction

    from kperf_ci.capture.static.record import LaunchRecorder

    before = (InterpretedFunction.run, Autotuner.run, Autotuner._bench)
    k = _interpreted_add()
    x = torch.arange(64, dtype=torch.float32)
    out = torch.empty(64)
    rec = LaunchRecorder()
    with rec.recording(test="t::a", name="vector_add", tags=["x"], thresholds={"registers": 0.2}):
        assert InterpretedFunction.run is not before[0]
        k[(1,)](x, x, out, 64, BLOCK=64)
    assert (InterpretedFunction.run, Autotuner.run, Autotuner._bench) == before
    torch.testing.assert_close(out, 2 * x)  # it ran for real
    (ls,) = rec.launches
    assert ls.name == "vector_add" and ls.display_name == "vector_add" and ls.test == "t::a"
    assert ls.tags == ("x",) and ls.thresholds == {"registers": 0.2}
    assert ls.spec == "x_ptr:*fp32:D, y_ptr:*fp32:D, out_ptr:*fp32:D, n:i32:D, BLOCK=64"

    # an exception inside the block still restores the originals; launches outside are ignored
    with pytest.raises(RuntimeError), rec.recording(test="t::b"):
        raise RuntimeError("boom")
    assert (InterpretedFunction.run, Autotuner.run, Autotuner._bench) == before
    k[(1,)](x, x, out, 64, BLOCK=64)
    assert len(rec.launches) == 1


def test_tensor_descriptor_recorded(launches):
    (ls,) = by_test(launches, "test_tma")
    d = ls.args[0]
    assert d.kind == "tensordesc" and d.dtype == "fp16" and d.aligned
    assert d.value == {"shape": [64, 64], "strides": [64, 1], "block_shape": [32, 32], "padding": "zero"}
    assert ls.spec.startswith("in_desc:tensordesc<fp16[32, 32]>")


def test_compiled_launches_are_recorded_without_the_interpreter(monkeypatch):
    """Static mode on a machine with CUDA runs JITFunctions, not the interpreter: their launches
    must be recorded too (before, a GPU runner's static pass captured nothing and every pull
    request read 'identical').  The device is faked at its boundary: JITFunction.run itself."""
    import torch
    from triton.runtime.jit import JITFunction

    from kperf_ci.capture.static.record import LaunchRecorder

    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("needs JITFunction (no interpreter)")
    sys.path.insert(0, str(DATA))
    try:
        import kernels
    finally:
        sys.path.remove(str(DATA))
    ran = []
    monkeypatch.setattr(JITFunction, "run", lambda self, *a, grid, warmup, **kw: ran.append(grid))
    device_run = JITFunction.run
    x = torch.empty(4096)
    rec = LaunchRecorder()
    with rec.recording(test="t::gpu", name="add"):
        assert JITFunction.run is not device_run
        kernels.add_kernel[(8,)](x, x, x, 4096, BLOCK=512, num_warps=8)
        kernels.add_kernel.run(x, x, x, 4096, BLOCK=512, grid=(8,), warmup=True)  # a compile, not a launch
    assert JITFunction.run is device_run  # restored
    assert ran == [(8,), (8,)]  # the launch still reached the device
    (ls,) = rec.launches
    assert (
        ls.test == "t::gpu"
        and ls.grid == (8, 1, 1)
        and ls.shapes == {"x_ptr": [4096], "y_ptr": [4096], "out_ptr": [4096]}
    )
    assert ls.config == "num_warps=8,num_stages=3,num_ctas=1"
    assert ls.spec == "x_ptr:*fp32:D, y_ptr:*fp32:D, out_ptr:*fp32:D, n:i32:D, BLOCK=512"


def test_a_compiled_autotuner_in_a_static_pass_times_no_config(monkeypatch):
    """On a GPU (compiled JITFunctions, no interpreter) a static pass records every config and
    lets the autotuner pick the first without benchmarking any: the configs' timings are never
    taken (attorch's static passes spent 40 s each in their autotuners on an H100). An
    autotuner that keeps its results in Triton's disk cache is timed for real, once per tuning
    key: what it finds serves the timing pass. The device is faked at its boundary: the compiled
    launch, the benchmark and the disk cache."""
    import torch
    import triton
    import triton.language as tl
    from triton.runtime.autotuner import Autotuner

    from kperf_ci.capture.static.record import HOOKS, LaunchRecorder

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)

    @triton.jit
    def _k(x_ptr, n, BLOCK: tl.constexpr):
        pass

    configs = [triton.Config({"BLOCK": b}, num_warps=w) for b, w in ((64, 2), (128, 4), (256, 8))]
    tuner = Autotuner(_k, _k.arg_names, configs, key=["n"], reset_to_zero=None, restore_value=None)
    assert type(tuner.fn).__name__ == "JITFunction"  # compiled, as on a GPU
    cached = Autotuner(_k, _k.arg_names, configs, key=["n"], reset_to_zero=None, restore_value=None)
    cached.cache_results = True
    cached.check_disk_cache = lambda key, configs, bench: bench()  # a miss: benchmark (then store)
    launched: list[dict] = []
    benched: list[object] = []
    monkeypatch.setattr(Autotuner, "_bench", lambda self, *a, config, **k: benched.append(config) or [1.0])
    rec = LaunchRecorder()
    with rec.recording(test="t.py::test_tuned"):
        monkeypatch.setitem(HOOKS._originals, "jit_run", lambda fn, *a, grid, warmup, **k: launched.append(k))
        tuner.run(torch.zeros(256), 256, grid=(1,), warmup=False)
        assert benched == []  # no config was timed
        assert [k["BLOCK"] for k in launched] == [64]  # the first config, launched once (the test's)
        assert tuner.best_config is configs[0]
        cached.run(torch.zeros(256), 256, grid=(1,), warmup=False)
        cached.run(torch.zeros(256), 256, grid=(1,), warmup=False)  # the same key: tuned once
    assert benched == configs
    first = rec.launches[:4]  # the first tuner's call: its configs recorded, then its pick
    assert sorted(ls.args[-1].value for ls in first if not ls.executed) == [64, 128, 256]
    assert [ls.autotune["chosen"] for ls in first if ls.executed] == [True]
