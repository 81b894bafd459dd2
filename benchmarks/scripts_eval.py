"""Liger-Kernel's own benchmark scripts, unmodified, through `kperf run --bench` and `kperf ab --bench`.

Writes benchmarks/results/scripts_eval.{json,md} (every number and sentence of the .md comes from
this script, rendered from the json). Liger-Kernel is fetched at run time at a pinned commit and
never committed here; the GPU machine has no network, so carry an export made here:

    python benchmarks/realrepo_ab_eval.py --export .liger --liger-src <clone>    # src/ and tests
    python benchmarks/scripts_eval.py --export .liger --liger-src <clone>        # + benchmark/
    # on the GPU (parts written to --out; each step fits one call):
    python benchmarks/scripts_eval.py --liger .liger --out $OUT/r --steps scripts
    python benchmarks/scripts_eval.py --liger .liger --out $OUT/r --steps cases
    python benchmarks/scripts_eval.py --out DIR --steps render        # json + md from the parts

Steps:

* ``scripts``: for each script in ``SCRIPTS`` (Liger's defaults: its token-length sweep, all
  providers and modes), run in a fresh copy of the export (a git repository, as a user's checkout
  is) first plainly, ``python benchmark_X.py --overwrite``, then through kperf with its defaults,
  ``kperf run --bench benchmark_X.py --overwrite`` (GPU mode, reports written); both with an
  empty Triton cache. The script's own CSV (``benchmark/data/all_benchmark_data.csv``, which it
  rewrites with --overwrite) gives the p50 it reported for each call in each run; kperf's run
  database gives the calls seen, captured and listed with their reasons.
* ``cases``: planted pull requests of known effect on Liger's kernels (realrepo_ab_eval's plants),
  each in a two-commit repository: ``kperf ab --base HEAD~1 --bench benchmark/scripts/benchmark_X.py``
  with defaults; then the truth at the shapes the script launched (read from kperf's document:
  shapes only): the base and head versions of the kernel's module loaded side by side, the
  kernel's launch recorded once per side, and ``triton.testing.do_bench`` of the two launches
  alternated for ``--rounds`` rounds (ABAB.../BABA...).

Liger's ``benchmark/scripts/utils.py`` reads its own version from package metadata; the export is
not installed, so a metadata folder on PYTHONPATH names it (``liger_kernel-<version>.dist-info``).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import device_info, kperf_commit  # noqa: E402
from realrepo_ab_eval import (  # noqa: E402
    _GEGLU_FWD_LAUNCH,
    _GEGLU_FWD_SLOW,
    _SOFTMAX_BODY,
    _SOFTMAX_COMMENT,
    GEGLU,
    RMS,
    SOFTMAX,
    Plant,
    _inputs,
    _load,
    _recorded_launch,
    _traffic,
    alternated_do_bench,
    append_log,
    base_worktree,
    build_repo,
    child_result,
    git,
    run_cmd,
)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
NAME = "scripts_eval"
LIGER_COMMIT = "ead96b618e5c67bddc6a6e9bcb99bfe6b5ab661c"
LIGER_VERSION = "0.8.2"  # pyproject.toml at LIGER_COMMIT: utils.py asks importlib.metadata for it
EXPORT = ("benchmark/scripts", "benchmark/data")
SCRIPTS = ("benchmark_geglu.py", "benchmark_rms_norm.py", "benchmark_softmax.py")
S = "benchmark/scripts/"
CSV_FILE = "benchmark/data/all_benchmark_data.csv"

# (name, script, kernel, truth kind, what, expect, plants)
CASES: list[dict[str, Any]] = [
    {
        "name": "launch_option",
        "script": "benchmark_geglu.py",
        "kernel": "_geglu_tanh_forward_kernel",
        "truth": "geglu",
        "module": GEGLU,
        "what": "geglu forward launch num_warps=num_warps -> max(num_warps // 4, 1)",
        "expect": "slower",
        "plants": [Plant(GEGLU, _GEGLU_FWD_LAUNCH, _GEGLU_FWD_SLOW)],
    },
    {
        "name": "traffic_2",
        "script": "benchmark_geglu.py",
        "kernel": "_geglu_tanh_forward_kernel",
        "truth": "geglu",
        "module": GEGLU,
        "what": "geglu forward reads n_cols // 16 more elements per row (+2.1% of its global traffic)",
        "expect": "slower",
        "plants": _traffic(16),
    },
    {
        "name": "grid",
        "script": "benchmark_rms_norm.py",
        "kernel": "_rms_norm_backward_kernel",
        "truth": "rms_norm_bwd",
        "module": RMS,
        "what": "rms_norm backward on half as many programs (grid = SM count // 2)",
        "expect": "slower",
        "plants": [
            Plant(
                RMS,
                "        sm_count = torch.cuda.get_device_properties(X.device).multi_processor_count\n",
                "        sm_count = torch.cuda.get_device_properties(X.device).multi_processor_count // 2\n",
            )
        ],
    },
    {
        "name": "comment_only",
        "script": "benchmark_softmax.py",
        "kernel": "_softmax_single_block_forward_kernel",
        "truth": None,
        "module": SOFTMAX,
        "what": "a comment line added inside a softmax kernel's body",
        "expect": "identical",
        "plants": [Plant(SOFTMAX, _SOFTMAX_BODY, _SOFTMAX_COMMENT)],
    },
]
BY_NAME = {c["name"]: c for c in CASES}
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


# ---------------------------------------------------------------------------------------------
# the checkout


def export(src: str, dest: Path) -> None:
    """Add Liger's benchmark/ folders (at the pinned commit) to an export made by realrepo_ab_eval."""
    commit = git(Path(src), "rev-parse", LIGER_COMMIT).strip()
    if not (dest / "src").is_dir():
        raise SystemExit(f"{NAME}: {dest} holds no src/: run realrepo_ab_eval.py --export {dest} first")
    archive = subprocess.run(
        ["git", "-C", src, "archive", commit, *EXPORT], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    print(f"{NAME}: added {', '.join(EXPORT)} of Liger-Kernel {commit[:10]} to {dest}")


def checkout(liger: Path, dest: Path) -> Path:
    """A fresh git repository of the export (scripts write their CSV into it)."""
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(liger, dest, ignore=shutil.ignore_patterns("__pycache__"))
    git(dest, "init", "-q")
    git(dest, "add", "-A")
    git(dest, "-c", "user.email=eval@kperf", "-c", "user.name=eval", "commit", "-qm", "liger")
    return dest


def env_for(repo: Path, work: Path) -> dict[str, str]:
    meta = work / "liger-meta"
    info = meta / f"liger_kernel-{LIGER_VERSION}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: liger-kernel\nVersion: {LIGER_VERSION}\n")
    env = dict(os.environ)
    paths = [str(repo / "src"), str(meta), str(ROOT)]
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="kperf-se-cache-")  # a job without a cache
    env["KPERF_BASELINE"] = ""
    env.pop("KPERF_DB", None)
    return env


def csv_p50(repo: Path, kernel_name: str) -> dict[tuple[str, str, str], float]:
    """{(provider, mode, x): p50 ms} of the speed rows the script wrote for its kernel."""
    out = {}
    path = repo / CSV_FILE
    if not path.exists():
        return out
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row.get("kernel_name") == kernel_name and row.get("metric_name") == "speed":
                try:
                    out[(row["kernel_provider"], row["kernel_operation_mode"], row["x_value"])] = float(
                        row["y_value_50"]
                    )
                except (KeyError, ValueError):
                    continue
    return out


# ---------------------------------------------------------------------------------------------
# step: scripts


def run_script(liger: Path, work: Path, script: str, python: str, log: Path) -> dict[str, Any]:
    kernel_name = script.removeprefix("benchmark_").removesuffix(".py")
    rows: dict[str, Any] = {"name": script}
    for how in ("plain", "kperf"):
        repo = checkout(liger, work / f"{kernel_name}-{how}")
        env = env_for(repo, work)
        cwd = repo / S
        db = work / f"{kernel_name}.db"
        if how == "plain":
            cmd = [python, script, "--overwrite"]
        else:
            cmd = [python, "-m", "kperf_ci", "run", "--kperf-mode", "gpu", "--kperf-db", str(db),
                   "--bench", script, "--overwrite"]  # fmt: skip
        rc, text, wall = run_cmd(cmd, cwd, env, 900)
        append_log(log, f"{' '.join(cmd)}  (exit {rc}; {wall:.1f} s)", text, 60)
        rows[f"wall_s_{how}"] = wall
        rows[f"exit_{how}"] = rc
        rows[f"p50_{how}"] = {"|".join(k): v for k, v in csv_p50(repo, kernel_name).items()}
        if how == "kperf":
            rows.update(calls_of(db))
    return rows


def calls_of(db: Path) -> dict[str, Any]:
    from kperf_ci import store

    if not db.exists():
        return {"do_bench_calls": 0, "captured": 0, "listed_with_reason": {}, "kernels": []}
    run = store.load_run(str(db))
    calls: list[dict[str, Any]] = []
    for name in store.blob_names(str(db), run.info.run_id):
        if name.startswith("bench_calls:"):
            calls += json.loads(store.load_blob(str(db), run.info.run_id, "", name))["calls"]
    listed: dict[str, int] = {}
    for c in calls:
        if c["status"] != "captured":
            listed[c["reason"] or "(no reason)"] = listed.get(c["reason"] or "(no reason)", 0) + 1
    medians = {
        v.key.test: (v.metric("time.median").value if v.metric("time.median") else None) for v in run.results
    }
    return {
        "do_bench_calls": len(calls),
        "captured": sum(1 for c in calls if c["status"] == "captured"),
        "listed_with_reason": listed,
        "kernels": sorted({k for c in calls if c["status"] == "captured" for k in c["kernels"]}),
        "variants_timed": sum(1 for m in medians.values() if m),
    }


# ---------------------------------------------------------------------------------------------
# step: cases


def run_case(
    case: dict[str, Any], liger: Path, work: Path, rounds: int, python: str, log: Path
) -> dict[str, Any]:
    repo, diff = build_repo(liger, work / case["name"], [], case["plants"])
    env = env_for(repo, work)
    out = work / f"{case['name']}.json"
    cmd = [python, "-m", "kperf_ci", "ab", "--base", "HEAD~1", "--db", str(work / f"{case['name']}.db"),
           "--report-dir", str(work / f"{case['name']}-report"), "--json", str(out),
           "--bench", S + case["script"], "--overwrite"]  # fmt: skip
    rc, text, wall = run_cmd(cmd, repo, env, 900)
    append_log(log, f"{' '.join(cmd)}  (exit {rc}; {wall:.1f} s)", text, 80)
    doc = json.loads(out.read_text()) if out.exists() else {}
    timed = [t for t in doc.get("timed", []) if t.get("kernel", "").rsplit("/", 1)[-1] == case["kernel"]]
    part: dict[str, Any] = {
        "case": case["name"],
        "diff_lines": len(diff.splitlines()),
        "exit_code": rc,
        "wall_s": wall,
        "gpu_seconds": doc.get("gpu_seconds"),
        "stage_s": doc.get("stage_s"),
        "tests": {
            s: sum(1 for t in doc.get("tests", []) if t["status"] == s) for s in ("identical", "changed")
        },
        "timed": [
            {
                k: t.get(k)
                for k in (
                    "test",
                    "kernel",
                    "launch",
                    "verdict",
                    "ratio",
                    "ci_low",
                    "ci_high",
                    "pairs",
                    "seconds",
                    "base_median_ms",
                    "head_median_ms",
                )
            }
            for t in timed
        ],
        "messages": doc.get("messages", []),
    }
    if case["truth"] and timed:
        part["truth"] = measure_truth(case, repo, timed, rounds, python, log, env)
    return part


SHAPE_RE = re.compile(r"(\w+)=(bf16|fp16|fp32)\[(\d+)x(\d+)\]")


def shapes_of(timed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The (rows, cols, dtype) each timed launch worked on, from its launch text (the first 2-D
    tensor argument): the sizes the script chose, not anything kperf measured."""
    out, seen = [], set()
    for t in timed:
        m = SHAPE_RE.search(t.get("launch") or "")
        if not m:
            continue
        key = (int(m.group(3)), int(m.group(4)), DTYPES[m.group(2)])
        if key not in seen:
            seen.add(key)
            out.append(
                {"rows": key[0], "cols": key[1], "dtype": key[2], "label": f"{m.group(2)}[{key[0]}x{key[1]}]"}
            )
    return out


def measure_truth(
    case: dict[str, Any], repo: Path, timed: list, rounds: int, python: str, log: Path, env: dict[str, str]
) -> dict[str, Any]:
    with base_worktree(repo) as (tmp, base_tree):
        spec, out = tmp / "shapes.json", tmp / "truth.json"
        spec.write_text(json.dumps(shapes_of(timed)))
        cmd = [python, str(Path(__file__).resolve()), "--truth-child", case["name"], "--repo", str(repo),
               "--base-tree", str(base_tree), "--rounds", str(rounds), "--shapes", str(spec),
               "--child-out", str(out)]  # fmt: skip
        rc, text, wall = run_cmd(cmd, repo, env, 540)
        append_log(log, f"truth for {case['name']} (exit {rc}; {wall:.1f} s)", text, 30)
        return child_result(out, rc, wall)


def truth_child(name: str, repo: Path, base_tree: Path, rounds: int, shapes_path: Path, out: Path) -> None:
    import torch

    case = BY_NAME[name]
    sys.path[:0] = [str(repo / "src"), str(repo)]
    mods = {
        side: _load(tree / case["module"], f"se_{side}_{Path(case['module']).stem}")
        for side, tree in (("base", base_tree), ("head", repo))
    }
    rows = []
    for sh in json.loads(shapes_path.read_text()):
        inputs = _inputs(case["truth"], sh)
        fns = {side: _recorded_launch(case["truth"], m, case["kernel"], inputs) for side, m in mods.items()}
        rows.append({"shape": sh["label"], **alternated_do_bench(fns, rounds)})
        print(f"  truth {name} {sh['label']}: {(rows[-1]['ratio'] - 1) * 100:+.2f}%", flush=True)
        del inputs, fns
        torch.cuda.empty_cache()
    out.write_text(json.dumps({"shapes": rows}, indent=1))


def join(paths: list[Path], dest: Path) -> None:
    """One scripts part from the parts of several device calls, oldest first: a row without its
    own commit is stamped with its part's; a later row of a script replaces an earlier one, except
    a row without a commit of its own in a later part (a copy the step kept from an older part)."""
    rows: dict[str, dict[str, Any]] = {}
    meta: dict[str, Any] = {}
    for path in paths:
        part = json.loads(path.read_text())
        meta = part.get("meta", meta)
        for row in part["scripts"]:
            if "commit" in row:
                rows[row["name"]] = row
            elif row["name"] not in rows:
                rows[row["name"]] = {**row, "commit": part.get("meta", {}).get("commit")}
    dest.write_text(
        json.dumps(
            {"meta": meta, "joined_from": [p.name for p in paths], "scripts": list(rows.values())}, indent=1
        )
    )
    print(
        f"{NAME}: joined {len(paths)} part(s) into {dest}: "
        + ", ".join(f"{r['name']} at {r['commit']}" for r in rows.values())
    )


# ---------------------------------------------------------------------------------------------
# render


def _within(a: float | None, b: float | None, tol: float) -> bool | None:
    if not a or not b:
        return None
    return abs(a / b - 1) <= tol


def assemble(out_dir: Path) -> dict[str, Any]:
    parts = {
        p.stem.split(".part-")[1]: json.loads(p.read_text())
        for p in sorted(out_dir.glob(f"{NAME}.part-*.json"))
    }
    meta = parts.get("scripts", parts.get("cases", {})).get("meta", {})
    # each step records the kperf-ci it ran (they may come from different device calls)
    commits = {step: p.get("meta", {}).get("commit") for step, p in parts.items()}
    scripts, cases, missed = [], [], []
    for row in parts.get("scripts", {}).get("scripts", []):
        plain, kp = row.get("p50_plain", {}), row.get("p50_kperf", {})
        liger = [k for k in plain if k.startswith("liger|") and k in kp]
        ratios = [kp[k] / plain[k] for k in liger if plain[k] and kp[k] == kp[k]]
        within = sum(1 for r in ratios if abs(r - 1) <= 0.02)
        # the reference providers are timed by Triton's own do_bench in both runs: how far the
        # script's numbers move from one run to the next on their own
        ref = [kp[k] / plain[k] for k in plain if not k.startswith("liger|") and k in kp and plain[k]]
        ref_within = sum(1 for r in ref if abs(r - 1) <= 0.02)
        entry = {
            "name": row["name"],
            "do_bench_calls": row.get("do_bench_calls"),
            "captured": row.get("captured"),
            "listed_with_reason": row.get("listed_with_reason"),
            "kernels": row.get("kernels"),
            "wall_s_plain": row.get("wall_s_plain"),
            "wall_s_kperf": row.get("wall_s_kperf"),
            "wall_ratio": (row["wall_s_kperf"] / row["wall_s_plain"]) if row.get("wall_s_plain") else None,
            "median_ratio_vs_plain": statistics.median(ratios) if ratios else None,
            "p50_within_2pct": f"{within}/{len(ratios)}",
            "p50_max_dev_pct": max((abs(r - 1) * 100 for r in ratios), default=None),
            "reference_p50_within_2pct": f"{ref_within}/{len(ref)}",
            "reference_p50_max_dev_pct": max((abs(r - 1) * 100 for r in ref), default=None),
            "commit": row.get("commit") or (meta.get("commit")),
            "exit_plain": row.get("exit_plain"),
            "exit_kperf": row.get("exit_kperf"),
        }
        scripts.append(entry)
        if (entry["captured"] or 0) + sum((entry["listed_with_reason"] or {}).values()) != entry[
            "do_bench_calls"
        ]:
            missed.append(f"{row['name']}: not every do_bench call was captured or listed with a reason")
        if ratios and within < len(ratios):
            missed.append(
                f"{row['name']}: {len(ratios) - within} of {len(ratios)} Liger p50s printed through kperf "
                "differ "
                f"from the plain run's by more than 2% (max {entry['p50_max_dev_pct']:.1f}%)"
            )
        if entry["wall_ratio"] and entry["wall_ratio"] > 1.5:
            missed.append(
                f"{row['name']}: kperf run took {entry['wall_ratio']:.2f}x the script's own wall time "
                "(target 1.5x)"
            )
    for part in parts.get("cases", {}).get("cases", []):
        case = BY_NAME[part["case"]]
        truth = {t["shape"]: t for t in (part.get("truth") or {}).get("shapes", [])}
        if not part["timed"]:
            cases.append({"name": part["case"], "kernel": case["kernel"], "truth_pct": None,
                          "verdict": "not timed", "ratio": None, "ci": None, "exit_code": part["exit_code"],
                          "expect": case["expect"]})  # fmt: skip
            if case["expect"] != "identical":
                missed.append(f"{part['case']}: no launch of {case['kernel']} was timed")
            continue
        for t in part["timed"]:
            sh = shapes_of([t])
            tr = truth.get(sh[0]["label"]) if sh else None
            truth_pct = (tr["ratio"] - 1) * 100 if tr else None
            ci = t.get("ci") or ([t.get("ci_low"), t.get("ci_high")] if t.get("ci_low") is not None else None)
            cases.append({"name": f"{part['case']}/{t['test'].rsplit('::', 1)[-1]}", "kernel": case["kernel"],
                          "truth_pct": truth_pct, "verdict": t["verdict"], "ratio": t["ratio"], "ci": ci,
                          "exit_code": part["exit_code"], "expect": case["expect"]})  # fmt: skip
            if truth_pct is not None and truth_pct >= 2 and t["verdict"] != "slower":
                missed.append(
                    f"{part['case']} {t['test']}: truth {truth_pct:+.1f}% but kperf said {t['verdict']}"
                )
    return {
        "device": meta.get("device"),
        "commit": commits,
        "liger_commit": LIGER_COMMIT,
        "scripts": scripts,
        "cases": cases,
        "case_runs": [
            {
                k: p.get(k)
                for k in ("case", "exit_code", "wall_s", "gpu_seconds", "stage_s", "tests", "messages")
            }
            for p in parts.get("cases", {}).get("cases", [])
        ],
        "missed": missed,
    }


def _f(v: Any, d: int = 2, pct: bool = False) -> str:
    if v is None:
        return "-"
    return f"{v:+.{d}f}%" if pct else f"{v:.{d}f}"


def render(doc: dict[str, Any]) -> str:
    dev = doc.get("device") or {}
    lines = [
        "# Benchmark scripts, unmodified: Liger-Kernel through `kperf run --bench` and `kperf ab --bench`",
        "",
        "Written by `benchmarks/scripts_eval.py` "
        "(re-render: `python benchmarks/scripts_eval.py --out DIR --steps render`). "
        f"Machine: {dev.get('gpu', '?')}, torch {dev.get('torch', '?')}, triton {dev.get('triton', '?')}; "
        f"kperf-ci {', '.join(f'{k} step at {v}' for k, v in (doc.get('commit') or {}).items())}; "
        f"Liger-Kernel {doc['liger_commit'][:10]} "
        "(fetched at run time, scripts unmodified, "
        "their default sweeps).",
        "",
        "## Scripts: plain vs through kperf",
        "",
        "| script | do_bench calls | captured | listed (reason: count) | kernels | wall plain s "
        "| wall kperf s | ratio | "
        "Liger p50 via kperf / plain (median) | within 2% | reference p50, plain do_bench in both runs: "
        "within 2% | kperf-ci |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in doc["scripts"]:
        listed = "; ".join(f"{r}: {n}" for r, n in (s["listed_with_reason"] or {}).items()) or "-"
        lines.append(
            f"| {s['name']} | {s['do_bench_calls']} | {s['captured']} | {listed} "
            f"| {', '.join(s['kernels'] or [])} | "
            f"{_f(s['wall_s_plain'], 1)} | {_f(s['wall_s_kperf'], 1)} | {_f(s['wall_ratio'])}x | "
            f"{_f(s['median_ratio_vs_plain'], 4)} | {s['p50_within_2pct']} "
            f"| {s['reference_p50_within_2pct']} "
            f"(max {_f(s['reference_p50_max_dev_pct'], 1)}%) | {s['commit']} |"
        )
    lines += ["", "## Planted pull requests through `kperf ab --bench`", "",
              "| case / call | kernel | expected | truth (do_bench, interleaved) | kperf verdict "
              "| kperf ratio | 99% CI | exit |",
              "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for c in doc["cases"]:
        ci = c["ci"]
        ci_text = (
            f"[{_f((ci[0] - 1) * 100, 2, True)}, {_f((ci[1] - 1) * 100, 2, True)}]"
            if ci and None not in ci
            else "-"
        )
        ratio = _f((c["ratio"] - 1) * 100, 2, True) if c["ratio"] else "-"
        lines.append(
            f"| {c['name']} | {c['kernel']} | {c['expect']} | {_f(c['truth_pct'], 2, True)} "
            f"| {c['verdict']} | "
            f"{ratio} | {ci_text} | {c['exit_code']} |"
        )
    lines += [
        "",
        "| case | exit | wall s | GPU s of A/B | stages s | tests identical / changed |",
        "|---|---|---|---|---|---|",
    ]
    for r in doc["case_runs"]:
        stages = ", ".join(f"{k} {v:.0f}" for k, v in (r.get("stage_s") or {}).items())
        t = r.get("tests") or {}
        lines.append(
            f"| {r['case']} | {r['exit_code']} | {_f(r['wall_s'], 1)} | {_f(r['gpu_seconds'])} | {stages} | "
            f"{t.get('identical', 0)} / {t.get('changed', 0)} |"
        )
    lines += ["", "## Targets", ""]
    lines += [f"- MISSED: {m}" for m in doc["missed"]] or ["- every target met"]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--export", type=Path, help="add Liger's benchmark/ folders to this export and stop")
    ap.add_argument("--liger-src", default="/work/.mirror/linkedin+Liger-Kernel/repo")
    ap.add_argument("--liger", type=Path, default=ROOT / ".liger", help="the export (src/ and benchmark/)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--steps", default="scripts,cases,render")
    ap.add_argument("--scripts", default=",".join(SCRIPTS))
    ap.add_argument("--cases", default=",".join(BY_NAME))
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--results", type=Path, default=RESULTS, help="where render writes the json and md")
    ap.add_argument(
        "--join",
        nargs="+",
        type=Path,
        help="scripts step part files of several device calls, oldest first: joined into --out's part",
    )
    ap.add_argument("--truth-child")
    ap.add_argument("--repo", type=Path)
    ap.add_argument("--base-tree", type=Path)
    ap.add_argument("--shapes", type=Path)
    ap.add_argument("--child-out", type=Path)
    a = ap.parse_args()
    if a.truth_child:
        truth_child(a.truth_child, a.repo, a.base_tree, a.rounds, a.shapes, a.child_out)
        return
    if a.export:
        export(a.liger_src, a.export)
        return
    if a.join:
        join(a.join, a.out / f"{NAME}.part-scripts.json")
        return
    steps = [s for s in a.steps.split(",") if s]
    a.out.mkdir(parents=True, exist_ok=True)
    meta = {"device": device_info(), "commit": os.environ.get("KPERF_EVAL_COMMIT") or kperf_commit()}
    work = Path(tempfile.mkdtemp(prefix="kperf-se-"))
    if "scripts" in steps:
        log = a.out / f"{NAME}.scripts.log"
        part_path = a.out / f"{NAME}.part-scripts.json"
        # a step run for some scripts keeps the other scripts' rows of an earlier part file (each
        # row names the kperf-ci it ran); the part is written after every script
        old_part = json.loads(part_path.read_text()) if part_path.exists() else {}
        old, old_commit = old_part.get("scripts", []), old_part.get("meta", {}).get("commit")
        rows: list[dict[str, Any]] = []
        for script in [s for s in a.scripts.split(",") if s]:
            rows.append({**run_script(a.liger, work, script, sys.executable, log), "commit": meta["commit"]})
            print(
                f"{NAME}: {script}: plain {rows[-1]['wall_s_plain']:.1f} s, "
                f"kperf {rows[-1]['wall_s_kperf']:.1f} s",
                flush=True,
            )
            kept = [
                {**r, "commit": r.get("commit") or old_commit}
                for r in old
                if r["name"] not in {x["name"] for x in rows}
            ]
            part_path.write_text(json.dumps({"meta": meta, "scripts": kept + rows}, indent=1))
    if "cases" in steps:
        log = a.out / f"{NAME}.cases.log"
        parts = []
        for name in [c for c in a.cases.split(",") if c]:
            parts.append(run_case(BY_NAME[name], a.liger, work, a.rounds, sys.executable, log))
            print(
                f"{NAME}: case {name}: exit {parts[-1]['exit_code']}, {parts[-1]['wall_s']:.1f} s", flush=True
            )
        (a.out / f"{NAME}.part-cases.json").write_text(json.dumps({"meta": meta, "cases": parts}, indent=1))
    if "render" in steps:
        doc = assemble(a.out)
        a.results.mkdir(parents=True, exist_ok=True)
        (a.results / f"{NAME}.json").write_text(json.dumps(doc, indent=1) + "\n")
        (a.results / f"{NAME}.md").write_text(render(doc))
        print(render(doc))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
