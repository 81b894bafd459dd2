"""scripts/floor_pins.py: the pins CI installs for the dependency-floors job."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _floor_pins():
    spec = importlib.util.spec_from_file_location("floor_pins", ROOT / "scripts" / "floor_pins.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod.floor_pins


def test_every_declared_floor_is_pinned_exactly():
    pins = _floor_pins()(ROOT / "pyproject.toml", ["test"], {"triton", "ruff"})
    names = {p.split("==")[0].lower() for p in pins}
    # the runtime dependencies and the test tools, each at its lowest declared version
    assert {"pytest", "sqlite-utils", "rich", "click", "jinja2", "numpy", "scipy"} <= names
    assert {"pytest-xdist", "pytest-benchmark"} <= names and "triton" not in names
    assert "sqlite-utils==3.38" in pins and all("==" in p for p in pins)
    # tomli's marker (python_version < '3.11') decides whether it is pinned
    assert ("tomli" in names) == (sys.version_info < (3, 11))


def test_a_dependency_without_a_floor_is_refused(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\ndependencies = ["rich", "click>=8.1"]\n')
    with pytest.raises(SystemExit, match="'rich'.*has no `>=` floor"):
        _floor_pins()(tmp_path / "pyproject.toml", [], set())
