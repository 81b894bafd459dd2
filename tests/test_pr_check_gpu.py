"""`kperf ab --base HEAD~1` timed on a GPU: planted +8% traffic is slower, its reverse faster, a
comment-only change costs no GPU time.  The repository comes from benchmarks/pr_check_eval.py, which
runs the full evaluation (every class, reference effects, A/A) and commits its results."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import needs_gpu

ROOT = Path(__file__).resolve().parent.parent


@needs_gpu
@pytest.mark.gpu
def test_kperf_ab_times_changed_tests_and_calls_them_right(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import pr_check_eval as ev
    finally:
        sys.path.pop(0)
    repo = ev.planted_repo(tmp_path / "planted")
    r = ev.kperf_ab(repo, "-k", "traffic_8 or faster or comment or grid")
    cases = ev.rows_by_case(r["doc"])
    assert r["exit_code"] == 1, r["stderr"]  # a confident slowdown fails the check
    assert cases["traffic_8"]["verdict"] == "slower"
    assert cases["grid"]["verdict"] == "slower"  # identical SASS, one more CTA than SMs
    assert cases["faster"]["verdict"] == "faster"
    assert cases["comment"]["status"] == "identical" and cases["comment"]["gpu_s"] == 0
    assert (repo / "reports/ab/comment.md").read_text().count("slower") >= 2
