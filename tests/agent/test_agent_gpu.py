"""On a CUDA GPU: the timed path of the harness (same-job A/B, re-validation, roofline)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kperf_ci.agent import cheats, checks
from kperf_ci.agent.verify import run_harness
from kperf_ci.config import ABPolicy, Settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from conftest import needs_gpu  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ORIG = ROOT / "examples/kernels/vector_add.py"
SRC = ORIG.read_text()
AB = ABPolicy.from_settings(Settings())  # the shipped defaults (kperf agent adds [tool.kperf], KPERF_AB_*)


def _bench(source: str):
    """The harness's timed path on the GPU: the candidate against the original, one second."""
    return run_harness(
        "vector_add",
        ORIG,
        source,
        device="cuda",
        seeds=[1],
        timeout_s=300,
        bench=True,
        bench_budget_s=1.0,
        ab=AB,
    )


@needs_gpu
@pytest.mark.gpu
def test_good_candidate_is_timed_against_the_original():
    v = _bench(cheats.good(SRC))
    assert v.ok, v.reason
    b = v.bench
    assert b and b["ci_low"] <= b["ratio"] <= b["ci_high"] and b["pairs"] >= 20 and b["head_ms"] > 0
    assert "bfloat16" in v.correctness["dtypes"]


@needs_gpu
@pytest.mark.gpu
@pytest.mark.parametrize(
    "name", ["above_roofline", "other_stream", "value_dependent_speed", "patched_timers"]
)
def test_gpu_cheats_rejected(name):
    c = next(c for c in cheats.cheats(SRC) if c.name == name)
    v = _bench(c.source)
    assert (v.ok, v.hack) == (False, c.expected), v.reason
    if name == "above_roofline":
        assert v.hack == checks.ROOFLINE and "measurement error" in v.reason
