"""The harness's A/B bench reports each side's median as the package's one median."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import torch

from kperf_ci.agent import checks, harness
from kperf_ci.config import ABPolicy, Settings


def test_bench_medians_average_the_middle_two_of_an_even_count(monkeypatch):
    """An even count of samples: the bench's base_ms and head_ms are sample_stats.median's (the
    mean of the middle two), as the A/B document's are; the hand-written sorted(x)[n // 2] it
    replaced gave the upper one (40.0 and 4.0 here). The GPU parts are stood in for: the timing
    loop returns these samples, the inputs are CPU tensors."""
    res = SimpleNamespace(
        base_ms=[40.0, 10.0, 30.0, 20.0],
        head_ms=[4.0, 1.0, 3.0, 2.0],
        verdict="faster",
        ratio=0.1,
        ci_low=0.09,
        ci_high=0.11,
        n_pairs=4,
        method="paired",
        seconds=1.0,
        warmup_seconds=0.5,
        warnings=[],
    )
    monkeypatch.setattr(harness.interleaved, "adaptive_ab", lambda *a, **k: res)
    monkeypatch.setattr(checks, "make_inputs", lambda *a, **k: (torch.ones(8),))
    monkeypatch.setattr(checks, "run_case", lambda *a, **k: None)
    fake_torch = SimpleNamespace(
        equal=torch.equal,
        cuda=SimpleNamespace(synchronize=lambda: None, get_device_name=lambda: "not a known GPU"),
    )
    target = SimpleNamespace(bench_shape=(8,), dtypes=["float32"])
    job = {"ab": dataclasses.asdict(ABPolicy.from_settings(Settings()))}
    bench = harness._bench(fake_torch, target, torch.neg, torch.neg, job, ("a.py", "b.py"), lambda: [])
    assert bench["base_ms"] == 25.0 and bench["head_ms"] == 2.5
