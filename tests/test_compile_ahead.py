"""Static mode compiles while the tests run (kperf_ci.capture.static.ahead, plugin/compile_ahead.py):
a passed test's launches reach the worker pool before the session ends, the results and the
manifest are those of compiling everything at the end, and an interrupted session stays
interrupted."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from conftest import wait_for, without

from kperf_ci.capture.static.ahead import CompileAhead, request_key
from kperf_ci.capture.static.aot import WorkerPool
from kperf_ci.plugin.compile_ahead import AHEAD_BY_DEFAULT, AHEAD_MIN_CORES, ahead_slots

ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- the decision


def test_ahead_only_with_enough_cores_unless_the_switch_says(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KPERF_COMPILE_AHEAD", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)  # set when this runs under -n
    # unset is "auto": a 16-core runner compiles ahead, a 2-core CPU at the end as before
    assert AHEAD_BY_DEFAULT and ahead_slots(8, cores=16) == 8
    assert ahead_slots(2, cores=AHEAD_MIN_CORES - 1) == 0
    monkeypatch.setenv("KPERF_COMPILE_AHEAD", "auto")  # by the cores
    assert ahead_slots(2, cores=AHEAD_MIN_CORES - 1) == 0  # compile at the end, as before
    assert ahead_slots(8, cores=16) == 8  # a big runner: every job, one core left to the tests
    assert ahead_slots(8, cores=AHEAD_MIN_CORES) == AHEAD_MIN_CORES - 1
    monkeypatch.setenv("KPERF_PASS_CORES", str(AHEAD_MIN_CORES))  # what kperf ab counts too
    assert ahead_slots(2) == 2
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "4")  # four xdist workers share the cores
    assert ahead_slots(8, cores=16) == 3 and ahead_slots(8, cores=8) == 0
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT")
    monkeypatch.setenv("KPERF_COMPILE_AHEAD", "off")
    assert ahead_slots(8, cores=16) == 0
    monkeypatch.setenv("KPERF_COMPILE_AHEAD", "1")
    assert ahead_slots(2, cores=1) == 1 and ahead_slots(2, cores=2) == 1


# --------------------------------------------------------------------------- the pool, faked


class EchoPool(WorkerPool):
    """A WorkerPool whose requests are answered by the thread itself after ``delay`` s (no
    worker process): what the background threads do, counted."""

    def __init__(self, jobs: int, delay: float = 0.05) -> None:
        super().__init__(jobs)
        self.delay, self.running, self.most, self.served = delay, 0, 0, []
        self._count = threading.Lock()

    def _one(self, slot: int, req: dict[str, Any], timeout: float) -> dict[str, Any]:
        with self._count:
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(self.delay)
        with self._count:
            self.running -= 1
            self.served.append(req["n"])
        return {"ok": True, "n": req["n"]}


def test_background_threads_keep_to_their_slots_then_widen() -> None:
    pool = EchoPool(jobs=3)
    pool.slots = 1  # while the tests run
    futures = [pool.submit({"n": i}) for i in range(4)]
    assert [f.result(timeout=10)["n"] for f in futures] == [0, 1, 2, 3]
    assert pool.most == 1
    pool.slots = 3  # the tests are over
    futures = [pool.submit({"n": i}) for i in range(6)]
    assert [f.result(timeout=10)["n"] for f in futures] == list(range(6))
    assert pool.most >= 2
    pool.close()
    assert not pool._background._threads


def test_a_stopped_pool_answers_what_it_did_not_start() -> None:
    pool = EchoPool(jobs=1, delay=0.3)
    pool.slots = 1
    futures = [pool.submit({"n": i}) for i in range(3)]
    time.sleep(0.1)  # the first is running
    pool.stop()
    answers = [f.result(timeout=10) for f in futures]
    assert answers[1:] == [{"ok": False, "error": "compile stopped"}] * 2
    assert pool.submit({"n": 9}).result(timeout=1) == {"ok": False, "error": "compile stopped"}


class FakePool:
    """What CompileAhead asks of a WorkerPool, answering in an order of the test's choosing."""

    def __init__(self, jobs: int = 2) -> None:
        self.jobs, self.slots, self.sent = jobs, 1, []
        self.futures: list[Future] = []

    def submit(self, req: dict[str, Any], timeout: float = 120.0) -> Future:
        self.sent.append(req)
        fut: Future = Future()
        self.futures.append(fut)
        return fut

    def answer_all(self, reverse: bool = False) -> None:
        pairs = list(zip(self.sent, self.futures, strict=True))
        for req, fut in reversed(pairs) if reverse else pairs:
            if not fut.done():
                fut.set_result({"ok": True, "for": request_key(req)})

    def close(self, kill: bool = False) -> None:
        pass

    def stop(self) -> None:
        pass


def _spec(test: str, block: int, thresholds: dict | None = None):
    from kperf_ci.capture.static.record import LaunchSpec

    return LaunchSpec(
        kernel="k",
        qualname="k",
        module="m",
        source_file="/x/m.py",
        args=(),
        options={},
        grid=(1, 1, 1),
        spec=f"BLOCK={block}",
        config="num_warps=4,num_stages=3,num_ctas=1",
        test=test,
        thresholds=thresholds or {},
    )


def test_early_answers_serve_the_plan_in_its_order_whatever_order_they_came_in() -> None:
    from kperf_ci.capture.static.compile import compile_request

    pool = FakePool()
    ahead = CompileAhead(["sm_90", "sm_80"], rootdir="/x", pool=pool, slots=1)
    assert ahead.submit([_spec("t1", 64), _spec("t1", 128)]) == 4
    assert ahead.submit([_spec("t2", 64)]) == 0  # the same identities: sent once
    pool.answer_all(reverse=True)  # finished last to first
    plan = [
        compile_request(_spec("t1", b), a, ["sm_90", "sm_80"], ("sass", "ptx"))
        for b in (64, 128)
        for a in ("sm_90", "sm_80")
    ]
    plan.append(compile_request(_spec("t3", 256), "sm_90", ["sm_90", "sm_80"], ("sass", "ptx")))  # never sent
    done: list[dict] = []
    waiter = threading.Timer(0.2, pool.answer_all)  # the one sent at the end is answered later
    waiter.start()
    responses = ahead.map(plan, on_done=done.append)
    waiter.join()
    assert [r["for"] for r in responses] == [request_key(r) for r in plan]
    assert len(pool.sent) == 5 and len(done) == 5
    assert pool.slots == pool.jobs  # at the end every job compiles


def test_a_request_that_changed_is_compiled_again_not_served_early() -> None:
    """unique_launches gives a variant the thresholds of a later test when its first had none:
    the request the plan sends differs, so the early answer (for the first request) is unused."""
    from kperf_ci.capture.static.compile import compile_request

    pool = FakePool()
    ahead = CompileAhead(["sm_90"], rootdir="/x", pool=pool, slots=1)
    ahead.submit([_spec("t1", 64)])
    pool.answer_all()
    wanted = compile_request(_spec("t1", 64, {"registers": 0.1}), "sm_90", ["sm_90"], ("sass", "ptx"))
    threading.Timer(0.1, pool.answer_all).start()
    (resp,) = ahead.map([wanted])
    assert resp["for"] == request_key(wanted) and len(pool.sent) == 2


# --------------------------------------------------------------------------- real compiles


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory):
    pytest.importorskip("triton")
    pytest.importorskip("torch")
    from test_capture_record import record

    tmp = tmp_path_factory.mktemp("ahead")
    return record(tmp), str(tmp / "triton-cache")


def _compile_all(launches, cache: str, ahead: CompileAhead | None):
    from kperf_ci.capture.static.compile import compile_variants
    from kperf_ci.capture.static.manifest import build_manifest, manifest_json

    pruned: list = []
    warnings: list[str] = []
    stats: list[dict] = []
    archs = ["sm_80", "sm_90"]
    results = compile_variants(
        launches, archs, jobs=2, cache_dir=cache, rootdir=str(ROOT), pool=ahead,
        stats=stats, pruned=pruned, warnings=warnings,
    )  # fmt: skip
    manifest = manifest_json(build_manifest(launches, results, archs, str(ROOT)))
    return results, pruned, warnings, [(s["id"], s["arch"], s["ok"], s["error"]) for s in stats], manifest


@pytest.mark.slow
def test_compiled_ahead_in_pieces_is_what_the_end_of_session_compile_gives(recorded) -> None:
    """The recorded suite (autotune configs, a compile error, a closure, parametrized duplicates)
    sent in two pieces as if by two tests and the rest at the end, against all compiled at the
    end: the same results, pruned configs, warnings, stats order and manifest."""
    launches, cache = recorded
    at_end = _compile_all(launches, cache, None)
    ahead = CompileAhead(["sm_80", "sm_90"], jobs=2, rootdir=str(ROOT), cache_dir=cache, slots=1)
    third = len(launches) // 3
    for piece in (launches[:third], launches[third : 2 * third]):
        ahead.submit(piece)
    assert ahead.submitted and ahead.outstanding >= 0
    try:
        early = _compile_all(launches, cache, ahead)
    finally:
        ahead.close()
    assert early[0] == at_end[0]
    assert early[1:] == at_end[1:]
    assert any(r.error for r in at_end[0]), "the suite lost its compile error"


# --------------------------------------------------------------------------- sessions


PASS_THEN_BLOCK = """
import pathlib, time, pytest, torch
from kernels_add import add

@pytest.mark.kperf
def test_a_add(kperf):
    kperf.bench(add, torch.rand(64), torch.rand(64))

def test_b_block():
    pathlib.Path("started").touch()
    time.sleep(120)
"""


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the compile workers in /proc")
def test_a_passed_tests_launch_compiles_while_the_next_runs_and_ctrl_c_stays_interrupted(
    pytester: pytest.Pytester,
) -> None:
    pytest.importorskip("triton")
    pytest.importorskip("torch")
    from test_integrity import _alive, _children, _is_compile_worker, _start
    from test_plugin import ADD_KERNEL

    from kperf_ci import store

    pytester.makepyfile(kernels_add=ADD_KERNEL, test_ab=PASS_THEN_BLOCK)
    args = ("--kperf", "--kperf-mode", "static", "--kperf-arch", "sm_90", "--kperf-db", "run.db")
    proc = _start(pytester.path, *args, "--kperf-jobs", "1", env={"KPERF_COMPILE_AHEAD": "1"})
    workers: list[tuple[int, str]] = []

    def compiling() -> bool:
        workers[:] = [c for c in _children(proc.pid) if _is_compile_worker(c[1])]
        return bool(workers)

    wait_for(lambda: (pytester.path / "started").exists(), "the second test to start", proc)
    # test_a_add's launch is compiling while test_b_block runs: the session is far from its end
    wait_for(compiling, "a compile worker to start while a test runs", proc)
    assert proc.poll() is None
    os.kill(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out
    assert "Traceback" not in out, out
    assert (
        "interrupted (Ctrl-C while the tests ran): not stored (1 captured launch(es) not compiled" in out
    ), out
    assert not (pytester.path / "run.db").exists() or not store.run_statuses(pytester.path / "run.db")
    time.sleep(0.5)
    assert not [pid for pid, _ in workers if _alive(pid)], "a compile worker outlived the session"


def _dump(db: Path) -> list:
    """Everything a run stored but its id and time, in storage order."""
    c = sqlite3.connect(db)
    run = {r[0] for r in c.execute("select run_id from runs")}
    rows: list = [list(c.execute("select mode, status from runs"))]
    for table in ("kernels", "variants", "run_variants", "blobs", "metrics"):
        for row in c.execute(f"select * from {table} order by rowid" if table != "metrics" else
                             "select * from metrics order by variant_id, name"):  # fmt: skip
            rows.append((table, *("RUN" if v in run else v for v in row)))
    c.close()
    return rows


@pytest.mark.slow
def test_examples_store_the_same_run_compiled_ahead_or_at_the_end(tmp_path: Path) -> None:
    """Three example files, static mode, with and without compiling ahead (the session's one Triton
    cache, so the second run's compile is short, and the first one's too where another test has
    compiled these examples): the same variants, metrics, manifest and kperf lines."""
    if not (importlib.util.find_spec("triton") and importlib.util.find_spec("torch")):
        pytest.skip("needs triton and torch")  # in the pytest subprocesses: not imported here
    repo = tmp_path / "ex"
    repo.mkdir()
    for name in (
        "conftest.py",
        "sizes.py",
        "kernels",
        "test_softmax.py",
        "test_vector_add.py",
        "test_layernorm.py",
    ):
        src = ROOT / "examples" / name
        if src.is_dir():
            shutil.copytree(src, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(src, repo / name)
    env = without("PYTEST_", "KPERF_")
    env.update(PYTHONPATH=str(ROOT), KPERF_PROGRESS="0")
    outs = {}
    for ahead in ("1", "0"):
        db = tmp_path / f"run-{ahead}.db"
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--kperf",
            "--kperf-mode",
            "static",
        ]
        cmd += ["--kperf-arch", "sm_80,sm_90", "--kperf-db", str(db), "."]
        r = subprocess.run(
            cmd,
            cwd=repo,
            env={**env, "KPERF_COMPILE_AHEAD": ahead},
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
        outs[ahead] = [
            ln.replace(db.name, "run.db")
            for ln in r.stdout.splitlines()
            if ln.startswith("kperf") and " run " not in ln and "still running" not in ln
        ]
    early, at_end = _dump(tmp_path / "run-1.db"), _dump(tmp_path / "run-0.db")
    assert len(early) > 50 and early == at_end
    assert [row for row in early if row[0] == "blobs" and row[3] == "launches" and row[-1]], "no manifest"
    assert outs["1"] == outs["0"]
