"""Static mode compiles while the tests run (kperf_ci.capture.static.ahead): requests sent
early serve the plan in its order, and the results and the manifest are those of compiling
everything at the end."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from kperf_ci.capture.static.ahead import CompileAhead, request_key
from kperf_ci.capture.static.aot import WorkerPool

ROOT = Path(__file__).resolve().parents[1]


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
