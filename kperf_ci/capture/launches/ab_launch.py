"""Kernel-replay A/B (`kperf ab` on tests that never call ``kperf.bench``): each changed launch a
test makes, timed against the base revision's own launch of the same kernel.

The static passes of `kperf ab` record every launch of every test in both trees (the launch
manifests, :mod:`kperf_ci.capture.static.manifest`) and pair them
(:func:`kperf_ci.judge.launch_diff.diff_tests`).
:func:`plan_from_tests` turns those pairs into the *plan* the timing pass reads (a JSON file):
per test, each head launch with its base counterpart. In the timing pass the head test runs on the
GPU, its launches are copied for replay (:mod:`kperf_ci.capture.launches.replay`), and each copied launch
is found in the plan (:meth:`ABPlan.entry_for`). :func:`base_call` then builds the base side: the
base tree's version of the kernel making the same call (the caller's constexprs, scalar
arguments and options as the base recorded them), on the *same* argument copies as the head (so
placement and alignment cannot differ between the sides). A decorated base kernel is launched
through its own decorators: ``@triton.heuristics`` computes the base's values and an autotuner
picks the base's config, as they would in production; what they set is never passed.

A tensor argument whose dtype or shape differs between the trees cannot be shared: a float one
gets the base a fresh buffer of its own (said in the row), any other leaves the launch not timed,
with the reason (its static changes stand). What the timing pass says of launches it did not time
goes to :func:`results_path` beside the plan, for `kperf ab` to report.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kperf_ci.capture.launches.base_tree import load_base_callable
from kperf_ci.capture.launches.best_config import Side, config_text
from kperf_ci.capture.static.describe import _unwrap, decorator_names, kernel_object, make_launch_spec
from kperf_ci.capture.static.manifest import launch_args
from kperf_ci.error_text import error_text
from kperf_ci.launch_calls import call_key

PLAN_VERSION = 1


def results_path(plan: str | os.PathLike[str]) -> str:
    """Where the timing pass appends its A/B outcomes (JSON lines, one per launch; xdist workers
    append to the same file), beside the plan."""
    return os.fspath(plan) + ".results.jsonl"


def _qualname(site: str) -> str:
    return site.rsplit("::", 1)[-1]


@dataclass
class PlanEntry:
    """One head launch of a test and the base launch it is timed against."""

    test: str
    site: str  # "path::qualname" of the kernel, relative to the repository
    status: str  # identical | changed | added
    changes: list[str] = field(default_factory=list)
    head: dict[str, Any] = field(default_factory=dict)  # manifest row
    base: dict[str, Any] | None = None  # manifest row; None for a kernel new in head

    @property
    def qualname(self) -> str:
        return _qualname(self.site)

    def to_dict(self) -> dict[str, Any]:
        return {
            "test": self.test,
            "site": self.site,
            "status": self.status,
            "changes": self.changes,
            "head": self.head,
            "base": self.base,
        }


@dataclass
class ABPlan:
    """Per test, its head launches paired with the base's; read by the timing pass."""

    entries: dict[str, list[PlanEntry]] = field(default_factory=dict)
    time_all: bool = False  # --time-all: unchanged launches are timed too (an A/A check)

    def tests(self) -> list[str]:
        return sorted(self.entries)

    def changed_sites(self, test: str) -> set[str]:
        return {e.qualname for e in self.entries.get(test, []) if e.status != "identical"}

    def entry_for(self, test: str, launch_spec: Any) -> PlanEntry | None:
        """The plan entry of a replayed head launch (described as a LaunchSpec), or None when
        the static pass did not record it. Matched by the call (:func:`call_key`): the values
        the kernel's decorators set, and so the autotuner's pick in this run, do not count."""
        row = {
            "args": launch_args(launch_spec),
            "options": dict(launch_spec.options),
            "grid": list(launch_spec.grid),
        }
        for e in self.entries.get(test, []):
            if e.qualname != launch_spec.qualname:
                continue
            by_kernel = {"site": e.site, "tuned": e.head.get("tuned"), "derived": e.head.get("derived")}
            if call_key({**row, **by_kernel}) == call_key(e.head):
                return e
        return None

    def to_json(self) -> str:
        return json.dumps(
            {
                "version": PLAN_VERSION,
                "time_all": self.time_all,
                "tests": {t: [e.to_dict() for e in es] for t, es in self.entries.items()},
            },
            sort_keys=True,
            default=str,
        )

    def write(self, path: str | os.PathLike[str]) -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.to_json())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ABPlan:
        """The plan `kperf ab` wrote. Anything else (missing, binary, not JSON, the wrong
        shape, too deep or too large) raises :class:`PlanError`, one line naming the file."""
        doc = _read_plan(path)
        tests = doc.get("tests") or {}
        if not isinstance(tests, dict):
            raise PlanError(f"{path}: not an A/B plan ('tests' is not an object)")
        out = cls(time_all=doc.get("time_all") is True)
        for test, rows in tests.items():
            if not isinstance(rows, list):
                raise PlanError(f"{path}: not an A/B plan (the launches of a test are not a list)")
            out.entries[str(test)] = [_plan_entry(path, str(test), r) for r in rows if isinstance(r, dict)]
        return out


#: a plan of a very large suite is megabytes; more than this is no plan kperf ab wrote
MAX_PLAN_BYTES = 256 << 20


class PlanError(ValueError):
    """``--kperf-ab-plan`` names no A/B plan: one line, file and problem."""


def _read_plan(path: str | os.PathLike[str]) -> dict[str, Any]:
    # only a regular file is opened: a FIFO's open() waits for a writer that never comes (the run
    # hung); checked before the open, and again on the descriptor, opened non-blocking, in case
    # the path was swapped in between
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise PlanError(f"{path}: not a regular file (a FIFO, a device or a directory)")
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with open(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise PlanError(f"{path}: not a regular file (a FIFO, a device or a directory)")
            raw = f.read(MAX_PLAN_BYTES + 1)
    except OSError as e:
        raise PlanError(f"{path}: cannot be read ({e.strerror or type(e).__name__})") from None
    if len(raw) > MAX_PLAN_BYTES:
        raise PlanError(f"{path}: over {MAX_PLAN_BYTES >> 20} MiB, not an A/B plan kperf ab wrote")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise PlanError(f"{path}: not an A/B plan (not JSON text: {type(e).__name__})") from None
    if not isinstance(doc, dict) or doc.get("version") != PLAN_VERSION:
        raise PlanError(f"{path}: not an A/B plan of version {PLAN_VERSION}")
    return doc


def _plan_entry(path: str | os.PathLike[str], test: str, r: dict[str, Any]) -> PlanEntry:
    head, base, changes = r.get("head") or {}, r.get("base"), r.get("changes") or []
    if not isinstance(head, dict) or not (base is None or isinstance(base, dict)):
        raise PlanError(f"{path}: not an A/B plan (a launch's head or base is not an object)")
    if not isinstance(changes, list):
        raise PlanError(f"{path}: not an A/B plan (a launch's changes are not a list)")
    return PlanEntry(
        test=test,
        site=str(r.get("site")),
        status=str(r.get("status")),
        changes=[str(c) for c in changes],
        head=dict(head),
        base=base,
    )


def plan_from_tests(tests: list[Any], *, time_all: bool = False) -> ABPlan:
    """The plan of the tests to time, from the static passes' per-test diffs
    (:class:`kperf_ci.judge.launch_diff.TestDiff`): every head launch of a changed test (of every
    test with ``time_all``), with its paired base launch."""
    plan = ABPlan(time_all=time_all)
    for t in tests:
        if t.status not in ("changed", "added") and not (time_all and t.status == "identical"):
            continue
        rows = [
            PlanEntry(t.test, lc.site, lc.status, list(lc.changes), dict(lc.head), lc.base)
            for lc in t.launches
            if lc.head is not None
        ]
        if rows:
            plan.entries[t.test] = rows
    return plan


# --------------------------------------------------------------------------------------------
# the base side of one launch


def _inner_jit(obj: Any) -> Any:
    """The JITFunction under Autotuner / Heuristics wrappers."""
    inner, _ = _unwrap(obj)
    return inner


def _bound(jit_fn: Any, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
    names = list(getattr(_inner_jit(jit_fn), "arg_names", []) or [])
    bound = dict(zip(names, args, strict=False))
    bound.update({k: v for k, v in kwargs.items() if k in names})
    return bound


def describe_launch(launch: Any) -> Any:
    """The LaunchSpec of a replayed launch (as the static pass describes its launches)."""
    return make_launch_spec(launch.jit_fn, tuple(launch.args), dict(launch.kwargs), launch.grid)


def base_call(launch: Any, entry: PlanEntry, base_tree: str) -> tuple[Callable[[], Any] | None, str | None]:
    """(a zero-argument launch of the base version, a note or None) or (None, why it cannot be
    built). The note says which arguments the base got of its own.

    The base makes the same call as the head: the caller's arguments (the head's copies where
    both sides pass the same, the base's own recorded values where its caller passed others).
    A decorated base kernel is called through its own decorators (``@triton.heuristics``,
    ``@triton.autotune``, both stacked), which set their values themselves: passing a value a
    heuristic computes on top of it fails ("got multiple values for argument").

    ``launch`` is the head's :class:`~kperf_ci.capture.launches.replay.CapturedLaunch` (its argument
    copies are shared with the base side)."""
    if entry.base is None:
        return None, "kernel launched in head only: no base launch to time against"
    try:
        base_obj = load_base_callable(launch.jit_fn, None, base_tree)
    except Exception as e:  # the base tree's module does not import
        return None, f"the base version failed to import: {error_text(e)}"
    if base_obj is None:
        return None, "no base version of the kernel in the base tree"
    head_bound = _bound(launch.jit_fn, tuple(launch.args), dict(launch.kwargs))
    base_jit = _inner_jit(base_obj)
    names = list(getattr(base_jit, "arg_names", []) or [])
    tuned, derived = decorator_names(base_obj)
    by_kernel = set(tuned) | set(derived)  # the base's decorators set these: never passed
    values: dict[str, Any] = {}
    own: list[str] = []
    for name in names:
        if name in by_kernel:
            continue
        value, why = _caller_value(name, head_bound, entry.head.get("args") or {}, entry.base, own)
        if why is not None:
            return None, why
        values[name] = value
    note = f"base timed on its own arguments: {'; '.join(own)}" if own else None
    # the caller's launch options; those the base's decorators set are theirs
    options = {k: v for k, v in (entry.base.get("options") or {}).items() if k not in by_kernel}
    recorded = tuple(int(g) for g in entry.base.get("grid") or ())
    if tuned and launch.grid is not None and callable(launch.grid):
        grid: Any = launch.grid  # a callable of the meta-parameters the autotuner's pick sets
    elif recorded:
        grid = recorded  # the base's own grid at this call (its heuristic values included)
    else:
        return None, "the base launch's grid was not recorded; not timed"
    call = caller_side(base_obj, names, by_kernel, values, options, grid)
    if tuned:  # after a first call: the config the base's own autotuner picked
        call.pick = lambda: autotuner_pick(base_obj)  # type: ignore[attr-defined]
    return call, note


def caller_side(
    obj: Any,
    names: list[str],
    by_kernel: set[str],
    values: dict[str, Any],
    options: dict[str, Any],
    grid: Any,
) -> Side:
    """The launch of ``obj`` (the outermost kernel object) as its caller makes it: positional up
    to the first parameter a decorator sets, as callers pass them, the rest and the caller's
    options by keyword; what the decorators set is never passed."""
    if not by_kernel:
        return Side(_inner_jit(obj), [values[n] for n in names], dict(options), grid)
    values = dict(values)
    positional: list[Any] = []
    keyword: dict[str, Any] = dict(options)
    for name in names:
        if name in by_kernel:
            break
        positional.append(values.pop(name))
    keyword.update(values)
    return Side(obj, positional, keyword, grid)


def head_side(launch: Any, entry: PlanEntry) -> Side | None:
    """The head's launch through its own decorators, on the head's argument copies (for the
    best-of-configs search of an autotuned call), or None when the decorated object cannot be
    found in the kernel's module."""
    jit = launch.jit_fn
    fn = getattr(jit, "fn", None)
    obj = kernel_object(fn)  # the module-level name of the kernel, as the static pass finds it
    if obj is None:  # else an object under another name that wraps this kernel
        module = sys.modules.get(getattr(fn, "__module__", "") or "")
        obj = next((v for v in vars(module).values() if _wraps(v, jit)), None) if module else None
    if obj is None:
        return None
    bound = _bound(jit, tuple(launch.args), dict(launch.kwargs))
    tuned, derived = decorator_names(obj)
    by_kernel = set(tuned) | set(derived)
    names = [n for n in getattr(jit, "arg_names", []) or [] if n in bound]
    values = {n: bound[n] for n in names if n not in by_kernel}
    options = {k: v for k, v in launch.kwargs.items() if k not in bound and k not in by_kernel}
    return caller_side(obj, names, by_kernel, values, options, launch.grid)


def _wraps(obj: Any, jit: Any) -> bool:
    try:
        return obj is not jit and hasattr(obj, "fn") and _inner_jit(obj) is jit
    except Exception:
        return False


def autotuner_pick(obj: Any) -> str | None:
    """The config the autotuner in ``obj``'s decorator chain picked at its last launch
    ("BLOCK=64,num_warps=1"), None before any or without an autotuner."""
    from triton.runtime.autotuner import Autotuner

    for _ in range(16):
        if isinstance(obj, Autotuner):
            best = getattr(obj, "best_config", None)
            return config_text(best.all_kwargs()) if best is not None else None
        obj = getattr(obj, "fn", None)
        if obj is None:
            break
    return None


def head_pick(launch: Any, entry: PlanEntry) -> str | None:
    """The config the head's autotuner picked for a replayed launch (the values its configs set,
    as the launch got them), None for a kernel without an autotuner."""
    tuned = set(entry.head.get("tuned") or ())
    if not tuned:
        return None
    given = {**_bound(launch.jit_fn, tuple(launch.args), dict(launch.kwargs)), **dict(launch.kwargs)}
    return config_text({k: v for k, v in given.items() if k in tuned})


def _caller_value(
    name: str, head_bound: dict[str, Any], head_text: dict[str, Any], base: dict[str, Any], own: list[str]
) -> tuple[Any, str | None]:
    """(the value the base's caller passes for ``name``, None) or (None, why it has none)."""
    base_text = base.get("args") or {}
    base_values = base.get("values") or {}
    if name in head_bound and head_text.get(name) == base_text.get(name):
        return head_bound[name], None  # same value or same dtype[shape]: the head's copy
    if name in base_values:
        return base_values[name], None  # a scalar or constexpr the base's caller passed
    if (fresh := own_tensor(base_text.get(name), head_bound.get(name))) is not None:
        own.append(f"{name} {base_text.get(name)} (head {head_text.get(name, '-')})")
        return fresh, None  # a float tensor of another shape: the base gets its own
    if name in head_bound:
        return None, (
            f"argument {name} is {base_text.get(name, '?')} in base and {head_text.get(name, '?')} "
            "in head: the sides cannot share arguments; not timed"
        )
    return None, f"argument {name} of the base kernel has no recorded value; not timed"


#: Triton dtype names of the floating tensors a base side may get fresh (random values are valid
#: data for them; an integer tensor may hold indices, which random values would send out of bounds)
FLOAT_DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "fp64": "float64"}


def own_tensor(base_text: Any, head_value: Any) -> Any:
    """A fresh random tensor of the base's ``dtype[shape]`` (e.g. a scratch buffer sized by the
    grid) on the head argument's device, or None when the argument is not a float tensor."""
    if not isinstance(base_text, str) or "[" not in base_text or not hasattr(head_value, "device"):
        return None
    dtype, _, dims = base_text.partition("[")
    if dtype not in FLOAT_DTYPES:
        return None
    try:
        shape = [int(d) for d in dims.rstrip("]").split("x") if d]
    except ValueError:
        return None
    import torch

    return torch.randn(shape, dtype=getattr(torch, FLOAT_DTYPES[dtype]), device=head_value.device)
