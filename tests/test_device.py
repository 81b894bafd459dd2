"""kperf_ci.device: driver, clocks and state through /proc, NVML and nvidia-smi, on the CPU.

The device boundary is faked where it is crossed: a version file in a temporary directory, a
``pynvml`` module in ``sys.modules``, an ``nvidia-smi`` executable first on PATH.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import needs_gpu

from kperf_ci import device

PROPS = SimpleNamespace(pci_domain_id=0, pci_bus_id=0x1B, pci_device_id=0)  # torch's properties
BUS = "00000000:1b:00.0"


@pytest.fixture
def no_proc(monkeypatch, tmp_path):
    monkeypatch.setattr(device, "PROC_DRIVER_VERSION", str(tmp_path / "no-such-file"))


@pytest.fixture
def no_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError


@pytest.fixture
def smi(monkeypatch, tmp_path):
    """Put a fake nvidia-smi first on PATH; ``smi(stdout, rc)`` sets what it prints. Its
    arguments are written to ``tmp_path / "args"``."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    monkeypatch.setenv("PATH", str(bindir))

    def install(stdout: str, rc: int = 0) -> Path:
        exe = bindir / "nvidia-smi"
        (tmp_path / "out").write_text(stdout)
        exe.write_text(
            f'#!/bin/sh\nPATH=/usr/bin:/bin\necho "$@" > {tmp_path}/args\ncat {tmp_path}/out\nexit {rc}\n'
        )
        exe.chmod(0o755)
        return tmp_path / "args"

    return install


def fake_nvml(**overrides):
    """A pynvml stand-in for one H100: clocks, temperature, power and a throttle mask."""
    calls = []
    m = types.ModuleType("pynvml")
    m.NVML_CLOCK_SM, m.NVML_CLOCK_MEM, m.NVML_TEMPERATURE_GPU = 0, 2, 0
    m.nvmlClocksThrottleReasonSwPowerCap = 0x4
    m.nvmlClocksThrottleReasonHwSlowdown = 0x8
    m.nvmlClocksThrottleReasonSwThermalSlowdown = 0x20
    m.nvmlInit = lambda: calls.append("init")
    m.nvmlSystemGetDriverVersion = lambda: b"535.104.05"
    m.nvmlDeviceGetHandleByPciBusId = lambda bus: ("bus", bus)
    m.nvmlDeviceGetHandleByIndex = lambda i: ("index", i)
    m.nvmlDeviceGetClockInfo = lambda h, kind: {0: 1980, 2: 2619}[kind]
    m.nvmlDeviceGetMaxClockInfo = lambda h, kind: 1980
    m.nvmlDeviceGetTemperature = lambda h, kind: 41
    m.nvmlDeviceGetPowerUsage = lambda h: 312_500  # mW
    m.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: 0x4 | 0x1  # power cap + idle (not listed)
    m.calls = calls
    for k, v in overrides.items():
        setattr(m, k, v)
    return m


def _raise(*_a):
    raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")


# --------------------------------------------------------------------------- driver


def test_driver_from_the_kernel_module_first(monkeypatch, tmp_path, smi):
    proc = tmp_path / "version"
    proc.write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
        "GCC version:  gcc version 12.2.0\n"
    )
    monkeypatch.setattr(device, "PROC_DRIVER_VERSION", str(proc))
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml())
    args = smi("999.0\n")
    assert device.driver_version() == "550.54.15"
    assert not args.exists()  # no subprocess when the file answers


def test_driver_from_nvml_then_nvidia_smi(monkeypatch, no_proc, smi):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml())
    assert device.driver_version() == "535.104.05"  # bytes from old pynvml, decoded
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(nvmlInit=_raise))  # no driver for NVML
    args = smi("570.86.10\n")
    assert device.driver_version() == "570.86.10"
    assert args.read_text().split() == ["--query-gpu=driver_version", "--format=csv,noheader"]


def test_no_driver_is_none(no_proc, no_nvml, smi):
    smi("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", rc=9)
    assert device.driver_version() is None


def test_no_nvidia_smi_is_none(monkeypatch, no_proc, no_nvml, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there
    assert device.driver_version() is None and device.nvidia_smi_state(PROPS) is None


# --------------------------------------------------------------------------- state


def test_nvml_state_by_pci_bus_id():
    nvml = fake_nvml()
    n = device.Nvml(nvml, nvml.nvmlDeviceGetHandleByPciBusId(device.pci_bus_id(PROPS)))
    assert n.handle == ("bus", BUS)
    assert n.read() == {
        "sm_clock_mhz": 1980,
        "mem_clock_mhz": 2619,
        "max_sm_clock_mhz": 1980,
        "temperature_c": 41,
        "power_w": 312.5,
        "throttle_reasons": ["sw_power_cap"],
    }


def test_nvml_leaves_out_what_it_cannot_read(monkeypatch):
    nvml = fake_nvml(nvmlDeviceGetPowerUsage=_raise, nvmlDeviceGetCurrentClocksThrottleReasons=_raise)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    state = device.Nvml.open(3, PROPS).read()
    assert "power_w" not in state and "throttle_reasons" not in state and state["sm_clock_mhz"] == 1980
    assert nvml.calls == ["init"]


def test_nvml_open_by_index_when_the_bus_id_is_unknown(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(nvmlDeviceGetHandleByPciBusId=_raise))
    assert device.Nvml.open(3, PROPS).handle == ("index", 3)
    monkeypatch.setitem(
        sys.modules,
        "pynvml",
        fake_nvml(nvmlDeviceGetHandleByPciBusId=_raise, nvmlDeviceGetHandleByIndex=_raise),
    )
    assert device.Nvml.open(3, PROPS) is None


def test_throttle_names_from_the_mask():
    nvml = fake_nvml()
    assert device.throttle_names(nvml, 0x8 | 0x20) == ["hw_slowdown", "sw_thermal"]
    assert device.throttle_names(nvml, 0) == [] and device.throttle_names(nvml, 0x1) == []


def test_nvidia_smi_state_for_one_device(smi):
    args = smi("1980, 2619, 45, 312.50\n")
    assert device.nvidia_smi_state(PROPS) == {
        "sm_clock_mhz": 1980,
        "mem_clock_mhz": 2619,
        "temperature_c": 45,
        "power_w": 312.5,
    }
    assert args.read_text().split()[0] == f"--id={BUS}"  # the GPU torch uses, not GPU 0
    smi("1980, 2619, 45, [N/A]\n")  # power not supported: left out, the rest kept
    assert device.nvidia_smi_state(PROPS) == {
        "sm_clock_mhz": 1980,
        "mem_clock_mhz": 2619,
        "temperature_c": 45,
    }
    assert device.nvidia_smi_state(SimpleNamespace()) is None  # properties without a PCI address


def test_state_reader_prefers_nvml(monkeypatch, smi):
    smi("1500, 2619, 60, 100\n")
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml())
    assert device.state_reader(0, PROPS)()["sm_clock_mhz"] == 1980
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert device.state_reader(0, PROPS)()["sm_clock_mhz"] == 1500
    smi("", rc=6)
    assert device.state_reader(0, PROPS)() == {}


# --------------------------------------------------------------------------- presence


def test_cuda_unavailable_without_a_driver(monkeypatch, tmp_path):
    monkeypatch.setattr(device, "PROC_DRIVER_VERSION", str(tmp_path / "none"))
    monkeypatch.setattr(device, "_DEVICE_NODE", str(tmp_path / "none"))
    assert device.cuda_available() is False
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert device.cuda_available() is False


def test_gpu_info_without_a_gpu_keeps_the_torch_version():
    torch = pytest.importorskip("torch")
    device.gpu_info.cache_clear()
    try:
        info = device.gpu_info()
    finally:
        device.gpu_info.cache_clear()
    assert info["torch"] == torch.__version__
    assert ("gpu" in info) == torch.cuda.is_available()


def test_gpu_identity_names_the_physical_card():
    props = SimpleNamespace(uuid="8f2c0a1e-0000-1111-2222-333344445555", **vars(PROPS))
    assert device.gpu_identity(props) == {
        "uuid": "GPU-8f2c0a1e-0000-1111-2222-333344445555",
        "pci_bus_id": BUS,
    }
    # an older torch: no uuid, no PCI ids; nothing is made up
    assert device.gpu_identity(SimpleNamespace()) == {}


def test_gpu_identity_is_in_every_state_read(monkeypatch):
    """The timing loop stores its state reads with each variant: they name the card it ran on."""
    from kperf_ci.capture.timing.backend import CudaBackend

    be = object.__new__(CudaBackend)  # no torch, no device: only what state() reads
    be._read_state = lambda: {"sm_clock_mhz": 1980}
    be._identity = device.gpu_identity(PROPS)
    assert be.state() == {"sm_clock_mhz": 1980, "pci_bus_id": BUS}


# --------------------------------------------------------------------------- on a GPU


@pytest.mark.gpu
@needs_gpu
def test_gpu_probes_agree_with_torch_and_the_table():
    """On a real GPU: the driver is found, the fingerprint's GPU is torch's, the state reader
    (NVML or nvidia-smi) sees a clock, and a tabulated GPU's SM count is the device's own."""
    import torch

    from kperf_ci import hardware
    from kperf_ci.capture.timing.backend import CudaBackend

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    driver = device.driver_version()
    assert driver and driver[0].isdigit(), driver
    device.gpu_info.cache_clear()
    info = device.gpu_info()
    assert info["gpu"] == props.name and info["sm_count"] == props.multi_processor_count
    assert info["driver"] == driver
    state = CudaBackend().state()
    assert state.get("sm_clock_mhz", 0) > 0 and "temperature_c" in state, state
    assert state.get("pci_bus_id") == device.pci_bus_id(props) == info.get("pci_bus_id"), state
    fp = device.device_fingerprint()
    assert fp["l2_bytes"] == props.L2_cache_size and fp["driver"] == driver
    row = hardware.gpu_spec(props.name)
    if row is not None:
        assert row.sm_count == props.multi_processor_count, (props.name, row)
        assert row.arch == hardware.normalize_arch(props.major * 10 + props.minor)


def test_the_l2_flush_reads_its_buffer_and_never_writes_it():
    """A zeroed flush buffer leaves the L2 full of dirty lines the timed kernel writes back
    (backend.L2_FLUSH): the flush must read. torch on the CPU stands in for the device."""
    import torch

    from kperf_ci.capture.timing.backend import L2_FLUSH, CudaBackend

    calls: list[str] = []

    class Spy:
        def __getattr__(self, name):
            calls.append(name)
            return getattr(torch, name)

    be = object.__new__(CudaBackend)
    be.torch, be.device, be._l2, be._flush_buf = Spy(), torch.device("cpu"), 4096, None
    be.flush()
    buf = be._flush_buf
    assert buf.numel() * buf.element_size() == 2 * 4096  # twice the L2
    before = buf.clone()
    be.flush()
    assert be._flush_buf is buf and torch.equal(buf, before)  # allocated once, never written after
    assert L2_FLUSH == "read" and calls == ["zeros", "int32", "amax", "amax"]
