"""Autotuned kernels in static capture: which configs are recorded, and which would be pruned.

The autotuner on a GPU never runs every config it is given: ``prune_configs_by`` /
``early_config_prune`` drop some before benchmarking, and a config whose shared memory exceeds
the device's limit fails to launch (``OutOfResources``) and is skipped. Static capture records
the same space: :func:`record_configs` applies the autotuner's own pruning, then the session's
policy (all configs, the chosen one, or a deterministic sample of at most N), and
:func:`over_shared_limit` tells :mod:`kperf_ci.capture.static.compile` which compiled configs the target
would reject, so they are never stored or flagged (a run compared with itself stays green).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kperf_ci.hardware import MAX_SHARED_PER_BLOCK
from kperf_ci.model import config_key

#: Default cap of recorded configs per autotuned launch: two Mixtral tests gave 486 variants and
#: ~14 minutes of compiling on 2 cores with every config; 8 keeps the spread of a sweep visible.
DEFAULT_CAP = 8


@dataclass(frozen=True)
class AutotunePolicy:
    """``all``: every config the autotuner would benchmark; ``chosen``: only the config that runs
    (the autotuner's pick on a GPU, its first pruned config under the interpreter); ``cap``: at
    most ``cap`` configs, sampled deterministically per kernel (same sample on every run)."""

    mode: str = "cap"  # "all" | "chosen" | "cap"
    cap: int = DEFAULT_CAP

    @classmethod
    def parse(cls, value: Any) -> AutotunePolicy:
        """ "all", "chosen", or a positive integer (a cap); ValueError names what is allowed."""
        if isinstance(value, AutotunePolicy):
            return value
        if value in ("all", "chosen"):
            return cls(mode=value)
        if isinstance(value, bool):
            raise ValueError(f"{value!r}: use all, chosen or a positive integer (a cap)")
        try:
            n = int(value)
        except (TypeError, ValueError):
            raise ValueError(f"{value!r}: use all, chosen or a positive integer (a cap)") from None
        if n < 1 or (isinstance(value, float) and value != n):
            raise ValueError(f"{value!r}: use all, chosen or a positive integer (a cap)")
        return cls(mode="cap", cap=n)

    def describe(self) -> str:
        return f"at most {self.cap}" if self.mode == "cap" else self.mode

    def select(self, configs: list[str], salt: str) -> list[int]:
        """Indices (ascending) of the configs to record out of the pruned ones (given as their
        :func:`~kperf_ci.model.config_key`)."""
        if self.mode == "chosen":
            return []  # the chosen config is recorded by the real run itself
        n = len(configs)
        if self.mode == "all" or n <= self.cap:
            return list(range(n))
        # each config ranked by a hash of the kernel's name and its own values, so that two runs,
        # and base and head in kperf ab, sample the same configs wherever both lists hold them: a
        # pull request that cuts the list keeps every other sampled config in the sample (a
        # sample by position shifted, and read as configs dropped and added)
        rank = sorted(range(n), key=lambda i: (zlib.crc32(f"{salt}\0{configs[i]}".encode()), i))
        return sorted(rank[: self.cap])


#: configs of a call's list kept in its rows at most (the list names what was dropped or added)
MAX_LISTED = 512


def listed(configs: list[str]) -> list[str] | None:
    """The config list as the manifest rows keep it, None when too long to keep."""
    return list(configs) if len(configs) <= MAX_LISTED else None


def record_configs(
    tuner: Any,
    args: tuple,
    kwargs: dict[str, Any],
    policy: AutotunePolicy,
    run_record_only: Callable[[dict[str, Any], dict[str, Any]], None],
) -> tuple[list[Any], int]:
    """Record the configs ``policy`` selects out of what the autotuner itself keeps.

    ``run_record_only(config_kwargs, autotune_info)`` records one config without executing it.
    Returns (the configs left after the autotuner's pruning, how many were recorded)."""
    tuner.nargs = dict(zip(tuner.arg_names, args, strict=False))
    try:
        configs = tuner.prune_configs(kwargs)
    except Exception:  # a pruning hook that needs a GPU: the unpruned space is what we have
        configs = tuner.configs
    n = len(configs)
    keys = [config_key(c.all_kwargs()) for c in configs]
    chosen = policy.select(keys, getattr(tuner.base_fn, "__qualname__", ""))
    for i in chosen:
        run_record_only(configs[i].all_kwargs(), {"index": i, "count": n, "configs": listed(keys)})
    return list(configs), len(chosen)


def shared_limit(arch: str) -> int | None:
    """Max shared memory per block of ``arch`` ("sm_90" -> 232448), None when unknown."""
    digits = "".join(ch for ch in arch if ch.isdigit())
    return MAX_SHARED_PER_BLOCK.get(int(digits)) if digits else None


def over_shared_limit(shared_bytes: float | None, arch: str) -> bool:
    """True when a kernel asking for ``shared_bytes`` cannot launch on ``arch``: the autotuner
    prunes such a config (it fails with OutOfResources), so it is no variant of the target."""
    limit = shared_limit(arch)
    return shared_bytes is not None and limit is not None and shared_bytes > limit
