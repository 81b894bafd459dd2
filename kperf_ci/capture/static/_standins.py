"""The compile worker's stand-ins for a GPU (:mod:`kperf_ci.capture.static._worker`): tensors that carry
only a dtype and an address, a driver that reports the requested target and the device
properties user modules query at import time, and ptxas' -v report kept with each compile.
"""

from __future__ import annotations

import contextlib
import io
import sys
from typing import Any

from kperf_ci.capture.static.sass import parse_ptxas_log
from kperf_ci.hardware import ARCHS, ArchLimits


class StandInTensor:
    """What Triton's specialization needs of a tensor argument: a dtype and an address."""

    def __init__(self, dtype: Any, aligned: bool = True) -> None:
        self.dtype = dtype
        self._ptr = 256 if aligned else 8

    def data_ptr(self) -> int:
        return self._ptr

    def __repr__(self) -> str:
        return f"StandInTensor({self.dtype}, ptr={self._ptr})"


def stand_in_limits(cc: int) -> ArchLimits:
    """The arch row a stand-in device of capability ``cc`` takes its SM count and limits from:
    its own, else the nearest lower arch's with an SM count (sm_87 reads as sm_86), else sm_80's.
    The one choice shared by this driver and the torch.cuda fakes of
    :mod:`kperf_ci.capture.static.fake_device`, so both describe the same device."""
    rows = {lim.capability: lim for lim in ARCHS.values() if lim.sm_count is not None}
    known = [c for c in sorted(rows) if c <= cc] or [80]
    return rows.get(cc) or rows[known[-1]]


def device_properties(cc: int) -> dict[str, int]:
    """Device properties for capability ``cc``, for user modules that query them at import time
    (the Triton tutorials do: driver.active.utils.get_device_properties(...)): the usual part of
    each arch, as :mod:`kperf_ci.hardware` tabulates it (the one source of SM counts and limits)."""
    lim = stand_in_limits(cc)
    props = {
        "multiprocessor_count": lim.sm_count or 0,
        "max_shared_mem": lim.smem_per_block,
        "max_num_regs": lim.regs_per_sm,
    }
    props.update(
        {
            "warpSize": lim.warp_size,
            "sm_clock_rate": 1_755_000,
            "mem_clock_rate": 2_619_000,
            "mem_bus_width": 5120,
        }
    )
    return props


class _Utils:
    """The stand-in driver's ``utils``: device properties of the driver's current target."""

    def __init__(self, drv: Any) -> None:
        self._drv = drv

    def get_device_properties(self, device: Any = None) -> dict[str, int]:
        return device_properties(self._drv.cc)


def _make_driver():
    from triton.backends.compiler import GPUTarget
    from triton.backends.driver import DriverBase

    class StaticDriver(DriverBase):
        """Reports a chosen CUDA target; the device index is the capability, so that each
        JITFunction keeps one binder (and kernel cache) per target."""

        cc = 90

        def __init__(self) -> None:
            super().__init__()
            self.utils = _Utils(self)

        @classmethod
        def is_active(cls) -> bool:
            return False

        def map_python_to_cpp_type(self, ty: str) -> str:
            from triton.backends.nvidia.driver import ty_to_cpp

            return ty_to_cpp(ty)

        def get_current_target(self):
            return GPUTarget("cuda", self.cc, 32)

        def get_current_device(self) -> int:
            return self.cc

        def set_current_device(self, device: int) -> None:
            pass

        def get_current_stream(self, device: int | None = None) -> int:
            return 0

        def get_active_torch_device(self):
            try:
                import torch

                return torch.device("cpu")
            except ImportError:
                return "cpu"

        def get_device_interface(self):
            return None

        def get_benchmarker(self):
            def bench(kernel_call, quantiles=None, **kwargs):
                kernel_call()
                return [0.0] * len(quantiles) if quantiles else 0.0

            return bench

        def get_empty_cache_for_benchmark(self):
            return None

        def clear_cache(self, cache) -> None:
            pass

    return StaticDriver()


def _capture_ptxas_log() -> None:
    """Keep ptxas' -v report of each fresh compile in the kernel's metadata (cached with it)."""
    from triton import knobs
    from triton.backends.nvidia.compiler import CUDABackend

    if getattr(CUDABackend.make_cubin, "_kperf", False):
        return
    orig = CUDABackend.make_cubin

    def make_cubin(self, src, metadata, opt, capability):
        buf = io.StringIO()
        old = knobs.nvidia.dump_ptxas_log
        knobs.nvidia.dump_ptxas_log = True
        try:
            with contextlib.redirect_stdout(buf):
                cubin = orig(self, src, metadata, opt, capability)
        except BaseException:
            sys.stderr.write(buf.getvalue()[-4000:])
            raise
        finally:
            knobs.nvidia.dump_ptxas_log = old
        info = parse_ptxas_log(buf.getvalue())
        if info:
            metadata["kperf_ptxas"] = info
        return cubin

    make_cubin._kperf = True
    CUDABackend.make_cubin = make_cubin
