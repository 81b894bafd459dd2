"""What the README's test command costs on this machine, and where its CPU goes.

    .venv/bin/python benchmarks/suite_cost.py [--label NAME] [-- EXTRA PYTEST ARGS]

Runs ``python -m pytest -q -n auto`` (the README's test command, which `.ci/run` runs) with
``benchmarks/_suite_cost_plugin.py`` loaded in every xdist worker, which writes each test's CPU
seconds: its own process's and those of the subprocesses it waited for. Writes
``benchmarks/results/suite_cost.json`` and ``.md``: the machine, the versions, the wall and CPU
seconds of the whole command (``getrusage`` of its process tree), pytest's summary line, and the
files and tests that cost the most CPU, and the CPU of every Python process the run started, by
kind (``benchmarks/_suite_census.py``). Issue 38 asks for at most 8 minutes on 2 cores.

Run it alone on the machine: anything beside it is counted in its wall time. Started from a
shell without job control (``(cmd &)``), SIGINT is ignored in the whole tree and the Ctrl-C tests
fail; start it in the foreground or under ``nohup``/``setsid``.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import importlib.metadata
import json
import os
import platform
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _suite_census

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results"
TARGET_S = 8 * 60
TOP = 15
SPEED_RUNS = 3  # `import torch` runs for the machine's speed, before the suite and after it


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _commit() -> str:
    r = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "-uno"], capture_output=True, text=True
    )
    return r.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")


def machine_speed(times: int = SPEED_RUNS) -> float:
    """CPU seconds of ``python -c "import torch"``, the median of ``times``: what most of the
    suite's processes pay first. On one 2-core machine here it read 1.45 s at 01:08 UTC and 2.0 s
    at 02:49 (2026-12-04) with nothing else running, and the suite's CPU moved with it (each
    test's by about a fifth); the reading before and after the run says which machine the
    numbers were taken on."""
    cpu = []
    for _ in range(times):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-c", "import torch"], check=True, capture_output=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return round(sorted(cpu)[len(cpu) // 2], 2)


def run(extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        per_test, log_dir = Path(tmp) / "tests.jsonl", Path(tmp) / "census"
        log_dir.mkdir()
        env = dict(os.environ, KPERF_SUITE_COST_OUT=str(per_test), **{_suite_census.ENV: str(log_dir)})
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "benchmarks"), env.get("PYTHONPATH")]))
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # as .ci/run does
        cmd = [sys.executable, "-m", "pytest", "-q", "-n", "auto", "-p", "_suite_cost_plugin", *extra]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        with _suite_census.logging_processes(log_dir) as counted:
            proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        wall = time.monotonic() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        tests = [json.loads(x) for x in per_test.read_text().splitlines()] if per_test.exists() else []
        processes = _suite_census.census(log_dir) if counted else None
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    summary = next((ln.strip("= ") for ln in reversed(lines) if re.search(r"\d+ (passed|failed)", ln)), "")
    return {
        "command": "python -m pytest -q -n auto" + "".join(f" {a}" for a in extra),
        "exit_code": proc.returncode,
        "summary": summary,
        "failed": [ln for ln in lines if ln.startswith("FAILED ")],
        "wall_s": round(wall, 1),
        "user_s": round(after.ru_utime - before.ru_utime, 1),
        "sys_s": round(after.ru_stime - before.ru_stime, 1),
        "tests": tests,
        "processes": processes,
    }


def _tops(tests: list[dict]) -> tuple[list[dict], list[dict]]:
    files: dict[str, dict] = collections.defaultdict(lambda: {"cpu_s": 0.0, "tests": 0})
    for t in tests:
        f = files[t["id"].split("::")[0]]
        f["cpu_s"] += t["self"] + t["child"]
        f["tests"] += 1
    by_file = sorted(({"file": k, **v} for k, v in files.items()), key=lambda r: -r["cpu_s"])
    by_test = sorted(tests, key=lambda t: -(t["self"] + t["child"]))
    return by_file, by_test


def markdown(doc: dict) -> str:
    r, m, v = doc["result"], doc["machine"], doc["versions"]
    cpu = r["user_s"] + r["sys_s"]
    within = "within" if r["wall_s"] <= TARGET_S else "over"
    tests_cpu = sum(t["self"] + t["child"] for t in r["tests"])
    out = [
        "# The test suite's cost (benchmarks/suite_cost.py)",
        "",
        f"{doc['date']}, kperf-ci {doc['commit']}; {m['cores']} cores ({m['cpu']}), "
        f"Python {m['python']}, torch {v['torch']}, triton {v['triton']}.",
        "",
        f"`{r['command']}`: exit {r['exit_code']}, {r['summary']}.",
        "",
        f"- wall {r['wall_s']:.0f} s ({r['wall_s'] / 60:.1f} min), {within} the {TARGET_S // 60} min target;",
        f"- CPU {cpu:.0f} s (user {r['user_s']:.0f} s, system {r['sys_s']:.0f} s), the whole process tree;",
        f"- {len(r['tests'])} tests account for {tests_cpu:.0f} CPU-s of it (theirs and their children's).",
    ]
    if "import_torch_cpu_s" in doc:
        speed = doc["import_torch_cpu_s"]
        out.append(
            f"- the machine's speed: `import torch` took {speed['before']:.2f} CPU-s before the run and "
            f"{speed['after']:.2f} after (the median of {SPEED_RUNS} each); the same code's suite costs more "
            "where it is slower."
        )
    out.append("")
    if r["failed"]:
        out += ["Failed:", "", *[f"- `{ln}`" for ln in r["failed"]], ""]
    if r.get("processes"):
        out += _suite_census.markdown(r["processes"], cpu) + [""]
    by_file, by_test = _tops(r["tests"])
    out += [f"## The {TOP} files that cost the most CPU", "", "| file | tests | CPU s |", "|---|---:|---:|"]
    out += [f"| {f['file']} | {f['tests']} | {f['cpu_s']:.1f} |" for f in by_file[:TOP]]
    out += [
        "",
        f"## The {TOP} tests that cost the most CPU",
        "",
        "| test | CPU s | wall s |",
        "|---|---:|---:|",
    ]
    out += [
        f"| {t['id'].replace('|', '/')} | {t['self'] + t['child']:.1f} | {t['wall']:.1f} |"
        for t in by_test[:TOP]
    ]
    return "\n".join(out) + "\n"


def main() -> int:
    # a SIGTERM unwinds (the census removes its .pth file on the way out) instead of ending at once
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--label", default="suite_cost", help="output file names (default suite_cost)")
    ap.add_argument("extra", nargs="*", help="more pytest arguments (after --)")
    args = ap.parse_args()
    doc = {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _commit(),
        "machine": {"cores": os.cpu_count(), "cpu": _cpu_model(), "python": platform.python_version()},
        "versions": {d: _version(d) for d in ("torch", "triton", "pytest", "pytest-xdist")},
        "target_s": TARGET_S,
    }
    before = machine_speed()
    doc["result"] = run(args.extra)
    doc["import_torch_cpu_s"] = {"before": before, "after": machine_speed()}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{args.label}.json").write_text(json.dumps(doc, indent=1) + "\n")
    (OUT / f"{args.label}.md").write_text(markdown(doc))
    print(markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
