"""Does kernel replay time a launch as kperf.bench times it? (issue 15: within 2%)

    python benchmarks/replay_vs_bench.py            # -> benchmarks/results/replay_vs_bench.{json,md}
    python benchmarks/replay_vs_bench.py --only vector_add softmax --out /tmp/x

For each example kernel at a GPU-filling size (benchmarks/_common.py: one Triton launch per
call, random data), the same launch is measured two ways, each by kperf's own code:
- bench: ``kperf_ci.measure.measure.bench`` of the callable, what ``kperf.bench(fn)`` does in a test;
- replay: the launch captured by ``kperf_ci.capture.launches.replay.LaunchCopier`` while the callable runs
  once, then replayed on copies of its arguments by ``kperf_ci.measure.measure_replay.replay``, what GPU mode
  does for a marked test that never calls the fixture.
Order bench, replay, replay, bench (ABBA), so a drift of the clocks over the run hits both
sides alike; each side's time is the mean of its two medians. One process, one GPU, about
3-4 minutes on an H100 (progress on stdout); a case that would start after --deadline-s is
listed as not run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import cases, device_info, kperf_commit, out_dir, write_json  # noqa: E402

from kperf_ci.capture.launches.replay import LaunchCopier, ReplayDevice  # noqa: E402
from kperf_ci.measure import measure, measure_replay  # noqa: E402

TOLERANCE = 0.02  # issue 15: replayed timing within 2% of kperf.bench


def _timing(variant: Any) -> dict[str, Any]:
    m = {x.name: x.value for x in variant.metrics}
    t = json.loads(variant.artifacts.get("timing", "{}"))
    return {
        "median_ms": m["time.median"],
        "ci_low_ms": m.get("time.ci_low"),
        "ci_high_ms": m.get("time.ci_high"),
        "n": len(variant.samples),
        "method": t.get("method"),
        "flushed_l2": t.get("flushed_l2"),
        "stopped_by": t.get("stopped_by"),
        "kernel": variant.key.kernel,
        "config": variant.key.config,
    }


def run_case(case: Any, budget_s: float) -> dict[str, Any]:
    import torch

    call = case.make(0)
    call()  # compile outside both measurements
    torch.cuda.synchronize()
    req = measure.Request(
        nodeid=f"benchmarks/replay_vs_bench.py::{case.name}",
        name=case.name,
        resolve=lambda key: {"bytes": case.bytes_moved, "flops": case.flops or None}.get(key),
        budget_s=budget_s,
    )
    device = ReplayDevice.cuda()

    def by_bench() -> dict[str, Any]:
        m = measure.bench(req, {"fn": call}, (), {})
        return _timing(m.variants[0]) | {"warnings": [w for _, w in m.warnings]}

    def by_replay() -> dict[str, Any]:
        copier = LaunchCopier()
        with copier.capturing():
            call()
        torch.cuda.synchronize()
        n_launches = len(copier.launches)
        m = measure_replay.replay(req, copier, device)
        if len(m.variants) != 1:
            raise RuntimeError(f"{n_launches} launches captured, {len(m.variants)} replayed: {m.warnings}")
        return _timing(m.variants[0]) | {"warnings": [w for _, w in m.warnings]}

    runs = []
    for side, fn in (("bench", by_bench), ("replay", by_replay), ("replay", by_replay), ("bench", by_bench)):
        t0 = time.perf_counter()
        r = fn() | {"side": side, "host_s": round(time.perf_counter() - t0, 2)}
        print(f"  {case.name}: {side} median {r['median_ms']:.5f} ms ({r['method']}, n={r['n']})", flush=True)
        runs.append(r)
    bench_ms = statistics.fmean(r["median_ms"] for r in runs if r["side"] == "bench")
    replay_ms = statistics.fmean(r["median_ms"] for r in runs if r["side"] == "replay")
    ratio = replay_ms / bench_ms
    return {
        "case": case.name,
        "size": case.size,
        "bench_ms": bench_ms,
        "replay_ms": replay_ms,
        "ratio": ratio,
        "within_tolerance": abs(ratio - 1) <= TOLERANCE,
        "runs": runs,
    }


def markdown(doc: dict[str, Any]) -> str:
    dev = doc["device"]
    lines = [
        "# Kernel replay vs kperf.bench: the same launch timed both ways",
        "",
        f"`python benchmarks/replay_vs_bench.py` on {dev.get('gpu', '?')} (driver {dev.get('driver', '?')}, "
        f"torch {dev.get('torch', '?')}, triton {dev.get('triton', '?')}); order bench, replay, replay, "
        f"bench; each side the mean of its two medians; target |replay/bench - 1| <= {TOLERANCE:.0%}. "
        f"kperf-ci {doc.get('kperf_commit', '?')}.",
        "",
        "| case | size | bench (ms) | replay (ms) | replay / bench | method | within 2% |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for r in doc["cases"]:
        if "error" in r:
            lines.append(f"| {r['case']} | {r.get('size', '')} | | | | | error: {r['error'][:120]} |")
            continue
        methods = "/".join(sorted({x["method"] or "?" for x in r["runs"]}))
        lines.append(
            f"| {r['case']} | {r['size']} | {r['bench_ms']:.5f} | {r['replay_ms']:.5f} | "
            f"{r['ratio']:.4f} | {methods} | {'yes' if r['within_tolerance'] else '**no**'} |"
        )
    for name in doc["not_run"]:
        lines.append(f"| {name} | | | | | | not run (deadline) |")
    ok = [r for r in doc["cases"] if r.get("within_tolerance")]
    lines += ["", f"{len(ok)} of {len(doc['cases']) + len(doc['not_run'])} cases within {TOLERANCE:.0%}.", ""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", nargs="*", help="case names (default: all)")
    ap.add_argument("--out", help="output folder (default: $OUT or benchmarks/results)")
    ap.add_argument(
        "--budget-s", type=float, default=2.0, help="timing budget per measurement (kperf's default)"
    )
    ap.add_argument("--deadline-s", type=float, default=250.0, help="start no case after this many seconds")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("replay_vs_bench: no CUDA GPU here; run it on the GPU machine", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    doc: dict[str, Any] = {
        "kperf_commit": kperf_commit(),
        "device": device_info(),
        "tolerance": TOLERANCE,
        "cases": [],
        "not_run": [],
    }
    for case in cases(args.only):
        if time.perf_counter() - t0 > args.deadline_s:
            doc["not_run"].append(case.name)
            continue
        print(f"[{time.perf_counter() - t0:6.1f} s] {case.name} ({case.size})", flush=True)
        try:
            doc["cases"].append(run_case(case, args.budget_s))
        except Exception as e:  # one broken case must not lose the others' results
            doc["cases"].append({"case": case.name, "size": case.size, "error": f"{type(e).__name__}: {e}"})
            print(f"  {case.name}: error {type(e).__name__}: {e}", flush=True)
    doc["wall_s"] = round(time.perf_counter() - t0, 1)
    out = out_dir(args.out)
    write_json(out / "replay_vs_bench.json", doc)
    (out / "replay_vs_bench.md").write_text(markdown(doc))
    print(markdown(doc), flush=True)
    print(f"wrote {out / 'replay_vs_bench.json'} and .md in {doc['wall_s']} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
