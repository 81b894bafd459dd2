"""Existing suites, unmodified: Liger-Kernel's test/transformers run with ``--kperf-all``.

    python benchmarks/suites_eval.py --mode cpu                      # static mode, here
    python benchmarks/suites_eval.py --mode gpu --liger-src /path/to/Liger-Kernel   # on the H100
    python benchmarks/suites_eval.py --render                        # md from the json only

Liger-Kernel is fetched at evaluation time at a pinned commit (never committed here):
``--liger-src`` is a git URL (default GitHub) or a local clone/mirror (a machine without network:
clone it first). Each test file runs in its own pytest process (``--kperf --kperf-all``, its own
run database, a per-file timeout); a small counting plugin (``benchmarks/_suites_counter.py``)
writes each test's outcome and Triton launch count. A test that fails under kperf is rerun
without kperf (same mode: the interpreter on CPU); one that then passes is a failure caused by
kperf. Both modes merge into ``benchmarks/results/suites_eval.json``; the markdown is rendered
from the json, every number and sentence by this script.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kperf_ci import store  # noqa: E402
from kperf_ci.prcheck.passes import load_manifest  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
LIGER_URL = "https://github.com/linkedin/Liger-Kernel.git"
# pinned: the newest commit of the mirror used on 2026-11-23 (main, 2026-08-21)
LIGER_COMMIT = "ead96b618e5c67bddc6a6e9bcb99bfe6b5ab661c"
# what the tests need from the repository (its test/resources holds large LFS data sets)
CHECKOUT = ("src", "test/__init__.py", "test/conftest.py", "test/utils.py", "test/transformers")
# other DSLs than Triton (CuTe DSL, cuTile) and model-level tests that patch transformers models
# and load data sets: not Triton kernel tests
EXCLUDE = ("cutedsl", "cutile", "cute_", "test_monkey_patch", "test_auto_model", "test_trainer_integration")
TARGET_SHARE = 0.90


def fetch_liger(src: str, commit: str, dest: Path) -> str:
    """A checkout of ``commit`` (only CHECKOUT paths) in ``dest``; returns the full commit id.

    ``src`` may also be a plain directory made by ``--export`` (a machine without network and
    without the repository's history): it is copied, and its LIGER_COMMIT file names the commit."""
    if dest.exists():
        shutil.rmtree(dest)
    plain = Path(src)
    if plain.is_dir() and (plain / "LIGER_COMMIT").is_file():
        shutil.copytree(plain, dest)
        return (plain / "LIGER_COMMIT").read_text().strip()
    subprocess.run(["git", "clone", "--quiet", "--no-checkout", src, str(dest)], check=True)
    subprocess.run(["git", "-C", str(dest), "checkout", "--quiet", commit, "--", *CHECKOUT], check=True)
    out = subprocess.run(
        ["git", "-C", str(dest), "rev-parse", commit], capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def test_files(liger: Path, only: list[str] | None) -> list[str]:
    files = sorted(p.name for p in (liger / "test" / "transformers").glob("test_*.py"))
    files = [f for f in files if not any(x in f for x in EXCLUDE)]
    if only:
        wanted = [f if f.endswith(".py") else f + ".py" for f in only]
        files = [f for f in wanted if f in files]  # in the order given: the first ones matter most
    return files


def _env(liger: Path, mode: str, counts: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(ROOT), str(ROOT / "benchmarks"), str(liger / "src"), str(liger)]
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["KPERF_PROGRESS"] = "0"
    if mode == "cpu":
        env["TRITON_INTERPRET"] = "1"
    if counts is not None:
        env["KPERF_SUITES_COUNTS"] = str(counts)
    return env


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float) -> tuple[int | None, str]:
    """(exit code or None on timeout, output tail); on timeout the whole process group is killed
    (kperf's compile workers included)."""
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return None, out or ""


def collect(liger: Path, name: str, mode: str, python: str) -> list[str]:
    cmd = [
        python,
        "-m",
        "pytest",
        f"test/transformers/{name}",
        "--collect-only",
        "-q",
        "-p",
        "no:cacheprovider",
    ]
    rc, out = _run(cmd, liger, _env(liger, mode, None), 300)
    ids = [ln.strip() for ln in (out or "").splitlines() if "::" in ln and not ln.startswith(" ")]
    return ids


def run_file(
    liger: Path, name: str, mode: str, work: Path, timeout: float, python: str, chunk: int
) -> dict[str, Any]:
    """Run one test file, ``chunk`` tests per pytest process (0: the whole file in one), each
    process with its own run database and ``timeout`` seconds: a slow part loses only itself."""
    counts = work / f"{name}.counts.jsonl"
    for p in [counts, *work.glob(f"{name}.*.db")]:
        p.unlink(missing_ok=True)
    ids = collect(liger, name, mode, python) if chunk else []
    parts = (
        [ids[i : i + chunk] for i in range(0, len(ids), chunk)] if ids else [[f"test/transformers/{name}"]]
    )
    kmode = "static" if mode == "cpu" else "gpu"
    t0 = time.perf_counter()
    timed_out, rc, tail, dbs = False, 0, "", []
    for k, part in enumerate(parts):
        db = work / f"{name}.{k}.db"
        dbs.append(db)
        cmd = [python, "-m", "pytest", *part, "-q", "-p", "no:cacheprovider", "-p", "_suites_counter"]
        cmd += ["--kperf", "--kperf-all", "--kperf-mode", kmode, "--kperf-db", str(db)]
        code, out = _run(cmd, liger, _env(liger, mode, counts), timeout)
        out = out[-3000:]
        if code is None:
            timed_out, tail = True, out
        elif code not in (0, 1):
            rc, tail = code, out
    wall = time.perf_counter() - t0
    rows = [json.loads(line) for line in counts.read_text().splitlines()] if counts.exists() else []
    row = _summarise(liger, name, mode, rows, dbs, wall, rc, timed_out, tail, timeout, python)
    row["chunks"] = len(parts)
    row["collected"] = len(ids) if ids else None
    return row


def _variants(dbs: list[Path]) -> tuple[int, set[str], list[str]]:
    """(variants stored, tests with captured launches, run statuses) over the file's runs."""
    n, tests, statuses = 0, set(), []
    for db in dbs:
        if not db.exists():
            continue
        try:
            run = store.load_run(str(db))
        except store.StoreError:
            continue
        n += len(run.results)
        statuses.append(run.status)
        tests |= {r.key.test for r in run.results if r.key.test}
        manifest = load_manifest(str(db), run.info.run_id) or {}
        tests |= {t for t, launches in manifest.items() if launches}
    return n, tests, statuses


def _kperf_caused(liger: Path, mode: str, failed: list[str], timeout: float, python: str) -> list[str]:
    """Failed tests that pass when rerun without kperf (in the same mode)."""
    if not failed:
        return []
    counts = Path(tempfile.mkstemp(suffix=".jsonl")[1])
    cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "_suites_counter", *failed]
    try:
        subprocess.run(
            cmd, cwd=liger, env=_env(liger, mode, counts), capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        pass
    rows = [json.loads(line) for line in counts.read_text().splitlines()] if counts.exists() else []
    counts.unlink(missing_ok=True)
    return sorted({r["test"] for r in rows if r["when"] == "call" and r["outcome"] == "passed"})


def _summarise(liger, name, mode, rows, dbs, wall, rc, timed_out, tail, timeout, python) -> dict[str, Any]:  # noqa: ANN001
    calls = [r for r in rows if r["when"] == "call"]
    setup_fail = [r for r in rows if r["when"] == "setup" and r["outcome"] == "failed"]
    skipped = [r for r in rows if r["when"] == "setup" and r["outcome"] == "skipped"]
    failed = [r["test"] for r in calls if r["outcome"] == "failed"] + [r["test"] for r in setup_fail]
    variants, with_launches, status = _variants(dbs)
    caused = _kperf_caused(liger, mode, failed, timeout, python)
    launching = {r["test"] for r in calls if r["launches"] > 0}
    return {
        "file": name,
        "tests": len(calls) + len(setup_fail),
        "passed": sum(r["outcome"] == "passed" for r in calls),
        "failed": len(failed),
        "xfailed": sum(r["outcome"] == "xfailed" for r in calls),
        "skipped": len(skipped),
        "tests_launching": len(launching),
        "tests_with_launches": len(with_launches & launching) if launching else len(with_launches),
        "variants": variants,
        "run_statuses": status,
        "kperf_caused_failures": len(caused),
        "kperf_caused": caused,
        "failed_tests": [
            {"test": r["test"], "error": r.get("error", "")}
            for r in calls + setup_fail
            if r["test"] in failed
        ][:20],
        "wall_s": round(wall, 1),
        "timed_out": timed_out,
        "exit_code": rc,
        "tail": tail if (timed_out or rc not in (0, 1)) else "",
    }


def totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    keys = (
        "tests",
        "passed",
        "failed",
        "xfailed",
        "skipped",
        "tests_launching",
        "tests_with_launches",
        "variants",
        "kperf_caused_failures",
    )
    out: dict[str, Any] = {"files": len(rows)}
    for k in keys:
        out[k] = sum(r[k] for r in rows)
    out["wall_s"] = round(sum(r["wall_s"] for r in rows), 1)
    out["timed_out_files"] = [r["file"] for r in rows if r["timed_out"]]
    out["share_with_launches"] = (
        round(out["tests_with_launches"] / out["tests_launching"], 4) if out["tests_launching"] else None
    )
    return out


def _per_mode(value: Any, mode: str, default: float) -> float:
    """A setting stored per mode ({"cpu": 12}), or as one number by an older run of this script."""
    if isinstance(value, dict):
        return value.get(mode, default)
    return default if value is None else value


def render(data: dict[str, Any]) -> str:
    lines = [
        "# Existing suites, unmodified: Liger-Kernel with `--kperf-all`",
        "",
        f"Liger-Kernel commit `{data.get('commit')}`, `test/transformers` (Triton kernel tests; files "
        f"for other DSLs and model-patching tests excluded: {', '.join(EXCLUDE)}), each file run "
        "unmodified with `--kperf --kperf-all`, at most "
        f"{_per_mode(data.get('chunk'), 'cpu', 12):.0f} tests per pytest process on the CPU "
        "(each with its own run database and a "
        f"{_per_mode(data.get('timeout'), 'cpu', 300):.0f} s limit, so a slow part loses only itself; on the "
        "GPU a file per process). Made by "
        "`python benchmarks/suites_eval.py` (this file is written from `suites_eval.json`).",
        "",
        "How the columns are counted:",
        "",
        "- **tests**: tests that ran (passed, failed, expected failures); tests skipped by the suite "
        "itself (e.g. bfloat16 on a CPU) are listed as skipped and not counted.",
        "- **tests launching**: tests that launched at least one Triton kernel in that run, counted by "
        "a plugin around each test (launches reaching Triton's launch entry) and by the launches "
        "kperf's recorder kept (static mode records a launch even when its body cannot be "
        "interpreted); failed tests count too. On the CPU this is what the interpreter saw: a test "
        "that launches only on a GPU path, or is skipped on the CPU, is not counted there.",
        "- **tests with launches**: of those, tests whose launches became stored variants "
        "(the run's launch manifest, or a variant's test).",
        "- **kperf-caused failures**: tests that failed under kperf and passed when rerun without it "
        "(same mode; the interpreter on the CPU).",
        "",
    ]
    for mode in ("cpu", "gpu"):
        part = data.get(mode)
        if not part:
            lines += [f"## {mode.upper()}: not run yet", ""]
            continue
        t = part
        share = t["share_with_launches"]
        share_txt = f"{share:.1%}" if share is not None else "n/a"
        met = share is not None and share >= TARGET_SHARE and t["kperf_caused_failures"] == 0
        total = data.get("files_total")
        of = f" of {total} (in the order given by `--files`, most used kernels first)" if total else ""
        lines += [
            f"## {mode.upper()} ({'static mode, Triton interpreter' if mode == 'cpu' else 'GPU mode'}; "
            f"{part.get('device', '')})",
            "",
            f"{t['files']} files{of}, {t['tests']} tests ({t['passed']} passed, {t['failed']} failed, "
            f"{t['xfailed']} expected failures; {t['skipped']} skipped), {t['tests_launching']} "
            f"launching Triton kernels, {t['tests_with_launches']} with captured launches "
            f"({share_txt}; target {TARGET_SHARE:.0%}), {t['variants']} variants, "
            f"{t['kperf_caused_failures']} failures caused by kperf (target 0), {t['wall_s']} s. "
            + ("Targets met." if met else "Targets **missed**: see the failures below."),
            "",
            "| file | collected | tests | passed | failed | xfail | skipped | launching | with launches "
            "| variants | kperf-caused | wall s |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in part["per_file"]:
            wall = f"{r['wall_s']}" + (" (timeout)" if r["timed_out"] else "")
            lines.append(
                f"| {r['file']} | {r.get('collected', '?')} | {r['tests']} | {r['passed']} | {r['failed']} "
                f"| {r['xfailed']} "
                f"| {r['skipped']} "
                f"| {r['tests_launching']} | {r['tests_with_launches']} | {r['variants']} "
                f"| {r['kperf_caused_failures']} | {wall} |"
            )
        unrun = [
            (r["file"], r["collected"] - r["tests"] - r["skipped"])
            for r in part["per_file"]
            if r.get("collected") and r["collected"] > r["tests"] + r["skipped"]
        ]
        if unrun:
            n_unrun = sum(n for _, n in unrun)
            lines += [
                "",
                f"**Not run: {n_unrun} collected tests** ("
                + ", ".join(f"{f}: {n}" for f, n in unrun)
                + "): neither run nor skipped in this evaluation (a part that hit its time limit, or tests "
                "the run's collection step did not hand to pytest); they are in no column but `collected`.",
            ]
        missed = [
            r for r in part["per_file"] if r["tests_launching"] > r["tests_with_launches"] or r["failed"]
        ]
        if missed:
            lines += ["", "Tests that failed or whose launches were not captured (first error per file):", ""]
            for r in missed:
                err = next((f["error"] for f in r["failed_tests"] if f["error"]), "")
                err = " ".join(err.split())[:200].replace("|", "\\|")
                also = r["failed"] - r["kperf_caused_failures"]
                why = f" ({also} of them also fail without kperf)" if r["failed"] and also else ""
                lines.append(
                    f"- {r['file']}: {r['failed']} failed{why}, "
                    f"{r['tests_launching'] - r['tests_with_launches']} launching without captured launches"
                    + (" (a part hit its time limit)" if r["timed_out"] else "")
                    + (f"; e.g. `{err}`" if err else "")
                )
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=("cpu", "gpu"), help="cpu: static mode (interpreter); gpu: GPU mode")
    ap.add_argument("--liger-src", default=LIGER_URL, help="git URL or local clone of Liger-Kernel")
    ap.add_argument("--commit", default=LIGER_COMMIT)
    ap.add_argument("--workdir", default=None, help="where to check Liger-Kernel out (default: a temp dir)")
    ap.add_argument("--files", nargs="*", help="only these test files (e.g. test_softmax.py)")
    ap.add_argument(
        "--timeout", type=float, default=None, help="seconds per pytest process (cpu 300, gpu 120)"
    )
    ap.add_argument("--out", default=str(RESULTS / "suites_eval"), help="path without .json/.md")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument(
        "--chunk", type=int, default=None, help="tests per pytest process (0: a file in one; cpu 12, gpu 0)"
    )
    ap.add_argument("--render", action="store_true", help="only rewrite the md from the json")
    ap.add_argument("--recount", action="store_true", help="add each file's collected test count to the json")
    ap.add_argument(
        "--export", metavar="DIR", help="only write the pinned checkout to DIR (for a machine offline)"
    )
    a = ap.parse_args(argv)
    out_json, out_md = Path(a.out + ".json"), Path(a.out + ".md")
    data = json.loads(out_json.read_text()) if out_json.exists() else {}
    if a.render:
        out_md.write_text(render(data))
        return 0
    if a.recount:
        # how many tests each file of an earlier run collects (rows written before "collected" existed)
        liger = Path(a.workdir or tempfile.mkdtemp(prefix="kperf-suites-")) / "Liger-Kernel"
        fetch_liger(a.liger_src, data.get("commit") or a.commit, liger)
        for mode in ("cpu", "gpu"):
            for row in (data.get(mode) or {}).get("per_file", []):
                row["collected"] = len(collect(liger, row["file"], mode, a.python))
        out_json.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        out_md.write_text(render(data))
        return 0
    if a.export:
        commit = fetch_liger(a.liger_src, a.commit, Path(a.export))
        shutil.rmtree(Path(a.export) / ".git", ignore_errors=True)  # the files only: small to carry
        (Path(a.export) / "LIGER_COMMIT").write_text(commit + "\n")
        print(f"suites_eval: Liger-Kernel {commit} written to {a.export}")
        return 0
    if not a.mode:
        ap.error("--mode is required (or --render / --export)")
    timeout = a.timeout or (300.0 if a.mode == "cpu" else 120.0)
    work = Path(a.workdir or tempfile.mkdtemp(prefix="kperf-suites-"))
    work.mkdir(parents=True, exist_ok=True)
    liger = work / "Liger-Kernel"
    print(f"suites_eval: fetching {a.liger_src} at {a.commit} into {liger}", flush=True)
    commit = fetch_liger(a.liger_src, a.commit, liger)
    if data.get("commit") not in (None, commit):
        data = {}  # results of another commit are not merged
    data["commit"] = commit
    chunk = a.chunk if a.chunk is not None else (12 if a.mode == "cpu" else 0)
    for key in ("chunk", "timeout"):  # a json of the first CPU run held one number for both
        if not isinstance(data.get(key), dict):
            data[key] = {} if data.get(key) is None else {"cpu": data[key]}
    data.setdefault("chunk", {})[a.mode] = chunk
    data.setdefault("timeout", {})[a.mode] = timeout
    files = test_files(liger, a.files)
    data["files_total"] = len(test_files(liger, None))
    dbs = work / f"dbs-{a.mode}"
    dbs.mkdir(exist_ok=True)
    prev = {r["file"]: r for r in (data.get(a.mode) or {}).get("per_file", [])}
    t0 = time.perf_counter()
    for i, name in enumerate(files, 1):
        print(f"suites_eval [{i}/{len(files)}] {name} ...", flush=True)
        row = run_file(liger, name, a.mode, dbs, timeout, a.python, chunk)
        prev[name] = row
        print(
            f"  {row['tests']} tests, {row['tests_launching']} launching, {row['tests_with_launches']} with "
            f"launches, {row['variants']} variants, {row['failed']} failed ({row['kperf_caused_failures']} "
            f"caused by kperf), {row['wall_s']} s" + (" TIMEOUT" if row["timed_out"] else ""),
            flush=True,
        )
        rows = [prev[k] for k in sorted(prev)]
        data[a.mode] = {**totals(rows), "per_file": rows, "device": _device(a.mode)}
        out_json.parent.mkdir(parents=True, exist_ok=True)
        out_json.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")  # after every file
        out_md.write_text(render(data))
    t = data[a.mode]
    keys = ("files", "tests", "tests_launching", "tests_with_launches", "variants", "kperf_caused_failures")
    summary = json.dumps({k: t[k] for k in (*keys, "wall_s")})
    print(f"suites_eval {a.mode}: {summary} in {time.perf_counter() - t0:.0f} s")
    return 0


def _device(mode: str) -> str:
    if mode == "cpu":
        return f"CPU, {os.cpu_count()} cores shared, Triton interpreter"
    try:
        import torch

        return torch.cuda.get_device_name(0)
    except Exception:
        return "GPU"


if __name__ == "__main__":
    sys.exit(main())
