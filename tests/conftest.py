"""Shared fixtures: small factories for the data model, so tests build runs in one line."""

from __future__ import annotations

import functools
import itertools
import os
import shutil
import signal
import struct
import subprocess
import tempfile
import time
import zlib
from collections.abc import MutableMapping
from pathlib import Path

import pytest

from kperf_ci.device import cuda_available
from kperf_ci.model import Fingerprint, Metric, RunInfo, VariantKey, VariantResult

_counter = itertools.count()
#: the pytest option that keeps Hypothesis's plugin out of a session this suite starts
NO_HYPOTHESIS = "-p no:hypothesispytest"


def make_info(
    run_id: str | None = None,
    *,
    mode: str = "static",
    started_at: str | None = None,
    label: str | None = None,
    triton: str = "3.6.0",
    gpu: str | None = None,
) -> RunInfo:
    n = next(_counter)
    return RunInfo(
        run_id=run_id or f"run{n:04d}",
        started_at=started_at or f"2026-01-01T00:{n // 60 % 60:02d}:{n % 60:02d}+00:00",
        mode=mode,  # type: ignore[arg-type]
        fingerprint=Fingerprint(cpu="cpu", gpu=gpu, triton=triton, python="3.11", host_hash="abc"),
        git_sha="deadbeef",
        git_branch="main",
        kperf_version="0.1.0",
        label=label,
    )


def make_result(
    kernel: str = "add_kernel",
    arch: str = "sm_90",
    *,
    config: str = "num_warps=4",
    spec: str = "fp32",
    samples: list[float] | None = None,
    thresholds: dict | None = None,
    **metrics: float,
) -> VariantResult:
    """``make_result(registers=32, spills=0)``: keyword metrics become static metrics
    (names with dots via ``**{"sass.instructions": 100}``); time.* get kind "time", unit "ms"."""
    ms = []
    for name, value in metrics.items():
        kind = name.split(".")[0] if name.split(".")[0] in ("time", "region", "analysis") else "static"
        ms.append(Metric(name, value, "ms" if kind == "time" else "count", kind))  # type: ignore[arg-type]
    return VariantResult(
        key=VariantKey(kernel=kernel, arch=arch, spec=spec, config=config, test=f"tests/t.py::{kernel}"),
        metrics=ms,
        samples=list(samples or []),
        thresholds=dict(thresholds or {}),
    )


@pytest.fixture
def db_path(tmp_path):
    return tmp_path / "run.db"


def git(repo: Path, *args: str) -> str:
    """``git -C repo ARGS`` with a throwaway identity; its stdout, stripped."""
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def checkout_path(repo: Path) -> str:
    """PYTHONPATH for a `kperf` or pytest subprocess run in a scratch ``repo``: the repository's
    own modules first, then this checkout's kperf_ci. With ``repo`` alone the subprocess imported
    whatever kperf_ci the environment has installed, another checkout's in an editable install,
    and the test checked that code instead of this one's."""
    return os.pathsep.join([str(repo), str(Path(__file__).resolve().parents[1])])


#: skips a test where no CUDA GPU is usable (the plugin's own check: cheap, no torch import on
#: machines without an NVIDIA driver)
needs_gpu = pytest.mark.skipif(not cuda_available(), reason="needs a CUDA GPU")


def wait_for(condition, what: str, proc: subprocess.Popen, timeout: float = 180) -> None:
    """Poll ``condition`` until it holds; fail if ``proc`` ends first, or after ``timeout`` s
    (killing ``proc``, with its process group when it leads one)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            pytest.fail(f"the process ended before {what}:\n{proc.stdout.read() if proc.stdout else ''}")
        if time.monotonic() > deadline:
            if os.getpgid(proc.pid) == proc.pid:
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.kill()
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.1)


def fuzz_settings(examples: int) -> hypothesis.settings:  # noqa: F821 - imported lazily
    """The fuzz tests' Hypothesis settings, one home: ``examples`` by default
    (KPERF_FUZZ_EXAMPLES=1000 for a longer hunt), no .hypothesis/ directory in the checkout,
    derandomized in CI so a run is reproducible, and fixtures shared by the examples on purpose
    (each example works in a directory of its own)."""
    from hypothesis import HealthCheck, settings

    return settings(
        max_examples=int(os.environ.get("KPERF_FUZZ_EXAMPLES", str(examples))),
        deadline=None,
        database=None,
        derandomize=bool(os.environ.get("CI")),
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
            HealthCheck.function_scoped_fixture,
        ],
    )


def whole_static_metrics(cubin: bytes, registers: float) -> list[Metric]:
    """Every metric ``sass.static_metrics`` writes (a metrics-cache entry must hold them all),
    zero but for ``registers`` and ``cubin_bytes`` (checked against the cubin): what a fake of
    static_metrics returns."""
    from kperf_ci.capture.static.sass import METRIC_NAMES
    from kperf_ci.metrics import metric

    values = {"registers": registers, "cubin_bytes": len(cubin)}
    return [metric(name, values.get(name, 0)) for name in METRIC_NAMES]


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """pytester, whose sessions load no Hypothesis plugin either: pytester removes PYTEST_ADDOPTS
    (so the flag pytest_configure below sets does not reach its runs) and none of its scratch
    suites holds a Hypothesis test; a test that needs PYTEST_ADDOPTS sets it itself."""
    monkeypatch.setenv("PYTEST_ADDOPTS", NO_HYPOTHESIS)
    return pytester


def without(*prefixes: str) -> dict[str, str]:
    """This process's environment less the variables starting with ``prefixes`` (a child started
    as a user's would be: none of the suite's PYTEST_ or KPERF_ settings), but with what
    :func:`pytest_configure` below gives every process the suite starts to save CPU, none of it a
    setting any test is about: no Hypothesis plugin in a pytest session, the heap frozen at exit.
    About 0.4 CPU-s a pytest session that imports torch; tests that filtered the variables out
    lost both (a test that needs either unset sets it itself)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    _save_cpu(env)
    return env


def _save_cpu(env: MutableMapping[str, str]) -> None:
    """Into ``env``, what the processes this suite starts get to save CPU (see pytest_configure):
    Hypothesis's plugin off (once, after any addopts already there), the heap frozen at exit."""
    addopts = env.get("PYTEST_ADDOPTS", "")
    if NO_HYPOTHESIS not in addopts:
        env["PYTEST_ADDOPTS"] = " ".join(filter(None, (addopts, NO_HYPOTHESIS)))
    env.setdefault("KPERF_FREEZE_AT_EXIT", "1")


@pytest.hookimpl(trylast=True)  # after kperf's own pytest_configure in this process has read it
def pytest_configure(config: pytest.Config) -> None:
    """The pytest sessions this suite starts (`kperf run`, `kperf ab`'s passes, plain subprocess
    runs) hold no Hypothesis test, and loading Hypothesis's plugin cost each 0.13 s of a core,
    about 200 times a suite (the pytester fixture above does the same for its runs); and each
    is a process made for its output, so it freezes its heap at exit as `kperf ab`'s passes do
    (KPERF_FREEZE_AT_EXIT: 0.4-0.6 s of a core less where torch is imported; an in-process
    pytester run reads it too, so this process may freeze at its own exit, which nothing here
    checks). Set after this session loaded its plugins, so it reaches only what it starts: an
    xdist controller starts its workers after this hook and would pass it on to them, so only a
    worker, or a session that does not distribute, sets it. A test that needs the variables as a
    user would have them sets or removes them itself."""
    _deliverable_ctrl_c()
    controller = getattr(config.option, "dist", "no") != "no" and not hasattr(config, "workerinput")
    if not controller:
        _save_cpu(os.environ)
    if not hasattr(config, "workerinput"):
        _share_one_triton_cache(config)


def _deliverable_ctrl_c() -> None:
    """Ctrl-C reaches the processes this suite starts, as a terminal gives it to a user's. A shell
    that starts a command in the background (``bash .ci/run &``, a runner's own script) starts it
    with SIGINT ignored, and an ignored signal stays ignored through every fork and exec: each
    test that interrupts a run then saw a child that never heard it (four timed out, this suite
    run that way). A handled signal is reset to the default at exec, so handling it here gives
    every child Python's own KeyboardInterrupt again."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _share_one_triton_cache(config: pytest.Config) -> None:
    """One Triton cache (and so one kperf metrics cache, ``<triton cache>/kperf-static``) for every
    process this session starts, fresh for the session. pytester points HOME at each test's own
    directory, so each of its runs, and every compile worker under it, compiled every kernel cold:
    33 CPU-s for `pytest examples --kperf`, 6.7 s with its kernels in the cache. Triton's cache is
    keyed by the kernel's source, signature and compiler, and written by rename, so sharing it is
    what a runner with a warm cache does; the suite starts cold, so the first test to compile a
    kernel takes the cold path. The xdist controller sets it before it starts its workers, which
    inherit it. A test that needs a cold or its own cache sets TRITON_CACHE_DIR itself."""
    path = tempfile.mkdtemp(prefix="kperf-suite-triton-cache-")
    os.environ["TRITON_CACHE_DIR"] = path
    config.add_cleanup(lambda: shutil.rmtree(path, ignore_errors=True))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files holding a test marked ``slow`` run first, each file's tests together and in their
    order (so a module-scoped fixture is still built once a worker). xdist deals tests out in file
    order, and a 30-50 s test dealt last kept one core busy while the other had nothing left to run;
    the suite's short tests now fill the end instead. Every worker sorts the same collection the
    same way, as xdist requires."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)


@functools.cache
def zeros_packed(size: int) -> bytes:
    """``size`` zero bytes (a size below 1 MiB or a multiple of it: a larger one's remainder is
    dropped), one valid zlib stream, built in milliseconds: compressing 3 GiB took 9-23 s.
    After a full flush the compressor starts afresh, so each further 1 MiB chunk of zeros
    compresses to the same bytes: those are repeated, and the trailer's Adler-32 of n zeros is
    (n mod 65521) << 16 | 1."""
    c, chunk = zlib.compressobj(9), bytes(min(size, 1 << 20))
    n = size // max(len(chunk), 1)
    if n < 3:
        return b"".join(c.compress(chunk) for _ in range(n)) + c.flush()
    first = c.compress(chunk) + c.flush(zlib.Z_FULL_FLUSH)  # the zlib header, then a chunk
    again = c.compress(chunk) + c.flush(zlib.Z_FULL_FLUSH)
    assert again == c.compress(chunk) + c.flush(zlib.Z_FULL_FLUSH)
    end = c.flush()[:-4]  # the final block; its Adler-32 counted three chunks only
    return first + again * (n - 1) + end + struct.pack(">I", ((n * len(chunk)) % 65521) << 16 | 1)
