"""kperf-ci must not break a host's pytest when a plugin it integrates with is absent.

kperf-ci depends on pytest alone; pytest-xdist (the GPU fleet) and pytest-benchmark (its
``benchmark`` fixture) are optional. A hook whose spec belongs to one of them must be declared
``optionalhook``, or pluggy refuses the whole plugin and every pytest run of the user's suite ends
in INTERNALERROR (issue 31). Each optional plugin is blocked with ``-p no:NAME`` in a pytest
subprocess, as a user without it would run, on the bundled examples.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from _pytest import hookspec
from conftest import without

import kperf_ci.plugin
from kperf_ci.plugin import fleet

ROOT = Path(__file__).resolve().parents[1]

# The plugins kperf-ci integrates with but does not depend on: pytest's -p name -> the module
# holding that plugin's hook specs.
OPTIONAL_PLUGINS = {"xdist": "xdist.newhooks", "benchmark": "pytest_benchmark.hookspec"}
BLOCKED_SETS = [("xdist",), ("benchmark",), ("xdist", "benchmark")]


def _hookimpls() -> list[tuple[str, str, dict]]:
    """(where, hook name, hookimpl options) of every pytest hook the plugin package implements,
    in its modules and in the classes it registers (ActiveHooks, StaticCapture, ...)."""
    found = []
    modules = [kperf_ci.plugin] + [
        importlib.import_module(f"kperf_ci.plugin.{m.name}")
        for m in pkgutil.iter_modules(kperf_ci.plugin.__path__)
    ]
    for mod in modules:
        owners = [mod] + [
            c for _, c in inspect.getmembers(mod, inspect.isclass) if c.__module__ == mod.__name__
        ]
        for owner in owners:
            for name, fn in vars(owner).items():
                if name.startswith("pytest_") and callable(fn):
                    found.append((f"{owner.__name__}.{name}", name, getattr(fn, "pytest_impl", {}) or {}))
    return found


def test_every_hook_outside_pytest_core_is_optional() -> None:
    core = {n for n in dir(hookspec) if n.startswith("pytest_")}
    impls = _hookimpls()
    assert any(name == "pytest_xdist_auto_num_workers" for _, name, _ in impls)  # the walk sees them
    foreign = [(where, name, opts) for where, name, opts in impls if name not in core]
    assert foreign, "no hook of an optional plugin found: the walk above is broken"
    for where, name, opts in foreign:
        assert opts.get("optionalhook"), f"{where}: {name} is not a pytest hook; mark it optionalhook=True"
        owners = [p for p, mod in OPTIONAL_PLUGINS.items() if hasattr(importlib.import_module(mod), name)]
        assert owners, f"{where}: {name} belongs to no plugin in OPTIONAL_PLUGINS; add it there"


def _pytest(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = without("PYTEST_XDIST", "KPERF_", "PYTEST_ADDOPTS")
    env.pop("TRITON_INTERPRET", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _blocking(blocked: tuple[str, ...]) -> list[str]:
    return [a for name in blocked for a in ("-p", f"no:{name}")]


@pytest.mark.parametrize("blocked", BLOCKED_SETS, ids="+".join)
def test_collect_only_without_optional_plugins(blocked: tuple[str, ...]) -> None:
    r = _pytest(*_blocking(blocked), "--collect-only", "-q", "examples")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "INTERNALERROR" not in r.stdout + r.stderr
    assert "16 tests collected" in r.stdout


@pytest.mark.parametrize("blocked", BLOCKED_SETS[:2], ids="+".join)
@pytest.mark.slow
def test_kperf_run_without_one_optional_plugin(blocked: tuple[str, ...], tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    r = _pytest(*_blocking(blocked), "examples/test_vector_add.py", "--kperf", "--kperf-db", str(db))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "variant(s) captured" in r.stdout and db.exists()


@pytest.mark.slow
def test_the_main_job_without_xdist_or_pytest_benchmark(tmp_path: Path) -> None:
    """`python -m pytest -p no:xdist examples --kperf`, the issue's own command, with pytest-benchmark
    blocked as well: every example runs, is captured and stored."""
    db = tmp_path / "runs.db"
    r = _pytest(*_blocking(("xdist", "benchmark")), "examples", "--kperf", "--kperf-db", str(db))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "16 passed" in r.stdout
    assert "78 variant(s) captured" in r.stdout
    assert f"stored in {db}" in r.stdout


@pytest.mark.parametrize("flag", [["-n", "2"], ["-n4"], ["-nauto"], ["--numprocesses=2"]])
def test_workers_without_xdist_is_one_usage_line(flag: list[str], tmp_path: Path) -> None:
    r = _pytest(
        "-p",
        "no:xdist",
        "examples/test_vector_add.py",
        "--kperf",
        "--kperf-db",
        str(tmp_path / "x.db"),
        *flag,
    )
    assert r.returncode == 4, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "pytest-xdist is not installed" in ln]
    assert len(lines) == 1 and "pip install pytest-xdist" in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_without_kperf_the_n_flag_is_pytest_s_business() -> None:
    """kperf off: pytest's own message stands, kperf says nothing."""
    r = _pytest("-p", "no:xdist", "--collect-only", "-q", "examples", "-n", "2")
    assert r.returncode == 4
    # pytest's usage lines name the rootdir and inifile: a checkout in a folder called kperf-ci
    # (CI's clean clone, say) must not read as kperf speaking
    assert "kperf" not in r.stderr.replace(str(ROOT), "<root>")


class _Plugins:
    def __init__(self, xdist: bool) -> None:
        self.xdist = xdist

    def has_plugin(self, name: str) -> bool:
        return self.xdist and name == "xdist"


@pytest.mark.parametrize(
    ("gpus", "xdist", "mode", "says"),
    [
        ("0,1", False, "gpu", True),
        ("0", False, "gpu", False),
        ("0,1", True, "gpu", False),
        ("0,1", False, "static", False),
    ],
)
def test_one_gpu_note_only_where_a_fleet_is_missed(
    monkeypatch: pytest.MonkeyPatch, gpus: str, xdist: bool, mode: str, says: bool
) -> None:
    """The GPUs are faked at the device boundary (CUDA_VISIBLE_DEVICES, which fleet reads)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", gpus)
    note = fleet.one_gpu_note(SimpleNamespace(pluginmanager=_Plugins(xdist)), mode)  # type: ignore[arg-type]
    assert (note is not None) == says
    if says:
        assert note.count("\n") == 0 and "2 GPUs" in note and "pip install pytest-xdist" in note
