"""Kernel replay (kperf_ci.capture.launches.replay + kperf_ci.measure.measure_replay.replay) on a
CPU: real kernels run by Triton's interpreter through the replay path; only the device side is
faked (the timing backend's events and clocks, the launch hook the interpreter lacks,
the instrumented launch)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")

from kperf_ci.capture.launches import gpu  # noqa: E402
from kperf_ci.capture.launches.replay import MIB, LaunchCopier, ReplayDevice, ReplayLimits  # noqa: E402
from kperf_ci.measure import measure, measure_replay  # noqa: E402

KERNELS = Path(__file__).parent / "data" / "replay" / "kernels.py"
NODEID = "tests/test_x.py::test_norm"


@pytest.fixture
def kernels(monkeypatch):
    """The test kernels, defined under TRITON_INTERPRET=1 so that they run on CPU tensors."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    spec = importlib.util.spec_from_file_location("kperf_replay_kernels", KERNELS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FakeEvents:
    """The timing backend at the device boundary: every timed call reads 10 us, host time moves
    5 ms per marker so the loop's host-second budgets end after a few dozen calls."""

    def __init__(self):
        self.t = 0.0
        self.host = 0.0

    def marker(self):
        self.t += 0.01
        self.host += 0.005
        return self.t

    def elapsed_ms(self, a, b):
        return round(b - a, 9)

    def synchronize(self):
        pass

    def flush(self):
        pass

    def l2_bytes(self):
        return 50 << 20

    def capture_graph(self, call):
        return call

    def state(self):
        return {"sm_clock_mhz": 1980, "temperature_c": 40}

    def host_time(self):
        return self.host

    def sleep(self, seconds):
        self.host += seconds


def fake_device(calls: list[str]) -> ReplayDevice:
    """What the launch-enter hook would report on a GPU, seen at the interpreter's entry point."""
    from triton.runtime.interpreter import InterpretedFunction

    def capture(call):
        seen = []
        orig = InterpretedFunction.run

        def run(fn, *args, grid, warmup, **kwargs):
            seen.append(gpu.LaunchInfo(name=fn.fn.__name__, grid=tuple(grid), jit_fn=fn))
            calls.append(fn.fn.__name__)
            return orig(fn, *args, grid=grid, warmup=warmup, **kwargs)

        InterpretedFunction.run = run
        try:
            call()
        finally:
            InterpretedFunction.run = orig
        return seen

    return ReplayDevice(
        capture=capture, gpu_name="FAKE GPU", sm_count=132, backend=FakeEvents(), regions=lambda out, call: {}
    )


def request(**kw) -> measure.Request:
    return measure.Request(nodeid=NODEID, name="norm", tags=["t"], shape="64", budget_s=0.5, **kw)


def run_test_body(kernels, x, out):
    kernels.double_inplace[(1,)](x, 64, BLOCK=64)  # writes its input in place
    kernels.atomic_sum[(4,)](x, out, 64, BLOCK=16)  # accumulates with atomics


def test_replay_leaves_the_tests_results_unchanged(kernels):
    copier = LaunchCopier()
    x = torch.arange(64, dtype=torch.float32)
    out = torch.zeros(1)
    with copier.capturing():
        run_test_body(kernels, x, out)
    expected_x = torch.arange(64, dtype=torch.float32) * 2
    assert torch.equal(x, expected_x) and out.item() == expected_x.sum().item()  # the test's own results

    double, atomic = copier.launches
    x_copy, out_copy = double.args[0], atomic.args[1]
    # each copy holds the state right before its launch
    assert torch.equal(x_copy, torch.arange(64, dtype=torch.float32)) and out_copy.item() == 0.0
    assert x_copy.data_ptr() != x.data_ptr() and out_copy.data_ptr() != out.data_ptr()

    calls: list[str] = []
    m = measure_replay.replay(request(), copier, fake_device(calls))

    # replayed many times (first call, warm-up, samples) on the copies: they moved, the test's did not
    assert calls.count("double_inplace") == 1 and calls.count("atomic_sum") == 1
    assert not torch.equal(x_copy, torch.arange(64, dtype=torch.float32))
    assert out_copy.item() > 2 * expected_x.sum().item()
    assert torch.equal(x, expected_x) and out.item() == expected_x.sum().item()

    names = [v.key.kernel for v in m.variants]
    assert names == ["norm/double_inplace", "norm/atomic_sum"]
    for v in m.variants:
        metrics = {mm.name: mm.value for mm in v.metrics}
        assert metrics["time.median"] == pytest.approx(0.01)
        assert len(v.samples) >= 20 and "replay" in v.tags and "t" in v.tags
        assert v.key.test == NODEID and v.key.arch == "FAKE GPU" and v.key.spec.endswith("@ 64")
    assert '"grid":[4,1,1]' in m.variants[1].artifacts["replay"]
    assert copier.launches == [] and copier.copy_bytes == 0  # copies freed


def test_identical_launches_are_replayed_once(kernels):
    copier = LaunchCopier()
    a, b = torch.ones(64), torch.ones(64)
    with copier.capturing():
        for t in (a, b, a):
            kernels.double_inplace[(1,)](t, 64, BLOCK=64)
        kernels.double_inplace[(2,)](torch.ones(128), 128, BLOCK=64)  # another shape: replayed too
    assert [launch.count for launch in copier.launches] == [3, 1]
    assert measure_replay.replay_names("norm", copier.launches) == ["norm", "norm#2"]


def test_copies_keep_layout_and_aliasing(kernels):
    copier = LaunchCopier()
    base = torch.zeros(256)
    view = base[16:80]  # offset 16 floats = 64 bytes: alignment the kernel specializes on
    with copier.capturing():
        kernels.atomic_sum[(4,)](view, base[:1], 64, BLOCK=16)
    (launch,) = copier.launches
    vc, oc = launch.args[0], launch.args[1]
    assert vc.storage_offset() == 16 and vc.stride() == view.stride() and vc.data_ptr() % 16 == 0
    # both arguments share one storage in the test: one copy, shared, counted once
    assert vc.untyped_storage().data_ptr() == oc.untyped_storage().data_ptr()
    assert launch.copy_bytes == copier.copy_bytes == 256 * 4


def test_limits_bite_and_are_reported(kernels):
    x = torch.ones(64)
    copier = LaunchCopier(ReplayLimits(copy_bytes=1 * MIB, launches=1, seconds=60))
    with copier.capturing():
        kernels.double_inplace[(1,)](x, 64, BLOCK=64)
        for _ in range(3):  # over the launch limit, three times the same launch: one left out
            kernels.double_inplace[(1,)](torch.ones(32), 32, BLOCK=64)
    assert copier.left_out == {"launches": 1}
    m = measure_replay.replay(request(), copier, fake_device([]))
    assert len(m.variants) == 1
    (line,) = [w for _, w in m.warnings if w.startswith("replay:")]
    assert "1 launch(es) not replayed" in line and "replay_launches" in line

    copier = LaunchCopier(ReplayLimits(copy_bytes=300, launches=8, seconds=60))
    with copier.capturing():
        kernels.double_inplace[(1,)](torch.ones(64), 64, BLOCK=64)  # 256 B: fits
        kernels.double_inplace[(1,)](torch.ones(32), 32, BLOCK=64)  # 128 B more: does not
    assert copier.left_out == {"copy memory": 1} and copier.copy_bytes == 256

    copier = LaunchCopier(ReplayLimits(copy_bytes=MIB, launches=8, seconds=5))
    with copier.capturing():
        run_test_body(kernels, torch.ones(64), torch.zeros(1))
    ticks = iter([0.0, 0.0, 10.0])  # start, before the first launch, before the second
    m = measure_replay.replay(request(), copier, fake_device([]), clock=lambda: next(ticks))
    assert [v.key.kernel for v in m.variants] == ["norm/double_inplace"]
    assert any("1 launch(es) not replayed: the seconds limit" in w for _, w in m.warnings)


def test_paused_launches_and_hooks_are_restored(kernels):
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    before = (JITFunction.run, InterpretedFunction.run)
    copier = LaunchCopier()
    with copier.capturing():
        with copier.paused():  # kperf.bench measures its callable itself
            kernels.double_inplace[(1,)](torch.ones(64), 64, BLOCK=64)
        assert copier.launches == []
        with pytest.raises(RuntimeError):
            raise RuntimeError("the test failed")
    assert (JITFunction.run, InterpretedFunction.run) == before


def test_a_launch_that_fails_to_replay_is_reported_and_the_rest_measured(kernels):
    copier = LaunchCopier()
    with copier.capturing():
        run_test_body(kernels, torch.ones(64), torch.zeros(1))
    copier.launches[0].args = ()  # the relaunch raises (missing arguments)
    m = measure_replay.replay(request(), copier, fake_device([]))
    assert [v.key.kernel for v in m.variants] == ["norm/atomic_sum"]
    assert any(w.startswith("replay of double_inplace failed") for _, w in m.warnings)


FAKE_DEVICE_CONFTEST = """
import pytest
import kperf_ci.plugin
from kperf_ci.capture.launches import gpu
from kperf_ci.capture.launches.replay import ReplayDevice

kperf_ci.plugin.cuda_available = lambda: True  # the device is faked below: gpu mode may start


class FakeEvents:
    t = host = 0.0
    def marker(self):
        self.t += 0.01
        self.host += 0.005
        return self.t
    def elapsed_ms(self, a, b):
        return round(b - a, 9)
    def synchronize(self): pass
    def flush(self): pass
    def l2_bytes(self): return 50 << 20
    def capture_graph(self, call): return call
    def state(self): return {}
    def host_time(self): return self.host
    def sleep(self, s): self.host += s


def capture(call):
    call()
    return [gpu.LaunchInfo(name="?")]


ReplayDevice.cuda = classmethod(
    lambda cls: cls(capture, "FAKE GPU", 132, backend=FakeEvents(), regions=lambda out, call: {})
)
"""

PLUGIN_TEST = """
import importlib.util
import pytest, torch

spec = importlib.util.spec_from_file_location("k", {kernels!r})
k = importlib.util.module_from_spec(spec)
spec.loader.exec_module(k)
STATE = {{}}


@pytest.fixture
def tensors():
    x, out = torch.arange(64, dtype=torch.float32), torch.zeros(1)
    yield x, out
    # teardown: after kperf replayed the launches
    assert torch.equal(x, torch.arange(64, dtype=torch.float32) * 2), "replay wrote the test's tensor"
    assert out.item() == 2 * sum(range(64)), "replay added to the test's accumulator"


@pytest.mark.kperf(name="norm")
def test_norm(tensors):
    x, out = tensors
    k.double_inplace[(1,)](x, 64, BLOCK=64)
    k.atomic_sum[(4,)](x, out, 64, BLOCK=16)


@pytest.mark.kperf(name="broken")
def test_fails_after_a_launch():
    k.double_inplace[(1,)](torch.ones(64), 64, BLOCK=64)
    assert False, "a failed test is not measured"
"""


def test_plugin_replays_a_marked_test_that_never_calls_the_fixture(pytester, monkeypatch):
    """GPU mode through the plugin's hooks, the device faked in the sample's conftest."""
    import sqlite3

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    pytester.makeconftest(FAKE_DEVICE_CONFTEST)
    pytester.makepyfile(test_sample=PLUGIN_TEST.format(kernels=str(KERNELS)))
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--kperf", "--kperf-mode", "gpu", "--kperf-db", "run.db"
    )
    result.assert_outcomes(passed=1, failed=1)
    rows = (
        sqlite3.connect(pytester.path / "run.db")
        .execute(
            "select k.name, m.value from metrics m join variants v on v.id = m.variant_id "
            "join kernels k on k.id = v.kernel_id where m.name = 'time.median'"
        )
        .fetchall()
    )
    # the failed test's launch is not measured; the passing test's two are, its tensors intact
    assert sorted(rows) == [
        ("norm/atomic_sum", pytest.approx(0.01)),
        ("norm/double_inplace", pytest.approx(0.01)),
    ]
    assert "nothing measured" not in result.stdout.str()


def test_only_the_autotuners_chosen_config_is_copied(kernels):
    copier = LaunchCopier()
    x = torch.ones(64)
    with copier.capturing():
        kernels.tuned_double[lambda meta: (triton.cdiv(64, meta["BLOCK"]),)](x, 64)
    # the autotuner ran both configs while benchmarking (each doubled x once), then the chosen one
    assert torch.equal(x, torch.full((64,), 8.0))
    (launch,) = copier.launches
    assert launch.kwargs["BLOCK"] == 16 and launch.grid_seen == (4, 1, 1)
    assert torch.equal(launch.args[0], torch.full((64,), 4.0))  # the state before the chosen launch
