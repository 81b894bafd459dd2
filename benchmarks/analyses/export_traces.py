"""Turn device runs' output (run.py --out DIR, one DIR per process) into test data and committed
results.

    python benchmarks/analyses/export_traces.py DIR [DIR ...]

- DIR*/summary.json -> benchmarks/results/analyses/summary.{json,md}: per case the values of every
  run, their median, how many runs flagged it, and ``ok`` only when every run came out as
  expected; runs.json keeps each run's rows as written.
- DIR/traces.json (the first DIR's) -> tests/data/traces/<case>.json (kperf timeline / kernel-record JSON)
- DIR/proton_wave_133.json -> tests/data/traces/proton_wave_133.json (raw Proton format)
- tests/data/traces/manifest.json: per file, the analysis group, the finding and whether the case
  must be flagged (tests/test_analysis_real_traces.py runs them on the CPU). Files over 300 KB
  are refused.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

LIMIT = 300 * 1024
# case -> (analysis group, finding, must be flagged)
CASES = {
    "wave_133": ("waves", "wave_tail_idle_measured", True),
    "wave_132": ("waves", "wave_tail_idle_measured", False),
    "proton_wave_133": ("waves", "wave_tail_idle_measured", True),
    "imbalance_skewed": ("imbalance", "sm_finish_skew", True),
    "imbalance_equal": ("imbalance", "sm_finish_skew", False),
    "prologue_heavy": ("prologue", "prologue_fraction", True),
    "prologue_light": ("prologue", "prologue_fraction", False),
    "overlap_stages1": ("overlap", "memory_exposed_fraction", True),
    "overlap_stages3": ("overlap", "memory_exposed_fraction", False),
    "launch_chain_64_tiny": ("launch_gaps", "launch_gap_fraction", True),
    "launch_fused_1": ("launch_gaps", "launch_gap_fraction", False),
    "launch_chain_8_large": ("launch_gaps", "launch_gap_fraction", False),
}
CASES.update(
    {
        "overlap_b_stages1": ("overlap", "memory_exposed_fraction", True),
        "overlap_b_stages3": ("overlap", "memory_exposed_fraction", False),
        "launch_chain_64_tiny_profiler": ("launch_gaps", "launch_gap_fraction", True),
        "launch_fused_1_profiler": ("launch_gaps", "launch_gap_fraction", False),
        "launch_chain_8_large_profiler": ("launch_gaps", "launch_gap_fraction", False),
    }
)
# cases whose result on the device differed from the expectation: kept, and the test says so
KNOWN: dict[str, str] = {}


def aggregate(runs: list[dict]) -> dict:
    """One row per case over all runs (cases in first-seen order)."""
    meta = dict(runs[0]["meta"])
    meta["runs"] = len(runs)
    meta["dates"] = [r["meta"]["date"] for r in runs]
    rows: dict[str, list[dict]] = {}
    for r in runs:
        for c in r["cases"]:
            rows.setdefault(c["name"], []).append(c)
    out = []
    for rs in rows.values():
        if any("error" in x for x in rs):
            out.append({**rs[0], "errors": [x.get("error") for x in rs]})
            continue
        if any("value" not in x for x in rs):  # a check with no flag (the adapter): every run's row
            out.append({**rs[0], "per_run": rs})
            continue
        vals = [x["value"] for x in rs]
        flags = [bool(x["flagged"]) for x in rs]
        exp = rs[0]["expected"]
        row = {k: v for k, v in rs[0].items() if k not in ("value", "flagged", "ok", "explanation")}
        row.update(
            value=float(statistics.median(vals)),
            values=vals,
            flagged=sum(flags) * 2 > len(flags),
            flagged_runs=sum(flags),
            runs=len(rs),
            ok=None if exp is None else all(f == exp for f in flags),
            explanation=rs[0]["explanation"],
        )
        out.append(row)
    meta["passed"] = sum(1 for r in out if r.get("ok"))
    meta["cases"] = sum(1 for r in out if r.get("ok") is not None)
    return {"meta": meta, "cases": out}


def write_md(agg: dict, path: str) -> None:
    m = agg["meta"]
    lines = [
        "# Intra-kernel analyses on purpose-built kernels",
        "",
        f"Device: {m['device']} ({m['num_sms']} SMs), torch {m['torch']}, triton {m['triton']}; "
        f"{m['runs']} runs, each a fresh process ({', '.join(m['dates'])}). One instrumented launch per "
        "case and run (Proton, warp granularity); times are uninstrumented CUDA-event medians. "
        f"**{m['passed']} of {m['cases']} cases came out as expected in every run.**",
        "",
        "| case | analysis | metric | median | min - max | threshold | expected flag | flagged (runs) | ok |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in agg["cases"]:
        if "values" not in r:
            lines.append(
                f"| {r['name']} | {r.get('analysis', '')} | error: {r.get('errors')} | | | | | | **NO** |"
            )
            continue
        ok = {None: "(no expectation)", True: "yes", False: "**NO**"}[r["ok"]]
        exp = "-" if r["expected"] is None else r["expected"]
        lines.append(
            f"| {r['name']} | {r['analysis']} | {r['metric']} | {r['value']:.4g} | "
            f"{min(r['values']):.4g} - {max(r['values']):.4g} | {r.get('threshold')} | {exp} | "
            f"{r['flagged_runs']}/{r['runs']} | {ok} |"
        )
    lines += ["", "Explanations (first run):", ""]
    lines += [f"- {r['name']}: {r['explanation']}" for r in agg["cases"] if "explanation" in r]
    for r in agg["cases"]:
        if "per_run" in r:
            lines.append(f"- {r['name']} (first run): " + json.dumps(r["per_run"][0]))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main(srcs: list[str]) -> None:
    res_dir = os.path.join(ROOT, "benchmarks", "results", "analyses")
    data_dir = os.path.join(ROOT, "tests", "data", "traces")
    os.makedirs(res_dir, exist_ok=True)
    os.makedirs(data_dir, exist_ok=True)
    runs = []
    for d in srcs:
        with open(os.path.join(d, "summary.json")) as f:
            runs.append(json.load(f))
    agg = aggregate(runs)
    with open(os.path.join(res_dir, "summary.json"), "w") as f:
        json.dump(agg, f, indent=1)
    with open(os.path.join(res_dir, "runs.json"), "w") as f:
        json.dump(runs, f, indent=1)
    write_md(agg, os.path.join(res_dir, "summary.md"))
    print(f"{agg['meta']['passed']}/{agg['meta']['cases']} cases as expected in all {len(runs)} runs")
    src = srcs[0]
    with open(os.path.join(src, "traces.json")) as f:
        traces = json.load(f)
    files = {}
    for case, obj in traces.items():
        path = os.path.join(data_dir, f"{case}.json")
        text = json.dumps(obj, separators=(",", ":"))
        if len(text) > LIMIT:
            print(f"skip {case}: {len(text)} bytes > {LIMIT}")
            continue
        with open(path, "w") as f:
            f.write(text)
        files[case] = f"{case}.json"
    raw = os.path.join(src, "proton_wave_133.json")
    if os.path.exists(raw) and os.path.getsize(raw) <= LIMIT:
        shutil.copy(raw, os.path.join(data_dir, "proton_wave_133.json"))
        files["proton_wave_133"] = "proton_wave_133.json"
    manifest = [
        {
            "case": case,
            "file": fname,
            "analysis": CASES[case][0],
            "finding": CASES[case][1],
            "expected": CASES[case][2],
            "known_failure": KNOWN.get(case),
        }
        for case, fname in sorted(files.items())
        if case in CASES
    ]
    with open(os.path.join(data_dir, "manifest.json"), "w") as fh:
        json.dump(manifest, fh, indent=1)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: export_traces.py DIR [DIR ...] (the --out folders of run.py)")
    main(sys.argv[1:])
