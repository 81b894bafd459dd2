"""What forking the first compile worker saves one static session (kperf_ci/capture/static/spare.py).

    .venv/bin/python benchmarks/spare_worker_cost.py [--runs N]

Runs ``python -m pytest -q -p no:xdist examples/test_softmax.py --kperf`` (static mode, one compile
worker) in turns: forked (the default) and spawned (``KPERF_WORKER_NO_FORK=1``), ``--runs`` times
each after one unmeasured run of each (a warm Triton cache, private to this benchmark, so both
measure the same compile). Each run's CPU is the operating system's account of the finished
process tree (``getrusage`` of the children), wall from a monotonic clock. Taken in pairs, the
ratio is read per pair, so a drift of the machine's speed during the call moves both. Writes
``benchmarks/results/spare_worker_cost.{json,md}``. Run it alone on the machine.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results"
ARMS = {"forked": {}, "spawned": {"KPERF_WORKER_NO_FORK": "1"}}


def one_run(env: dict[str, str], db: Path) -> dict[str, float]:
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider"]
    cmd += ["examples/test_softmax.py", "--kperf", "--kperf-db", str(db)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"spare_worker_cost: the session failed (exit {r.returncode}):\n{r.stdout[-2000:]}")
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return {"cpu_s": round(cpu, 3), "wall_s": round(wall, 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    runs: dict[str, list[dict[str, float]]] = {arm: [] for arm in ARMS}
    with tempfile.TemporaryDirectory() as tmp:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("KPERF_", "PYTEST_"))}
        base.update(TRITON_CACHE_DIR=str(Path(tmp) / "triton"), PYTHONPATH=str(ROOT), KPERF_PROGRESS="0")
        base.pop("PYTHONDONTWRITEBYTECODE", None)
        for i in range(args.runs + 1):
            for arm, extra in ARMS.items():
                r = one_run({**base, **extra}, Path(tmp) / f"{arm}-{i}.db")
                if i:  # the first of each: unmeasured (cold cache, first imports)
                    runs[arm].append(r)
    med = {
        arm: {k: statistics.median(r[k] for r in rs) for k in ("cpu_s", "wall_s")} for arm, rs in runs.items()
    }
    ratios = [f["cpu_s"] / s["cpu_s"] for f, s in zip(runs["forked"], runs["spawned"], strict=True)]
    doc = {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
        "cores": os.cpu_count(),
        "runs": runs,
        "median": med,
        "cpu_ratio_median": round(statistics.median(ratios), 3),
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "spare_worker_cost.json").write_text(json.dumps(doc, indent=1) + "\n")
    saved = med["spawned"]["cpu_s"] - med["forked"]["cpu_s"]
    md = [
        "# One static session, its first compile worker forked or spawned (benchmarks/spare_worker_cost.py)",
        "",
        f"{doc['date']}, kperf-ci {doc['commit']}, {doc['cores']} cores. "
        "`python -m pytest -q -p no:xdist examples/test_softmax.py --kperf` (static mode, one compile "
        f"worker, a warm Triton cache), {args.runs} runs of each in turns after one unmeasured run of each.",
        "",
        "| worker | CPU s (median) | wall s (median) |",
        "|---|---:|---:|",
        *[f"| {arm} | {m['cpu_s']:.2f} | {m['wall_s']:.2f} |" for arm, m in med.items()],
        "",
        f"Forked against spawned, pair by pair: CPU ratio {doc['cpu_ratio_median']:.3f} (median); "
        f"{saved:.2f} CPU-s less per session by the medians.",
    ]
    (OUT / "spare_worker_cost.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
