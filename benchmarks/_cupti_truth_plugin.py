"""pytest plugin of timing_accuracy's ``launches`` step (``-p _cupti_truth_plugin``, kperf's own
plugin off): every distinct Triton launch a test makes is kept (its arguments cloned before the
launch), and after the test each is timed on those same arguments twice:

- ``kperf_us``: kperf-ci's timing engine with the defaults GPU mode's replay uses
  (``engine.time_callable(call, TimingConfig(budget_s=timing_budget_s))``);
- ``cupti_us``: the truth, benchmarks/_cupti_truth.py (torch.profiler's public API, 40 calls,
  L2 flushed before each), which shares no code with kperf.

Both time one closure on one set of buffers, so where the buffers sit (worth +-5% on 6-10 us
kernels, the field notes say) is the same for both. One JSON line per launch goes to
``$KPERF_TRUTH_OUT``; ``$KPERF_TRUTH_REPO`` names the repository, ``$KPERF_TRUTH_PER_TEST``
bounds the launches kept per test (default 3) and ``$KPERF_TRUTH_MAX`` per session (default 40).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

_state: dict = {"recording": None, "done": 0}


def _describe(a):
    import torch

    if isinstance(a, torch.Tensor):
        return ("T", str(a.dtype).replace("torch.", ""), tuple(a.shape), tuple(a.stride()))
    if a is None or isinstance(a, (bool, int, float, str)):
        return a
    return type(a).__name__


def _clone(a):
    import torch

    return a.detach().clone() if isinstance(a, torch.Tensor) else a


def _install() -> None:
    from triton.runtime.jit import JITFunction

    orig = JITFunction.run
    if getattr(orig, "_truth", False):
        return

    def run(self, *args, grid, warmup, **kwargs):
        rec = _state["recording"]
        if not warmup and rec is not None and len(rec) < int(os.environ.get("KPERF_TRUTH_PER_TEST", "3")):
            g = getattr(grid, "__code__", grid)  # a META lambda: its code, not the object of this call
            key = (self.__name__, tuple(_describe(a) for a in args), tuple(sorted(kwargs)), str(g))
            key = key + (tuple(sorted((k, _describe(v)) for k, v in kwargs.items())),)
            if key not in rec:
                rec[key] = (self, [_clone(a) for a in args], {k: _clone(v) for k, v in kwargs.items()}, grid)
        return orig(self, *args, grid=grid, warmup=warmup, **kwargs)

    run._truth = True
    JITFunction.run = run


def pytest_configure(config) -> None:
    _install()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    _state["recording"] = {} if _state["done"] < int(os.environ.get("KPERF_TRUTH_MAX", "40")) else None
    try:
        return (yield)
    finally:
        launches, _state["recording"] = _state["recording"], None
        if launches:
            _measure(item.nodeid, launches)
        if _state["done"] >= int(os.environ.get("KPERF_TRUTH_MAX", "40")):
            item.session.shouldstop = "enough launches measured"  # the rest of the suite adds none


def _measure(test: str, launches: dict) -> None:
    import torch
    from _cupti_truth import cupti_samples, median_us

    from kperf_ci.capture.timing import engine
    from kperf_ci.config import Settings

    out = Path(os.environ["KPERF_TRUTH_OUT"])
    for key, (fn, args, kwargs, grid) in launches.items():
        if _state["done"] >= int(os.environ.get("KPERF_TRUTH_MAX", "40")):
            return

        def call(fn=fn, args=args, kwargs=kwargs, grid=grid):
            return fn.run(*args, grid=grid, warmup=False, **kwargs)

        row = {"repo": os.environ.get("KPERF_TRUTH_REPO", "?"), "test": test, "kernel": fn.__name__}
        described = [*key[1], *(d for _, d in key[-1])]  # positional, then keyword arguments
        first = next((d for d in described if isinstance(d, tuple) and d[0] == "T"), None)
        row["shape"] = f"{first[1]}:{'x'.join(map(str, first[2]))}" if first else ""
        try:
            call()
            torch.cuda.synchronize()
            r = engine.time_callable(call, engine.TimingConfig(budget_s=Settings.timing_budget_s))
            truth = cupti_samples({"k": call}, n=40)["k"]
        except Exception as e:  # a launch that cannot be re-made: said, not measured
            row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
        else:
            row.update(kperf_us=r.median * 1000, method=r.method, n=r.n, cupti_us=median_us(truth))
            row["events_us"] = (
                (sorted(r.event_samples_ms)[len(r.event_samples_ms) // 2] * 1000)
                if r.event_samples_ms
                else None
            )
        _state["done"] += 1
        with out.open("a") as f:
            f.write(json.dumps(row) + "\n")
        torch.cuda.empty_cache()
