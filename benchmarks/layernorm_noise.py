"""Why does the layernorm example (8192x4096 fp16) spread so much under kperf's timing when the
8192x1000 fp32 one does not? Time it several ways on the GPU, with the SM clock alongside.

    python benchmarks/layernorm_noise.py --out benchmarks/results/layernorm_noise.json

Methods, each 1,500 samples of one call (softmax 8192x4096 fp32, as stable as a memory-bound
kernel gets under kperf, is the control):
- events_b2b: CUDA events around each call, calls back to back (the GPU never idles)
- events_paced: the same with an idle pause after each batch of 10 as long as the batch
  (kperf's 50% duty cycle)
- graph: the call captured in a CUDA graph, events around each replay
- do_bench: triton.testing.do_bench (its own L2 flush), median of 20 repeats
The SM clock (NVML) is read after every batch of 10.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import triton

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))

from kernels.layernorm import layer_norm  # noqa: E402
from kernels.softmax import softmax  # noqa: E402


def nvml_clock():
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        return lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
    except Exception:  # noqa: BLE001
        return lambda: float("nan")


def timed(fn, n, paced: bool, clock):
    out, clocks = [], []
    for _ in range(n // 10):
        evs = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(10)
        ]
        t0 = time.perf_counter()
        for s, e in evs:
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        out += [s.elapsed_time(e) for s, e in evs]
        clocks.append(clock())
        if paced:
            time.sleep(time.perf_counter() - t0)
    return out, clocks


def summary(xs):
    a = np.asarray(xs)
    k = len(a) // 10
    return {
        "n": len(a),
        "median": float(np.median(a)),
        "p10": float(np.percentile(a, 10)),
        "p90": float(np.percentile(a, 90)),
        "cv": float(a.std() / a.mean()),
        "tenths": [float(np.median(a[i * k : (i + 1) * k])) for i in range(10)],
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("-n", type=int, default=1500)
    args = ap.parse_args()
    clock = nvml_clock()
    torch.manual_seed(0)
    x = -2.3 + 0.5 * torch.randn(8192, 4096, device="cuda", dtype=torch.float16)
    w = torch.rand(4096, device="cuda", dtype=torch.float16)
    b = torch.rand(4096, device="cuda", dtype=torch.float16)
    x32 = torch.randn(8192, 1000, device="cuda", dtype=torch.float32)
    w32 = torch.rand(1000, device="cuda", dtype=torch.float32)
    b32 = torch.rand(1000, device="cuda", dtype=torch.float32)
    s = torch.randn(8192, 4096, device="cuda", dtype=torch.float32)
    cases = {
        "layernorm_8192x4096_fp16": lambda: layer_norm(x, w, b, 1e-5),
        "layernorm_8192x1000_fp32": lambda: layer_norm(x32, w32, b32, 1e-5),
        "softmax_8192x4096_fp32": lambda: softmax(s),
    }
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__}
    for name, fn in cases.items():
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        r = {}
        for method in ("events_b2b", "events_paced"):
            xs, clocks = timed(fn, args.n, method == "events_paced", clock)
            r[method] = summary(xs) | {
                "clock_mhz": [float(np.min(clocks)), float(np.median(clocks)), float(np.max(clocks))]
            }
            r[method]["corr_time_clock"] = float(
                np.corrcoef([np.median(xs[i * 10 : (i + 1) * 10]) for i in range(len(clocks))], clocks)[0, 1]
            )
        g = torch.cuda.CUDAGraph()
        st = torch.cuda.Stream()
        st.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(st):
            fn()
            torch.cuda.synchronize()
            with torch.cuda.graph(g):
                fn()
        torch.cuda.synchronize()
        xs, clocks = timed(g.replay, args.n, False, clock)
        r["graph"] = summary(xs) | {
            "clock_mhz": [float(np.min(clocks)), float(np.median(clocks)), float(np.max(clocks))]
        }
        r["do_bench_ms"] = [float(triton.testing.do_bench(fn, return_mode="median")) for _ in range(20)]
        res[name] = r
        print(
            name,
            {
                k: (
                    round(v["median"], 4),
                    round(v["p10"], 4),
                    round(v["p90"], 4),
                    round(v["cv"], 3),
                    v["clock_mhz"],
                )
                for k, v in r.items()
                if isinstance(v, dict)
            },
            "do_bench",
            np.round(np.percentile(r["do_bench_ms"], [0, 50, 100]), 4),
            flush=True,
        )
        for k, v in r.items():
            if isinstance(v, dict):
                print(
                    "   ",
                    k,
                    "tenths",
                    np.round(v["tenths"], 4),
                    "corr",
                    round(v.get("corr_time_clock", float("nan")), 2),
                )
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
