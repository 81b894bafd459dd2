"""Why did tests/test_timing.py::test_gpu_events_match_a_known_copy time a device copy with CUDA-graph
replay instead of events once (stop 58, H200)?  Repeats the test's measurement and prints, for each
run, what ``steps._choose`` saw when it picked the method: the host's time to issue a call (the
last three batches' medians it reads) against the call's warm device median.  A diagnostic of
one internal choice, run in-process with a spy on it, not evidence: the evidence stays the
gpu-marked tests' log (``pytest -m gpu`` on the device), which this helps explain.  Run on the GPU:

    python benchmarks/device/copy_method_diag.py [RUNS]
"""

from __future__ import annotations

import sys

import torch

from kperf_ci.capture.timing import steps
from kperf_ci.capture.timing.engine import TimingConfig, time_callable

seen: list[dict] = []
_choose = steps._choose


def _spy(v, be, cfg):  # noqa: ANN001 - the same arguments as steps._choose
    _choose(v, be, cfg)
    seen.append(
        {
            "backend": type(be).__name__,
            "host_ms": [round(h, 4) for h in v.host_ms],
            "warm_median": round(v.warm_median, 4),
            "method": v.method,
        }
    )


steps._choose = _spy
x = torch.randn(64 << 20, device="cuda")
y = torch.empty_like(x)
for i in range(int(sys.argv[1]) if len(sys.argv) > 1 else 12):
    seen.clear()
    r = time_callable(lambda: y.copy_(x), TimingConfig(budget_s=0.5))
    print(f"run {i}: method {r.method} median {r.median:.4f} ms n {r.n}; chose: {seen}")
