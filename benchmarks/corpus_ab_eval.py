"""The PR check on a corpus of real repositories (issues 33 and 34): `kperf ab` on every way Triton
kernels are written, against CUPTI truth measured in the same job.

Writes benchmarks/results/corpus_ab_eval.{json,md}; every number and sentence of the .md comes from
this script, rendered from the json, which is assembled from one part file per repository
(``corpus_ab_eval.part-<repo>.json`` in ``--out``), so repositories run in separate device calls.

The corpus (besides Liger-Kernel, whose plain ``@triton.jit`` launches have their own evaluation in
realrepo_ab_eval) is chosen for how its kernels are written:

* flash-linear-attention: ``@triton.autotune`` (config lists of warps) and fla's own
  ``fla_cache_autotune`` (a config cache over Triton's Autotuner), ``do_not_specialize``, META grids;
* mamba: stacked ``@triton.heuristics`` behind ``with torch.cuda.device(...)``, launch options
  computed by the caller, a META grid;
* attorch: ``@triton.autotune`` over ``@triton.heuristics``, configs built at import.

Each repository is fetched at a pinned commit (``--src NAME=URL_OR_CLONE``; on the GPU machine,
which has no network, a plain copy made here with ``--export DIR``) and its own tests run
unmodified. For each, ONE planted pull request holds every case the repository's patterns allow,
each case in a kernel of its own (a kernel holds one case, so each launch's truth is its case's):
``config_cut``, ``heuristic_change``, ``launch_option``, ``arith_only``, ``traffic``, ``faster``,
``comment_only``. A ``faster`` case is planted as a pull request that removes a slowdown: the
base commit carries the slow version, the head the repository's own code. Steps per repository
(``--steps``), in one part file:

* ``plain``: ``python -m pytest -q <selection>`` in the base tree, then in the head tree, each with
  an empty Triton cache (``wall_s_plain_two_trees`` is their sum);
* ``ab``: ``kperf ab --base HEAD~1 --json ... <selection> --kperf-all`` with default settings, as a
  CI job runs it (``wall_s_ab``, its exit code and document);
* ``truth``: benchmarks/_corpus_truth.py, which shares no code with kperf-ci: each case kernel's
  launches recorded by the repository's own tests in each tree, then, in one process, the base's
  and the head's launch of each call re-launched alternately on shared buffers, the L2 flushed,
  CUPTI kernel durations (benchmarks/_cupti_truth.py); for an autotuned kernel every surviving
  config of each side first, best against best;
* ``static``: ``kperf ab --no-gpu`` on the same repository (the CPU runner's verdict), run on a CPU;
* ``aa``: ``kperf ab --time-all`` on identical trees (the export, then a note file added): issue
  32's A/A over the repository's real launches, rendered by benchmarks/timing_accuracy.py.

    python benchmarks/corpus_ab_eval.py --export corpus-export --src fla=URL ...     # here, once
    python benchmarks/corpus_ab_eval.py --src fla=corpus-export/fla --repos fla \\
        --steps plain,ab,truth --out $OUT --no-render                                 # on the GPU
    python benchmarks/corpus_ab_eval.py --src fla=... --repos fla --steps static      # on a CPU
    python benchmarks/corpus_ab_eval.py --repos ''                                    # render

The committed evaluation: the H200 parts (benchmarks/device/corpus_h200.sh, three device calls)
in benchmarks/results/corpus_ab_eval_h200/, rendered with ``--out`` there into
benchmarks/results/corpus_ab_eval.{json,md}; the earlier H100 parts and their render stay in
benchmarks/results/corpus_ab_eval/ (``--out`` and ``--results`` both there). A repository's
``kperf ab`` run again with another KPERF_COMPILE_AHEAD (the device script: ``0``, compiling at
the end only) goes in ``<out>/compile_ahead/``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import kperf_commit  # noqa: E402 - the one reader of the measured commit
from _corpus_truth import record_path  # noqa: E402 - where the truth plugin writes each kernel's record
from cpu_corpus_eval import checkout  # noqa: E402 - one way to copy a repository's pinned paths
from realrepo_ab_eval import Plant, apply_plant, commit_all, git  # noqa: E402 - one way to plant
from suites_eval import _run as run_group  # noqa: E402 - one process-group runner with a timeout

from kperf_ci.prcheck.document import gpu_seconds, gpu_seconds_text  # noqa: E402 - kperf's own count

NAME = "corpus_ab_eval"
RESULTS = ROOT / "benchmarks" / "results"
TIMEOUT_S = 560  # one process: a device call holds at most 600 s
CASE_NAMES = (
    "config_cut",
    "heuristic_change",
    "launch_option",
    "arith_only",
    "traffic",
    "faster",
    "comment_only",
)
PATTERNS = ("jit", "heuristics", "autotune", "autotune+heuristics", "custom_autotuner")


@dataclass
class Case:
    name: str  # one of CASE_NAMES
    pattern: str  # one of PATTERNS: how the kernel is decorated
    kernel: str  # the Triton kernel's function name
    plant: Plant
    what: str  # one line for the md
    tests: list[str] = field(default_factory=list)  # pytest -k expression narrowing the truth's run
    in_base: bool = False  # the base carries the plant, the head the repository's code (faster)


@dataclass
class Repo:
    name: str
    url: str
    commit: str
    paths: list[str]
    pythonpath: list[str]
    tests: list[str]  # pytest arguments: the selection
    why: str
    cases: list[Case]
    patterns: dict[str, str] = field(default_factory=dict)  # kernel -> pattern, every kernel launched


_FLA_L2 = "fla/modules/l2norm.py"
_FLA_FWD_TAIL = (
    ' for BT in BT_LIST],\n    key=["D", "NB"],\n    **autotune_cache_kwargs,\n)\n'
    '@triton.jit(do_not_specialize=["T"])\ndef l2norm_fwd_kernel('
)
_FLA_DX = "    b_dx = b_dy * b_rstd[:, None] - tl.sum(b_dy * b_y, 1)[:, None] * b_y * b_rstd[:, None]\n"
_NP2 = 'triton.next_power_of_2(args["dstate"])'
_MAMBA_LN = "mamba_ssm/ops/triton/layernorm_gated.py"
_MAMBA_SSU = "mamba_ssm/ops/triton/selective_state_update.py"
_ATT_SOFTMAX = "attorch/softmax_kernels.py"
_ATT_RMS = "attorch/rms_norm_kernels.py"
_ATT_DECO = (
    "@triton.autotune(\n    configs=warps_kernel_configs(),\n    key=['batch_dim', 'feat_dim'],\n)\n"
    "@triton.heuristics({'BLOCK_SIZE_BATCH': BLOCK_SIZE_BATCH_heuristic,\n"
    "                    'BLOCK_SIZE_FEAT': lambda args: next_power_of_2(args['feat_dim'])})\n"
    "@triton.jit\n"
)
_FLA_K = "T500 or D128 or D1024-torch.float16 or D2048-torch.bfloat16"
_ATT_K = "False-input_dtype0 and (shape0 or shape4 or shape11 or shape13)"

REPOS = [
    Repo(
        "flash-linear-attention",
        "https://github.com/fla-org/flash-linear-attention.git",
        "bc3b101dcb713ddc5bd8924b66754eb68b5ccf89",
        ["fla", "tests/conftest.py", "tests/modules/test_l2norm.py"],
        ["."],
        ["tests/modules/test_l2norm.py", "-k", _FLA_K],
        "l2norm at four of its eight shapes (two per kernel pair; each test autotunes 6 to 25 configs on"
        " a GPU): four kernels, two under @triton.autotune (warps) and two under fla's fla_cache_autotune "
        "(warps x BT, do_not_specialize, META grids)",
        [
            Case(
                "config_cut", "custom_autotuner", "l2norm_fwd_kernel",
                Plant(_FLA_L2, "num_warps in [1, 2, 4, 8, 16]" + _FLA_FWD_TAIL,
                      "num_warps in [1, 2]" + _FLA_FWD_TAIL),
                "the forward kernel's config list cut to 1 and 2 warps (of 1-16)",
            ),
            Case(
                "traffic", "custom_autotuner", "l2norm_bwd_kernel",
                Plant(_FLA_L2,
                      _FLA_DX,
                      "    b_y2 = tl.load(y + (T - 1 - o_t)[:, None] * D + o_d[None, :],"
                      " mask=m_x, other=0.0)\n" + _FLA_DX +
                      "    b_dx += b_y2.to(tl.float32) * 1e-30\n"),
                "the blocked backward kernel reads a second row block of y (another program's rows)",
            ),
            Case(
                "arith_only", "autotune", "l2norm_fwd_kernel1",
                Plant(_FLA_L2, "    b_rstd = 1 / tl.sqrt(tl.sum(b_x * b_x) + eps)\n",
                      "    b_rstd = tl.rsqrt(tl.sum(b_x * b_x) + eps)\n"),
                "1 / sqrt -> rsqrt in the one-row forward kernel",
            ),
            Case(
                "comment_only", "autotune", "l2norm_bwd_kernel1",
                Plant(_FLA_L2, "def l2norm_bwd_kernel1(\n", "def l2norm_bwd_kernel1(  # planted comment\n"),
                "a comment in the one-row backward kernel's signature",
            ),
        ],
        {"l2norm_fwd_kernel": "custom_autotuner", "l2norm_bwd_kernel": "custom_autotuner",
         "l2norm_fwd_kernel1": "autotune", "l2norm_bwd_kernel1": "autotune"},
    ),
    Repo(
        "mamba",
        "https://github.com/state-spaces/mamba.git",
        "e9594ce1c732d97440f0332fdc43170a2294dbfa",
        ["mamba_ssm", "tests/ops/triton/test_layernorm_gated.py",
         "tests/ops/triton/test_selective_state_update.py"],
        ["."],
        [
            "tests/ops/triton/test_layernorm_gated.py::test_layer_norm_gated",
            "tests/ops/triton/test_selective_state_update.py::test_selective_state_update",
            "-k",
            "(wtype0-dtype0-True-True and 2048) or (2048- and itype0)",
        ],
        "gated layer norm and the selective state update: stacked @triton.heuristics, options computed by "
        "the caller, a META grid, launches inside `with torch.cuda.device(...)`",
        [
            Case(
                "launch_option", "heuristics", "_layer_norm_fwd_1pass_kernel",
                Plant(_MAMBA_LN, "    num_warps = min(max(BLOCK_N // 256, 1), 8)\n    grid = (M, ngroups)",
                      "    num_warps = min(max(BLOCK_N // 1024, 1), 8)\n    grid = (M, ngroups)"),
                "the forward layer norm's caller launches a quarter of the warps (BLOCK_N // 1024)",
            ),
            Case(
                "faster", "heuristics", "_layer_norm_bwd_kernel",
                Plant(_MAMBA_LN, "    num_warps = min(max(BLOCK_N // 256, 1), 8)\n    sm_count",
                      "    num_warps = min(max(BLOCK_N // 2048, 1), 8)\n    sm_count"),
                "the backward layer norm back to its own warps from a base with one warp per 2048 columns",
                in_base=True,
            ),
            Case(
                "heuristic_change", "heuristics", "_selective_scan_update_kernel",
                Plant(_MAMBA_SSU,
                      '@triton.heuristics({"BLOCK_SIZE_DSTATE": lambda args: ' + _NP2 + "})",
                      '@triton.heuristics({"BLOCK_SIZE_DSTATE": lambda args: max(' + _NP2 + ", 64)})"),
                "the state-size block heuristic at least 64 (was the next power of 2 of dstate: 16, 32, 64)",
            ),
        ],
        {"_layer_norm_fwd_1pass_kernel": "heuristics", "_layer_norm_bwd_kernel": "heuristics",
         "_selective_scan_update_kernel": "heuristics"},
    ),
    Repo(
        "attorch",
        "https://github.com/BobMcDear/attorch.git",
        "67c2772baf33913ef51c2d1064f746ca17b63749",
        ["attorch", "tests"],
        ["."],
        ["tests/test_softmax_layers.py", "tests/test_rms_norm_layer.py", "-k", _ATT_K],
        "softmax and RMS norm at four shapes, fp32: @triton.autotune over @triton.heuristics, configs built "
        "at import from torch.cuda.get_device_properties",
        [
            Case(
                "config_cut", "autotune+heuristics", "softmax_forward_kernel",
                Plant(_ATT_SOFTMAX, _ATT_DECO.replace("warps_kernel_configs()", "warps_kernel_configs()")
                      + "def softmax_forward_kernel(",
                      _ATT_DECO.replace("warps_kernel_configs()", "warps_kernel_configs()[:2]")
                      + "def softmax_forward_kernel("),
                "the softmax forward's config list cut to 1 and 2 warps (of 1-32)",
            ),
            Case(
                "heuristic_change", "autotune+heuristics", "rms_norm_forward_kernel",
                Plant(_ATT_RMS, _ATT_DECO + "def rms_norm_forward_kernel(",
                      _ATT_DECO.replace("'BLOCK_SIZE_BATCH': BLOCK_SIZE_BATCH_heuristic,",
                                        "'BLOCK_SIZE_BATCH': lambda args:"
                                        " 4 * BLOCK_SIZE_BATCH_heuristic(args),")
                      + "def rms_norm_forward_kernel("),
                "the RMS norm forward's batch block heuristic times 4",
            ),
            Case(
                "arith_only", "autotune+heuristics", "rms_norm_backward_kernel",
                Plant(_ATT_RMS, "(weight_output_grad_prod - term1 * term2 / feat_dim))",
                      "(weight_output_grad_prod - term1 * (term2 / feat_dim)))"),
                "the RMS norm backward's gradient term reassociated (term1 * (term2 / feat_dim))",
            ),
            Case(
                "comment_only", "autotune+heuristics", "softmax_backward_kernel",
                Plant(_ATT_SOFTMAX, "def softmax_backward_kernel(\n",
                      "def softmax_backward_kernel(  # planted comment\n"),
                "a comment in the softmax backward's signature",
            ),
        ],
        {"softmax_forward_kernel": "autotune+heuristics", "softmax_backward_kernel": "autotune+heuristics",
         "rms_norm_forward_kernel": "autotune+heuristics", "rms_norm_backward_kernel": "autotune+heuristics"},
    ),
]  # fmt: skip
BY_NAME = {r.name: r for r in REPOS}


# ---------------------------------------------------------------------------------------------
# repositories


def export(spec: Repo, src: str, dest: Path) -> str:
    """The pinned commit's ``paths`` copied to ``dest`` (a plain directory: the GPU machine has no
    network; cpu_corpus_eval's checkout), with ``COMMIT`` naming the commit; returns it."""
    commit = checkout(spec, src, dest)
    (dest / "COMMIT").write_text(commit + "\n")
    return commit


def two_commit_repo(spec: Repo, src: Path, dest: Path) -> str:
    """``dest``: a git repository whose commit 1 is the export (with the base-side plants) and
    commit 2 the planted pull request. Every plant must apply exactly once. Returns the pinned
    commit of the export."""
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(src, dest)
    commit = (dest / "COMMIT").read_text().strip()
    (dest / "COMMIT").unlink()
    for c in spec.cases:  # the slow version a faster case's pull request removes
        if c.in_base:
            apply_plant(dest, c.plant)
    git(dest, "init", "-q")
    commit_all(dest, "base")
    for c in spec.cases:
        if c.in_base:
            apply_plant(dest, Plant(c.plant.path, c.plant.new, c.plant.old))
        else:
            apply_plant(dest, c.plant)
    commit_all(dest, "head: the planted pull request")
    return commit


def _env(spec: Repo, tree: Path, cache: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    # the kperf-ci of this script's tree (a frozen worktree stays frozen whatever is installed)
    paths = [str(tree / p) for p in spec.pythonpath] + [str(ROOT / "benchmarks"), str(ROOT)]
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["TRITON_CACHE_DIR"] = str(cache)  # an empty cache, as a CI job without a restored one
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("KPERF_DB", None)
    env.update(extra)
    return env


def _timed(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> dict[str, Any]:
    t0 = time.monotonic()
    rc, out = run_group(cmd, cwd, env, TIMEOUT_S)
    log.write_text(out)
    return {"rc": rc, "wall_s": round(time.monotonic() - t0, 1), "tail": "\n".join(out.splitlines()[-15:])}


# ---------------------------------------------------------------------------------------------
# steps


def step_plain(spec: Repo, repo: Path, base: Path, work: Path, python: str) -> dict[str, Any]:
    out = {}
    for side, tree in (("base", base), ("head", repo)):
        cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *spec.tests]
        out[side] = _timed(
            cmd, tree, _env(spec, tree, work / f"cache-plain-{side}"), work / f"plain-{side}.log"
        )
    out["wall_s_two_trees"] = round(out["base"]["wall_s"] + out["head"]["wall_s"], 1)
    return out


#: what a part keeps of kperf ab's document (an A/A keeps what timing_accuracy reads)
_DOC_KEYS = ("tests", "timed", "messages", "gpu_seconds", "exit_code", "static_regressions",
             "static_improved", "static_changed", "counts", "device", "wall_s", "stage_s")  # fmt: skip
_AA_KEYS = ("timed", "gpu_seconds", "exit_code", "counts", "device", "wall_s", "stage_s")


def _kperf_ab(
    spec: Repo, repo: Path, work: Path, python: str, tag: str, options: list[str], keep: tuple[str, ...]
) -> dict[str, Any]:
    """``kperf ab --base HEAD~1`` with default settings and ``options`` in ``repo``, its files
    named by ``tag`` in ``work``: exit code, wall time, tail and the ``keep`` keys of its document."""
    doc_path = work / f"{tag}.json"
    doc_path.unlink(missing_ok=True)
    cmd = [python, "-m", "kperf_ci", "ab", "--base", "HEAD~1", *options, "--json", str(doc_path),
           "--db", str(work / f"{tag}.db"), "--report-dir", str(work / f"{tag}-report"),
           *spec.tests, "--kperf-all", "-p", "no:cacheprovider"]  # fmt: skip
    r = _timed(cmd, repo, _env(spec, repo, work / f"cache-{tag}"), work / f"{tag}.log")
    doc = json.loads(doc_path.read_text()) if doc_path.exists() else {}
    r["doc"] = {k: doc[k] for k in keep if k in doc}
    # the one setting a run of this script may change (the device script's second mamba run):
    # None is kperf-ci's default
    r["compile_ahead"] = os.environ.get("KPERF_COMPILE_AHEAD")
    return r


def step_ab(spec: Repo, repo: Path, work: Path, python: str, *, gpu: bool) -> dict[str, Any]:
    tag = "ab" if gpu else "static"
    return _kperf_ab(spec, repo, work, python, tag, [] if gpu else ["--no-gpu"], _DOC_KEYS)


def aa_repo(src: Path, dest: Path) -> None:
    """``dest``: a git repository whose commit 1 is the export as fetched (no plant) and commit 2
    the same tree with a note file added: identical code on both sides."""
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(src, dest)
    (dest / "COMMIT").unlink()
    git(dest, "init", "-q")
    commit_all(dest, "base")
    (dest / "AA_NOTE.md").write_text("an unrelated note: nothing a test launches changes\n")
    commit_all(dest, "head: a note file")


def step_aa(spec: Repo, src: str, work: Path, python: str) -> dict[str, Any]:
    """``kperf ab --time-all`` on identical trees (issue 32's A/A): every launch of the
    repository's tests timed base against head, where any slower or faster is a false alarm."""
    repo = work / "aa-repo"
    aa_repo(Path(src), repo)
    return _kperf_ab(spec, repo, work, python, "aa", ["--time-all"], _AA_KEYS)


def step_truth(
    spec: Repo, repo: Path, base: Path, work: Path, python: str, only: list[str] | None = None
) -> dict[str, Any]:
    """Each case kernel's launches recorded by the tests in both trees (one pytest run per tree
    records them all), then timed base against head in one process per kernel
    (benchmarks/_corpus_truth.py). ``only``: these case kernels alone (a re-run within one
    device call)."""
    kernels = [c.kernel for c in spec.cases if c.name != "comment_only"]  # identical code: no truth
    kernels = [k for k in kernels if not only or k in only]
    out: dict[str, Any] = {"record": {}, "kernels": {}}
    recs: dict[str, dict[str, Path]] = {}
    for side, tree in (("base", base), ("head", repo)):
        rec = work / f"truth-{side}.json"
        recs[side] = {k: record_path(rec, k, len(kernels) > 1) for k in kernels}
        for p in recs[side].values():
            p.unlink(missing_ok=True)
        env = _env(spec, tree, work / f"cache-truth-{side}", KPERF_TRUTH_KERNEL=",".join(kernels),
                   KPERF_TRUTH_OUT=str(rec), KPERF_TRUTH_MAX="16")  # fmt: skip
        cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "_corpus_truth", *spec.tests]
        out["record"][side] = _timed(cmd, tree, env, work / f"truth-record-{side}.log")
    for c in spec.cases:
        if c.kernel not in kernels:
            continue
        dest = work / f"truth-{c.kernel}.json"
        dest.unlink(missing_ok=True)
        cmd = [python, str(ROOT / "benchmarks" / "_corpus_truth.py"), "time", "--base-tree", str(base),
               "--head-tree", str(repo), "--module", c.plant.path, "--kernel", c.kernel,
               "--base-rec", str(recs["base"][c.kernel]), "--head-rec", str(recs["head"][c.kernel]),
               "--out", str(dest), "--calls", "40"]  # fmt: skip
        r = _timed(
            cmd, repo, _env(spec, repo, work / "cache-truth-time"), work / f"truth-time-{c.kernel}.log"
        )
        r["result"] = json.loads(dest.read_text()) if dest.exists() else None
        out["kernels"][c.kernel] = r
    return out


def run_repo(
    spec: Repo, src: str, work: Path, out: Path, python: str, steps: list[str], truth_kernels: list[str]
) -> None:
    repo = work / "repo"
    commit = two_commit_repo(spec, Path(src), repo)
    base = work / "base"
    shutil.rmtree(base, ignore_errors=True)
    git(repo, "worktree", "add", "--detach", "--quiet", str(base), "HEAD~1")
    part_path = out / f"{NAME}.part-{spec.name}.json"
    part = json.loads(part_path.read_text()) if part_path.exists() else {}
    part.update({"repo": spec.name, "commit": commit})
    # the device of the GPU steps; a CPU machine's static step names its own
    part["static_device" if steps == ["static"] else "device"] = _device()
    for step in steps:
        t0 = time.monotonic()
        if step == "plain":
            part["plain"] = step_plain(spec, repo, base, work, python)
        elif step == "ab":
            part["ab"] = step_ab(spec, repo, work, python, gpu=True)
            part["kperf_commit"] = kperf_commit()
        elif step == "static":
            part["static"] = step_ab(spec, repo, work, python, gpu=False)
            part["static_kperf_commit"] = kperf_commit()
        elif step == "truth":
            part["truth"] = step_truth(spec, repo, base, work, python, truth_kernels)
        elif step == "aa":
            part["aa"] = step_aa(spec, src, work, python)
            part["aa_kperf_commit"] = kperf_commit()
        else:
            raise SystemExit(f"unknown step {step!r}: use plain, ab, truth, static, aa")
        print(f"{spec.name} {step}: {time.monotonic() - t0:.0f} s", flush=True)
        out.mkdir(parents=True, exist_ok=True)
        tmp = part_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(part, indent=1, sort_keys=True, default=str))
        tmp.replace(part_path)
    git(repo, "worktree", "remove", "--force", str(base))


def _device() -> str:
    try:
        import torch

        return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    except Exception:
        return "cpu"


# ---------------------------------------------------------------------------------------------
# assembling the evaluation from the parts

_TENSOR = re.compile(r"([a-z]+[0-9]*)\[([0-9x]*)\]")


def shapes_of(text: str) -> tuple[str, ...]:
    """The tensors of a launch text ("x=fp32[4096x4096], n=..., ...") as sorted dtype[shape]."""
    return tuple(sorted(f"{d}[{s}]" for d, s in _TENSOR.findall(text or "")))


def _site_kernel(site: str) -> str:
    return str(site or "").rsplit("::", 1)[-1]


def _truth_for(truth: dict[str, Any] | None, row: dict[str, Any]) -> dict[str, Any] | None:
    """The truth entry of a timed launch: made by the same test (the row's test, or a test whose
    identical launch it stands for) with the same tensors (kperf's row names the head's launch).
    The truth records a call once, by the first test that made it: a launch of another test
    whose call it collapsed has no truth, never another launch's. An autotuned call's key holds
    the constexprs its caller passed (attorch's ``log``, ``neg``), and they must read the same in
    kperf's launch text. A long launch text is cut ("…"), its last tensors missing: then the call
    holds them all."""
    if not truth:
        return None
    launch = row.get("launch") or ""
    tests = {row.get("test"), *(row.get("identical_in") or [])}
    want = shapes_of(launch)
    for t in truth.get("keys") or []:
        if t.get("truth_pct") is None or (t.get("tests") or {}).get("head") not in tests:
            continue
        have = shapes_of(t.get("head_shapes") or t.get("shapes") or "")
        if not _same_constexprs(t.get("caller_constexprs") or {}, launch):
            continue
        if have == want or (launch.endswith("…") and all(have.count(x) >= want.count(x) for x in set(want))):
            return t
    return None


def _same_constexprs(given: dict[str, Any], launch: str) -> bool:
    """Whether the constexprs the caller passed in the truth's call (a record keeps them in its
    key) read the same in kperf's launch text; one the text does not show (cut by "…") agrees."""
    for name, value in given.items():
        m = re.search(rf"(?:^|, ){re.escape(name)}=([^,;\s…]*)", launch)  # "log=False …; grid"
        if m and m.group(1) != str(value):
            return False
    return True


def _static_verdict(doc: dict[str, Any], kernel: str, shapes: tuple[str, ...] | None = None) -> str:
    """The static verdict of ``kernel``'s launch with these tensors (any launch when None):
    regressed or improved where the document lists it so, else changed or identical by the
    launch diff's status."""
    for key, word in (("static_regressions", "regressed"), ("static_improved", "improved")):
        for r in doc.get(key) or []:
            if _site_kernel(r.get("site")) != kernel:
                continue
            args = ", ".join(str(v) for v in (r.get("args") or {}).values())
            if shapes is None or shapes_of(args) == shapes:
                return word
    statuses = {lc.get("status") for t in doc.get("tests") or [] for lc in t.get("launches") or []
                if _site_kernel(lc.get("site")) == kernel}  # fmt: skip
    return "changed" if "changed" in statuses else ("identical" if statuses else "not launched")


def case_rows(spec: Repo, part: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(cases, static_only) rows of one repository."""
    doc = (part.get("ab") or {}).get("doc") or {}
    static_doc = (part.get("static") or {}).get("doc") or {}
    truth = (part.get("truth") or {}).get("kernels") or {}
    rows, static_rows = [], []
    for c in spec.cases:
        t_doc = ((truth.get(c.kernel) or {}).get("result")) or {}
        timed = [t for t in doc.get("timed") or [] if _site_kernel(t.get("site")) == c.kernel]
        changed = [(t["test"], lc) for t in doc.get("tests") or [] for lc in t.get("launches") or []
                   if _site_kernel(lc.get("site")) == c.kernel
                   and lc.get("status") != "identical"]  # fmt: skip
        launched = [(t["test"], lc) for t in doc.get("tests") or [] for lc in t.get("launches") or []
                    if _site_kernel(lc.get("site")) == c.kernel]  # fmt: skip
        covered = set()
        for t in timed:
            tr = _truth_for(t_doc, t)
            covered |= {t.get("test"), *(t.get("identical_in") or [])}
            row = {
                "repo": spec.name, "case": c.name, "pattern": c.pattern, "kernel": c.kernel,
                "launch": t.get("launch"), "test": t.get("test"),
                "base_us": round(1000 * t["base_median_ms"], 3) if t.get("base_median_ms") else None,
                "truth_pct": tr.get("truth_pct") if tr else None,
                "truth_base_us": tr.get("base_us") if tr else None,
                "verdict": t.get("verdict"), "ratio": t.get("ratio"),
                "ci": [t.get("ci_low"), t.get("ci_high")], "timed": True, "reason": "",
                "gpu_s": round(gpu_seconds(t), 3),
                "exit_code": (part.get("ab") or {}).get("rc"),
            }  # fmt: skip
            if c.pattern in ("autotune", "autotune+heuristics", "custom_autotuner"):
                row.update(base_pick=t.get("base_pick"), head_pick=t.get("head_pick"),
                           base_best=t.get("base_best"), head_best=t.get("head_best"),
                           truth_base_best=(tr or {}).get("base_best"),
                           truth_head_best=(tr or {}).get("head_best"))  # fmt: skip
            rows.append(row)
        not_timed = [(test, lc) for test, lc in (changed if c.name != "comment_only" else launched)
                     if test not in covered]  # fmt: skip
        for test, lc in not_timed:
            verdict = "identical" if lc.get("status") == "identical" else "not timed"
            reason = "" if verdict == "identical" else _reason(doc, c.kernel, test)
            rows.append({
                "repo": spec.name, "case": c.name, "pattern": c.pattern, "kernel": c.kernel,
                "launch": None, "test": test, "base_us": None, "truth_pct": None, "verdict": verdict,
                "ratio": None, "ci": None, "timed": False, "reason": reason, "gpu_s": 0.0,
                "exit_code": (part.get("ab") or {}).get("rc"),
            })  # fmt: skip
        if static_doc:  # the CPU runner's verdict on each launch the truth measured
            for k in [x for x in t_doc.get("keys") or [] if x.get("truth_pct") is not None] or [{}]:
                shapes = shapes_of(k.get("head_shapes") or k.get("shapes") or "")
                static_rows.append({
                    "repo": spec.name, "case": c.name, "kernel": c.kernel,
                    "launch": k.get("head_shapes") or k.get("shapes"),
                    "truth_pct": round(k["truth_pct"], 2) if k else None,
                    "static_verdict": _static_verdict(static_doc, c.kernel, shapes if k else None),
                })  # fmt: skip
    return rows, static_rows


def _reason(doc: dict[str, Any], kernel: str, test: str) -> str:
    for m in doc.get("messages") or []:
        if kernel in m and test.rsplit("::", 1)[-1].split("[")[0] in m:
            return m[:300]
    for m in doc.get("messages") or []:
        if kernel in m:
            return m[:300]
    return "no timed row and no message names it"


def _pattern_counts(spec: Repo, doc: dict[str, Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for t in doc.get("tests") or []:
        for lc in t.get("launches") or []:
            p = spec.patterns.get(_site_kernel(lc.get("site")), "jit")
            counts[p] = counts.get(p, 0) + 1
    return counts


def assemble(out: Path) -> dict[str, Any]:
    parts = {
        p.stem.split(".part-", 1)[1]: json.loads(p.read_text())
        for p in sorted(out.glob(f"{NAME}.part-*.json"))
    }
    repos, cases, static_only = [], [], []
    wall_ab, wall_plain, gpu_s, gpu_parts = {}, {}, {}, {}
    for name, part in parts.items():
        spec = BY_NAME[name]
        doc = (part.get("ab") or {}).get("doc") or {}
        repos.append({"name": name, "commit": part.get("commit"), "tests_run": len(doc.get("tests") or []),
                      "patterns": _pattern_counts(spec, doc), "why": spec.why,
                      "selection": spec.tests})  # fmt: skip
        rows, srows = case_rows(spec, part)
        cases += rows
        static_only += srows
        wall_ab[name] = (part.get("ab") or {}).get("wall_s")
        wall_plain[name] = (part.get("plain") or {}).get("wall_s_two_trees")
        gpu_s[name] = doc.get("gpu_seconds")
        gpu_parts[name] = gpu_seconds_text(doc.get("timed") or [])
    changed = [r for r in cases if r["case"] != "comment_only"]
    timed = [r for r in changed if r["timed"]]
    direction_errors = [
        r for r in timed
        if r["truth_pct"] is not None and (r["base_us"] or 0) >= 5 and abs(r["truth_pct"]) > 5
        and r["verdict"] != ("slower" if r["truth_pct"] > 0 else "faster")
    ]  # fmt: skip
    false_alarms = [
        r
        for r in cases
        if r["case"] in ("arith_only", "comment_only") and r["verdict"] in ("slower", "faster")
    ]
    static_wrong = [
        s for s in static_only
        if s["static_verdict"] == "regressed" and s["truth_pct"] is not None
        and (s["truth_pct"] <= -2 or (s["case"] == "arith_only" and abs(s["truth_pct"]) <= 1))
    ]  # fmt: skip
    devices = {p.get("device") for p in parts.values() if p.get("device") not in (None, "cpu")}
    reruns = []  # a repository's A/B and truth run again after a fix (another device, said)
    for path in sorted(out.glob(f"{NAME}.rerun-*.json")):
        rerun = json.loads(path.read_text())
        name = rerun["repo"]
        merged = {**parts.get(name, {}), **{k: rerun[k] for k in ("ab", "truth") if k in rerun}}
        rr, _ = case_rows(BY_NAME[name], merged)
        rr_changed = [r for r in rr if r["case"] != "comment_only"]
        reruns.append({
            "file": path.name, "repo": name, "device": rerun.get("device"),
            "commit": rerun.get("kperf_commit"),
            "timed": sum(r["timed"] for r in rr_changed), "changed": len(rr_changed),
            "with_truth": sum(1 for r in rr if r["timed"] and r["truth_pct"] is not None),
            "false_alarms": sum(1 for r in rr if r["case"] in ("arith_only", "comment_only")
                                and r["verdict"] in ("slower", "faster")),
            "wall_s_ab": (rerun.get("ab") or {}).get("wall_s"),
            "gpu_s": ((rerun.get("ab") or {}).get("doc") or {}).get("gpu_seconds"),
            "cases": rr,
        })  # fmt: skip
    cut = [r for r in cases if r["case"] == "config_cut" and r["timed"]]
    return {
        "aa": _aa(parts),
        "compile_ahead": _compile_ahead(out, parts, wall_plain),
        "config_cut": {  # issue 34: each side's pick said, the verdict the truth's
            "launches": len(cut),
            "with_picks": sum(1 for r in cut if r.get("base_pick") and r.get("head_pick")),
            "with_truth": sum(1 for r in cut if r["truth_pct"] is not None),
            "verdict_matches_truth": sum(1 for r in cut if r["verdict"] == truth_verdict(r)),
        },
        "device": ", ".join(sorted(devices)) or "cpu",
        "commit": sorted({p.get("kperf_commit") for p in parts.values() if p.get("kperf_commit")}),
        "static_commit": sorted(
            {p.get("static_kperf_commit") for p in parts.values() if p.get("static_kperf_commit")}
        ),
        "repos": repos,
        "cases": cases,
        "timed_fraction": round(len(timed) / len(changed), 4) if changed else None,
        "direction_errors": len(direction_errors),
        "direction_error_rows": direction_errors,
        "false_alarms": len(false_alarms),
        "static_only": static_only,
        "static_wrong_direction": len(static_wrong),
        "reruns": reruns,
        "wall_s_ab": wall_ab,
        "wall_s_plain_two_trees": wall_plain,
        "gpu_s": gpu_s,
        "gpu_s_parts": gpu_parts,
        "cost_ok": {
            n: (
                wall_ab[n] is not None
                and wall_plain[n] is not None
                and wall_ab[n] <= 1.5 * wall_plain[n] + float(gpu_s.get(n) or 0)
            )
            for n in parts
        },  # fmt: skip
    }


def _aa(parts: dict[str, Any]) -> dict[str, Any]:
    """The A/A step (``--steps aa``: identical trees, ``kperf ab --time-all``) of each part whose
    A/A ran at the commit of its ``kperf ab`` step (an A/A a part kept from an older evaluation's
    seed is that evaluation's): launches timed, and those called slower or faster."""
    found = {}
    for name, part in parts.items():
        doc = (part.get("aa") or {}).get("doc") or {}
        if not doc.get("timed") or part.get("aa_kperf_commit") != part.get("kperf_commit"):
            continue
        found[name] = {
            "commit": part["aa_kperf_commit"],
            "timed": len(doc["timed"]),
            "false_alarms": sum(1 for t in doc["timed"] if t.get("verdict") in ("slower", "faster")),
            "exit_code": (part.get("aa") or {}).get("rc"),
        }
    return found


def _compile_ahead(out: Path, parts: dict[str, Any], wall_plain: dict[str, Any]) -> dict[str, Any]:
    """A repository's `kperf ab` run again with another KPERF_COMPILE_AHEAD (parts in
    ``out/compile_ahead``; the setting as the part recorded it, "1" in parts older than that
    record): its wall time against the same cost bound, and whether every timed launch got the
    verdict of the default run."""
    found = {}
    for path in sorted((out / "compile_ahead").glob(f"{NAME}.part-*.json")):
        ahead = json.loads(path.read_text())
        name, ab = ahead["repo"], ahead.get("ab") or {}
        if name not in parts or not wall_plain.get(name):
            continue
        gpu = float((ab.get("doc") or {}).get("gpu_seconds") or 0)
        bound = 1.5 * wall_plain[name] + gpu
        found[name] = {
            "where": f"{out.name}/compile_ahead/",
            "setting": ab.get("compile_ahead", "1"),
            "commit": ahead.get("kperf_commit"), "wall_s_ab": ab.get("wall_s"), "gpu_s": gpu,
            "bound_s": bound, "ok": ab.get("wall_s") is not None and ab["wall_s"] <= bound,
            "same_verdicts": _verdicts(ab) == _verdicts(parts[name].get("ab") or {}),
        }  # fmt: skip
    return found


def _verdicts(ab: dict[str, Any]) -> list[tuple[str, str, str]]:
    """A `kperf ab` step's (test, kernel, verdict) of every timed launch, sorted."""
    rows = (ab.get("doc") or {}).get("timed") or []
    return sorted((t["test"], t["kernel"], t["verdict"]) for t in rows)


def truth_verdict(row: dict[str, Any]) -> str | None:
    """The verdict kperf's shipped A/B policy gives the truth's effect (its point estimate): slower
    or faster beyond the larger of the relative threshold and the absolute floor, else unchanged;
    None without a truth. (kperf decides on its interval; the truth here has its estimate.)"""
    from kperf_ci.config import Settings

    pct, base_us = row.get("truth_pct"), row.get("truth_base_us") or row.get("base_us")
    if pct is None or not base_us:
        return None
    band = max(Settings.ab_threshold, Settings.ab_floor_ms * 1000 / base_us)
    return "slower" if pct / 100 > band else "faster" if pct / 100 < -band else "unchanged"


def _s(v: Any) -> str:
    return "-" if v is None else f"{float(v):.1f}"


def _pct(v: Any) -> str:
    return "-" if v is None else f"{v:+.2f}%"


def render_md(d: dict[str, Any]) -> str:
    lines = [
        f"# The PR check on a corpus of real repositories ({d['device']})",
        "",
        f"Rendered at kperf-ci {kperf_commit()} by `python benchmarks/corpus_ab_eval.py`; "
        "`kperf ab` measured at "
        f"{', '.join(d['commit']) or '-'}, the `--no-gpu` runs at {', '.join(d['static_commit']) or '-'}. "
        "One planted pull request per repository, each case in a kernel of its own; truth by CUPTI kernel "
        "durations of the base's and the head's launch alternated on shared buffers "
        "(benchmarks/_corpus_truth.py, "
        "best against best over each side's surviving configs for autotuned kernels).",
        "",
        "| repository | commit | tests | launches by pattern | why |",
        "|---|---|---|---|---|",
    ]
    for r in d["repos"]:
        pats = ", ".join(f"{k} {v}" for k, v in sorted(r["patterns"].items()))
        lines.append(f"| {r['name']} | {str(r['commit'])[:10]} | {r['tests_run']} | {pats} | {r['why']} |")
    lines += [
        "",
        "## Cases",
        "",
        "| repo | case | pattern | kernel | launch | base us | truth | kperf | CI | verdict | "
        "picks (base / head) | best (base / head) | GPU s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in d["cases"]:
        ci = (
            f"[{_pct(100 * (r['ci'][0] - 1))}, {_pct(100 * (r['ci'][1] - 1))}]"
            if r.get("ci") and None not in r["ci"]
            else "-"
        )
        kp = _pct(100 * (r["ratio"] - 1)) if r.get("ratio") else "-"
        picks = f"{r.get('base_pick') or '-'} / {r.get('head_pick') or '-'}" if "base_pick" in r else ""
        best = f"{r.get('base_best') or '-'} / {r.get('head_best') or '-'}" if "base_best" in r else ""
        verdict = r["verdict"] + (f" ({r['reason'][:120]})" if r.get("reason") else "")
        launch = (r.get("launch") or r.get("test") or "")[:90]
        lines.append(f"| {r['repo']} | {r['case']} | {r['pattern']} | {r['kernel']} | {launch} | "
                     f"{r['base_us'] if r['base_us'] is not None else '-'} | {_pct(r['truth_pct'])} | "
                     f"{kp} | {ci} | "
                     f"{verdict} | {picks} | {best} | {r['gpu_s']} |")  # fmt: skip
    lines += [
        "",
        f"- Timed: {d['timed_fraction']} of the changed launches (target at least 0.95).",
        f"- Direction errors (base at least 5 us, truth beyond ±5%): {d['direction_errors']} (target 0).",
        f"- False alarms (slower or faster on arith_only / comment_only): {d['false_alarms']} (target 0).",
        f"- Config-cut launches: {d['config_cut']['launches']} timed, {d['config_cut']['with_picks']} "
        f"with both sides' picks, {d['config_cut']['with_truth']} with a truth, "
        f"{d['config_cut']['verdict_matches_truth']} whose verdict is the one the same threshold and "
        "floor give the truth's best-against-best effect (target: all).",
        *(
            f"- A/A ({n}: `kperf ab --time-all` on identical trees, kperf-ci {a['commit']}): "
            f"{a['timed']} launches timed, {a['false_alarms']} slower or faster (exit {a['exit_code']})."
            for n, a in sorted((d.get("aa") or {}).items())
        ),
        "",
        "## The static verdict (`kperf ab --no-gpu`)",
        "",
        "| repo | case | kernel | launch (tensors) | truth | static verdict |",
        "|---|---|---|---|---|---|",
    ]
    for s in d["static_only"]:
        lines.append(
            f"| {s['repo']} | {s['case']} | {s['kernel']} | {(s.get('launch') or '-')[:70]} | "
            f"{_pct(s['truth_pct'])} | {s['static_verdict']} |"
        )
    lines += [
        "",
        "Static verdicts that fail a launch whose truth is -2% or better, "
        f"or an arithmetic-only change within ±1%: "
        f"{d['static_wrong_direction']} (target 0).",
        "",
        "## Cost",
        "",
        "GPU s: the seconds the GPU spent timing, as `kperf ab` counts them (its document's "
        "`gpu_seconds`): the A/B loops, both sides' warm-up and, for autotuned calls, the search for "
        "each side's best config; a document from before that count has its A/B loops only.",
        "",
        "| repo | kperf ab s | plain pytest, both trees s | GPU s | of which | at most 1.5x plain + GPU |",
        "|---|---|---|---|---|---|",
    ]
    for n in d["wall_s_ab"]:
        lines.append(
            f"| {n} | {d['wall_s_ab'][n]} | {d['wall_s_plain_two_trees'][n]} | {_s(d['gpu_s'][n])} | "
            f"{d.get('gpu_s_parts', {}).get(n, '')} | {d['cost_ok'][n]} |"
        )
    for n, a in (d.get("compile_ahead") or {}).items():
        lines += [
            "",
            f"With `KPERF_COMPILE_AHEAD={a.get('setting', '1')}` ({a['where']}, "
            "a second `kperf ab` in the same job, "
            f"kperf-ci {a['commit']}): {n} {a['wall_s_ab']} s against its bound "
            f"{a['bound_s']:.1f} s (1.5x {d['wall_s_plain_two_trees'][n]} + {_s(a['gpu_s'])} GPU s): "
            f"{a['ok']}; the same verdicts on every timed launch as the run above: {a['same_verdicts']}.",
        ]
    for r in d.get("reruns") or []:
        lines += [
            "",
            f"## Re-run: {r['repo']} on {r['device']} at kperf-ci {r['commit']} ({r['file']})",
            "",
            "`kperf ab` and the truth again, after a fix, on another card than the runs above "
            "(the device lent it): the numbers above stay the H100's. "
            f"Timed {r['timed']} of {r['changed']} changed launches, "
            f"{r['with_truth']} with a truth; false alarms {r['false_alarms']}; kperf ab {r['wall_s_ab']} s "
            f"({_s(r['gpu_s'])} GPU s). Its cases:",
            "",
            "| case | kernel | base us | truth | kperf | verdict |",
            "|---|---|---|---|---|---|",
        ]
        for c in r["cases"]:
            if c["timed"]:
                kp = _pct(100 * (c["ratio"] - 1)) if c.get("ratio") else "-"
                cells = [c["case"], c["kernel"], str(c["base_us"]), _pct(c["truth_pct"]), kp, c["verdict"]]
                lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def render(out: Path, results: Path) -> dict[str, Any]:
    d = assemble(out)
    (results / f"{NAME}.json").write_text(json.dumps(d, indent=1, sort_keys=True, default=str) + "\n")
    (results / f"{NAME}.md").write_text(render_md(d))
    return d


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", action="append", default=[], help="NAME=URL_OR_PATH (a clone, mirror or export)")
    ap.add_argument("--export", type=Path, help="copy each --src's pinned paths here and stop")
    ap.add_argument("--repos", default=",".join(BY_NAME), help="comma list ('' renders only)")
    ap.add_argument("--steps", default="plain,ab,truth")
    ap.add_argument("--out", type=Path, default=RESULTS / NAME)
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--no-render", action="store_true")
    ap.add_argument(
        "--truth-kernels", default="", help="comma list: the truth step times these case kernels only"
    )
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument(
        "--results", type=Path, default=RESULTS, help="where the json and md go (another card's run beside)"
    )
    a = ap.parse_args(argv)
    srcs = dict(s.split("=", 1) for s in a.src)
    if a.export:
        for name, src in srcs.items():
            print(name, export(BY_NAME[name], src, a.export / name))
        return 0
    for name in [r for r in a.repos.split(",") if r]:
        if name not in srcs:
            raise SystemExit(f"--src {name}=... is needed to run {name}")
        work = (a.work or Path(tempfile.mkdtemp(prefix="corpus-ab-"))) / name
        work.mkdir(parents=True, exist_ok=True)
        steps = [s for s in a.steps.split(",") if s]
        run_repo(
            BY_NAME[name],
            srcs[name],
            work,
            a.out,
            a.python,
            steps,
            [k for k in a.truth_kernels.split(",") if k],
        )
    if not a.no_render:
        a.results.mkdir(parents=True, exist_ok=True)
        render(a.out, a.results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
