"""Evidence for the optimization agent (issue 17): offline search and the reward-hack checks.

    PYTHONPATH=$PWD python benchmarks/agent_eval.py --out benchmarks/results          # on a GPU
    PYTHONPATH=$PWD python benchmarks/agent_eval.py --out benchmarks/results --cpu    # smoke test

On a GPU: for each example kernel (vector add, softmax, layer norm) and for a planted
regression (the vector add launched with 128-element blocks and one warp), the offline config
search runs the full loop -- verify in the harness process, same-job interleaved A/B against the
original with kperf ab's timing -- within a per-kernel budget; then every candidate of the
reward-hack catalogue (``kperf_ci.agent.cheats``) is run through the same harness with timing
on, and must be rejected for its own reason. With ``--cpu``: verification only (the
interpreter; no timing, so no speedups and no roofline check).

Writes ``agent_eval.json`` and ``agent_eval.md`` (``agent_eval_cpu.*`` with --cpu); every
number and sentence in them comes from this script.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kperf_ci.agent import cheats, population  # noqa: E402
from kperf_ci.agent.configsearch import ConfigSearchProposer  # noqa: E402
from kperf_ci.agent.loop import Agent, Budget, LoopConfig  # noqa: E402
from kperf_ci.agent.prompts import PromptContext  # noqa: E402
from kperf_ci.agent.targets import get_target  # noqa: E402
from kperf_ci.agent.verify import run_harness  # noqa: E402
from kperf_ci.config import ABPolicy, Settings  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import kperf_commit  # noqa: E402

PLANT = ("BLOCK_SIZE=1024)", "BLOCK_SIZE=128, num_warps=1)")


def log(msg: str) -> None:
    print(f"[agent_eval {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def search(
    name: str,
    original: Path,
    device: str,
    budget: Budget,
    db: Path,
    seeds: list[int],
    bench_budget_s: float,
    label: str,
) -> dict[str, Any]:
    target = get_target(name)
    src = original.read_text()
    pop = population.Population(db)
    try:
        agent = Agent(
            target,
            original,
            pop,
            ConfigSearchProposer(target, src),
            PromptContext(name, target.launcher),
            LoopConfig(
                device,
                seeds,
                timeout_s=240.0,
                bench_budget_s=bench_budget_s,
                ab=ABPolicy.from_settings(Settings()),
            ),
            budget,
            progress=lambda s: log(f"{label}: {s}"),
        )
        res = agent.run(f"agent_eval {label}")
        rows = pop.variants(res.session_id)
    finally:
        pop.close()
    best = res.best
    return {
        "label": label,
        "kernel": name,
        "stop_reason": res.stop_reason,
        "rounds": res.rounds,
        "gpu_seconds": res.gpu_seconds,
        "wall_s": res.wall_s,
        "start_knobs": rows[0].knobs,
        "best": None
        if best is None
        else {
            "knobs": best.knobs,
            "hypothesis": best.hypothesis,
            "ratio": best.ratio,
            "ci_low": best.ci_low,
            "ci_high": best.ci_high,
            "base_ms": best.timings.get("base_ms"),
            "head_ms": best.timings.get("head_ms"),
            "pairs": best.timings.get("pairs"),
            "checks": best.checks,
        },
        "variants": [
            {
                "round": r.round,
                "hypothesis": r.hypothesis,
                "verdict": r.verdict,
                "hack": r.hack,
                "reason": r.reason,
                "ratio": r.ratio,
                "ci_low": r.ci_low,
                "ci_high": r.ci_high,
            }
            for r in rows[1:]
        ],
    }


def run_cheats(device: str, seeds: list[int], orig: Path) -> list[dict[str, Any]]:
    src = orig.read_text()
    out = []
    items = [("good", "", cheats.good(src), False), ("wrong", "wrong_result", cheats.wrong(src), False)]
    items += [(c.name, c.expected, c.source, c.gpu_only) for c in cheats.cheats(src)]
    for name, expected, source, gpu_only in items:
        if gpu_only and device != "cuda":
            continue
        t0 = time.monotonic()
        v = run_harness(
            "vector_add",
            orig,
            source,
            device=device,
            seeds=seeds,
            timeout_s=240.0,
            bench=device == "cuda",
            bench_budget_s=1.0,
            ab=ABPolicy.from_settings(Settings()),  # the shipped defaults' policy
        )
        ok = v.ok if name == "good" else (not v.ok and v.hack == expected)
        out.append(
            {
                "name": name,
                "expected": expected or "accepted",
                "got": v.hack or "accepted",
                "reason": v.reason,
                "as_expected": ok,
                "seconds": time.monotonic() - t0,
                "bench_ratio": (v.bench or {}).get("ratio"),
            }
        )
        log(f"cheat {name}: {'OK' if ok else 'UNEXPECTED'} ({v.hack or 'accepted'}: {v.reason[:120]})")
    return out


def fmt(x: Any, spec: str = ".4f") -> str:
    return "n/a" if x is None else format(x, spec)


def render(doc: dict[str, Any]) -> str:
    dev = doc["device"]
    lines = [
        f"# Optimization agent: evidence ({dev})",
        "",
        f"Written by `benchmarks/agent_eval.py{' --cpu' if doc['cpu'] else ''}` on {doc['device_name']} "
        f"at {doc['finished']} ({doc['wall_s']:.0f} s), kperf-ci {doc.get('kperf_commit', '?')}.",
        "",
    ]
    if not doc["cpu"]:
        found = [s for s in doc["searches"] if s["best"] is not None]
        examples = [s for s in found if not s["label"].startswith("planted")]
        planted = [s for s in found if s["label"].startswith("planted")]
        n_examples = len([s for s in doc["searches"] if not s["label"].startswith("planted")])
        met = len(examples) >= 2 or bool(planted)
        reverted = "reverted" if planted else "not reverted"
        lines += [
            f"Offline config search: a verified variant faster with 99% confidence (same-job A/B, the "
            f"change above 0.5%) for {len(examples)} of {n_examples} example kernels; planted regression "
            f"{reverted}. Goal (at least "
            f"two example kernels, or a planted regression reverted): {'met' if met else 'missed'}.",
            "",
            "| case | start | best found | time ratio (99% CI) | original / best ms | rounds | GPU s "
            "| stopped |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for s in doc["searches"]:
            b = s["best"]
            lines.append(
                f"| {s['label']} | {s['start_knobs'] or 'as written'} | {b['knobs'] if b else 'none'} | "
                + (
                    f"{fmt(b['ratio'])} ({fmt(b['ci_low'])} .. {fmt(b['ci_high'])}) | {fmt(b['base_ms'])} / "
                    f"{fmt(b['head_ms'])}"
                    if b
                    else "- | -"
                )
                + f" | {s['rounds']} | {s['gpu_seconds']:.0f} | {s['stop_reason']} |"
            )
        lines += [
            "",
            "Every variant tried:",
            "",
            "| case | round | hypothesis | verdict | ratio (99% CI) | reason |",
            "|---|---|---|---|---|---|",
        ]
        for s in doc["searches"]:
            for v in s["variants"]:
                ci = (
                    f"{fmt(v['ratio'])} ({fmt(v['ci_low'])} .. {fmt(v['ci_high'])})"
                    if v["ratio"] is not None
                    else "-"
                )
                why = (v["hack"] + ": " + v["reason"])[:140].replace("|", "/") if v["reason"] else ""
                hyp = v["hypothesis"].replace("|", "/")
                lines.append(f"| {s['label']} | {v['round']} | {hyp} | {v['verdict']} | {ci} | {why} |")
    else:
        s = doc["searches"][0] if doc["searches"] else None
        if s:
            lines += [
                f"Loop smoke test ({s['label']}): {s['rounds']} rounds, verdicts "
                f"{sorted({v['verdict'] for v in s['variants']})}, stopped: {s['stop_reason']}.",
                "",
            ]
    ok = sum(c["as_expected"] for c in doc["cheats"])
    lines += [
        "",
        f"Reward-hack candidates: {ok} of {len(doc['cheats'])} judged as expected "
        "(the good one accepted, each cheat rejected for its own reason).",
        "",
        "| candidate | expected | verdict | as expected | reason |",
        "|---|---|---|---|---|",
    ]
    for c in doc["cheats"]:
        lines.append(
            f"| {c['name']} | {c['expected']} | {c['got']} | {'yes' if c['as_expected'] else 'NO'} | "
            f"{c['reason'][:160].replace('|', '/')} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--cpu", action="store_true", help="verification only, in the interpreter")
    ap.add_argument("--minutes", type=float, default=6.0, help="wall budget (the searches get 3/4 of it)")
    args = ap.parse_args()
    t0 = time.monotonic()
    device = "cpu" if args.cpu else "cuda"
    name = "CPU (TRITON_INTERPRET=1)"
    if not args.cpu:
        import torch

        if not torch.cuda.is_available():
            print("no CUDA GPU: run with --cpu for the verification-only smoke test", file=sys.stderr)
            return 2
        name = torch.cuda.get_device_name()
    log(f"device {name}")
    seeds = [11] if not args.cpu else [5]
    searches: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="agent-eval-") as d:
        db = Path(d) / "agent.db"
        vec = ROOT / "examples/kernels/vector_add.py"
        planted = Path(d) / "vector_add.py"
        planted.write_text(vec.read_text().replace(*PLANT))
        if args.cpu:
            cases = [("vector_add", vec, "vector_add", Budget(max_rounds=2))]
        else:
            share = args.minutes * 60 * 0.75 / 4  # a quarter of three quarters each; the rest for the cheats
            b = dict(wall_s=share, gpu_seconds=share, patience=4, max_rounds=10)
            cases = [
                (
                    "vector_add",
                    planted,
                    "planted regression: vector_add BLOCK_SIZE=128 num_warps=1",
                    Budget(**b),
                ),
                ("vector_add", vec, "vector_add", Budget(**b)),
                ("softmax", ROOT / "examples/kernels/softmax.py", "softmax", Budget(**b)),
                ("layernorm", ROOT / "examples/kernels/layernorm.py", "layernorm", Budget(**b)),
            ]
        for kernel, path, label, budget in cases:
            log(f"search {label}")
            searches.append(search(kernel, path, device, budget, db, seeds, 1.5, label))
        log("reward-hack candidates")
        cheat_rows = run_cheats(device, seeds, vec)
    doc = {
        "device": device,
        "device_name": name,
        "kperf_commit": kperf_commit(),
        "cpu": args.cpu,
        "searches": searches,
        "cheats": cheat_rows,
        "wall_s": time.monotonic() - t0,
        "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = "agent_eval_cpu" if args.cpu else "agent_eval"
    (out / f"{stem}.json").write_text(json.dumps(doc, indent=1, default=str))
    (out / f"{stem}.md").write_text(render(doc))
    log(f"wrote {out / stem}.json and .md in {doc['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
