"""A compile pool's further workers start only when the queue outlasts a worker's start
(kperf_ci/capture/static/start_gate.py): each start imports torch and Triton, ~2 s of a core,
where a request Triton's cache answers takes milliseconds. The workers are faked at the pool's
boundary (``WorkerPool._one``: a request answered in a set time, by a named slot)."""

from __future__ import annotations

import time

from kperf_ci.capture.static.aot import WorkerPool
from kperf_ci.capture.static.start_gate import StartGate


def _pool(jobs: int, request_s: list[float], start_s: float) -> tuple[WorkerPool, list[int]]:
    pool = WorkerPool(jobs)
    pool.startup_s = [start_s]  # the measured start of a worker, as _worker records it
    slots: list[int] = []

    def one(slot, req, timeout):
        slots.append(slot)
        s = request_s[req["i"]]
        time.sleep(s / 1000)  # a thousandth of the modelled time: the test stays fast
        return {"ok": True, "wall_s": s, "i": req["i"]}

    pool._one = one
    return pool, slots


def test_cached_answers_never_start_a_second_worker():
    pool, slots = _pool(2, [0.005] * 12, start_s=1.9)
    out = pool.map([{"i": i} for i in range(12)])
    assert [r["i"] for r in out] == list(range(12))
    assert set(slots) == {0}  # twelve 5 ms answers: less than one start


def test_slow_compiles_start_the_others_after_the_first_answer():
    pool, slots = _pool(3, [1.0] * 6, start_s=1.9)
    out = pool.map([{"i": i} for i in range(6)])
    assert [r["i"] for r in out] == list(range(6)) and all(r["ok"] for r in out)
    assert slots[0] == 0 and set(slots) == {0, 1, 2}  # 5 queued x 1 s > 1.9 s: all three help


def test_the_gate_weighs_the_queue_at_the_pace_seen_so_far():
    started = []
    gate = StartGate(2.0, lambda: started.append(1))
    gate.answered(0.001, queued=10)  # a cache hit: 10 ms of work left
    assert not started
    gate.answered(3.0, queued=2)  # a cold compile: ~1.5 s a request, 2 left > 2 s
    assert started == [1] and gate.started
    gate.answered(5.0, queued=9)
    assert started == [1]  # once
