"""The configs of an autotuned launch as calls: each side's surviving configs for one call.

Each tree's autotuner picks a config by timing its configs once, in its own run; for short
kernels whose configs are close that pick is noise, and a bad pick costs tens of percent
(issue 34). Timing the base's pick against the head's therefore measures the two runs'
tuning luck as much as the pull request. Instead, every config that survives each side's own
pruning (``prune_configs_by`` / ``early_config_prune``, ``perf_model``) for *this* call is
timed under one interleaved measurement, each side's fastest is kept, and the A/B compares
best against best (:func:`kperf_ci.capture.timing.interleaved.adaptive_ab`, as any launch).
The autotuners' own picks are reported beside the verdict, never used for it.

This module builds the calls (:func:`candidates`); :mod:`kperf_ci.capture.timing.best_of`
times them and keeps each side's fastest; :mod:`kperf_ci.measure.measure_replay` joins the two.
At most :data:`MAX_CONFIGS` configs a side are timed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: configs timed per side at most (after the autotuner's own pruning); more are left out, said
MAX_CONFIGS = 32


@dataclass
class Side:
    """One side's launch as its caller makes it, through the kernel's own decorators: the
    outermost kernel object, the caller's positional and keyword arguments (never a value a
    decorator sets) and the grid."""

    obj: Any
    positional: list[Any]
    keyword: dict[str, Any]
    grid: Any

    def __call__(self) -> Any:
        return self.obj.run(*self.positional, grid=self.grid, warmup=False, **self.keyword)


def config_text(values: dict[str, Any]) -> str:
    """A config as the reports name it ("BLOCK=64,num_warps=4"), keys sorted."""
    return ",".join(f"{k}={values[k]}" for k in sorted(values))


def _tuner(obj: Any) -> Any:
    """The autotuner when it is the outermost decorator (Triton's or a subclass), else None:
    a tuner under ``@triton.heuristics`` gets values the outer decorator computes per call."""
    from triton.runtime.autotuner import Autotuner

    return obj if isinstance(obj, Autotuner) and len(getattr(obj, "configs", ()) or ()) > 1 else None


def surviving_configs(tuner: Any, side: Side) -> list[Any]:
    """The configs the autotuner itself would benchmark for this call (its own pruning)."""
    tuner.nargs = dict(zip(tuner.arg_names, side.positional, strict=False))
    try:
        configs = list(tuner.prune_configs({**side.keyword, "grid": side.grid, "warmup": False}))
    except Exception:  # a pruning hook that fails outside a real run: the full list
        configs = list(tuner.configs)
    finally:
        tuner.nargs = None
    return configs or list(tuner.configs)


def _config_call(tuner: Any, config: Any, side: Side) -> Callable[[], Any]:
    """One config of ``side``'s autotuner, launched as the autotuner launches its choice: the
    config's pre-hook, then the decorators under the autotuner with the config's values."""
    values = config.all_kwargs()
    keyword = {**side.keyword, **values}
    full = {**dict(zip(tuner.arg_names, side.positional, strict=False)), **keyword}
    inner, positional, grid = tuner.fn, side.positional, side.grid

    def call() -> Any:
        if config.pre_hook is not None:
            config.pre_hook(full)
        return inner.run(*positional, grid=grid, warmup=False, **keyword)

    return call


def candidates(side: Side) -> tuple[dict[str, Callable[[], Any]], int]:
    """(config text -> zero-argument launch, configs left out by :data:`MAX_CONFIGS`) for a side
    with an autotuner; a side without one is its own single candidate, named ""."""
    tuner = _tuner(side.obj)
    if tuner is None:
        return {"": side}, 0
    configs = surviving_configs(tuner, side)
    out: dict[str, Callable[[], Any]] = {}
    for c in configs[:MAX_CONFIGS]:
        out.setdefault(config_text(c.all_kwargs()), _config_call(tuner, c, side))
    return out, max(0, len(configs) - MAX_CONFIGS)
