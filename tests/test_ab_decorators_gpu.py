"""`kperf ab` on a GPU through Triton's decorators (issue 33): autotune stacked on heuristics.

The CPU tests (``tests/test_ab_decorators.py``) fake the device at its boundary; this one runs the
same two-commit repository's decorated kernels on the real device, with no fake: the pull request
changes a heuristic under an autotuner (BLOCK 256 -> 128), cuts an autotune config list, and
changes a heuristic alone. Each changed launch must be timed, each side through its own tree's
decorators (no "multiple values for argument", no refused derived argument), with the picks of
both sides' autotuners in the row; the unchanged autotuned kernels cost no GPU time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import checkout_path, needs_gpu
from test_ab_decorators import KERNELS, KERNELS_HEAD
from test_pr_check_replay import git

GPU_TESTS = """
import pytest
import torch

from dk import ops


@pytest.mark.parametrize("name", ["stacked", "stacked_same", "heur", "cut", "comment"])
def test_decorated(name):
    x = torch.rand(1 << 22, device="cuda")
    torch.testing.assert_close(ops.call(getattr(ops, name + "_kernel"), x), x * 2)


# the same tuning key again in another test: the autotuner answers from its cache there, and the
# static pass must still record the call's configs (else its rows read as configs dropped/added)
@pytest.mark.parametrize("name", ["cut", "comment"])
def test_again(name):
    x = torch.rand(1 << 22, device="cuda")
    torch.testing.assert_close(ops.call(getattr(ops, name + "_kernel"), x), x * 2)
"""


@needs_gpu
@pytest.mark.gpu
def test_autotune_over_heuristics_is_timed_through_each_sides_decorators(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    for rel, text in {"dk/__init__.py": "", "dk/ops.py": KERNELS, "tests/test_ops.py": GPU_TESTS}.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    (repo / "dk/ops.py").write_text(KERNELS_HEAD)
    git(repo, "commit", "-q", "-a", "-m", "head")
    out = tmp_path / "ab.json"
    # the caller's path too: on the GPU machine kperf-ci's own needs travel there (gpu_env.sh)
    path = os.pathsep.join(filter(None, [checkout_path(repo), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    env.pop("KPERF_DB", None)
    r = subprocess.run(
        [sys.executable, "-m", "kperf_ci", "ab", "--base", "HEAD~1", "--json", str(out), "tests",
         "--kperf-all"],
        cwd=repo, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    print(r.stdout[-6000:], r.stderr[-3000:])
    assert r.returncode in (0, 1) and out.exists(), r.stdout[-3000:] + r.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert [m for m in doc["messages"] if m.startswith("not timed")] == []
    timed = {t["test"].split("::")[-1]: t for t in doc["timed"]}
    # the two cut tests make one launch: timed once, the other test named in its row
    cuts = [n for n in timed if n.endswith("[cut]")]
    assert len(cuts) == 1 and set(timed) == {"test_decorated[stacked]", "test_decorated[heur]", *cuts}, timed
    other = ({"test_decorated[cut]", "test_again[cut]"} - set(cuts)).pop()
    assert any(t.endswith(other) for t in timed[cuts[0]]["identical_in"]), timed[cuts[0]]
    for t in timed.values():
        assert t["verdict"] in ("slower", "faster", "unchanged", "inconclusive"), t
        assert t["ratio"] is not None and t["ci_low"] is not None and t["method"], t
    # both autotuners' picks are in the row of each autotuned launch; none for the heuristic alone
    for name in ("test_decorated[stacked]", cuts[0]):
        assert timed[name]["base_pick"] and timed[name]["head_pick"], timed[name]
    assert timed["test_decorated[heur]"]["base_pick"] is None
    # autotuned calls are timed best against best over each side's own configs (issue 34)
    assert timed[cuts[0]]["configs_timed"] == {"base": 4, "head": 4}, timed[cuts[0]]
    assert timed["test_decorated[stacked]"]["configs_timed"] == {"base": 2, "head": 2}
    cut = "autotune configs: num_warps=16 dropped, num_warps=1 added, 3 unchanged"
    changes = {t["test"].split("::")[-1]: "; ".join(t["changes"]) for t in doc["tests"]}
    assert cut in changes["test_decorated[cut]"] and cut in changes["test_again[cut]"], changes
    statuses = {t["test"].split("::")[-1]: t["status"] for t in doc["tests"]}
    assert statuses["test_decorated[stacked_same]"] == "identical"
    assert statuses["test_decorated[comment]"] == "identical"  # a comment in an autotuned kernel
    assert statuses["test_again[comment]"] == "identical"  # its tuning answered from the cache
    assert doc["gpu_seconds"] > 0
