"""CUPTI kernel durations on the device (skipped without CUDA): kperf's timing agrees with
torch.profiler's own kernel durations (benchmarks/_cupti_truth.py, a loop that shares no code
with kperf), and reads below CUDA events by about the launch."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


def _add_call(n: int):
    import triton
    import triton.language as tl

    @triton.jit
    def add(x, y, out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)

    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    return lambda: add[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)


@pytest.mark.parametrize("n", [1 << 12, 1 << 20, 1 << 24])
def test_kperf_agrees_with_the_profiler(n: int) -> None:
    from _cupti_truth import cupti_samples, median_us

    from kperf_ci.capture.timing import engine

    call = _add_call(n)
    r = engine.time_callable(call)
    assert r.method == "cupti", r.method_note
    truth = median_us(cupti_samples({"k": call}, n=60)["k"])
    kperf_us = r.median * 1000
    assert abs(kperf_us - truth) <= max(0.02 * truth, 0.2), (kperf_us, truth)
    # the events beside it hold the launch: never below the kernel
    events_us = sorted(r.event_samples_ms)[len(r.event_samples_ms) // 2] * 1000
    assert events_us > kperf_us


def test_events_are_forced_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from kperf_ci.capture.timing import cupti, engine

    monkeypatch.setenv(cupti.ENV_TIMING, "events")
    r = engine.time_callable(_add_call(1 << 16))
    assert r.method in ("events", "graph") and "KPERF_TIMING=events" in r.method_note
