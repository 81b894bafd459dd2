"""pytest plugin of kperf-ci: thin hooks over one `KperfSession`.

Without `--kperf` (or `enabled = true` in [tool.kperf]) the plugin only registers its marker and
a fixture that calls through, so an ordinary test run pays nothing for it.
"""

from __future__ import annotations

import atexit
import gc
import os
from typing import TYPE_CHECKING, Any

import pytest

from kperf_ci.config import (
    ENV_FREEZE_AT_EXIT,
    ConfigError,
    Settings,
    env_switch,
    load_settings,
    may_be_enabled,
    resolve_setting,
)
from kperf_ci.device import cuda_available
from kperf_ci.plugin import fleet, options
from kperf_ci.plugin.fixture import KperfFixture
from kperf_ci.plugin.marker import MARKER_HELP, KperfMarker, default_name, parse_marker

if TYPE_CHECKING:
    # imported only once kperf is on (DEFERRED_IMPORTS in tests/architecture says why)
    from kperf_ci.plugin.session import KperfSession

pytest_plugins = ("kperf_ci.plugin.fleet",)  # GPU per xdist worker, --kperf-shard

SESSION_KEY = pytest.StashKey["KperfSession"]()
MARKER_KEY = pytest.StashKey[Any]()


def pytest_addoption(parser: pytest.Parser) -> None:
    options.addoption(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(
    early_config: pytest.Config, parser: pytest.Parser, args: list[str]
) -> None:
    # Kernels are defined when test modules (or conftests) are imported, and Triton decides at
    # definition time whether a kernel is interpreted. On a machine without a GPU, static mode
    # runs kernels in Triton's interpreter, so the switch must happen before any import.
    ns = early_config.known_args_namespace
    if not _enabled(early_config, getattr(ns, "kperf", None)):
        return
    fleet.refuse_workers_without_xdist(early_config, args)
    fleet.pin_worker_gpu()  # before anything below (cuda_available) or any import can initialise CUDA
    try:  # the mode by the one precedence chain (CLI > KPERF_MODE > [tool.kperf] > auto)
        mode = resolve_setting(early_config.rootpath, "mode", getattr(ns, "kperf_mode", None))
    except ConfigError as e:
        raise pytest.UsageError(f"kperf: {e}") from None
    # static mode on a GPU runs the tests for real and captures their launches on the way
    if mode != "gpu" and not cuda_available():
        os.environ["TRITON_INTERPRET"] = "1"
        from kperf_ci.capture.static import spare

        if not getattr(ns, "numprocesses", None) or os.environ.get("PYTEST_XDIST_WORKER"):
            spare.arm()  # the first compile worker shares this process's import of torch


_freeze_registered = False


def _freeze_at_exit() -> None:
    """Freeze the heap when atexit comes to this handler (last-in first-out: after the handlers
    registered while the session ran, before those registered earlier), so the interpreter's
    shutdown collections skip the objects torch and the tests made (~165k after `import torch`:
    0.4-0.6 s of a core, 12% of a small static session on the 2-core CPU). Cyclic garbage still
    alive then is not finalized (which CPython never promises at exit), so this is for processes
    kperf starts for their database: `kperf ab` sets it for its passes."""
    global _freeze_registered
    if not _freeze_registered:
        atexit.register(gc.freeze)
        _freeze_registered = True


def _enabled(pytest_config: pytest.Config, cli: bool | None) -> bool:
    """Whether kperf is on: --kperf > env KPERF_ENABLED > [tool.kperf] enabled, resolved and
    parsed as load_settings does (kperf_ci.config), so the plugin does what the validator
    accepts. A bad value is a usage error naming it."""
    if cli:
        return True
    # Nothing more to read while kperf is nowhere mentioned: a disabled plugin costs nothing.
    if not may_be_enabled(pytest_config.rootpath):
        return False
    try:
        return resolve_setting(pytest_config.rootpath, "enabled")
    except ConfigError as e:
        raise pytest.UsageError(f"kperf: {e}") from None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)
    if env_switch(ENV_FREEZE_AT_EXIT):
        _freeze_at_exit()
    overrides = options.cli_overrides(config)
    if not _enabled(config, overrides.get("enabled")):
        _refuse_options_without_kperf(config)
        return
    from kperf_ci.plugin.session import KperfSession

    overrides["enabled"] = True
    try:
        settings = load_settings(config.rootpath, overrides)
    except ConfigError as e:
        raise pytest.UsageError(f"kperf: {e}") from None
    _refuse_self_baseline(config, settings)
    _check_ab_plan(config)
    if not hasattr(config, "workerinput"):
        _refuse_gpu_mode_without_gpu(settings)
        _check_databases(config, settings)
    session = KperfSession.from_config(config, settings)
    config.stash[SESSION_KEY] = session
    from kperf_ci.plugin.finish import InterruptWatch

    config.pluginmanager.register(InterruptWatch(session), "kperf-interrupt-watch")
    # Per-test hooks exist only in an enabled session: a disabled plugin adds no call per test.
    from kperf_ci.plugin.capture_outcome import StaticCapture
    from kperf_ci.plugin.hooks import ActiveHooks

    if session.mode == "static":  # fake CUDA tensors, per-test capture outcome
        config.pluginmanager.register(StaticCapture(session), "kperf-static-capture")
        from kperf_ci.plugin.test_budget import TestClock

        s = session.settings
        clock = TestClock(s.slow_test_s, s.test_budget_s, config)
        config.pluginmanager.register(clock, "kperf-test-clock")
    config.pluginmanager.register(ActiveHooks(session), "kperf-session")
    if hasattr(config, "workerinput") or not session.settings.save:
        return
    if getattr(config.option, "numprocesses", None):
        # xdist: the controller creates the run row once; workers append their variants to it.
        _create_run(session)


def _refuse_options_without_kperf(config: pytest.Config) -> None:
    """``--kperf-all`` (any ``--kperf-*`` option) written on the command line while kperf is
    off: the run would be plain pytest, silently, though the user asked kperf for something."""
    names = options.given_without_kperf(config.invocation_params.args)
    if names:
        one = len(names) == 1
        raise pytest.UsageError(
            f"kperf: {', '.join(names)} need{'s' if one else ''} --kperf (or kperf run): without it "
            f"kperf-ci is off and {'it does' if one else 'they do'} nothing; add --kperf "
            "(or [tool.kperf] enabled = true)"
        )


def _refuse_self_baseline(config: pytest.Config, settings: Settings) -> None:
    """The baseline's latest run would be the run this session stores: a run compared with
    itself always passes. Refused before any test runs."""
    if not settings.baseline:
        return
    from kperf_ci.store import same_database

    root = config.rootpath
    db, baseline = root / settings.db, root / settings.baseline  # absolute paths stay as they are
    if same_database(db, baseline):
        raise pytest.UsageError(
            f"kperf: the baseline ({settings.sources.get('baseline')}) and the run database "
            f"({settings.sources.get('db')}) are the same file {db}, so each run would be compared with "
            "itself; point --kperf-baseline at the baseline database (e.g. baselines/main.db)"
        )


def _check_ab_plan(config: pytest.Config) -> None:
    """``--kperf-ab-plan`` (set by kperf ab) read before any test: a missing, binary or
    malformed plan is one usage line, in static mode too (its selection of tests reads it), not
    an INTERNALERROR traceback from the collection hook."""
    path = config.getoption("kperf_ab_plan", default=None)
    if not path:
        return
    from kperf_ci.capture.launches.ab_launch import PlanError
    from kperf_ci.plugin.gpu_bench import plan_of

    try:
        plan_of(path)
    except PlanError as e:
        raise pytest.UsageError(
            f"kperf: --kperf-ab-plan {e}; pass the plan `kperf ab` wrote, or drop the option"
        ) from None


def _refuse_gpu_mode_without_gpu(settings: Settings) -> None:
    """GPU mode times kernels on the device: without one every test would fail in Triton
    ("0 active drivers") and the run would read as a red suite. A usage error instead."""
    if settings.mode == "gpu" and not cuda_available():
        raise pytest.UsageError(
            f"kperf: mode gpu ({settings.sources.get('mode')}) needs a usable CUDA GPU and there is "
            "none here; use --kperf-mode static (compiles without a GPU) or auto"
        )


def _check_databases(config: pytest.Config, settings: Settings) -> None:
    """A run database or baseline that cannot be used is reported before any test runs, not after
    the tests and the compile: one usage line (pytest exit 4), the files left untouched."""
    from kperf_ci import store

    root = config.rootpath
    paths = []
    try:
        if settings.save:
            store.check_writable(root / settings.db)
            if (root / settings.db).exists():
                paths.append(root / settings.db)
        if settings.baseline and settings.save:  # a run not stored is compared with nothing
            if not (root / settings.baseline).exists():
                # the run is made first (without a baseline), then copied in: a whole suite run
                # to learn that the comparison cannot happen would be wasted
                raise pytest.UsageError(
                    f"kperf: baseline {root / settings.baseline} ({settings.sources.get('baseline')}) "
                    "does not exist; create it with `kperf baseline update --db RUN.db --baseline PATH` "
                    "from a run made without a baseline"
                )
            paths.append(root / settings.baseline)
        for path in paths:
            store.open_db(path).close()  # header, integrity, schema version; nothing written on failure
    except store.StoreError as e:
        raise pytest.UsageError(f"kperf: {e.naming(options.DB_OPTION)}") from None


def _create_run(session: KperfSession) -> None:
    """xdist: the controller creates the run row once, ``running``; workers append to it."""
    from kperf_ci import store

    path = session.db_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        # "running" until the controller's pytest_sessionfinish marks it finished: a run
        # whose controller was killed stays incomplete, never the latest run nor a baseline
        info = session.run_info()
        store.retry_locked(lambda: store.save_run(str(path), info, [], status=store.RUNNING))
    except store.StoreError as e:
        raise pytest.UsageError(f"kperf: {e.naming(options.DB_OPTION)}") from None


@pytest.fixture
def kperf(request: pytest.FixtureRequest) -> KperfFixture:
    """Measure the Triton kernels a test launches: `out = kperf.bench(fn, *args)`."""
    session = request.config.stash.get(SESSION_KEY, None)
    marker = request.node.stash.get(MARKER_KEY, None)
    if session is not None and marker is None:
        # Using the fixture marks the test as a kperf benchmark; the marker only adds options.
        marker = parse_marker_or_default(request.node)
        request.node.stash[MARKER_KEY] = marker
    return KperfFixture(session, request.node, marker)


def parse_marker_or_default(item: pytest.Item) -> Any:
    return parse_marker(item) or KperfMarker(name=default_name(item))
