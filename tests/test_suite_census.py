"""benchmarks/_suite_census.py: every Python process of a run counted at exit, by kind, with the
non-Python tools it waited for; and nothing left in site-packages afterwards."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _suite_census  # noqa: E402 - a benchmark helper, not a package module


def test_processes_are_counted_by_kind_with_their_tools(tmp_path: Path) -> None:
    logs = tmp_path / "census"
    logs.mkdir()
    env = dict(os.environ, **{_suite_census.ENV: str(logs)})
    # a kperf command, and a plain Python process that runs a tool (a shell counting, a few tenths
    # of a second of CPU) and a Python child
    script = (
        "import subprocess, sys; "
        "subprocess.run(['sh', '-c', 'i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done']); "
        "subprocess.run([sys.executable, '-c', 'pass'])"
    )
    with _suite_census.logging_processes(logs) as counted:
        assert counted
        subprocess.run(
            [sys.executable, "-m", "kperf_ci", "compare", "--help"], env=env, check=True, capture_output=True
        )
        subprocess.run([sys.executable, "-c", script], env=env, check=True)
    assert not _suite_census.pth_file().exists()
    c = _suite_census.census(logs)
    rows = {r["kind"]: r for r in c["kinds"]}
    assert rows["kperf command"]["processes"] == 1 and rows["kperf command"]["cpu_s"] > 0
    assert rows["other Python"]["processes"] == 2  # the script and its child
    assert rows["other Python"]["tools_cpu_s"] >= 0.1  # the shell, not the Python child
    assert rows["kperf command"]["tools_cpu_s"] < 0.05
    assert [s["subcommand"] for s in c["kperf_subcommands"]] == ["compare"]
    md = "\n".join(_suite_census.markdown(c, tree_cpu_s=10.0))
    assert "| kperf command | 1 |" in md and "| compare | 1 |" in md
    # after the run, a process with the variable set logs nothing
    subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
    assert len(list(logs.glob("*.json"))) == 3
