"""Device-side study behind two parts of benchmarks/results: the layernorm buffer/optimization
variants (instrumentation_overhead.json "layernorm_study") and the re-warm check
(timing_noise.json "rewarm"). Needs a CUDA GPU; writes raw_collect.json and raw_accuracy.npz
to --out ($OUT).

Per example kernel: plain vs instrumented builds of several region configurations timed in one
interleaved loop; the default build is also launched a few times and its raw records read from
the profile buffer. Then each of three kernels is timed with re-warm off and on. (The raw
records of the committed run were read with a parser that took Proton's word count for a record
count; the accuracy numbers in the results come from instrumentation_overhead.py instead.)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import cases, device_info, out_dir, warm_timed_launch  # noqa: E402

VARIANTS = {  # (as run on 2026-11-22, when RegionConfig's default was Proton's 8 KB shared buffer)
    "default": {"buffer_type": "shared", "buffer_size": 0},
    "global_buffer": {"buffer_type": "global", "buffer_size": 0},
    "clock32": {"buffer_type": "shared", "buffer_size": 0, "optimizations": "clock32"},
    "sched_stores": {"buffer_type": "shared", "buffer_size": 0, "optimizations": "sched_stores"},
    "kernel_only": {"buffer_type": "shared", "buffer_size": 0, "phases": False},
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--launches", type=int, default=4)
    ap.add_argument("--budget", type=float, default=0.8)
    ap.add_argument("--variants-for", nargs="*", default=["layernorm", "vector_add", "softmax"])
    args = ap.parse_args(argv)
    import torch

    from kperf_ci.capture.launches.gpu import capture_launches
    from kperf_ci.capture.regions.instrument import RegionConfig, instrumented_launches, read_raw_trace
    from kperf_ci.capture.timing.engine import CudaBackend, TimingConfig, time_interleaved

    out = out_dir(args.out)
    be = CudaBackend()
    raw: dict = {}
    doc: dict = {"device": device_info(), "kernels": []}
    for case in cases(None):
        t = time.perf_counter()
        try:
            fn = case.make(1234)
            fn()
            torch.cuda.synchronize()
            _, plain = capture_launches(fn, static=False)
            p = plain[0]
            n_ctas = p.grid[0] * p.grid[1] * p.grid[2]
            variants = {"plain": p.replay()}
            info = {"name": case.name, "grid": list(p.grid), "num_warps": p.num_warps, "launches": []}
            names = ["default"] + (
                [k for k in VARIANTS if k != "default"] if case.name in args.variants_for else []
            )
            for vname in names:
                cfg = RegionConfig(**VARIANTS[vname])
                if vname != "default":
                    try:
                        with instrumented_launches(cfg, compile=True):
                            _, inst = capture_launches(fn, static=False)
                        variants[vname] = inst[0].replay()
                        md = inst[0].kernel.metadata
                        info.setdefault("shared", {})[vname] = md.shared
                        info.setdefault("scratch", {})[vname] = int(md.profile_scratch_size)
                    except Exception as e:
                        traceback.print_exc()
                        info.setdefault("variant_errors", {})[vname] = f"{type(e).__name__}: {e}"[:300]
                    continue
                with instrumented_launches(cfg, compile=True) as alloc:
                    _, inst = capture_launches(fn, static=False)
                    i = inst[0]
                    run = i.replay()
                    variants[vname] = run
                    if vname == "default":
                        for k in range(args.launches):
                            ms = warm_timed_launch(be, run)
                            kt = read_raw_trace(alloc, i.kernel, n_ctas, name=case.name)
                            pre = f"{case.name}/L{k}/"
                            for key, v in kt.arrays().items():
                                raw[pre + key] = v
                            for key, v in kt.raw.items():
                                raw[pre + "raw_" + key] = v
                            raw[pre + "names"] = np.array(kt.names)
                            raw[pre + "event_ms"] = np.array([ms])
                            info["launches"].append({"event_ms": ms, "warnings": kt.warnings[:5]})
                        blocks = alloc.last[: 8 * int(i.kernel.metadata.profile_scratch_size)]
                        raw[f"{case.name}/head8"] = blocks.view(8, -1)[:, :256].cpu().numpy()
                    info.setdefault("shared", {})[vname] = i.kernel.metadata.shared
                    info.setdefault("scratch", {})[vname] = int(i.kernel.metadata.profile_scratch_size)
            # one profile buffer for all instrumented variants while timing
            from kperf_ci.capture.regions.instrument import profile_buffer

            with profile_buffer():
                res = time_interleaved(variants, TimingConfig(budget_s=args.budget))
            info["timing"] = {
                k: {
                    "median": r.median,
                    "ci": [r.ci_low, r.ci_high],
                    "n": r.n,
                    "samples_head": r.samples_ms[:40],
                }
                for k, r in res.items()
            }
            pm = res["plain"].median
            info["overhead"] = {k: r.median / pm - 1.0 for k, r in res.items() if k != "plain"}
            print(
                case.name,
                json.dumps(info["overhead"]),
                [x["event_ms"] for x in info["launches"]],
                f"[{time.perf_counter() - t:.1f} s]",
                flush=True,
            )
        except Exception as e:
            traceback.print_exc()
            info = {"name": case.name, "error": f"{type(e).__name__}: {e}"[:500]}
        doc["kernels"].append(info)
        np.savez_compressed(out / "raw_accuracy.npz", **raw)
        (out / "raw_collect.json").write_text(json.dumps(doc, indent=1, default=str))

    # the plugin's path: one launch under a Proton session, raw buffer kept through the session
    from kperf_ci.capture.regions.instrument import instrument_callable

    doc["session"] = []
    for case in cases(["matmul", "layernorm"]):
        try:
            fn = case.make(1234)
            r = instrument_callable(fn, RegionConfig())
            doc["session"].append(
                {
                    "name": case.name,
                    "clock_source": r.clock_source,
                    "clock_ghz": r.clock_ghz,
                    "clock_fit": r.clock_fit,
                    "clock_nvml_mhz": r.clock_nvml_mhz,
                    "spans_ns": r.spans_ns,
                    "span_ns": r.span_ns,
                    "n_ctas": r.n_ctas,
                    "fractions": {n: st.fraction for n, st in r.regions.items()},
                    "warnings": r.warnings,
                }
            )
            print("session", doc["session"][-1], flush=True)
        except Exception as e:
            traceback.print_exc()
            doc["session"].append({"name": case.name, "error": f"{type(e).__name__}: {e}"[:500]})
    (out / "raw_collect.json").write_text(json.dumps(doc, indent=1, default=str))

    # re-warm after idle gaps: the same kernels timed with and without it, samples by position
    doc["rewarm"] = []
    for case in cases(["matmul", "layernorm", "softmax"]):
        try:
            fn = case.make(1234)
            fn()
            torch.cuda.synchronize()
            _, plain = capture_launches(fn, static=False)
            run = plain[0].replay()
            for rw in (0.0, 1.0):
                cfg = TimingConfig(budget_s=1.0, rewarm_ms=rw, rewarm_min_calls=0 if rw == 0 else 1)
                r = time_interleaved({"k": run}, cfg)["k"]
                s = r.samples_ms
                med = r.median
                pos = [float(np.median([s[i] / med for i in range(k, len(s), 10)])) for k in range(10)]
                doc["rewarm"].append(
                    {
                        "name": case.name,
                        "rewarm_ms": rw,
                        "median": med,
                        "ci": [r.ci_low, r.ci_high],
                        "n": r.n,
                        "cv": r.cv,
                        "max_over_median": max(s) / med,
                        "by_position": pos,
                        "discarded_head": r.discarded_ms[:24],
                        "n_discarded": len(r.discarded_ms),
                        "stopped_by": r.stopped_by,
                        "method": r.method,
                    }
                )
                print("rewarm", case.name, rw, f"cv {r.cv:.3f}", [round(x, 3) for x in pos], flush=True)
        except Exception as e:
            traceback.print_exc()
            doc["rewarm"].append({"name": case.name, "error": f"{type(e).__name__}: {e}"[:500]})
    (out / "raw_collect.json").write_text(json.dumps(doc, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
