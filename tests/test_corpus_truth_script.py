"""benchmarks/_corpus_truth.py (the corpus evaluation's truth) on a tiny two-tree repository,
under Triton's interpreter on the CPU: ``record`` in the base and the head tree, then ``time --dry``.
The head cuts the autotuned kernel's config list and changes the plain kernel's num_warps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "_corpus_truth.py"

TUNER = '''
import time
from triton.runtime.autotuner import Autotuner


def wall_bench(fn, quantiles):
    t0 = time.perf_counter()
    fn()
    t = time.perf_counter() - t0
    return [t, t, t]


class TinyTuner(Autotuner):
    """A repository's own autotuner (as flash-linear-attention has): run wraps Autotuner.run."""

    def run(self, *args, **kwargs):
        self.calls = getattr(self, "calls", 0) + 1
        return super().run(*args, **kwargs)


def tiny_autotune(configs, key, prune_configs_by=None):
    def deco(fn):
        return TinyTuner(fn, fn.arg_names, configs, key, None, None,
                         prune_configs_by=prune_configs_by, do_bench=wall_bench)
    return deco
'''

OPS = """
import torch
import triton
import triton.language as tl

from .tuner import tiny_autotune

WARPS = 4
CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w) for b in (16, 32, 64) for w in (1, 2)]


@triton.jit(do_not_specialize=["n"])
def scale_kernel(x, out, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=m) * alpha, mask=m)


@triton.heuristics({"BLOCK": lambda a: triton.next_power_of_2(a["n"])})
@triton.jit
def rowsum_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    v = tl.load(x + tl.program_id(0) * n + offs, mask=offs < n, other=0.0)
    tl.store(out + tl.program_id(0), tl.sum(v, axis=0))


def _prune(configs, nargs, **kw):
    return [c for c in configs if c.kwargs["BLOCK"] <= nargs["n"]]


@tiny_autotune(configs=CONFIGS, key=["n"], prune_configs_by={"early_config_prune": _prune})
@triton.heuristics({"EVEN": lambda a: a["n"] % a["BLOCK"] == 0})
@triton.jit
def gather_kernel(x, idx, out, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        i = tl.load(idx + offs)
        tl.store(out + offs, tl.load(x + i))
    else:
        m = offs < n
        i = tl.load(idx + offs, mask=m, other=0)
        tl.store(out + offs, tl.load(x + i, mask=m), mask=m)


def scale(x, alpha):
    out = torch.empty_like(x)
    scale_kernel[(triton.cdiv(x.numel(), 16),)](x, out, x.numel(), alpha, BLOCK=16, num_warps=WARPS)
    return out


def rowsum(x):
    out = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
    rowsum_kernel[(x.shape[0],)](x, out, x.shape[1])
    return out


def gather(x, idx):
    out = torch.empty(idx.numel(), dtype=x.dtype, device=x.device)
    n = idx.numel()
    gather_kernel[lambda META: (triton.cdiv(n, META["BLOCK"]),)](x, idx, out, n)
    return out
"""

TESTS = """
import os

import pytest
import torch

from tinyk.ops import gather, rowsum, scale

DEV = os.environ.get("TINYK_DEVICE", "cpu")  # the same tests on a GPU: TINYK_DEVICE=cuda


@pytest.mark.parametrize("n", [48, 64])
def test_scale(n):
    x = torch.randn(n, device=DEV)
    assert torch.allclose(scale(x, 2.0), 2 * x)
    assert torch.allclose(scale(x, 2.0), 2 * x)  # same call again: one key


def test_rowsum():
    x = torch.randn(3, 20, device=DEV)
    assert torch.allclose(rowsum(x), x.sum(1), atol=1e-5)


@pytest.mark.parametrize("n", [32, 40])
def test_gather(n):
    x = torch.randn(100, device=DEV)
    idx = torch.randperm(100, device=DEV)[:n].contiguous()
    before = idx.clone()
    assert torch.equal(gather(x, idx), x[idx])
    assert torch.equal(gather(x, idx), x[idx])
    assert torch.equal(idx, before)  # the plugin left the test's data alone
"""

# the planted pull request: one file, the module defining the kernels
PATCH = [
    ("for b in (16, 32, 64) for w in (1, 2)]", "for b in (16, 32) for w in (1,)]"),  # cut configs
    ("WARPS = 4", "WARPS = 2"),
]


def make_trees(tmp: Path) -> tuple[Path, Path]:
    trees = []
    for side in ("base", "head"):
        t = tmp / side
        (t / "tinyk").mkdir(parents=True)
        (t / "tests").mkdir()
        (t / "tinyk" / "__init__.py").write_text("")
        (t / "tinyk" / "tuner.py").write_text(TUNER)
        ops = OPS
        if side == "head":
            for old, new in PATCH:
                assert ops.count(old) == 1
                ops = ops.replace(old, new)
        (t / "tinyk" / "ops.py").write_text(ops)
        (t / "tests" / "test_ops.py").write_text(TESTS)
        trees.append(t)
    return trees[0], trees[1]


def _env(tree: Path) -> dict[str, str]:
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(tree))
    for k in ("KPERF_TRUTH_KERNEL", "KPERF_TRUTH_MODULE", "KPERF_TRUTH_MAX"):
        env.pop(k, None)
    return env


def _record_cmd(kernel: str, out: Path) -> list[str]:
    return [
        *(sys.executable, str(SCRIPT), "record", "--kernel", kernel, "--module", "tinyk/ops.py"),
        *("--out", str(out), "--", "-q", "-p", "no:cacheprovider", "-p", "no:kperf", "tests"),
    ]


def _time_cmd(trees: tuple[Path, Path], kernel: str, recs: tuple[Path, Path], out: Path) -> list[str]:
    return [
        *(sys.executable, str(SCRIPT), "time", "--base-tree", str(trees[0]), "--head-tree", str(trees[1])),
        *("--module", "tinyk/ops.py", "--kernel", kernel, "--base-rec", str(recs[0])),
        *("--head-rec", str(recs[1]), "--out", str(out), "--calls", "4", "--config-calls", "2", "--dry"),
    ]


def _wait(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        out, _ = p.communicate(timeout=180)
        assert p.returncode == 0, out


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """Records of both kernels in both trees (two at a time), then ``time --dry`` of each kernel;
    two head records are doctored first: the gather kernel's loses a key and has a config broken;
    the scale kernel's passes ``x`` with stride 2 at n=64 (a buffer the two sides cannot share)."""
    tmp = tmp_path_factory.mktemp("corpus_truth")
    base, head = make_trees(tmp)
    recs = {
        (k, s): tmp / f"{s}_{k}.json" for k in ("gather_kernel", "scale_kernel") for s in ("base", "head")
    }
    for kernel in ("gather_kernel", "scale_kernel"):
        _wait(
            [
                subprocess.Popen(
                    _record_cmd(kernel, recs[kernel, s]), cwd=tree, env=_env(tree),
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                )
                for s, tree in (("base", base), ("head", head))
            ]
        )  # fmt: skip
    rec = {key: json.loads(p.read_text()) for key, p in recs.items()}
    doctored = json.loads(json.dumps(rec["gather_kernel", "head"]))
    doctored["calls"] = [c for c in doctored["calls"] if c["key"][-1] != 40]  # n=40 in base only
    doctored["calls"][0]["configs"][0]["launch"]["args"][0]["value"] = {"unsupported": "Foo"}
    (tmp / "head_gather_doctored.json").write_text(json.dumps(doctored))
    doctored = json.loads(json.dumps(rec["scale_kernel", "head"]))
    x = next(c for c in doctored["calls"] if c["key"][2] == 64)["launch"]["args"][0]["value"]["tensor"]
    x["stride"] = [2]
    (tmp / "head_scale_doctored.json").write_text(json.dumps(doctored))
    jobs = {
        "gather_kernel": (recs["gather_kernel", "base"], tmp / "head_gather_doctored.json"),
        "scale_kernel": (recs["scale_kernel", "base"], tmp / "head_scale_doctored.json"),
    }
    procs = [
        subprocess.Popen(
            _time_cmd((base, head), k, r, tmp / f"truth_{k}.json"), cwd=ROOT, env=_env(head),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        for k, r in jobs.items()
    ]  # fmt: skip
    _wait(procs)
    truth = {k: json.loads((tmp / f"truth_{k}.json").read_text()) for k in jobs}
    return {"rec": rec, "truth": truth}


def _by_n(doc: dict) -> dict[int, dict]:
    """Calls by their ``n`` (the first scalar of each kernel's key)."""
    return {next(k for k in c["key"] if isinstance(k, int)): c for c in doc["calls"]}


def _launch_arg(launch: dict, name: str):
    return next(a["value"] for a in launch["args"] if a["name"] == name)


@pytest.mark.slow
def test_record_autotuned_kernel_keeps_each_surviving_config(runs):
    base = _by_n(runs["rec"]["gather_kernel", "base"])
    head = _by_n(runs["rec"]["gather_kernel", "head"])
    assert set(base) == set(head) == {32, 40}  # two calls each made twice: two keys
    for n, b in base.items():
        h = head[n]
        assert b["key"] == h["key"] and b["autotuned"] and h["autotuned"]
        assert b["test"] == f"tests/test_ops.py::test_gather[{n}]"
        assert (b["configs_total"], h["configs_total"]) == (6, 2)
        # pruned by the kernel's own early_config_prune (BLOCK <= n): 4 of 6 in base, the cut head 2
        assert len(b["configs"]) == 4 and len(h["configs"]) == 2
        assert len(b["configs"]) > len(h["configs"])
        for c in b["configs"] + h["configs"]:
            block = _launch_arg(c["launch"], "BLOCK")
            assert c["config"].startswith(f"BLOCK={block},")
            assert _launch_arg(c["launch"], "EVEN") == (n % block == 0)  # the heuristic's value
            assert c["launch"]["grid"] == [-(-n // block)]  # lambda META evaluated with the config
            assert c["launch"]["options"]["num_warps"] in (1, 2)
        assert b["pick"] in {c["config"] for c in b["configs"]}
        assert h["pick"] in {c["config"] for c in h["configs"]}
        idx = _launch_arg(b["launch"], "idx")["tensor"]
        assert idx["dtype"] == "int64" and idx["shape"] == [n] and len(idx["values"]) == n
        assert _launch_arg(b["launch"], "x")["tensor"].get("values") is None  # floats: layout only


def test_record_plain_kernel_pairs_across_a_num_warps_change(runs):
    base = _by_n(runs["rec"]["scale_kernel", "base"])
    head = _by_n(runs["rec"]["scale_kernel", "head"])
    assert set(base) == set(head) == {48, 64}
    for n in (48, 64):
        assert base[n]["key"] == head[n]["key"] == [["T", "float32", [n]], ["T", "float32", [n]], n, 2.0]
        assert base[n]["launch"]["options"] == {"num_warps": 4}
        assert head[n]["launch"]["options"] == {"num_warps": 2}
        assert base[n]["launch"]["grid"] == [-(-n // 16)]
        assert not base[n]["autotuned"] and "configs" not in base[n]


def test_time_plain_kernel_base_against_head(runs):
    doc = runs["truth"]["scale_kernel"]
    assert doc["unpaired"] == [] and doc["kernel_source_changed"] is False
    assert [r["key_text"] for r in doc["keys"]] == [
        f"x:fp32[{n}] out:fp32[{n}] n={n} alpha=2.0" for n in (48, 64)
    ]
    for row in doc["keys"]:
        assert "error" not in row, row
        assert row["kind"] == "pick" and row["n"] == 4
        assert (row["base_best"], row["head_best"]) == ("BLOCK=16,num_warps=4", "BLOCK=16,num_warps=2")
        assert row["truth_pct"] == pytest.approx(100 * (row["head_us"] / row["base_us"] - 1))
    # one layout on both sides: one buffer; x with another stride in the head: one each
    assert doc["keys"][0]["buffers"] == {"shared": 2, "base_only": 0, "head_only": 0}
    assert doc["keys"][1]["buffers"] == {"shared": 1, "base_only": 1, "head_only": 1}


def test_time_autotuned_kernel_best_of_configs(runs):
    doc = runs["truth"]["gather_kernel"]
    (row,) = doc["keys"]
    assert row["key_text"] == "x:fp32[100] idx:i64[32] out:fp32[32] n=32"
    assert "error" not in row, row
    assert row["kind"] == "best_of_configs" and row["n"] == 4
    timed = {s: [c for c in row["configs_timed"][s] if "median_us" in c] for s in ("base", "head")}
    assert len(timed["base"]) == 4 and len(timed["head"]) == 1
    (broken,) = [c for c in row["configs_timed"]["head"] if "error" in c]
    assert "unsupported" in broken["error"]  # said, and the rest timed
    for s in ("base", "head"):
        fastest = min(timed[s], key=lambda c: c["median_us"])
        assert row[f"{s}_best"] == fastest["config"]
        assert row[f"{s}_pick"] == _by_n(runs["rec"]["gather_kernel", s])[32]["pick"]
    assert row["buffers"]["shared"] == 3
    (alone,) = doc["unpaired"]
    assert alone["side"] == "base" and alone["key_text"].endswith("n=40")
    assert "head" in alone["reason"]


def test_a_caller_constexpr_keeps_autotuned_calls_apart():
    """attorch's softmax passes ``log`` and ``neg`` itself: three calls at one shape that differ
    only there were one key, so two tests' launches had no truth. The caller's constexprs join the
    key; what the configs and heuristics supply (``BLOCK``) does not, since the change may move it."""
    import torch
    import triton
    import triton.language as tl

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import _corpus_truth as ct
    from corpus_ab_eval import _truth_for

    @triton.jit
    def kern(x, n, log: tl.constexpr, BLOCK: tl.constexpr):
        pass

    class Tuner:
        arg_names = ["x", "n", "log", "BLOCK"]

    x = torch.empty(4)
    assert ct.caller_constexprs(Tuner(), kern, (x, 4), {"log": True}) == {"log": True}
    assert ct.caller_constexprs(Tuner(), kern, (x, 4, False), {}) == {"log": False}
    keys = [
        {"truth_pct": p, "tests": {"head": "t[1]"}, "head_shapes": "fp32[4]", "caller_constexprs": {"log": v}}
        for p, v in ((1.0, False), (2.0, True))
    ]
    row = {"test": "t[1]", "launch": "x=fp32[4], n=4, log=True, BLOCK=4; grid 1x1x1"}
    assert _truth_for({"keys": keys}, row)["truth_pct"] == 2.0
    row["launch"] = "x=fp32[4], n=4, log=False, BLOCK=4; grid 1x1x1"
    assert _truth_for({"keys": keys}, row)["truth_pct"] == 1.0
    row["launch"] = "x=fp32[4], n=4, log=True …; grid 1x1x1; num_warps=1"  # kperf elides the rest
    assert _truth_for({"keys": keys}, row)["truth_pct"] == 2.0
    row["launch"] = "x=fp32[4], n=4, lo…"  # cut before the constexpr: the first with these tensors
    assert _truth_for({"keys": keys}, row)["truth_pct"] == 1.0
