"""Probing the GPU this process runs on: is there one, what is it, what state is it in.

The one home of the device queries that the fingerprint (driver, GPU, SM count), the timing loop
(clocks, temperature, power and throttle reasons before and after a measurement) and the
benchmarks need. Every probe degrades to "unknown" instead of raising: a machine without NVML,
nvidia-smi or even torch still runs static mode. Three sources, cheapest first where each can
answer: the kernel module's ``/proc/driver/nvidia/version``, NVML through ``pynvml`` (optional:
the ``gpu`` extra, nvidia-ml-py), and the ``nvidia-smi`` command line. torch is imported only
where a CUDA device is asked about, never at import time.

Static facts about a GPU model (SM counts, limits, peaks) are data, in :mod:`kperf_ci.hardware`.
"""

from __future__ import annotations

import functools
import os
import platform
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "Nvml",
    "cuda_available",
    "device_fingerprint",
    "driver_version",
    "gpu_identity",
    "gpu_info",
    "nvidia_smi_state",
    "pci_bus_id",
    "state_reader",
    "throttle_names",
]

#: The NVIDIA kernel module's version file; its first line names the driver version.
PROC_DRIVER_VERSION = "/proc/driver/nvidia/version"
_DEVICE_NODE = "/dev/nvidiactl"
_SMI_TIMEOUT_S = 10


def cuda_available() -> bool:
    """True when a CUDA GPU is usable; cheap checks first so CPU machines never import torch."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "":
        return False
    if not (Path(PROC_DRIVER_VERSION).exists() or Path(_DEVICE_NODE).exists()):
        return False
    try:
        import torch  # noqa: PLC0415 - optional, heavy
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


# --------------------------------------------------------------------------- driver


def _driver_from_proc() -> str | None:
    try:
        with open(PROC_DRIVER_VERSION, encoding="utf-8") as f:
            first = f.readline()
    except OSError:
        return None
    # "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 ..."
    for token in first.split():
        if token.count(".") >= 1 and token.replace(".", "").isdigit():
            return token
    return None


def _driver_from_nvml() -> str | None:
    try:
        import pynvml  # noqa: PLC0415 - optional dependency (the gpu extra)

        pynvml.nvmlInit()
        drv = pynvml.nvmlSystemGetDriverVersion()
    except Exception:  # noqa: BLE001 - not installed, no driver, an old library: unknown
        return None
    return drv.decode() if isinstance(drv, bytes) else str(drv)


def _smi(*args: str) -> list[str] | None:
    """Lines of ``nvidia-smi ARGS`` output; None when it is missing, fails or prints nothing."""
    try:
        r = subprocess.run(
            ["nvidia-smi", *args], capture_output=True, text=True, timeout=_SMI_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = r.stdout.strip().splitlines()
    return lines if r.returncode == 0 and lines else None


def driver_version() -> str | None:
    """The NVIDIA driver version ("550.54.15"), or None without a driver: from the kernel
    module's version file, else NVML, else nvidia-smi."""
    for probe in (_driver_from_proc, _driver_from_nvml):
        if (found := probe()) is not None:
            return found
    lines = _smi("--query-gpu=driver_version", "--format=csv,noheader")
    return lines[0].strip() if lines else None


# --------------------------------------------------------------------------- the GPU


@functools.lru_cache(maxsize=1)
def gpu_info() -> dict[str, Any]:
    """torch version and, when torch sees a GPU: its name, SM count, capability, CUDA and driver
    versions, and which physical GPU it is (``uuid``, ``pci_bus_id``: see :func:`gpu_identity`)
    (what a run's fingerprint records). Empty without torch."""
    out: dict[str, Any] = {}
    try:
        import torch  # noqa: PLC0415 - optional, heavy
    except Exception:  # noqa: BLE001 - a broken torch install must not break a static run
        return out
    out["torch"] = getattr(torch, "__version__", None)
    try:
        if not torch.cuda.is_available():
            return out
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        out["gpu"] = props.name
        out["sm_count"] = int(props.multi_processor_count)
        out["cuda"] = torch.version.cuda
        out["capability"] = f"{props.major}.{props.minor}"
        out["driver"] = driver_version()
        out.update(gpu_identity(props))
    except Exception:  # noqa: BLE001
        pass
    return out


def device_fingerprint(device: Any = None) -> dict[str, Any]:
    """GPU name, SM count, memory, L2, driver, CUDA/torch/triton versions of one device (the
    benchmarks record it with every result). Needs torch and triton."""
    import torch  # noqa: PLC0415 - optional, heavy
    import triton  # noqa: PLC0415

    d: dict[str, Any] = {
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
    }
    if not torch.cuda.is_available():
        return d
    idx = torch.cuda.current_device() if device is None else torch.device(device).index or 0
    p = torch.cuda.get_device_properties(idx)
    d.update(
        gpu=p.name,
        sm_count=p.multi_processor_count,
        capability=f"{p.major}.{p.minor}",
        memory_gb=round(p.total_memory / 2**30, 1),
        l2_bytes=getattr(p, "L2_cache_size", None),
        cuda=torch.version.cuda,
        driver=driver_version(),
    )
    return d


def pci_bus_id(props: Any) -> str:
    """NVML's and nvidia-smi's spelling of a device's PCI address, from torch's device properties
    ("00000000:1b:00.0"): the same GPU whatever CUDA_VISIBLE_DEVICES renumbered."""
    return f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"


def gpu_identity(props: Any) -> dict[str, str]:
    """Which physical GPU ``props`` (torch's device properties) describe: ``uuid`` as nvidia-smi
    spells it ("GPU-8f2c...") and ``pci_bus_id``, each one this torch can tell. A device index
    cannot say it: CUDA_VISIBLE_DEVICES renumbers devices, so every pinned worker sees "cuda:0"."""
    out: dict[str, str] = {}
    uuid = getattr(props, "uuid", None)  # torch >= 2.1
    if uuid is not None and str(uuid):
        text = str(uuid)
        out["uuid"] = text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"
    try:
        out["pci_bus_id"] = pci_bus_id(props)
    except (AttributeError, TypeError, ValueError):  # an older torch: no PCI ids in the properties
        pass
    return out


# --------------------------------------------------------------------------- clocks and state

# NVML's throttle-reason bits that mean the clock is held down (idle and application-clock
# settings are not listed: they are not a disturbance of a measurement)
_THROTTLE_REASONS = {
    "nvmlClocksThrottleReasonHwSlowdown": "hw_slowdown",
    "nvmlClocksThrottleReasonSwThermalSlowdown": "sw_thermal",
    "nvmlClocksThrottleReasonHwThermalSlowdown": "hw_thermal",
    "nvmlClocksThrottleReasonHwPowerBrakeSlowdown": "power_brake",
    "nvmlClocksThrottleReasonSwPowerCap": "sw_power_cap",
}


def throttle_names(nvml: Any, mask: int) -> list[str]:
    """The active reasons in NVML's throttle-reason bit mask, by short name."""
    return [label for attr, label in _THROTTLE_REASONS.items() if mask & getattr(nvml, attr, 0)]


class Nvml:
    """pynvml (nvidia-ml-py), when importable; the device found by PCI bus id."""

    def __init__(self, nvml: Any, handle: Any):
        self.nvml = nvml
        self.handle = handle

    @classmethod
    def open(cls, index: int, props: Any) -> Nvml | None:
        """NVML for the CUDA device ``index`` (``props``: its torch device properties); None when
        pynvml is missing or cannot find it."""
        try:
            import pynvml as nvml  # noqa: PLC0415 - optional dependency (the gpu extra)

            nvml.nvmlInit()
        except Exception:  # noqa: BLE001
            return None
        try:
            handle = nvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id(props))
        except Exception:  # noqa: BLE001 - an old driver or a virtual device: by index then
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
            except Exception:  # noqa: BLE001
                return None
        return cls(nvml, handle)

    def read(self) -> dict[str, Any]:
        """SM and memory clock (MHz), max SM clock, temperature (C), power (W), throttle reasons:
        each one that can be read."""
        n, h, s = self.nvml, self.handle, {}
        for key, fn in (
            ("sm_clock_mhz", lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)),
            ("mem_clock_mhz", lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM)),
            ("max_sm_clock_mhz", lambda: n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM)),
            ("temperature_c", lambda: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)),
            ("power_w", lambda: n.nvmlDeviceGetPowerUsage(h) / 1000.0),
        ):
            try:
                s[key] = fn()
            except Exception:  # noqa: BLE001 - not supported on this device: left out
                pass
        try:
            mask = n.nvmlDeviceGetCurrentClocksThrottleReasons(h)
            s["throttle_reasons"] = throttle_names(n, mask)
        except Exception:  # noqa: BLE001
            pass
        return s


def nvidia_smi_state(props: Any) -> dict[str, Any] | None:
    """SM and memory clock, temperature and power of one device from nvidia-smi; None when
    nvidia-smi cannot tell."""
    try:
        lines = _smi(
            f"--id={pci_bus_id(props)}",
            "--query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw",
            "--format=csv,noheader,nounits",
        )
    except Exception:  # noqa: BLE001 - props without PCI ids
        return None
    if not lines:
        return None
    vals = [v.strip() for v in lines[0].split(",")]
    s: dict[str, Any] = {}
    for key, v, conv in zip(
        ("sm_clock_mhz", "mem_clock_mhz", "temperature_c", "power_w"),
        vals,
        (int, int, int, float),
        strict=False,
    ):
        try:
            s[key] = conv(float(v)) if conv is int else conv(v)
        except ValueError:  # "[N/A]" and the like
            pass
    return s


def state_reader(index: int, props: Any) -> Callable[[], dict[str, Any]]:
    """A function reading the device's clocks and state: NVML when it opens, else nvidia-smi,
    else nothing (an empty dict)."""
    nvml = Nvml.open(index, props)
    if nvml is not None:
        return nvml.read
    return lambda: nvidia_smi_state(props) or {}
