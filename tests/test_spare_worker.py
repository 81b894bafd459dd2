"""The compile worker forked from the test process once torch is imported
(kperf_ci.capture.static.spare): it compiles what a spawned worker compiles, and it is not made
where a fork is not safe. Each case runs in a Python subprocess of its own, as a pytest session's
process would: the spare is forked at most once per process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the spare is forked on Linux only"),
]

# torch first, as isort orders them; the fork comes while this module is being imported
KERNEL = """
import torch
import triton
import triton.language as tl

from helper import BLOCK


@triton.jit
def row_sum(x, out, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(out + tl.program_id(0), tl.sum(tl.load(x + i, mask=i < n, other=0.0), axis=0))
"""

COMPILE_TWICE = """
import json, os, sys
os.environ["TRITON_INTERPRET"] = "1"
from kperf_ci.capture.static import spare
spare.arm()
import helper  # the user's plain module, imported before torch
import kern
import torch
from kperf_ci.capture.static.aot import WorkerPool
from kperf_ci.capture.static.compile import compile_variants
from kperf_ci.capture.static.record import make_launch_spec

x, out = torch.zeros(100), torch.zeros(1)
ls = make_launch_spec(kern.row_sum, (x, out, 100), {"BLOCK": helper.BLOCK}, (1,))
found = []
for n in range(2):  # the spare is taken once: the second pool spawns its worker
    pool = WorkerPool(1, cache_dir=sys.argv[1] + str(n), paths=[os.getcwd()])
    try:
        (r,) = compile_variants([ls], ["sm_90"], pool=pool, rootdir=os.getcwd())
        found.append({"forked": pool._workers[0].info.get("forked"), "error": r.error,
                      "sass_hash": r.sass_hash, "metrics": sorted((m.name, m.value) for m in r.metrics)})
    finally:
        pool.close()
print(json.dumps(found))
"""


def _python(tmp_path: Path, script: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    (tmp_path / "helper.py").write_text("BLOCK = 128\n")
    (tmp_path / "kern.py").write_text(KERNEL)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("KPERF_")}
    clean.update(PYTHONPATH=os.pathsep.join([str(ROOT), str(tmp_path)]), **env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        cwd=tmp_path,
        env=clean,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_the_forked_worker_compiles_what_a_spawned_one_compiles(tmp_path: Path) -> None:
    r = _python(tmp_path, COMPILE_TWICE, str(tmp_path / "cache"))
    assert r.returncode == 0, r.stderr[-3000:]
    forked, spawned = json.loads(r.stdout.splitlines()[-1])
    assert forked["forked"] is True and spawned["forked"] is False
    assert forked["error"] is None and spawned["error"] is None, (forked["error"], spawned["error"])
    # the kernel, imported in the parent under the interpreter, compiled in both: the same SASS
    assert forked["sass_hash"] and forked["sass_hash"] == spawned["sass_hash"]
    assert forked["metrics"] == spawned["metrics"] and dict(forked["metrics"])["registers"] > 0


SPARE_AFTER = """
import os, sys, threading
os.environ["TRITON_INTERPRET"] = "1"
from kperf_ci.capture.static import spare
spare.arm()
{before}
import torch
print("spare" if spare._spare is not None else "none")
"""


@pytest.mark.parametrize(
    ("before", "env", "expected"),
    [
        ("", {}, "spare"),
        ("import triton", {}, "none"),  # triton's own @jit functions would be interpreted ones
        # a thread alive until the process ends: one that slept 2 s had ended before a slow
        # machine's `import torch` did (n=3 workers on 2 cores), and the spare was rightly made
        ("threading.Thread(target=threading.Event().wait, daemon=True).start()", {}, "none"),
        ("", {"KPERF_WORKER_NO_FORK": "1"}, "none"),
    ],
    ids=["forked", "triton-first", "another-thread", "switched-off"],
)
def test_a_spare_only_where_the_fork_is_safe(tmp_path: Path, before: str, env: dict, expected: str) -> None:
    r = _python(tmp_path, SPARE_AFTER.format(before=before), **env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == [expected]


def _gone(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("how", ["exits", "killed", "forked-again"])
def test_a_spare_nobody_claimed_ends_with_its_parent(tmp_path: Path, how: str) -> None:
    """Its pipe from the parent reads end-of-file: at the parent's exit (atexit closes it), when
    the parent is killed, and while a process the parent forked later (a multiprocessing pool,
    say) still lives: that one closed its copy of the pipe."""
    script = SPARE_AFTER.format(before="") + textwrap.dedent(
        """
        print(spare._spare.pid, flush=True)
        if sys.argv[1] == "killed":
            os.kill(os.getpid(), 9)
        if sys.argv[1] == "forked-again" and os.fork() == 0:
            import time
            quiet = os.open(os.devnull, os.O_WRONLY)
            os.dup2(quiet, 1)  # the test reads the parent's output to its end, not this one's
            os.dup2(quiet, 2)
            time.sleep(30)
            os._exit(0)
        """
    )
    r = _python(tmp_path, script, how)
    assert r.returncode == (-signal.SIGKILL if how == "killed" else 0), r.stderr[-2000:]
    pid = int(r.stdout.split()[1])
    assert _gone(pid), f"the spare {pid} outlived its parent"
