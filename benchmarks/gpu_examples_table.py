"""Summarise a GPU-mode run of the examples as a markdown table.

pytest examples --kperf --kperf-mode gpu --kperf-db gpu.db    # on the GPU machine
python benchmarks/gpu_examples_table.py gpu.db > benchmarks/results/gpu_examples.md
"""

from __future__ import annotations

import sys

from kperf_ci import store


def main(path: str) -> None:
    run = store.load_run(path)
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


if __name__ == "__main__":
    main(sys.argv[1])
