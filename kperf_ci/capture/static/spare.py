"""A compile worker that shares the test process's ``import torch``: forked once torch is imported.

Each compile worker paid its own import of torch: 1.3-2 CPU-s on a 2-core runner, more than the
compile of a small session's kernels, and a static session imports torch once in pytest anyway.
So in static mode under the interpreter, :func:`arm` (called before any conftest is imported)
waits for the first ``import torch`` of the test process, and the moment torch has finished
importing, before the importing module runs another line, the process forks once. The child, the
*spare*, drops the modules that were being imported and every module loaded since :func:`arm` that
a compile worker must import for itself (the user's: outside the interpreter's own directories),
then waits on a pipe. :class:`~.aot.WorkerPool` takes it as its
first worker (:func:`claim`); other workers are spawned as before. Sending it the worker's
environment and directory turns it into an ordinary worker (:mod:`._worker`): the same protocol,
its own session (a kill ends ptxas too), the same timeouts.

Why no user module is inherited: a module's import can have effects a second import in the same
process refuses (``torch.library`` registrations, FlagGems' overrides), and a kernel defined under
the interpreter is not a compiled one. The fork happens before the module that imports torch runs
on, and nothing a user module did after that is in the child.

No spare, and every worker spawned, where forking is not safe or not asked for: not Linux, other
threads running at that moment, triton imported before torch (under the interpreter: see
:func:`_fork`), torch imported before :func:`arm`, a GPU session (no interpreter), or
``KPERF_WORKER_NO_FORK`` set; under xdist, the controller never arms (its workers do, and there
execnet's thread prevents the fork). A spare never claimed reads end-of-file, and exits, when its
parent exits, is killed or calls :func:`release` (a process the parent forks later closes its
copy of the pipe at once).
"""

from __future__ import annotations

import atexit
import contextlib
import faulthandler
import importlib
import json
import os
import signal
import site
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import traceback
import types
import warnings
from typing import IO, Any

from kperf_ci.capture.static import _worker
from kperf_ci.capture.static.fake_device import AfterImport
from kperf_ci.config import ENV_WORKER_NO_FORK, env_switch

_lock = threading.Lock()
_spare: Spare | None = None
_finder: AfterImport | None = None
#: modules and sys.path of the process when armed: what a spawned worker would also have
_armed_modules: frozenset[str] = frozenset()
_armed_path: list[str] = []


def arm() -> None:
    """Fork a spare when torch has been imported (static mode, interpreter on; see module doc)."""
    global _finder, _armed_modules, _armed_path
    if _finder is not None or _spare is not None or "torch" in sys.modules or env_switch(ENV_WORKER_NO_FORK):
        return
    if not sys.platform.startswith("linux") or os.environ.get("TRITON_INTERPRET") != "1":
        return
    _armed_modules, _armed_path = frozenset(sys.modules), list(sys.path[1:])
    _finder = _TorchWatch(_fork)
    atexit.register(release)
    # last on the path to torch's loader: its callback runs before that of any finder inserted
    # later (a FakeCuda waiting for torch), so the spare has torch as it is, without the fakes
    sys.meta_path.insert(0, _finder)


class _TorchWatch(AfterImport):
    """:class:`AfterImport` that also notes the modules present when torch's import began: those
    imported during it (sympy, numpy, ...) are torch's, and the spare keeps them."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        global _before_torch
        if fullname == "torch":
            _before_torch = frozenset(sys.modules)
        return super().find_spec(fullname, path, target)


_before_torch: frozenset[str] = frozenset()


def _fork() -> None:
    """Runs as torch's import ends: whatever happens here, that import succeeds."""
    global _finder
    if _finder is not None:
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(_finder)
        _finder = None
    try:
        _fork_spare()
    except Exception:  # noqa: BLE001 - no spare (os.fork can fail: memory, process limits)
        pass


def _fork_spare() -> None:
    global _spare
    if len(sys._current_frames()) != 1:
        # A fork copies one thread: another's locks could be held forever in the child. Every
        # thread running Python counts, those `threading` does not list too (execnet's, in an
        # xdist worker). Native threads do not: OpenBLAS's pool, which numpy starts as torch
        # imports it, stops and restarts around a fork by its own pthread_atfork handlers.
        return
    if "triton" in sys.modules:
        # imported under the interpreter: its own @jit functions (tl.sum, tl.cdiv, ...) are
        # interpreted ones, which a compile cannot call, and triton does not import twice
        return
    from_parent, to_child = os.pipe()  # (read end, write end)
    from_child, to_parent = os.pipe()
    stderr = tempfile.TemporaryFile(prefix="kperf-worker-")
    pid = os.fork()
    if pid == 0:  # the spare: never returns into the import that forked it
        code = 1
        try:
            os.close(to_child)
            os.close(from_child)
            code = _spare_main(from_parent, to_parent, stderr.fileno())
        except BaseException:  # noqa: BLE001 - the child must end here whatever happened
            with contextlib.suppress(Exception):
                os.write(2, traceback.format_exc().encode(errors="replace"))
        finally:
            os._exit(code)
    os.close(from_parent)
    os.close(to_parent)
    _spare = Spare(
        pid, os.fdopen(to_child, "wb", buffering=0), os.fdopen(from_child, "rb", buffering=0), stderr
    )
    # a later fork of this process (a multiprocessing pool, a DataLoader worker) must not hold the
    # spare's pipe open: the spare reads end-of-file only when every copy of it is closed
    os.register_at_fork(after_in_child=_forget_spare)


def _forget_spare() -> None:
    global _spare
    spare, _spare = _spare, None
    if spare is not None:
        spare.close()


def claim() -> Spare | None:
    """The spare, once, to the process that forked it; None when there is none (any more)."""
    global _spare
    with _lock:
        if _spare is None or _spare.parent != os.getpid():
            return None  # a process forked from the test process later has no spare of its own
        spare, _spare = _spare, None
    if spare.poll() is not None:
        spare.close()
        return None
    return spare


def release() -> None:
    """End a spare nobody claimed (its pipe closes: it exits) and reap it."""
    spare = claim()
    if spare is not None:
        spare.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            spare.wait(timeout=5)


class Spare:
    """The parent's handle on the forked child, with the part of ``subprocess.Popen`` that
    :class:`~.aot.Worker` uses (``pid``, ``stdin``, ``stdout``, ``poll``, ``wait``, ``kill``)."""

    def __init__(self, pid: int, stdin: IO[bytes], stdout: IO[bytes], stderr: IO[bytes]) -> None:
        self.pid, self.stdin, self.stdout, self.stderr = pid, stdin, stdout, stderr
        self.returncode: int | None = None
        self.parent = os.getpid()

    def start(self, env: dict[str, str], cwd: str) -> Spare:
        """Become a worker with this environment and working directory."""
        self.stdin.write((json.dumps({"env": env, "cwd": cwd}) + "\n").encode())
        return self

    def poll(self) -> int | None:
        if self.returncode is None and os.getpid() == self.parent:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere (SIGCHLD ignored): as Popen says, 0
                self.returncode = 0
            else:
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"compile worker {self.pid}", timeout or 0)
            time.sleep(0.01)
        return self.returncode  # type: ignore[return-value]

    def kill(self) -> None:
        if self.poll() is None:  # never a pid that may already be another process's
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    def close(self) -> None:
        for f in (self.stdin, self.stdout):
            with contextlib.suppress(OSError):
                f.close()


# --------------------------------------------------------------------------------------------
# the child


def _spare_main(from_parent: int, to_parent: int, stderr_fd: int) -> int:
    os.setsid()  # its own process group, as a spawned worker's: a kill also ends ptxas & co.
    os.chdir("/")  # while it waits, it holds no directory of the session (kperf ab removes its trees)
    # as a spawned Python has them: SIGPIPE ignored (a broken pipe is an exception), Ctrl-C raises
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _name("kperf-spare")
    _own_stdio(from_parent, to_parent, stderr_fd)
    # pytest's warning filters and recorder (the fork came inside its catch_warnings) are not a
    # worker's: a reload gives the interpreter's own, with -W and PYTHONWARNINGS applied
    importlib.reload(warnings)
    if faulthandler.is_enabled():
        faulthandler.enable(file=sys.stderr)  # a crash is told on the worker's stderr
    torch_spec = getattr(sys.modules.get("torch"), "__spec__", None)
    if torch_spec is not None:
        torch_spec._initializing = False  # its import ended; this process never returns into it
    line = sys.stdin.readline()
    if not line:
        return 0  # never claimed: the parent is done
    start = json.loads(line)
    _name("kperf-worker")
    os.environ.clear()
    os.environ.update(start["env"])
    os.chdir(start["cwd"])
    _forget_user_modules()
    # sys.path as `python -m` gives a spawned worker: its directory, PYTHONPATH, then the rest
    pythonpath = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = list(dict.fromkeys([start["cwd"], *pythonpath, *_armed_path]))
    sys.meta_path[:] = [f for f in sys.meta_path if not _ours_or_pytests(type(f).__module__)]
    sys.path_importer_cache.clear()
    return _worker.main(forked=True)


#: objects of the parent the spare keeps alive: streams whose buffers are the parent's to write,
#: modules it dropped (their finalizers would remove the parent's temporary files)
_inherited: list[Any] = []


def _own_stdio(from_parent: int, to_parent: int, stderr_fd: int) -> None:
    """fd 0 and 1 the pipes from and to the parent, fd 2 the worker's stderr file, and new stream
    objects on them. The parent's are kept alive, never flushed: a flush from here would put
    what the parent buffered into the protocol pipe."""
    _inherited.extend([sys.stdin, sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__])
    os.dup2(from_parent, 0)
    os.dup2(to_parent, 1)
    os.dup2(stderr_fd, 2)
    for fd in (from_parent, to_parent, stderr_fd):
        if fd > 2:
            os.close(fd)
    sys.stdin = os.fdopen(0, "r", closefd=False)
    sys.stdout = sys.__stdout__ = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = sys.__stderr__ = os.fdopen(2, "w", buffering=1, closefd=False)


def _name(name: str) -> None:
    """What ps and /proc/PID/comm call this process: a fork keeps its parent's command line."""
    with contextlib.suppress(OSError):
        with open("/proc/self/comm", "w") as f:
            f.write(name)


def _ours_or_pytests(module: str) -> bool:
    """A finder of pytest (its assertion rewriter) or of kperf's test side: not a worker's."""
    return module.split(".")[0] in ("_pytest", "pytest", "kperf_ci")


def _interpreter_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    with contextlib.suppress(AttributeError):  # the venv's base, dist-packages, the user's site
        dirs.update(site.getsitepackages())
        dirs.add(site.getusersitepackages())
    return tuple(os.path.join(os.path.realpath(d), "") for d in dirs if d)


def _forget_user_modules() -> None:
    """Drop what a spawned worker would import for itself (see the module doc): never what torch's
    import brought in, and a dropped package with its submodules (a fresh package object would
    lack the attribute of a submodule kept). The dropped modules stay alive in the spare."""
    own = _interpreter_dirs()
    # the candidates: what came between arming and torch's import; all that came later is torch's
    # (the fork came at the end of that import)
    drop = {
        name
        for name in _before_torch - _armed_modules
        if name != "__main__"
        and name.split(".")[0] != "kperf_ci"
        and ((mod := sys.modules.get(name)) is None or _must_reimport(mod, own))
    }
    drop |= {name for name in list(sys.modules) if any(name.startswith(d + ".") for d in drop)}
    for name in drop:
        _inherited.append(sys.modules.pop(name, None))


def _must_reimport(mod: types.ModuleType, own: tuple[str, ...]) -> bool:
    spec = getattr(mod, "__spec__", None)
    if spec is not None and getattr(spec, "_initializing", False):
        return True  # mid-import when torch came: it must run from its first line
    file = getattr(mod, "__file__", None)
    # the user's code (a test tree, an editable install): a worker imports it for itself
    return isinstance(file, str) and file.endswith(".py") and not os.path.realpath(file).startswith(own)
