"""How much where the buffers sit moves a kernel's A/B effect, against how much time alone moves it.

Issue 32 asks kperf ab's effects to match a CUPTI truth within 0.5 points. The truth of
realrepo_ab_eval moved by up to 6 points between three buffer placements of one launch. This
study separates the two sources on the H100, with no kperf code in the loop:

* Liger-Kernel's geglu forward, base and head of the ``launch_option`` case (``num_warps`` cut
  to a quarter), loaded from the pinned Liger export (``--liger``), launched on shared buffers;
* ``--placements`` placements: each a fresh clone of seeded inputs after a spacer of k x 3 MiB,
  so the buffers land at different device addresses;
* at each placement ``--repeats`` measurements, each ``--calls`` CUPTI durations a side,
  alternated call by call (benchmarks/_cupti_truth.py), the L2 flushed before each call, by
  writing the flush buffer ("zero", as kperf and do_bench do) and by reading it ("read");
* the effect of a measurement: median head / median base - 1, and mean head / mean base - 1.

Writes ``placement_study.{json,md}`` to ``--out``: per shape and flush, the effect at every
placement and repeat, the spread between repeats at one placement (time), the spread between
placements, and the spread of a P-placement average implied by them.

    python benchmarks/placement_study.py --liger .corpus/liger --out $OUT
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from _cupti_truth import cupti_samples  # noqa: E402 - the truth's CUPTI loop, no kperf code
from realrepo_ab_eval import (  # noqa: E402 - the same case text and launch recorder as the eval
    _GEGLU_FWD_LAUNCH,
    _GEGLU_FWD_SLOW,
    GEGLU,
    _inputs,
    _load,
    shared_launches,
)

SHAPES = (
    ("369x4231 bf16", {"rows": 369, "cols": 4231, "dtype": "bfloat16"}),
    ("4096x4096 bf16", {"rows": 4096, "cols": 4096, "dtype": "bfloat16"}),
    ("369x4231 fp32", {"rows": 369, "cols": 4231, "dtype": "float32"}),
    ("63x41 bf16", {"rows": 63, "cols": 41, "dtype": "bfloat16"}),
)


def _modules(liger: Path, tmp: Path) -> dict[str, Any]:
    """geglu.py of the base (as pinned) and of the head (the launch_option plant), loaded apart."""
    src = (liger / GEGLU).read_text()
    assert src.count(_GEGLU_FWD_LAUNCH) == 1, "the launch_option case's text is not in geglu.py"
    sys.path[:0] = [str(liger / "src")]
    mods = {}
    for side, text in (("base", src), ("head", src.replace(_GEGLU_FWD_LAUNCH, _GEGLU_FWD_SLOW))):
        path = tmp / f"geglu_{side}.py"
        path.write_text(text)
        mods[side] = _load(path, f"placement_geglu_{side}")
    return mods


def _effects(us: dict[str, list[float]]) -> dict[str, float]:
    b, h = us["base"], us["head"]
    return {
        "median_pct": (statistics.median(h) / statistics.median(b) - 1) * 100,
        "mean_pct": (statistics.fmean(h) / statistics.fmean(b) - 1) * 100,
        "base_us": statistics.median(b),
    }


def _sd(xs: list[float]) -> float:
    return statistics.stdev(xs) if len(xs) > 1 else math.nan


def measure(liger: Path, placements: int, repeats: int, calls: int, flushes: list[str]) -> dict[str, Any]:
    import torch

    tmp = Path(tempfile.mkdtemp(prefix="kperf-placement-"))
    try:
        mods = _modules(liger, tmp)
        rows = []
        for label, args in SHAPES:
            seeded = _inputs("geglu", args)
            for flush in flushes:
                per_place = []
                for p in range(placements):
                    spacer = torch.empty((3 * p + 1) << 20, dtype=torch.uint8, device="cuda")
                    mine = {k: v.clone() for k, v in seeded.items()}
                    fns = shared_launches("geglu", mods, "_geglu_tanh_forward_kernel", mine)
                    reps = [_effects(cupti_samples(fns, n=calls, flush=flush)) for _ in range(repeats)]
                    per_place.append(
                        {"placement": p, "a_ptr_mod_2m": mine["a"].data_ptr() % (2 << 20), "repeats": reps}
                    )
                    del spacer, mine, fns
                rows.append({"shape": label, "flush": flush, "placements": per_place, **summary(per_place)})
                print(f"  {label} {flush}: {json.dumps(summary(per_place))}", flush=True)
            del seeded
            torch.cuda.empty_cache()
        return {"rows": rows}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def summary(per_place: list[dict[str, Any]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for est in ("median_pct", "mean_pct"):
        means = [statistics.fmean(r[est] for r in p["repeats"]) for p in per_place]
        # time alone: the spread of repeats around their placement's mean
        resid = [r[est] - m for p, m in zip(per_place, means, strict=True) for r in p["repeats"]]
        k = len(per_place[0]["repeats"])
        out[f"{est}_all_placements_mean"] = statistics.fmean(means)
        out[f"{est}_placement_sd"] = _sd(means)
        out[f"{est}_placement_range"] = max(means) - min(means)
        out[f"{est}_repeat_sd"] = (
            math.sqrt(sum(x * x for x in resid) / max(1, len(resid) - len(means))) if k > 1 else math.nan
        )
    return out


def render(doc: dict[str, Any]) -> str:
    lines = [
        "# Placement study: where the buffers sit, against time alone",
        "",
        f"Device: {doc['device']}; torch {doc['torch']}, triton {doc['triton']}; commit {doc['commit']}.",
        f"Liger-Kernel geglu forward, launch_option case (num_warps cut to a quarter); "
        f"{doc['placements']} placements x {doc['repeats']} repeats x {doc['calls']} CUPTI calls a side; "
        f"wall {doc['wall_s']:.0f} s. Written by benchmarks/placement_study.py.",
        "",
        "Effect in percent (head over base). *placement sd*: the spread of the placements' mean effects; "
        "*repeat sd*: the spread of repeats at one placement (time alone).",
        "",
        "| shape | flush | base µs | effect (median) | placement sd | range | repeat sd "
        "| effect (mean) | placement sd | repeat sd |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["rows"]:
        base = statistics.median(x["base_us"] for p in r["placements"] for x in p["repeats"])
        cells = [r["shape"], r["flush"], f"{base:.2f}"]
        for est in ("median_pct", "mean_pct"):
            cells.append(f"{r[est + '_all_placements_mean']:+.2f}")
            cells.append(f"{r[est + '_placement_sd']:.2f}")
            if est == "median_pct":
                cells.append(f"{r[est + '_placement_range']:.2f}")
            cells.append(f"{r[est + '_repeat_sd']:.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--liger", default=str(ROOT / ".corpus" / "liger"), help="the pinned Liger export")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--placements", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--flushes", default="zero,read")
    ap.add_argument("--commit", default=None, help="the measured commit (the device's .git may be stale)")
    a = ap.parse_args(argv)
    import torch
    import triton
    from _common import kperf_commit

    t0 = time.monotonic()
    doc = measure(Path(a.liger), a.placements, a.repeats, a.calls, a.flushes.split(","))
    doc.update(
        device=torch.cuda.get_device_name(),
        torch=torch.__version__,
        triton=triton.__version__,
        commit=a.commit or kperf_commit(),
        placements=a.placements,
        repeats=a.repeats,
        calls=a.calls,
        wall_s=time.monotonic() - t0,
    )
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "placement_study.json").write_text(json.dumps(doc, indent=1))
    (out / "placement_study.md").write_text(render(doc))
    print(render(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
