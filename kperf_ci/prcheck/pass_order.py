"""How the PR check's two static passes share the machine."""

from __future__ import annotations

import os

from kperf_ci.config import ENV_PASS_CORES

#: how the two static passes share the machine: ``auto`` runs them side by side and runs a pass
#: killed by the system (SIGKILL: most often out of memory) again alone; ``parallel`` never
#: retries; ``sequential`` runs base, then head
PASS_ORDERS = ("auto", "parallel", "sequential")
#: ``auto`` runs the passes one after the other on fewer cores than this: two static passes
#: side by side on a 2-core runner took 118 s where one after the other took 102 s (a mamba
#: walk, docs/walks/issue33-2026-11-27.md, item 7)
SIDE_BY_SIDE_MIN_CORES = 4


def usable_cores() -> int:
    """The cores this process may run on: ENV_PASS_CORES when set (a container limited by a CPU
    quota still sees the host's cores), else its affinity where the OS tells, else the count."""
    if os.environ.get(ENV_PASS_CORES, "").strip().isdigit():
        return max(1, int(os.environ[ENV_PASS_CORES]))
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def resolve_order(order: str, cores: int | None = None) -> str:
    """The pass order ``auto`` means on this machine: ``sequential`` below
    :data:`SIDE_BY_SIDE_MIN_CORES` usable cores, else ``auto`` (side by side, a pass killed for
    memory run again alone); any other order as given."""
    if order != "auto":
        return order
    cores = cores if cores is not None else usable_cores()
    return "sequential" if cores < SIDE_BY_SIDE_MIN_CORES else "auto"
