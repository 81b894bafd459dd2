"""Static mode compiles while the tests run (:mod:`kperf_ci.capture.static.ahead`): whether it
does on this machine, with how many workers, and the feed from the session's pending launches.

A static pass used to compile everything after its last test: on an H100 runner mamba's pass
spent ~25 s compiling after ~24 s of tests, one core busy with the interpreter and the others
idle. Sent as each test passes, the compiles run on those idle cores.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from kperf_ci.capture.static.ahead import CompileAhead
from kperf_ci.config import ENV_COMPILE_AHEAD
from kperf_ci.config_values import FALSE_WORDS
from kperf_ci.prcheck.pass_order import usable_cores

#: below this many usable cores the compile waits for the end of the session, as before: on
#: the 2-core CPU, `kperf run` on the examples compiling ahead with 2 workers beside the tests
#: took 1.27x the wall time of compiling at the end (median of 3 interleaved pairs; `kperf ab
#: --no-gpu` side by side 1.28x), with 1 worker 0.93x (range 0.91-1.20: noise, no clear win)
AHEAD_MIN_CORES = 4
#: on by default where AHEAD_MIN_CORES usable cores are (unset behaves as ``auto``): on a
#: 16-core H200 `kperf ab` on mamba took 62.7 s with it against 62.1 s without in one job,
#: 72.7 s against 85.6 s in an earlier one, the same verdicts each time; with it all three
#: repositories of the corpus meet the cost bound (benchmarks/results/corpus_ab_eval.md);
#: the 2-core CPU compiles at the end, as before
AHEAD_BY_DEFAULT = True


def ahead_slots(jobs: int, cores: int | None = None) -> int:
    """How many workers compile while the tests run; 0: all at the end of the session.

    ``KPERF_COMPILE_AHEAD`` decides when set (``0``/``false``/``no``/``off``: never; ``auto``:
    by the cores, below; anything else: always); unset, it is ``auto`` while
    :data:`AHEAD_BY_DEFAULT` holds, and ``auto`` needs :data:`AHEAD_MIN_CORES` usable cores
    (``KPERF_PASS_CORES`` counts them where a CPU quota hides them). An xdist worker counts
    its share of them: each worker's pool lives through the session, and ``-n 16`` on 16
    cores must not start 16 pools beside 16 interpreters. One core is left to the tests, which
    run on it under Triton's interpreter."""
    flag = os.environ.get(ENV_COMPILE_AHEAD, "").strip().lower()
    if flag in FALSE_WORDS or (not flag and not AHEAD_BY_DEFAULT):
        return 0
    cores = usable_cores() if cores is None else cores
    share = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "").strip()
    cores = max(1, cores // int(share)) if share.isdigit() and int(share) > 0 else cores
    if flag in ("", "auto") and cores < AHEAD_MIN_CORES:
        return 0
    return max(1, min(jobs, cores - 1))


class AheadFeed:
    """The session's pending launches, sent to a :class:`CompileAhead` after each test (the
    pool is made at the first launch: no worker starts in a session that captures none)."""

    def __init__(self, archs: list[str], jobs: int, rootdir: str, slots: int) -> None:
        self.archs, self.jobs, self.rootdir, self.slots = list(archs), jobs, rootdir, slots
        self.ahead: CompileAhead | None = None
        self.sent = 0  # pending[:sent] were fed

    @classmethod
    def for_session(cls, settings: Any, rootdir: str) -> AheadFeed | None:
        """A feed when this machine compiles ahead (:func:`ahead_slots`), else None."""
        slots = ahead_slots(settings.jobs)
        return cls(list(settings.arch), settings.jobs, rootdir, slots) if slots else None

    def feed(self, pending: list[Any]) -> None:
        """Send the launches added to ``pending`` since the last call. Called after a test's
        teardown, where its monkeypatched environment and directory are undone."""
        if len(pending) <= self.sent:
            return
        if self.ahead is None:
            self.ahead = CompileAhead(self.archs, jobs=self.jobs, rootdir=self.rootdir, slots=self.slots)
        self.ahead.submit(pending[self.sent :])
        self.sent = len(pending)

    @contextlib.contextmanager
    def pool(self) -> Iterator[CompileAhead | None]:
        """The pool for ``compile_variants`` (None when nothing was fed), closed after it: asked
        to exit on success, killed on an exception (a Ctrl-C while waiting)."""
        ahead, self.ahead = self.ahead, None
        if ahead is None:
            yield None
            return
        try:
            yield ahead
        except BaseException:
            ahead.close(kill=True)
            raise
        ahead.close()

    def stop(self) -> None:
        """An interrupted session: the compiles sent are killed, none is kept."""
        ahead, self.ahead = self.ahead, None
        if ahead is not None:
            ahead.close(kill=True)
