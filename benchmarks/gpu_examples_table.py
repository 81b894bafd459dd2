"""Summarise a GPU-mode run of the examples as markdown: times, flagged analysis findings, and
the launch gaps of multi-kernel tests next to what the timing loop implies.

pytest examples --kperf --kperf-mode gpu --kperf-db gpu.db    # on the GPU machine
python benchmarks/gpu_examples_table.py gpu.db > benchmarks/results/gpu_examples.md
"""

from __future__ import annotations

import sys

from kperf_ci import store


def main(path: str) -> None:
    run = store.load_run(path, artifacts=True)
    fp = run.info.fingerprint
    print("# Examples in GPU mode\n")
    print(
        f"Run `{run.info.run_id}` on {fp.gpu} ({fp.sm_count} SMs), driver {fp.driver}, CUDA {fp.cuda}, "
        f"torch {fp.torch}, triton {fp.triton}, {run.info.started_at}. Produced by "
        "`pytest examples --kperf --kperf-mode gpu`; the database is "
        "`tests/data/gpu/h100_examples.db` (`kperf show --db ...` prints every metric).\n"
    )
    print(
        "| kernel | test | median ms (95% CI) | samples | cv | regs | spills "
        "| regions (fraction of `kernel`) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in sorted(run.results, key=lambda r: r.key.test):
        m = {x.name: x.value for x in r.metrics}
        if "time.median" not in m:
            continue
        regions = ", ".join(
            f"{name.split('.')[1]} {value:.1%}"
            for name, value in sorted(m.items())
            if name.startswith("region.") and name.endswith(".fraction") and ".kernel." not in name
        )
        test = r.key.test.split("::")[-1]
        nan = float("nan")
        ci = f"{m['time.median']:.4f} ({m['time.ci_low']:.4f}-{m['time.ci_high']:.4f})"
        print(
            f"| {r.key.kernel} | `{test}` | {ci} | {len(r.samples)} | {m.get('time.cv', nan):.3f} "
            f"| {m.get('registers', nan):.0f} | {m.get('spills', nan):.0f} | {regions} |"
        )

    findings_section(run)
    launch_gaps_section(run)


def findings_section(run) -> None:  # noqa: ANN001
    from kperf_ci.analysis.findings import ARTIFACT, findings_from_json

    print("\n## Flagged analysis findings\n")
    print("What a kernel author sees in the terminal summary, the report and the PR comment.\n")
    print("| kernel | test | finding | value | explanation |")
    print("|---|---|---|---|---|")
    n = 0
    for r in sorted(run.results, key=lambda r: (r.key.test, r.key.kernel)):
        if ARTIFACT not in r.artifacts:
            continue
        for f in findings_from_json(r.artifacts[ARTIFACT]):
            if f.flagged:
                n += 1
                test = r.key.test.split("::")[-1]
                print(f"| {r.key.kernel} | `{test}` | {f.name} | {f.value:.3g} | {f.explanation} |")
    print(f"\n{n} flagged findings.")


def launch_gaps_section(run) -> None:  # noqa: ANN001
    import json

    from kperf_ci.measure.measure import GAP_CALLS, split_calls
    from kperf_ci.traces.kernel_records import records_from_json

    rows = [r for r in run.results if "kernel_records" in r.artifacts]
    if not rows:
        return
    print("\n## Launch gaps of tests that launch several kernels\n")
    print(
        "Profiled: torch.profiler kernel records of 5 calls issued back to back (a 6th, first, "
        "dropped). Implied by timing: 1 - (GPU busy time per call) / (timed median per call), the "
        "timing loop measuring with CUDA events around each call.\n"
    )
    print(
        "| kernel | test | kernels per call | GPU busy per call (us) | timed median (us) "
        "| idle, profiled | idle, implied by timing |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: r.key.test):
        recs = records_from_json(r.artifacts["kernel_records"])
        calls = GAP_CALLS - 1  # the plugin keeps the calls after the first
        per_call = len(split_calls(recs, calls)[0])
        busy_us = sum(x.duration_ns for x in recs) / 1e3 / calls
        m = {x.name: x.value for x in r.metrics}
        timed_us = m["time.median"] * 1e3
        method = json.loads(r.artifacts.get("timing", "{}")).get("method", "?")
        test = r.key.test.split("::")[-1]
        # graph replay times the GPU alone: it implies nothing about the host's gaps
        implied = f"{1 - busy_us / timed_us:.1%}" if method == "events" else "- (graph replay)"
        print(
            f"| {r.key.kernel} | `{test}` | {per_call} | {busy_us:.1f} | {timed_us:.1f} ({method}) | "
            f"{m['analysis.launch_gap_fraction']:.1%} | {implied} |"
        )


if __name__ == "__main__":
    main(sys.argv[1])
