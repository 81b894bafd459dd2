"""Compiling while the tests run: each launch's compile requests sent to the worker pool as soon
as its test passed, so that at the end of the session only what is still running is waited for.

    ahead = CompileAhead(["sm_90"], jobs=2, rootdir=root, slots=1)
    ahead.submit(launches_of_a_passed_test)          # any number of times, as tests pass
    results = compile_variants(all_launches, ["sm_90"], rootdir=root, pool=ahead)
    ahead.close()

:func:`~kperf_ci.capture.static.compile.compile_variants` plans exactly as without it (first-seen
order, one request per identity and arch) and asks this pool for the plan's requests
(:meth:`CompileAhead.map`): a request already sent is answered by its early compile, any other is
sent then. A request is matched by its whole content, so an early answer is used only for the
very request the plan would send: the results, the manifest and the warnings are the same as
compiling everything at the end, whatever order the compiles finished in.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any

from kperf_ci.capture.static.aot import WorkerPool
from kperf_ci.capture.static.compile import compile_request
from kperf_ci.capture.static.launch_spec import canonical_json
from kperf_ci.capture.static.record import LaunchSpec
from kperf_ci.hardware import normalize_arch


class CompileAhead:
    """A worker pool fed as launches arrive. ``slots``: the workers it keeps busy while the
    tests run (the tests need a core too); :meth:`map` widens it to every job for what is left.

    ``submitted`` holds (request key, ``time.monotonic()``) per request sent early: when each
    compile could start, for the tests and the benchmarks."""

    def __init__(
        self,
        archs: list[str],
        *,
        jobs: int | None = None,
        rootdir: str,
        slots: int | None = None,
        timeout: float = 120.0,
        cache_dir: str | None = None,
        artifacts: tuple[str, ...] = ("sass", "ptx"),
        pool: WorkerPool | None = None,
    ) -> None:
        self.archs = [normalize_arch(a) for a in archs]
        self.timeout = timeout
        self.artifacts = artifacts
        # paths as compile_variants gives its own pool: the rootdir on the workers' sys.path
        paths = [os.path.abspath(rootdir)]
        self.pool = pool if pool is not None else WorkerPool(jobs, cache_dir=cache_dir, paths=paths)
        if slots is not None:
            self.pool.slots = slots
        self._seen: set[tuple[str, str]] = set()  # (identity, arch): sent, or not importable
        self._futures: dict[str, Future[dict[str, Any]]] = {}  # request key -> its answer
        self.submitted: list[tuple[str, float]] = []

    def submit(self, launches: Iterable[LaunchSpec]) -> int:
        """Send the compile request of every (identity, arch) not seen before; returns how many
        were sent. The same identity as ``unique_launches`` and ``_plan`` use, so the first launch
        seen of an identity is the one the plan compiles."""
        sent = 0
        for ls in launches:
            for arch in self.archs:
                ck = (ls.identity, arch)
                if ck in self._seen:
                    continue
                self._seen.add(ck)
                if not ls.importable:  # the plan gives it an error, no request
                    continue
                req = compile_request(ls, arch, self.archs, self.artifacts)
                key = request_key(req)
                self._futures[key] = self.pool.submit(req, self.timeout)
                self.submitted.append((key, time.monotonic()))
                sent += 1
        return sent

    @property
    def outstanding(self) -> int:
        """Requests sent early and not answered yet."""
        return sum(not f.done() for f in self._futures.values())

    def map(
        self,
        requests: list[dict[str, Any]],
        timeout: float = 120.0,
        on_done: Callable[[dict[str, Any]], None] | None = None,
    ) -> list[dict[str, Any]]:
        """Responses in request order, as :meth:`WorkerPool.map` gives them: each request's early
        answer when it was sent (waited for), else compiled now, on every job. ``on_done`` is
        called once per request as it is answered (at once for those answered already)."""
        self.pool.slots = self.pool.jobs  # the tests are over: every core compiles
        futures = []
        for req in requests:
            fut = self._futures.pop(request_key(req), None)
            if fut is None:
                fut = self.pool.submit(req, timeout)
            futures.append(fut)
        if on_done is not None:
            for fut in futures:
                fut.add_done_callback(lambda f: on_done(f.result()))
        try:
            responses = [fut.result() for fut in futures]
            for fut in self._futures.values():  # sent early, not asked for: let it end
                fut.result()
        except KeyboardInterrupt:
            # as WorkerPool.map: kill the workers with their compilers, the caller gets it at once
            self.pool.stop()
            raise
        self._futures.clear()
        return responses

    def close(self, kill: bool = False) -> None:
        """The pool closed as :meth:`WorkerPool.close` (every worker asked to exit first);
        ``kill``: at once, compiles still running killed (an interrupted session)."""
        if kill:
            self.pool.stop()
        else:
            self.pool.close()


def request_key(req: dict[str, Any]) -> str:
    """A request's whole content as one string: an early answer serves only an equal request."""
    return canonical_json(req)
