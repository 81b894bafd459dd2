"""Cost of the installed-but-disabled plugin: pytest on a suite of trivial tests, with kperf
loaded but not enabled vs. kperf not loaded at all (`-p no:kperf`), interleaved in fresh processes.

    python benchmarks/plugin_overhead.py [--runs 15] [--tests 500]

Writes benchmarks/results/plugin_overhead.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"

SUITE = """
import pytest

@pytest.mark.kperf(name="k")
@pytest.mark.parametrize("i", range({n}))
def test_marked(i):
    assert i >= 0

@pytest.mark.parametrize("i", range({n}))
def test_plain(i):
    assert i >= 0
"""


def one(cwd: Path, disabled: bool) -> float:
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_suite.py"]
    if disabled:
        cmd[3:3] = ["-p", "no:kperf"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"pytest failed: {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--tests", type=int, default=500, help="tests of each kind (marked, plain)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        cwd = Path(d)
        (cwd / "test_suite.py").write_text(SUITE.format(n=a.tests))
        one(cwd, False), one(cwd, True)  # warm the file system and bytecode caches
        loaded, absent = [], []
        for r in range(a.runs):
            order = (False, True) if r % 2 == 0 else (True, False)
            for disabled in order:
                (absent if disabled else loaded).append(one(cwd, disabled))
    med_l, med_a = statistics.median(loaded), statistics.median(absent)
    diffs = sorted(x - y for x, y in zip(loaded, absent, strict=True))
    result = {
        "python": platform.python_version(),
        "machine": platform.processor() or platform.machine(),
        "tests": 2 * a.tests,
        "runs": a.runs,
        "loaded_disabled_s": loaded,
        "not_loaded_s": absent,
        "median_loaded_disabled_s": med_l,
        "median_not_loaded_s": med_a,
        "median_paired_difference_s": statistics.median(diffs),
        "relative_overhead": med_l / med_a - 1,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "plugin_overhead.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "plugin_overhead.md").write_text(
        "# Plugin cost when disabled\n\n"
        f"`python benchmarks/plugin_overhead.py --runs {a.runs} --tests {a.tests}`: pytest on "
        f"{2 * a.tests} trivial tests (half marked `kperf`), fresh process per run, the two setups "
        f"interleaved; Python {result['python']}.\n\n"
        "| setup | median wall (s) |\n|---|---|\n"
        f"| kperf installed, not enabled | {med_l:.3f} |\n"
        f"| `-p no:kperf` | {med_a:.3f} |\n\n"
        f"Median paired difference: {result['median_paired_difference_s'] * 1000:+.1f} ms "
        f"({result['relative_overhead']:+.1%} of the run). The disabled plugin registers its "
        "marker and a pass-through fixture; it imports neither Triton, torch nor sqlite-utils.\n"
    )
    print(json.dumps({k: v for k, v in result.items() if not k.endswith("_s") or "median" in k}, indent=2))


if __name__ == "__main__":
    main()
