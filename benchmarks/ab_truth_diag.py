"""Why kperf ab and the CUPTI truth disagree on Liger's launch_option case (issue 32 diagnosis).

One launch shape of the case, base and head recorded as realrepo_ab_eval's truth records them,
then the head/base ratio read four ways on the same two closures: the truth unpaced (as
realrepo_ab_eval's truth), the truth with the GPU idled between calls as kperf paces it, and
kperf's own adaptive_ab (CUPTI) with its default pacing and with pacing off (duty 1.0).

    python benchmarks/ab_truth_diag.py --liger-src .corpus/liger --out $OUT   # on the GPU
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import realrepo_ab_eval as rr  # noqa: E402
from _cupti_truth import cupti_samples  # noqa: E402


def paced(fns, n, idle_s):
    import torch

    out = {k: [] for k in fns}
    for _ in range(n):
        got = cupti_samples(fns, n=2, warmup=1)
        for k in fns:
            out[k] += got[k]
        torch.cuda.synchronize()
        time.sleep(idle_s)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--liger-src", default=str(ROOT / ".corpus" / "liger"))
    ap.add_argument("--out", default=".")
    ap.add_argument("--shapes", default="4096x4096 bf16,4096x4096 fp32")
    a = ap.parse_args()
    import torch

    from kperf_ci.capture.timing import engine
    from kperf_ci.capture.timing.interleaved import adaptive_ab
    from kperf_ci.config import ABPolicy, Settings
    from kperf_ci.judge.ab import stop_rule

    rule = stop_rule(ABPolicy.from_settings(Settings(ab_threshold=0.005)))

    case = rr.BY_NAME["launch_option"]
    work = Path(tempfile.mkdtemp(prefix="diag-"))
    liger, _ = rr.liger_checkout(a.liger_src, work)
    repo, _ = rr.case_repo(case, liger, work / "case")
    rows = []
    with rr.base_worktree(repo) as (_, base_tree):
        sys.path[:0] = [str(repo / "src"), str(repo)]
        mods = {s: rr._load(t / case.module, f"diag_{s}") for s, t in (("base", base_tree), ("head", repo))}
        for sh in case.shapes:
            if sh.label not in a.shapes.split(","):
                continue
            inputs = rr._inputs(case.truth, sh.args)
            fns = {s: rr._recorded_launch(case.truth, m, case.kernel, inputs) for s, m in mods.items()}
            row = {"shape": sh.label}
            t = cupti_samples(fns, n=60)
            row["truth_unpaced"] = statistics.median(t["head"]) / statistics.median(t["base"]) - 1
            row["base_us_unpaced"] = statistics.median(t["base"])
            p = paced(fns, 30, 0.002)
            row["truth_paced"] = statistics.median(p["head"]) / statistics.median(p["base"]) - 1
            row["base_us_paced"] = statistics.median(p["base"])
            for label, cfg in (
                ("kperf_default", engine.TimingConfig()),
                ("kperf_duty1", dataclasses.replace(engine.TimingConfig(), duty_cycle=1.0)),
            ):
                r = adaptive_ab(fns["base"], fns["head"], stop_rule=rule, cfg=cfg)
                row[label] = r.ratio - 1
                row[label + "_method"] = r.method
                row[label + "_base_us"] = statistics.median(r.base_ms) * 1000
            rows.append(row)
            print(json.dumps(row), flush=True)
            torch.cuda.empty_cache()
    Path(a.out, "ab_truth_diag.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
