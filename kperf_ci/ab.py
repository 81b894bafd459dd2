"""Same-job A/B against a base revision: check out the base, load its kernels next to the head's,
and time them interleaved until the verdict is certain.

Comparing with a number stored earlier is a sequential comparison, biased by whatever changed
between the two runs (clocks, thermals, the order of measurement); on compute-bound kernels that
bias reaches several percent.  Interleaving base and head call by call in one process, with the
order alternating, cancels it: each pair of calls shares the machine's state, and the verdict is
taken on the pairs (``compare_samples(paired=True)``).

* :func:`materialize` checks a revision out into a temporary git worktree (removed afterwards);
* :func:`load_base_callable` imports the base tree's copy of the module that defines a callable
  under an alias module name and returns the object of the same qualified name;
* :func:`adaptive_ab` times base and head interleaved in rounds of pairs (AB, BA, AB, ...),
  computes the paired comparison after each round and stops as soon as the verdict is not
  ``inconclusive`` or the budget is spent.  The device sits behind
  :class:`kperf_ci.capture.timing.DeviceBackend`, so tests run it on a fake clock; warm-up,
  the choice of CUDA-graph replay, the L2-flush rule and the re-warm count come from
  ``capture.timing``'s public building blocks (``Variant``, ``warmup``, ``choose_method``,
  ``should_flush``, ``rewarm_calls``), so A/B and ordinary timing prepare a kernel alike.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import math
import os
import shutil
import subprocess
import sys
import tempfile
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from kperf_ci.metrics import MOVED_METRICS, metric, unit_of
from kperf_ci.model import Metric, VariantKey, VariantResult
from kperf_ci.stats import SampleComparison, compare_samples
from kperf_ci.units import fmt_value

# --------------------------------------------------------------------------------------------
# the base tree


class ABError(Exception):
    """A user-facing problem (bad revision, not a git repository); one line, no traceback."""


def _git(repo: Path, *args: str) -> str:
    try:
        out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True)
    except FileNotFoundError as e:
        raise ABError("git is not installed") from e
    except subprocess.CalledProcessError as e:
        msg = (e.stderr or e.stdout or "").strip().splitlines()
        raise ABError(f"git {' '.join(args)} failed: {msg[-1] if msg else e.returncode}") from e
    return out.stdout.strip()


def repo_root(path: str | os.PathLike[str] = ".") -> Path:
    try:
        return Path(_git(Path(path), "rev-parse", "--show-toplevel"))
    except ABError as e:
        if "git is not installed" in str(e):
            raise
        raise ABError(
            f"{Path(path).resolve()} is not inside a git repository; run kperf ab from the repository "
            "whose pull request you check"
        ) from None


def resolve_rev(rev: str, repo: str | os.PathLike[str] = ".") -> str:
    """Full commit sha of ``rev`` (branch, tag, sha, ``HEAD~1`` ...)."""
    try:
        return _git(Path(repo), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except ABError:
        shallow = _git(Path(repo), "rev-parse", "--is-shallow-repository") == "true"
        hint = (
            "this clone is shallow: fetch the base (e.g. `git fetch --deepen=1` or `git fetch origin main`; "
            "in GitHub Actions `actions/checkout` with `fetch-depth: 0`)"
            if shallow
            else "fetch it first (e.g. `git fetch origin main`) or name a branch, tag or sha that exists here"
        )
        raise ABError(f"base revision {rev!r} is not a commit in this repository; {hint}") from None


@contextmanager
def materialize(rev: str, repo: str | os.PathLike[str] = ".") -> Iterator[Path]:
    """Check ``rev`` out into a temporary detached worktree; yields its root, removes it after.

    ``with materialize("origin/main") as base_root: ...``.  Uncommitted changes of the working
    copy are not in it (it is the revision as committed).
    """
    root = repo_root(repo)
    sha = resolve_rev(rev, root)
    tmp = Path(tempfile.mkdtemp(prefix="kperf-base-"))
    path = tmp / "tree"
    _git(root, "worktree", "add", "--detach", "--quiet", str(path), sha)
    try:
        yield path
    finally:
        try:
            _git(root, "worktree", "remove", "--force", str(path))
        except ABError:
            pass
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            _git(root, "worktree", "prune")
        except ABError:
            pass


# --------------------------------------------------------------------------------------------
# loading the base version of a callable


def _defining_function(obj: Any) -> Any:
    """The plain Python function under Triton wrappers (JITFunction, Autotuner, Heuristics)."""
    seen = 0
    while not inspect.isfunction(obj) and hasattr(obj, "fn") and seen < 10:
        obj = obj.fn
        seen += 1
    return obj if inspect.isfunction(obj) else None


def _alias_module(base_file: Path, modname: str, base_root: Path) -> types.ModuleType:
    """Import ``base_file`` as ``_kperf_base_<hash>.<modname>``.

    Parent packages are created empty, with ``__path__`` pointing into the base tree, so relative
    imports (``from .utils import x``) resolve to the base tree's files too.  Absolute imports of
    the project's own modules still resolve to the head's (they are already imported).
    """
    prefix = "_kperf_base_" + hashlib.sha256(str(base_root.resolve()).encode()).hexdigest()[:10]
    alias = f"{prefix}.{modname}"
    if alias in sys.modules:
        return sys.modules[alias]
    parts = modname.split(".")
    # the directory that plays the role of each package level, from the file upwards
    dirs = [base_file.parent]
    for _ in parts[:-1]:
        dirs.append(dirs[-1].parent)
    pkg_names = [prefix] + [f"{prefix}.{'.'.join(parts[: i + 1])}" for i in range(len(parts) - 1)]
    pkg_dirs = list(reversed(dirs))  # prefix <-> the top directory, then one level down each
    for name, d in zip(pkg_names, pkg_dirs, strict=True):
        if name not in sys.modules:
            pkg = types.ModuleType(name)
            pkg.__path__ = [str(d)]
            pkg.__package__ = name
            sys.modules[name] = pkg
    spec = importlib.util.spec_from_file_location(alias, base_file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {base_file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[alias] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(alias, None)
        raise
    return module


def _git_toplevel(directory: Path) -> Path | None:
    try:
        return repo_root(directory)
    except ABError:
        return None


def load_base_callable(
    fn: Any, head_root: str | os.PathLike[str] | None, base_root: str | os.PathLike[str]
) -> Any:
    """The base tree's version of ``fn``, or None when it has none.

    ``fn`` is a Python function, a Triton kernel (JITFunction, Autotuner, Heuristics) or a
    ``functools.partial`` of one, defined at module level in a file under ``head_root``.  The
    file at the same relative path under ``base_root`` is imported under an alias module name
    and the object of the same qualified name is returned (for a partial, re-wrapped with the
    same arguments).  ``head_root=None``: the git work tree that holds the defining file (pytest's
    rootdir is not always the repository root: without a pytest config of its own it lands above
    it).  None when: the file or the name is absent in the base tree, ``fn`` is a
    lambda/closure (no importable name), or it is defined outside ``head_root``.  An import
    error in the base file propagates: the base tree is broken, which the caller should report.
    """
    if isinstance(fn, partial):
        base = load_base_callable(fn.func, head_root, base_root)
        return None if base is None else partial(base, *fn.args, **fn.keywords)
    target = _defining_function(fn)
    if target is None:
        return None
    qualname = target.__qualname__
    if "<locals>" in qualname or "<lambda>" in qualname:
        return None
    module = sys.modules.get(target.__module__)
    src = getattr(module, "__file__", None) or inspect.getsourcefile(target)
    if not src:
        return None
    if head_root is None:
        head_root = _git_toplevel(Path(src).resolve().parent)
        if head_root is None:
            return None
    head_root, base_root = Path(head_root).resolve(), Path(base_root).resolve()
    try:
        rel = Path(src).resolve().relative_to(head_root)
    except ValueError:
        return None
    base_file = base_root / rel
    if not base_file.is_file():
        return None
    module_name = target.__module__ if target.__module__ != "__main__" else rel.stem
    base_mod = _alias_module(base_file, module_name, base_root)
    obj: Any = base_mod
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


# --------------------------------------------------------------------------------------------
# interleaved, adaptive timing


@dataclass
class ABResult:
    verdict: str  # faster | slower | unchanged | inconclusive (head relative to base)
    ratio: float  # head / base
    ci_low: float
    ci_high: float
    rel: float
    n_pairs: int
    rounds: int
    seconds: float  # host seconds spent measuring (warm-up excluded)
    warmup_seconds: float
    stopped_by: str  # "certain" | "budget" | "max_pairs"
    threshold: float
    comparison: SampleComparison
    method: str = "events"  # "events" or "graph" (CUDA-graph replay, both sides alike)
    base_ms: list[float] = field(default_factory=list)
    head_ms: list[float] = field(default_factory=list)
    head_first: list[bool] = field(default_factory=list)  # per pair: head was called first
    warnings: list[str] = field(default_factory=list)
    # region metrics of the base version's instrumented launch, per kernel name (the head's are
    # stored as the variant's own region.* metrics): "what moved" inside the kernel
    base_regions: dict[str, dict[str, float]] = field(default_factory=dict)

    def describe(self) -> str:
        return (
            f"{self.comparison.describe()}; {self.n_pairs} pairs in {self.rounds} rounds, "
            f"{self.seconds:.2f} s, stopped: {self.stopped_by}"
        )

    def to_metrics(self) -> list[Metric]:
        """``ab.*`` metrics (kind "analysis") so an A/B outcome can be stored with the head run."""
        vals = [
            ("ab.ratio", self.ratio),
            ("ab.ci_low", self.ci_low),
            ("ab.ci_high", self.ci_high),
            ("ab.pairs", self.n_pairs),
            ("ab.seconds", self.seconds),
            ("ab.threshold", self.threshold),
        ]
        return [metric(name, value) for name, value in vals]  # unit, kind, direction: the catalogue

    @property
    def tag(self) -> str:
        """``ab:<verdict>``, the tag stored on the head variant."""
        return f"ab:{self.verdict}"


def balanced_blocks(base_ms: list[float], head_ms: list[float]) -> tuple[list[float], list[float]]:
    """Geometric means of consecutive pairs (AB then BA): one order-balanced block per two pairs.

    A systematic first-call/second-call effect cancels inside each block, so the blocks are
    centred on the true ratio and the signed-rank interval's symmetry assumption holds.
    """
    n = len(base_ms) // 2 * 2
    b = [math.sqrt(base_ms[i] * base_ms[i + 1]) for i in range(0, n, 2)]
    h = [math.sqrt(head_ms[i] * head_ms[i + 1]) for i in range(0, n, 2)]
    return b, h


def adaptive_ab(
    base_fn: Callable[[], Any],
    head_fn: Callable[[], Any],
    *,
    threshold: float,
    backend: Any = None,
    budget_s: float = 2.0,
    floor: float = 0.0,
    confidence: float = 0.99,
    precision: float = 0.005,
    first_round_pairs: int = 20,
    growth: float = 1.5,
    max_pairs: int = 4000,
    cfg: Any = None,
    seed: int = 0,
) -> ABResult:
    """Time ``base_fn()`` and ``head_fn()`` interleaved until the verdict is certain.

    Round r times an even number of pairs, each pair one call of each side back to back, the
    order alternating pair by pair (AB, BA, ...).  Before every call the L2 is flushed (enqueued
    before the start marker, as ``capture.timing`` does).  After each round the pairs are folded
    into order-balanced blocks and compared with ``compare_samples(paired=True)``; the loop stops
    when the verdict is not ``inconclusive`` and the interval's half-width is at most ``precision``
    (0.005: the reported effect is good to about +-0.5% at the given confidence) ("certain"), when
    the host time spent measuring reaches
    ``budget_s`` ("budget"), or ``max_pairs`` is reached.  Rounds grow by ``growth`` so that the
    number of looks stays small (about 10 within a 2 s budget), and are cut to what the remaining
    budget allows at the pace measured so far.

    ``backend``: a :class:`kperf_ci.capture.timing.DeviceBackend` (default: CUDA on the current
    device); warm-up and the choice of CUDA-graph replay for short kernels follow ``cfg``
    (a ``TimingConfig``), with the same method forced on both sides.
    """
    from kperf_ci.capture import timing

    cfg = cfg or timing.TimingConfig()
    be = backend if backend is not None else timing.default_backend()
    flush = timing.should_flush(cfg, be)
    sides = {"base": timing.Variant("base", base_fn), "head": timing.Variant("head", head_fn)}
    warnings: list[str] = []

    t_warm = be.host_time()
    for v in sides.values():
        timing.warmup(v, be, cfg, flush)
    for v in sides.values():
        timing.choose_method(v, be, cfg)
    if sides["base"].method != sides["head"].method:  # never compare a graph replay with plain calls
        for name, fn in (("base", base_fn), ("head", head_fn)):
            sides[name].calls, sides[name].k, sides[name].method = [fn], 0, "events"
        warnings.append("CUDA-graph replay worked on one side only: both timed with plain events")
    for v in sides.values():
        warnings.extend(f"{v.name}: {w}" for w in v.warnings)
    warmup_s = be.host_time() - t_warm
    # Untimed calls at the start of every round: after the host-side check between rounds the
    # device has idled, and the first call after an idle gap runs slow (capture.timing's re-warm).
    rewarm = {name: timing.rewarm_calls(v, cfg) for name, v in sides.items()}

    base_ms: list[float] = []
    head_ms: list[float] = []
    head_first: list[bool] = []
    t0 = be.host_time()
    rounds = 0
    size = max(2, first_round_pairs // 2 * 2)
    comparison: SampleComparison | None = None
    stopped_by = "max_pairs"
    while len(base_ms) < max_pairs:
        n = min(size, max_pairs - len(base_ms))
        n = max(2, n // 2 * 2)
        marks = []
        for name in ("base", "head") if len(base_ms) % 4 == 0 else ("head", "base"):
            for _ in range(rewarm[name]):
                if flush:
                    be.flush()
                sides[name].next_call()()
        for k in range(n):
            hf = (len(base_ms) + k) % 2 == 1
            order = ("head", "base") if hf else ("base", "head")
            pair = {}
            for name in order:
                call = sides[name].next_call()
                if flush:
                    be.flush()
                a = be.marker()
                call()
                b = be.marker()
                pair[name] = (a, b)
            marks.append((pair, hf))
        be.synchronize()
        for pair, hf in marks:
            base_ms.append(be.elapsed_ms(*pair["base"]))
            head_ms.append(be.elapsed_ms(*pair["head"]))
            head_first.append(hf)
        rounds += 1
        b_blocks, h_blocks = balanced_blocks(base_ms, head_ms)
        comparison = compare_samples(
            b_blocks,
            h_blocks,
            threshold=threshold,
            floor=floor,
            paired=True,
            confidence=confidence,
            seed=seed,
        )
        half_width = (comparison.ci_high - comparison.ci_low) / 2  # NaN (too few pairs) compares False
        if comparison.verdict != "inconclusive" and half_width <= precision:
            stopped_by = "certain"
            break
        spent = be.host_time() - t0
        if spent >= budget_s:
            stopped_by = "budget"
            break
        size = int(math.ceil(size * growth))
        if spent > 0:  # never plan a round that would overrun the budget by much
            size = min(size, int((budget_s - spent) / (spent / len(base_ms))) + 2)
    assert comparison is not None
    return ABResult(
        verdict=comparison.verdict,
        ratio=comparison.ratio,
        ci_low=comparison.ci_low,
        ci_high=comparison.ci_high,
        rel=comparison.rel,
        n_pairs=len(base_ms),
        rounds=rounds,
        seconds=be.host_time() - t0,
        warmup_seconds=warmup_s,
        stopped_by=stopped_by,
        threshold=comparison.threshold,
        comparison=comparison,
        method=sides["head"].method,
        base_ms=base_ms,
        head_ms=head_ms,
        head_first=head_first,
        warnings=warnings,
    )


# --------------------------------------------------------------------------------------------
# static pass: which variants compile to the same code on both sides


@dataclass
class StaticDiff:
    """Variants matched across base and head by ``VariantKey.id`` (kernel, arch, spec, config)."""

    identical: list[VariantResult] = field(default_factory=list)  # head results, same SASS as base
    changed: list[VariantResult] = field(default_factory=list)  # head results, SASS differs
    added: list[VariantResult] = field(default_factory=list)  # only in head
    removed: list[VariantResult] = field(default_factory=list)  # only in base (base results)
    unknown: list[VariantResult] = field(default_factory=list)  # no SASS hash on a side (error)

    def tests(self, which: str) -> list[str]:
        """Head test ids: "identical" = every variant of the test identical; "to_time" = the rest."""
        by_test: dict[str, bool] = {}
        for r in self.identical:
            by_test.setdefault(r.key.test, True)
        for r in (*self.changed, *self.added, *self.unknown):
            by_test[r.key.test] = False
        want = which == "identical"
        return sorted(t for t, same in by_test.items() if t and same == want)


def diff_static(base: list[VariantResult], head: list[VariantResult]) -> StaticDiff:
    """Compare normalized-SASS hashes variant by variant.

    Variants are matched as ``kperf compare`` matches them (by id, then by kernel/arch/config
    when the specialization changed); a re-matched pair counts as changed.
    """
    from kperf_ci.compare import _match

    pairs, removed, added = _match(base, head)
    out = StaticDiff(added=list(added), removed=list(removed))
    for b, h, rematched in pairs:
        if not h.sass_hash or not b.sass_hash:
            out.unknown.append(h)
        elif h.sass_hash == b.sass_hash and not rematched:
            out.identical.append(h)
        else:
            out.changed.append(h)
    return out


# --------------------------------------------------------------------------------------------
# static pass, per test: does anything a test launches differ from the base revision?


@dataclass
class LaunchChange:
    """One launch of a test compared with its base counterpart (matched by launch site, then by
    order among the launches of that site)."""

    name: str  # kernel name as stored (marker name / kernel)
    site: str  # "path::qualname" of the kernel
    status: str  # identical | changed | added | removed
    changes: list[str] = field(default_factory=list)  # "num_stages 3 -> 1", "grid 132 -> 133", ...
    base: dict[str, Any] | None = None
    head: dict[str, Any] | None = None

    @property
    def label(self) -> str:
        """The stored name, with the kernel's own name when the marker renamed it."""
        qualname = self.site.rsplit("::", 1)[-1]
        return self.name if self.name.endswith(qualname) else f"{self.name} ({qualname})"


@dataclass
class TestDiff:
    test: str
    status: str  # identical | changed | added | removed | no-launches
    launches: list[LaunchChange] = field(default_factory=list)

    @property
    def changes(self) -> list[str]:
        out = []
        for lc in self.launches:
            if lc.status == "identical":
                continue
            what = "; ".join(lc.changes) if lc.changes else lc.status
            out.append(f"{lc.label}: {what}")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "test": self.test,
            "status": self.status,
            "changes": self.changes,
            "launches": [
                {"name": lc.name, "site": lc.site, "status": lc.status, "changes": lc.changes}
                for lc in self.launches
            ],
        }


def _dict_changes(b: dict[str, Any], h: dict[str, Any], fmt: Callable[[str, Any, Any], str]) -> list[str]:
    out = []
    for k in list(dict.fromkeys([*b, *h])):
        if b.get(k) != h.get(k):
            out.append(fmt(k, b.get(k, "-"), h.get(k, "-")))
    return out


def _fmt_metric(name: str, b: Any, h: Any) -> str:
    """ "spills 0 bytes -> 16 bytes": the catalogue's unit, formatted as `kperf compare` does."""
    unit = unit_of(name)

    def f(v: Any) -> str:
        return fmt_value(float(v), unit) if isinstance(v, (int, float)) else fmt_value(None)

    return f"{name} {f(b)} -> {f(h)}"


def launch_changes(b: dict[str, Any], h: dict[str, Any]) -> list[str]:
    """What differs between two manifest rows, most telling first: options, arguments, grid,
    then per arch the code (SASS) and its static metrics."""
    from kperf_ci.compare import parse_config  # one reader of config strings (tuple values too)

    out = _dict_changes(
        parse_config(b.get("config", "")),
        parse_config(h.get("config", "")),
        lambda k, x, y: f"{k} {x} -> {y}",
    )
    out += _dict_changes(b.get("args") or {}, h.get("args") or {}, lambda k, x, y: f"{k} {x} -> {y}")
    if b.get("grid") != h.get("grid"):
        out.append(f"grid {tuple(b.get('grid') or ())} -> {tuple(h.get('grid') or ())}")
    if not out and b.get("spec") != h.get("spec"):
        out.append("specialization changed")  # e.g. alignment of a pointer argument
    bc, hc = b.get("code") or {}, h.get("code") or {}
    for arch in sorted(set(bc) | set(hc)):
        x, y = bc.get(arch), hc.get(arch)
        if x is None or y is None:
            out.append(f"{arch}: compiled on one side only")
            continue
        if x.get("error") or y.get("error") or not x.get("sass") or not y.get("sass"):
            out.append(f"{arch}: no SASS on a side (compile error)")
            continue
        if x.get("sass") == y.get("sass"):
            continue
        moved = [_fmt_metric(k, x.get(k), y.get(k)) for k in CODE_METRICS_ORDER if x.get(k) != y.get(k)]
        out.append(f"{arch} SASS changed" + (": " + ", ".join(moved) if moved else ""))
    return out


#: static metrics in the order "what moved" lists them (the catalogue's)
CODE_METRICS_ORDER = MOVED_METRICS


def _pair_launches(base: list[dict[str, Any]], head: list[dict[str, Any]]) -> list[LaunchChange]:
    by_site: dict[str, list[dict[str, Any]]] = {}
    for r in base:
        by_site.setdefault(str(r.get("site")), []).append(r)
    out = []
    for h in head:
        site = str(h.get("site"))
        queue = by_site.get(site) or []
        if not queue:
            out.append(
                LaunchChange(str(h.get("name")), site, "added", ["kernel launched in head only"], head=h)
            )
            continue
        b = queue.pop(0)
        changes = launch_changes(b, h)
        out.append(
            LaunchChange(str(h.get("name")), site, "changed" if changes else "identical", changes, b, h)
        )
    for site, rest in by_site.items():
        for b in rest:
            out.append(
                LaunchChange(str(b.get("name")), site, "removed", ["kernel launched in base only"], base=b)
            )
    return out


def diff_tests(
    base: dict[str, list[dict[str, Any]]], head: dict[str, list[dict[str, Any]]]
) -> list[TestDiff]:
    """Per test (node id), head against base.  A test needs GPU time unless every one of its
    launches is identical: same code on every arch, same options, same specialization, same work
    (grid, integer arguments, tensor shapes)."""
    out = []
    for test in sorted(set(base) | set(head)):
        if test not in head:
            out.append(TestDiff(test, "removed"))
            continue
        if test not in base:
            out.append(
                TestDiff(
                    test,
                    "added",
                    [
                        LaunchChange(str(h.get("name")), str(h.get("site")), "added", [], head=h)
                        for h in head[test]
                    ],
                )
            )
            continue
        if not head[test] and not base[test]:
            out.append(TestDiff(test, "no-launches"))
            continue
        launches = _pair_launches(base[test], head[test])
        same = all(lc.status == "identical" for lc in launches)
        out.append(TestDiff(test, "identical" if same else "changed", launches))
    return out


def tests_from_variants(diff: StaticDiff) -> list[TestDiff]:
    """Per-test diffs from a variant-level diff, for a base run without a launch manifest."""
    out = {t: TestDiff(t, "identical") for t in diff.tests("identical")}
    for r in (*diff.changed, *diff.added, *diff.unknown):
        if r.key.test:
            td = out.setdefault(r.key.test, TestDiff(r.key.test, "changed"))
            td.status = "changed"
            td.launches.append(
                LaunchChange(r.key.kernel, r.key.source, "changed", [f"{r.key.label()} differs"])
            )
    return [out[t] for t in sorted(out)]


def static_regressions(tests: list[TestDiff], policy: Any) -> list[dict[str, Any]]:
    """Launches whose code regressed beyond `kperf compare`'s static thresholds (spills from 0,
    registers +20%, shared memory over the arch's limit, ...), judged launch by launch on the
    pairs the per-test diff made, so a config change is judged like any other change."""
    from kperf_ci.compare import _static_change

    out = []
    for t in tests:
        for lc in t.launches:
            if lc.status != "changed" or lc.base is None or lc.head is None:
                continue
            bc, hc = lc.base.get("code") or {}, lc.head.get("code") or {}
            for arch in sorted(set(bc) & set(hc)):
                x, y = bc[arch], hc[arch]
                key = VariantKey(kernel=lc.name, arch=arch, test=t.test, source=lc.site)
                reasons = []  # one entry per launch and arch, as the report counts variants
                for name in CODE_METRICS_ORDER:
                    if not isinstance(x.get(name), (int, float)) or not isinstance(y.get(name), (int, float)):
                        continue
                    change = _static_change(
                        metric(name, x[name]),
                        metric(name, y[name]),
                        key,
                        policy,
                        {},
                    )
                    if change.regression:
                        reasons.append(change.reason)
                if reasons:
                    out.append(
                        {"kernel": lc.label, "arch": arch, "test": t.test, "reason": "; ".join(reasons)}
                    )
    return out
