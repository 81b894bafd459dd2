"""A/A noise of kperf's timing across fresh processes, next to naive host-clock timing and
triton.testing.do_bench. Needs a CUDA GPU; writes timing_noise.{json,md}.

Each of ``--processes`` fresh Python processes (default 8) builds every example kernel's inputs
from the same seed, then measures each kernel's median with three methods, in an order that
alternates between processes:

- ``kperf``: ``kperf_ci.capture.timing.engine.time_callable`` with its defaults (warm-up until batch
  medians settle, CUDA events, L2 flush outside the window, CI-driven repetition, 2 s budget,
  paced to a 50% duty cycle); ``kperf_unpaced``: the same without pacing (duty cycle 1);
- ``host_clock``: ``time.perf_counter`` around call + ``torch.cuda.synchronize()`` (pytest-benchmark
  style), 10 warm-up calls then the median of 100;
- ``do_bench``: ``triton.testing.do_bench(fn, return_mode="median")`` with its defaults.

Per kernel and method: the coefficient of variation (stdev / mean) of the per-process medians
and their spread ((max - min) / median). Target: kperf's CV <= do_bench's on every kernel.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import cases, cv, device_info, out_dir, spread, write_json  # noqa: E402

METHODS = ("kperf", "kperf_unpaced", "host_clock", "do_bench")


def worker(index: int, only: list[str] | None, methods: list[str]) -> dict:
    import torch
    import triton

    from kperf_ci.capture.timing.engine import TimingConfig, time_callable, time_host_clock

    order = list(methods) if index % 2 == 0 else list(reversed(methods))
    out: dict = {"index": index, "order": order, "kernels": {}}
    for case in cases(only):
        fn = case.make(1234)
        fn()  # compile (and autotune) outside every method
        torch.cuda.synchronize()
        res: dict = {}
        for m in order:
            t = time.perf_counter()
            if m in ("kperf", "kperf_unpaced"):
                r = time_callable(fn, TimingConfig() if m == "kperf" else TimingConfig(duty_cycle=1.0))
                res[m] = {
                    "median": r.median,
                    "n": r.n,
                    "method": r.method,
                    "ci": [r.ci_low, r.ci_high],
                    "stopped_by": r.stopped_by,
                    "warnings": r.warnings,
                }
            elif m == "host_clock":
                xs = time_host_clock(fn, n=100, warmup=10)
                res[m] = {"median": statistics.median(xs), "n": len(xs)}
            else:
                res[m] = {"median": float(triton.testing.do_bench(fn, return_mode="median"))}
            res[m]["seconds"] = time.perf_counter() - t
        out["kernels"][case.name] = res
    return out


def render_md(doc: dict) -> str:
    d = doc["device"]
    lines = [
        "# Timing noise: A/A spread across fresh processes",
        "",
        f"Device: {d.get('gpu')} ({d.get('sm_count')} SMs), driver {d.get('driver')}, CUDA {d.get('cuda')}, "
        f"torch {d.get('torch')}, triton {doc['triton']}. {doc['processes']} fresh processes, each timing "
        "every kernel with the four methods (order alternating between processes). Produced by "
        "`benchmarks/timing_noise.py`.",
        "",
        "CV = stdev / mean of the per-process medians; spread = (max - min) / median.",
        "",
        "| kernel | median ms (kperf) | kperf CV | kperf spread | do_bench CV | do_bench spread "
        "| host-clock CV "
        "| host-clock spread | kperf unpaced CV | kperf CV <= do_bench |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for k in doc["kernels"]:

        def f(m, key, s=k["stats"]):
            v = s.get(m, {}).get(key)
            return "n/a" if v is None else f"{v:.3%}"

        s = k["stats"]
        med = s.get("kperf", {}).get("median")
        lines.append(
            f"| {k['name']} | {med:.4f} | {f('kperf', 'cv')} | {f('kperf', 'spread')} | "
            f"{f('do_bench', 'cv')} | "
            f"{f('do_bench', 'spread')} | {f('host_clock', 'cv')} | {f('host_clock', 'spread')} | "
            f"{f('kperf_unpaced', 'cv')} | {'yes' if k.get('kperf_cv_le_do_bench') else 'NO'} |"
        )
    lines += ["", "## Target", ""]
    if doc.get("target_met"):
        lines.append("kperf's CV <= do_bench's on every kernel: met.")
    else:
        lines.append(
            "kperf's CV <= do_bench's on every kernel: **missed** on "
            + ", ".join(k["name"] for k in doc["kernels"] if not k.get("kperf_cv_le_do_bench"))
            + "."
        )
    if doc.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {n}" for n in doc["notes"]]
    return "\n".join(lines) + "\n"


def summarize(doc: dict) -> None:
    names = []
    for p in doc["runs"]:
        for n in p["kernels"]:
            if n not in names:
                names.append(n)
    kernels = []
    for n in names:
        stats = {}
        for m in METHODS:
            meds = [
                p["kernels"][n][m]["median"]
                for p in doc["runs"]
                if n in p["kernels"] and m in p["kernels"][n]
            ]
            stats[m] = {
                "medians": meds,
                "median": statistics.median(meds) if meds else None,
                "cv": cv(meds),
                "spread": spread(meds),
            }
        kc, dc = stats["kperf"]["cv"], stats["do_bench"]["cv"]
        kernels.append(
            {
                "name": n,
                "stats": stats,
                "kperf_cv_le_do_bench": kc is not None and dc is not None and kc <= dc,
            }
        )
    doc["kernels"] = kernels
    doc["target_met"] = (
        bool(kernels) and all(k["kperf_cv_le_do_bench"] for k in kernels) and len(doc["runs"]) >= 8
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--processes", type=int, default=8)
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--methods", nargs="*", default=list(METHODS), choices=METHODS)
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker is not None:
        print("KPERF_JSON " + json.dumps(worker(args.worker, args.only, args.methods)), flush=True)
        return 0

    import torch
    import triton

    out = out_dir(args.out)
    doc: dict = {
        "device": device_info(),
        "triton": triton.__version__,
        "torch": torch.__version__,
        "processes": 0,
        "methods": list(METHODS),
        "runs": [],
        "kernels": [],
    }
    for i in range(args.processes):
        t = time.perf_counter()
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(i), "--methods", *args.methods]
        if args.only:
            cmd += ["--only", *args.only]
        p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ))
        line = next((ln for ln in p.stdout.splitlines() if ln.startswith("KPERF_JSON ")), None)
        if p.returncode != 0 or line is None:
            print(p.stdout[-2000:], p.stderr[-4000:], file=sys.stderr)
            doc.setdefault("errors", []).append({"process": i, "stderr": p.stderr[-2000:]})
            continue
        doc["runs"].append(json.loads(line[len("KPERF_JSON ") :]))
        doc["processes"] = len(doc["runs"])
        summarize(doc)
        write_json(out / "timing_noise.json", doc)
        print(
            f"process {i}: {time.perf_counter() - t:.1f} s "
            + ", ".join(
                f"{n}: " + "/".join(f"{r[m]['median']:.4f}" for m in r)
                for n, r in doc["runs"][-1]["kernels"].items()
            ),
            flush=True,
        )
    summarize(doc)
    write_json(out / "timing_noise.json", doc)
    (out / "timing_noise.md").write_text(render_md(doc))
    print(render_md(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
