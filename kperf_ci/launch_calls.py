"""A launch is its call: which manifest rows of a test are one call, and which of an autotuned
call's rows are its configs and which its pick. Read by :mod:`kperf_ci.judge.launch_diff`, which
pairs base and head call by call, and by the timing pass of `kperf ab`
(``capture/launches/ab_launch.py``), which finds a replayed launch's call in the plan.

A launch is its call site, kernel and the caller's arguments and options. What the kernel's
decorators set (``@triton.heuristics`` values: the row's ``derived``; autotune config values:
its ``tuned``) and the config the autotuner picked are what a pull request changed, not identity.
"""

from __future__ import annotations

import json
from typing import Any

from kperf_ci.model import DEFAULT_OPTIONS, config_key


def call_key(row: dict[str, Any]) -> str:
    """What identifies a launch, the call: kernel site, the caller's arguments (values of
    scalars, dtype[shape] of tensors) and launch options, without what the kernel's decorators
    set (heuristic values, autotune configs). The grid counts only for an undecorated kernel:
    a decorated one's grid follows the values its decorators set. The timing pass spells it
    alike from a replayed launch (``capture/launches/ab_launch.py``)."""
    by_kernel = set(row.get("tuned") or ()) | set(row.get("derived") or ())
    args = {k: v for k, v in (row.get("args") or {}).items() if k not in by_kernel}
    # the defaults spelled out or left out are the same options
    options = {
        k: v for k, v in {**DEFAULT_OPTIONS, **(row.get("options") or {})}.items() if k not in by_kernel
    }
    grid = [] if by_kernel else list(row.get("grid") or ())
    return json.dumps([str(row.get("site")), args, options, grid], sort_keys=True, default=str)


def calls(rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Rows grouped into calls (an autotuned call has a row per compiled config), in the order
    of each call's first row."""
    by_key: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_key.setdefault(call_key(r), []).append(r)
    return list(by_key.values())


def autotuned(rows: list[dict[str, Any]]) -> bool:
    """Whether a call's rows are an autotuned call's (several configs, or values a config sets)."""
    return len(rows) > 1 or any(r.get("tuned") or r.get("autotune") for r in rows)


def tuned_values(row: dict[str, Any]) -> dict[str, Any]:
    """The values an autotune config set in this row (its kwargs and options)."""
    args, options = row.get("args") or {}, row.get("options") or {}
    out = {}
    for k in row.get("tuned") or ():
        if k in args:
            out[k] = args[k]
        elif k in options:
            out[k] = options[k]
    return out


def config_id(row: dict[str, Any]) -> str:
    """Which config of its call a row is: the values its autotune config set."""
    return config_key(tuned_values(row))


def config_list(rows: list[dict[str, Any]]) -> list[str] | None:
    """The call's whole config list (config keys, after the autotuner's own pruning) as its
    rows recorded it, or None when a row does not carry it (older manifests, a list over the
    recorded length): a capped sample of configs is not the list."""
    lists = [(r.get("autotune") or {}).get("configs") for r in rows if not pick_only(r)]
    if not lists or any(not isinstance(x, list) for x in lists):
        return None
    return list(lists[0])


def config_labels(rows: list[dict[str, Any]]) -> dict[str, str]:
    """Config id -> short text naming it by what varies across the configs ("num_warps=16")."""
    return value_labels({config_id(r): tuned_values(r) for r in rows})


def value_labels(values: dict[Any, dict[str, Any]], empty: str = "default") -> dict[Any, str]:
    """Config key -> short text naming it by what varies across ``values`` ("num_warps=16");
    ``empty`` for a config that sets none of the varying values."""
    keys = sorted({k for v in values.values() for k in v})
    varying = [k for k in keys if len({str(v.get(k)) for v in values.values()}) > 1] or keys
    return {cid: ",".join(f"{k}={v[k]}" for k in varying if k in v) or empty for cid, v in values.items()}


def set_rows(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The configs compiled for a call, by config id. A pick that repeats no recorded config (a
    capped sample, or the ``chosen`` policy) stands for the config set only when nothing else
    was recorded: which config a run's autotuner picks is not the kernel's config list."""
    configs = [r for r in rows if not pick_only(r)] or rows
    out: dict[str, dict[str, Any]] = {}
    for r in configs:
        out.setdefault(config_id(r), r)
    return out


def pick_only(row: dict[str, Any]) -> bool:
    """A row recorded only as the autotuner's pick, not as one of the configs it benchmarked."""
    info = row.get("autotune") or {}
    return bool(info.get("chosen")) and "index" not in info


def pick(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The row of the config the autotuner picked in this run, None when not known."""
    return next((r for r in rows if (r.get("autotune") or {}).get("chosen")), None)
