"""``triton.testing.do_bench`` and ``do_bench_cudagraph`` intercepted inside an unmodified
benchmark script: each call becomes a :class:`BenchCall` handed to a handler (the plugin's
script item, :mod:`kperf_ci.plugin.bench_script`), whose return value the script receives.

Nothing here times or stores: this module names calls and answers them as Triton would.

- **Which calls.** Calls made from Triton's own modules pass through untouched: the autotuner
  benchmarks its configs with ``do_bench``, and those are not the script's benchmarks. A call
  made inside the function another call benchmarks (nested) runs its function once and answers
  NaN: the outer call is the benchmark.
- **Names.** A call is named by its call site, ``<module>.<function>#k`` (k: the call's rank
  among the ``do_bench`` calls written in that function, so editing a line above it does not
  rename it; ``#L<line>`` when the source cannot be read), and by its first Triton launch,
  ``bf16:2048x4096`` (the dtype and shape of the launch's first tensor argument).
- **Answers.** The script gets what its arguments ask for (a mean, a median, quantiles, all
  times) computed by Triton's own ``_summarize_statistics`` from the samples kperf measured, so
  its printed tables and CSV files keep their meaning.
- **Event loops of the script's own** (``torch.cuda.Event`` timing outside ``do_bench``) are
  counted, so they can be listed as not captured.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import math
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from kperf_ci.capture.static.launch_spec import LaunchSpec

#: the functions intercepted, by name in ``triton.testing``
INTERCEPTED = ("do_bench", "do_bench_cudagraph")
#: do_bench's default warm-up and repetition time (ms), as Triton 3.6 declares them
DEFAULTS = {"do_bench": (25.0, 100.0), "do_bench_cudagraph": (0.0, 20.0)}


@dataclass
class BenchCall:
    """One ``do_bench`` call of the script, with what it asked for."""

    function: str  # "do_bench" | "do_bench_cudagraph"
    fn: Callable[[], Any]
    site: str  # "utils.run_speed_benchmark#1"
    file: str  # absolute path of the calling file
    line: int
    warmup_ms: float
    rep_ms: float
    grad_to_none: Sequence[Any] | None = None
    quantiles: Sequence[float] | None = None
    return_mode: str = "mean"
    original: Callable[..., Any] | None = field(default=None, repr=False)

    def call(self) -> Callable[[], Any]:
        """``fn`` as do_bench runs it: the listed gradients reset before each call, so a
        backward pass does not accumulate into them (an extra kernel do_bench never times)."""
        fn, grads = self.fn, list(self.grad_to_none or ())
        if not grads:
            return fn

        def call() -> Any:
            for x in grads:
                x.grad = None
            return fn()

        return call

    def run_original(self) -> Any:
        """The call as the script made it, timed by Triton itself."""
        assert self.original is not None
        kwargs: dict[str, Any] = {"rep": self.rep_ms, "grad_to_none": self.grad_to_none}
        if self.function == "do_bench":
            kwargs["warmup"] = self.warmup_ms
        return self.original(self.fn, quantiles=self.quantiles, return_mode=self.return_mode, **kwargs)

    def answer(self, samples_ms: Sequence[float]) -> Any:
        """What do_bench would return for these times, by Triton's own rule; NaN for each
        number asked when there are no samples (nothing was timed here: static mode)."""
        times = [float(t) for t in samples_ms]
        if not times:
            return self.not_measured()
        summarize = getattr(_testing(), "_summarize_statistics", None)
        if summarize is not None:
            qs = list(self.quantiles) if self.quantiles is not None else None
            return summarize(times, qs, self.return_mode)
        return _summarize(times, self.quantiles, self.return_mode)

    def not_measured(self) -> Any:
        """NaN in the shape the script expects: it still runs, and a NaN in its output says
        plainly that no time was measured."""
        if self.quantiles is not None:
            qs = list(self.quantiles)
            return math.nan if len(qs) == 1 else [math.nan] * len(qs)
        return [] if self.return_mode == "all" else math.nan


def _summarize(times: list[float], quantiles: Sequence[float] | None, mode: str) -> Any:
    """Triton 3.6's ``_summarize_statistics`` for a Triton without it (linear quantiles)."""
    import statistics

    import numpy as np

    if quantiles is not None:
        out = [float(x) for x in np.quantile(np.asarray(times), list(quantiles))]
        return out[0] if len(out) == 1 else out
    return {
        "all": lambda: times,
        "min": lambda: min(times),
        "max": lambda: max(times),
        "median": lambda: statistics.median(times),
    }.get(mode, lambda: statistics.mean(times))()


def _testing() -> Any:
    import triton.testing

    return triton.testing


# --------------------------------------------------------------------------------------------
# names


def launch_label(spec: LaunchSpec) -> str:
    """``bf16:2048x4096``: the dtype and shape of the launch's first tensor argument (what
    tells one point of a sweep from the next); the kernel's name when it has no tensor."""
    for arg in spec.args:
        if arg.kind == "tensor" and arg.name in spec.shapes:
            shape = "x".join(str(d) for d in spec.shapes[arg.name]) or "scalar"
            return f"{(arg.dtype or '?').lstrip('*')}:{shape}"
    return spec.kernel


def call_site(frame: FrameType) -> tuple[str, str, int]:
    """(site, file, line) of the frame that called do_bench."""
    code = frame.f_code
    file, line = code.co_filename, frame.f_lineno
    func = getattr(code, "co_qualname", code.co_name).replace(".<locals>", "")
    stem = os.path.splitext(os.path.basename(file))[0]
    rank = _call_rank(file, code.co_firstlineno, line, func == "<module>")
    where = f"#{rank}" if rank else f"#L{line}"
    return f"{stem}.{func}{where}", file, line


def _call_rank(file: str, first_line: int, line: int, module_level: bool) -> int | None:
    """1-based rank of the do_bench call on ``line`` among those written in the function that
    starts at ``first_line`` (the module's top level when ``module_level``); None when the
    source cannot be read or the call is not found."""
    calls = _do_bench_calls(file)
    if calls is None:
        return None
    scope = 0 if module_level else first_line
    lines = sorted(c for c in calls.get(scope, []))
    for i, (start, end) in enumerate(lines, 1):
        if start <= line <= end:
            return i
    return None


@functools.lru_cache(maxsize=256)
def _do_bench_calls(file: str) -> dict[int, list[tuple[int, int]]] | None:
    """Per function (keyed by its first line, decorators included; 0 = module level), the line
    spans of the do_bench calls written directly in it (nested functions are their own)."""
    try:
        with open(file, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=file)
    except (OSError, SyntaxError, ValueError):
        return None
    out: dict[int, list[tuple[int, int]]] = {}

    def visit(node: ast.AST, scope: int) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                # each function (a lambda too) calls do_bench from its own frame
                visit(child, min([child.lineno] + [d.lineno for d in getattr(child, "decorator_list", [])]))
                continue
            if isinstance(child, ast.Call) and _called_name(child.func) in INTERCEPTED:
                out.setdefault(scope, []).append((child.lineno, child.end_lineno or child.lineno))
            visit(child, scope)

    visit(tree, 0)
    return out


def _called_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


# --------------------------------------------------------------------------------------------
# interception


class _State(threading.local):
    inside: int = 0  # depth of intercepted do_bench calls on this thread


_STATE = _State()


def _from_triton(frame: FrameType | None) -> bool:
    name = frame.f_globals.get("__name__", "") if frame is not None else ""
    return name == "triton" or name.startswith("triton.")


@contextlib.contextmanager
def intercept(handler: Callable[[BenchCall], Any]) -> Iterator[EventCount]:
    """Route the script's do_bench / do_bench_cudagraph calls to ``handler`` while active.
    Yields the count of ``torch.cuda.Event.elapsed_time`` calls made outside them."""
    testing = _testing()
    originals = {name: getattr(testing, name) for name in INTERCEPTED}
    events = EventCount()

    def make(name: str) -> Callable[..., Any]:
        original = originals[name]
        default_warmup, default_rep = DEFAULTS[name]

        @functools.wraps(original)
        def patched(fn: Callable[[], Any], *args: Any, **kwargs: Any) -> Any:
            caller = sys._getframe(1)
            if _from_triton(caller):
                return original(fn, *args, **kwargs)
            bound = _bind(name, args, kwargs)
            site, file, line = call_site(caller)
            call = BenchCall(
                function=name,
                fn=fn,
                site=site,
                file=file,
                line=line,
                warmup_ms=float(bound.get("warmup", default_warmup)),
                rep_ms=float(bound.get("rep", default_rep)),
                grad_to_none=bound.get("grad_to_none"),
                quantiles=bound.get("quantiles"),
                return_mode=bound.get("return_mode", "mean"),
                original=original,
            )
            if _STATE.inside:
                # a do_bench inside the function another do_bench call measures: Triton's own would
                # time it on a device static mode does not have, inside kperf's measurement; its
                # function runs once (its launches belong to the outer call) and it answers NaN
                events.nested.add(site)
                call.call()()
                return call.not_measured()
            _STATE.inside += 1
            try:
                return handler(call)
            finally:
                _STATE.inside -= 1

        return patched

    patched = {name: make(name) for name in INTERCEPTED}
    events.replaced = lambda: [n for n, f in patched.items() if getattr(testing, n, None) is not f]
    for name, f in patched.items():
        setattr(testing, name, f)
    try:
        with events.counting():
            yield events
    finally:
        for name, original in originals.items():
            setattr(testing, name, original)


def _bind(name: str, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
    """do_bench's positional arguments after ``fn``, by name (Triton 3.6's order)."""
    order = ("warmup", "rep", "grad_to_none", "quantiles", "return_mode")
    if name == "do_bench_cudagraph":
        order = ("rep", "grad_to_none", "quantiles", "return_mode")
    bound = dict(zip(order, args, strict=False))
    bound.update(kwargs)
    return {k: v for k, v in bound.items() if v is not None or k == "quantiles"}


class EventCount:
    """``torch.cuda.Event.elapsed_time`` calls outside intercepted do_bench calls and outside
    kperf's own timing: a script that times with its own event loop, which kperf cannot see."""

    def __init__(self) -> None:
        self.outside = 0
        self.nested: set[str] = set()  # sites of do_bench calls inside another's function (run once)
        #: the intercepted names the script replaced with functions of its own meanwhile
        self.replaced: Callable[[], list[str]] = list

    @contextlib.contextmanager
    def counting(self) -> Iterator[None]:
        try:
            import torch
        except ImportError:
            yield
            return
        cls = torch.cuda.Event
        original = cls.elapsed_time

        def elapsed_time(event: Any, end_event: Any) -> Any:
            if not _STATE.inside and not _from_kperf(sys._getframe(1)):
                self.outside += 1
            return original(event, end_event)

        cls.elapsed_time = elapsed_time
        try:
            yield
        finally:
            cls.elapsed_time = original


def _from_kperf(frame: FrameType | None) -> bool:
    name = frame.f_globals.get("__name__", "") if frame is not None else ""
    return name.startswith("kperf_ci.") or _from_triton(frame)
