"""Record Triton kernel launches so that they can be compiled ahead of time elsewhere.

Static mode runs the user's tests on a CPU machine under Triton's interpreter
(``TRITON_INTERPRET=1``): every ``@triton.jit`` function is then an
``triton.runtime.interpreter.InterpretedFunction``. While a :class:`LaunchRecorder` is active,
``InterpretedFunction.run`` is wrapped: each launch is described as a :class:`LaunchSpec`
(argument types, the integer values Triton specializes on, pointer alignment, constexpr values,
launch options, grid) and then executed, so the test's own assertions still hold.

Recording needs no execution. A launch is recorded first; it is then executed with the
interpreter's gaps patched (:mod:`kperf_ci.capture.static.interp_patches`). When the interpreter still
cannot run it (an unsupported op), when its grid is too large to interpret in reasonable time,
or when the recorder was asked not to execute (``execute="never"``), the kernel body is skipped:
the launch stays captured and the test is told its results were not checked
(:attr:`LaunchRecorder.unchecked`).

``@triton.autotune`` with several configs: the configs the autotuner itself keeps are recorded
per :class:`~kperf_ci.capture.static.autotune.AutotunePolicy` without being executed, and the first one
runs for real (``autotune.py``). ``@triton.heuristics`` needs nothing special.

The patches and their per-thread state live in one :class:`CaptureHooks` object, installed while
at least one recorder is active and removed with the last one.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from kperf_ci.capture.static import autotune as _autotune
from kperf_ci.capture.static.describe import config_string, describe_args, describe_value, make_launch_spec
from kperf_ci.capture.static.interp_patches import FloatScalars, libdevice_as_numpy
from kperf_ci.capture.static.launch_spec import (
    NOT_IMPORTABLE,
    ArgSpec,
    LaunchSpec,
    load_launches,
    with_context,
    work_signature,
)
from kperf_ci.model import DEFAULT_OPTIONS

__all__ = [
    "DEFAULT_OPTIONS",
    "NOT_IMPORTABLE",
    "ArgSpec",
    "LaunchSpec",
    "LaunchRecorder",
    "config_string",
    "describe_args",
    "describe_value",
    "load_launches",
    "make_launch_spec",
    "with_context",
    "work_signature",
]

#: A launch with more programs than this is recorded but not interpreted (its results are not
#: checked): the interpreter runs one Python call per program, and suites' production shapes
#: (cross-entropy 2x4096 rows of 32,000) would take hours.
MAX_INTERPRETED_PROGRAMS = 4096


class _Local(threading.local):
    record_only: bool = False  # inside the autotuner's record-only pass over its configs
    autotune: dict[str, Any] | None = None
    skip_bench: bool = False  # inside Autotuner._bench on a GPU, for a config the policy leaves out


class CaptureHooks:
    """The patches on Triton's launch paths (interpreter, compiled JIT, autotuner) and their
    state. Installed when the first recorder activates, removed when the last one deactivates."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.active: list[LaunchRecorder] = []
        self.local = _Local()
        self._originals: dict[str, Any] = {}
        self._floats = FloatScalars()

    def current(self) -> LaunchRecorder | None:
        return self.active[-1] if self.active else None

    def install(self) -> None:
        from triton.runtime.autotuner import Autotuner
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction

        o = self._originals
        o["interp_run"], o["jit_run"] = InterpretedFunction.run, JITFunction.run
        o["autotuner_run"], o["autotuner_bench"] = Autotuner.run, Autotuner._bench
        InterpretedFunction.run = _patched_interp_run
        JITFunction.run = _patched_jit_run
        Autotuner.run = _patched_autotuner_run
        Autotuner._bench = _patched_autotuner_bench
        self._floats.install()

    def uninstall(self) -> None:
        from triton.runtime.autotuner import Autotuner
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction

        o = self._originals
        InterpretedFunction.run = o.pop("interp_run")
        JITFunction.run = o.pop("jit_run")
        Autotuner.run = o.pop("autotuner_run")
        Autotuner._bench = o.pop("autotuner_bench")
        self._floats.uninstall()

    def original(self, name: str) -> Any:
        return self._originals[name]


HOOKS = CaptureHooks()


def _record(rec: LaunchRecorder, fn: Any, args: tuple, kwargs: dict, grid: Any, executed: bool) -> Any:
    try:
        return rec._record(fn, args, kwargs, grid, executed=executed, autotune=HOOKS.local.autotune)
    except Exception as e:  # recording must never break the user's test
        rec.errors.append(f"{getattr(fn, '__name__', fn)!r}: {type(e).__name__}: {e}")
        return None


def _patched_interp_run(self, *args, grid, warmup, **kwargs):
    __tracebackhide__ = True  # a user's failure is reported at the user's line, not here
    run = HOOKS.original("interp_run")
    rec = HOOKS.current()
    if rec is None or warmup:
        return run(self, *args, grid=grid, warmup=warmup, **kwargs)
    spec = _record(rec, self, args, kwargs, grid, executed=not HOOKS.local.record_only)
    if HOOKS.local.record_only:
        return None
    why = rec.skip_reason(spec)
    if why is not None:
        rec.not_executed(spec, why)
        return None
    from triton.runtime.errors import InterpreterError

    with libdevice_as_numpy(self):
        try:
            return run(self, *args, grid=grid, warmup=warmup, **kwargs)
        except InterpreterError as e:
            # The interpreter cannot run this kernel (an op it lacks): the launch is captured,
            # its outputs are not computed, and the test is told so.
            rec.not_executed(spec, f"interpreter unsupported op: {_first_line(e)}")
            return None


def _patched_jit_run(self, *args, grid, warmup, **kwargs):
    """A compiled (GPU) launch: record it, then run it as Triton would.

    Static mode on a machine with CUDA does not switch the interpreter on, so kernels are
    ``JITFunction`` s. An autotuned call's configs are recorded without launching them
    (``record_only``, before the autotuner runs), and its benchmarking launches are not
    recorded (``skip_bench``): only the launch after its choice, marked as its pick."""
    __tracebackhide__ = True
    rec = HOOKS.current()
    if rec is not None and not warmup and HOOKS.local.record_only:
        _record(rec, self, args, kwargs, grid, executed=False)
        return None
    if rec is not None and not warmup and not HOOKS.local.skip_bench:
        _record(rec, self, args, kwargs, grid, executed=True)
    return HOOKS.original("jit_run")(self, *args, grid=grid, warmup=warmup, **kwargs)


def _patched_autotuner_run(self, *args, **kwargs):
    """Record the configs the policy selects, without launching them, then let the autotuner
    run. Every call records its configs, on a GPU as under the interpreter: a GPU autotuner
    benchmarks only the first call of each tuning key in a process, so configs recorded from its
    benchmarking were there for one test and missing for the next (their calls then read as
    configs dropped and added). The autotuner then picks the first config without executing any
    (benchmarking replaced by _patched_autotuner_bench), on a GPU as under the interpreter,
    unless it keeps its results in Triton's disk cache; its launch after the choice is marked as
    its pick."""
    __tracebackhide__ = True
    run = HOOKS.original("autotuner_run")
    rec = HOOKS.current()
    if rec is None or len(self.configs) <= 1:
        return run(self, *args, **kwargs)
    local = HOOKS.local
    prev = (local.record_only, local.autotune)

    def record_only(config_kwargs: dict[str, Any], info: dict[str, Any]) -> None:
        local.record_only, local.autotune = True, info
        try:
            self.fn.run(*args, **kwargs, **config_kwargs)
        except Exception as e:
            rec.errors.append(
                f"autotune config {info['index']} of {self.base_fn.__name__}: {type(e).__name__}: {e}"
            )

    try:
        configs, _ = _autotune.record_configs(self, args, kwargs, rec.autotune, record_only)
    finally:
        local.record_only, local.autotune = prev
    # Configs rank in their pruned order, so the first one is chosen without timing any, on a GPU
    # as under the interpreter: an autotuned call is timed best against best, never by its pick
    # (on an H100 attorch's autotuners took 40 s of each static pass, in both trees). An
    # autotuner that keeps its results in Triton's disk cache benchmarks for real: what it finds
    # serves the timing pass, which shares the cache (flash-linear-attention: its timing pass
    # went from 35 s to 112 s when the static passes, side by side, no longer tuned).
    if not getattr(self, "cache_results", False):
        self._kperf_order = {id(c): i for i, c in enumerate(configs)}
    local.autotune = {"count": len(configs), "chosen": True}
    try:
        return run(self, *args, **kwargs)
    finally:
        local.autotune = prev[1]
        self.__dict__.pop("_kperf_order", None)


def _patched_autotuner_bench(self, *args, config, **meta):
    __tracebackhide__ = True
    bench = HOOKS.original("autotuner_bench")
    if HOOKS.current() is None:
        return bench(self, *args, config=config, **meta)
    if not hasattr(self, "_kperf_order"):  # results for Triton's disk cache: timed for real
        prev = HOOKS.local.skip_bench
        HOOKS.local.skip_bench = True  # its launches are not the test's
        try:
            return bench(self, *args, config=config, **meta)
        finally:
            HOOKS.local.skip_bench = prev
    # configs rank in their pruned order: the first one is chosen without executing any
    t = float(self._kperf_order.get(id(config), 1_000_000) + 1)
    return [t, t, t]


def _first_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text[:300] or type(e).__name__


class LaunchRecorder:
    """Collects a :class:`LaunchSpec` for every kernel launch while active.

    >>> rec = LaunchRecorder()
    >>> with rec.recording(test="tests/test_add.py::test_add"):
    ...     run_the_test()
    >>> rec.launches  # list[LaunchSpec], in launch order (duplicates kept)

    Intercepts interpreted launches (``TRITON_INTERPRET=1``, a CPU machine) and compiled
    ``JITFunction`` launches (a machine with CUDA) alike.

    execute: ``"auto"`` runs each interpreted launch unless the interpreter cannot (then it is
    only recorded), ``"never"`` records without running any kernel body. autotune: which configs
    of an autotuned launch are recorded (:class:`~kperf_ci.capture.static.autotune.AutotunePolicy` or
    its setting value). max_programs: interpreted launches with a larger grid are not executed.
    """

    def __init__(
        self,
        *,
        execute: str = "auto",
        autotune: Any = "all",
        max_programs: int = MAX_INTERPRETED_PROGRAMS,
    ) -> None:
        if execute not in ("auto", "never"):
            raise ValueError(f"execute must be 'auto' or 'never', got {execute!r}")
        self.launches: list[LaunchSpec] = []
        self.errors: list[str] = []  # recording problems (never raised into the test)
        # (kernel, why) per launch whose body did not run: the test's results are not checked
        self.unchecked: list[tuple[str, str]] = []
        self.execute = execute
        self.autotune = _autotune.AutotunePolicy.parse(autotune)
        self.max_programs = max_programs
        self._context: dict[str, Any] = {"test": "", "name": None, "tags": (), "thresholds": None}
        self._lock = threading.Lock()

    # -- activation -------------------------------------------------------------------------
    def activate(self) -> None:
        with HOOKS.lock:
            if self in HOOKS.active:
                raise RuntimeError("LaunchRecorder already active")
            if not HOOKS.active:
                HOOKS.install()
            HOOKS.active.append(self)

    def deactivate(self) -> None:
        with HOOKS.lock:
            if self not in HOOKS.active:
                return
            HOOKS.active.remove(self)
            if not HOOKS.active:
                HOOKS.uninstall()

    @property
    def active(self) -> bool:
        return self in HOOKS.active

    @contextlib.contextmanager
    def recording(
        self,
        test: str = "",
        name: str | None = None,
        tags: tuple[str, ...] | list[str] = (),
        thresholds: dict[str, Any] | None = None,
    ) -> Iterator[LaunchRecorder]:
        """Record launches inside the block, tagged with the given test id / name / tags."""
        prev = self._context
        self._context = {"test": test, "name": name, "tags": tuple(tags), "thresholds": thresholds}
        self.activate()
        try:
            yield self
        finally:
            self.deactivate()
            self._context = prev

    # -- recording --------------------------------------------------------------------------
    def _record(
        self,
        fn: Any,
        args: tuple,
        kwargs: dict[str, Any],
        grid: Any,
        *,
        executed: bool,
        autotune: dict[str, Any] | None,
    ) -> LaunchSpec:
        ctx = self._context
        spec = make_launch_spec(
            fn,
            args,
            kwargs,
            grid,
            test=ctx["test"],
            name=ctx["name"],
            tags=ctx["tags"],
            thresholds=ctx["thresholds"],
            executed=executed,
            autotune=dict(autotune) if autotune else None,
        )
        with self._lock:
            self.launches.append(spec)
        return spec

    def skip_reason(self, spec: LaunchSpec | None) -> str | None:
        """Why an interpreted launch is recorded without running its body; None to run it."""
        if self.execute == "never":
            return "recorded without execution (execute=never)"
        if spec is not None and spec.grid:
            programs = 1
            for g in spec.grid:
                programs *= max(int(g), 1)
            if programs > self.max_programs:
                return (
                    f"grid of {programs:,} programs is too large to interpret "
                    f"(limit {self.max_programs:,}): use smaller sizes under the interpreter"
                )
        return None

    def not_executed(self, spec: LaunchSpec | None, why: str) -> None:
        kernel = spec.kernel if spec is not None else "?"
        with self._lock:
            self.unchecked.append((kernel, why))
            if spec is not None and self.launches and self.launches[-1] is spec:
                self.launches[-1] = replace(spec, executed=False)

    def unique(self) -> list[LaunchSpec]:
        """Launches with duplicates removed, first occurrence kept.  A duplicate is the same test,
        the same compiled variant (identity) and the same work (grid, integer arguments, tensor
        shapes): a test that runs one variant at two problem sizes keeps both launches, which the
        A/B static pass compares launch by launch."""
        seen: dict[tuple[str, ...], int] = {}
        out: list[LaunchSpec] = []
        for ls in self.launches:
            k = (ls.test, ls.identity, work_signature(ls))
            if k not in seen:
                seen[k] = len(out)
                out.append(ls)
            elif (ls.autotune or {}).get("chosen"):
                # the autotuner's pick repeats a config recorded before it: the kept launch
                # says it was the pick (the A/B diff reports picks that differ between runs)
                first = out[seen[k]]
                out[seen[k]] = replace(first, autotune={**(first.autotune or {}), "chosen": True})
        return out

    def clear(self) -> None:
        self.launches.clear()
        self.errors.clear()
        self.unchecked.clear()

    def dump(self, path: str | os.PathLike[str]) -> None:
        """Write the launches as JSON lines."""
        with open(path, "w", encoding="utf-8") as f:
            for ls in self.launches:
                f.write(ls.to_json() + "\n")
