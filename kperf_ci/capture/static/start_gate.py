"""When a compile pool's further workers start (:meth:`kperf_ci.capture.static.aot.WorkerPool.map`).

A worker's start imports torch and Triton: about 1.9 s of a core on the 2-core CPU, where a
request that Triton's cache answers takes milliseconds. Started all at once, a second worker of a
session whose compiles are cached cost more than it saved (the project's suite: 72 of 114 static
sessions started two, ~130 CPU s). So the first worker answers alone until what is still queued
would take it longer than another worker takes to start; then the others start, once.
"""

from __future__ import annotations

from collections.abc import Callable

#: a start's cost before any was measured in this pool (seconds; the 2-core CPU's ~1.9 s)
DEFAULT_START_S = 2.0


class StartGate:
    """Told each answer of the first worker (:meth:`answered`), it calls ``start()`` once, when
    the queued requests at the first worker's pace would take longer than ``start_s``."""

    def __init__(self, start_s: float, start: Callable[[], None]) -> None:
        self.start_s, self._start = start_s, start
        self.started = False
        self._spent, self._answers = 0.0, 0

    def open(self) -> None:
        if not self.started:
            self.started = True
            self._start()

    def answered(self, wall_s: float, queued: int) -> None:
        self._spent += max(0.0, wall_s)
        self._answers += 1
        if queued and queued * self._spent / self._answers > self.start_s:
            self.open()
