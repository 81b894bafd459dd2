"""How each kind of setting value is checked: one validator per kind (a boolean, a number, a
table, a list of archs, ...) and the table that names the validator of every key.

Apart from :mod:`kperf_ci.config`, which resolves where a value comes from (CLI, environment,
``[tool.kperf]``, default) and holds the :class:`~kperf_ci.config.Settings`: a validator only
says whether one value, from a named source, is allowed. Every failure is a :class:`ConfigError`
whose one line names the key, the source and what is allowed.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from kperf_ci import hardware

__all__ = [
    "ConfigError",
    "FALSE_WORDS",
    "FILE_SOURCE",
    "MAX_JOBS",
    "MODES",
    "TRUE_WORDS",
    "VALIDATORS",
    "env_bool",
    "parse_bool",
]

MODES = ("static", "gpu", "auto")
MAX_JOBS = 256  # compile workers are processes of a few hundred MB each: more is a typo (10**8, 10**23)


class ConfigError(ValueError):
    """A bad setting. ``str(e)`` is one line: key, source, what is allowed."""


# --------------------------------------------------------------------------- validators


def _fail(key: str, source: str, value: Any, allowed: str) -> ConfigError:
    return ConfigError(f"kperf setting {key!r} from {source}: {value!r} is not valid; {allowed}")


# Where a value from pyproject.toml says it came from: "[tool.kperf] in /path/pyproject.toml".
FILE_SOURCE = "[tool.kperf]"
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


def parse_bool(value: Any, *, key: str, source: str) -> bool:
    """The one parser of boolean settings, for every place that reads one (the plugin's early
    checks included, so that what the validator accepts is what the plugin does).

    pyproject.toml: TOML ``true``/``false`` only -- a string such as ``"false"`` is an error, not
    a truthy value. Environment and command line: 1/0, true/false, yes/no, on/off in any case;
    anything else (the empty string too) is a :class:`ConfigError` naming ``key`` and ``source``."""
    if isinstance(value, bool):
        return value
    if source.startswith(FILE_SOURCE):
        raise _fail(key, source, value, "use true or false (a TOML boolean, without quotes)")
    if isinstance(value, str):
        word = value.strip().lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
    raise _fail(key, source, value, "use one of 1/0, true/false, yes/no, on/off")


def env_bool(name: str, key: str) -> bool | None:
    """The environment variable ``name`` parsed by :func:`parse_bool`; None when it is not set."""
    if name not in os.environ:
        return None
    return parse_bool(os.environ[name], key=key, source=f"env {name}")


def _bool(key: str, value: Any, source: str) -> bool:
    return parse_bool(value, key=key, source=source)


def _str(key: str, value: Any, source: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _fail(key, source, value, "use a non-empty string")
    return value


def _opt_str(key: str, value: Any, source: str) -> str | None:
    return None if value is None or value == "" else _str(key, value, source)


def _mode(key: str, value: Any, source: str) -> str:
    if value not in MODES:
        raise _fail(key, source, value, f"use one of {', '.join(MODES)}")
    return value


def _number(key: str, value: Any, source: str, *, integer: bool = False, positive: bool = False) -> float:
    try:
        if isinstance(value, bool):
            raise ValueError
        num = int(value) if integer else float(value)
        if integer and isinstance(value, float) and value != int(value):
            raise ValueError
    except (TypeError, ValueError):
        raise _fail(key, source, value, "use an integer" if integer else "use a number") from None
    if not math.isfinite(num) or num < 0 or (positive and num <= 0):  # NaN would switch a gate off
        raise _fail(key, source, value, "use a positive number" if positive else "use a number >= 0")
    return num


#: the number validator for a value that is not a [tool.kperf] setting (a process variable)
number = _number


def _jobs(key: str, value: Any, source: str) -> int:
    if not 1 <= (n := int(_number(key, value, source, integer=True, positive=True))) <= MAX_JOBS:
        raise _fail(key, source, value, f"use an integer from 1 to {MAX_JOBS}")
    return n


def _arch_list(key: str, value: Any, source: str) -> list[str]:
    if isinstance(value, str):
        value = [v for v in (p.strip() for p in value.split(",")) if v]
    if not isinstance(value, (list, tuple)) or not value:
        raise _fail(key, source, value, 'use a list such as ["sm_80", "sm_90"]')
    out: list[str] = []
    for v in value:
        a = _arch(key, v, source)
        if a not in out:
            out.append(a)
    return out


def _thresholds(key: str, value: Any, source: str) -> dict[str, float]:
    table = _table(key, value, source, example='{"registers": 0.2}')
    return {str(name): _number(f"{key}.{name}", v, source) for name, v in table.items()}


def _table(key: str, value: Any, source: str, *, example: str = "") -> dict[str, Any]:
    """A TOML table, or its JSON spelling when it comes from an environment variable."""
    such_as = f" such as {example}" if example else ""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise _fail(key, source, value, f"use a table / JSON object{such_as}") from None
    if not isinstance(value, dict):
        raise _fail(key, source, value, f"use a table{such_as}")
    return dict(value)


def _mark(key: str, value: Any, source: str) -> str | list[str] | None:
    """None / "" (nothing beyond markers), "all", or a list of globs (comma-separated in env/CLI)."""
    if value is None or value == "" or value == []:
        return None
    if value == "all":
        return "all"
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v.strip() for v in value):
        raise _fail(key, source, value, 'use "all" or a list of globs such as ["tests/ops/*", "*softmax*"]')
    return [v.strip() for v in value]


def _autotune(key: str, value: Any, source: str) -> str | int:
    if value in ("all", "chosen"):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise _fail(key, source, value, "use all, chosen, or a positive integer (at most N configs, sampled)")


def _choice(key: str, value: Any, source: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise _fail(key, source, value, f"use one of {', '.join(allowed)}")
    return value


VALIDATORS = {
    "enabled": _bool,
    "mode": _mode,
    "db": _str,
    "baseline": _opt_str,
    "arch": _arch_list,
    "save": _bool,
    "thresholds": _thresholds,
    "time_floor_ms": lambda k, v, s: _number(k, v, s),
    "timing_budget_s": lambda k, v, s: _number(k, v, s, positive=True),
    "replay_copy_mb": lambda k, v, s: _number(k, v, s),
    "replay_launches": lambda k, v, s: int(_number(k, v, s, integer=True)),
    "replay_seconds": lambda k, v, s: _number(k, v, s, positive=True),
    "ab_threshold": lambda k, v, s: _number(k, v, s, positive=True),
    "ab_precision": lambda k, v, s: _number(k, v, s, positive=True),
    "ab_floor_ms": lambda k, v, s: _number(k, v, s),
    "jobs": lambda k, v, s: _jobs(k, v, s),
    "gate": _table,
    "report": _str,
    "label": _opt_str,
    "base_tree": _opt_str,
    "findings_per_kernel": lambda k, v, s: int(_number(k, v, s, integer=True, positive=True)),
    "mark": lambda k, v, s: _mark(k, v, s),
    "autotune": lambda k, v, s: _autotune(k, v, s),
    "static_execute": lambda k, v, s: _choice(k, v, s, ("auto", "never")),
    "bench_select": lambda k, v, s: None if (r := _mark(k, v, s)) == "all" else r,
    "bench_limit": lambda k, v, s: int(_number(k, v, s, integer=True)),
    "slow_test_s": lambda k, v, s: _number(k, v, s),
    "test_budget_s": lambda k, v, s: _number(k, v, s),
}


# --------------------------------------------------------------------------- arch


def _arch(key: str, value: Any, source: str) -> str:
    """One target: spelled as a person may ("sm_90", "90", "sm90", "SM_90a"), supported by the
    installed Triton/ptxas as spelled, and kept in the one stored spelling ("sm_90"; why the
    suffix goes: kperf_ci.hardware)."""
    parsed = hardware.parse_arch(value)
    supported = hardware.supported_archs()
    if parsed is None:
        raise _fail(key, source, value, f"use sm_XX, one of {', '.join(supported)}")
    if f"sm_{parsed[0]}{parsed[1]}" not in supported:
        raise _fail(key, source, value, f"the installed Triton/ptxas supports {', '.join(supported)}")
    return hardware.normalize_arch(parsed[0])
