"""The CPU runner on real repositories (issue 35): static mode over a corpus, as a new user runs it.

Writes benchmarks/results/cpu_corpus_eval.{json,md}; every number and sentence of the .md comes from
this script, rendered from the json, which is assembled from one part file per repository
(``cpu_corpus_eval.part-<repo>.json`` in ``--out``), so repositories can run in separate calls.

The corpus is fetched at run time (``--src NAME=PATH_OR_URL``: a git URL, or a local clone or
mirror on a machine without network) at a pinned commit, and never committed here. Each
repository's own tests run unmodified, from a checkout of the pinned commit:

* ``plain``: ``python -m pytest -q <selection>`` with ``TRITON_INTERPRET=1``: what the suite costs
  on a CPU without kperf-ci (most GPU tests fail or skip fast there);
* ``kperf``: ``python -m pytest <selection> --kperf --kperf-all`` as the README says, with a small
  counting plugin (``benchmarks/_suites_counter.py``: each test's outcome and Triton launches).
  The peak resident memory of the whole process tree (pytest and kperf's compile workers) is
  sampled from /proc every 0.2 s. Per repository: tests selected, tests the repository itself
  skips on a CPU, tests that launched a Triton kernel, tests with at least one compiled variant
  (a stored variant with metrics, no compile error), kernels;
* ``ab_cases``: a two-commit git repository (commit 1 = the checkout, commit 2 = a planted patch)
  and ``kperf ab --base HEAD~1 --json`` over the case's tests, as a CI job would run it. The status
  of the planted kernel's launches is read from the A/B document: ``changed`` (with what changed),
  ``identical`` or ``unknown``. Cases: ``launch_option`` (one kernel's launch option or autotune
  config list changed) and ``comment_only`` (a comment added inside another kernel).

``coverage`` = tests with compiled variants / (tests selected - tests skipped), over all
repositories; a test that fails before its first launch counts against it.

    python benchmarks/cpu_corpus_eval.py --src liger=/path/Liger-Kernel --src fla=/path/fla ...
    python benchmarks/cpu_corpus_eval.py --repos ''          # render the json + md from the parts
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))
from _common import kperf_commit  # noqa: E402 - the one reader of the measured commit
from realrepo_ab_eval import Plant, apply_plant, commit_all, git  # noqa: E402 - one way to plant

from kperf_ci import store  # noqa: E402
from kperf_ci.prcheck.passes import load_manifest  # noqa: E402

NAME = "cpu_corpus_eval"
RESULTS = ROOT / "benchmarks" / "results"
TIMEOUT_S = 1500  # one pytest or kperf ab process


@dataclass
class Case:
    name: str  # launch_option | comment_only
    kernel: str  # the Triton kernel's function name
    plant: Plant
    expected: str  # changed | identical
    expect_text: str  # what the launch diff must name for a launch_option case ("" for none)
    tests: list[str]  # pytest arguments: the tests that launch the kernel
    env: dict[str, str] = field(default_factory=dict)  # set for kperf ab only
    expected_exit: int | None = None  # checked when set (the nothing-compiled case: 2)


@dataclass
class Repo:
    name: str
    url: str
    commit: str
    paths: list[str]  # what to check out (a repository's LFS or missing blobs stay out)
    pythonpath: list[str]  # relative to the checkout
    tests: list[str]  # pytest arguments: the selection
    why: str  # why these tests: one line for the md
    patterns: str  # how its kernels are written
    cases: list[Case] = field(default_factory=list)


L = "test/transformers/"
_LIGER_SOFTMAX = "src/liger_kernel/ops/softmax.py"
_LIGER_LN = "src/liger_kernel/ops/layer_norm.py"
_FLA_L2 = "fla/modules/l2norm.py"
_MAMBA_LN = "mamba_ssm/ops/triton/layernorm_gated.py"
_ATT_SOFTMAX = "attorch/softmax_kernels.py"
_ATT_RMS = "attorch/rms_norm_kernels.py"
_FLA_FWD = (
    ' for BT in BT_LIST],\n    key=["D", "NB"],\n    **autotune_cache_kwargs,\n)\n'
    '@triton.jit(do_not_specialize=["T"])\ndef l2norm_fwd_kernel('
)
# the A/B cases run on a part of the selection: two passes of a whole selection cost minutes each
_MAMBA_K = "2048 and wtype0-dtype0-True-True"
_ATT_K = "False-input_dtype0 and (shape0 or shape4 or shape11 or shape13)"

REPOS = [
    Repo(
        "liger",
        "https://github.com/linkedin/Liger-Kernel.git",
        "ead96b618e5c67bddc6a6e9bcb99bfe6b5ab661c",
        ["src", "test/__init__.py", "test/conftest.py", "test/utils.py", "test/transformers"],
        ["src", "."],
        [L + "test_softmax.py", L + "test_layer_norm.py"],
        "softmax and layer norm: plain @triton.jit launches with explicit num_warps",
        "jit",
        [
            Case(
                "launch_option",
                "_softmax_single_block_forward_kernel",
                Plant(
                    _LIGER_SOFTMAX,
                    "BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps\n        )\n"
                    "        multi_block_launch = False",
                    "BLOCK_SIZE=BLOCK_SIZE, num_warps=max(num_warps // 2, 1)\n        )\n"
                    "        multi_block_launch = False",
                ),
                "changed",
                "num_warps",
                [L + "test_softmax.py"],
            ),
            Case(
                "comment_only",
                "_layer_norm_forward_kernel",
                Plant(
                    _LIGER_LN,
                    "def _layer_norm_forward_kernel(",
                    "def _layer_norm_forward_kernel(  # planted comment",
                ),
                "identical",
                "",
                # bf16 layer norms fail under Triton's interpreter with or without kperf-ci, and
                # kperf ab refuses a head whose tests fail: deselected, as the README says
                [L + "test_layer_norm.py", "-k", "not dtype1"],
            ),
        ],
    ),
    Repo(
        "flash-linear-attention",
        "https://github.com/fla-org/flash-linear-attention.git",
        "bc3b101dcb713ddc5bd8924b66754eb68b5ccf89",
        [
            "fla",
            "tests/conftest.py",
            "tests/modules/test_l2norm.py",
            "tests/modules/test_layernorm.py",
            "tests/ops/utils/test_cumsum.py",
        ],  # fmt: skip
        ["."],
        [
            "tests/modules/test_l2norm.py",
            "tests/ops/utils/test_cumsum.py",
            "-k",
            "test_l2norm or T63 or T500",
        ],
        "l2norm, and chunked cumsum at its two smallest shapes (2 cores): fla's own autotuner"
        " (fla_cache_autotune, a config cache over Triton's Autotuner), do_not_specialize, META grids",
        "custom_autotuner",
        [
            Case(
                "launch_option",
                "l2norm_fwd_kernel",
                Plant(
                    _FLA_L2,
                    "num_warps in [1, 2, 4, 8, 16]" + _FLA_FWD,
                    "num_warps in [1, 2, 4, 8]" + _FLA_FWD,
                ),
                "changed",
                "num_warps",
                ["tests/modules/test_l2norm.py"],
            ),
            Case(
                "comment_only",
                "l2norm_bwd_kernel",
                Plant(_FLA_L2, "def l2norm_bwd_kernel(", "def l2norm_bwd_kernel(  # planted comment"),
                "identical",
                "",
                ["tests/modules/test_l2norm.py"],
            ),
        ],
    ),
    Repo(
        "mamba",
        "https://github.com/state-spaces/mamba.git",
        "e9594ce1c732d97440f0332fdc43170a2294dbfa",
        [
            "mamba_ssm",
            "tests/ops/triton/test_layernorm_gated.py",
            "tests/ops/triton/test_selective_state_update.py",
        ],
        ["."],
        ["tests/ops/triton/test_layernorm_gated.py", "-k", "2048"],
        "gated layer norm (d=2048): @triton.heuristics kernels behind `with torch.cuda.device(...)` wrappers",
        "heuristics",
        [
            Case(
                "launch_option",
                "_layer_norm_fwd_1pass_kernel",
                Plant(
                    _MAMBA_LN,
                    "    num_warps = min(max(BLOCK_N // 256, 1), 8)\n    grid = (M, ngroups)",
                    "    num_warps = min(max(BLOCK_N // 512, 1), 8)\n    grid = (M, ngroups)",
                ),
                "changed",
                "num_warps",
                ["tests/ops/triton/test_layernorm_gated.py", "-k", _MAMBA_K],
            ),
            Case(
                "comment_only",
                "_layer_norm_fwd_1pass_kernel",
                Plant(
                    _MAMBA_LN,
                    "def _layer_norm_fwd_1pass_kernel(",
                    "def _layer_norm_fwd_1pass_kernel(  # planted comment",
                ),
                "identical",
                "",
                ["tests/ops/triton/test_layernorm_gated.py", "-k", _MAMBA_K],
            ),
        ],
    ),
    Repo(
        "attorch",
        "https://github.com/BobMcDear/attorch.git",
        "",
        ["attorch", "tests"],
        ["."],
        ["tests/test_softmax_layers.py", "tests/test_rms_norm_layer.py", "-k", _ATT_K],
        "softmax and RMS norm at four shapes, fp32: autotune over heuristics, configs built at import "
        "from torch.cuda.get_device_properties",
        "autotune+heuristics",
        [
            Case(
                "launch_option",
                "softmax_forward_kernel",
                Plant(
                    _ATT_SOFTMAX,
                    "@triton.autotune(\n    configs=warps_kernel_configs(),\n    key=['batch_dim', "
                    "'feat_dim'],\n)\n@triton.heuristics({'BLOCK_SIZE_BATCH': BLOCK_SIZE_BATCH_heuristic,\n"
                    "                    'BLOCK_SIZE_FEAT': "
                    "lambda args: next_power_of_2(args['feat_dim'])})\n"
                    "@triton.jit\ndef softmax_forward_kernel(",
                    "@triton.autotune(\n    configs=warps_kernel_configs()[:-1],\n    key=['batch_dim', "
                    "'feat_dim'],\n)\n@triton.heuristics({'BLOCK_SIZE_BATCH': BLOCK_SIZE_BATCH_heuristic,\n"
                    "                    'BLOCK_SIZE_FEAT': "
                    "lambda args: next_power_of_2(args['feat_dim'])})\n"
                    "@triton.jit\ndef softmax_forward_kernel(",
                ),
                "changed",
                "num_warps",
                ["tests/test_softmax_layers.py", "-k", _ATT_K],
            ),
            Case(
                "comment_only",
                "rms_norm_forward_kernel",
                Plant(
                    _ATT_RMS,
                    "def rms_norm_forward_kernel(",
                    "def rms_norm_forward_kernel(  # planted comment",
                ),
                "identical",
                "",
                ["tests/test_rms_norm_layer.py", "-k", _ATT_K],
            ),
        ],
    ),
]


def _nothing_compiles(repo: Repo) -> Case:
    """The comment-only patch again, with a compiler that cannot run (``TRITON_PTXAS_PATH`` naming
    a program that fails, as a broken toolchain on a runner would): nothing can be compared, and
    the check must say so with exit 2, never pass."""
    c = next(c for c in repo.cases if c.name == "comment_only")
    return Case(
        "nothing_compiled", c.kernel, c.plant, "exit 2", "", c.tests, {"TRITON_PTXAS_PATH": "/bin/false"}, 2
    )


for _r in REPOS:
    _r.cases.append(_nothing_compiles(_r))
BY_NAME = {r.name: r for r in REPOS}


# ---------------------------------------------------------------------------------------------
# processes


def _tree_rss_kb(pgid: int) -> int:
    """Resident memory of every process in the process group, summed (pytest + compile workers)."""
    total = 0
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            stat = (p / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[2]) != pgid:  # field 5 of stat: the process group
                continue
            total += int((p / "statm").read_text().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
        except (OSError, ValueError, IndexError):
            continue
    return total


def run_sampled(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float) -> dict[str, Any]:
    """Run ``cmd`` in its own process group; its exit code (None on a timeout, the whole group
    killed), output, wall seconds and the group's peak resident memory in MB."""
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as out:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        peak, rc = 0, None
        while True:
            try:
                rc = proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                peak = max(peak, _tree_rss_kb(proc.pid))
                if time.monotonic() - t0 > timeout:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    rc = None
                    break
        wall = time.monotonic() - t0
        out.seek(0)
        text = out.read()
    return {"rc": rc, "out": text, "wall_s": round(wall, 1), "peak_rss_mb": round(peak / 1024, 1)}


def _env(repo: Path, spec: Repo, cache: Path, counts: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(repo / p) for p in spec.pythonpath] + [str(ROOT / "benchmarks")]
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["TRITON_CACHE_DIR"] = str(cache)  # an empty cache, as a CI job without a restored one
    env["TRITON_INTERPRET"] = "1"  # what the plugin sets on a CPU machine: plain runs get it too
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("KPERF_SUITES_COUNTS", None)
    if counts is not None:
        env["KPERF_SUITES_COUNTS"] = str(counts)
    return env


def checkout(spec: Repo, src: str, dest: Path) -> str:
    """The pinned commit's ``paths`` in ``dest`` (a git repository of its own later); the commit."""
    if dest.exists():
        shutil.rmtree(dest)
    full = dest.with_name(dest.name + "-clone")
    shutil.rmtree(full, ignore_errors=True)
    subprocess.run(["git", "clone", "--quiet", "--no-checkout", src, str(full)], check=True)
    commit = spec.commit or git(full, "rev-parse", "HEAD").strip()
    git(full, "checkout", "--quiet", commit, "--", *spec.paths)
    commit = git(full, "rev-parse", commit).strip()
    dest.mkdir(parents=True)
    for rel in spec.paths:
        s, d = full / rel, dest / rel
        d.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if s.is_dir() else shutil.copy2)(s, d)
    shutil.rmtree(full)
    return commit


# ---------------------------------------------------------------------------------------------
# one repository


def _counts(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _compiled(db: Path) -> tuple[set[str], set[str], int, int, list[str]]:
    """(tests with a compiled launch, kernels, variants, variants with an error, first errors).

    A test counts when one of its own launches has SASS for some arch in the run's launch
    manifest: the store keeps one variant per compiled kernel variant, attributed to one test,
    so a test whose launch compiled to the same variant as another test's (attorch's eps=1e-5
    and eps=1e-6 tests) has no variant row of its own but did compile."""
    run = store.load_run(str(db))
    kernels, errors, bad = set(), [], 0
    for r in run.results:
        kernels.add(r.key.kernel)
        if r.error or not r.metrics:
            bad += 1
            if r.error and r.error not in errors:
                errors.append(r.error)
    manifest = load_manifest(str(db), run.info.run_id) or {}
    tests = {
        test
        for test, rows in manifest.items()
        if any(c.get("sass") and not c.get("error") for row in rows for c in (row.get("code") or {}).values())
    }
    return tests, kernels, len(run.results), bad, errors[:3]


def _suffix_match(a: str, b: set[str]) -> bool:
    # pytest's node ids depend on its rootdir (a repository without pytest config can get a
    # parent directory): compare from the test file's path down
    return any(a.endswith(x) or x.endswith(a) for x in b)


def run_suite(spec: Repo, repo: Path, work: Path, python: str) -> dict[str, Any]:
    plain = run_sampled(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *spec.tests],
        repo, _env(repo, spec, work / "cache-plain"), TIMEOUT_S,
    )  # fmt: skip
    work.mkdir(parents=True, exist_ok=True)
    counts, db = work / "counts.jsonl", work / "run.db"
    counts.unlink(missing_ok=True)
    cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "_suites_counter", *spec.tests,
           "--kperf", "--kperf-all", "--kperf-db", str(db)]  # fmt: skip
    kp = run_sampled(cmd, repo, _env(repo, spec, work / "cache-kperf", counts), TIMEOUT_S)
    rows = _counts(counts)
    selected = {r["test"] for r in rows}
    skipped = {r["test"] for r in rows if r["outcome"] == "skipped"}
    launching = {r["test"] for r in rows if r["when"] == "call" and r["launches"] > 0}
    failed_before = {r["test"] for r in rows if r["outcome"] == "failed" and r["launches"] == 0}
    compiled, kernels, n_var, n_bad, errors = (set(), set(), 0, 0, [])
    if db.exists():
        try:
            compiled, kernels, n_var, n_bad, errors = _compiled(db)
        except store.StoreError as e:
            errors = [f"run not readable: {e}"]
    with_compiled = {t for t in selected if _suffix_match(t, compiled)}
    tail = "\n".join(kp["out"].rstrip().splitlines()[-25:])
    return {
        "tests_selected": len(selected),
        "tests_skipped": len(skipped),
        "tests_with_launches": len(launching),
        "tests_with_compiled_variants": len(with_compiled),
        "tests_failed_before_launch": len(failed_before),
        "kernels": len({k.rsplit("/", 1)[-1] for k in kernels}),
        "variants": n_var,
        "variants_not_compiled": n_bad,
        "first_errors": errors,
        "wall_s_plain": plain["wall_s"],
        "wall_s_kperf": kp["wall_s"],
        "peak_rss_mb": max(plain["peak_rss_mb"], kp["peak_rss_mb"]),
        "exit_code_plain": plain["rc"],
        "exit_code_kperf": kp["rc"],
        "kperf_tail": tail,
    }


def _launch_status(doc: dict[str, Any], kernel: str) -> tuple[str, str, int]:
    """(status, what changed, launches) of ``kernel``'s launches in the A/B document."""
    statuses, changes, n = set(), [], 0
    for t in doc.get("tests") or []:
        for lc in t.get("launches") or []:
            if str(lc.get("site") or "").rsplit("::", 1)[-1] != kernel:  # "path::qualname"
                continue
            n += 1
            statuses.add(lc.get("status"))
            changes += [c for c in lc.get("changes") or [] if c not in changes]
    if not n:
        return "not launched", "", 0
    for s in ("changed", "unknown", "identical"):
        if s in statuses:
            return s, "; ".join(changes)[:300], n
    return "/".join(sorted(map(str, statuses))), "; ".join(changes)[:300], n


def run_case(spec: Repo, case: Case, repo: Path, work: Path, python: str) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    dest = work / f"ab-{case.name}"
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(repo, dest)
    git(dest, "init", "-q")
    commit_all(dest, "base")
    apply_plant(dest, case.plant)
    commit_all(dest, "head")
    js = work / f"ab-{case.name}.json"
    cmd = [python, "-m", "kperf_ci", "ab", "--base", "HEAD~1", "--db", str(work / f"ab-{case.name}.db"),
           "--report-dir", str(work / f"ab-{case.name}-rep"), "--json", str(js), *case.tests,
           "--kperf-all", "-p", "no:cacheprovider"]  # fmt: skip
    r = run_sampled(cmd, dest, {**_env(dest, spec, work / f"cache-ab-{case.name}"), **case.env}, TIMEOUT_S)
    doc = json.loads(js.read_text()) if js.exists() else {}
    status, what, n = _launch_status(doc, case.kernel)
    if case.expected_exit is not None:
        right = r["rc"] == case.expected_exit
        # no A/B document on exit 2: nothing was compared, so nothing is known of the launches
        status, what = (status, what) if doc else ("unknown", f"no A/B document (kperf ab exit {r['rc']})")
    else:
        right = status == case.expected and (not case.expect_text or case.expect_text in what)
    lines = r["out"].rstrip().splitlines()
    return {
        "repo": spec.name,
        "case": case.name,
        "kernel": case.kernel,
        "expected": case.expected,
        "status": status,
        "what_changed": what,
        "launches": n,
        "right": right,
        "exit_code": r["rc"],
        "wall_s": r["wall_s"],
        "peak_rss_mb": r["peak_rss_mb"],
        "counts": doc.get("counts") or {},
        "kperf_tail": "\n".join(lines[-15:]),
    }


def check_plants(spec: Repo, repo: Path) -> None:
    """Every case's patch applies to the pinned checkout, before anything runs (apply_plant
    asserts its text occurs once)."""
    for case in spec.cases:
        scratch = repo.with_name(repo.name + "-plant")
        shutil.rmtree(scratch, ignore_errors=True)
        (scratch / case.plant.path).parent.mkdir(parents=True)
        shutil.copy2(repo / case.plant.path, scratch / case.plant.path)
        apply_plant(scratch, case.plant)
        shutil.rmtree(scratch)


def run_repo(spec: Repo, src: str, work: Path, out: Path, python: str) -> None:
    work.mkdir(parents=True, exist_ok=True)
    repo = work / spec.name
    commit = checkout(spec, src, repo)
    check_plants(spec, repo)
    print(f"{NAME}: {spec.name} {commit[:12]}: suite", flush=True)
    row = {"name": spec.name, "commit": commit, "url": spec.url, "selection": spec.tests, "why": spec.why,
           "patterns": spec.patterns, **run_suite(spec, repo, work / "suite", python)}  # fmt: skip
    cases = []
    for case in spec.cases:
        print(f"{NAME}: {spec.name}: kperf ab, {case.name}", flush=True)
        cases.append(run_case(spec, case, repo, work / "ab", python))
    part = {"kperf_commit": kperf_commit(), "repo": row, "ab_cases": cases}  # the code measured
    (out / f"{NAME}.part-{spec.name}.json").write_text(json.dumps(part, indent=1) + "\n")


# ---------------------------------------------------------------------------------------------
# the json and the md

COVERAGE_TARGET, REPO_FLOOR = 0.90, 0.75


def _cov(r: dict[str, Any]) -> float | None:
    runnable = r["tests_selected"] - r["tests_skipped"]
    return round(r["tests_with_compiled_variants"] / runnable, 4) if runnable else None


def assemble(out: Path) -> dict[str, Any]:
    parts = [json.loads(p.read_text()) for p in sorted(out.glob(f"{NAME}.part-*.json"))]
    order = {n: i for i, n in enumerate(BY_NAME)}
    parts.sort(key=lambda p: order.get(p["repo"]["name"], 99))
    repos = [{**p["repo"], "coverage": _cov(p["repo"])} for p in parts]
    cases = [c for p in parts for c in p["ab_cases"]]
    runnable = sum(r["tests_selected"] - r["tests_skipped"] for r in repos)
    compiled = sum(r["tests_with_compiled_variants"] for r in repos)
    coverage = round(compiled / runnable, 4) if runnable else None
    measured = sorted({p.get("kperf_commit") or "unknown" for p in parts})
    return {
        # the kperf-ci commit the parts measured (rendering later must not restamp it)
        "commit": measured[0] if len(measured) == 1 else " and ".join(measured),
        "machine": f"{os.cpu_count()} CPU cores, {_mem_gb()} GB memory, no GPU",
        "repos": repos,
        "ab_cases": cases,
        "coverage": coverage,
        "coverage_ok": coverage is not None
        and coverage >= COVERAGE_TARGET
        and all((r["coverage"] or 0) >= REPO_FLOOR for r in repos),
        "ab_right": sum(c["right"] for c in cases),
        "ab_cases_total": len(cases),
        "peak_rss_mb_max": max((r["peak_rss_mb"] for r in repos), default=None),
        "killed_passes": sum(c["exit_code"] in (-9, 137) or "killed" in c["kperf_tail"] for c in cases),
    }


def _mem_gb() -> int:
    try:
        kb = int(
            next(
                x for x in Path("/proc/meminfo").read_text().splitlines() if x.startswith("MemTotal")
            ).split()[1]
        )
        return round(kb / 1024 / 1024)
    except (OSError, StopIteration, ValueError):
        return 0


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1%}"


def render_md(d: dict[str, Any]) -> str:
    n = len(d["repos"])
    lines = [
        "# The CPU runner on real repositories: static mode over a corpus",
        "",
        f"kperf-ci `{d['commit']}` on {d['machine']}. Made by `python benchmarks/cpu_corpus_eval.py`"
        " (this file is written from `cpu_corpus_eval.json`). Each repository is fetched at its pinned"
        " commit and its own tests run unmodified (`pytest <selection> --kperf --kperf-all`, Triton's"
        " interpreter); the A/B cases plant one patch on top and run `kperf ab --base HEAD~1`.",
        "",
        f"**Coverage** (tests with a compiled variant / tests selected minus tests the repository skips"
        f" on a CPU, {n} repositories): {_pct(d['coverage'])}; target {COVERAGE_TARGET:.0%} overall and"
        f" {REPO_FLOOR:.0%} per repository: {'met' if d['coverage_ok'] else '**missed**'}.",
        f"**A/B**: {d['ab_right']} of {d['ab_cases_total']} planted cases right. **Memory**: peak"
        f" {d['peak_rss_mb_max']} MB for a whole process tree; {d['killed_passes']} pass(es) killed.",
        "",
        "| repository | commit | patterns | selected | skipped | launching | compiled"
        " | failed before a launch"
        " | coverage | kernels | variants (not compiled) | plain s | kperf s | peak RSS MB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in d["repos"]:
        lines.append(
            f"| {r['name']} | `{r['commit'][:10]}` | {r['patterns']} | {r['tests_selected']}"
            f" | {r['tests_skipped']}"
            f" | {r['tests_with_launches']} | {r['tests_with_compiled_variants']}"
            f" | {r['tests_failed_before_launch']}"
            f" | {_pct(r['coverage'])} | {r['kernels']} | {r['variants']} ({r['variants_not_compiled']})"
            f" | {r['wall_s_plain']} | {r['wall_s_kperf']} | {r['peak_rss_mb']} |"
        )
    lines += ["", "Selections (what each repository's row ran, and why):", ""]
    for r in d["repos"]:
        errs = (
            f" First compile errors: {'; '.join(e[:160] for e in r['first_errors'])}."
            if r["first_errors"]
            else ""
        )
        lines.append(f"- {r['name']}: `{' '.join(r['selection'])}`: {r['why']}.{errs}")
    lines += ["", "## `kperf ab` on planted pull requests", "",
              "| repository | case | kernel | expected | status | what changed | launches | exit | wall s"
              " | right |",
              "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for c in d["ab_cases"]:
        what = (c["what_changed"] or "").replace("|", "\\|")
        lines.append(
            f"| {c['repo']} | {c['case']} | `{c['kernel']}` | {c['expected']} | {c['status']} | {what}"
            f" | {c['launches']} | {c['exit_code']} | {c['wall_s']} | {'yes' if c['right'] else '**no**'} |"
        )
    return "\n".join(lines) + "\n"


def render(out: Path, results: Path) -> dict[str, Any]:
    d = assemble(out)
    results.mkdir(parents=True, exist_ok=True)
    (results / f"{NAME}.json").write_text(json.dumps(d, indent=1) + "\n")
    (results / f"{NAME}.md").write_text(render_md(d))
    return d


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", action="append", default=[], help="NAME=URL_OR_PATH (default: the GitHub URL)")
    ap.add_argument("--repos", default=",".join(BY_NAME), help="comma list; '' renders only")
    ap.add_argument("--work", default=None, help="scratch directory (default: a new temporary one)")
    ap.add_argument("--out", default=str(RESULTS / NAME), help="where the part files go")
    ap.add_argument("--results", default=str(RESULTS))
    a = ap.parse_args(argv)
    srcs = dict(s.split("=", 1) for s in a.src)
    unknown = [n for n in a.repos.split(",") if n and n not in BY_NAME]
    if unknown:
        print(f"{NAME}: unknown repository {unknown[0]!r}; one of {', '.join(BY_NAME)}", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(a.work or tempfile.mkdtemp(prefix="kperf-cpu-corpus-"))
    for name in filter(None, a.repos.split(",")):
        spec = BY_NAME[name]
        run_repo(spec, srcs.get(name, spec.url), work / name, out, sys.executable)
    d = render(out, Path(a.results))
    print(render_md(d))
    return 0


if __name__ == "__main__":
    sys.exit(main())
