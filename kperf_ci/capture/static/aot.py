"""Ahead-of-time compilation of recorded launches in a pool of worker processes.

Each worker (``kperf_ci.capture.static._worker``) is a long-lived ``python`` process started without
``TRITON_INTERPRET`` (so the tests' interpreter and the compiler never share a process); imports
are paid once per worker. Requests are sent one at a time per worker, each with its own
timeout: a worker that overruns is killed and replaced, and the request gets an error.
"""

from __future__ import annotations

import json
import os
import queue
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from kperf_ci.capture.static import spare as spare_worker
from kperf_ci.capture.static.start_gate import DEFAULT_START_S, StartGate
from kperf_ci.config import ENV_WORKER_PATH

_PKG_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def default_jobs() -> int:
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:
        n = os.cpu_count() or 1
    return max(1, n)


def worker_env(cache_dir: str | None = None, paths: list[str] | tuple[str, ...] = ()) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    pp = [_PKG_PARENT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(pp))
    env[ENV_WORKER_PATH] = os.pathsep.join(str(p) for p in paths)
    if cache_dir:
        env["TRITON_CACHE_DIR"] = str(cache_dir)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


class WorkerError(RuntimeError):
    pass


class Worker:
    """One compile worker process."""

    def __init__(
        self,
        env: dict[str, str],
        python: str = sys.executable,
        start_timeout: float = 120.0,
        cwd: str | None = None,
        on_spawn: Callable[[Worker], None] | None = None,
    ) -> None:
        """``on_spawn(self)``: called once the process exists, before its start is waited for
        (a pool that is stopped meanwhile must be able to kill it)."""
        cwd = cwd or os.getcwd()
        spare = spare_worker.claim() if python == sys.executable else None
        self.proc: subprocess.Popen[bytes] | spare_worker.Spare
        if spare is not None:  # forked from this process once torch was imported (.spare)
            self._stderr = spare.stderr
            self.proc = spare.start(env, cwd)
        else:
            self._stderr = tempfile.TemporaryFile(prefix="kperf-worker-")
            self.proc = subprocess.Popen(
                [python, "-m", "kperf_ci.capture.static._worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                env=env,
                cwd=cwd,
                bufsize=0,
                start_new_session=True,  # its own process group: a kill also ends ptxas & co.
            )
        self._buf = b""
        self._exit_sent = False
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.proc.stdout, selectors.EVENT_READ)
        self._next_id = 0
        try:
            if on_spawn is not None:
                on_spawn(self)
            hello = self._readline(time.monotonic() + start_timeout)
        except BaseException:  # Ctrl-C or a failed start: leave no process behind
            self.close(kill=True)
            raise
        if not hello.get("ready"):
            self.close(kill=True)
            raise WorkerError(f"worker did not start: {hello}")
        self.info = hello

    def _stderr_tail(self, n: int = 800) -> str:
        try:
            self._stderr.seek(0, os.SEEK_END)
            size = self._stderr.tell()
            self._stderr.seek(max(0, size - n))
            return self._stderr.read().decode(errors="replace").strip()
        except (OSError, ValueError):
            return ""

    def _readline(self, deadline: float) -> dict[str, Any]:
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            if not self._sel.select(timeout=min(left, 1.0)):
                if self.proc.poll() is not None:
                    raise WorkerError(self._died())
                continue
            chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
            if not chunk:
                self.proc.wait(timeout=5)
                raise WorkerError(self._died())
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def _died(self) -> str:
        rc = self.proc.poll()
        tail = self._stderr_tail().splitlines()
        last = tail[-1] if tail else ""
        return f"compile worker died (exit code {rc}){': ' + last if last else ''}"

    def request(self, req: dict[str, Any], timeout: float) -> dict[str, Any]:
        self._next_id += 1
        req = dict(req, id=self._next_id)
        try:
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise WorkerError(self._died()) from None
        deadline = time.monotonic() + timeout
        while True:
            resp = self._readline(deadline)
            if resp.get("id") == self._next_id:
                return resp

    def _kill_group(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the worker and the tools it started
        except (ProcessLookupError, PermissionError, AttributeError):
            self.proc.kill()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def ask_exit(self) -> None:
        """Tell the worker to exit, without waiting for it (a pool tells all its workers first:
        each takes about a second to exit, mamba's static pass on an H100 spent 10 s closing
        eight one after another)."""
        if self.proc.poll() is None and not self._exit_sent:
            try:
                self.proc.stdin.write(b'{"op": "exit"}\n')
                self.proc.stdin.flush()
                self._exit_sent = True
            except OSError:
                pass

    def close(self, kill: bool = False) -> None:
        if self.proc.poll() is None:
            if not kill:
                try:
                    self.ask_exit()
                    self.proc.wait(timeout=5)
                except (OSError, subprocess.TimeoutExpired):
                    kill = True
            if kill or self.proc.poll() is None:
                self._kill_group()
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
        try:
            self._sel.close()
            for f in (self.proc.stdin, self.proc.stdout):
                if f:
                    f.close()
            self._stderr.close()
        except OSError:
            pass


class WorkerPool:
    """``jobs`` long-lived compile workers (started lazily, replaced after a timeout/crash).

    >>> with WorkerPool(jobs=2) as pool:
    ...     responses = pool.map([{"op": "compile", "launch": ..., "arch": "sm_90"}], timeout=120)

    :meth:`submit` is the other way in: one request at a time, answered in the background (while
    the tests still run); a pool is used through one of the two, never both at once.
    """

    def __init__(
        self,
        jobs: int | None = None,
        *,
        cache_dir: str | None = None,
        paths: list[str] | tuple[str, ...] = (),
        python: str = sys.executable,
        start_timeout: float = 120.0,
    ) -> None:
        self.jobs = max(1, jobs or default_jobs())
        self.env = worker_env(cache_dir, paths)
        # the environment and directory of now: a worker started later, from a pool thread while
        # a test runs, must not inherit that test's monkeypatched environment or chdir
        self.cwd = os.getcwd()
        self.python = python
        self.start_timeout = start_timeout
        self._workers: list[Worker | None] = [None] * self.jobs
        self.startup_s: list[float] = []  # seconds each worker took to start (incl. prewarm)
        self._stopped = threading.Event()  # set on Ctrl-C: no new worker, no new request
        self._background = _Background(self)
        # workers still starting (their slot -> them), killed too by stop(): a Ctrl-C while the
        # tests run can come while a pool thread waits for a worker's start, and that thread
        # (a daemon) dies with the session without closing what it started
        self._starting: dict[int, Worker] = {}
        self._starting_lock = threading.Lock()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _worker(self, slot: int) -> Worker:
        w = self._workers[slot]
        if w is None or not w.alive:
            if w is not None:
                w.close(kill=True)
            t0 = time.perf_counter()
            try:
                w = Worker(
                    self.env,
                    self.python,
                    self.start_timeout,
                    cwd=self.cwd,
                    on_spawn=lambda w: self._spawned(slot, w),
                )
            finally:
                with self._starting_lock:
                    self._starting.pop(slot, None)
            self.startup_s.append(round(time.perf_counter() - t0, 6))
            if self._stopped.is_set():  # the pool was stopped while this one started
                w.close(kill=True)
                raise WorkerError("compile stopped")
            self._workers[slot] = w
        return w

    def _spawned(self, slot: int, w: Worker) -> None:
        with self._starting_lock:
            if self._stopped.is_set():
                raise WorkerError("compile stopped")  # Worker.__init__ kills it
            self._starting[slot] = w

    def _one(self, slot: int, req: dict[str, Any], timeout: float) -> dict[str, Any]:
        try:
            w = self._worker(slot)
        except (WorkerError, TimeoutError, OSError) as e:
            self._workers[slot] = None
            return {"ok": False, "error": f"compile worker failed to start: {e}"}
        t0 = time.perf_counter()  # per-request time, worker start excluded (see startup_s)
        try:
            resp = w.request(req, timeout)
        except TimeoutError:
            w.close(kill=True)
            self._workers[slot] = None
            return {"ok": False, "error": f"compile timed out after {timeout:g} s"}
        except WorkerError as e:
            w.close(kill=True)
            self._workers[slot] = None
            return {"ok": False, "error": str(e)}
        resp["wall_s"] = round(time.perf_counter() - t0, 6)
        return resp

    def map(
        self,
        requests: list[dict[str, Any]],
        timeout: float = 120.0,
        on_done: Callable[[dict[str, Any]], None] | None = None,
    ) -> list[dict[str, Any]]:
        """Responses in request order. ``on_done(response)`` is called (from a pool thread) as
        each request finishes: a progress display."""
        results: list[dict[str, Any] | None] = [None] * len(requests)
        if not requests:
            return []
        q: queue.Queue[int] = queue.Queue()
        for i in range(len(requests)):
            q.put(i)
        n = min(self.jobs, len(requests))

        def run(slot: int, gate: StartGate | None = None) -> None:  # the gate: slot 0's
            while not self._stopped.is_set():
                try:
                    i = q.get_nowait()
                except queue.Empty:
                    return
                results[i] = self._one(slot, requests[i], timeout)
                if on_done is not None:
                    on_done(results[i])
                if gate is not None:
                    gate.answered(float(results[i].get("wall_s") or 0.0), q.qsize())

        others = [threading.Thread(target=run, args=(s,), daemon=True) for s in range(1, n)]
        # the others start when the queue outlasts a worker's start (start_gate.py); at once
        # where they are running already
        gate = StartGate(max(self.startup_s, default=DEFAULT_START_S), lambda: [t.start() for t in others])
        if all(w is not None and w.alive for w in self._workers[1:n]):
            gate.open()
        try:
            run(0, gate)
            for t in others if gate.started else ():
                t.join()
        except KeyboardInterrupt:
            # Ctrl-C reaches only this process (workers run in their own session): stop
            # handing out requests and kill the workers with the compilers they started, so
            # the caller gets the KeyboardInterrupt at once and no process is left behind.
            self.stop()
            raise
        return [r if r is not None else {"ok": False, "error": "not run"} for r in results]

    def submit(self, req: dict[str, Any], timeout: float = 120.0) -> Future[dict[str, Any]]:
        """One request answered in the background, by at most :attr:`slots` pool threads (one
        worker each); the future's result is a response as :meth:`map` gives it, never an
        exception (a stopped pool answers "compile stopped")."""
        return self._background.submit(req, timeout)

    @property
    def slots(self) -> int:
        """How many workers :meth:`submit` may keep busy (at most :attr:`jobs`)."""
        return self._background.limit

    @slots.setter
    def slots(self, n: int) -> None:
        self._background.widen(max(1, min(self.jobs, n)))

    def stop(self) -> None:
        """Stop at once: no further request is started, running compiles are killed, and so
        are workers still starting."""
        self._stopped.set()
        self._background.drain()
        with self._starting_lock:
            starting = list(self._starting.values())
        for w in starting:
            w._kill_group()
        self.close(kill=True)

    def close(self, kill: bool = False) -> None:
        self._background.end(wait=not kill)
        if not kill:
            for w in self._workers:
                if w is not None:
                    w.ask_exit()
        for i, w in enumerate(self._workers):
            if w is not None:
                w.close(kill=kill)
                self._workers[i] = None


class _Background:
    """The threads behind :meth:`WorkerPool.submit`: one per worker slot, started while more
    requests wait than threads are idle, up to ``limit``; each takes the next from one queue."""

    def __init__(self, pool: WorkerPool) -> None:
        self.pool = pool
        self.limit = pool.jobs
        self._queue: queue.Queue[tuple[dict[str, Any], float, Future] | None] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._lock = threading.Lock()

    def submit(self, req: dict[str, Any], timeout: float) -> Future[dict[str, Any]]:
        fut: Future[dict[str, Any]] = Future()
        if self.pool._stopped.is_set():
            fut.set_result(dict(_STOPPED))
            return fut
        self._queue.put((req, timeout, fut))
        self._grow()
        return fut

    def widen(self, limit: int) -> None:
        self.limit = limit
        for _ in range(self._queue.qsize()):
            self._grow()

    def _grow(self) -> None:
        with self._lock:
            if self._queue.qsize() <= self._idle or len(self._threads) >= self.limit:
                return
            t = threading.Thread(target=self._run, args=(len(self._threads),), daemon=True)
            self._threads.append(t)
        t.start()

    def _run(self, slot: int) -> None:
        while True:
            with self._lock:
                self._idle += 1
            item = self._queue.get()
            with self._lock:
                self._idle -= 1
            if item is None:
                return
            req, timeout, fut = item
            if not fut.set_running_or_notify_cancel():
                continue
            if self.pool._stopped.is_set():
                fut.set_result(dict(_STOPPED))
                continue
            try:
                fut.set_result(self.pool._one(slot, req, timeout))
            except BaseException as e:  # never leave a waiter waiting on a thread that died
                fut.set_result({"ok": False, "error": f"compile failed: {e}"})

    def drain(self) -> None:
        """Every request not yet started answered "compile stopped"."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is not None and item[2].set_running_or_notify_cancel():
                item[2].set_result(dict(_STOPPED))

    def end(self, wait: bool) -> None:
        """The threads told to exit (after the requests queued before); ``wait``: joined."""
        with self._lock:
            threads, self._threads = self._threads, []
        for _ in threads:
            self._queue.put(None)
        if wait:
            for t in threads:
                t.join()


#: the response to a request the pool was stopped before (copied: a response is the caller's)
_STOPPED: dict[str, Any] = {"ok": False, "error": "compile stopped"}
