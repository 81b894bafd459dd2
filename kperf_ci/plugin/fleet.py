"""The GPU-runner fleet: one pytest-xdist worker per visible GPU, and ``--kperf-shard i/n``.

(PYTEST_DONT_REWRITE: plugin/__init__.py imports this module before pytest loads it as a plugin;
it holds no test assertions, and the marker keeps pytest from warning in every session.)

**One GPU per worker.** Two processes timing kernels on one GPU disturb each other's numbers, so
under xdist every worker gets exactly one GPU: the controller lists the GPUs it sees
(``CUDA_VISIBLE_DEVICES``, or else ``nvidia-smi``'s UUIDs) and hands the list to the workers in
:data:`ENV_GPUS`; worker ``gwN`` then sets ``CUDA_VISIBLE_DEVICES`` to the N-th entry in
``pytest_load_initial_conftests``, before any conftest or test module is imported and so before
torch or Triton can initialise CUDA (which reads the variable once). More workers than GPUs is a
usage error, not a silent sharing of GPUs; ``-n auto`` means one worker per GPU. Static mode
times nothing and is not restricted.

**Shards.** ``--kperf-shard i/n`` keeps the i-th of n deterministic slices of the marked tests
(sorted node ids, round-robin), so n runners split a large suite between them; unmarked tests run
in shard 1 only, so the whole suite still runs exactly once. ``kperf merge --shards`` joins the
shards' databases into one run per machine class.

**pytest-xdist is optional.** Its hook is declared ``optionalhook`` (pluggy refuses a hook it has
no spec for, and that broke every pytest run of a suite without xdist); without xdist, shards
still work, and a GPU run on a machine of several GPUs says in one line that it times on one of
them, as does ``-n`` (:func:`refuse_workers_without_xdist`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
from collections.abc import MutableMapping

import pytest

from kperf_ci.config import ENV_FLEET_GPUS
from kperf_ci.plugin.marker import mark_matches

ENV_GPUS = ENV_FLEET_GPUS


def parse_shard(value: str) -> tuple[int, int]:
    try:
        i, n = (int(x) for x in value.split("/"))
    except ValueError:
        i = n = 0
    if not (n >= 1 and 1 <= i <= n):
        raise argparse.ArgumentTypeError(
            f"--kperf-shard must be i/n with 1 <= i <= n (e.g. 2/4), got {value!r}"
        )
    return i, n


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("kperf").addoption(
        "--kperf-shard",
        dest="kperf_shard",
        type=parse_shard,
        default=None,
        metavar="I/N",
        help="run the I-th of N deterministic slices of the kperf-marked tests (unmarked tests: shard 1)",
    )


def visible_gpus(env: MutableMapping[str, str] | None = None) -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES entries; [] without any."""
    env = os.environ if env is None else env
    if "CUDA_VISIBLE_DEVICES" in env:
        return [g.strip() for g in env["CUDA_VISIBLE_DEVICES"].split(",") if g.strip()]
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:  # UUIDs: unlike indices they do not depend on CUDA_DEVICE_ORDER
        out = subprocess.run(
            [smi, "--query-gpu=uuid", "--format=csv,noheader"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


def pin_worker_gpu(env: MutableMapping[str, str] | None = None) -> str | None:
    """In xdist worker gwN, restrict CUDA to the controller's N-th GPU; the GPU, or None when
    this is not a worker of a kperf fleet."""
    env = os.environ if env is None else env
    worker, gpus = env.get("PYTEST_XDIST_WORKER", ""), env.get(ENV_GPUS)
    if not worker.startswith("gw") or gpus is None:
        return None
    listed = [g for g in gpus.split(",") if g]
    index = int(worker[2:])
    if index >= len(listed):
        raise pytest.UsageError(
            f"kperf: xdist worker {worker} has no GPU of its own ({len(listed)} visible); "
            f"run with -n {len(listed)} or fewer (or -n auto)"
        )
    env["CUDA_VISIBLE_DEVICES"] = listed[index]
    return listed[index]


def _timing_requested(config: pytest.Config) -> bool:
    return (
        bool(getattr(config.option, "kperf", False))
        and getattr(config.option, "kperf_mode", None) != "static"
    )


XDIST_MISSING = "pytest-xdist is not installed"
XDIST_INSTALL = "pip install pytest-xdist"


def xdist_loaded(config: pytest.Config) -> bool:
    return config.pluginmanager.has_plugin("xdist")


def refuse_workers_without_xdist(config: pytest.Config, args: list[str]) -> None:
    """``-n``/``--numprocesses`` with kperf on but no xdist: pytest would only say
    "unrecognized arguments: -n"; this says what is missing and how to get it."""
    if xdist_loaded(config):
        return
    for a in args:
        if a == "--":
            return
        glued = a.startswith("-n") and (a[2:].isdigit() or a[2:] in ("auto", "logical"))  # -n4
        if glued or a in ("-n", "--numprocesses", "--dist") or a.startswith(("--numprocesses=", "--dist=")):
            raise pytest.UsageError(
                f"kperf: {a} starts pytest-xdist workers (one per GPU), but {XDIST_MISSING}: "
                f"{XDIST_INSTALL}, or run without {a.split('=')[0]}"
            )


def one_gpu_note(config: pytest.Config, mode: str) -> str | None:
    """The line a timing run without xdist prints on a machine of several GPUs: it times on
    one of them, where ``-n auto`` with xdist would use one worker per GPU."""
    if mode == "static" or xdist_loaded(config) or hasattr(config, "workerinput"):
        return None
    gpus = visible_gpus()
    if len(gpus) < 2:
        return None
    return (
        f"kperf: {len(gpus)} GPUs are visible and this run times on one of them; {XDIST_MISSING} "
        f"({XDIST_INSTALL}, then -n auto runs one worker per GPU)"
    )


# optionalhook: the spec is xdist's, and pluggy refuses an unknown hook when xdist is absent
@pytest.hookimpl(tryfirst=True, optionalhook=True)  # before xdist's own (CPU count); None falls through
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    if not _timing_requested(config):
        return None
    gpus = visible_gpus()
    return len(gpus) or None


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """Controller of an xdist session with kperf on: check workers against GPUs, hand them out."""
    if hasattr(config, "workerinput") or not config.pluginmanager.has_plugin("kperf-session"):
        return
    session = config.pluginmanager.get_plugin("kperf-session").session
    note = one_gpu_note(config, session.mode)
    if note:
        config.get_terminal_writer().line(note)
    workers = getattr(config.option, "numprocesses", None)
    if not isinstance(workers, int) or workers < 1:
        return
    if session.settings.mode == "static":
        return
    gpus = visible_gpus()
    if not gpus:
        return
    if workers > len(gpus):
        raise pytest.UsageError(
            f"kperf: -n {workers} starts {workers} workers but {len(gpus)} GPU(s) are visible; two workers "
            f"timing on one GPU disturb each other: use -n {len(gpus)} (or -n auto, one worker per GPU)"
        )
    os.environ[ENV_GPUS] = ",".join(gpus)  # inherited by the workers xdist starts next


def pytest_unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        os.environ.pop(ENV_GPUS, None)


def _marked(item: pytest.Item, mark: str | list[str] | None = None) -> bool:
    """Marked as the session marks tests: the marker, the fixture, or the ``mark`` setting
    (``--kperf-all``, ``[tool.kperf] mark``): an unedited suite run with --kperf-all is all
    marked (on 2 H100s, 16 of 32 such tests all landed in shard 1 before this was read)."""
    return (
        item.get_closest_marker("kperf") is not None
        or "kperf" in getattr(item, "fixturenames", ())
        or mark_matches(item, mark)
    )


def _mark_setting(config: pytest.Config) -> str | list[str] | None:
    plugin = config.pluginmanager.get_plugin("kperf-session")
    if plugin is not None:
        return plugin.session.settings.mark
    return config.getoption("kperf_mark", default=None)


def select_shard(
    items: list[pytest.Item], i: int, n: int, mark: str | list[str] | None = None
) -> tuple[list[pytest.Item], list[pytest.Item]]:
    """(kept, deselected): marked tests round-robin over sorted node ids; unmarked in shard 1."""
    marked = sorted(it.nodeid for it in items if _marked(it, mark))
    mine = {nid for k, nid in enumerate(marked) if k % n == i - 1}
    kept, dropped = [], []
    for it in items:
        keep = it.nodeid in mine if _marked(it, mark) else i == 1
        (kept if keep else dropped).append(it)
    return kept, dropped


EMPTY_SHARD = pytest.StashKey[str]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    shard = getattr(config.option, "kperf_shard", None)
    if not shard:
        return
    kept, dropped = select_shard(items, *shard, mark=_mark_setting(config))
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
        if not kept:  # legitimately empty: the other shards hold every test
            i, n = shard
            config.stash[EMPTY_SHARD] = (
                f"kperf: shard {i}/{n} holds none of the {len(dropped)} collected test(s) "
                "(the other shards run them): nothing to run here"
            )


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A shard that the slicing left empty is a shard with nothing to do, not pytest's "no tests
    ran" (exit 5), which would fail a CI matrix job that did exactly what it was asked."""
    line = session.config.stash.get(EMPTY_SHARD, None)
    if line and session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.config.get_terminal_writer().line(line)
        session.exitstatus = pytest.ExitCode.OK
