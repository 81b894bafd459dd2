"""Settings: one precedence chain per key, CLI > environment (KPERF_*) > [tool.kperf] > default.

``[tool.kperf]`` is read from the nearest ``pyproject.toml`` (from the rootdir upward, stopping
at the repository root) that has such a table. Every value is validated; a bad one raises
:class:`ConfigError` whose one-line message names the key, where the value came from and what
is allowed; the validators are in :mod:`kperf_ci.config_values`, this module resolves where each
value comes from.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from kperf_ci.config_values import (
    FALSE_WORDS,
    FILE_SOURCE,
    MAX_JOBS,
    MODES,
    VALIDATORS,
    ConfigError,
    env_bool,
    number,
    parse_bool,
)
from kperf_ci.device import cuda_available

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = [
    "ABPolicy",
    "ConfigError",
    "MAX_JOBS",
    "MODES",
    "Settings",
    "parse_bool",
    "env_bool",
    "load_settings",
    "read_pyproject",
    "find_pyproject",
]


@dataclass
class Settings:
    enabled: bool = False
    mode: str = "auto"  # "static" | "gpu" | "auto"
    db: str = "reports/run.db"
    baseline: str | None = None
    arch: list[str] = field(default_factory=lambda: ["sm_90"])
    save: bool = True
    thresholds: dict[str, float] = field(default_factory=dict)  # metric name (or "time") -> rel / abs
    time_floor_ms: float = 0.001
    timing_budget_s: float = 2.0  # GPU mode: host seconds of measurement per variant
    # GPU mode, kernel replay (capture/launches/replay.py), per test: device memory for argument copies,
    # distinct launches replayed, host seconds replaying; a limit that bites is reported
    replay_copy_mb: float = 4096.0
    replay_launches: int = 32
    replay_seconds: float = 120.0
    # Same-job A/B (`kperf ab`): the smallest change in time that counts.  The verdict also needs
    # the 99% interval of the paired ratio to exclude 1, so noise is handled by the interval;
    # this is the practical floor (0.5%: a +1% change is called with its interval inside +-0.5%).
    ab_threshold: float = 0.005
    # ... and the half-width of that interval at which it stops (0.005: the effect is reported to
    # about +-0.5%); a reference measurement asks for less, with a larger timing_budget_s
    ab_precision: float = 0.005
    # ... and an absolute floor. Timed with events, identical few-us kernels read 0.35 us apart, and
    # the floor was 0.5 us; CUPTI kernel durations hold no launch overhead, and the floor is the
    # smallest at which an A/A of real launches has no false alarm (138 so far; the aim is 200+)
    # (benchmarks/results/timing_accuracy.md, "A/A"): 0.1 us.
    ab_floor_ms: float = 0.0001
    jobs: int = field(default_factory=lambda: max(1, min(8, os.cpu_count() or 1)))
    gate: dict[str, Any] = field(default_factory=dict)  # options of the CI gate (see gate/report)
    report: str = "reports"  # directory for HTML/markdown reports
    label: str | None = None
    # GPU mode: a checkout of the base revision, each kernel timed A/B against its copy there
    # (`kperf ab` passes --kperf-base-tree)
    base_tree: str | None = None
    # Flagged findings listed per kernel by `kperf show` and the report's summaries, costliest
    # first (the kernel's own page lists all): a suite of hundreds of kernels stays readable
    findings_per_kernel: int = 3
    # Which tests count as marked without editing them: None (only @pytest.mark.kperf and the
    # fixture), "all", or globs over node ids / paths (kperf_ci.plugin.marker.mark_matches)
    mark: str | list[str] | None = None
    # Autotuned launches in static mode: "all" configs, the "chosen" one, or a cap (sampled)
    autotune: str | int = 8
    # Static mode: "auto" executes interpreted kernels when it can, "never" only records them
    static_execute: str = "auto"
    # Static mode: a test still running after slow_test_s under Triton's interpreter is named as it
    # runs (0: never); one over test_budget_s (0: no budget) is stopped and skipped with the reason
    slow_test_s: float = 30.0
    test_budget_s: float = 0.0
    # kperf run --bench: do_bench calls measured (globs over ids) and per call site (0: all)
    bench_select: str | list[str] | None = None
    bench_limit: int = 0
    # Where each value came from: "default", "--kperf-db", "env KPERF_DB", "/x/pyproject.toml"
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    pyproject: str | None = field(default=None, compare=False)

    def describe(self) -> str:
        return ", ".join(f"{k}={getattr(self, k)!r} ({src})" for k, src in self.sources.items())


@dataclass(frozen=True)
class ABPolicy:
    """The A/B verdict's three knobs (`kperf ab`'s timing pass, a pytest run with
    ``--kperf-ab-plan``; the agent's candidate check), named as the settings they come from. Built
    once, by :meth:`from_settings`, and carried whole: in the measurement's request, to the judge's
    stop rule (:func:`kperf_ci.judge.ab.stop_rule`, handed to the timing loop as a callable), in
    the agent's job."""

    ab_threshold: float  # the relative band a change must leave
    ab_floor_ms: float  # the absolute band in ms; the larger band wins
    ab_precision: float  # the interval's half-width at which a settled verdict stops measuring

    @classmethod
    def from_settings(
        cls, settings: Settings, marker_thresholds: Mapping[str, Any] | None = None
    ) -> ABPolicy:
        """The one builder. The threshold, most specific first: the marker's
        ``thresholds={"time.median": ...}`` or ``{"time": ...}`` (the keys, in the same order, that
        :class:`kperf_ci.judge.policy.ThresholdPolicy` reads for a time threshold), else the run's
        ``ab_threshold``; floor and precision are the run's. Each run setting comes by its own
        chain (CLI > environment > ``[tool.kperf]`` > default)."""
        marker = marker_thresholds or {}
        threshold = next(
            (marker[k] for k in ("time.median", "time") if marker.get(k) is not None), settings.ab_threshold
        )
        return cls(
            ab_threshold=float(threshold),
            ab_floor_ms=float(settings.ab_floor_ms),
            ab_precision=float(settings.ab_precision),
        )


def slow_test_line(who: str, nodeid: str, after_s: float) -> str:
    """The line the plugin writes for a test past ``slow_test_s`` (``who``: "[gw0] " or "")."""
    return (
        f"kperf: {who}{nodeid} is still running after {after_s:g} s under "
        "Triton's interpreter (static mode); --kperf-test-budget SECONDS skips such tests"
    )


#: that line read back: `kperf ab` names the slow test from a pass's output (prcheck/pass_process)
SLOW_TEST_LINE = re.compile(r"kperf: (?:\[\w+\] )?(\S+) is still running after (\S+) s")


_KEYS = tuple(f.name for f in fields(Settings) if f.name not in ("sources", "pyproject"))
_PATH_KEYS = ("db", "baseline", "report", "base_tree")


assert set(VALIDATORS) == set(_KEYS)


# --------------------------------------------------------------------------- sources


def find_pyproject(rootdir: str | os.PathLike[str]) -> Path | None:
    """Nearest pyproject.toml with a [tool.kperf] table, from ``rootdir`` upward; the search
    stops after the first directory that holds ``.git``."""
    d = Path(rootdir).resolve()
    if d.is_file():
        d = d.parent
    for cur in (d, *d.parents):
        candidate = cur / "pyproject.toml"
        if candidate.is_file() and "kperf" in _load_toml(candidate).get("tool", {}):
            return candidate
        if (cur / ".git").exists():
            return None
    return None


@functools.lru_cache(maxsize=16)
def _load_toml_cached(path: str, mtime_ns: int) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)


def _load_toml(path: Path) -> dict:
    try:
        return _load_toml_cached(str(path), path.stat().st_mtime_ns)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML ({e}); fix the file") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror})") from None


def read_pyproject(rootdir: str | os.PathLike[str]) -> dict[str, Any]:
    """The raw [tool.kperf] table (empty if none), unvalidated."""
    path = find_pyproject(rootdir)
    if path is None:
        return {}
    table = _load_toml(path)["tool"]["kperf"]
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.kperf] must be a table")
    return table


def env_name(key: str) -> str:
    """The environment variable of a setting: ``baseline`` -> ``KPERF_BASELINE``."""
    return "KPERF_" + key.upper()


def _env_values() -> dict[str, tuple[str, str]]:
    """{key: (raw value, "env KPERF_X")} for the KPERF_* variables that are set."""
    out = {}
    for key in _KEYS:
        name = env_name(key)
        if name in os.environ:
            out[key] = (os.environ[name], f"env {name}")
    return out


def load_settings(rootdir: str | os.PathLike[str], cli_overrides: dict[str, Any] | None = None) -> Settings:
    """Resolve every setting: CLI (``cli_overrides``, keyed like [tool.kperf]) > KPERF_* > file > default.
    Paths from pyproject.toml are made absolute against its directory, defaults against
    ``rootdir``; CLI and environment paths are left as given (relative to the cwd)."""
    root = Path(rootdir).resolve()
    cli = {k: v for k, v in (cli_overrides or {}).items() if v is not None}
    unknown = sorted(set(cli) - set(_KEYS))
    if unknown:
        raise ConfigError(f"unknown kperf setting(s) {', '.join(unknown)}; known: {', '.join(_KEYS)}")
    pyproject = find_pyproject(root)
    file_table = read_pyproject(root) if pyproject else {}
    unknown = sorted(set(file_table) - set(_KEYS))
    if unknown:
        raise ConfigError(
            f"{pyproject}: unknown key(s) in [tool.kperf]: {', '.join(unknown)}; allowed: {', '.join(_KEYS)}"
        )
    env = _env_values()
    settings = Settings(pyproject=str(pyproject) if pyproject else None)
    for key in _KEYS:
        found = _raw(key, cli, env, file_table, pyproject)
        if found is None:
            value = getattr(settings, key)
            if key in _PATH_KEYS and value:
                value = str(root / value)
            if key == "arch":
                value = VALIDATORS["arch"](key, value, "default")
            setattr(settings, key, value)
            settings.sources[key] = "default"
            continue
        setattr(settings, key, _validated(key, *found, pyproject))
        settings.sources[key] = found[1]
    return settings


def _raw(
    key: str,
    cli: dict[str, Any],
    env: dict[str, tuple[str, str]],
    table: dict[str, Any],
    pyproject: Path | None,
) -> tuple[Any, str] | None:
    """(raw value, where it came from) of one key by the precedence chain; None: the default."""
    if key in cli:
        return cli[key], f"--kperf-{key.replace('_', '-')}" if key != "enabled" else "--kperf"
    if key in env:
        return env[key]
    if key in table:
        return table[key], f"{FILE_SOURCE} in {pyproject}"
    return None


def _validated(key: str, raw: Any, source: str, pyproject: Path | None) -> Any:
    value = VALIDATORS[key](key, raw, source)
    if key in _PATH_KEYS and value and source.startswith(FILE_SOURCE) and not Path(value).is_absolute():
        value = str(pyproject.parent / value)  # type: ignore[union-attr]
    return value


def resolve_setting(rootdir: str | os.PathLike[str], key: str, cli_value: Any = None) -> Any:
    """One setting by :func:`load_settings`' precedence and validator, without the others: the
    plugin decides ``enabled`` and ``mode`` before conftests are imported (Triton's interpreter
    must be on before any kernel is defined), where a bad ``arch`` must not fail yet and probing
    ptxas would cost time. Unknown keys in [tool.kperf] are load_settings' to report."""
    if key not in _KEYS:
        raise ConfigError(f"unknown kperf setting {key}; known: {', '.join(_KEYS)}")
    root = Path(rootdir).resolve()
    pyproject = find_pyproject(root)
    table = read_pyproject(root) if pyproject else {}
    cli = {key: cli_value} if cli_value is not None else {}
    found = _raw(key, cli, _env_values(), table, pyproject)
    if found is None:
        default = getattr(Settings(), key)
        return str(root / default) if key in _PATH_KEYS and default else default
    return _validated(key, *found, pyproject)


def may_be_enabled(rootdir: str | os.PathLike[str]) -> bool:
    """Whether kperf can be on without --kperf: ``KPERF_ENABLED`` is set, or ``rootdir``'s
    pyproject.toml has ``enabled`` in [tool.kperf]. A text check first: an unused plugin pays no
    TOML parse; a file that does not parse says False here and is reported once kperf is on."""
    if "KPERF_ENABLED" in os.environ:
        return True
    try:
        if "tool.kperf" not in (Path(rootdir) / "pyproject.toml").read_text(encoding="utf-8"):
            return False
        return "enabled" in read_pyproject(rootdir)
    except (OSError, ConfigError):
        return False


def effective_mode(mode: str) -> str:
    """The mode a session runs in: "auto" is "gpu" where a CUDA GPU is usable, else "static"."""
    if mode == "auto":
        return "gpu" if cuda_available() else "static"
    return mode


# --------------------------------------------------------------------------- process switches

# KPERF_* variables that are not settings of a project (those are KPERF_<KEY>): each concerns one
# process or machine (a CI secret, a cache directory, a traceback, paths for compile workers), so
# none has a pyproject key or pytest option. This is the list of every variable kperf reads.
ENV_HOST_SALT = "KPERF_HOST_SALT"  # key of the host-name hash (fingerprint.host_hash), e.g. a CI secret
ENV_TRACEBACK = "KPERF_TRACEBACK"  # show the traceback of an internal error (exit 3)
ENV_NO_REPORT = "KPERF_NO_REPORT"  # `kperf run`: do not write the reports after pytest
ENV_NO_PREWARM = "KPERF_NO_PREWARM"  # compile workers: do not import torch/Triton before the first job
ENV_WORKER_NO_FORK = "KPERF_WORKER_NO_FORK"  # static mode: spawn every compile worker, fork none
ENV_NO_METRICS_CACHE = "KPERF_NO_METRICS_CACHE"  # compile workers: recompute static metrics every time
ENV_METRICS_CACHE_DIR = "KPERF_METRICS_CACHE_DIR"  # where compile workers cache static metrics
ENV_REGION_CACHE_DIR = "KPERF_REGION_CACHE_DIR"  # Triton cache of region-instrumented builds
ENV_WORKER_PATH = "KPERF_WORKER_PATH"  # set by the parent: sys.path entries of its compile workers
ENV_PROGRESS = "KPERF_PROGRESS"  # static capture's progress bar: 0/false/no/off hides it
ENV_PROFILE_DIR = "KPERF_PROFILE_DIR"  # `kperf ab`: each pytest pass under cProfile, <label>.prof here
ENV_PASS_CORES = "KPERF_PASS_CORES"  # `kperf ab`: the cores its pass order counts (a CPU quota hides)
ENV_COMPILE_AHEAD = "KPERF_COMPILE_AHEAD"  # static mode: 1 compiles while tests run, 0 at the end only
ENV_FREEZE_AT_EXIT = "KPERF_FREEZE_AT_EXIT"  # pytest: skip the final collections (kperf ab's passes)
ENV_TIMING = "KPERF_TIMING"  # "events": time with CUDA events, not CUPTI (capture/timing/cupti.py)
ENV_FLEET_GPUS = "KPERF_FLEET_GPUS"  # set by the plugin: the GPUs an xdist controller hands out
ENV_GITHUB_BACKOFF_S = "KPERF_GITHUB_BACKOFF_S"  # `kperf github`: first wait after a 5xx (default 1 s)
ENV_GITHUB_TOKEN = "KPERF_GITHUB_TOKEN"  # `kperf github`: the token (before GITHUB_TOKEN); never printed
ENV_GPU_CLASS = "KPERF_GPU_CLASS"  # `kperf github`: the machine class a comment/status is for
ENV_COMMENT_KEY = "KPERF_COMMENT_KEY"  # `kperf github`: which sticky comment (one per workflow)
ENV_LLM_PREFIX = "KPERF_LLM_"  # `kperf agent`: its variables, all kept from candidate processes
ENV_LLM_BASE_URL = "KPERF_LLM_BASE_URL"  # `kperf agent`: an OpenAI-compatible endpoint
ENV_LLM_MODEL = "KPERF_LLM_MODEL"  # `kperf agent`: the model asked there
ENV_LLM_API_KEY = "KPERF_LLM_API_KEY"  # `kperf agent`: its key (else OPENAI_API_KEY); never logged
ENV_LLM_BACKOFF_S = "KPERF_LLM_BACKOFF_S"  # `kperf agent`: first wait before a retry (default 2 s)


def env_switch(name: str) -> bool:
    """A process switch: on when set to anything but empty, 0, false, no or off (any case).

    Never raises: switches are read in compile workers and in the handler of an internal error,
    where a bad value could not be reported."""
    return os.environ.get(name, "").strip().lower() not in ("", *FALSE_WORDS)


def env_text(name: str) -> str | None:
    """A process variable's value (a path, a secret); None when unset or empty."""
    return os.environ.get(name) or None


def env_seconds(name: str, default: float, env: Mapping[str, str] | None = None) -> float:
    """A process variable holding seconds (a number >= 0) in ``env`` (default: the process's);
    ``default`` when unset or empty, a :class:`ConfigError` naming the variable when not a number."""
    raw = (os.environ if env is None else env).get(name, "").strip()
    return default if not raw else number(name, raw, f"env {name}")
