"""The PR check as a user runs it: `kperf ab --base HEAD~1` on a real two-commit repository.

One repository, no pytest configuration of its own (pytest's rootdir is then wherever pytest puts
it), whose head commit plants one class of change per test: launch options, a constexpr, the
grid alone, arithmetic, spills, a comment, two tests that swap a shared variant, a kernel added to
a test, one removed from a test, a new test, a deleted test.  The CLI runs as a subprocess on the
CPU (static pass only: the interpreter); the verdicts are read from the JSON document it writes
and from the markdown and HTML it renders.  `tests/test_pr_check_gpu.py` does the same timed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import git

KERNELS = """
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(y_ptr + offs, x * 3.0, mask=m)


@triton.jit
def math_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(y_ptr + offs, x + 1.0, mask=m)


@triton.jit
def zero_kernel(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, 0.0, mask=offs < n)


@triton.jit
def dot_kernel(a_ptr, b_ptr, c_ptr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = tl.load(a_ptr + rm[:, None] * BK + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * BN + rn[None, :])
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], tl.dot(a, b))
"""

# head: comments in copy_kernel only (same code); more arithmetic in math_kernel
KERNELS_HEAD = KERNELS.replace(
    "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n    m = offs < n\n"
    "    tl.store(y_ptr + offs, tl.load",
    "    # one block of elements per program\n    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
    "    m = offs < n  # guard the tail\n    tl.store(y_ptr + offs, tl.load",
    1,
).replace("tl.store(y_ptr + offs, x + 1.0, mask=m)", "tl.store(y_ptr + offs, tl.exp(x) * x + 1.0, mask=m)")

TESTS_BASE = """
import pytest
import torch
from kernels import copy_kernel, dot_kernel, math_kernel, scale_kernel, zero_kernel

N = 1024


def xy():
    x = torch.rand(N)
    return x, torch.empty_like(x)


@pytest.mark.kperf
def test_comment():
    x, y = xy()
    copy_kernel[(4,)](x, y, N, BLOCK=256)
    assert torch.equal(x, y)


@pytest.mark.kperf
def test_options():
    x, y = xy()
    scale_kernel[(4,)](x, y, N, BLOCK=256, num_warps=4)


@pytest.mark.kperf
def test_constexpr():
    x, y = xy()
    scale_kernel[(N // 512,)](x, y, N, BLOCK=512)


@pytest.mark.kperf
def test_grid_only():
    x, y = xy()
    copy_kernel[(4,)](x, y, N, BLOCK=256)


@pytest.mark.kperf
def test_arithmetic():
    x, y = xy()
    math_kernel[(4,)](x, y, N, BLOCK=256)


@pytest.mark.kperf
def test_spills():
    a = torch.rand(128, 64)
    b = torch.rand(64, 128)
    c = torch.empty(128, 128)
    dot_kernel[(1,)](a, b, c, BM=128, BN=128, BK=64, num_warps=8)


@pytest.mark.kperf
def test_swap_a():
    x, y = xy()
    zero_kernel[(N // 128,)](y, N, BLOCK=128)


@pytest.mark.kperf
def test_swap_b():
    x, y = xy()
    zero_kernel[(N // 256,)](y, N, BLOCK=256)


@pytest.mark.kperf
def test_kernel_added():
    x, y = xy()
    copy_kernel[(4,)](x, y, N, BLOCK=256)


@pytest.mark.kperf
def test_kernel_removed():
    x, y = xy()
    copy_kernel[(4,)](x, y, N, BLOCK=256)
    math_kernel[(4,)](x, y, N, BLOCK=256)


@pytest.mark.kperf
def test_deleted():
    x, y = xy()
    copy_kernel[(4,)](x, y, N, BLOCK=256)
"""

TESTS_HEAD = (
    TESTS_BASE.replace("BLOCK=256, num_warps=4)", "BLOCK=256, num_warps=8)")
    .replace("scale_kernel[(N // 512,)](x, y, N, BLOCK=512)", "scale_kernel[(N // 256,)](x, y, N, BLOCK=256)")
    .replace(
        "def test_grid_only():\n    x, y = xy()\n    copy_kernel[(4,)]",
        "def test_grid_only():\n    x, y = xy()\n    copy_kernel[(5,)]",
    )
    .replace("BK=64, num_warps=8)", "BK=64, num_warps=1)")
    .replace("zero_kernel[(N // 128,)](y, N, BLOCK=128)", "zero_kernel[(N // 256,)](y, N, BLOCK=256)#a")
    .replace("zero_kernel[(N // 256,)](y, N, BLOCK=256)\n", "zero_kernel[(N // 128,)](y, N, BLOCK=128)\n")
    .replace(
        "def test_kernel_added():\n    x, y = xy()\n    copy_kernel[(4,)](x, y, N, BLOCK=256)\n",
        "def test_kernel_added():\n    x, y = xy()\n    copy_kernel[(4,)](x, y, N, BLOCK=256)\n"
        "    zero_kernel[(4,)](y, N, BLOCK=256)\n",
    )
    .replace(
        "    copy_kernel[(4,)](x, y, N, BLOCK=256)\n    math_kernel[(4,)](x, y, N, BLOCK=256)\n",
        "    copy_kernel[(4,)](x, y, N, BLOCK=256)\n",
    )
    .replace("def test_deleted():", "def test_new():")
)


def kperf(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kperf_ci", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=600,
    )


def make_repo(path: Path, files_base: dict[str, str], files_head: dict[str, str]) -> Path:
    path.mkdir()
    git(path, "init", "-q")
    for name, text in files_base.items():
        (path / name).write_text(text)
    git(path, "add", "-A")
    git(path, "commit", "-qm", "base")
    for name, text in files_head.items():
        (path / name).write_text(text)
    git(path, "add", "-A")
    git(path, "commit", "-qm", "head")
    return path


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """`kperf ab --base HEAD~1` once on the planted repository; (process, document, report dir)."""
    tmp = tmp_path_factory.mktemp("prcheck")
    repo = make_repo(
        tmp / "repo",
        {"kernels.py": KERNELS, "test_kernels.py": TESTS_BASE},
        {"kernels.py": KERNELS_HEAD, "test_kernels.py": TESTS_HEAD},
    )
    p = kperf("ab", "--base", "HEAD~1", "--no-gpu", "--json", "out/ab.json", cwd=repo)
    doc = json.loads((repo / "out/ab.json").read_text()) if (repo / "out/ab.json").exists() else None
    return p, doc, repo


def _test(doc: dict, name: str) -> dict:
    (t,) = [t for t in doc["tests"] if t["test"].endswith("::" + name)]
    return t


@pytest.mark.slow
def test_exit_code_is_1_for_the_spilling_tile(planted):
    p, doc, _ = planted
    assert doc is not None, p.stdout + p.stderr
    assert p.returncode == 1, p.stdout + p.stderr
    assert doc["exit_code"] == 1
    regs = [r for r in doc["static_regressions"] if r["test"].endswith("::test_spills")]
    assert regs and any("spill" in r["reason"] or "registers" in r["reason"] for r in regs), doc[
        "static_regressions"
    ]
    # nothing else is called a regression: test_arithmetic's and swap_a's instruction counts
    # (exp added; BLOCK 128 -> 256 adds 1 of 15 SASS instructions) are shown, not judged
    assert {r["test"].split("::")[-1] for r in doc["static_regressions"]} == {"test_spills"}
    assert any("spills" in r["reason"] for r in regs)


def test_comment_only_change_is_identical_and_costs_no_gpu_time(planted):
    _, doc, _ = planted
    assert _test(doc, "test_comment")["status"] == "identical"
    assert not any(t.endswith("::test_comment") for t in doc["static"]["tests_to_time"])


@pytest.mark.parametrize(
    "name, expected",
    [
        ("test_options", ["num_warps 4 -> 8"]),
        ("test_constexpr", ["BLOCK 512 -> 256", "grid (2, 1, 1) -> (4, 1, 1)"]),
        ("test_spills", ["num_warps 8 -> 1", "sm_90 SASS changed", "registers"]),
        ("test_arithmetic", ["sm_90 SASS changed", "SASS instructions"]),
        ("test_swap_a", ["BLOCK 128 -> 256"]),
        ("test_swap_b", ["BLOCK 256 -> 128"]),
        ("test_kernel_added", ["launched in head only"]),
        ("test_kernel_removed", ["launched in base only"]),
    ],
)
@pytest.mark.slow
def test_changed_tests_say_what_changed(planted, name, expected):
    _, doc, _ = planted
    t = _test(doc, name)
    assert t["status"] == "changed"
    text = "; ".join(t["changes"])
    for e in expected:
        assert e in text, text
    assert t["test"] in doc["static"]["tests_to_time"]


def test_grid_only_change_is_timed_though_the_code_is_identical(planted):
    _, doc, _ = planted
    t = _test(doc, "test_grid_only")
    assert t["status"] == "changed"
    assert t["changes"] == ["copy_kernel: grid (4, 1, 1) -> (5, 1, 1)"]


def test_added_and_deleted_tests(planted):
    _, doc, _ = planted
    assert _test(doc, "test_new")["status"] == "added"
    assert _test(doc, "test_deleted")["status"] == "removed"


def test_reports_name_kernel_test_and_what_moved(planted):
    _, doc, repo = planted
    md = (repo / "reports/ab/comment.md").read_text()
    html = (repo / "reports/ab/index.html").read_text()
    summary = (repo / "reports/ab/summary.md").read_text()
    assert md.startswith("<!-- kperf-ab -->")
    import html as htmllib

    from kperf_ci.report.safe_text import markdown_safe

    for text in (md, summary):  # stored text is escaped for markdown (no links, no markup)
        assert markdown_safe("test_spills") in text and markdown_safe("num_warps 8 → 1") in text
        assert "static only" in text
    # the text a reader sees: the page marks where lines may wrap (<wbr>) and keeps each arrow
    # on the line of the value before it, so the words are compared without the tags
    text = htmllib.unescape(re.sub(r"<[^>]+>", "", html)).replace("\u00a0", " ")
    assert "test_spills" in text and "num_warps 8 → 1" in text and "static only" in text
    assert "registers" in html and "test_grid_only" in html


def test_the_database_holds_both_static_runs_and_the_document(planted):
    _, _, repo = planted
    from kperf_ci import store
    from kperf_ci.prcheck.document import load_ab_document

    runs = store.list_runs(repo / "reports/ab.db")
    assert len(runs) == 2
    assert load_ab_document(repo / "reports/ab.db")["tests"]


@pytest.mark.slow
def test_no_fail_reports_but_exits_0(tmp_path):
    """A comment-only change: identical, no GPU time even where one would be there, exit 0."""
    kernels_head = KERNELS_HEAD.replace("tl.exp(x) * x + 1.0", "x + 1.0")  # only the comments differ
    tests = TESTS_BASE.split("@pytest.mark.kperf\ndef test_options")[0]
    repo = make_repo(
        tmp_path / "r", {"kernels.py": KERNELS, "test_k.py": tests}, {"kernels.py": kernels_head}
    )
    p = kperf("ab", "--base", "HEAD~1", "--gpu", "--json", "ab.json", cwd=repo)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "no GPU time spent" in p.stdout
    doc = json.loads((repo / "ab.json").read_text())
    assert [t["status"] for t in doc["tests"]] == ["identical"]
    assert doc["timed"] == []


def test_a_capture_that_sees_nothing_is_an_error_not_a_pass(tmp_path):
    """Marked tests that launch no kernel kperf can see: exit 2 with one line, never 'identical'."""
    tests = "import pytest\n\n\n@pytest.mark.kperf\ndef test_nothing():\n    assert 1 + 1 == 2\n"
    repo = make_repo(tmp_path / "r", {"test_k.py": tests}, {"test_k.py": tests + "\n# head\n"})
    p = kperf("ab", "--base", "HEAD~1", cwd=repo)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "captured no Triton launch" in p.stderr
    assert "Traceback" not in p.stderr


def test_bad_base_revision_is_one_line_exit_2(tmp_path):
    repo = make_repo(tmp_path / "r", {"a.txt": "a"}, {"a.txt": "b"})
    p = kperf("ab", "--base", "no-such-branch", cwd=repo)
    assert p.returncode == 2
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    # refused before anything is written: no reports/ (with its .gitignore), no database folder
    # (walk 2 of issue 38, finding 22)
    assert not (repo / "reports").exists()
    assert (
        subprocess.run(
            ["git", "status", "--short", "--ignored"], cwd=repo, capture_output=True, text=True
        ).stdout
        == ""
    )


def test_a_base_beyond_a_repository_without_remote_says_how_far_head_goes(tmp_path):
    """Found by a fresh walk: HEAD~5 of a two-commit repository without a remote was told to
    `git fetch origin main`."""
    repo = make_repo(tmp_path / "r", {"a.txt": "a"}, {"a.txt": "b"})
    p = kperf("ab", "--base", "HEAD~5", cwd=repo)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    assert "no remote to fetch it from and 2 commits on HEAD" in p.stderr and "git fetch" not in p.stderr


def test_a_base_that_is_head_with_no_change_is_said_up_front(tmp_path):
    """Walk 2 of issue 38, finding 21: `--base origin/master` where origin/master was HEAD, on a
    clean tree, started minutes of static passes without a word."""
    from kperf_ci.capture.launches.base_tree import resolve_rev, same_code_note

    repo = make_repo(tmp_path / "r", {"a.txt": "a"}, {"a.txt": "b"})
    head, parent = resolve_rev("HEAD", repo), resolve_rev("HEAD~1", repo)
    note = same_code_note("origin/master", head, head, repo)
    assert note is not None and "the base (origin/master) is HEAD" in note and "same code" in note
    assert same_code_note("HEAD~1", parent, head, repo) is None  # another commit
    (repo / "new.py").write_text("x = 1\n")  # an untracked file is a change of the working tree
    assert same_code_note("HEAD", head, head, repo) is None
    (repo / "new.py").unlink()
    (repo / "a.txt").write_text("edited\n")
    assert same_code_note("HEAD", head, head, repo) is None


def test_shallow_clone_and_non_repository_say_what_to_do(tmp_path):
    """CI checks out one commit by default: the base is missing, and the error says how to fetch it."""
    repo = make_repo(tmp_path / "r", {"a.txt": "a"}, {"a.txt": "b"})
    shallow = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{repo}", str(shallow)], check=True)
    p = kperf("ab", "--base", "HEAD~1", cwd=shallow)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "shallow" in p.stderr and "fetch-depth: 0" in p.stderr
    (tmp_path / "plain").mkdir()
    p = kperf("ab", "--base", "HEAD~1", cwd=tmp_path / "plain")
    assert p.returncode == 2 and "not inside a git repository" in p.stderr


@pytest.mark.slow
def test_failing_head_tests_are_one_error_line_after_the_pytest_tail(tmp_path):
    tests = (
        "import pytest\nimport torch\nfrom kernels import copy_kernel\n\n\n@pytest.mark.kperf\n"
        "def test_copy():\n    x = torch.rand(64)\n    y = torch.empty_like(x)\n"
        "    copy_kernel[(1,)](x, y, 64, BLOCK=64)\n    assert torch.equal(x, y){tail}\n"
    )
    repo = make_repo(
        tmp_path / "r",
        {"kernels.py": KERNELS, "test_k.py": tests.format(tail="")},
        {"test_k.py": tests.format(tail=" and False")},
    )
    p = kperf("ab", "--base", "HEAD~1", cwd=repo)
    assert p.returncode == 2, p.stdout + p.stderr
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: static pass in the head tree: 1 test(s) failed") and "\\x0a" not in last
    assert "1 failed" in p.stderr  # pytest's own closing line came before it, for context


def test_the_gpu_seconds_of_a_launch_count_its_warm_up_and_config_search():
    """kperf ab's GPU seconds are all the timing the GPU did for a launch: its A/B loop, both
    sides' warm-up and the search for each side's best config; an older document's rows count
    their loop and say the rest was not recorded."""
    from kperf_ci.prcheck.document import gpu_seconds, gpu_seconds_text

    rows = [
        {"seconds": 1.5, "warmup_seconds": 0.25, "search_seconds": 0.75},
        {"seconds": 0.5, "warmup_seconds": 0.25, "search_seconds": None},
    ]
    assert [gpu_seconds(t) for t in rows] == [2.5, 0.75]
    assert gpu_seconds_text(rows) == "A/B 2.00 s, warm-up 0.50 s, config search 0.75 s"
    old = [{"seconds": 2.0}]
    assert gpu_seconds(old[0]) == 2.0
    assert gpu_seconds_text(old) == "A/B 2.00 s, warm-up not recorded, config search not recorded"
    assert gpu_seconds_text([]) == "A/B 0.00 s, warm-up 0.00 s, config search 0.00 s"  # nothing timed


def test_a_remote_branch_missing_here_names_the_fetch_for_it_and_the_branches_known(tmp_path):
    """Found by a fresh walk: a shallow clone whose remote's branch is master was told, of
    --base origin/main, to `git fetch origin main`, which fails there too."""
    repo = make_repo(tmp_path / "r", {"a.txt": "a"}, {"a.txt": "b"})
    subprocess.run(["git", "branch", "-M", "master"], cwd=repo, check=True)
    shallow = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{repo}", str(shallow)], check=True)
    p = kperf("ab", "--base", "origin/main", cwd=shallow)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    assert "origin's one branch known here is origin/master (`--base origin/master`?);" in p.stderr
    assert "`git fetch origin main`" in p.stderr and "shallow" in p.stderr
    p = kperf("ab", "--base", "origin/release-1", cwd=shallow)
    assert "`git fetch origin release-1`" in p.stderr and "`git fetch origin main`" not in p.stderr
