"""Device-time cost of kperf's automatic regions, and how well the regions' clock agrees with
CUDA events. Needs a CUDA GPU; writes instrumentation_overhead.{json,md}.

Method (per example kernel, at a GPU-filling size):

1. Run the example once (compile; autotune for matmul), then capture its launch: the plain
   CompiledKernel, its grid and bound arguments.
2. ``instrument_callable`` runs it under a Proton instrumentation session (``data="trace"``):
   this compiles the instrumented kernel and gives the regions. Repeated ``--accuracy-runs``
   times (each launch preceded by an L2 flush) for the whole-kernel span.
3. Inside ``instrumented_launches`` (no Proton session) the example is called once more to
   capture the *instrumented* CompiledKernel with the same arguments.
4. Both compiled kernels are launched through the same path (``CompiledKernel[grid](*args)``,
   no wrapper allocation, no Proton hooks; the instrumented one writes its records into a fixed
   buffer that nobody reads) and timed with ``time_interleaved`` (CUDA events, L2 flushed
   outside the timed window, A/B/B/A). overhead = instrumented median / plain median - 1.
   This is the kernel's own device cost of the records and the buffer copy-out; Proton's host
   post-processing (seconds per launch) is excluded by construction, and reported separately.

Accuracy: (a) whole-kernel span from the trace (first CTA start to last CTA end, cycles within
a CTA converted with the clock measured in the same trace) against the event-timed median of
the same instrumented kernel, for kernels of at least 50 us; (b) per warp, the sum of the
non-overlapping regions (prologue + loops + epilogue, or body) against the kernel region.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import cases, device_info, geomean, out_dir, write_json  # noqa: E402

TARGET_GEOMEAN = 0.03
TARGET_WORST = 0.08
TARGET_ACCURACY = 0.02
ACCURACY_MIN_MS = 0.05


def run_case(case, cfg, cfg_all, tcfg, accuracy_runs: int) -> tuple[dict, dict, dict]:
    import tempfile

    import torch

    from kperf_ci.capture.gpu import capture_launches
    from kperf_ci.capture.instrument import instrument_callable, instrumented_launches, profile_buffer
    from kperf_ci.capture.timing import CudaBackend, time_interleaved

    fn = case.make(1234)
    fn()
    torch.cuda.synchronize()
    _, plain = capture_launches(fn, static=False)
    assert plain and plain[0].kernel is not None, "no Triton launch captured"
    p = plain[0]
    be = CudaBackend()

    def flushed():
        be.flush()
        fn()

    regions = []
    raw_head = None
    for k in range(accuracy_runs):
        if k == 0:
            wd = tempfile.mkdtemp(prefix="kperf_bench_")
            regions.append(instrument_callable(flushed, cfg, kernel=p.name, workdir=wd, keep_trace=True))
            tp = regions[0].trace_path
            if tp:
                raw_head = Path(tp).read_text()[:3000]
                Path(tp).unlink()
        else:
            regions.append(instrument_callable(flushed, cfg, kernel=p.name))
    with instrumented_launches(cfg):
        _, inst = capture_launches(fn, static=False)
    i = inst[0]
    scratch = getattr(i.kernel.metadata, "profile_scratch_size", 0)
    assert scratch > 0, "the launch inside instrumented_launches was not instrumented"
    variants = {"plain": p.replay(), "instrumented": i.replay()}
    iw = None
    if cfg_all is not None:
        try:  # every warp records: compiled with Proton's lowering, no session, no trace
            with instrumented_launches(cfg_all, compile=True):
                _, inst_w = capture_launches(fn, static=False)
            iw = inst_w[0]
            assert getattr(iw.kernel.metadata, "profile_scratch_size", 0) > 0
            variants["instrumented_all_warps"] = iw.replay()
        except Exception as e:
            traceback.print_exc()
            iw = f"{type(e).__name__}: {e}"[:300]
    with profile_buffer():
        res = time_interleaved(variants, tcfg)
    rp, ri = res["plain"], res["instrumented"]
    overhead = ri.median / rp.median - 1.0
    r0 = regions[0]
    entry = {
        "name": case.name,
        "size": case.size,
        "plain_ms": rp.median,
        "instrumented_ms": ri.median,
        "overhead": overhead,
        "plain_ci_ms": [rp.ci_low, rp.ci_high],
        "instrumented_ci_ms": [ri.ci_low, ri.ci_high],
        "samples": [rp.n, ri.n],
        "method": rp.method,
        "stopped_by": rp.stopped_by,
        "grid": list(p.grid) if p.grid else None,
        "num_warps": p.num_warps,
        "registers": [p.n_regs, i.n_regs],
        "shared_bytes": [p.shared, i.shared],
        "profile_scratch_bytes_per_cta": scratch,
        "regions": list(r0.regions),
        "proton_host_seconds_per_instrumented_launch": r0.host_seconds,
        "warnings": sorted(set(rp.warnings + ri.warnings)),
    }
    if "instrumented_all_warps" in res:
        rw = res["instrumented_all_warps"]
        entry["all_warps"] = {
            "instrumented_ms": rw.median,
            "overhead": rw.median / rp.median - 1.0,
            "ci_ms": [rw.ci_low, rw.ci_high],
            "registers": iw.n_regs,
            "shared_bytes": iw.shared,
        }
    elif isinstance(iw, str):
        entry["all_warps"] = {"error": iw}
    spans = [r.span_ns / 1e6 for r in regions if r.span_ns]
    span = statistics.median(spans) if spans else None
    acc = {
        "name": case.name,
        "event_ms_instrumented": ri.median,
        "event_ms_plain": rp.median,
        "span_ms": span,
        "spans_ms": spans,
        "rel_error": (span / ri.median - 1.0) if span else None,
        "rel_error_vs_plain": (span / rp.median - 1.0) if span else None,
        "evaluated": bool(span) and rp.median >= ACCURACY_MIN_MS,
        "clock_ghz": r0.clock_ghz,
        "clock_source": r0.clock_source,
        "clock_nvml_mhz": r0.clock_nvml_mhz,
        "partition": r0.partition,
        "fractions": {n: s.fraction for n, s in r0.regions.items()},
        "region_us": {n: (s.ns_median / 1000 if s.ns_median else None) for n, s in r0.regions.items()},
        "n_ctas": r0.n_ctas,
        "dropped_events": max(r.dropped_events for r in regions),
        "warnings": sorted(set(w for r in regions for w in r.warnings)),
        "trace_sample": _trace_sample(r0),
        "raw_head": raw_head,
    }
    raw = {f"{case.name}/{k}": v for k, v in r0.trace.arrays().items()}
    raw.update({f"{case.name}/raw_{k.replace(':', '_')}": v for k, v in r0.trace.raw.items()})
    raw[f"{case.name}/names"] = np.array(r0.trace.names)
    raw[f"{case.name}/event_ms"] = np.array([rp.median, ri.median])
    for j, r in enumerate(regions[1:], 1):
        raw.update({f"{case.name}/run{j}_{k}": v for k, v in r.trace.raw.items() if k == "ts"})
        raw[f"{case.name}/run{j}_dur"] = r.trace.dur
        raw[f"{case.name}/run{j}_cta"] = r.trace.cta
    return entry, acc, raw


def _trace_sample(r) -> dict:
    kt = r.trace
    n = min(8, kt.n_events)
    return {
        "names": kt.names,
        "first": [
            {
                "region": kt.names[int(kt.region[j])],
                "cta": int(kt.cta[j]),
                "sm": int(kt.sm[j]),
                "unit": int(kt.unit[j]),
                "start": int(kt.start[j]),
                "dur": int(kt.dur[j]),
            }
            for j in range(n)
        ],
        "cta_init_ns": kt.cta_init_ns[:4].tolist(),
        "cta_final_ns": kt.cta_final_ns[:4].tolist(),
    }


def _aw(k: dict) -> str:
    a = k.get("all_warps") or {}
    if "overhead" in a:
        return f"{a['overhead']:+.2%}"
    return "error" if a else "n/a"


def render_md(doc: dict) -> str:
    d = doc["device"]
    lines = [
        "# Instrumentation overhead and accuracy",
        "",
        f"Device: {d.get('gpu')} ({d.get('sm_count')} SMs), driver {d.get('driver')}, CUDA {d.get('cuda')}, "
        f"torch {d.get('torch')}, triton {doc['triton']}. "
        "Produced by `benchmarks/instrumentation_overhead.py`.",
        "",
        "Regions: kperf's default automatic regions (`kernel` + `prologue`/`loopN`/`epilogue`, or `body` "
        "alone in a loop-free kernel) at the default granularity `cta`: warp 0 of every CTA records "
        "(Proton's selective sampling) into Proton's shared-memory buffer. The last column is the same "
        "regions recorded "
        'by every warp (`granularity="warp"`). Both kernels are launched through the same '
        "path (`CompiledKernel[grid](*args)`), timed with CUDA events in one interleaved loop (A,B then B,A; "
        "L2 flushed outside the timed window). The instrumented kernel writes into a fixed profile buffer "
        "with no Proton session active, so Proton's per-launch host post-processing is not in these numbers "
        "(it is listed separately: it is why instrumented launches never run inside a timing loop).",
        "",
        "| kernel | size | plain ms | instrumented ms | overhead | shared B plain/instr. | regs plain/instr. "
        "| all warps recording: overhead |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for k in doc["kernels"]:
        if "error" in k:
            lines.append(f"| {k['name']} | | error: {k['error']} | | | | |")
            continue
        lines.append(
            f"| {k['name']} | {k['size']} | {k['plain_ms']:.4f} | {k['instrumented_ms']:.4f} | "
            f"{k['overhead']:+.2%} | {k['shared_bytes'][0]}/{k['shared_bytes'][1]} | "
            f"{k['registers'][0]}/{k['registers'][1]} | {_aw(k)} |"
        )
    g = doc.get("geomean_overhead")
    worst = doc.get("worst_overhead")
    lines += [
        "",
        f"Geomean overhead: **{g:+.2%}** (target <= {TARGET_GEOMEAN:.0%}); worst: **{worst:+.2%}** "
        f"(target <= {TARGET_WORST:.0%})."
        if g is not None
        else "Geomean overhead: n/a",
        "",
        f"All warps recording: geomean {doc['all_warps_geomean_overhead']:+.2%}."
        if doc.get("all_warps_geomean_overhead") is not None
        else "",
        "",
    ]
    acc = doc["accuracy"]
    lines += [
        "## Accuracy",
        "",
        "(a) Whole-kernel span from the trace (first CTA start to last CTA end; cycles converted with the "
        "clock measured in the same trace: cycles / globaltimer ns over all CTAs) against the event-timed "
        f"median of the same instrumented kernel; median of {acc['runs']} instrumented launches, each after "
        f"an L2 flush. Evaluated for kernels of at least {ACCURACY_MIN_MS * 1000:.0f} us.",
        "",
        "| kernel | events ms (instr.) | span ms | rel. error | vs plain | clock GHz (source) | NVML MHz |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for a in acc["kernels"]:
        if a.get("span_ms") is None:
            lines.append(f"| {a['name']} | | n/a | | | | |")
            continue
        mark = "" if a["evaluated"] else " (not evaluated)"
        lines.append(
            f"| {a['name']} | {a['event_ms_instrumented']:.4f} | {a['span_ms']:.4f} | "
            f"{a['rel_error']:+.2%}{mark} | {a['rel_error_vs_plain']:+.2%} | "
            f"{a['clock_ghz']:.3f} ({a['clock_source']}) | {a['clock_nvml_mhz']} |"
        )
    mre = acc.get("max_rel_error")
    lines += [
        "",
        f"max_rel_error: **{mre:.2%}** (target <= {TARGET_ACCURACY:.0%})."
        if mre is not None
        else "max_rel_error: n/a",
        "",
        "(b) Per recording unit (warp 0 of each CTA at the default granularity), the sum of the "
        "non-overlapping regions against the `kernel` region "
        "(1.0 = the phases cover the kernel exactly; the small rest is the records themselves and code "
        "between loops).",
        "",
        "| kernel | regions | median ratio | total ratio | min | max |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for a in acc["kernels"]:
        p = a.get("partition") or {}
        if not p:
            continue
        lines.append(
            f"| {a['name']} | {' + '.join(p['regions'])} | {p['median_ratio']:.4f} | "
            f"{p['total_ratio']:.4f} | {p['min_ratio']:.4f} | {p['max_ratio']:.4f} |"
        )
    lines += ["", "Region shares of the kernel region (total cycles):", ""]
    for a in acc["kernels"]:
        fr = ", ".join(f"{n} {v:.1%}" for n, v in (a.get("fractions") or {}).items() if v is not None)
        lines.append(f"- {a['name']}: {fr}")
    misses = doc.get("misses") or []
    lines += ["", "## Targets", ""]
    if not misses:
        lines.append("All targets met.")
    else:
        lines += [f"- {m}" for m in misses]
    notes = doc.get("notes") or []
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="output folder (default: $OUT or benchmarks/results)")
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--accuracy-runs", type=int, default=3)
    ap.add_argument("--budget", type=float, default=2.0, help="timing budget per variant, s")
    args = ap.parse_args(argv)

    import torch
    import triton

    from kperf_ci.capture.instrument import RegionConfig
    from kperf_ci.capture.timing import TimingConfig

    out = out_dir(args.out)
    cfg = RegionConfig()
    tcfg = TimingConfig(budget_s=args.budget)
    doc: dict = {
        "device": device_info(),
        "triton": triton.__version__,
        "torch": torch.__version__,
        "region_config": cfg.__dict__ | {"ops": list(cfg.ops)},
        "kernels": [],
        "geomean_overhead": None,
        "accuracy": {
            "runs": args.accuracy_runs,
            "min_kernel_ms": ACCURACY_MIN_MS,
            "kernels": [],
            "max_rel_error": None,
        },
        "targets": {
            "geomean_overhead": TARGET_GEOMEAN,
            "worst_overhead": TARGET_WORST,
            "max_rel_error": TARGET_ACCURACY,
        },
    }
    raw_all: dict = {}
    cfg_all = RegionConfig(granularity="warp")
    for case in cases(args.only):
        t = time.perf_counter()
        try:
            entry, acc, raw = run_case(case, cfg, cfg_all, tcfg, args.accuracy_runs)
            raw_all.update(raw)
            np.savez_compressed(out / "regions_raw.npz", **raw_all)
        except Exception as e:
            traceback.print_exc()
            doc["kernels"].append({"name": case.name, "error": f"{type(e).__name__}: {e}"[:500]})
            continue
        doc["kernels"].append(entry)
        doc["accuracy"]["kernels"].append(acc)
        aw = entry.get("all_warps", {})
        print(f"    all warps: {aw}", flush=True)
        print(
            f"{case.name:16s} plain {entry['plain_ms']:.4f} ms  "
            f"instrumented {entry['instrumented_ms']:.4f} ms  "
            f"overhead {entry['overhead']:+.2%}  span {acc['span_ms']} ms  err {acc['rel_error']}  "
            f"clock {acc['clock_ghz']} ({acc['clock_source']})  dropped {acc['dropped_events']}  "
            f"[{time.perf_counter() - t:.1f} s]",
            flush=True,
        )
        write_json(out / "instrumentation_overhead.json", doc)

    ok = [k for k in doc["kernels"] if "overhead" in k]
    misses = []
    if ok:
        doc["geomean_overhead"] = geomean([1.0 + k["overhead"] for k in ok]) - 1.0
        doc["worst_overhead"] = max(k["overhead"] for k in ok)
        worst = max(ok, key=lambda k: k["overhead"])
        if doc["geomean_overhead"] > TARGET_GEOMEAN:
            misses.append(
                f"geomean overhead {doc['geomean_overhead']:+.2%} > {TARGET_GEOMEAN:.0%} "
                f"(by {doc['geomean_overhead'] - TARGET_GEOMEAN:.2%} points)"
            )
        if worst["overhead"] > TARGET_WORST:
            misses.append(
                f"worst overhead {worst['overhead']:+.2%} ({worst['name']}) > {TARGET_WORST:.0%} "
                f"(by {worst['overhead'] - TARGET_WORST:.2%} points)"
            )
    ev = [a for a in doc["accuracy"]["kernels"] if a["evaluated"] and a["rel_error"] is not None]
    if ev:
        doc["accuracy"]["max_rel_error"] = max(abs(a["rel_error"]) for a in ev)
        if doc["accuracy"]["max_rel_error"] > TARGET_ACCURACY:
            w = max(ev, key=lambda a: abs(a["rel_error"]))
            misses.append(
                f"max_rel_error {doc['accuracy']['max_rel_error']:.2%} ({w['name']}) > "
                f"{TARGET_ACCURACY:.0%} (by {doc['accuracy']['max_rel_error'] - TARGET_ACCURACY:.2%} "
                "points)"
            )
    for k in doc["kernels"]:
        if "error" in k:
            misses.append(f"{k['name']}: not measured ({k['error']})")
    aws = [k["all_warps"]["overhead"] for k in ok if "overhead" in (k.get("all_warps") or {})]
    if aws:
        doc["all_warps_geomean_overhead"] = geomean([1.0 + x for x in aws]) - 1.0
    doc["misses"] = misses
    write_json(out / "instrumentation_overhead.json", doc)
    (out / "instrumentation_overhead.md").write_text(render_md(doc))
    print(render_md(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
