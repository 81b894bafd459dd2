"""Command-line options of the pytest plugin.

Each option mirrors a `[tool.kperf]` key; values given here win over the file (see config.py).
Bad values fail at parse time, naming the option.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any

import pytest

from kperf_ci.config import MAX_JOBS

MODES = ("static", "gpu", "auto")

#: what a run database's fix names for its path here (kperf_ci.store.StoreError.naming): the
#: store's own words name the commands' --db, an option pytest does not have
DB_OPTION = "--kperf-db / KPERF_DB"


def _mode(value: str) -> str:
    if value not in MODES:
        raise argparse.ArgumentTypeError(f"--kperf-mode must be one of {', '.join(MODES)}, got {value!r}")
    return value


def _arch_list(value: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise argparse.ArgumentTypeError("--kperf-arch needs a comma-separated list such as sm_80,sm_90")
    return items


def _positive_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if not 1 <= n <= MAX_JOBS:
        raise argparse.ArgumentTypeError(
            f"--kperf-jobs must be an integer from 1 to {MAX_JOBS}, got {value!r}"
        )
    return n


def addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kperf", "kperf-ci: kernel performance")
    group.addoption("--kperf", action="store_true", default=None, help="enable kperf-ci (off by default)")
    group.addoption(
        "--kperf-mode",
        type=_mode,
        default=None,
        help="static: compile-only metrics (no GPU needed); gpu: timing + regions; auto (default): gpu if "
        "CUDA is available",
    )
    group.addoption("--kperf-db", default=None, metavar="PATH", help="run database to write")
    group.addoption(
        "--kperf-baseline",
        default=None,
        metavar="PATH",
        help="baseline database to compare with at the end of the session",
    )
    group.addoption(
        "--kperf-arch",
        type=_arch_list,
        default=None,
        metavar="LIST",
        help="static-mode targets, e.g. sm_80,sm_90",
    )
    group.addoption(
        "--kperf-save",
        action="store_true",
        default=None,
        help="store the run in the database (default on)",
    )
    group.addoption("--kperf-no-save", dest="kperf_save", action="store_false", help="do not store the run")
    group.addoption("--kperf-jobs", type=_positive_int, default=None, help="parallel compile workers")
    group.addoption(
        "--kperf-test-budget",
        dest="kperf_test_budget",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="static mode: stop a test still running after SECONDS under the interpreter and skip it "
        "with the reason (0: no budget)",
    )
    group.addoption(
        "--kperf-base-tree",
        default=None,
        metavar="DIR",
        help="checkout of the base revision: time each kernel A/B against it in this job (kperf ab)",
    )
    group.addoption(
        "--kperf-ab-plan",
        default=None,
        metavar="FILE",
        help="set by kperf ab: which launches of each test changed and how the base made them (kernel "
        "replay A/B)",
    )
    group.addoption("--kperf-label", default=None, help="label stored with the run (e.g. base/head)")
    group.addoption(
        "--kperf-run-status",
        default=None,
        metavar="FILE",
        help="set by kperf run: where the session says it started and how it ended (a process that "
        "vanished in between was ended by the code under test, before its run was stored)",
    )
    group.addoption(
        "--kperf-all",
        dest="kperf_mark",
        action="store_const",
        const="all",
        default=None,
        help="treat every test as marked @pytest.mark.kperf (an existing suite, unedited)",
    )
    group.addoption(
        "--kperf-mark",
        dest="kperf_mark",
        default=None,
        metavar="GLOBS",
        help="treat tests whose node id or path matches one of these comma-separated globs as marked",
    )
    group.addoption(
        "--kperf-autotune",
        default=None,
        metavar="all|chosen|N",
        help="static mode, autotuned kernels: all configs, the chosen one, or at most N (default 8, sampled)",
    )
    add_bench_options(group)


def _seconds(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        x = -1.0
    if not x >= 0 or x == float("inf"):
        raise argparse.ArgumentTypeError(
            f"--kperf-test-budget must be a number of seconds >= 0, got {value!r}"
        )
    return x


def _limit(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"--kperf-bench-limit must be an integer >= 0, got {value!r}")
    return n


def add_bench_options(group: Any) -> None:
    """Benchmark scripts (``kperf run --bench``, plugin/bench_script.py)."""
    group.addoption(
        "--kperf-bench",
        default=None,
        metavar="SCRIPT",
        help="set by kperf run --bench: run this benchmark script, each do_bench call a benchmark",
    )
    group.addoption("--kperf-bench-module", default=None, metavar="MODULE", help="... as python -m MODULE")
    group.addoption("--kperf-bench-argv", default=None, metavar="JSON", help="... with these arguments")
    group.addoption(
        "--kperf-bench-select",
        default=None,
        metavar="GLOBS",
        help="benchmark scripts: measure only the do_bench calls whose id matches one of these "
        "comma-separated globs or substrings (e.g. '*bf16:4096x*')",
    )
    group.addoption(
        "--kperf-bench-limit",
        type=_limit,
        default=None,
        metavar="N",
        help="benchmark scripts: measure at most N do_bench calls per call site (0: all)",
    )


def cli_overrides(config: pytest.Config) -> dict[str, Any]:
    """Only the options the user actually gave, keyed like [tool.kperf]."""
    names = {
        "kperf": "enabled",
        "kperf_mode": "mode",
        "kperf_db": "db",
        "kperf_baseline": "baseline",
        "kperf_arch": "arch",
        "kperf_save": "save",
        "kperf_jobs": "jobs",
        "kperf_label": "label",
        "kperf_base_tree": "base_tree",
        "kperf_mark": "mark",
        "kperf_autotune": "autotune",
        "kperf_bench_select": "bench_select",
        "kperf_bench_limit": "bench_limit",
        "kperf_test_budget": "test_budget_s",
    }
    out: dict[str, Any] = {}
    for opt, key in names.items():
        value = config.getoption(opt, default=None)
        if value is not None:
            out[key] = value
    return out


def given_without_kperf(args: Iterable[object]) -> list[str]:
    """The ``--kperf-*`` options written on the command line (``args``: pytest's invocation
    arguments, without ini ``addopts`` or ``PYTEST_ADDOPTS``, where a project may keep settings for
    the runs that turn kperf on) that do nothing while kperf is off. ``--kperf-shard`` acts
    without kperf (a slice of the suite), and so do ``--kperf-all`` / ``--kperf-mark`` beside it:
    they choose which tests are dealt round-robin."""
    names: list[str] = []
    for a in map(str, args):
        if a == "--":  # what follows is positional
            break
        if a.startswith("--kperf-"):
            names.append(a.split("=", 1)[0])
    if "--kperf-shard" in names:
        names = [n for n in names if n not in ("--kperf-shard", "--kperf-all", "--kperf-mark")]
    return list(dict.fromkeys(names))
