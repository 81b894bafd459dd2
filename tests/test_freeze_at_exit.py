"""KPERF_FREEZE_AT_EXIT: a pytest session freezes its heap after its other exit handlers (the
interpreter's final collections then skip torch's objects), on only where asked; `kperf ab`'s
passes ask for it unless the user set it to 0."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kperf_ci.prcheck.pass_process import _env_for

# registered when the conftest is imported, before the plugin's pytest_configure: atexit runs
# handlers last-in first-out, so this one runs after the plugin's and sees what it did
CONFTEST = """
import atexit, gc, os

atexit.register(lambda: os.write(1, f"frozen at exit: {gc.get_freeze_count() > 0}\\n".encode()))
"""


@pytest.mark.parametrize("value, frozen", [("1", True), ("0", False), (None, False)])
def test_a_session_freezes_its_heap_at_exit_only_where_asked(tmp_path: Path, value, frozen) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_one.py").write_text("def test_one():\n    assert True\n")
    env = {k: v for k, v in os.environ.items() if k not in ("KPERF_FREEZE_AT_EXIT", "PYTEST_ADDOPTS")}
    if value is not None:
        env["KPERF_FREEZE_AT_EXIT"] = value
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_one.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"frozen at exit: {frozen}" in r.stdout, r.stdout


def test_kperf_ab_passes_freeze_unless_the_user_said_0(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("KPERF_FREEZE_AT_EXIT", raising=False)
    assert _env_for(tmp_path)["KPERF_FREEZE_AT_EXIT"] == "1"
    monkeypatch.setenv("KPERF_FREEZE_AT_EXIT", "0")
    assert _env_for(tmp_path)["KPERF_FREEZE_AT_EXIT"] == "0"
