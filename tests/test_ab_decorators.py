"""`kperf ab` on kernels behind Triton's decorators (issues 33 and 34): a launch is its call.

A launch is its call site, kernel and the caller's arguments. What ``@triton.heuristics``
computes, what an autotune config sets and which config a run's autotuner picks are what a pull
request changed, never what tells two launches apart. So, on a real two-commit repository with
one test per decoration pattern:

- the static diff lists one row per call (an autotuned call compiles every config), with the
  right status: a cut config list is *one* changed launch ("num_warps=16 dropped, ..."), never
  "launched in base only" per config; a comment in an autotuned kernel is identical;
- the timing pass launches the base through the base tree's own decorators on the same call
  (a heuristic value passed on top of the decorator's failed with "got multiple values for
  argument"), each side computing its own derived values;
- an autotuned kernel identical in both trees is identical whatever config each run's
  autotuner picked, with the picks said as a note, and costs no GPU time (issue 34).

`kperf ab` runs as a subprocess with the device faked by the repository's own conftest.py, as in
``tests/test_pr_check_replay.py`` (whose fake this reuses): kernels run in Triton's interpreter,
the replay device's clock charges 11 us per head launch and 10 us per base launch, the
autotuner's benchmarker (the device) is a stand-in that ranks configs by their warps, and every
launch of the timing pass is logged with its side, grid, warps and constexprs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import checkout_path
from test_pr_check_replay import CONFTEST, git

pytest.importorskip("torch")
pytest.importorskip("triton")

BODY = """
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2.0, mask=m)
"""


def kernel(name: str, *decorators: str) -> str:
    return (
        "\n".join([*decorators, "@triton.jit", f"def {name}(x_ptr, y_ptr, n, BLOCK: tl.constexpr):"]) + BODY
    )


def configs(*warps: int, block: str = '{"BLOCK": 128}') -> str:
    return "[" + ", ".join(f"triton.Config({block}, num_warps={w})" for w in warps) + "]"


# two configs, each compiled on every side that compiles the kernel: an autotuned call with more
# than one config (one row, not one per config), whose first and last configs differ
TUNED = (
    '@triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=1), '
    'triton.Config({"BLOCK": 128}, num_warps=4)], key=["n"])'
)

HEADER = "import torch\nimport triton\nimport triton.language as tl\n"

WRAPPERS = '''
def by_meta(n):
    return lambda meta: (triton.cdiv(n, meta["BLOCK"]),)


def call(kernel, x, **kw):
    """The wrapper the tests call, as a library's autograd function would."""
    y = torch.empty_like(x)
    kernel[by_meta(x.numel())](x, y, x.numel(), **kw)
    return y


def plain(x):
    y = torch.empty_like(x)
    plain_kernel[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
    return y


def opts(x):
    y = torch.empty_like(x)
    opts_kernel[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256, num_warps=4)
    return y
'''

KERNELS = "\n\n".join([
    HEADER,
    kernel("plain_kernel"),
    kernel("opts_kernel"),
    kernel("heur_kernel", '@triton.heuristics({"BLOCK": lambda args: 256})'),
    kernel("heur_same_kernel", '@triton.heuristics({"BLOCK": lambda args: 128})'),
    kernel("tuned_kernel", TUNED),
    kernel("cut_kernel", f'@triton.autotune(configs={configs(2, 4, 8, 16)}, key=["n"])'),
    kernel("stacked_kernel", f'@triton.autotune(configs={configs(1, 4, block="{}")}, key=["n"])',
           '@triton.heuristics({"BLOCK": lambda args: 256})'),
    kernel("stacked_same_kernel", f'@triton.autotune(configs={configs(1, 4, block="{}")}, key=["n"])',
           '@triton.heuristics({"BLOCK": lambda args: 128})'),
    kernel("comment_kernel", TUNED),
    WRAPPERS,
])  # fmt: skip

# the pull request: a launch option, a heuristic (256 -> 128) alone and under an autotuner, an
# autotune config list with its widest config cut and a narrower one added, a comment
KERNELS_HEAD = (
    KERNELS.replace("BLOCK=256, num_warps=4)", "BLOCK=256, num_warps=2)")
    .replace(
        '@triton.heuristics({"BLOCK": lambda args: 256})\n@triton.jit\ndef heur_kernel',
        '@triton.heuristics({"BLOCK": lambda args: 128})\n@triton.jit\ndef heur_kernel',
    )
    .replace(
        '@triton.heuristics({"BLOCK": lambda args: 256})\n@triton.jit\ndef stacked_kernel',
        '@triton.heuristics({"BLOCK": lambda args: 128})\n@triton.jit\ndef stacked_kernel',
    )
    .replace(configs(2, 4, 8, 16), configs(1, 2, 4, 8))
    .replace(
        "def comment_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):\n",
        "def comment_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):\n    # one block per program\n",
    )
)

TESTS = """
import pytest
import torch

from dk import ops


@pytest.mark.parametrize("name", ["plain", "opts"])
def test_plain(name):
    x = torch.rand(1000)
    torch.testing.assert_close(getattr(ops, name)(x), x * 2)


@pytest.mark.parametrize("name", ["heur", "heur_same", "tuned", "cut", "stacked", "stacked_same", "comment"])
def test_decorated(name):
    x = torch.rand(1000)
    torch.testing.assert_close(ops.call(getattr(ops, name + "_kernel"), x), x * 2)
"""

# The autotuner's benchmarker is the device: faked for the timing pass as one that runs the
# config once and ranks it by its warps (fewest first). And, for issue 34, an autotuner whose
# pick differs between runs: with KPERF_TEST_HEAD_PICKS_LAST, the head tree's autotuners keep
# their configs in reverse order, so that the config they pick under the interpreter (the first
# they keep) is the base's last. The fake imports torch before triton, as a suite's own modules
# do, so that each static pass's first compile worker is the one forked once torch is imported
# (capture/static/spare.py), not one spawned that imports torch and triton again.
CONFTEST_DECORATORS = (
    CONFTEST
    + """

if LOG:
    import torch  # before triton, as the tests import them
    from triton.runtime.autotuner import Autotuner

    def fake_benchmarker(kernel_call, quantiles):
        n = len(LAUNCHES)
        kernel_call()
        with open(LOG) as f:
            warps = [json.loads(x)["num_warps"] for x in f.read().splitlines()][n:] or [4]
        return [float(warps[-1] or 4)] * len(quantiles)

    Autotuner.do_bench = property(lambda self: fake_benchmarker)

if os.environ.get("KPERF_TEST_HEAD_PICKS_LAST") and "kperf-base-" not in __file__:
    from triton.runtime.autotuner import Autotuner

    _prune = Autotuner.prune_configs
    Autotuner.prune_configs = lambda self, kwargs: list(reversed(_prune(self, kwargs)))
"""
)


def make_repo(root: Path, base: dict[str, str], head: dict[str, str]) -> Path:
    repo = root / "repo"
    files = {"dk/__init__.py": "", "conftest.py": CONFTEST_DECORATORS,
             "pyproject.toml": '[tool.kperf]\narch = ["sm_90"]\n', **base}  # fmt: skip
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    for rel, text in head.items():
        (repo / rel).write_text(text)
    git(repo, "commit", "-q", "-a", "-m", "head")
    return repo


def kperf_ab(repo: Path, tmp: Path, **env_extra: str) -> tuple[subprocess.CompletedProcess, dict, list]:
    log = tmp / "launches.jsonl"
    env = dict(
        os.environ,
        KPERF_TEST_FAKE_GPU=str(log),
        TRITON_INTERPRET="1",
        PYTHONPATH=checkout_path(repo),
        **env_extra,
    )
    env.pop("KPERF_DB", None)
    out = tmp / "ab.json"
    r = subprocess.run(
        [sys.executable, "-m", "kperf_ci", "ab", "--base", "HEAD~1", "--gpu", "--json", str(out), "tests",
         "--kperf-all"],
        cwd=repo, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    doc = json.loads(out.read_text()) if out.exists() else {}
    launches = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    return r, doc, launches


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, dict, list]:
    """`kperf ab --base HEAD~1 --gpu` once on the repository with one test per decoration."""
    tmp = tmp_path_factory.mktemp("decorators")
    repo = make_repo(tmp, {"dk/ops.py": KERNELS, "tests/test_ops.py": TESTS}, {"dk/ops.py": KERNELS_HEAD})
    return kperf_ab(repo, tmp)


def _test(doc: dict, name: str) -> dict:
    (t,) = [t for t in doc["tests"] if t["test"].endswith("::" + name)]
    return t


@pytest.mark.slow
def test_the_static_diff_lists_one_row_per_call_with_the_right_status(planted):
    r, doc, _ = planted
    assert doc, r.stdout + r.stderr
    cut = "autotune configs: num_warps=16 dropped, num_warps=1 added, 3 unchanged"
    expected = {
        "test_plain[plain]": ("identical", []),
        "test_plain[opts]": ("changed", ["num_warps 4 -> 2"]),
        "test_decorated[heur]": ("changed", ["BLOCK 256 -> 128", "grid (4, 1, 1) -> (8, 1, 1)"]),
        "test_decorated[heur_same]": ("identical", []),
        "test_decorated[tuned]": ("identical", []),
        # a cut config list is one changed launch, its configs compared as sets
        "test_decorated[cut]": ("changed", [cut]),
        "test_decorated[stacked]": ("changed", ["config num_warps=1: BLOCK 256 -> 128",
                                                "config num_warps=4: BLOCK 256 -> 128"]),
        "test_decorated[stacked_same]": ("identical", []),
        "test_decorated[comment]": ("identical", []),  # a comment in an autotuned kernel
    }  # fmt: skip
    for name, (status, changes) in expected.items():
        t = _test(doc, name)
        assert t["status"] == status, (name, t)
        assert len(t["launches"]) == 1, (name, t["launches"])  # one row per call, not per config
        text = "; ".join(t["changes"])
        assert "launched in base only" not in text and "launched in head only" not in text, (name, text)
        for c in changes:
            assert c in text, (name, text)


@pytest.mark.slow
def test_changed_decorated_launches_are_timed_through_the_bases_own_decorators(planted):
    r, doc, launches = planted
    assert doc, r.stdout + r.stderr
    not_timed = [m for m in doc["messages"] if m.startswith("not timed")]
    assert not_timed == [], not_timed  # no "multiple values for argument", no refused argument
    timed = {t["test"].split("::")[-1]: t for t in doc["timed"]}
    assert set(timed) == {
        "test_plain[opts]",
        "test_decorated[heur]",
        "test_decorated[cut]",
        "test_decorated[stacked]",
    }
    assert all(t["verdict"] == "slower" for t in timed.values()), timed  # the fake clock: +10%
    # each side computes its own heuristic value: the base's decorator says 256, the head's 128
    for kernel in ("heur_kernel", "stacked_kernel"):
        sides = {(x["side"], x["const"]["BLOCK"]) for x in launches if x["kernel"] == kernel}
        assert sides == {("base", 256), ("head", 128)}, (kernel, sides)
    base_heur = {tuple(x["grid"]) for x in launches if x["kernel"] == "heur_kernel" and x["side"] == "base"}
    assert base_heur == {(4, 1, 1)}  # the base's grid at this call: 1000 elements by 256
    # the base's own autotuner benchmarked the base's own configs (16 warps is the base's only)
    base_cut = {x["num_warps"] for x in launches if x["kernel"] == "cut_kernel" and x["side"] == "base"}
    assert base_cut == {2, 4, 8, 16}, base_cut
    # each side's autotuner pick is in the row (the fake benchmarker ranks fewest warps first)
    assert (timed["test_decorated[cut]"]["base_pick"], timed["test_decorated[cut]"]["head_pick"]) == (
        "BLOCK=128,num_ctas=1,num_stages=3,num_warps=2",
        "BLOCK=128,num_ctas=1,num_stages=3,num_warps=1",
    )
    assert timed["test_decorated[stacked]"]["base_pick"] == "num_ctas=1,num_stages=3,num_warps=1"
    assert timed["test_decorated[heur]"]["base_pick"] is None  # no autotuner
    # an autotuned call is timed best against best: every surviving config of each side, through
    # each side's own decorators (issue 34); the head's searched configs are its own list
    cut = timed["test_decorated[cut]"]
    assert cut["configs_timed"] == {"base": 4, "head": 4} and cut["base_best"] and cut["head_best"]
    head_cut = {x["num_warps"] for x in launches if x["kernel"] == "cut_kernel" and x["side"] == "head"}
    assert head_cut == {1, 2, 4, 8}, head_cut
    assert any(c.startswith("best against best: base ") for c in cut["changes"]), cut["changes"]
    # a called change of an autotuned call is checked once more before it stands: the head (the
    # side that lost) timed with another of its configs; +10% on every config, so it still loses
    for row in (cut, timed["test_decorated[stacked]"]):
        look = row["second_look"]
        assert look["side"] == "head" and look["second"]["verdict"] == "slower", look
        assert any("timed again: +" in c for c in row["changes"]), row["changes"]
    assert timed["test_decorated[stacked]"]["configs_timed"] == {"base": 2, "head": 2}
    assert timed["test_decorated[heur]"]["base_best"] is None  # no autotuner: its launch as made
    # unchanged kernels cost no GPU time
    assert not [x for x in launches if x["kernel"] in ("plain_kernel", "tuned_kernel", "comment_kernel")]


@pytest.mark.slow
def test_an_autotuned_kernel_identical_in_both_trees_is_identical_whatever_each_run_picked(tmp_path):
    """Issue 34: the same source and config list in both trees, and autotuners that pick
    differently in the two runs (here: the first config in the base's, the last in the head's).
    The kernel is identical and costs no GPU time; the picks are said as a note."""
    # the planted repository's module, whose tuned_kernel (the same source at the same line, the
    # same call) the planted run compiled into the suite's Triton cache; only tuned_kernel is launched
    ops = KERNELS
    tests = "import torch\nfrom dk import ops\n\n\ndef test_tuned():\n    x = torch.rand(1000)\n" \
        "    torch.testing.assert_close(ops.call(ops.tuned_kernel, x), x * 2)\n"  # fmt: skip
    repo = make_repo(
        tmp_path,
        {"dk/ops.py": ops, "tests/test_ops.py": tests},
        {"dk/ops.py": ops.replace("def call(", "# an unrelated line\ndef call(")},
    )
    r, doc, launches = kperf_ab(repo, tmp_path, KPERF_TEST_HEAD_PICKS_LAST="1")
    assert doc, r.stdout + r.stderr
    assert r.returncode == 0, r.stdout + r.stderr
    t = _test(doc, "test_tuned")
    assert t["status"] == "identical", t
    assert doc["timed"] == [] and launches == []  # no GPU time
    assert t["notes"] == [
        "tuned_kernel: the autotuner picked BLOCK=64,num_warps=1 in base and BLOCK=128,num_warps=4 in head: "
        "a tuning difference, not this change"
    ]
    assert "note: tuned_kernel: the autotuner picked BLOCK=64,num_warps=1 in base" in r.stdout


def _row(warps: int, block: int, sass: str, autotune: dict) -> dict:
    """A manifest row of an autotuned launch as a static pass on a GPU stores it."""
    return {
        "site": "k.py::tuned_kernel", "name": "tuned_kernel", "spec": "s", "grid": [1000 // block, 1, 1],
        "args": {"x_ptr": "fp32[1000]", "y_ptr": "fp32[1000]", "n": "1000", "BLOCK": str(block)},
        "options": {"num_warps": warps}, "config": f"num_warps={warps},num_stages=3,num_ctas=1",
        "tuned": ["BLOCK", "num_warps"], "derived": [], "autotune": autotune,
        "code": {"sm_90": {"sass": sass, "registers": 10}},
    }  # fmt: skip


def test_a_pick_outside_the_sampled_configs_is_a_note_not_an_added_launch():
    """On a GPU with a capped sample of configs, a run whose autotuner picks a config outside the
    sample records that launch on its own: the head's pick is no config added to the kernel."""
    from kperf_ci.judge.launch_diff import diff_tests

    c0, c1 = _row(1, 64, "A", {"index": 0, "count": 3}), _row(2, 128, "B", {"index": 1, "count": 3})
    base = [{**c0, "autotune": {"index": 0, "count": 3, "chosen": True}}, c1]
    head = [c0, c1, _row(4, 128, "C", {"count": 3, "chosen": True})]
    (t,) = diff_tests({"t": base}, {"t": head})
    assert t.status == "identical", t.to_dict()
    (lc,) = t.launches
    assert lc.notes == [
        "the autotuner picked BLOCK=64,num_warps=1 in base and BLOCK=128,num_warps=4 in head: "
        "a tuning difference, not this change"
    ]
    assert len(lc.pairs) == 2  # every config compiled on both sides, for the static verdict
    # what stands for the call is one config on both sides, never one run's pick against another's
    assert lc.base["options"] == lc.head["options"] and lc.base["args"] == lc.head["args"]


def _plain(warps: int, code: dict) -> dict:
    return {
        "site": "k.py::add_kernel", "name": "add_kernel", "spec": "s", "grid": [16, 1, 1],
        "args": {"x_ptr": "fp32[1024]", "n": "1024", "BLOCK": "64"}, "options": {"num_warps": warps},
        "config": f"num_warps={warps},num_stages=3,num_ctas=1", "code": code,
    }  # fmt: skip


def test_a_launch_compiled_on_neither_side_is_unknown_never_changed():
    """Issue 35: a CPU runner whose compiles failed on both sides read every launch "changed" (the
    compile errors were the only "change"), and a comment-only kernel with them. A launch that
    compiled on neither side is unknown, and so is its test; one that compiled on one side only
    did change (the pull request broke or fixed its compile)."""
    from kperf_ci.judge.launch_diff import diff_tests

    err = {"sm_90": {"error": "AssertionError: Torch not compiled with CUDA enabled"}}
    ok = {"sm_90": {"sass": "A", "registers": 10}}
    (t,) = diff_tests({"t": [_plain(4, err)]}, {"t": [_plain(4, err)]})
    assert (t.status, t.launches[0].status) == ("unknown", "unknown"), t.to_dict()
    # an option change whose code nobody could compile is still not a compared change
    (t,) = diff_tests({"t": [_plain(4, err)]}, {"t": [_plain(2, err)]})
    assert (t.status, t.launches[0].status) == ("unknown", "unknown"), t.to_dict()
    assert "num_warps 4 -> 2" in t.launches[0].changes
    (t,) = diff_tests({"t": [_plain(4, ok)]}, {"t": [_plain(4, err)]})
    assert (t.status, t.launches[0].status) == ("changed", "changed"), t.to_dict()
    (t,) = diff_tests({"t": [_plain(4, ok)]}, {"t": [_plain(4, ok)]})
    assert t.status == "identical"
    # autotuned: every config of both sides failed to compile
    c = [_row(1, 64, "", {"index": 0, "count": 2}), _row(2, 128, "", {"index": 1, "count": 2})]
    bad = [{**r, "code": err} for r in c]
    head = [bad[0], {**bad[1], "config": "num_warps=4,num_stages=3,num_ctas=1"}]
    (t,) = diff_tests({"t": bad}, {"t": head})
    assert t.launches[0].status == "unknown", t.to_dict()


def test_a_cut_config_list_names_only_what_was_cut_whatever_each_side_sampled():
    """Issue 34: with a capped sample of configs, a cut list changes which configs a side
    samples. Dropped and added are read from the lists each side recorded, so a config that one
    side happened to compile and the other did not is neither."""
    from kperf_ci.judge.launch_diff import diff_tests
    from kperf_ci.model import config_key

    def key(w: int, b: int) -> str:
        return config_key({"BLOCK": b, "num_warps": w})

    full = [key(w, b) for w in (1, 2, 4) for b in (64, 128)]  # six configs
    cut = [k for k in full if k != key(4, 128)]
    # base sampled (1,64) (2,128) (4,128); head, without (4,128), sampled (1,64) (2,128) (4,64)
    base = [_row(w, b, "S", {"index": full.index(key(w, b)), "count": 6, "configs": full})
            for w, b in ((1, 64), (2, 128), (4, 128))]  # fmt: skip
    head = [_row(w, b, "S", {"index": cut.index(key(w, b)), "count": 5, "configs": cut})
            for w, b in ((1, 64), (2, 128), (4, 64))]  # fmt: skip
    (t,) = diff_tests({"t": base}, {"t": head})
    assert t.status == "changed", t.to_dict()
    (lc,) = t.launches
    assert lc.changes == ["autotune configs: BLOCK=128,num_warps=4 dropped, 2 unchanged"], lc.changes
