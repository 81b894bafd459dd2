"""Device-time cost of kperf's automatic regions, and how well the regions' clock agrees with
CUDA events. Needs a CUDA GPU; writes instrumentation_overhead.{json,md}
(``--render JSON`` re-renders the .md from a JSON on any machine).

Method (per example kernel, at a GPU-filling size):

1. Run the example once (compile; autotune for matmul), then capture its launch: the plain
   CompiledKernel, its grid and bound arguments.
2. ``instrument_callable`` runs it once under a Proton instrumentation session
   (``data="trace"``), as the plugin does: this compiles the instrumented kernel and gives the
   regions, the partition check (b), and, from the raw buffer kept through the session, the
   plugin path's measured clock.
3. Inside ``instrumented_launches`` (no Proton session) the example is called once more to
   capture the *instrumented* CompiledKernel with the same arguments; it is launched
   ``--launches`` times between CUDA events and each launch's records are read from the device
   buffer: accuracy (a) compares that launch's span with that launch's event time.
4. Plain, instrumented and two other buffer configurations are launched through the same path
   (``CompiledKernel[grid](*args)``, no Proton hooks; the instrumented ones write into a fixed
   buffer that nobody reads) and timed with ``time_interleaved`` (CUDA events, L2 flushed
   outside the timed window, A/B/B/A). overhead = instrumented median / plain median - 1.
   This is the kernel's own device cost of the records and the buffer copy-out; Proton's host
   post-processing (seconds per launch) is excluded by construction, and reported separately.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import cases, device_info, geomean, out_dir, warm_timed_launch, write_json  # noqa: E402

TARGET_GEOMEAN = 0.03
TARGET_WORST = 0.08
TARGET_ACCURACY = 0.02
ACCURACY_MIN_MS = 0.05
VARIANT_LABELS = {
    "proton_default_buffer": "shared buffer, Proton's size (the earlier default)",
    "shared_buffer_512": "shared buffer, 512 B",
}


def _raw_launches(run, alloc, kernel, n_ctas: int, launches: int, be) -> list[dict]:
    """Launch the instrumented kernel `launches` times, each after 3 untimed warm calls queued
    just before it (no idle gap) and an L2 flush, between two CUDA events; after each, read the
    records straight from the profile buffer and compare the span with that launch's time."""
    from kperf_ci.capture.regions.instrument import read_raw_trace
    from kperf_ci.traces import clock as pt

    out = []
    for _ in range(launches):
        ms = warm_timed_launch(be, run)
        kt = read_raw_trace(alloc, kernel, n_ctas)
        fit = pt.fit_clock(kt)
        kreg = "kernel" if "kernel" in kt.names else ("body" if "body" in kt.names else None)
        spans = pt.spans_from_raw(kt, fit, kreg) if fit else {}
        out.append(
            {
                "event_ms": ms,
                "span_ms": spans.get("regions", float("nan")) / 1e6 if spans else None,
                "span_cta_ms": spans.get("cta", float("nan")) / 1e6 if spans else None,
                "rel_error": (spans["regions"] / 1e6 / ms - 1.0) if spans else None,
                "rel_error_cta": (spans["cta"] / 1e6 / ms - 1.0) if "cta" in spans else None,
                "clock_ghz": fit.ghz if fit else None,
                "clock_ghz_median_sm": fit.ghz_median_sm if fit else None,
                "clock_fit_rms_ns": fit.rms_residual_ns if fit else None,
                "clock_fit_rejected": fit.rejected if fit else None,
                "clock_fit_sms": fit.n_sms if fit else None,
                "ctas": int(kt.cta_ids.size),
                "warnings": kt.warnings[:5],
            }
        )
    return out


def run_case(case, cfg, variants_cfg: dict, tcfg, launches: int) -> tuple[dict, dict]:
    import tempfile

    import torch

    from kperf_ci.capture.launches.gpu import capture_launches
    from kperf_ci.capture.regions.instrument import instrument_callable, instrumented_launches, profile_buffer
    from kperf_ci.capture.timing.engine import CudaBackend, time_interleaved

    fn = case.make(1234)
    fn()
    torch.cuda.synchronize()
    _, plain = capture_launches(fn, static=False)
    assert plain and plain[0].kernel is not None, "no Triton launch captured"
    p = plain[0]
    n_ctas = p.grid[0] * p.grid[1] * p.grid[2]
    be = CudaBackend()

    def flushed():
        be.flush()
        fn()

    # 1. the plugin's path: one launch under a Proton session (regions, and the raw buffer kept
    #    through the session for the clock fit and the span)
    wd = tempfile.mkdtemp(prefix="kperf_bench_")
    r0 = instrument_callable(flushed, cfg, kernel=p.name, workdir=wd)
    # 2. the same instrumented binary without a session: raw launches for accuracy (a)
    with instrumented_launches(cfg) as alloc:
        _, inst = capture_launches(fn, static=False)
        i = inst[0]
        scratch = getattr(i.kernel.metadata, "profile_scratch_size", 0)
        assert scratch > 0, "the launch inside instrumented_launches was not instrumented"
        run = i.replay()
        raw = _raw_launches(run, alloc, i.kernel, n_ctas, launches, be)
    variants = {"plain": p.replay(), "instrumented": run}
    extra = {}
    for vname, vcfg in variants_cfg.items():
        try:
            with instrumented_launches(vcfg, compile=True):
                _, iv = capture_launches(fn, static=False)
            variants[vname] = iv[0].replay()
            extra[vname] = {
                "shared_bytes": iv[0].kernel.metadata.shared,
                "registers": iv[0].n_regs,
                "profile_scratch_bytes_per_cta": int(iv[0].kernel.metadata.profile_scratch_size),
                "config": {k: v for k, v in vcfg.__dict__.items() if k != "ops"},
            }
        except Exception as e:
            traceback.print_exc()
            extra[vname] = {"error": f"{type(e).__name__}: {e}"[:300]}
    with profile_buffer():
        res = time_interleaved(variants, tcfg)
    rp, ri = res["plain"], res["instrumented"]
    for vname in extra:
        if vname in res:
            rv = res[vname]
            extra[vname].update(
                instrumented_ms=rv.median, overhead=rv.median / rp.median - 1.0, ci_ms=[rv.ci_low, rv.ci_high]
            )
    entry = {
        "name": case.name,
        "size": case.size,
        "plain_ms": rp.median,
        "instrumented_ms": ri.median,
        "overhead": ri.median / rp.median - 1.0,
        "plain_ci_ms": [rp.ci_low, rp.ci_high],
        "instrumented_ci_ms": [ri.ci_low, ri.ci_high],
        "samples": [rp.n, ri.n],
        "discarded_rewarm_samples": [len(rp.discarded_ms), len(ri.discarded_ms)],
        "method": rp.method,
        "stopped_by": rp.stopped_by,
        "grid": list(p.grid) if p.grid else None,
        "num_warps": p.num_warps,
        "registers": [p.n_regs, i.n_regs],
        "shared_bytes": [p.shared, i.shared],
        "profile_scratch_bytes_per_cta": scratch,
        "regions": list(r0.regions),
        "proton_host_seconds_per_instrumented_launch": r0.host_seconds,
        "variants": extra,
        "warnings": sorted(set(rp.warnings + ri.warnings)),
    }
    errs = [x["rel_error"] for x in raw if x["rel_error"] is not None]
    acc = {
        "name": case.name,
        "event_ms_instrumented": ri.median,
        "event_ms_plain": rp.median,
        "launches": raw,
        "rel_error": statistics.median(errs) if errs else None,
        "span_ms": statistics.median([x["span_ms"] for x in raw if x["span_ms"]]) if errs else None,
        "event_ms_launches": statistics.median([x["event_ms"] for x in raw]),
        "evaluated": bool(errs) and ri.median >= ACCURACY_MIN_MS,
        "clock_ghz": statistics.median([x["clock_ghz"] for x in raw if x["clock_ghz"]]) if errs else None,
        "session": {
            "clock_ghz": r0.clock_ghz,
            "clock_source": r0.clock_source,
            "clock_fit": r0.clock_fit,
            "clock_nvml_mhz": r0.clock_nvml_mhz,
            "span_ms": r0.span_ns / 1e6 if r0.span_ns else None,
            "spans_ms": {k: v / 1e6 for k, v in r0.spans_ns.items()},
        },
        "partition": r0.partition,
        "fractions": {n: st.fraction for n, st in r0.regions.items()},
        "region_us": {n: (st.ns_median / 1000 if st.ns_median else None) for n, st in r0.regions.items()},
        "n_ctas": r0.n_ctas,
        "dropped_events": r0.dropped_events,
        "warnings": sorted(set(r0.warnings)),
    }
    return entry, acc


def _pct(x) -> str:
    return "n/a" if x is None else f"{x:+.2%}"


def render_md(doc: dict) -> str:
    d = doc["device"]
    rc = doc.get("region_config", {})
    labels = doc.get("variant_labels") or {n: n for n in VARIANT_LABELS}
    lines = [
        "# Instrumentation overhead and accuracy",
        "",
        f"Device: {d.get('gpu')} ({d.get('sm_count')} SMs), driver {d.get('driver')}, CUDA {d.get('cuda')}, "
        f"torch {d.get('torch')}, triton {doc['triton']}. "
        "Produced by `benchmarks/instrumentation_overhead.py`.",
        "",
        "Regions: kperf's default automatic regions (`kernel` + `prologue`/`loopN`/`epilogue`, or `body` "
        "alone in a loop-free kernel) at the default granularity `cta`: warp 0 of every CTA records "
        f"(Proton's selective sampling) into a {rc.get('buffer_bytes')}-byte {rc.get('buffer_type')}-memory "
        "buffer per CTA (`RegionConfig` defaults). Plain and instrumented kernels are launched through "
        "the same path (`CompiledKernel[grid](*args)`) and timed with CUDA events in one interleaved loop "
        "(A,B,.. then ..,B,A; L2 flushed outside the timed window; re-warm calls after each idle gap, "
        "not counted). The instrumented kernels write into a fixed profile buffer with no Proton "
        "session active, so Proton's per-launch host post-processing is not in these numbers.",
        "",
        "| kernel | size | plain ms | instrumented ms | overhead | shared B plain/instr. | "
        + " | ".join(labels.values())
        + " |",
        "|---|---|---:|---:|---:|---:|" + "---:|" * len(labels),
    ]
    for k in doc["kernels"]:
        if "error" in k:
            lines.append(f"| {k['name']} | | error: {k['error']} | | | |" + " |" * len(labels))
            continue
        v = k.get("variants", {})

        def cell(name, k=k, v=v):
            e = v.get(name, {})
            if "overhead" not in e:
                return "error" if e else "n/a"
            return f"{e['overhead']:+.2%} ({e['shared_bytes']} B)"

        lines.append(
            f"| {k['name']} | {k['size']} | {k['plain_ms']:.4f} | {k['instrumented_ms']:.4f} | "
            f"{k['overhead']:+.2%} | {k['shared_bytes'][0]}/{k['shared_bytes'][1]} | "
            + " | ".join(cell(n) for n in labels)
            + " |"
        )
    g = doc.get("geomean_overhead")
    worst = doc.get("worst_overhead")
    vg = doc.get("variant_geomean_overhead", {})
    lines += [
        "",
        f"Geomean overhead: **{g:+.2%}** (target <= {TARGET_GEOMEAN:.0%}); worst: **{worst:+.2%}** "
        f"(target <= {TARGET_WORST:.0%})."
        if g is not None
        else "Geomean overhead: n/a",
        "",
        "Geomean of the other buffers: " + ", ".join(f"{n} {x:+.2%}" for n, x in vg.items()) + "."
        if vg
        else "",
        "",
    ]
    acc = doc["accuracy"]
    lines += [
        "## Accuracy",
        "",
        "(a) Whole-kernel span from the instrumentation against CUDA events around the *same launch* of the "
        f"same instrumented binary ({acc['launches']} launches per kernel, each queued right behind 3 warm "
        "calls and an L2 flush). The records are read straight from Proton's device buffer (absolute SM "
        "cycles of every record, per-CTA globaltimer stamps); the SM clock is measured in the same launch "
        "(per SM, each CTA's first-record cycle regressed on its globaltimer start: one slope, one intercept "
        "per SM), and span = latest end of the `kernel` region minus earliest start over all CTAs, each "
        "CTA's cycles placed on the globaltimer axis by its SM's fitted line. rel. error = median over the "
        "launches of span / event time - 1. Evaluated for kernels of at least "
        f"{ACCURACY_MIN_MS * 1000:.0f} us.",
        "",
        "| kernel | event ms (same launches) | span ms | rel. error (median) | per launch | clock GHz "
        "(fit rms ns) | plugin path: clock GHz (source) | NVML MHz |",
        "|---|---:|---:|---:|---|---:|---:|---:|",
    ]
    for a in acc["kernels"]:
        ls = a.get("launches") or []
        per = ", ".join(_pct(x["rel_error"]) for x in ls)
        ses = a.get("session") or {}
        rms = statistics.median(
            [x["clock_fit_rms_ns"] for x in ls if x.get("clock_fit_rms_ns")] or [float("nan")]
        )
        mark = "" if a.get("evaluated") else " (not evaluated)"
        clk = a.get("clock_ghz")
        sclk = ses.get("clock_ghz")
        lines.append(
            f"| {a['name']} | {a['event_ms_launches']:.4f} | "
            f"{a['span_ms'] if a['span_ms'] is None else format(a['span_ms'], '.4f')} | "
            f"{_pct(a['rel_error'])}{mark} | {per} | "
            f"{'n/a' if clk is None else format(clk, '.3f')} ({rms:.0f}) | "
            f"{'n/a' if sclk is None else format(sclk, '.3f')} ({ses.get('clock_source')}) | "
            f"{ses.get('clock_nvml_mhz')} |"
        )
    mre = acc.get("max_rel_error")
    lines += [
        "",
        f"max_rel_error: **{mre:.2%}** (target <= {TARGET_ACCURACY:.0%})."
        if mre is not None
        else "max_rel_error: n/a",
        "",
        "(b) Per recording unit (warp 0 of each CTA), the sum of the non-overlapping regions against the "
        "`kernel` region (1.0 = the phases cover the kernel exactly; the rest is the records themselves and "
        "code between loops).",
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
    lines += [f"- {m}" for m in misses] if misses else ["All targets met."]
    notes = ([doc["provenance"]] if doc.get("provenance") else []) + list(doc.get("notes") or [])
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="output folder (default: $OUT or benchmarks/results)")
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--launches", type=int, default=3, help="raw-buffer launches per kernel for accuracy")
    ap.add_argument("--budget", type=float, default=2.0, help="timing budget per variant, s")
    ap.add_argument("--render", default=None, help="re-render the .md next to this JSON and exit")
    args = ap.parse_args(argv)
    if args.render:
        import json

        src = Path(args.render)
        doc = json.loads(src.read_text())
        src.with_suffix(".md").write_text(render_md(doc))
        return 0

    import torch
    import triton

    from kperf_ci.capture.regions.instrument import RegionConfig
    from kperf_ci.capture.timing.engine import TimingConfig

    out = out_dir(args.out)
    cfg = RegionConfig()
    tcfg = TimingConfig(budget_s=args.budget)
    doc: dict = {
        "device": device_info(),
        "triton": triton.__version__,
        "torch": torch.__version__,
        "region_config": cfg.__dict__ | {"ops": list(cfg.ops), "buffer_bytes": cfg.effective_buffer_size()},
        "kernels": [],
        "geomean_overhead": None,
        "accuracy": {
            "launches": args.launches,
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
    # the earlier default (a shared-memory buffer of Proton's own size: 8 KB per CTA, 64 KB
    # for the matmul) and a 512-byte shared buffer, timed in the same loop as the default
    variants_cfg = {
        "proton_default_buffer": RegionConfig(buffer_type="shared", buffer_size=0),
        "shared_buffer_512": RegionConfig(buffer_type="shared"),
    }
    doc["variant_labels"] = dict(VARIANT_LABELS)
    for case in cases(args.only):
        t = time.perf_counter()
        try:
            entry, acc = run_case(case, cfg, variants_cfg, tcfg, args.launches)
        except Exception as e:
            traceback.print_exc()
            doc["kernels"].append({"name": case.name, "error": f"{type(e).__name__}: {e}"[:500]})
            continue
        doc["kernels"].append(entry)
        doc["accuracy"]["kernels"].append(acc)
        print(
            f"{case.name:16s} plain {entry['plain_ms']:.4f} ms  "
            f"instrumented {entry['instrumented_ms']:.4f} ms  "
            f"overhead {entry['overhead']:+.2%}  "
            + "  ".join(f"{k} {v.get('overhead', float('nan')):+.2%}" for k, v in entry["variants"].items())
            + f"  span err {acc['rel_error']}  launches {[x['rel_error'] for x in acc['launches']]}  "
            f"clock {acc['clock_ghz']}  session {acc['session']}  dropped {acc['dropped_events']}  "
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
    for vname in variants_cfg:
        xs = [k["variants"][vname]["overhead"] for k in ok if "overhead" in k["variants"].get(vname, {})]
        if len(xs) == len(ok) and xs:
            doc.setdefault("variant_geomean_overhead", {})[vname] = geomean([1.0 + x for x in xs]) - 1.0
    doc["misses"] = misses
    write_json(out / "instrumentation_overhead.json", doc)
    (out / "instrumentation_overhead.md").write_text(render_md(doc))
    print(render_md(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
