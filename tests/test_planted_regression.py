"""Done-when of the foundation: a regression planted in an example fails `kperf compare`, naming
the kernel and the metric; reverting it passes again. Everything real: the example test file,
the plugin in static mode, Triton's AOT compiler, the SQLite files, the `kperf` console script.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import without

pytest.importorskip("triton")
pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
# One of the example's two shapes: the plants change the kernel's code, not its shapes, and each
# shape's six autotune configs compile on their own, so the second shape only doubled the compiles
# (12 a capture to 6) and proved nothing more. The square one, a multiple of 16 as shapes on a GPU are.
MATMUL = "examples/test_matmul.py::test_matmul[128-128-64]"


def capture(db: Path, plant: str | None) -> None:
    env = without("PYTEST_", "KPERF_")
    env.pop("TRITON_INTERPRET", None)
    if plant:
        env["KPERF_EXAMPLE_PLANT"] = plant
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        MATMUL,
        "-q",
        "-p",
        "no:cacheprovider",
        "--kperf",
        "--kperf-mode",
        "static",
        "--kperf-arch",
        "sm_90",
        "--kperf-db",
        str(db),
        # one compile worker: six variants, and a second worker's start (importing Triton) cost
        # more than it saved; how many workers compile has no say in the metrics compared
        "--kperf-jobs",
        "1",
    ]
    # Not the baseline named in pyproject.toml: the test compares explicitly below.
    env["KPERF_BASELINE"] = ""
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "1 passed" in proc.stdout, proc.stdout[-3000:]  # the shape selected still exists


def compare(base: Path, db: Path) -> subprocess.CompletedProcess:
    kperf = Path(sys.executable).with_name("kperf")
    env = {**os.environ, "COLUMNS": "250"}
    return subprocess.run(
        [str(kperf), "compare", "--baseline", str(base), "--db", str(db)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_planted_regressions_fail_compare_and_revert_passes(tmp_path: Path) -> None:
    """Both plants against one base capture, and one revert for both (the unplanted code is the
    same whichever plant it reverts): four captures instead of six."""
    base, reverted = tmp_path / "base.db", tmp_path / "reverted.db"
    capture(base, None)
    for plant, metric in (("spills", "spills"), ("smem", "shared_bytes")):
        planted = tmp_path / f"{plant}.db"
        capture(planted, plant)
        bad = compare(base, planted)
        assert bad.returncode == 1, (plant, bad.stdout + bad.stderr)
        regression_lines = [line for line in bad.stdout.splitlines() if "REGRESSION" in line]
        assert regression_lines, (plant, bad.stdout)
        assert any("matmul" in line and metric in line for line in regression_lines), (plant, bad.stdout)

    capture(reverted, None)
    good = compare(base, reverted)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "REGRESSION" not in good.stdout
