"""Why kperf ab and the corpus truth disagree on fla's l2norm config cut (issue 34, done-when 1).

On the H100 (corpus_ab_eval at ca33897) the truth read the config-cut launch
``l2norm_fwd_kernel`` x=fp32[12288x128] as +6.30% best against best (base BT=32/4 warps 4.32 us,
head BT=16/2 warps 4.59 us), while ``kperf ab`` read +0.57% with the same two configs as each
side's best. Both kernels are the same source (the plant only cuts the config list), so the
question is what one config pair measures, not the pull request. This script times the pair in
one process, three ways, on the same GPU:

* the CUPTI truth loop (benchmarks/_cupti_truth.py, no kperf code), at ``--placements`` buffer
  placements (a spacer of k x 3 MiB + 4 KiB allocated first, so the buffers land elsewhere),
  fresh seeded inputs each;
* kperf's own A/B engine (``adaptive_ab``, default settings) on the same callables and buffers
  at every placement, so its effect can be set beside the truth's at that placement;
* both at the placement of the first allocation (no spacer), which is what a test's copies get.

Writes ``config_pair_diag.{json,md}`` to ``--out``; every number and sentence of the md comes
from here.

    python benchmarks/config_pair_diag.py --fla .corpus/flash-linear-attention --out $OUT
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from _cupti_truth import cupti_samples  # noqa: E402 - the truth's CUPTI loop, no kperf code

# (BT, num_warps): the H100 run's two bests, then the head's pick and the base's pick
CONFIGS = [(32, 4), (16, 2), (8, 2), (32, 8)]
T, D = 12288, 128


def _calls(kernel: Any, x: Any, y: Any, rstd: Any) -> dict[str, Any]:
    import triton

    out = {}
    for bt, nw in CONFIGS:

        def call(bt: int = bt, nw: int = nw) -> None:
            kernel.fn[(triton.cdiv(T, bt),)](x, y, rstd, 1e-6, T, D=D, BD=D, NB=1, BT=bt, num_warps=nw)

        out[f"BT={bt},num_warps={nw}"] = call
    return out


def measure(fla: Path, placements: int, calls: int) -> dict[str, Any]:
    import torch

    sys.path.insert(0, str(fla))
    from fla.modules.l2norm import l2norm_fwd_kernel

    from kperf_ci.capture.timing.interleaved import adaptive_ab
    from kperf_ci.config import ABPolicy, Settings
    from kperf_ci.judge.ab import stop_rule

    rows = []
    for p in range(placements):
        spacer = torch.empty(p * (3 << 20) + (4096 if p else 0), dtype=torch.uint8, device="cuda")
        g = torch.Generator(device="cuda").manual_seed(p)
        x = torch.randn((T, D), device="cuda", generator=g)
        y, rstd = torch.empty_like(x), torch.empty((T,), device="cuda")
        fns = _calls(l2norm_fwd_kernel, x, y, rstd)
        s = cupti_samples(fns, n=calls)
        med = {k: statistics.median(v) for k, v in s.items()}
        names = list(fns)
        # kperf ab's defaults: the policy a run without settings builds
        ab = adaptive_ab(
            fns[names[0]], fns[names[1]], stop_rule=stop_rule(ABPolicy.from_settings(Settings()))
        )
        rows.append(
            {
                "placement": p,
                "x_addr_mod_1MiB": x.data_ptr() % (1 << 20),
                "truth_median_us": med,
                "truth_effect_pct": 100 * (med[names[1]] / med[names[0]] - 1),
                "kperf_effect_pct": 100 * (ab.ratio - 1),
                "kperf_ci_pct": [100 * (ab.ci_low - 1), 100 * (ab.ci_high - 1)],
                "kperf_verdict": ab.verdict,
                "kperf_median_us": {
                    names[0]: 1e3 * statistics.median(ab.base_ms),
                    names[1]: 1e3 * statistics.median(ab.head_ms),
                },
                "kperf_pairs": ab.n_pairs,
                "kperf_method": ab.method,
            }
        )
        del spacer
    return {"rows": rows, "configs": list(_calls(l2norm_fwd_kernel, None, None, None))}


def render(doc: dict[str, Any]) -> str:
    names = doc["configs"]
    lines = [
        "# One config pair of fla's l2norm: CUPTI truth and kperf's A/B at several placements",
        "",
        f"Device: {doc['device']}; torch {doc['torch']}, triton {doc['triton']}; kperf-ci {doc['commit']}. "
        f"l2norm_fwd_kernel x=fp32[{T}x{D}], {doc['calls']} CUPTI calls a config per placement, L2 flushed "
        f"(read) before each; kperf's adaptive_ab on {names[0]} (base) vs {names[1]} (head) at each "
        f"placement. Wall {doc['wall_s']:.0f} s. Written by benchmarks/config_pair_diag.py.",
        "",
        "| placement | x addr mod 1 MiB | "
        + " | ".join(f"{n} us" for n in names)
        + " | truth effect | kperf effect | kperf CI | kperf verdict |",
        "|---" * (len(names) + 6) + "|",
    ]
    for r in doc["rows"]:
        med = " | ".join(f"{r['truth_median_us'][n]:.3f}" for n in names)
        lo, hi = r["kperf_ci_pct"]
        lines.append(
            f"| {r['placement']} | {r['x_addr_mod_1MiB']} | {med} | {r['truth_effect_pct']:+.2f}% | "
            f"{r['kperf_effect_pct']:+.2f}% | [{lo:+.2f}%, {hi:+.2f}%] | {r['kperf_verdict']} |"
        )
    te = [r["truth_effect_pct"] for r in doc["rows"]]
    ke = [r["kperf_effect_pct"] for r in doc["rows"]]
    gap = max(abs(a - b) for a, b in zip(ke, te, strict=True))
    lines += [
        "",
        f"Truth effect over placements: {min(te):+.2f}% .. {max(te):+.2f}% "
        f"(median {statistics.median(te):+.2f}%); "
        f"kperf: {min(ke):+.2f}% .. {max(ke):+.2f}% (median {statistics.median(ke):+.2f}%); "
        f"largest |kperf - truth| at one placement: {gap:.2f} points.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fla", type=Path, default=ROOT / ".corpus" / "flash-linear-attention")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--placements", type=int, default=6)
    ap.add_argument("--calls", type=int, default=200)
    a = ap.parse_args()
    import torch
    import triton

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from _common import kperf_commit

    t0 = time.perf_counter()
    doc = measure(a.fla.resolve(), a.placements, a.calls)
    doc.update(
        device=torch.cuda.get_device_name(),
        torch=torch.__version__,
        triton=triton.__version__,
        commit=kperf_commit(),
        calls=a.calls,
        wall_s=time.perf_counter() - t0,
    )
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "config_pair_diag.json").write_text(json.dumps(doc, indent=1) + "\n")
    (a.out / "config_pair_diag.md").write_text(render(doc))
    print(render(doc))


if __name__ == "__main__":
    main()
