"""Which clock kperf-ci times with: CUPTI kernel durations (torch's profiler, read raw) against
CUDA events (kperf's fallback, and do_bench's method), both through kperf's engine with its
defaults, each checked against the truth of benchmarks/_cupti_truth.py (torch.profiler's public
API in a loop of its own). Also what each costs per sample on the host.

    python benchmarks/timing_methods.py --out benchmarks/results      # on the GPU machine

Writes ``timing_methods.{json,md}``; every number and sentence of the .md comes from here.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import kperf_commit  # noqa: E402
from _cupti_truth import cupti_samples  # noqa: E402

NAME = "timing_methods"


def _kernels():
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def add(x, y, out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)

    def add_call(n):
        x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        out = torch.empty_like(x)
        return lambda: add[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)

    def mm_call(n):
        a = torch.randn(n, n, device="cuda", dtype=torch.float16)
        b = torch.randn(n, n, device="cuda", dtype=torch.float16)
        return lambda: torch.mm(a, b)

    out = {f"add 2^{k}": add_call(1 << k) for k in (10, 14, 17, 20, 22, 24, 26)}
    out.update({f"mm fp16 {n}": mm_call(n) for n in (1024, 4096, 8192)})
    return out


def _kperf(call, method: str) -> dict:
    from kperf_ci.capture.timing import engine

    if method == "events":
        os.environ["KPERF_TIMING"] = "events"
    else:
        os.environ.pop("KPERF_TIMING", None)
    t = time.perf_counter()
    r = engine.time_callable(call)
    wall = time.perf_counter() - t
    return {
        "method": r.method,
        "median_us": r.median * 1000,
        "n": r.n,
        "host_ms_per_sample": r.elapsed_s * 1000 / max(r.n, 1),
        "wall_s": wall,
        "ci_rel": r.ci_rel_width,
        "stopped_by": r.stopped_by,
        "event_median_us": statistics.median(r.event_samples_ms) * 1000 if r.event_samples_ms else None,
        "note": r.method_note,
    }


def run() -> dict:
    import torch
    import triton

    from kperf_ci.capture.timing import cupti

    t0 = time.perf_counter()
    reason = cupti.unavailable_reason()
    init_s = time.perf_counter() - t0
    rows = []
    for name, call in _kernels().items():
        truth = cupti_samples({"k": call}, n=60)["k"]
        row = {"kernel": name, "truth_us": statistics.median(truth)}
        row["cupti"] = _kperf(call, "cupti")
        row["events"] = _kperf(call, "events")
        for m in ("cupti", "events"):
            row[m]["diff_us"] = row[m]["median_us"] - row["truth_us"]
            row[m]["diff_pct"] = 100 * row[m]["diff_us"] / row["truth_us"]
        rows.append(row)
    os.environ.pop("KPERF_TIMING", None)

    def ok(r):
        return abs(r["diff_us"]) <= max(0.01 * r["median_us"], 0.1)

    return {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "commit": kperf_commit(),
        "cupti_unavailable": reason,
        "cupti_first_start_s": init_s,
        "rows": rows,
        "within_1pct_or_0p1us": {m: sum(ok(r[m]) for r in rows) for m in ("cupti", "events")},
        "host_ms_per_sample_median": {
            m: statistics.median(r[m]["host_ms_per_sample"] for r in rows) for m in ("cupti", "events")
        },
    }


def render(d: dict) -> str:
    n = len(d["rows"])
    lines = [
        f"# Timing methods against CUPTI truth ({d['device']})",
        "",
        f"kperf-ci {d['commit']}, torch {d['torch']}, triton {d['triton']}. Written by "
        "`python benchmarks/timing_methods.py`. Truth: benchmarks/_cupti_truth.py (torch.profiler's "
        "public API, 60 calls, L2 flushed before each, kernel durations summed per call). kperf: "
        "`engine.time_callable` with its defaults, once with CUPTI (the default) and once with "
        "`KPERF_TIMING=events` (the fallback: CUDA events, graph replay for short or host-bound calls).",
        "",
        f"CUPTI available: {'yes' if d['cupti_unavailable'] is None else 'no: ' + d['cupti_unavailable']}; "
        f"the first profiler start in the process took {d['cupti_first_start_s']:.2f} s.",
        "",
        "| kernel | truth us | CUPTI us | diff | events us | diff "
        "| CUPTI host ms/sample | events host ms/sample |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in d["rows"]:
        c, e = r["cupti"], r["events"]
        lines.append(
            f"| {r['kernel']} | {r['truth_us']:.3f} | {c['median_us']:.3f} | {c['diff_us']:+.3f} us "
            f"({c['diff_pct']:+.2f}%) | {e['median_us']:.3f} | "
            f"{e['diff_us']:+.3f} us ({e['diff_pct']:+.2f}%) "
            f"| {c['host_ms_per_sample']:.3f} | {e['host_ms_per_sample']:.3f} |"
        )
    w, h = d["within_1pct_or_0p1us"], d["host_ms_per_sample_median"]
    lines += [
        "",
        f"Within max(1%, 0.1 us) of the truth: CUPTI {w['cupti']} of {n}, events {w['events']} of {n}.",
        f"Median host time per sample: CUPTI {h['cupti']:.3f} ms, events {h['events']:.3f} ms "
        "(measurement only, warm-up excluded; pacing included).",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    a = ap.parse_args()
    d = run()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{NAME}.json").write_text(json.dumps(d, indent=1) + "\n")
    (out / f"{NAME}.md").write_text(render(d))
    print(render(d))


if __name__ == "__main__":
    main()
