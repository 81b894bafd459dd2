"""`kperf ab` on a repository whose tests never call kperf.bench (as Liger-Kernel's): the changed
launches are replayed and timed A/B against the base's own launch of the same kernel.

`kperf ab --gpu` runs as a subprocess on a real two-commit git repository. Only the device
boundary is faked, by the repository's own conftest.py (test code, switched on by an environment
variable): kernels run in Triton's interpreter, the replay device's timing backend reads a clock
that charges 11 us per launch of the head tree's kernels and 10 us per launch of the base
tree's, and every launch made in the timing pass is logged (file, kernel, grid, num_warps and
constexprs), so the test sees which launches were sent to timing and how the base side was made.
A launch repeated from a state it once left unchanged is logged and charged but not interpreted
again (the kernels are deterministic: it would change nothing).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import checkout_path, needs_gpu

pytest.importorskip("torch")
pytest.importorskip("triton")

KERNELS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2.0, mask=m)


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


def scale(x):
    """The wrapper the tests call, as a library's autograd function would."""
    y = torch.empty_like(x)
    BLOCK, WARPS = 256, 4
    scale_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, x.numel(), BLOCK=BLOCK, num_warps=WARPS)
    return y


def copy(x):
    y = torch.empty_like(x)
    copy_kernel[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256, num_warps=4)
    return y
'''

TESTS = """
import pytest
import torch

from abkern.ops import copy, scale


# two sizes, neither a multiple of 16: Triton specializes an int argument on that, so both
# launches are one compiled variant a side, each its own launch (its own n and grid)
@pytest.mark.parametrize("n", [1000, 4095])
def test_scale(n):
    x = torch.rand(n)
    torch.testing.assert_close(scale(x).float(), x * 2)


def test_copy():
    x = torch.rand(512)
    assert torch.equal(copy(x), x)
"""

# The device boundary, faked for this repository's timing pass only (KPERF_TEST_FAKE_GPU=1 and
# --kperf-mode gpu): never part of kperf-ci.
CONFTEST = '''
import json
import os

LOG = os.environ.get("KPERF_TEST_FAKE_GPU")
LAUNCHES = []


if LOG:
    import kperf_ci.plugin

    kperf_ci.plugin.cuda_available = lambda: True  # the device is faked below: gpu mode may start


def pytest_configure(config):
    if not LOG or config.getoption("kperf_mode", default=None) != "gpu":
        return
    from triton.runtime.interpreter import InterpretedFunction

    from kperf_ci.capture.launches import gpu
    from kperf_ci.capture.launches.replay import ReplayDevice
    from kperf_ci.plugin import gpu_bench

    import hashlib

    import torch

    orig = InterpretedFunction.run
    # Launch states (kernel, grid, every argument with the bytes of each tensor's storage) that a
    # launch left exactly as it found them. A kernel is deterministic, so a later launch from such
    # a state is a no-op and is not interpreted again: the timing loop repeats the same launch
    # hundreds of times, each ~30 ms in the interpreter (most of this file's minutes), while the
    # clock below charges by launch count, never by what ran. Any launch from a state not seen
    # to settle (new arguments, new contents, another kernel) still runs in the interpreter.
    settled = set()

    def launch_state(fn, args, grid, kwargs):
        h = hashlib.sha256(repr((fn.fn.__code__.co_filename, fn.fn.__name__, grid)).encode())
        for v in (*args, *kwargs.items()):
            for x in v if isinstance(v, tuple) else (v,):
                if isinstance(x, torch.Tensor):
                    raw = torch.empty(0, dtype=torch.uint8).set_(x.untyped_storage())
                    h.update(repr((x.data_ptr(), x.dtype, tuple(x.shape), x.stride())).encode())
                    h.update(raw.numpy().tobytes())
                else:
                    h.update(repr(x).encode())
        return h.digest()

    def run(fn, *args, grid, warmup, **kwargs):
        if warmup:
            return orig(fn, *args, grid=grid, warmup=warmup, **kwargs)
        path = fn.fn.__code__.co_filename
        side = "base" if "kperf-base-" in path else "head"
        LAUNCHES.append(side)
        bound = {**dict(zip(fn.arg_names, args)), **kwargs}
        consts = {k: v for k, v in bound.items() if k.isupper()}
        g = grid(kwargs) if callable(grid) else grid
        with open(LOG, "a") as f:
            f.write(json.dumps({"side": side, "kernel": fn.fn.__name__, "grid": list(g),
                                "num_warps": kwargs.get("num_warps"), "const": consts}) + "\\n")
        before = launch_state(fn, args, g, kwargs)
        if before in settled:
            return None  # what the interpreter's run returns
        out = orig(fn, *args, grid=grid, warmup=warmup, **kwargs)
        if launch_state(fn, args, g, kwargs) == before:
            settled.add(before)
        return out

    InterpretedFunction.run = run

    class Clock:
        """Device time: 10 us per base launch, 11 us per head launch since the last marker."""
        host = 0.0

        def marker(self):
            self.host += 0.002
            return len(LAUNCHES)

        def elapsed_ms(self, a, b):
            return sum(0.011 if s == "head" else 0.010 for s in LAUNCHES[a:b])

        def synchronize(self): pass
        def flush(self): pass
        def l2_bytes(self): return 50 << 20
        def capture_graph(self, call): return call
        def state(self): return {}
        def host_time(self): return self.host
        def sleep(self, s): self.host += s

    def capture(call):
        call()
        return [gpu.LaunchInfo(name="?", grid=(1, 1, 1))]

    def fake_cuda(cls):
        return ReplayDevice(capture=capture, gpu_name="FAKE GPU", sm_count=132, backend=Clock(),
                            regions=lambda out, call: {})

    gpu_bench.ReplayDevice.cuda = classmethod(fake_cuda)
'''


def git(repo: Path, *args: str) -> None:
    ident = ["-c", "user.name=kperf-test", "-c", "user.email=test@kperf.local"]
    subprocess.run(["git", "-C", str(repo), *ident, *args], check=True, capture_output=True)


def two_commit_repo(root: Path, files: dict[str, str]) -> Path:
    """``root/repo``: the kernels, the faked-device conftest and ``files`` (path -> text), then the
    pull request as a second commit: the scale kernel's launch (block size, so grid, and num_warps);
    copy as is."""
    repo = root / "repo"
    for rel, text in {"abkern/__init__.py": "", "abkern/ops.py": KERNELS, "conftest.py": CONFTEST,
                      "pyproject.toml": '[tool.kperf]\narch = ["sm_90"]\n', **files}.items():  # fmt: skip
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    ops = repo / "abkern" / "ops.py"
    ops.write_text(ops.read_text().replace("BLOCK, WARPS = 256, 4", "BLOCK, WARPS = 128, 2"))
    git(repo, "commit", "-q", "-a", "-m", "head")
    return repo


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return two_commit_repo(tmp_path, {"tests/test_ops.py": TESTS})


def kperf_ab(repo: Path, tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict, list]:
    log = tmp_path / "launches.jsonl"
    # the repository first, then the caller's path (the kperf_ci under test, where it is not installed)
    path = os.pathsep.join(filter(None, [checkout_path(repo), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, KPERF_TEST_FAKE_GPU=str(log), TRITON_INTERPRET="1", PYTHONPATH=path)
    env.pop("KPERF_DB", None)
    out = tmp_path / "ab.json"
    r = subprocess.run(
        [sys.executable, "-m", "kperf_ci", "ab", "--base", "HEAD~1", "--gpu", "--json", str(out),
         *extra, "tests", "--kperf-all"],
        cwd=repo, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    doc = json.loads(out.read_text()) if out.exists() else {}
    launches = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    return r, doc, launches


@pytest.mark.slow
def test_changed_launches_are_timed_against_the_base_launch(repo, tmp_path):
    r, doc, launches = kperf_ab(repo, tmp_path)
    assert doc, r.stdout + r.stderr
    # one regression, found by time: the head launches read 10% slower on the fake clock
    assert r.returncode == 1, r.stdout + r.stderr
    timed = doc["timed"]
    assert {t["test"] for t in timed} == {
        "tests/test_ops.py::test_scale[1000]",
        "tests/test_ops.py::test_scale[4095]",
    }
    assert {t["kernel"] for t in timed} == {"scale_kernel"}  # the Triton kernel, not the test
    assert all(t["site"] == "abkern/ops.py::scale_kernel" for t in timed)
    assert all(t["verdict"] == "slower" for t in timed)
    assert all(1.08 < t["ratio"] < 1.12 for t in timed)
    assert any("grid 8x1x1" in t["launch"] and "num_warps=2" in t["launch"] for t in timed)  # n=1000
    # the base side: the base tree's kernel with the base's own constexpr, options and grid
    base = [x for x in launches if x["side"] == "base"]
    head = [x for x in launches if x["side"] == "head" and x["kernel"] == "scale_kernel"]
    assert base and head
    assert {(tuple(x["grid"]), x["num_warps"], x["const"]["BLOCK"]) for x in base} == {
        ((4, 1, 1), 4, 256),
        ((16, 1, 1), 4, 256),
    }
    assert {(tuple(x["grid"][:1]), x["num_warps"], x["const"]["BLOCK"]) for x in head} >= {
        ((8,), 2, 128),
        ((32,), 2, 128),
    }
    # the unchanged kernel's test is identical: never replayed
    assert not [x for x in launches if x["kernel"] == "copy_kernel"]
    # one row per kernel in the document and the comment
    (kernel,) = doc["kernels"]
    assert kernel["kernel"] == "scale_kernel" and kernel["verdict"] == "slower"
    assert len(kernel["launches"]) == 2 and len(kernel["tests"]) == 2
    comment = (repo / "reports" / "ab" / "comment.md").read_text()
    assert "1 kernel slower than the base" in comment
    # the faked device records no name: timed all the same, so never "static only"
    assert doc["device"] is None and "static only" not in comment, comment[:600]
    # markdown-escaped: one row for the kernel (its worst launch, base -> head, "2 of 2 slower"),
    # its file on the "why" line under the table, then each timed launch with its own effect
    top = "| 🔴 slower | scale\\_kernel |"
    assert "- **scale\\_kernel** in abkern/ops.py: num\\_warps 4 → 2" in comment
    rows = [r for r in comment.splitlines() if r.startswith(top)]
    assert len(rows) == 1, comment
    # base -> head kept on one line: non-breaking spaces around the arrow (issue 36's walk)
    assert "+10.00%" in rows[0] and "2 of 2 slower" in rows[0] and "\xa0→\xa0" in rows[0]
    assert comment.count("- 🔴 slower +10.00%") == 2
    # time decided: registers or instruction counts that moved are not static regressions here
    assert doc["static_regressions"] == []
    assert "scale_kernel (abkern/ops.py::scale_kernel)" in r.stdout


@pytest.mark.slow
def test_a_float_argument_of_another_dtype_gets_the_base_its_own(repo, tmp_path):
    """The sides cannot share a buffer of another dtype: the base gets a fresh one of its own
    dtype and shape, and the row says so."""
    ops = repo / "abkern" / "ops.py"
    ops.write_text(
        ops.read_text().replace(
            "y = torch.empty_like(x)\n    BLOCK, WARPS",
            "y = torch.empty_like(x, dtype=torch.float64)\n    BLOCK, WARPS",
        )
    )
    git(repo, "commit", "-q", "-a", "--amend", "--no-edit")
    r, doc, launches = kperf_ab(repo, tmp_path)
    assert doc, r.stdout + r.stderr
    rows = {t["test"]: t for t in doc["timed"]}
    row = rows["tests/test_ops.py::test_scale[1000]"]
    assert "base timed on its own arguments: y_ptr fp32[1000] (head fp64[1000])" in row["changes"]
    assert [x for x in launches if x["side"] == "base"]


@pytest.mark.slow
def test_run_from_a_subdirectory_pairs_the_launches_by_repository_paths(repo, tmp_path):
    """From the tests' folder, pytest's rootdir is that folder and the kernels live outside it:
    sites and test ids are still relative to the repository, so base and head launches pair."""
    env = dict(os.environ, PYTHONPATH=checkout_path(repo))
    env.pop("KPERF_TEST_FAKE_GPU", None)
    out = tmp_path / "ab.json"
    r = subprocess.run(
        [sys.executable, "-m", "kperf_ci", "ab", "--base", "HEAD~1", "--no-gpu", "--json", str(out),
         "--db", str(tmp_path / "ab.db"), "--report-dir", str(tmp_path / "rep"),
         "test_ops.py", "--kperf-all"],
        cwd=repo / "tests", env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    doc = json.loads(out.read_text())
    assert "launched in head only" not in r.stdout and "launched in base only" not in r.stdout, r.stdout
    by_test = {t["test"]: t for t in doc["tests"]}
    assert by_test["tests/test_ops.py::test_copy"]["status"] == "identical"
    (lc,) = by_test["tests/test_ops.py::test_scale[1000]"]["launches"]
    assert lc["site"] == "abkern/ops.py::scale_kernel" and "num_warps 4 -> 2" in lc["changes"]


TWIN_TESTS = (
    TESTS
    + """

@pytest.mark.parametrize("n", [1000])
def test_scale_again(n):
    x = torch.rand(n)
    torch.testing.assert_close(scale(x).float(), x * 2)
"""
)


@pytest.mark.slow
def test_a_launch_identical_to_another_tests_says_where_it_was_timed(tmp_path):
    """test_scale[1000] and test_scale_again[1000] make the identical launch: one stored variant.
    The test whose row the store replaced says where its launch was timed, never that it failed."""
    repo = two_commit_repo(tmp_path, {"tests/test_ops.py": TWIN_TESTS})
    r, doc, _ = kperf_ab(repo, tmp_path)
    assert doc, r.stdout + r.stderr
    twins = {"tests/test_ops.py::test_scale[1000]", "tests/test_ops.py::test_scale_again[1000]"}
    (row,) = [t for t in doc["timed"] if t["test"] in twins]
    (other,) = twins - {row["test"]}
    assert row["identical_in"] == [other]
    said = f"{other}: timed as an identical launch in test {row['test']}"
    assert said in doc["messages"] and said in r.stdout, doc["messages"]
    assert not any("no changed launch was replayed" in m for m in doc["messages"]), doc["messages"]
    assert "timed as an identical launch in test" in (repo / "reports" / "ab" / "comment.md").read_text()


def test_only_float_tensors_are_made_fresh():
    import torch

    from kperf_ci.capture.launches.ab_launch import own_tensor

    x = torch.zeros(4)
    t = own_tensor("bf16[3x5]", x)
    assert t.dtype == torch.bfloat16 and list(t.shape) == [3, 5] and t.device == x.device
    assert own_tensor("i32[3x5]", x) is None  # indices: random values could go out of bounds
    assert own_tensor("fp32[3x5]", 7) is None  # the head's value is not a tensor
    assert own_tensor("4096", x) is None


# ----------------------------------------------------------------------------------- on a GPU

GPU_KERNELS = """
import torch
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    v = tl.load(x_ptr + offs, mask=m)
    # EXTRA
    tl.store(y_ptr + offs, v, mask=m)


def copy(x):
    y = torch.empty_like(x)
    BLOCK, WARPS = 4096, 8
    copy_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, x.numel(), BLOCK=BLOCK, num_warps=WARPS)
    return y
"""

GPU_TESTS = """
import pytest
import torch

from abkern.ops import copy


@pytest.mark.parametrize("n", [1 << 24])
def test_copy(n):
    x = torch.rand(n, device="cuda")
    assert torch.equal(copy(x), x)
"""


@needs_gpu
@pytest.mark.gpu
def test_a_launch_option_change_is_timed_slower_on_the_gpu(tmp_path):
    """A kernel that reads half as much again, launched with other options, in a suite that never
    calls kperf.bench: kperf ab replays the launch, times it against the base's own launch and
    calls it slower; the Triton kernel names the row."""
    repo = tmp_path / "repo"
    (repo / "abkern").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "abkern" / "__init__.py").write_text("")
    (repo / "abkern" / "ops.py").write_text(GPU_KERNELS)
    (repo / "tests" / "test_ops.py").write_text(GPU_TESTS)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    ops = repo / "abkern" / "ops.py"
    # the pull request: the kernel also reads the tensor backwards (x >= 0, so w never wins; the
    # compiler cannot know): half as much traffic again, about +50%; and a launch option
    ops.write_text(
        ops.read_text()
        .replace("BLOCK, WARPS = 4096, 8", "BLOCK, WARPS = 4096, 4")
        .replace(
            "    # EXTRA\n",
            "    w = tl.load(x_ptr + (n - 1 - offs), mask=m)\n    v = tl.where(w == -1.0, w, v)\n",
        )
    )
    git(repo, "commit", "-q", "-a", "-m", "head")
    path = os.pathsep.join(filter(None, [checkout_path(repo), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path)
    out = tmp_path / "ab.json"
    r = subprocess.run(
        [sys.executable, "-m", "kperf_ci", "ab", "--base", "HEAD~1", "--json", str(out),
         "tests", "--kperf-all"],
        cwd=repo, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    print(r.stdout[-3000:], r.stderr[-2000:])
    doc = json.loads(out.read_text())
    assert r.returncode == 1, r.stdout + r.stderr
    (row,) = doc["timed"]
    assert row["kernel"] == "copy_kernel" and row["site"] == "abkern/ops.py::copy_kernel"
    assert row["verdict"] == "slower" and row["ratio"] > 1.2
    assert "num_warps=4" in row["launch"] and "num_warps 8 -> 4" in row["changes"]
    assert doc["static_regressions"] == []  # time decided
