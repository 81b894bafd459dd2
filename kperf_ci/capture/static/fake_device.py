"""Fake CUDA tensors for static capture on a machine without a GPU.

Suites that create their tensors on ``"cuda"`` unconditionally (FlagGems, attorch) cannot run on
a CPU machine at all. While :class:`FakeCuda` is active, every torch call that names a CUDA
device (``device="cuda"``, ``device=torch.device("cuda", 0)``, ``x.cuda()``, ``x.to("cuda")``) gets
the CPU instead, and the ``torch.cuda`` calls tests make around kernels (``synchronize``,
``current_device``, ``set_device``, ``empty_cache``, ``manual_seed``) do nothing. Kernels then run
in Triton's interpreter on CPU tensors, whose alignment and divisibility are what the
specialization sees (the same rules as for any CPU tensor, see README "Static mode").

It is only switched on around marked tests in static mode without CUDA, never on a GPU.
``torch.cuda.is_available()`` keeps saying False: a test that asks is told the truth.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

_DEVICE_KWARGS = ("device",)
_NOOPS = (
    "synchronize",
    "empty_cache",
    "set_device",
    "manual_seed",
    "manual_seed_all",
    "reset_peak_memory_stats",
)


def _is_cuda(dev: Any) -> bool:
    if isinstance(dev, str):
        return dev.split(":")[0].strip().lower() == "cuda"
    if isinstance(dev, int) and not isinstance(dev, bool):
        return True  # torch reads a bare int device as a CUDA ordinal
    return getattr(dev, "type", None) == "cuda"


def _cpu_args(func: Any, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
    import torch

    kwargs = dict(kwargs)
    for k in _DEVICE_KWARGS:
        if k in kwargs and _is_cuda(kwargs[k]):
            kwargs[k] = "cpu"
    name = getattr(func, "__name__", "")
    if name == "to":
        # Tensor.to("cuda"), .to(torch.device("cuda")), .to("cuda", torch.float16), .to(other)
        args = tuple(
            "cpu" if i > 0 and _is_cuda(a) and not isinstance(a, torch.Tensor) else a
            for i, a in enumerate(args)
        )
    return args, kwargs


class FakeCuda:
    """Context manager: CUDA devices in torch calls become the CPU (see the module docstring)."""

    def __init__(self) -> None:
        self._mode: Any = None
        self._saved: dict[str, Any] = {}

    def __enter__(self) -> FakeCuda:
        import torch
        from torch.overrides import TorchFunctionMode

        class _Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
                if getattr(func, "__name__", "") == "cuda" and args:  # Tensor.cuda(): stays on the CPU
                    return args[0]
                args, kwargs = _cpu_args(func, tuple(args), kwargs or {})
                return func(*args, **kwargs)

        self._mode = _Mode()
        self._mode.__enter__()
        for name in _NOOPS:
            if hasattr(torch.cuda, name):
                self._saved[name] = getattr(torch.cuda, name)
                setattr(torch.cuda, name, lambda *a, **k: None)
        self._saved["current_device"] = torch.cuda.current_device
        torch.cuda.current_device = lambda: 0
        return self

    def __exit__(self, *exc: Any) -> None:
        import torch

        for name, fn in self._saved.items():
            setattr(torch.cuda, name, fn)
        self._saved.clear()
        if self._mode is not None:
            self._mode.__exit__(*exc)
            self._mode = None


@contextlib.contextmanager
def fake_cuda(enabled: bool = True) -> Iterator[None]:
    """:class:`FakeCuda` when ``enabled``, else nothing."""
    if not enabled:
        yield
        return
    with FakeCuda():
        yield
