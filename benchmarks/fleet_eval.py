"""Issue 26: the GPU fleet on a machine with two GPUs. One selection of tests timed four ways:

* ``one_gpu``: one pytest process on GPU 0 alone (the reference);
* ``xdist_2``: ``-n 2``, both GPUs visible, the plugin pins one GPU per xdist worker;
* ``shards_2``: ``--kperf-shard 1/2`` on GPU 0 and ``--kperf-shard 2/2`` on GPU 1 at the same
  time (``CUDA_VISIBLE_DEVICES`` per process), then ``kperf merge --shards``.

The selection: the bundled examples (``examples/``) and Liger-Kernel's test_softmax/test_geglu
(``--liger-tests``), carried as ``.liger/`` (``src/`` and ``test/``; export it here with
``python benchmarks/realrepo_ab_eval.py --export .liger --liger-src <Liger clone>``), all in GPU
mode with ``--kperf-all``. Every pytest process starts with empty Triton, metrics and region
caches of its own, as a CI job without a restored cache does, so no run reuses another's compiles.

Each step writes ``fleet_eval.part-<step>.json`` to ``--out`` (what was run, its wall time and, per
stored variant, its median and intervals and the GPU its timing names) next to its logs and
databases; ``--steps render`` writes ``fleet_eval.{json,md}`` from those parts alone (no GPU).

    source benchmarks/gpu_env.sh; python benchmarks/fleet_eval.py --out $OUT/r    # GPU, all steps
    python benchmarks/fleet_eval.py --out DIR --steps render                      # re-render
    python benchmarks/fleet_eval.py --dry-run-cpu --out /tmp/fleet                # CPU plumbing

``--dry-run-cpu`` runs the same pipeline in static mode (Triton interpreter) on the examples only:
subprocesses, xdist, shards, merge and rendering, no timing; its json/md go to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))
from _common import kperf_commit, write_json  # noqa: E402 - the one reader of the measured commit
from suites_eval import _run as run_group  # noqa: E402 - kills the whole process group on a timeout

NAME = "fleet_eval"
RESULTS = ROOT / "benchmarks" / "results"
# aa_one_gpu: the reference run once more, alone on GPU 0: how far two one-GPU processes
# disagree, so the 2-GPU runs' disagreement can be read against it
STEPS = ("one_gpu", "xdist_2", "shards_2", "aa_one_gpu", "render")
RUNS = ("one_gpu", "xdist_2", "shards_2")
LIGER_TESTS = (
    "test/transformers/test_softmax.py::test_liger_softmax",
    "test/transformers/test_geglu.py::test_correctness_functional",
)
# the issue's targets
WALL_RATIO_MAX = 0.6
MEDIAN_REL = 0.01
CONFIDENCE = 0.99
# xdist -v lines: "[gw1] [ 50%] PASSED examples/test_x.py::test_y[4096]"
_XDIST_LINE = re.compile(r"^\[(gw\d+)\] \[\s*\d+%\] (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\S+)")


class UsageError(Exception):
    """Bad input: one line, exit 2."""


# ---------------------------------------------------------------------------------------------
# the machine


def nvidia_gpus() -> list[dict[str, str]]:
    """nvidia-smi's GPUs in PCI order (index, uuid, pci bus id, name); [] without nvidia-smi."""
    try:
        r = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,uuid,pci.bus_id,name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in r.stdout.splitlines() if r.returncode == 0 else []:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 4:
            gpus.append(dict(zip(("index", "uuid", "pci_bus_id", "name"), parts, strict=True)))
    return gpus


# ---------------------------------------------------------------------------------------------
# running pytest


def selection(liger: Path | None) -> list[str]:
    tests = ["examples"]
    if liger is not None:
        tests += [str(liger / t) for t in LIGER_TESTS]
    return tests


def shown_selection(liger: Path | None) -> list[str]:
    return ["examples", *([f".liger/{t}" for t in LIGER_TESTS] if liger is not None else [])]


def pytest_cmd(python: str, tests: list[str], db: Path, cpu: bool, extra: list[str]) -> list[str]:
    mode = "static" if cpu else "gpu"
    return [
        python,
        "-m",
        "pytest",
        *tests,
        "--kperf",
        "--kperf-mode",
        mode,
        "--kperf-all",
        "--kperf-db",
        str(db),
        "-p",
        "no:cacheprovider",
        # examples/test_softmax.py and Liger's test_softmax.py share a basename: pytest's default
        # import mode imports one module "test_softmax" for both and stops collecting
        "--import-mode=importlib",
        "-v",  # under xdist: which worker ran each test ("[gw1] ... PASSED <id>")
        *extra,
    ]


def run_env(work: Path, liger: Path | None, cpu: bool, gpus: str | None, budget_s: float) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(ROOT)]
    if liger is not None:  # liger_kernel, and Liger's `test` package before the standard library's
        paths = [str(liger / "src"), str(liger), *paths]
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    for var, sub in (
        ("TRITON_CACHE_DIR", "triton"),
        ("KPERF_METRICS_CACHE_DIR", "metrics"),
        ("KPERF_REGION_CACHE_DIR", "region"),
    ):
        env[var] = str(work / "cache" / sub)  # empty: no run reuses another's compiles
    env["KPERF_BASELINE"] = ""  # the project's baseline is the examples' CPU run: nothing to judge
    env["KPERF_TIMING_BUDGET_S"] = str(budget_s)
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # CUDA's indices are nvidia-smi's
    env.pop("PYTEST_XDIST_WORKER", None)
    if cpu:
        env["TRITON_INTERPRET"] = "1"
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpus
    return env


def run_pytest(name: str, cmd: list[str], env: dict[str, str], log: Path, timeout: float) -> dict[str, Any]:
    t0 = time.monotonic()
    rc, out = run_group(cmd, ROOT, env, timeout)
    wall = time.monotonic() - t0
    shown = " ".join(Path(c).name if c == cmd[0] else c for c in cmd)
    log.write_text(
        f"$ CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES', '<unset>')} {shown}\n"
        f"(exit {rc if rc is not None else f'none: killed after {timeout:.0f} s'}; {wall:.1f} s)\n{out}"
    )
    print(f"{NAME} {name}: exit {rc}, {wall:.1f} s", flush=True)
    return {
        "command": shown,
        "cuda_visible_devices": env.get("CUDA_VISIBLE_DEVICES"),
        "exit_code": rc,
        "wall_s": wall,
        "log": log.name,
        "workers": xdist_workers(out),
        "summary": _summary(out),
    }


def _summary(out: str) -> str:
    lines = [ln for ln in out.splitlines() if re.search(r"\d+ (passed|failed|error)", ln)]
    return lines[-1].strip("= ") if lines else ""


def xdist_workers(out: str) -> dict[str, str]:
    """test id -> the xdist worker that ran it, from pytest -v's lines."""
    found = {}
    for line in out.splitlines():
        if m := _XDIST_LINE.match(line.strip()):
            found[m.group(3)] = m.group(1)
    return found


# ---------------------------------------------------------------------------------------------
# reading a run database (the library's readers)


def variant_rows(db: Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """(the run: fingerprint, status, id; per variant id: label, test, median, 95% interval as
    stored, 99% interval of the stored samples, the GPU its timing names)."""
    from kperf_ci import store
    from kperf_ci.sample_stats import median_ci

    rec = store.load_run(db, artifacts=["timing"])
    run = {
        "run_id": rec.info.run_id,
        "status": rec.status,
        "fingerprint": rec.info.fingerprint.to_dict(),
        "git_sha": rec.info.git_sha,
    }
    rows: dict[str, dict[str, Any]] = {}
    for r in rec.results:
        m = {x.name: x.value for x in r.metrics}
        row: dict[str, Any] = {"label": r.key.label(), "test": r.key.test, "error": r.error}
        if "time.median" in m:
            lo99, hi99 = median_ci(r.samples, CONFIDENCE) if r.samples else (None, None)
            row.update(
                median=m["time.median"],
                ci95=[m.get("time.ci_low"), m.get("time.ci_high")],
                ci99=[lo99, hi99],
                n=len(r.samples),
            )
        try:
            state = json.loads(r.artifacts.get("timing", "{}")).get("gpu_state_start") or {}
        except ValueError:
            state = {}
        row["gpu_pci_bus_id"] = state.get("pci_bus_id")
        row["gpu_uuid"] = state.get("uuid")
        rows[r.key.id] = row
    return run, rows


_KEYS = {"run_variants": "''", "metrics": "name", "samples": "seq", "blobs": "name"}


def db_keys(db: Path) -> set[tuple[str, str, str]]:
    """(table, variant, name or seq) of every row of a database's run tables: what a merge of
    shards (one run) must keep, whichever run id each input had."""
    import sqlite3

    c = sqlite3.connect(db)
    try:
        return {
            (t, vid, str(k))
            for t, col in _KEYS.items()
            for vid, k in c.execute(f"SELECT variant_id, {col} FROM {t}")  # noqa: S608 - fixed names
        }
    finally:
        c.close()


def merge_check(shards: list[Path], merged: Path) -> dict[str, Any]:
    """Rows of the shards missing from the merged database (the same row in both shards, e.g. a
    variant two shards compiled, is one row there)."""
    if not merged.exists() or not all(p.exists() for p in shards):
        return {"error": "a database is missing"}
    union = set().union(*(db_keys(p) for p in shards))
    missing = sorted(union - db_keys(merged))
    return {
        "shard_rows": len(union),
        "merged_rows": len(union) - len(missing),
        "missing": len(missing),
        "missing_examples": [list(k) for k in missing[:20]],
    }


def _read(db: Path) -> dict[str, Any]:
    if not db.exists():
        return {"error": f"{db.name} was not written"}
    try:
        run, rows = variant_rows(db)
    except Exception as e:  # a broken run is a result (a missed target), not a crash of the eval
        return {"error": f"{db.name}: {type(e).__name__}: {e}"}
    return {"run": run, "variants": rows}


# ---------------------------------------------------------------------------------------------
# steps


def step_one_gpu(
    a: argparse.Namespace, out: Path, liger: Path | None, timeout: float, name: str = "one_gpu"
) -> dict[str, Any]:
    """The selection alone on GPU 0; ``name`` "aa_one_gpu" runs it again for the A/A scale."""
    work = _fresh(out / name)
    cmd = pytest_cmd(a.python, selection(liger), work / "run.db", a.dry_run_cpu, [])
    env = run_env(work, liger, a.dry_run_cpu, None if a.dry_run_cpu else "0", a.timing_budget_s)
    proc = run_pytest(name, cmd, env, out / f"fleet_eval.{name}.log", timeout)
    return {
        "procs": {"gpu0": proc},
        "pinned": {"gpu0": "0"},
        "wall_s": proc["wall_s"],
        "db": _read(work / "run.db"),
    }


def step_aa_one_gpu(a: argparse.Namespace, out: Path, liger: Path | None, timeout: float) -> dict[str, Any]:
    return step_one_gpu(a, out, liger, timeout, name="aa_one_gpu")


def step_xdist_2(a: argparse.Namespace, out: Path, liger: Path | None, timeout: float) -> dict[str, Any]:
    work = _fresh(out / "xdist_2")
    cmd = pytest_cmd(a.python, selection(liger), work / "run.db", a.dry_run_cpu, ["-n", "2"])
    env = run_env(work, liger, a.dry_run_cpu, None if a.dry_run_cpu else "0,1", a.timing_budget_s)
    proc = run_pytest("xdist_2", cmd, env, out / "fleet_eval.xdist_2.log", timeout)
    # the plugin hands gwN the N-th entry of CUDA_VISIBLE_DEVICES
    return {
        "procs": {"xdist": proc},
        "pinned": {"gw0": "0", "gw1": "1"},
        "wall_s": proc["wall_s"],
        "db": _read(work / "run.db"),
    }


def step_shards_2(a: argparse.Namespace, out: Path, liger: Path | None, timeout: float) -> dict[str, Any]:
    work = _fresh(out / "shards_2")
    procs: dict[str, dict[str, Any]] = {}

    def shard(i: int) -> None:
        sub = work / f"shard{i}"
        sub.mkdir()
        cmd = pytest_cmd(
            a.python, selection(liger), sub / "run.db", a.dry_run_cpu, ["--kperf-shard", f"{i}/2"]
        )
        env = run_env(sub, liger, a.dry_run_cpu, None if a.dry_run_cpu else str(i - 1), a.timing_budget_s)
        procs[f"shard{i}"] = run_pytest(f"shard {i}/2", cmd, env, out / f"fleet_eval.shard{i}.log", timeout)

    t0 = time.monotonic()
    threads = [threading.Thread(target=shard, args=(i,)) for i in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dbs = [work / f"shard{i}" / "run.db" for i in (1, 2)]
    merge_cmd = [a.kperf, "merge", *map(str, dbs), "-o", str(work / "merged.db"), "--shards"]
    rc, merge_out = (
        run_group(merge_cmd, ROOT, dict(os.environ), 120)
        if all(p.exists() for p in dbs)
        else (None, "a shard wrote no database")
    )
    wall = time.monotonic() - t0
    (out / "fleet_eval.merge.log").write_text(
        f"$ kperf merge shard1/run.db shard2/run.db -o merged.db --shards\n(exit {rc})\n{merge_out}"
    )
    print(f"{NAME} shards_2: merge exit {rc}; {wall:.1f} s with the merge", flush=True)
    return {
        "procs": procs,
        "pinned": {"shard1": "0", "shard2": "1"},
        "wall_s": wall,
        "merge": {"exit_code": rc, "output": merge_out.strip()[-2000:]},
        "shards": {f"shard{i}": _read(db) for i, db in zip((1, 2), dbs, strict=True)},
        "merge_rows": merge_check(dbs, work / "merged.db"),
        "db": _read(work / "merged.db"),
    }


def _fresh(d: Path) -> Path:
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    return d


# ---------------------------------------------------------------------------------------------
# render (from the part files only)


def _gpu_of(pinned: str, gpus: list[dict[str, str]]) -> dict[str, str] | None:
    return next((g for g in gpus if g["index"] == pinned or g["uuid"] == pinned), None)


def _same_bus(a: str | None, b: str | None) -> bool:
    return bool(a and b) and a.lower() == b.lower()


def placement(part: dict[str, Any], run: str, gpus: list[dict[str, str]]) -> dict[str, Any]:
    """Per variant: the GPU its timing names and the GPU its process (worker, shard) was pinned
    to; ``wrong`` lists the variants timed elsewhere or where either cannot be told."""
    where: dict[str, dict[str, Any]] = {}
    if run == "shards_2":
        for proc, sub in part.get("shards", {}).items():
            for vid, row in sub.get("variants", {}).items():
                where.setdefault(vid, {"proc": proc, **_where(row)})
    else:
        workers = next(iter(part["procs"].values())).get("workers", {})
        for vid, row in part["db"].get("variants", {}).items():
            proc = "gpu0" if run == "one_gpu" else workers.get(row["test"])
            where[vid] = {"proc": proc, **_where(row)}
    wrong = []
    for vid, w in where.items():
        pin = part["pinned"].get(w["proc"] or "")
        want = _gpu_of(pin, gpus) if pin is not None else None
        w["pinned_gpu"] = want["index"] if want else None
        if w.get("gpu_pci_bus_id") is None:
            continue  # not timed (a static-only row): nothing to place
        got = next((g["index"] for g in gpus if _same_bus(g["pci_bus_id"], w["gpu_pci_bus_id"])), None)
        w["timed_gpu"] = got
        if want is None or got != want["index"]:
            wrong.append(vid)
    return {"variants": where, "wrong": sorted(wrong)}


def _where(row: dict[str, Any]) -> dict[str, Any]:
    return {"gpu_pci_bus_id": row.get("gpu_pci_bus_id"), "gpu_uuid": row.get("gpu_uuid")}


def agrees(ref: dict[str, Any], cur: dict[str, Any]) -> tuple[bool, float | None, bool | None]:
    """(agree, ratio, intervals overlap): each median within the other's 99% interval, or the two
    within 1%."""
    if ref.get("median") is None or cur.get("median") is None or not ref["median"]:
        return False, None, None
    ratio = cur["median"] / ref["median"]
    (rlo, rhi), (clo, chi) = ref.get("ci99") or (None, None), cur.get("ci99") or (None, None)
    within = None
    if None not in (rlo, rhi, clo, chi):
        within = rlo <= cur["median"] <= rhi and clo <= ref["median"] <= chi
    return bool(within) or abs(ratio - 1) <= MEDIAN_REL, ratio, within


def _aa(ref: dict[str, Any], part: dict[str, Any] | None) -> dict[str, Any] | None:
    """The reference against a second one-GPU run: comparisons made, how many agree."""
    if part is None:
        return None
    cur = part["db"].get("variants", {})
    pairs = [(row, cur[vid]) for vid, row in ref.items() if vid in cur and row.get("median") is not None]
    results = [agrees(r, c) for r, c in pairs]
    return {
        "n": len(results),
        "agree": sum(1 for ok, _, _ in results if ok),
        "ratios": [x for _, x, _ in results if x is not None],
        "wall_s": part["wall_s"],
    }


def _name_by_test(parts: dict[str, dict[str, Any]]) -> None:
    """A variant's label (kernel, GPU, options) is shared by every test that launches the kernel:
    each row is named by its label and its test, so the per-variant figures do not overwrite
    each other (a first render counted 30 comparisons as 11)."""
    tables = [p.get("db", {}).get("variants", {}) for p in parts.values()]
    tables += [sub.get("variants", {}) for p in parts.values() for sub in p.get("shards", {}).values()]
    for table in tables:
        for row in table.values():
            test = str(row.get("test") or "").rsplit("::", 1)[-1]
            if test and not row["label"].endswith(f" @ {test}"):
                row["label"] = f"{row['label']} @ {test}"


def assemble(parts: dict[str, dict[str, Any]], commit: str) -> dict[str, Any]:
    """The result document from the step parts; raises UsageError when the reference is missing."""
    if "one_gpu" not in parts:
        raise UsageError("no fleet_eval.part-one_gpu.json in --out: run the one_gpu step first")
    machine = next((p["machine"] for p in parts.values() if p.get("machine")), {})
    gpus = machine.get("gpus", [])
    _name_by_test(parts)
    ref_part = parts["one_gpu"]
    ref = ref_part["db"].get("variants", {})
    fp = ref_part["db"].get("run", {}).get("fingerprint", {})
    dry = bool(ref_part.get("dry_run_cpu"))
    wall = {r: parts[r]["wall_s"] if r in parts else None for r in RUNS}
    variants, lost, ratios, disagree, misplaced = {}, [], {}, [], {}
    for run in RUNS:
        if run not in parts:
            continue
        p = placement(parts[run], run, gpus)
        misplaced[run] = p["wrong"]
        if run == "one_gpu":
            for vid, w in p["variants"].items():
                variants[vid] = {"label": ref[vid]["label"], "one_gpu": {**ref[vid], **w}}
            continue
        cur = parts[run]["db"].get("variants", {})
        for vid, row in ref.items():
            if vid not in cur:
                lost.append({"run": run, "variant": row["label"]})
                continue
            variants[vid][run] = {**cur[vid], **p["variants"].get(vid, {})}
            if row.get("median") is None:
                continue
            ok, ratio, within = agrees(row, cur[vid])
            ratios.setdefault(row["label"], {})[run] = ratio
            variants[vid][run].update(ratio=ratio, ci99_overlap=within, agrees=ok)
            if not ok:
                disagree.append({"run": run, "variant": row["label"], "ratio": ratio})
        for vid, row in cur.items():
            if vid not in ref:
                variants.setdefault(vid, {"label": row["label"]})[run] = row  # new: shown, not lost
    merge_rows = None
    if "shards_2" in parts:
        sh = parts["shards_2"]
        merge_rows = {**sh.get("merge_rows", {}), "exit_code": sh["merge"]["exit_code"]}
    merge_lost = (merge_rows or {}).get("missing", 0)
    result: dict[str, Any] = {
        "device": fp.get("gpu") or (gpus[0]["name"] if gpus else None) or ("CPU (dry run)" if dry else None),
        "gpus": gpus,
        "dry_run_cpu": dry,
        "versions": {
            "torch": fp.get("torch"),
            "triton": fp.get("triton"),
            "python": fp.get("python"),
            "driver": fp.get("driver"),
            "cuda": fp.get("cuda"),
            "kperf_ci": commit,
        },
        "selection": ref_part.get("selection"),
        "timing_budget_s": ref_part.get("timing_budget_s"),
        "wall_s": wall,
        "wall_ratio": {
            r: (wall[r] / wall["one_gpu"] if wall[r] and wall["one_gpu"] else None) for r in RUNS[1:]
        },
        "procs": {r: parts[r]["procs"] for r in RUNS if r in parts},
        "variants": variants,
        "median_ratio": ratios,
        "rows_lost": len(lost) + merge_lost,
        "lost_variants": lost,
        "merge_rows": merge_rows,
        "misplaced": misplaced,
        "disagree": disagree,
        "aa_one_gpu": _aa(ref, parts.get("aa_one_gpu")),
    }
    result["targets"] = targets(result, parts)
    result["missed"] = [t["name"] for t in result["targets"] if t["ok"] is False]
    return result


def targets(r: dict[str, Any], parts: dict[str, Any]) -> list[dict[str, Any]]:
    dry = r["dry_run_cpu"]
    out = []
    runs = [x for x in RUNS if x in parts]
    missing_runs = [x for x in RUNS if x not in parts]
    timed = [v for v in r["variants"].values() if "one_gpu" in v and v["one_gpu"].get("gpu_pci_bus_id")]
    wrong = {run: len(v) for run, v in r["misplaced"].items()}
    if dry:
        out.append(
            {"name": "pinned GPU", "ok": None, "measured": "not applicable (static mode: nothing timed)"}
        )
    else:
        ok = not missing_runs and bool(timed) and not any(wrong.values())
        out.append(
            {
                "name": "pinned GPU",
                "ok": ok,
                "measured": f"{len(timed)} timed variants; timed off their pinned GPU (or not told): "
                + ", ".join(f"{k} {n}" for k, n in wrong.items())
                + (f"; runs missing: {', '.join(missing_runs)}" if missing_runs else ""),
            }
        )
    bad_exit = [
        f"{run}/{name} exit {p['exit_code']}"
        for run in runs
        for name, p in r["procs"][run].items()
        if p["exit_code"] != 0
    ]
    mr = r["merge_rows"] or {}
    out.append(
        {
            "name": "no rows lost",
            "ok": not missing_runs and r["rows_lost"] == 0 and mr.get("exit_code") == 0,
            "measured": f"{r['rows_lost']} lost ({len(r['lost_variants'])} variants missing from a 2-GPU "
            f"run; merge kept {mr.get('merged_rows')} of {mr.get('shard_rows')} distinct shard rows, "
            f"exit {mr.get('exit_code')})"
            + (f"; processes failing: {', '.join(bad_exit)}" if bad_exit else ""),
        }
    )
    for run in RUNS[1:]:
        ratio = r["wall_ratio"].get(run)
        out.append(
            {
                "name": f"wall {run}",
                "ok": None if dry else (ratio is not None and ratio <= WALL_RATIO_MAX),
                "measured": f"{ratio:.2f}x the one-GPU run (target <= {WALL_RATIO_MAX}x)"
                if ratio is not None
                else "not run",
            }
        )
    if dry:
        out.append(
            {"name": "medians agree", "ok": None, "measured": "not applicable (static mode: no medians)"}
        )
    else:
        n = sum(1 for v in r["median_ratio"].values() for x in v.values() if x is not None)
        out.append(
            {
                "name": "medians agree",
                "ok": n > 0 and not r["disagree"] and not missing_runs,
                "measured": f"{n - len(r['disagree'])} of {n} comparisons within each other's 99% "
                "interval or 1%"
                + (
                    f"; for scale, a second one-GPU run alone agreed with the first on "
                    f"{r['aa_one_gpu']['agree']} of {r['aa_one_gpu']['n']}"
                    if r.get("aa_one_gpu")
                    else ""
                ),
            }
        )
    return out


def _fmt(x: float | None, spec: str = ".2f", none: str = "-") -> str:
    return none if x is None else format(x, spec)


def render_md(r: dict[str, Any]) -> str:
    title = "Fleet evaluation (issue 26)" + (
        " -- CPU dry run, static mode, not an evaluation" if r["dry_run_cpu"] else ""
    )
    v = r["versions"]
    gpus = (
        "; ".join(f"{g['index']}: {g['name']} {g['pci_bus_id']}" for g in r["gpus"])
        or "none seen by nvidia-smi"
    )
    lines = [
        f"# {title}",
        "",
        "Written by `benchmarks/fleet_eval.py` from its part files.",
        "",
        f"- machine: {r['device']}; GPUs: {gpus}",
        f"- versions: torch {v['torch']}, triton {v['triton']}, driver {v['driver']}, CUDA {v['cuda']}, "
        f"kperf-ci {v['kperf_ci']}",
        f"- selection: `{' '.join(r['selection'] or [])}` with `--kperf-all`, "
        f"timing budget {r['timing_budget_s']} s per variant, empty caches per process",
        "- intervals: the stored time.ci_low/high are 95%; the 99% intervals are the same distribution-free "
        "estimator (kperf_ci.sample_stats.median_ci) on each variant's stored samples",
        "",
        "| run | wall s | x one GPU | processes |",
        "|---|---|---|---|",
    ]
    for run in RUNS:
        procs = r["procs"].get(run, {})
        desc = "; ".join(
            f"{name} (CUDA_VISIBLE_DEVICES={p['cuda_visible_devices'] or 'unset'}): "
            f"exit {p['exit_code']}, {p['summary'] or '?'}"
            for name, p in procs.items()
        )
        ratio = 1.0 if run == "one_gpu" and r["wall_s"][run] else r["wall_ratio"].get(run)
        lines.append(f"| {run} | {_fmt(r['wall_s'][run], '.1f')} | {_fmt(ratio)} | {desc or 'not run'} |")
    lines += ["", "## Targets", "", "| target | result | measured |", "|---|---|---|"]
    for t in r["targets"]:
        res = "n/a" if t["ok"] is None else ("PASS" if t["ok"] else "FAIL")
        lines.append(f"| {t['name']} | {res} | {t['measured']} |")
    lines += ["", f"missed: {', '.join(r['missed']) or 'none'}", ""]
    lines += [
        "## Variants",
        "",
        "| variant | GPU (one / xdist / shard) | median ms one GPU | xdist_2 ratio | shards_2 ratio |",
        "|---|---|---|---|---|",
    ]
    for vid in sorted(r["variants"], key=lambda k: r["variants"][k]["label"]):
        row = r["variants"][vid]

        def gpu(run: str, row: dict[str, Any] = row) -> str:
            w = row.get(run) or {}
            t, p = w.get("timed_gpu"), w.get("pinned_gpu")
            return (
                "-"
                if t is None and p is None
                else f"{t if t is not None else '?'}" + ("" if t == p else f" (pinned {p})")
            )

        def ratio(run: str, row: dict[str, Any] = row) -> str:
            w = row.get(run) or {}
            if run not in row:
                return "lost" if "one_gpu" in row else "-"
            if w.get("ratio") is None:
                return "-"
            mark = "in 99% CI" if w.get("ci99_overlap") else ("within 1%" if w.get("agrees") else "DIFFERS")
            return f"{w['ratio']:.4f} ({mark})"

        med = (row.get("one_gpu") or {}).get("median")
        lines.append(
            f"| {row['label'][:90]} | {gpu('one_gpu')} / {gpu('xdist_2')} / {gpu('shards_2')} | "
            f"{_fmt(med, '.5g')} | {ratio('xdist_2')} | {ratio('shards_2')} |"
        )
    if r["lost_variants"]:
        lines += ["", "Lost: " + "; ".join(f"{x['run']}: {x['variant']}" for x in r["lost_variants"])]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------


def load_parts(out: Path) -> dict[str, dict[str, Any]]:
    parts = {}
    for run in (*RUNS, "aa_one_gpu"):
        f = out / f"{NAME}.part-{run}.json"
        if f.exists():
            try:
                parts[run] = json.loads(f.read_text())
            except ValueError as e:
                raise UsageError(f"{f}: not JSON ({e})") from None
    return parts


def render(out: Path, dest: Path) -> dict[str, Any]:
    result = assemble(load_parts(out), os.environ.get("KPERF_EVAL_COMMIT") or _part_commit(out))
    dest.mkdir(parents=True, exist_ok=True)
    write_json(dest / f"{NAME}.json", result)
    (dest / f"{NAME}.md").write_text(render_md(result))
    return result


def _part_commit(out: Path) -> str:
    for run in RUNS:
        f = out / f"{NAME}.part-{run}.json"
        if f.exists():
            return json.loads(f.read_text()).get("kperf_commit") or "unknown"
    return kperf_commit()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory of logs, databases and part files")
    ap.add_argument("--steps", default=",".join(STEPS), help=f"comma list of {', '.join(STEPS)}")
    ap.add_argument("--liger", default=str(ROOT / ".liger"), help="exported Liger-Kernel (src/, test/)")
    ap.add_argument(
        "--results",
        default=None,
        help="where fleet_eval.{json,md} go (default benchmarks/results; --out with --dry-run-cpu)",
    )
    ap.add_argument("--dry-run-cpu", action="store_true", help="static mode, examples only, no GPU")
    ap.add_argument("--timing-budget-s", type=float, default=1.0, help="KPERF_TIMING_BUDGET_S of every run")
    ap.add_argument(
        "--deadline-s",
        type=float,
        default=540.0,
        help="all steps together; the later steps "
        "share what the earlier left (a step past it is killed and reported)",
    )
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--kperf", default=shutil.which("kperf") or "kperf")
    a = ap.parse_args(argv)
    try:
        return _main(a)
    except UsageError as e:
        print(f"{NAME}: {e}", file=sys.stderr)
        return 2


def _main(a: argparse.Namespace) -> int:
    steps = [s for s in a.steps.split(",") if s]
    if unknown := [s for s in steps if s not in STEPS]:
        raise UsageError(f"unknown step(s) {', '.join(unknown)} (steps: {', '.join(STEPS)})")
    if not a.timing_budget_s > 0 or not a.deadline_s > 0:
        raise UsageError("--timing-budget-s and --deadline-s must be positive")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = [s for s in steps if s in (*RUNS, "aa_one_gpu")]
    liger = None if a.dry_run_cpu else Path(a.liger).resolve()
    if runs and liger is not None and not (liger / "src" / "liger_kernel").is_dir():
        raise UsageError(f"{liger} holds no src/liger_kernel: export it with realrepo_ab_eval.py --export")
    gpus = nvidia_gpus()
    if runs and not a.dry_run_cpu:
        if len(gpus) < 2:
            raise UsageError(
                f"the runs need two GPUs and nvidia-smi lists {len(gpus)} (--dry-run-cpu: no GPU)"
            )
        import importlib.util

        if importlib.util.find_spec("xdist") is None:
            raise UsageError("pytest-xdist is not installed (carry its wheel and execnet's in .whl/)")
    machine = {"gpus": gpus}
    t0 = time.monotonic()
    for i, run in enumerate(runs):
        left = a.deadline_s - (time.monotonic() - t0)
        # the reference takes about twice as long as a 2-GPU run: half of what is left
        timeout = left / 2 if run == "one_gpu" and len(runs) > 1 else left / (len(runs) - i)
        step = {
            "one_gpu": step_one_gpu,
            "xdist_2": step_xdist_2,
            "shards_2": step_shards_2,
            "aa_one_gpu": step_aa_one_gpu,
        }[run]
        part = step(a, out, liger, max(timeout, 30.0))
        part.update(
            machine=machine,
            dry_run_cpu=a.dry_run_cpu,
            selection=shown_selection(liger),
            timing_budget_s=None if a.dry_run_cpu else a.timing_budget_s,
            kperf_commit=kperf_commit(),
        )
        write_json(out / f"{NAME}.part-{run}.json", part)
    if "render" in steps:
        dest = Path(a.results) if a.results else (out if a.dry_run_cpu else RESULTS)
        result = render(out, dest)
        print(render_md(result))
        print(f"{NAME}: wrote {dest / (NAME + '.json')} and .md", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
