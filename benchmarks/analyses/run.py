"""Evidence for the intra-kernel analyses: run each purpose-built case on the GPU once under
Proton's instrumentation, analyze the timeline, and check that the case is flagged and its
control is not.

    python benchmarks/analyses/run.py --out DIR [--quick]

Writes DIR/summary.json (per case: name, analysis, expected, flagged, value, plus context),
DIR/summary.md, DIR/traces.json (each case's timeline, CTA-aggregated where that is all the
analysis needs, in kperf's timeline JSON: tests/data/traces/ is made from it) and
DIR/proton_wave_133.json (one raw Proton Chrome trace, minified, for the loader tests).

Method (docs/notes: triton-field-notes.md): one instrumented launch per case, never inside a
timing loop; wall time of the same kernels is measured separately, uninstrumented, with CUDA
events (median of 20 after warm-up). Launch gaps come from CUDA events around each launch.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # the repo root, for kperf_ci
sys.path.insert(0, HERE)

import kernels as K  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.profiler as proton  # noqa: E402
import triton.profiler.language as pl  # noqa: E402

from kperf_ci.analysis import (  # noqa: E402
    LaunchConfig,
    analyze_timeline,
    launch_gaps,
    load_imbalance,
    overlap,
    prologue_epilogue,
    wave_quantization,
)
from kperf_ci.traces.kernel_records import KernelRecord, load_records, records_document  # noqa: E402
from kperf_ci.traces.proton_chrome import load_proton_traces  # noqa: E402
from kperf_ci.traces.records import Timeline  # noqa: E402
from kperf_ci.traces.timeline_file import timeline_document  # noqa: E402

pl.enable_semantic("triton")
DEV = "cuda"


def log(*a):
    print(*a, flush=True)


def cuda_time_ms(fn, reps=20, warmup=5) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e))
    return float(np.median(out))


def profile_once(fn, name: str, workdir: str, mode=None) -> tuple[list[Timeline], str, object]:
    """One instrumented run of fn() under a Proton trace session; the parsed launches, the trace
    path and fn's return value."""
    base = os.path.join(workdir, name)
    mode = mode or proton.mode.Default(metric_type="cycle", granularity="warp")
    proton.start(base, backend="instrumentation", data="trace", mode=mode)
    try:
        ret = fn()
        torch.cuda.synchronize()
    finally:
        proton.finalize()
    files = sorted(glob.glob(base + "*"))
    if not files:
        raise RuntimeError(f"Proton wrote no trace for {name}")
    tls = load_proton_traces(files[0], num_sms=NUM_SMS)
    unnamed = sorted({r for t in tls for r in t.regions() if r.startswith("scope_")})
    if unnamed:
        log(f"  WARNING {name}: Proton did not name regions {unnamed}")
    return tls, files[0], ret


def cta_level(tl: Timeline) -> Timeline:
    """Aggregate warps to CTAs (earliest start, latest end per CTA and region occurrence)."""
    rows = {}
    order = np.lexsort((tl.start_ns, tl.region.astype(str), tl.warp, tl.cta))
    occ: dict[tuple, int] = {}
    for i in order:
        k = (int(tl.cta[i]), int(tl.warp[i]), str(tl.region[i]))
        n = occ.get(k, 0)
        occ[k] = n + 1
        key = (int(tl.cta[i]), str(tl.region[i]), n)
        s, e = float(tl.start_ns[i]), float(tl.end_ns[i])
        if key in rows:
            r = rows[key]
            rows[key] = (r[0], min(r[1], s), max(r[2], e))
        else:
            rows[key] = (int(tl.sm[i]), s, e)
    recs = [(c, -1, sm, reg, s, e) for (c, reg, _), (sm, s, e) in rows.items()]
    return Timeline.from_records(recs, kernel=tl.kernel, num_sms=tl.num_sms, meta=dict(tl.meta))


def tl_json(tl: Timeline) -> dict:
    safe = {k: v for k, v in tl.meta.items() if isinstance(v, (int, float, str, type(None), list))}
    return timeline_document(tl, meta=safe)


def finding(fs, name):
    for f in fs:
        if f.name == name:
            return f
    raise KeyError(name)


RESULTS: list[dict] = []
CLOCK: dict[str, float] = {}  # kernel -> SM MHz fitted by the capture stage
TRACES: dict[str, dict] = {}


def record(case: str, analysis: str, expected: bool, f, **ctx):
    row = {
        "name": case,
        "analysis": analysis,
        "metric": f"analysis.{f.name}",
        "expected": expected,
        "flagged": bool(f.flagged),
        "value": float(f.value),
        "unit": f.unit,
        "threshold": f.threshold,
        "explanation": f.explanation,
        "ok": None if expected is None else bool(f.flagged) == expected,
        **ctx,
    }
    RESULTS.append(row)
    verdict = {None: "INFO", True: "PASS", False: "FAIL"}[row["ok"]]
    log(f"  {verdict} {case}: {f.line()}")


# --------------------------------------------------------------------------------------------
# cases


def case_waves(workdir: str):
    BM, BN, BK, KK = 128, 256, 64, 4096
    for tiles, (tm, tn), expected in ((133, (7, 19), True), (132, (12, 11), False)):
        M, N = BM * tm, BN * tn
        a = torch.randn(M, KK, device=DEV, dtype=torch.float16)
        b = torch.randn(KK, N, device=DEV, dtype=torch.float16)
        c = torch.empty(M, N, device=DEV, dtype=torch.float16)

        def launch(tiles=tiles, a=a, b=b, c=c, M=M, N=N):
            return K.wave_matmul[(tiles,)](
                a, b, c, M, N, KK, BM=BM, BN=BN, BK=BK, TAG=tiles, num_warps=8, num_stages=4
            )

        tls, path, ck = profile_once(launch, f"wave_{tiles}", workdir)
        tl = tls[-1]
        inst = dict(registers=int(ck.n_regs), shared_bytes=int(ck.metadata.shared), num_warps=8)
        # the plain kernel's static numbers (outside the session: no instrumentation)
        plain = launch()
        torch.cuda.synchronize()
        static = dict(registers=int(plain.n_regs), shared_bytes=int(plain.metadata.shared), num_warps=8)
        ms = cuda_time_ms(launch)
        torch.testing.assert_close(
            c[:128, :128].float(), (a[:128].float() @ b[:, :128].float()), rtol=2e-2, atol=1.0
        )
        fs_static = wave_quantization(tiles, arch="sm_90", sm_count=NUM_SMS, **static)
        record(
            f"wave_{tiles}_static",
            "wave quantization (static only)",
            expected,
            finding(fs_static, "wave_idle"),
            static=static,
            time_ms=ms,
        )
        # the capture stage's path: automatic regions, raw-buffer clock fit, RegionResult -> Timeline
        try:
            from kperf_ci.analysis.timeline import from_region_result
            from kperf_ci.capture.regions.instrument import RegionConfig, instrument_callable

            def launch_cap(tiles=tiles, a=a, b=b, c=c, M=M, N=N):
                return K.wave_matmul[(tiles,)](
                    a, b, c, M, N, KK, BM=BM, BN=BN, BK=BK, TAG=1000 + tiles, num_warps=8, num_stages=4
                )

            rr = instrument_callable(launch_cap, RegionConfig(granularity="cta"), kernel="wave_matmul")
            if rr.clock_source == "trace":
                CLOCK["wave_matmul"] = rr.clock_ghz * 1000.0
            tl_rr = from_region_result(rr, num_sms=NUM_SMS)
            fs_rr = analyze_timeline(
                tl_rr, launch=LaunchConfig(grid=tiles, arch="sm_90", sm_count=NUM_SMS, **inst)
            )
            record(
                f"wave_{tiles}_capture",
                "wave quantization (capture stage RegionResult timeline)",
                expected,
                finding(fs_rr, "wave_tail_idle_measured"),
                clock_source=rr.clock_source,
                clock_mhz=(rr.clock_ghz or 0) * 1000.0,
                ctas_per_sm_observed=finding(fs_rr, "ctas_per_sm_observed").value,
                sm_utilization=finding(fs_rr, "sm_utilization").value,
                regions=tl_rr.regions(),
                warnings=rr.warnings[:3],
            )
            TRACES[f"wave_{tiles}"] = tl_json(cta_level(tl_rr))
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            RESULTS.append({"name": f"wave_{tiles}_capture", "analysis": "waves", "error": repr(e)[:500]})
            TRACES[f"wave_{tiles}"] = tl_json(cta_level(tl))
        if "wave_matmul" in CLOCK:  # Proton 3.6's Chrome trace has no clock: reuse the fitted one
            tl = load_proton_traces(path, num_sms=NUM_SMS, clock_mhz=CLOCK["wave_matmul"])[-1]
        fs = analyze_timeline(tl, launch=LaunchConfig(grid=tiles, arch="sm_90", sm_count=NUM_SMS, **inst))
        record(
            f"wave_{tiles}_timeline",
            "wave quantization (checked on the timeline)",
            expected,
            finding(fs, "wave_tail_idle_measured"),
            instrumented=inst,
            time_ms=ms,
            ctas_per_sm_observed=finding(fs, "ctas_per_sm_observed").value,
            sm_utilization=finding(fs, "sm_utilization").value,
            clock_mhz=tl.meta.get("clock_mhz"),
            span_us=tl.span_ns / 1000,
        )
        if tiles == 133:
            raw = json.load(open(path))
            keep = []
            for e in raw["traceEvents"]:
                if " Core" in str(e.get("pid", "")):
                    args = {k: v for k, v in (e.get("args") or {}).items() if "Time" in k or "Freq" in k}
                    keep.append(
                        {k: e[k] for k in ("name", "ph", "pid", "tid", "ts", "dur") if k in e}
                        | {"args": args}
                    )
            with open(os.path.join(OUT, "proton_wave_133.json"), "w") as f:
                json.dump({"displayTimeUnit": "ns", "traceEvents": keep}, f, separators=(",", ":"))


def _work(workdir, name, pro, main, tag):
    grid = len(main)
    out = torch.empty(grid * 128, device=DEV, dtype=torch.float32)
    pro_t = torch.tensor(pro, device=DEV, dtype=torch.int32)
    main_t = torch.tensor(main, device=DEV, dtype=torch.int32)

    def launch():
        return K.work_kernel[(grid,)](out, pro_t, main_t, BLOCK=128, TAG=tag, num_warps=4)

    tls, _, _ = profile_once(launch, name, workdir)
    ms = cuda_time_ms(launch)
    return tls[-1], ms


def case_imbalance(workdir: str, base: int):
    g = NUM_SMS
    skew = [base * 8 if i % 16 == 0 else base for i in range(g)]
    for name, main, expected in (("imbalance_skewed", skew, True), ("imbalance_equal", [base] * g, False)):
        tl, ms = _work(workdir, name, [0] * g, main, tag=len(TRACES) + 1)
        fs = load_imbalance(tl, num_sms=NUM_SMS)
        record(
            name,
            "load imbalance",
            expected,
            finding(fs, "sm_finish_skew"),
            time_ms=ms,
            cta_max_over_median=finding(fs, "cta_duration_max_over_median").value,
            cta_cv=finding(fs, "cta_duration_cv").value,
        )
        TRACES[name] = tl_json(cta_level(tl))


def case_prologue(workdir: str, base: int):
    g = NUM_SMS
    for name, pro, expected in (("prologue_heavy", [base] * g, True), ("prologue_light", [0] * g, False)):
        tl, ms = _work(workdir, name, pro, [base] * g, tag=len(TRACES) + 1)
        fs = prologue_epilogue(tl)
        record(
            name,
            "prologue/epilogue",
            expected,
            finding(fs, "prologue_fraction"),
            time_ms=ms,
            epilogue_fraction=finding(fs, "epilogue_fraction").value,
        )
        TRACES[name] = tl_json(tl if len(tl) < 3000 else cta_level(tl))


def case_overlap(workdir: str, label: str, grid_m: int, grid_n: int, kk: int, stages: dict):
    """``stages``: NUM_STAGES -> expected flag of memory_exposed_fraction (None: measured, no
    expectation)."""
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    BM, BN, BK, W = 128, 256, 64, 8
    M, N = BM * grid_m, BN * grid_n
    a = torch.randn(M, kk, device=DEV, dtype=torch.float16)
    b = torch.randn(kk, N, device=DEV, dtype=torch.float16)
    c = torch.empty(M, N, device=DEV, dtype=torch.float16)

    def desc(t, blk):
        return TensorDescriptor.from_tensor(t, blk, gl.NVMMASharedLayout.get_default_for(blk, gl.float16))

    da, db, dc = desc(a, [BM, BK]), desc(b, [BK, BN]), desc(c, [BM, BN])
    per_warp = 2 * (2 + 2 * (kk // BK))  # records per warp: kernel, loop0, 2 per iteration
    mode = proton.mode.Default(
        metric_type="cycle",
        granularity="warp",
        buffer_type="global",
        buffer_size=1 << max(16, (per_warp * W * 16 - 1).bit_length()),
    )
    ref = a.float() @ b.float()
    for n_stages, expected in stages.items():
        tag = len(RESULTS) + 1  # a fresh binary per profiled case (see kernels.py)

        def launch(n_stages=n_stages, tag=tag):
            return K.pipelined_matmul[(grid_m, grid_n)](
                da, db, dc, kk, NUM_STAGES=n_stages, num_warps=W, TAG=tag
            )

        name = f"overlap{label}_stages{n_stages}"
        tls, _, _ = profile_once(launch, name, workdir, mode=mode)
        tl = tls[-1]
        torch.testing.assert_close(c.float(), ref, rtol=2e-2, atol=1.0)
        ms = cuda_time_ms(launch)
        fs = overlap(tl)
        names = tl.region.astype(str)
        n_mma = int((names == "mma").sum())
        dur = tl.end_ns - tl.start_ns
        mma_us = float(np.median(dur[names == "mma"])) / 1000 if n_mma else None
        wait_us = float(np.median(dur[names == "tma_wait"])) / 1000 if (names == "tma_wait").any() else None
        bub = finding(fs, "pipeline_bubble_fraction")
        record(
            name,
            "memory/tensor-core overlap",
            expected,
            finding(fs, "memory_exposed_fraction"),
            shape={"M": M, "N": N, "K": kk, "grid": [grid_m, grid_n], "tile": [BM, BN, BK]},
            time_ms=ms,
            pipeline_bubble_fraction=bub.value,
            untracked_fraction=bub.details.get("untracked_fraction"),
            mma_busy_fraction=finding(fs, "mma_busy_fraction").value,
            memory_compute_overlap=finding(fs, "memory_compute_overlap").value,
            mma_records=n_mma,
            mma_median_us=mma_us,
            tma_wait_median_us=wait_us,
            clock_mhz=tl.meta.get("clock_mhz"),
            mma_records_expected=grid_m * grid_n * W * (kk // BK),
            largest_bubbles=bub.details.get("bubbles", [])[:3],
        )
        if expected is not None:
            # keep 2 CTAs x warps 0 and 4 (one per warpgroup) for the tests
            keep = np.isin(tl.cta, np.unique(tl.cta)[:2]) & np.isin(tl.warp, [0, 4])
            sub = tl.where(keep)
            sub.meta["subset"] = f"2 of {grid_m * grid_n} CTAs, warps 0 and 4 (one per warpgroup)"
            TRACES[name] = tl_json(sub)


def record_gaps(name: str, analysis: str, expected: bool, recs: list[KernelRecord]) -> None:
    """Check one kernel sequence's launch gaps and keep its records for the tests."""
    fs = launch_gaps(recs)
    record(
        name,
        analysis,
        expected,
        finding(fs, "launch_gap_fraction"),
        kernel_median_us=finding(fs, "kernel_median_ns").value / 1000,
        gap_median_us=finding(fs, "launch_gap_median_ns").value / 1000,
        span_us=(max(r.end_ns for r in recs) - min(r.start_ns for r in recs)) / 1000,
    )
    TRACES[name] = records_document(recs)


def case_launch_gaps():
    n = 4096
    x = torch.zeros(n, device=DEV)
    reps = 64

    def events_run(launches):
        evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in launches]
        torch.cuda.synchronize()
        for (s, e), fn in zip(evs, launches, strict=True):
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        t0 = evs[0][0]
        return [
            KernelRecord(f"k{i}", t0.elapsed_time(s) * 1e6, t0.elapsed_time(e) * 1e6)
            for i, (s, e) in enumerate(evs)
        ]

    tiny = lambda: K.tiny_add[(triton.cdiv(n, 1024),)](x, n, BLOCK=1024)  # noqa: E731
    fused = lambda: K.fused_add[(triton.cdiv(n, 1024),)](x, n, REPS=reps, BLOCK=1024)  # noqa: E731
    big_n = 1 << 26
    y = torch.zeros(big_n, device=DEV)
    big = lambda: K.tiny_add[(triton.cdiv(big_n, 1024),)](y, big_n, BLOCK=1024)  # noqa: E731
    for fn in (tiny, fused, big):  # compile + warm up
        fn()
        fn()
    for name, launches, expected in (
        ("launch_chain_64_tiny", [tiny] * reps, True),
        ("launch_fused_1", [fused], False),
        ("launch_chain_8_large", [big] * 8, False),
    ):
        record_gaps(name, "launch gaps", expected, events_run(launches))
    # the same sequences under torch.profiler: Kineto's kernel records hold GPU execution only,
    # so the gap share is exact rather than the lower bound the events give
    from torch.profiler import ProfilerActivity, profile

    for name, launches, expected in (
        ("launch_chain_64_tiny_profiler", [tiny] * reps, True),
        ("launch_fused_1_profiler", [fused], False),
        ("launch_chain_8_large_profiler", [big] * 8, False),
    ):
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for fn in launches:
                fn()
            torch.cuda.synchronize()
        path = os.path.join(tempfile.gettempdir(), f"kperf_{name}.json")
        prof.export_chrome_trace(path)
        recs = load_records(path)  # the kperf analyze --records path
        if len(recs) != len(launches):
            raise RuntimeError(
                f"{name}: profiler gave {len(recs)} kernel records for {len(launches)} launches"
            )
        record_gaps(name, "launch gaps (torch.profiler kernel records)", expected, recs)


def case_instrument_callable(workdir: str):
    """The capture stage's automatic regions on an unmodified kernel, through the adapter."""
    try:
        from kperf_ci.analysis.timeline import from_region_result
        from kperf_ci.capture.regions.instrument import RegionConfig, instrument_callable
    except Exception as e:  # noqa: BLE001
        RESULTS.append({"name": "instrument_callable_adapter", "analysis": "adapter", "error": repr(e)})
        return
    n = 1 << 20
    x = torch.zeros(n, device=DEV)
    try:
        rr = instrument_callable(
            lambda: K.tiny_add[(133,)](x, n, BLOCK=1024), RegionConfig(granularity="cta")
        )
        tl = from_region_result(rr, num_sms=NUM_SMS)
        fs = analyze_timeline(tl)
        RESULTS.append(
            {
                "name": "instrument_callable_adapter",
                "analysis": "adapter",
                "regions": tl.regions(),
                "ctas": int(len(np.unique(tl.cta))),
                "clock_source": rr.clock_source,
                "findings": {f.name: round(float(f.value), 4) for f in fs},
            }
        )
        log("  adapter:", RESULTS[-1])
    except Exception as e:  # noqa: BLE001
        RESULTS.append({"name": "instrument_callable_adapter", "analysis": "adapter", "error": repr(e)[:500]})
        log("  adapter failed:", repr(e)[:500])


def write_md(path: str, meta: dict):
    lines = [
        "# Intra-kernel analyses on purpose-built kernels",
        "",
        f"Device: {meta['device']} ({meta['num_sms']} SMs), torch {meta['torch']}, triton {meta['triton']}, "
        f"{meta['date']}. One instrumented launch per case (Proton, warp granularity); times are "
        "uninstrumented CUDA-event medians.",
        "",
        "| case | analysis | metric | value | expected flag | flagged | ok |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in RESULTS:
        if "value" not in r:
            continue
        lines.append(
            f"| {r['name']} | {r['analysis']} | {r['metric']} | {r['value']:.4g} | {r['expected']} | "
            f"{r['flagged']} | {'yes' if r['ok'] else '**NO**'} |"
        )
    lines += ["", "Explanations:", ""]
    for r in RESULTS:
        if "explanation" in r:
            lines.append(f"- {r['name']}: {r['explanation']}")
        elif "error" in r or "findings" in r:
            lines.append(f"- {r['name']}: {json.dumps({k: v for k, v in r.items() if k != 'name'})}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    global OUT, NUM_SMS
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(HERE), "results", "analyses"))
    ap.add_argument("--quick", action="store_true", help="smaller problem sizes")
    ap.add_argument("--only", default="", help="comma-separated case groups")
    args = ap.parse_args()
    OUT = args.out
    os.makedirs(OUT, exist_ok=True)
    props = torch.cuda.get_device_properties(0)
    NUM_SMS = props.multi_processor_count
    meta = {
        "device": props.name,
        "num_sms": NUM_SMS,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    log(meta)
    base = 4000 if args.quick else 20000
    groups = {
        "waves": lambda wd: case_waves(wd),
        "imbalance": lambda wd: case_imbalance(wd, base),
        "prologue": lambda wd: case_prologue(wd, base),
        "overlap": lambda wd: case_overlap(
            wd, "", 8, 4, 2048 if args.quick else 4096, {1: True, 2: None, 3: False}
        ),
        # a second size, added with its expectations before it was first run (the rule moved
        # from the bubble to exposed memory after the first H100 run: this checks it afresh)
        "overlap_b": lambda wd: case_overlap(wd, "_b", 4, 4, 8192, {1: True, 3: False}),
        "launch_gaps": lambda wd: case_launch_gaps(),
        "adapter": lambda wd: case_instrument_callable(wd),
    }
    only = [g for g in args.only.split(",") if g] or list(groups)
    with tempfile.TemporaryDirectory(prefix="kperf_analyses_") as wd:
        for g in only:
            t = time.time()
            log(f"== {g}")
            try:
                groups[g](wd)
            except Exception as e:  # noqa: BLE001 - keep going, report the failure
                traceback.print_exc()
                RESULTS.append({"name": g, "analysis": g, "error": repr(e)[:800]})
            log(f"   {time.time() - t:.1f} s")
            save(meta)  # after every group: a run cut short still leaves its results
    save(meta)
    log(f"{meta['passed']}/{meta['cases']} cases as expected")


def save(meta: dict) -> None:
    meta["passed"] = sum(1 for r in RESULTS if r.get("ok"))
    meta["cases"] = sum(1 for r in RESULTS if r.get("ok") is not None)
    with open(os.path.join(OUT, "summary.json"), "w") as f:
        json.dump({"meta": meta, "cases": RESULTS}, f, indent=1, default=str)
    with open(os.path.join(OUT, "traces.json"), "w") as f:
        json.dump(TRACES, f, separators=(",", ":"))
    write_md(os.path.join(OUT, "summary.md"), meta)


OUT = ""
NUM_SMS = 132

if __name__ == "__main__":
    main()
