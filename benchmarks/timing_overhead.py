"""kperf's own host time per timed variant in GPU mode, on the CPU: the timing loop of this
tree (capture/timing/engine.py, steps.py, judge/stats.py) against the same loop at a base
revision, both driving a simulated device.

The device is test_timing's ``FakeDevice`` with a queue: the host pays a fixed cost per
operation (event marker, flush enqueue, launch, graph replay), the device runs queued work in
order, starting each item when the host has enqueued it and the device is free, a marker's
timestamp is when the device reaches it, ``synchronize`` waits for the device, and ``sleep``
(pacing) passes host time. So the simulated host seconds are what ``time_callable`` would take
on a GPU whose costs are these, sleeping and waiting included; the real CPU seconds spent in
kperf's Python (statistics, bookkeeping) are measured separately.

Each kernel is timed as 4 variants in one process (the first on a cold device), as kernel
replay times the launches of a test one after another.

    .venv/bin/python benchmarks/timing_overhead.py [--base REV]

writes benchmarks/results/timing_overhead.{json,md}. The base revision's kperf_ci is
extracted with ``git archive`` into a temporary directory and run in a subprocess.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
BASE = "c62641d"  # the revision before the cost work (branch cost)

# host costs (seconds) of one operation, of the order seen with torch on an H100 host
HOST = {"marker": 4e-6, "flush": 5e-6, "launch": 15e-6, "replay": 8e-6}
FLUSH_MS = 0.04  # zeroing 2 x 50 MB at ~2.5 TB/s
# (name, device ms per call, relative noise (gaussian), bytes read: None = small, flushed)
KERNELS = [
    ("5us_noisy", 0.005, 0.03, None),
    ("5us_very_noisy", 0.005, 0.3, None),  # a CI of 0.5% is out of reach within the budget
    ("5us_no_flush", 0.005, 0.03, 1 << 30),  # inputs over 2x the L2: no flush, host-bound
    ("50us", 0.05, 0.005, None),
    ("500us", 0.5, 0.005, None),
]
VARIANTS = 4


def _driver() -> list[dict]:
    """Time every kernel as VARIANTS variants; one row per variant (runs in either tree)."""
    sys.path.insert(0, str(Path.cwd() / "tests"))
    from test_timing import FakeDevice  # the tests' fake backend

    from kperf_ci.capture.timing.engine import TimingConfig, time_callable

    class QueueDevice(FakeDevice):
        def __init__(self):
            super().__init__(flush_ms=FLUSH_MS, host_per_op_s=0.0)
            self.free = 0.0  # device time (s) when the queue is empty
            self.markers = 0

        def _enqueue(self, host_s: float, dev_ms: float) -> float:
            self.host += host_s
            start = max(self.free, self.host)
            self.free = start + dev_ms / 1000.0
            return start

        def marker(self):
            self.markers += 1
            return self._enqueue(HOST["marker"], 0.0) * 1000.0  # ms

        def flush(self):
            self.flushes += 1
            self._enqueue(HOST["flush"], self.flush_ms)

        def synchronize(self):
            self.syncs += 1
            self.host = max(self.host, self.free)

        def capture_graph(self, call):
            self.captured += 1
            return lambda: call(HOST["replay"])

        def kernel(self, name, dur):
            def run(host_s=HOST["launch"]):
                self._enqueue(host_s, dur())

            return run

    rows = []
    for name, ms, noise, nbytes in KERNELS:
        rng = random.Random(0)
        dev = QueueDevice()
        for i in range(VARIANTS):
            h0, m0, cpu0 = dev.host, dev.markers, time.process_time()
            slept0 = dev.slept
            fn = dev.kernel(name, lambda ms=ms, rng=rng, noise=noise: ms * max(0.1, 1 + rng.gauss(0, noise)))
            r = time_callable(fn, TimingConfig(input_bytes=nbytes), backend=dev)
            rows.append(
                {
                    "kernel": name,
                    "variant": i + 1,
                    "host_s": dev.host - h0,
                    "slept_s": dev.slept - slept0,
                    "python_cpu_s": time.process_time() - cpu0,
                    "markers": dev.markers - m0,
                    "samples": r.n,
                    "warmup_calls": r.warmup_calls,
                    "method": r.method,
                    "stopped_by": r.stopped_by,
                    "median_ms": r.median,
                    "ci_rel_width": r.ci_rel_width,
                    "median_err": r.median / ms - 1.0,
                }
            )
    return rows


def _run_tree(tree: Path) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, __file__, "--driver"], cwd=tree, env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def _summary(rows: list[dict]) -> dict:
    first = [r for r in rows if r["variant"] == 1]
    later = [r for r in rows if r["variant"] > 1]
    mean = lambda rs, k: statistics.fmean(r[k] for r in rs)  # noqa: E731
    return {
        "host_s_per_variant": mean(rows, "host_s"),
        "host_s_first_variant": mean(first, "host_s"),
        "host_s_later_variants": mean(later, "host_s"),
        "slept_s_per_variant": mean(rows, "slept_s"),
        "python_cpu_s_per_variant": mean(rows, "python_cpu_s"),
        "markers_per_variant": mean(rows, "markers"),
    }


def _markdown(res: dict) -> str:
    b, a = res["summary"]["before"], res["summary"]["after"]
    lines = [
        "# kperf's own host time per timed variant (simulated device, CPU)",
        "",
        f"Written by benchmarks/timing_overhead.py. Before: kperf_ci at {res['base']}; after: this tree "
        f"({res['head']}). Host costs per operation: "
        + ", ".join(f"{k} {v * 1e6:g} us" for k, v in HOST.items())
        + f"; L2 flush {FLUSH_MS} ms of device time. Each kernel timed as {VARIANTS} variants in one "
        "process with the default TimingConfig, the first on a cold device.",
        "",
        "| | before | after |",
        "|---|---:|---:|",
    ]
    for key, label in (
        ("host_s_per_variant", "host s per variant (simulated: sleeping and waiting included)"),
        ("host_s_first_variant", "  first variant of a process"),
        ("host_s_later_variants", "  later variants"),
        ("slept_s_per_variant", "of which pacing sleep, s"),
        ("markers_per_variant", "event markers per variant"),
        ("python_cpu_s_per_variant", "kperf Python CPU s per variant (real, this machine)"),
    ):
        lines.append(f"| {label} | {b[key]:.3f} | {a[key]:.3f} |")
    lines += [
        "",
        "Per variant:",
        "",
        "| tree | kernel | variant | host s | slept s | CPU s | markers | samples "
        "| warm-up calls | method | stopped by | median error | CI width |",
        "|---" * 13 + "|",
    ]
    for tree in ("before", "after"):
        for r in res[tree]:
            lines.append(
                f"| {tree} | {r['kernel']} | {r['variant']} | {r['host_s']:.3f} | {r['slept_s']:.3f} | "
                f"{r['python_cpu_s']:.3f} | {r['markers']} | {r['samples']} | {r['warmup_calls']} | "
                f"{r['method']} | {r['stopped_by']} | {r['median_err']:+.3%} | {r['ci_rel_width']:.3%} |"
            )
    lines += [
        "",
        "Not counted here: static metrics (nvdisasm, now cached by cubin: 0 s for a cubin seen "
        "before), region instrumentation and the test's own run. The simulated device has no clock "
        "ramp, power cap or cold-after-idle behaviour: whether the shorter warm-up of later variants "
        "and the device-share pacing give the same medians must be checked on a GPU. "
        "5us_no_flush is host-bound in this model (a replay costs the host more than the kernel "
        "takes), so its samples time the host's issue rate in both trees (the median error).",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--base", default=BASE)
    args = ap.parse_args()
    if args.driver:
        print(json.dumps(_driver()))
        return
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    with tempfile.TemporaryDirectory(prefix="kperf_base_") as d:
        archive = subprocess.run(
            ["git", "archive", args.base, "kperf_ci"], cwd=ROOT, capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", d], input=archive.stdout, check=True)
        (Path(d) / "tests").symlink_to(ROOT / "tests")  # the same fake device for both trees
        before = _run_tree(Path(d))
    after = _run_tree(ROOT)
    res = {
        "base": args.base,
        "head": head.stdout.strip() + ("+" if _dirty() else ""),
        "host_costs_s": HOST,
        "flush_ms": FLUSH_MS,
        "before": before,
        "after": after,
        "summary": {"before": _summary(before), "after": _summary(after)},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "timing_overhead.json").write_text(json.dumps(res, indent=1) + "\n")
    (RESULTS / "timing_overhead.md").write_text(_markdown(res))
    print(_markdown(res))


def _dirty() -> bool:
    r = subprocess.run(["git", "status", "--porcelain", "kperf_ci"], cwd=ROOT, capture_output=True, text=True)
    return bool(r.stdout.strip())


if __name__ == "__main__":
    main()
