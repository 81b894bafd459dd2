"""The fake CUDA device of static mode on a CPU machine (issue 35).

A new user's two repositories failed on a CPU runner in ways the bundled examples never did:

- kernel modules probe the GPU at import time (``torch.cuda.get_device_name(0)`` behind a check of
  ``triton.runtime.driver.active.get_current_target().backend``). The test side, interpreted, saw
  no driver and fell back; the compile worker's stand-in driver said "cuda", the probe ran on a CPU
  torch, and 0 of 724 variants compiled;
- wrappers use ``with torch.cuda.device(x.device.index)``, ``get_device_properties(...)
  .multi_processor_count``, streams and events;
- an autouse fixture calls ``torch.cuda.synchronize()`` after its ``yield`` (teardown);
- a ``torch.cuda`` call nothing fakes must be named once, not fail silently or once per variant.

The repository below has each of these; one static run of it (a real pytest subprocess) is shared
by the end-to-end tests, since the worker start and the compile are the cost.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
pytest.importorskip("torch")

from kperf_ci import store  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

# A kernel module with an import-time GPU probe, as the user's repository has it: on a CPU machine
# under the interpreter there is no driver (RuntimeError), in the compile worker there is one.
PROBE_KERNELS = """
import torch
import triton
import triton.language as tl


def _backend():
    try:
        return triton.runtime.driver.active.get_current_target().backend
    except RuntimeError:  # "0 active drivers": a CPU machine
        return "cpu"


if _backend() == "cuda":
    DEVICE_NAME = torch.cuda.get_device_name(0)
    IS_HOPPER = torch.cuda.get_device_capability()[0] >= 9
    NUM_SMS = torch.cuda.get_device_properties(0).multi_processor_count
else:
    DEVICE_NAME, IS_HOPPER, NUM_SMS = "cpu", False, 4


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


def scale(x):
    out = torch.empty_like(x)
    scale_kernel[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK=64)
    return out


@triton.jit
def persistent_add_kernel(x_ptr, out_ptr, n, NUM_PROGS: tl.constexpr, BLOCK: tl.constexpr):
    for start in range(tl.program_id(0) * BLOCK, n, NUM_PROGS * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)


def persistent_add(x):
    # the wrapper idioms of real repositories: device guard, SM count, a side stream and events
    out = torch.empty_like(x)
    with torch.cuda.device(x.device.index):
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count
        stream = torch.cuda.Stream()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(stream):
            start.record()
            grid = (min(sms, triton.cdiv(x.numel(), 32)),)
            persistent_add_kernel[grid](x, out, x.numel(), NUM_PROGS=grid[0], BLOCK=32)
            end.record()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        assert start.elapsed_time(end) >= 0
    return out
"""

# attorch's idiom: autotune configs built at import from the device's properties, unconditionally
# (no backend check). The test module imports it while pytest collects, before any test's setup.
CONFIG_KERNELS = """
import torch
import triton
import triton.language as tl

_SMEM = torch.cuda.get_device_properties(0).shared_memory_per_block_optin
_STAGES = 4 if _SMEM >= 200_000 else 2


@triton.autotune(configs=[triton.Config({}, num_warps=w, num_stages=_STAGES) for w in (1, 2)], key=["n"])
@triton.jit
def neg_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, -tl.load(x_ptr + offs, mask=mask), mask=mask)


def neg(x):
    out = torch.empty_like(x)
    neg_kernel[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK=64)
    return out
"""

CONFIG_TESTS = """
import torch
from kernels_configs import _STAGES, neg


def test_configs_built_at_import():
    assert _STAGES == 4  # the H100's opt-in shared memory, from the fake device at import
    x = torch.rand(100, device="cuda")
    torch.testing.assert_close(neg(x), -x)
"""

CONFTEST = """
import pytest
import torch


@pytest.fixture(autouse=True)
def _sync_after_each_test():
    yield
    torch.cuda.synchronize()  # teardown, as the user's suite has it
"""

TESTS = """
import pytest
import torch
from kernels_probe import persistent_add, scale


def test_probe_module_scale():
    x = torch.rand(100, device="cuda")
    torch.testing.assert_close(scale(x), x * 2)


def test_wrapper_idioms():
    x = torch.rand(100, device="cuda")
    assert torch.cuda.current_device() == 0
    assert torch.cuda.get_device_capability() == (9, 0)
    assert "H100" in torch.cuda.get_device_name()
    torch.testing.assert_close(persistent_add(x), x + 1)


@pytest.mark.parametrize("n", [16, 32, 48])
def test_unfaked_call(n):
    try:
        free, _ = torch.cuda.mem_get_info()  # not faked: CPU torch raises
    except (AssertionError, RuntimeError):
        free = 0
    x = torch.rand(n, device="cuda")
    torch.testing.assert_close(scale(x), x * 2)
"""


def _variants(db: Path) -> list[tuple[str, str]]:
    return [(r.key.kernel, r.key.test) for r in store.load_run(str(db)).results]


@pytest.fixture(scope="module")
def fake_device_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path]:
    d = tmp_path_factory.mktemp("fakedev")
    (d / "kernels_probe.py").write_text(PROBE_KERNELS)
    (d / "conftest.py").write_text(CONFTEST)
    (d / "test_fake.py").write_text(TESTS)
    (d / "kernels_configs.py").write_text(CONFIG_KERNELS)
    (d / "test_configs.py").write_text(CONFIG_TESTS)
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "test_fake.py", "test_configs.py"]
    cmd += ["--kperf", "--kperf-all", "--kperf-mode", "static", "--kperf-arch", "sm_90"]
    cmd += ["--kperf-db", "run.db"]
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{d}", "KPERF_PROGRESS": "0", "KPERF_JOBS": "1"}
    proc = subprocess.run(cmd, cwd=d, capture_output=True, text=True, timeout=600, env=env)
    return proc, d / "run.db"


@pytest.mark.slow
def test_import_time_gpu_probe_compiles(fake_device_run) -> None:
    """The worker imports the probe module with the same fakes the test side has: every variant
    compiles (the user's repository: 0 of 724 did, AssertionError: Torch not compiled with CUDA)."""
    proc, db = fake_device_run
    out = proc.stdout + proc.stderr
    assert "kperf ERROR" not in out, out[-4000:]
    assert "Torch not compiled with CUDA" not in out, out[-4000:]
    rows = _variants(db)
    assert any(t.endswith("::test_probe_module_scale") for _, t in rows), out[-4000:]


def test_import_time_device_query_of_a_test_module_is_faked(fake_device_run) -> None:
    """A kernel module that queries the device at import (attorch builds its autotune configs from
    get_device_properties) is imported while pytest collects: on the fake device there too, or
    every test of the module fails before its first launch (before: a collection error,
    "Torch not compiled with CUDA enabled")."""
    proc, db = fake_device_run
    out = proc.stdout + proc.stderr
    assert "PASSED test_configs.py::test_configs_built_at_import" in proc.stdout, out[-4000:]
    kernels = {k for k, t in _variants(db) if t.endswith("::test_configs_built_at_import")}
    assert any("neg_kernel" in k for k in kernels), (kernels, out[-4000:])


def test_wrapper_idioms_capture_and_compile(fake_device_run) -> None:
    proc, db = fake_device_run
    out = proc.stdout + proc.stderr
    assert "PASSED test_fake.py::test_wrapper_idioms" in proc.stdout, out[-4000:]
    kernels = {k for k, t in _variants(db) if t.endswith("::test_wrapper_idioms")}
    assert any("persistent_add_kernel" in k for k in kernels), (kernels, out[-4000:])


def test_teardown_synchronize_passes(fake_device_run) -> None:
    proc, _ = fake_device_run
    out = proc.stdout + proc.stderr
    assert "ERROR at teardown" not in out, out[-4000:]
    assert proc.returncode == 0, out[-4000:]
    assert "6 passed" in proc.stdout, out[-4000:]


def test_unfaked_call_is_named_once(fake_device_run) -> None:
    proc, db = fake_device_run
    out = proc.stdout
    lines = [ln for ln in out.splitlines() if "torch.cuda.mem_get_info" in ln]
    assert len(lines) == 1, out[-4000:]
    assert "test_unfaked_call[16] called torch.cuda.mem_get_info, which static mode does not fake" in lines[0]
    assert "2 more test" in lines[0], lines[0]
    # the tests themselves went on past the gap (their fallback) and were captured
    assert "PASSED test_fake.py::test_unfaked_call[48]" in out, out[-4000:]
    assert any("::test_unfaked_call[" in t for _, t in _variants(db))


# ------------------------------------------------------------------------------------------
# the fake itself, in process (fast)


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_fake_device_answers_from_the_hardware_table(arch: str) -> None:
    import torch

    from kperf_ci.capture.static.fake_device import fake_cuda
    from kperf_ci.hardware import ARCHS

    hit: list[str] = []
    originals = {n: getattr(torch.cuda, n) for n in ("device", "Stream", "Event", "get_device_properties")}
    with fake_cuda(arch=arch, on_unfaked=hit.append):
        x = torch.ones(4, device="cuda")
        assert x.device.index is None  # a CPU tensor: the wrapper's guard gets None
        with torch.cuda.device(x.device.index):
            props = torch.cuda.get_device_properties(x.device)
        lim = ARCHS[arch]
        assert props.multi_processor_count == lim.sm_count
        assert props.shared_memory_per_block_optin == lim.smem_per_block
        assert (props.major, props.minor) == torch.cuda.get_device_capability() == divmod(lim.capability, 10)
        assert props.name == torch.cuda.get_device_name(0) and props.name.startswith("NVIDIA ")
        assert torch.cuda.current_device() == 0
        s = torch.cuda.Stream()
        ev = torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(s):
            ev.record()
        torch.cuda.current_stream().wait_stream(s)
        ev.synchronize()
        torch.cuda.synchronize()
        assert not torch.cuda.is_available()  # told the truth
        assert hit == []
        with pytest.raises(AttributeError):
            props.total_memory  # noqa: B018 - not tabulated: named, not guessed
        with pytest.raises((AssertionError, RuntimeError)):
            torch.cuda.mem_get_info()
    assert hit == ["torch.cuda.get_device_properties().total_memory", "torch.cuda.mem_get_info"]
    assert {n: getattr(torch.cuda, n) for n in originals} == originals  # nothing left patched


IMPORT_PROBE_UNFAKED = """
import torch

FREE = torch.cuda.mem_get_info()[0]  # an import-time probe the fake does not answer
"""


def test_worker_import_names_an_unfaked_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A module whose import-time probe hits a gap fails its compiles with the call's name, not
    with CPU torch's "Torch not compiled with CUDA enabled" alone."""
    from kperf_ci.capture.static import _worker

    (tmp_path / "probe_unfaked.py").write_text(IMPORT_PROBE_UNFAKED)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        ImportError, match=r"importing probe_unfaked called torch.cuda.mem_get_info, which static"
    ):
        _worker.load_module(str(tmp_path / "probe_unfaked.py"), "probe_unfaked")


WAITS_FOR_TORCH = """
import sys

from kperf_ci.capture.static.fake_device import FakeGpu, fake_cuda

with fake_cuda(arch="sm_90"):
    pass
assert "torch" not in sys.modules, "imported though nothing used it"
hooks = len(sys.meta_path)
with fake_cuda(arch="sm_90", on_unfaked=print):
    import torch  # first imported inside: faked from here on, as if it had been imported before

    assert torch.__loader__.__class__.__name__ != "_ThenLoader"
    assert torch.cuda.get_device_name(0) == FakeGpu.for_arch("sm_90").name
    assert torch.zeros(3, device="cuda").device.type == "cpu"
    with fake_cuda(arch="sm_80"):  # nested, torch already there: faked at once
        assert torch.cuda.get_device_capability() == (8, 0)
    assert torch.cuda.get_device_capability() == (9, 0)
assert len(sys.meta_path) == hooks
assert torch.zeros(1).device.type == "cpu"
try:
    torch.zeros(1, device="cuda")
except (AssertionError, RuntimeError):
    print("restored")
"""


def test_the_fake_imports_no_torch_and_fakes_torch_imported_inside_it(tmp_path: Path) -> None:
    """Switched on before torch is imported (a static session whose tests never use torch), the
    fake imports nothing; torch imported inside it is faked before the import returns, and left
    as it was at the end."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run(
        [sys.executable, "-c", WAITS_FOR_TORCH], env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.split() == ["restored"], r.stdout + r.stderr
