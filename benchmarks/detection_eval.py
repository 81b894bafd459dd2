"""Detection quality of kperf's A/B verdicts on real kernels: false alarms, recall, effect error.

Drives kperf's own comparison code -- ``kperf_ci.capture.timing.interleaved.adaptive_ab`` (interleaved
pairs, adaptive stop) and ``kperf_ci.judge.stats.compare_samples`` -- on the example kernels
(examples/kernels) and on planted variants of them, in fresh processes. Writes detection_eval.json and .md.

Variants (base vs head):

* A/A: the base is the example module loaded a second time from a copy of the tree through
  ``kperf_ci.capture.launches.base_tree.load_base_callable`` (a distinct JITFunction, same
  code), the head the module itself; same inputs. Any "slower"/"faster" verdict is a false alarm.
* extra work scaled to the kernel, at nominal +0.5, 1, 2, 3, 5%: memory-bound kernels (vector
  add, softmax, layernorm) process that many more elements/rows (extra memory traffic); the
  compute-bound matmul (fixed tile config, autotuner bypassed) runs a longer K loop (+64, +128,
  +192 of K=4096: extra arithmetic in steps of 1.56%);
* a worse config: matmul with num_stages 3 -> 2 and with the 128x128x32 tile; softmax with 8
  warps instead of 16.

The true effect of each variant is measured once, independently of the evaluated comparisons,
by a long interleaved reference (1000 pairs) in a calibration process; each comparison's error
is its estimate minus that reference. The calibration process also runs 12 short A/A comparisons
per kernel and derives the kernel's threshold with ``kperf_ci.judge.changepoint.noise_model`` -- the
per-kernel threshold kperf would derive from A/A history -- which every evaluated comparison
then uses (with kperf's default absolute floor of 1 us).

Fresh processes: each worker process imports torch on its own, then takes a file lock for its
GPU part (CUDA initialised only under the lock, so no two processes touch the GPU at once),
and runs every variant of every kernel once through ``adaptive_ab`` (budget 2 s) in a seeded
order, plus a sequential baseline. Processes are started until ``--processes`` or the
``--deadline`` (seconds) is reached; the .md says how many ran.

Baselines, from the same processes:
* ``sequential_fixed_threshold``: 50 calls of base, then 50 of head (order alternating by
  process), ratio of medians against a fixed 2% threshold (what comparing with a stored
  number amounts to);
* ``sequential_compare_samples``: the same sequential samples through compare_samples
  (unpaired) with the kernel's threshold;
* ``host_mean_5pct``: 50 calls of each side timed with the host clock and a synchronize (what
  pytest-benchmark measures), "slower" when the means differ by more than 5%;
* ``interleaved_unpaired``: the adaptive comparison's own samples, pairing ignored;
* ``interleaved_ratio_of_medians``: the same samples, ratio of medians vs the threshold, no CI.

``history``: change-point detection (``kperf_ci.judge.changepoint``) on run histories assembled from
the measured per-process medians (the sequential blocks are exactly what a stored run's
time.median is): 30-run series with a planted step after run 20 made of the head medians of a
variant, A/A series, and A/A series with one wild run.

``--simulate`` runs the whole pipeline on a simulated device (no GPU) to test the harness.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

LEVELS = ("0.5", "1", "2", "3", "5")
KERNELS = ("vector_add", "softmax", "layernorm", "matmul")
MEMORY_BOUND = ("vector_add", "softmax", "layernorm")
SEQ_CALLS = 50
FIXED_THRESHOLD = 0.02
HOST_THRESHOLD = 0.05
FLOOR_MS = 0.001  # kperf's default [tool.kperf] time_floor_ms
BUDGET_S = 2.0
K0, K_STEP = 4096, 64  # matmul: base K, extra K per step


def variants(kernel: str) -> list[dict[str, Any]]:
    """name, kind (aa/effect/config), nominal level (str) or None, parameter."""
    out = [
        {"name": name, "kind": "aa", "nominal": None, "param": 0.0} for name in ("aa", "aa#2", "aa#3", "aa#4")
    ]
    if kernel in MEMORY_BOUND:
        out += [
            {"name": f"+{lv}%", "kind": "effect", "nominal": lv, "param": float(lv) / 100} for lv in LEVELS
        ]
    if kernel == "matmul":
        nominal = {1: "2", 2: "3", 3: "5"}  # +1.56%, +3.1%, +4.7%: nearest nominal level
        out += [
            {"name": f"K+{K_STEP * j}", "kind": "effect", "nominal": nominal[j], "param": j}
            for j in (1, 2, 3)
        ]
        out += [
            {"name": "config:num_stages=2", "kind": "config", "nominal": None, "param": "stages2"},
            {"name": "config:128x128x32", "kind": "config", "nominal": None, "param": "tile128"},
        ]
    if kernel == "softmax":
        out += [{"name": "config:num_warps=8", "kind": "config", "nominal": None, "param": "warps8"}]
    return out


# ------------------------------------------------------------------------------------------
# the two benches: real CUDA kernels, or a simulated device


class CudaBench:
    """Base/head callables of every variant on the GPU (inputs built once per process)."""

    def __init__(self, seed: int, device: str = "cuda", small: bool = False):
        import torch

        from benchmarks._common import load_example
        from kperf_ci.capture.launches.base_tree import load_base_callable

        self.torch = torch
        self.dev = device
        if device == "cuda":
            from kperf_ci.capture.timing.engine import CudaBackend

            self.backend = CudaBackend()
        else:
            self.backend = HostBackend()
        self.head = {k: load_example(k) for k in KERNELS}
        # the "base tree": a copy of the examples, loaded under an alias by kperf's own loader
        self._tmp = Path(tempfile.mkdtemp(prefix="kperf-eval-base-"))
        shutil.copytree(ROOT / "examples" / "kernels", self._tmp / "examples" / "kernels")
        self.base = {}
        for k, mod in self.head.items():
            anchor = {
                "vector_add": "add",
                "softmax": "softmax",
                "layernorm": "layer_norm",
                "matmul": "matmul",
            }[k]
            fn = load_base_callable(getattr(mod, anchor), ROOT, self._tmp)
            assert fn is not None, k
            self.base[k] = sys.modules[fn.__module__]
        g = torch.Generator(device=device)
        g.manual_seed(seed)
        dev = device
        # GPU-filling sizes (those of benchmarks/_common.py); `small`: a CPU dry run of the harness
        self.n = 1 << 12 if small else 1 << 26
        self.x = torch.randn(int(self.n * 1.06), device=dev, generator=g)
        self.y = torch.randn(int(self.n * 1.06), device=dev, generator=g)
        self.sm_rows, self.sm_cols = (16 if small else 16384), 4096
        self.sm_x = torch.randn(int(self.sm_rows * 1.06) + 1, self.sm_cols, device=dev, generator=g)
        self.ln_rows, self.ln_cols = (16 if small else 32768), 4096
        self.ln_x = torch.randn(
            int(self.ln_rows * 1.06) + 1, self.ln_cols, device=dev, dtype=torch.float16, generator=g
        )
        self.ln_w = torch.rand(self.ln_cols, device=dev, dtype=torch.float16, generator=g) + 0.5
        self.ln_b = torch.randn(self.ln_cols, device=dev, dtype=torch.float16, generator=g)
        kmax = K0 + 3 * K_STEP
        self.mn = 256 if small else 4096
        self.mm_a = torch.randn(self.mn, kmax, device=dev, dtype=torch.float16, generator=g)
        self.mm_b = torch.randn(kmax, self.mn, device=dev, dtype=torch.float16, generator=g)

    def close(self) -> None:
        shutil.rmtree(self._tmp, ignore_errors=True)

    def _scaled(self, base: int, frac: float, quantum: int = 1) -> int:
        return int(round(base * (1 + frac) / quantum)) * quantum

    def _mm(self, mod, K: int, which: str):
        import triton

        cfgs = mod.get_autotune_config()
        cfg = cfgs[2] if which == "tile128" else cfgs[0]
        kw = dict(cfg.kwargs)
        stages = 2 if which == "stages2" else cfg.num_stages
        a, b, mn = self.mm_a[:, :K], self.mm_b[:K, :], self.mn
        c = self.torch.empty(mn, mn, device=self.dev, dtype=self.torch.float16)
        jit = mod.matmul_kernel.fn  # the JITFunction under the autotuner: a fixed config
        grid = (triton.cdiv(mn, kw["BLOCK_SIZE_M"]) * triton.cdiv(mn, kw["BLOCK_SIZE_N"]),)
        args = (
            a,
            b,
            c,
            mn,
            mn,
            K,
            a.stride(0),
            a.stride(1),
            b.stride(0),
            b.stride(1),
            c.stride(0),
            c.stride(1),
        )
        return lambda: jit[grid](*args, **kw, num_warps=cfg.num_warps, num_stages=stages)

    def _softmax_warps(self, mod, rows: int, warps: int):
        x = self.sm_x[:rows]
        y = self.torch.empty_like(x)
        return lambda: mod.softmax_kernel[(rows,)](
            y, x, x.stride(0), y.stride(0), self.sm_cols, BLOCK_SIZE=4096, num_warps=warps
        )

    def pair(self, kernel: str, v: dict[str, Any]):
        """(base_fn, head_fn) for a variant."""
        bm, hm = self.base[kernel], self.head[kernel]
        frac = v["param"] if v["kind"] in ("aa", "effect") and kernel in MEMORY_BOUND else 0.0
        if kernel == "vector_add":
            nb, nh = self.n, self._scaled(self.n, frac, 1024)
            xb, yb, xh, yh = self.x[:nb], self.y[:nb], self.x[:nh], self.y[:nh]
            return (lambda: bm.add(xb, yb)), (lambda: hm.add(xh, yh))
        if kernel == "softmax":
            if v["kind"] == "config":
                return self._softmax_warps(bm, self.sm_rows, 16), self._softmax_warps(hm, self.sm_rows, 8)
            xb, xh = self.sm_x[: self.sm_rows], self.sm_x[: self._scaled(self.sm_rows, frac)]
            return (lambda: bm.softmax(xb)), (lambda: hm.softmax(xh))
        if kernel == "layernorm":
            xb, xh = self.ln_x[: self.ln_rows], self.ln_x[: self._scaled(self.ln_rows, frac)]
            w, b = self.ln_w, self.ln_b
            return (lambda: bm.layer_norm(xb, w, b)), (lambda: hm.layer_norm(xh, w, b))
        if kernel == "matmul":
            k_head = K0 + K_STEP * v["param"] if v["kind"] == "effect" else K0
            which = v["param"] if v["kind"] == "config" else ""
            return self._mm(bm, K0, ""), self._mm(hm, k_head, which)
        raise KeyError(kernel)


class HostBackend:
    """Host clock around each call, for the CPU dry run (TRITON_INTERPRET=1): no device timing."""

    def marker(self):
        return time.perf_counter()

    def elapsed_ms(self, a, b):
        return (b - a) * 1000.0

    def synchronize(self):
        pass

    def flush(self):
        pass

    def l2_bytes(self):
        return None

    def capture_graph(self, call):
        raise RuntimeError("no graphs on the host")

    def state(self):
        return {}

    def host_time(self):
        return time.perf_counter()

    def sleep(self, seconds):
        time.sleep(seconds)


class SimDevice:
    """A DeviceBackend on a simulated clock (ms of device time; host seconds follow it)."""

    def __init__(self, seed: int):
        self.t = 0.0
        self.host = 0.0
        self.rng = random.Random(seed)
        self.last = None

    def marker(self):
        self.host += 2e-6
        return self.t

    def elapsed_ms(self, a, b):
        return b - a

    def synchronize(self):
        pass

    def flush(self):
        self.t += 0.03
        self.host += 0.03e-3

    def l2_bytes(self):
        return 50 << 20

    def capture_graph(self, call):
        return call

    def state(self):
        return {}

    def host_time(self):
        return self.host

    def sleep(self, seconds):
        self.host += seconds
        self.t += seconds * 1000.0

    def kernel(self, ms: float, noise: float, order_effect: float = 0.0):
        def run():
            first = self.last is run  # same function twice in a row: the first call of a pair
            d = ms * math.exp(self.rng.gauss(0.0, noise)) * (1 + order_effect * first)
            d *= 1.0 + 0.02 * math.sin(self.t / 50.0)  # a slow clock wander both sides share
            self.t += d
            self.host += d / 1000.0 + 5e-6
            self.last = run

        return run


SIM = {  # base ms, per-call noise, true effect of each variant (by name)
    "vector_add": (0.27, 0.002),
    "softmax": (0.17, 0.004),
    "layernorm": (0.14, 0.004),
    "matmul": (0.25, 0.006),
}


class SimBench:
    def __init__(self, seed: int):
        self.backend = SimDevice(seed)
        self.proc = random.Random(seed).gauss(0.0, 0.003)  # per-process level shift

    def close(self) -> None:
        pass

    @staticmethod
    def true_effect(kernel: str, v: dict[str, Any]) -> float:
        if v["kind"] == "aa":
            return 0.0
        if v["kind"] == "effect":
            return v["param"] if kernel in MEMORY_BOUND else K_STEP * v["param"] / K0
        return {"stages2": 0.04, "tile128": 0.12, "warps8": 0.015}[v["param"]]

    def pair(self, kernel: str, v: dict[str, Any]):
        ms, noise = SIM[kernel]
        ms *= math.exp(self.proc)
        be = self.backend
        return be.kernel(ms, noise, 0.01), be.kernel(ms * (1 + self.true_effect(kernel, v)), noise, 0.01)


# ------------------------------------------------------------------------------------------
# one process


def _gpu_lock(path: str | None):
    if not path:
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def held():
        with open(path, "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    return held()


def _sequential(be, base_fn, head_fn, n: int, head_first: bool) -> tuple[list[float], list[float]]:
    """n calls of one side, then n of the other (flush before each call, outside the window)."""

    def block(fn):
        marks = []
        for _ in range(n):
            be.flush()
            a = be.marker()
            fn()
            b = be.marker()
            marks.append((a, b))
        be.synchronize()
        return [be.elapsed_ms(a, b) for a, b in marks]

    if head_first:
        h = block(head_fn)
        b = block(base_fn)
    else:
        b = block(base_fn)
        h = block(head_fn)
    return b, h


def _host_sequential(be, base_fn, head_fn, n: int, head_first: bool) -> tuple[list[float], list[float]]:
    """pytest-benchmark style: host clock around each call plus a synchronize, no flush."""

    def block(fn):
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            be.synchronize()
            out.append((time.perf_counter() - t0) * 1e3)
        return out

    if head_first:
        h = block(head_fn)
        return block(base_fn), h
    b = block(base_fn)
    return b, block(head_fn)


def _warm(fn, be, calls: int = 5) -> None:
    for _ in range(calls):
        fn()
    be.synchronize()


def _median(xs):
    return statistics.median(xs) if xs else math.nan


def worker(index: int, thresholds: dict[str, float], simulate: bool, lock: str | None) -> dict[str, Any]:
    """Every variant of every kernel once through adaptive_ab, plus the sequential baseline."""
    if not simulate:
        import torch  # noqa: F401 - imported before the lock: the slow part runs in parallel
    from kperf_ci.capture.timing.interleaved import adaptive_ab
    from kperf_ci.config import ABPolicy, Settings
    from kperf_ci.judge.ab import stop_rule
    from kperf_ci.judge.stats import compare_samples

    rng = random.Random(index)
    rows: list[dict[str, Any]] = []
    t_start = time.perf_counter()
    with _gpu_lock(lock):
        t_lock = time.perf_counter()
        bench = SimBench(index) if simulate else CudaBench(seed=1234)
        be = bench.backend
        plan = [(k, v) for k in KERNELS for v in variants(k)]
        rng.shuffle(plan)
        fns = {}
        for k, v in plan:
            fns[(k, v["name"])] = bench.pair(k, v)
            _warm(fns[(k, v["name"])][0], be, 2)  # compile/load outside every measurement
            _warm(fns[(k, v["name"])][1], be, 2)
        t_ready = time.perf_counter()
        for k, v in plan:
            base_fn, head_fn = fns[(k, v["name"])]
            thr = thresholds[k]
            t0 = time.perf_counter()
            rule = stop_rule(
                ABPolicy(ab_threshold=thr, ab_floor_ms=FLOOR_MS, ab_precision=Settings.ab_precision)
            )
            r = adaptive_ab(base_fn, head_fn, stop_rule=rule, budget_s=BUDGET_S, backend=be)
            wall = time.perf_counter() - t0
            unpaired = compare_samples(r.base_ms, r.head_ms, threshold=thr, floor=FLOOR_MS)
            rom = _median(r.head_ms) / _median(r.base_ms)
            seq_b, seq_h = _sequential(
                be, base_fn, head_fn, SEQ_CALLS, head_first=(index + len(rows)) % 2 == 1
            )
            seq = compare_samples(seq_b, seq_h, threshold=thr, floor=FLOOR_MS)
            host_b, host_h = _host_sequential(
                be, base_fn, head_fn, SEQ_CALLS, head_first=(index + len(rows)) % 2 == 1
            )
            seq_ratio = _median(seq_h) / _median(seq_b)
            rows.append(
                {
                    "process": index,
                    "kernel": k,
                    "variant": v["name"],
                    "kind": v["kind"],
                    "nominal": v["nominal"],
                    "threshold": thr,
                    "verdict": r.verdict,
                    "rel": r.rel,
                    "ci": [r.ci_low, r.ci_high],
                    "pairs": r.n_pairs,
                    "rounds": r.rounds,
                    "stopped_by": r.stopped_by,
                    "measure_s": r.seconds,
                    "warmup_s": r.warmup_seconds,
                    "wall_s": wall if not simulate else r.seconds + r.warmup_seconds,
                    "method": r.method,
                    "base_median_ms": _median(r.base_ms),
                    "interleaved_unpaired": unpaired.verdict,
                    "interleaved_ratio_of_medians": rom,
                    "seq_base_median_ms": _median(seq_b),
                    "seq_head_median_ms": _median(seq_h),
                    "seq_ratio": seq_ratio,
                    "seq_verdict": seq.verdict,
                    "seq_head_first": (index + len(rows)) % 2 == 1,
                    "host_mean_ratio": statistics.fmean(host_h) / statistics.fmean(host_b),
                }
            )
        bench.close()
        t_end = time.perf_counter()
    return {
        "process": index,
        "rows": rows,
        "seconds": {"wait_lock": t_lock - t_start, "setup": t_ready - t_lock, "measure": t_end - t_ready},
    }


def calibrate(simulate: bool, aa_runs: int = 12, ref_pairs: int = 1000) -> dict[str, Any]:
    """Per-kernel thresholds from A/A comparisons (noise_model) and reference effects."""
    from kperf_ci.capture.timing.engine import TimingConfig
    from kperf_ci.capture.timing.interleaved import adaptive_ab
    from kperf_ci.config import ABPolicy, Settings
    from kperf_ci.judge.ab import stop_rule
    from kperf_ci.judge.changepoint import noise_model

    # a threshold of 1% with the run's floor and precision (the pairs, not the verdict, are kept)
    rule = stop_rule(ABPolicy.from_settings(Settings(ab_threshold=0.01)))

    bench = SimBench(10_000) if simulate else CudaBench(seed=1234)
    be = bench.backend
    # the GPU is kept busy by the calibration itself: a short warm-up per comparison is enough here
    # (the evaluated comparisons use kperf's defaults)
    cfg = TimingConfig(warmup_min_s=0.05)
    out: dict[str, Any] = {"thresholds": {}, "aa_ratios": {}, "reference": {}}
    for k in KERNELS:
        vs = variants(k)
        b, h = bench.pair(k, vs[0])
        _warm(b, be, 3)
        _warm(h, be, 3)
        ratios = []
        for _ in range(aa_runs):
            r = adaptive_ab(b, h, stop_rule=rule, backend=be, cfg=cfg, first_round_pairs=40, max_pairs=40)
            ratios.append(r.ratio)
        out["aa_ratios"][k] = ratios
        out["thresholds"][k] = noise_model(ratios)
        out["reference"][k] = {}
        for v in vs:
            if v["kind"] == "aa" and v is not vs[0]:
                continue  # one A/A reference is enough
            b, h = bench.pair(k, v)
            _warm(b, be, 3)
            _warm(h, be, 3)
            r = adaptive_ab(
                b, h, stop_rule=rule, backend=be, cfg=cfg, first_round_pairs=ref_pairs, max_pairs=ref_pairs
            )
            out["reference"][k][v["name"]] = {
                "rel": r.rel,
                "ci": [r.ci_low, r.ci_high],
                "pairs": r.n_pairs,
                "base_median_ms": _median(r.base_ms),
            }
    bench.close()
    return out


def dry_run_cpu() -> int:
    """Every variant built and called on the CPU at tiny sizes: catches harness errors without a GPU.

    Needs TRITON_INTERPRET=1 (set here before Triton is imported)."""
    os.environ["TRITON_INTERPRET"] = "1"
    bench = CudaBench(seed=1, device="cpu", small=True)
    for k in KERNELS:
        for v in variants(k):
            b, h = bench.pair(k, v)
            b()
            h()
            print(f"ok {k} {v['name']}", flush=True)
    bench.close()
    return 0


# ------------------------------------------------------------------------------------------
# analysis (pure: re-run with --analyze on a saved raw file)


def _rate(xs: list[bool]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _alarm(verdict: str) -> bool:
    return verdict in ("slower", "faster")


def _level_of(row: dict[str, Any]) -> str | None:
    return row["nominal"] if row["kind"] == "effect" else None


def _fixed(ratio: float, t: float = FIXED_THRESHOLD) -> str:
    return "slower" if ratio > 1 + t else "faster" if ratio < 1 - t else "unchanged"


def history_eval(rows: list[dict[str, Any]], seed: int = 0, series: int = 40) -> dict[str, Any]:
    """Change points on 30-run histories made of measured per-process medians."""
    from kperf_ci.judge.changepoint import detect_change_points, noise_model

    rng = random.Random(seed)
    out: dict[str, Any] = {"series_length": 30, "step_at": 20, "per_kernel": {}}
    for k in KERNELS:
        med = {}
        for r in rows:
            if r["kernel"] == k:
                med.setdefault(r["variant"], {"base": [], "head": []})
                med[r["variant"]]["base"].append(r["seq_base_median_ms"])
                med[r["variant"]]["head"].append(r["seq_head_median_ms"])
        if sum(len(v["base"]) for v in med.values()) < 5:
            continue
        base_pool = [x for v in med.values() for x in v["base"]]  # every base median is an A/A run
        center = statistics.median(base_pool)
        res: dict[str, Any] = {
            "runs_available": len(base_pool),
            "run_to_run_threshold": noise_model([x / center for x in base_pool]),
        }
        fa = [
            bool(detect_change_points([rng.choice(base_pool) for _ in range(30)], seed=i))
            for i in range(series)
        ]
        res["false_change_point_rate"] = _rate(fa)
        outl = []
        for i in range(series):
            s = [rng.choice(base_pool) for _ in range(30)]
            s[rng.randrange(3, 27)] *= 1.5
            outl.append(bool(detect_change_points(s, seed=i)))
        res["single_outlier_flagged_rate"] = _rate(outl)
        steps = {}
        for name in [v["name"] for v in variants(k) if v["kind"] != "aa"]:
            v = med.get(name)
            if v is None or len(v["head"]) < 5:
                continue
            hits = []
            for i in range(series):
                s = [rng.choice(base_pool) for _ in range(20)] + [rng.choice(v["head"]) for _ in range(10)]
                cps = detect_change_points(s, seed=i)
                hits.append(any(abs(cp.index - 20) <= 1 for cp in cps))
            steps[name] = _rate(hits)
        res["step_detected_rate"] = steps
        out["per_kernel"][k] = res
    # The headline keys, as for the same-job A/B: pooled over kernels (equal weight per kernel).
    kernels = out["per_kernel"]
    fa = [r["false_change_point_rate"] for r in kernels.values() if r["false_change_point_rate"] is not None]
    out["false_alarm_rate"] = statistics.fmean(fa) if fa else None
    recall: dict[str, float | None] = {}
    for lv in LEVELS:
        hits = [
            kernels[k]["step_detected_rate"][v["name"]]
            for k in kernels
            for v in variants(k)
            if v["kind"] == "effect" and v["nominal"] == lv and v["name"] in kernels[k]["step_detected_rate"]
        ]
        recall[lv] = statistics.fmean(hits) if hits else None
    out["recall"] = recall
    out["effect_error_pct"] = None  # a change point gives a step, not an effect estimate with a reference
    out["gpu_seconds_per_comparison"] = None  # history reuses stored runs: no extra GPU time
    return out


def analyze(raw: dict[str, Any]) -> dict[str, Any]:
    rows = [r for p in raw["processes"] for r in p["rows"]]
    ref = raw["calibration"]["reference"]
    for r in rows:
        r["reference_rel"] = ref.get(r["kernel"], {}).get(r["variant"], {}).get("rel")
    aa = [r for r in rows if r["kind"] == "aa"]
    planted = [r for r in rows if r["kind"] != "aa"]

    def recall(pred) -> dict[str, float | None]:
        return {lv: _rate([pred(r) for r in rows if _level_of(r) == lv]) for lv in LEVELS}

    def errors(sel) -> list[float]:
        return [
            abs(r["rel"] - r["reference_rel"]) * 100
            for r in sel
            if r["reference_rel"] is not None and r["rel"] is not None and math.isfinite(r["rel"])
        ]

    errs = errors(planted)
    errs_detected = errors([r for r in planted if r["verdict"] == "slower"])
    walls = [r["wall_s"] for r in rows]

    def per_kernel(k: str) -> dict[str, Any]:
        rs = [r for r in rows if r["kernel"] == k]
        d: dict[str, Any] = {
            "threshold": raw["calibration"]["thresholds"].get(k),
            "false_alarm_rate": _rate([_alarm(r["verdict"]) for r in rs if r["kind"] == "aa"]),
            "aa_comparisons": sum(1 for r in rs if r["kind"] == "aa"),
            "base_median_ms": _median([r["base_median_ms"] for r in rs]),
            "gpu_seconds_per_comparison": statistics.fmean([r["wall_s"] for r in rs]) if rs else None,
            "variants": {},
        }
        for v in variants(k):
            vr = [r for r in rs if r["variant"] == v["name"]]
            if not vr:
                continue
            counts = {
                x: sum(1 for r in vr if r["verdict"] == x)
                for x in ("slower", "faster", "unchanged", "inconclusive")
            }
            e = (
                errors(vr)
                if v["kind"] != "aa"
                else [abs(r["rel"]) * 100 for r in vr if math.isfinite(r["rel"])]
            )
            d["variants"][v["name"]] = {
                "kind": v["kind"],
                "nominal": v["nominal"],
                "reference_rel": ref.get(k, {}).get(v["name"], {}).get("rel"),
                "n": len(vr),
                "verdicts": counts,
                "mean_abs_error_pct": statistics.fmean(e) if e else None,
                "mean_pairs": statistics.fmean(r["pairs"] for r in vr),
                "mean_seconds": statistics.fmean(r["wall_s"] for r in vr),
            }
        return d

    summary = {
        "false_alarm_rate": _rate([_alarm(r["verdict"]) for r in aa]),
        "aa_comparisons": len(aa),
        "recall": recall(lambda r: r["verdict"] == "slower"),
        "recall_counts": {lv: sum(1 for r in rows if _level_of(r) == lv) for lv in LEVELS},
        "effect_error_pct": statistics.fmean(errs) if errs else None,
        "effect_error_pct_detail": {
            "definition": "mean |estimated - reference| effect over all planted comparisons, "
            "in percentage points",
            "mean": statistics.fmean(errs) if errs else None,
            "median": statistics.median(errs) if errs else None,
            "p95": sorted(errs)[int(0.95 * (len(errs) - 1))] if errs else None,
            "mean_when_slower": statistics.fmean(errs_detected) if errs_detected else None,
            "n": len(errs),
        },
        "gpu_seconds_per_comparison": statistics.fmean(walls) if walls else None,
        "gpu_seconds_detail": {
            "definition": "wall seconds of one adaptive_ab call on the device (warm-up + measurement)",
            "mean": statistics.fmean(walls) if walls else None,
            "p95": sorted(walls)[int(0.95 * (len(walls) - 1))] if walls else None,
            "max": max(walls) if walls else None,
            "measure_only_mean": statistics.fmean(r["measure_s"] for r in rows) if rows else None,
            "stopped_by": {
                s: sum(1 for r in rows if r["stopped_by"] == s) for s in ("certain", "budget", "max_pairs")
            },
        },
        "config_variants": {
            f"{r_k}/{name}": d
            for r_k in KERNELS
            for name, d in per_kernel(r_k)["variants"].items()
            if d["kind"] == "config"
        },
    }
    baselines = {}
    for name, verdict_of, thr_note in (
        ("sequential_fixed_threshold", lambda r: _fixed(r["seq_ratio"]), f"fixed {FIXED_THRESHOLD:.0%}"),
        ("sequential_compare_samples", lambda r: r["seq_verdict"], "kernel threshold"),
        ("interleaved_unpaired", lambda r: r["interleaved_unpaired"], "kernel threshold"),
        (
            "host_mean_5pct",
            lambda r: _fixed(r["host_mean_ratio"], HOST_THRESHOLD) if "host_mean_ratio" in r else "n/a",
            "host clock + sync, means differ by > 5% (pytest-benchmark style)",
        ),
        (
            "interleaved_ratio_of_medians",
            lambda r: _fixed(r["interleaved_ratio_of_medians"], r["threshold"]),
            "kernel threshold, no CI",
        ),
    ):
        baselines[name] = {
            "threshold": thr_note,
            "false_alarm_rate": _rate([_alarm(verdict_of(r)) for r in aa]),
            "recall": recall(lambda r, f=verdict_of: f(r) == "slower"),
        }
    seq_err = [
        abs(r["seq_ratio"] - 1 - r["reference_rel"]) * 100 for r in planted if r["reference_rel"] is not None
    ]
    baselines["sequential_fixed_threshold"]["effect_error_pct"] = (
        statistics.fmean(seq_err) if seq_err else None
    )
    host_err = [
        abs(r["host_mean_ratio"] - 1 - r["reference_rel"]) * 100
        for r in planted
        if r["reference_rel"] is not None and "host_mean_ratio" in r
    ]
    baselines["host_mean_5pct"]["effect_error_pct"] = statistics.fmean(host_err) if host_err else None
    targets = {
        "false_alarm_rate <= 0.01": summary["false_alarm_rate"] is not None
        and summary["false_alarm_rate"] <= 0.01,
        'recall["1"] >= 0.95': (summary["recall"]["1"] or 0) >= 0.95,
        'recall["2"] == 1.0': summary["recall"]["2"] == 1.0,
        "effect_error_pct <= 0.3": summary["effect_error_pct"] is not None
        and summary["effect_error_pct"] <= 0.3,
        "gpu_seconds_per_comparison <= 2": (summary["gpu_seconds_per_comparison"] or 99) <= 2,
    }
    history = history_eval(rows)
    targets['history: recall["3"] >= 0.95 at false_alarm_rate <= 0.01'] = (
        (history["recall"].get("3") or 0) >= 0.95
        and history["false_alarm_rate"] is not None
        and history["false_alarm_rate"] <= 0.01
    )
    return {
        "device": raw["device"],
        "simulated": raw.get("simulated", False),
        **{
            k: summary[k]
            for k in ("false_alarm_rate", "recall", "effect_error_pct", "gpu_seconds_per_comparison")
        },
        "baselines": baselines,
        "history": history,
        "targets": targets,
        "details": {
            **{
                k: v
                for k, v in summary.items()
                if k not in ("false_alarm_rate", "recall", "effect_error_pct", "gpu_seconds_per_comparison")
            },
            "processes": len(raw["processes"]),
            "comparisons": len(rows),
            "per_kernel": {k: per_kernel(k) for k in KERNELS},
            "calibration": {
                "thresholds": raw["calibration"]["thresholds"],
                "aa_ratios": raw["calibration"]["aa_ratios"],
                "reference": raw["calibration"]["reference"],
            },
            "run": raw.get("run", {}),
        },
    }


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _pct(x: float | None, digits: int = 1) -> str:
    return "n/a" if x is None else f"{x:.{digits}%}"


def render_md(doc: dict[str, Any]) -> str:
    d = doc["details"]
    dev = doc["device"]
    run = d.get("run", {})
    sim = " **SIMULATED DEVICE (harness test, not a measurement)**" if doc.get("simulated") else ""
    L = [
        "# Detection quality of kperf's A/B verdicts" + sim,
        "",
        f"Device: {dev.get('gpu', dev)}; {d['processes']} fresh processes, {d['comparisons']} comparisons "
        f"({d['aa_comparisons']} A/A). Produced by `benchmarks/detection_eval.py`"
        + (f" in {run.get('wall_s', 0):.0f} s of wall time" if run else "")
        + ".",
        "",
    ]
    if run and d["processes"] < 200:
        L += [
            f"**Fewer than 200 fresh processes:** {d['processes']} ran ({run.get('processes_requested')} "
            f"requested; no process was started after {run.get('deadline_s'):.0f} s). Each process ran every "
            f"variant of every kernel once, {d['comparisons'] // max(1, d['processes'])} comparisons per "
            "process; rates are over all comparisons of all processes.",
            "",
        ]
    t = doc["targets"]
    L += ["## Headline", "", "| metric | value | target | met |", "|---|---:|---|---|"]
    L.append(
        f"| false_alarm_rate (A/A: slower or faster) | {_pct(doc['false_alarm_rate'], 2)} | <= 1% | "
        f"{'yes' if t['false_alarm_rate <= 0.01'] else '**NO**'} |"
    )
    for lv in LEVELS:
        target = {"1": ">= 95%", "2": "100%"}.get(lv, "-")
        met = {"1": t['recall["1"] >= 0.95'], "2": t['recall["2"] == 1.0']}.get(lv)
        L.append(
            f"| recall at +{lv}% (n={d['recall_counts'][lv]}) | {_pct(doc['recall'][lv])} | {target} | "
            f"{'-' if met is None else ('yes' if met else '**NO**')} |"
        )
    e = d["effect_error_pct_detail"]
    L.append(
        f"| effect_error_pct (mean abs. error, points) | {doc['effect_error_pct']:.3f} | <= 0.3 | "
        f"{'yes' if t['effect_error_pct <= 0.3'] else '**NO**'} |"
        if doc["effect_error_pct"] is not None
        else "| effect_error_pct | n/a | <= 0.3 | **NO** |"
    )
    g = d["gpu_seconds_detail"]
    L.append(
        f"| gpu_seconds_per_comparison (mean; p95 {g['p95']:.2f}, max {g['max']:.2f}) | "
        f"{doc['gpu_seconds_per_comparison']:.3f} | <= 2 | "
        f"{'yes' if t['gpu_seconds_per_comparison <= 2'] else '**NO**'} |"
    )
    L += [
        "",
        f"Effect error: median {e['median']:.3f}, p95 {e['p95']:.3f} points over {e['n']} planted "
        "comparisons "
        f"(mean {e['mean_when_slower']:.3f} where the verdict was slower)."
        if e["median"] is not None
        else "",
        f"Comparisons stopped: {g['stopped_by']}; measuring alone took {g['measure_only_mean']:.3f} s "
        "on average.",
        "",
        "## Per kernel",
        "",
        "| kernel | base ms | threshold (noise_model of A/A) | A/A false alarms | variant | reference effect "
        "| n "
        "| slower | unchanged | inconclusive | faster | mean abs err (pts) | mean pairs | mean s |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for k, pk in d["per_kernel"].items():
        first = True
        for name, v in pk["variants"].items():
            c = v["verdicts"]
            ref = v["reference_rel"]
            head = (
                f"| {k} | {pk['base_median_ms']:.4f} | {_pct(pk['threshold'])} | "
                f"{_pct(pk['false_alarm_rate'], 2)} of {pk['aa_comparisons']} "
                if first
                else "| | | | "
            )
            first = False
            err = "n/a" if v["mean_abs_error_pct"] is None else f"{v['mean_abs_error_pct']:.3f}"
            L.append(
                f"{head}| {name} | {'n/a' if ref is None else f'{ref:+.2%}'} | {v['n']} | {c['slower']} | "
                f"{c['unchanged']} | {c['inconclusive']} | {c['faster']} | {err} | {v['mean_pairs']:.0f} | "
                f"{v['mean_seconds']:.3f} |"
            )
    L += [
        "",
        "Reference effect: one interleaved comparison of 1000 pairs per variant in a separate calibration "
        "process. Thresholds: `noise_model` of 12 A/A comparisons of 40 pairs per kernel in that process "
        "(4 robust SDs, at least 0.2%), used with kperf's 1 us floor.",
        "",
        "## Baselines (same processes)",
        "",
        "| method | threshold | false alarms | " + " | ".join(f"recall +{lv}%" for lv in LEVELS) + " |",
        "|---|---|---:|" + "---:|" * len(LEVELS),
        f"| kperf adaptive_ab (paired, adaptive) | kernel threshold | {_pct(doc['false_alarm_rate'], 2)} | "
        + " | ".join(_pct(doc["recall"][lv]) for lv in LEVELS)
        + " |",
    ]
    for name, b in doc["baselines"].items():
        L.append(
            f"| {name} | {b['threshold']} | {_pct(b['false_alarm_rate'], 2)} | "
            + " | ".join(_pct(b["recall"][lv]) for lv in LEVELS)
            + " |"
        )
    h = doc["history"]
    L += [
        "",
        "## History: change points on run histories made of measured runs",
        "",
        f"Series of {h['series_length']} runs drawn from the measured per-process medians (sequential "
        f"blocks of {SEQ_CALLS} calls: what a stored run's time.median is); steps after run "
        f"{h['step_at']} use the head "
        "medians of a variant. Detected: a change point within one run of the step.",
        "",
        "| kernel | runs | run-to-run threshold (noise_model) | false change points (A/A) "
        "| single outlier flagged "
        "| steps detected |",
        "|---|---:|---:|---:|---:|---|",
    ]
    L.append(
        f"| **pooled** | | | {_pct(h['false_alarm_rate'])} | | "
        + ", ".join(f"+{lv}%: {_pct(h['recall'][lv], 0)}" for lv in LEVELS)
        + " |"
    )
    for k, r in h["per_kernel"].items():
        steps = ", ".join(f"{n}: {_pct(x, 0)}" for n, x in r["step_detected_rate"].items())
        L.append(
            f"| {k} | {r['runs_available']} | {_pct(r['run_to_run_threshold'])} | "
            f"{_pct(r['false_change_point_rate'])} "
            f"| {_pct(r['single_outlier_flagged_rate'])} | {steps} |"
        )
    cfgs = d["config_variants"]
    if cfgs:
        L += ["", "## Worse configs", ""]
        for name, v in cfgs.items():
            ref = v["reference_rel"]
            L.append(
                f"- {name}: reference {'n/a' if ref is None else f'{ref:+.2%}'}, verdicts {v['verdicts']} "
                f"(mean abs. error {_num(v['mean_abs_error_pct'])} points)"
            )
    missed = [k for k, ok in t.items() if not ok]
    L += ["", "## Targets", ""]
    L.append("All met." if not missed else "Missed: " + "; ".join(missed) + ".")
    h = doc["history"]
    if any("history" in k for k in missed):
        L.append(
            f"History mode reads recall +3% = {_pct(h['recall'].get('3'))} at a false alarm rate of "
            f"{_pct(h['false_alarm_rate'])}: a run's time.median taken in one process and compared with "
            "runs of other processes carries the run-to-run noise (up to "
            f"{_pct(max(r['run_to_run_threshold'] for r in h['per_kernel'].values()))} for a kernel here), "
            "which a same-job interleaved A/B cancels; history serves trends and release gates, the "
            "PR check is the A/B."
        )
    return "\n".join(L) + "\n"


# ------------------------------------------------------------------------------------------
# driver


def _device(simulate: bool) -> dict[str, Any]:
    if simulate:
        return {"gpu": "simulated"}
    from benchmarks._common import device_info

    try:
        return device_info()
    except Exception as e:  # the fingerprint is a nice-to-have
        import torch

        return {"gpu": torch.cuda.get_device_name(), "error": str(e)}


def _child(args: list[str], simulate: bool) -> subprocess.Popen:
    cmd = [sys.executable, str(Path(__file__).resolve()), *args] + (["--simulate"] if simulate else [])
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(p: subprocess.Popen, timeout: float) -> dict[str, Any] | str:
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        return "timeout: " + err[-1500:]
    line = next((ln for ln in out.splitlines() if ln.startswith("KPERF_JSON ")), None)
    if p.returncode != 0 or line is None:
        return f"exit {p.returncode}: " + err[-1500:]
    return json.loads(line[len("KPERF_JSON ") :])


def drive(out: Path, processes: int, deadline: float, parallel: int, simulate: bool) -> dict[str, Any]:
    t0 = time.perf_counter()
    requested = processes
    scratch = Path(tempfile.mkdtemp(prefix="kperf-eval-"))
    lock = str(scratch / "gpu.lock")
    raw: dict[str, Any] = {"simulated": simulate, "processes": [], "errors": []}
    cal = _result(_child(["--calibrate"], simulate), timeout=max(60.0, deadline))
    if isinstance(cal, str):
        raise SystemExit(f"calibration failed: {cal}")
    raw["calibration"] = cal
    raw["device"] = cal.pop("device")
    thr_file = scratch / "thresholds.json"
    thr_file.write_text(json.dumps(cal["thresholds"]))
    print(f"calibration: {time.perf_counter() - t0:.1f} s, thresholds {cal['thresholds']}", flush=True)
    running: list[tuple[int, subprocess.Popen]] = []
    started = 0
    while started < processes or running:
        while started < processes and len(running) < parallel and time.perf_counter() - t0 < deadline:
            args = ["--worker", str(started), "--thresholds", str(thr_file), "--lock", lock]
            running.append((started, _child(args, simulate)))
            started += 1
        if not running:
            break
        i, p = running.pop(0)
        res = _result(p, timeout=max(30.0, deadline + 120 - (time.perf_counter() - t0)))
        if isinstance(res, str):
            raw["errors"].append({"process": i, "error": res})
            print(f"process {i}: {res[:300]}", flush=True)
        else:
            raw["processes"].append(res)
            s = res["seconds"]
            print(f"process {i}: setup {s['setup']:.1f} s, measure {s['measure']:.1f} s", flush=True)
        if time.perf_counter() - t0 >= deadline:
            processes = started  # start no more; collect the running ones
    raw["run"] = {
        "wall_s": time.perf_counter() - t0,
        "deadline_s": deadline,
        "processes_requested": requested,
        "processes_started": started,
        "parallel_startup": parallel,
    }
    return raw


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="directory (default: $OUT or benchmarks/results)")
    ap.add_argument("--processes", type=int, default=200)
    ap.add_argument("--deadline", type=float, default=300.0, help="seconds after which no process is started")
    ap.add_argument("--parallel", type=int, default=4, help="processes importing at once (one on the GPU)")
    ap.add_argument(
        "--simulate", action="store_true", help="simulated device: tests the harness without a GPU"
    )
    ap.add_argument("--analyze", metavar="RAW", help="recompute the summary from a saved raw file")
    ap.add_argument("--raw-only", action="store_true", help="write the raw file only (analyze elsewhere)")
    ap.add_argument(
        "--dry-run-cpu", action="store_true", help="build and call every variant on the CPU (tiny sizes)"
    )
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--calibrate", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--thresholds", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--lock", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.dry_run_cpu:
        return dry_run_cpu()
    if args.calibrate:
        res = calibrate(args.simulate)
        res["device"] = _device(args.simulate)
        print("KPERF_JSON " + json.dumps(res), flush=True)
        return 0
    if args.worker is not None:
        thresholds = json.loads(Path(args.thresholds).read_text())
        print(
            "KPERF_JSON " + json.dumps(worker(args.worker, thresholds, args.simulate, args.lock)), flush=True
        )
        return 0

    out = Path(args.out or os.environ.get("OUT") or ROOT / "benchmarks" / "results")
    out.mkdir(parents=True, exist_ok=True)
    if args.analyze:
        raw = json.loads(Path(args.analyze).read_text())
    else:
        raw = drive(out, args.processes, args.deadline, args.parallel, args.simulate)
        (out / "detection_eval_raw.json").write_text(json.dumps(raw))
        if args.raw_only:
            return 0
    doc = analyze(raw)
    doc["errors"] = raw.get("errors", [])
    (out / "detection_eval.json").write_text(json.dumps(_finite(doc), indent=1, allow_nan=False) + "\n")
    md = render_md(doc)
    (out / "detection_eval.md").write_text(md)
    print(md)
    return 0


def _finite(o: Any) -> Any:
    """NaN/inf -> None (JSON has no NaN), floats rounded to 6 significant digits."""
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    if isinstance(o, float):
        return float(f"{o:.6g}") if math.isfinite(o) else None
    return o


if __name__ == "__main__":
    raise SystemExit(main())
