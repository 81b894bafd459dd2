"""Interleaved A/B timing of a base and a head callable until the verdict is certain.

Comparing with a number stored earlier is a sequential comparison, biased by whatever changed
between the two runs (clocks, thermals, the order of measurement); on compute-bound kernels that
bias reaches several percent.  Interleaving base and head call by call in one process, with the
order alternating, cancels it: each pair of calls shares the machine's state, and the verdict is
taken on the pairs by the judge (:func:`kperf_ci.judge.ab.ab_verdict`; this module measures and
never imports the judge: the stop rule is handed in, a :data:`~kperf_ci.sample_stats.StopRule`).

:func:`adaptive_ab` times base and head interleaved in rounds of pairs (AB, BA, AB, ...),
asks the stop rule after each round for the paired comparison and whether it is settled, and
stops as soon as it is or the budget is spent.  The device sits behind
:class:`kperf_ci.capture.timing.engine.DeviceBackend`, so tests run it on a fake clock; warm-up, the
choice of CUDA-graph replay, the L2-flush rule and the re-warm count come from
``capture.timing``'s public building blocks (``Variant``, ``warmup``, ``choose_method``,
``should_flush``, ``rewarm_calls``), so A/B and ordinary timing prepare a kernel alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kperf_ci.capture.timing import engine
from kperf_ci.config import Settings
from kperf_ci.metrics import metric
from kperf_ci.model import Metric
from kperf_ci.sample_stats import SampleComparison, StopRule, median, median_ci


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
    method: str = "events"  # "cupti", "events" or "graph" (CUDA-graph replay), both sides alike
    base_ms: list[float] = field(default_factory=list)
    head_ms: list[float] = field(default_factory=list)
    head_first: list[bool] = field(default_factory=list)  # per pair: head was called first
    warnings: list[str] = field(default_factory=list)
    # region metrics of the base version's instrumented launch, per kernel name (the head's are
    # stored as the variant's own region.* metrics): "what moved" inside the kernel
    base_regions: dict[str, dict[str, float]] = field(default_factory=dict)
    method_note: str = ""  # why the method is not CUPTI, where it is not

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
            ("ab.warmup_seconds", self.warmup_seconds),
            ("ab.threshold", self.threshold),
        ]
        return [metric(name, value) for name, value in vals]  # unit, kind, direction: the catalogue

    def head_timing(self) -> engine.TimingResult:
        """The head side's samples as a TimingResult: the ``time.*`` metrics of a launch timed
        only A/B (kperf ab's kernel replay), without a second timing loop."""
        lo, hi = median_ci(self.head_ms)
        return engine.TimingResult(
            samples_ms=list(self.head_ms),
            median=median(self.head_ms),
            ci_low=lo,
            ci_high=hi,
            method=self.method,
            n=len(self.head_ms),
            warnings=list(self.warnings),
            stopped_by=self.stopped_by,
            elapsed_s=self.seconds,
            method_note=self.method_note,
        )


def adaptive_ab(
    base_fn: Callable[[], Any],
    head_fn: Callable[[], Any],
    *,
    stop_rule: StopRule,
    backend: Any = None,
    budget_s: float = Settings.timing_budget_s,
    first_round_pairs: int = 20,
    growth: float = 1.5,
    max_pairs: int = 4000,
    cfg: Any = None,
) -> ABResult:
    """Time ``base_fn()`` and ``head_fn()`` interleaved until the verdict is certain.

    Round r times an even number of pairs, each pair one call of each side back to back, the
    order alternating pair by pair (AB, BA, ...).  Before every call the L2 is flushed (enqueued
    before the start marker, as ``capture.timing`` does).  After each round ``stop_rule`` is
    handed all pairs so far and returns their comparison and whether it is settled (the judge's
    :func:`kperf_ci.judge.ab.stop_rule`: the pairs folded into order-balanced blocks, a verdict
    not ``inconclusive`` whose interval is narrow enough); the loop stops when it is
    ("certain"), when the host time spent measuring reaches
    ``budget_s`` ("budget"), or ``max_pairs`` is reached.  Rounds grow by ``growth`` so that the
    number of looks stays small (about 10 within a 2 s budget), and are cut to what the remaining
    budget allows at the pace measured so far.

    ``backend``: a :class:`kperf_ci.capture.timing.engine.DeviceBackend` (default: CUDA on the current
    device); warm-up and the choice of CUDA-graph replay for short kernels follow ``cfg``
    (a ``TimingConfig``), with the same method forced on both sides.
    """
    cfg = cfg or engine.TimingConfig()
    be = backend if backend is not None else engine.default_backend()
    result, note = engine.measure_with_fallback(
        be,
        lambda b: _adaptive_ab(
            base_fn,
            head_fn,
            b,
            cfg,
            stop_rule=stop_rule,
            budget_s=budget_s,
            first_round_pairs=first_round_pairs,
            growth=growth,
            max_pairs=max_pairs,
        ),  # fmt: skip
    )
    result.method_note = note or ""
    return result


def _adaptive_ab(
    base_fn: Callable[[], Any],
    head_fn: Callable[[], Any],
    be: Any,
    cfg: Any,
    *,
    stop_rule: StopRule,
    budget_s: float,
    first_round_pairs: int,
    growth: float,
    max_pairs: int,
) -> ABResult:
    flush = engine.should_flush(cfg, be)
    t_warm = be.host_time()
    sides, warnings = _warm_sides(base_fn, head_fn, be, cfg, flush)
    warmup_s = be.host_time() - t_warm
    # Untimed calls at the start of every round: after the host-side check between rounds the
    # device has idled, and the first call after an idle gap runs slow (capture.timing's re-warm).
    rewarm = {name: engine.rewarm_calls(v, cfg) for name, v in sides.items()}

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
        for b_ms, h_ms, hf in _time_round(sides, be, flush, rewarm, n, len(base_ms)):
            base_ms.append(b_ms)
            head_ms.append(h_ms)
            head_first.append(hf)
        rounds += 1
        comparison, done = stop_rule(base_ms, head_ms)
        if done:
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


def _warm_sides(
    base_fn: Callable[[], Any], head_fn: Callable[[], Any], be: Any, cfg: Any, flush: bool
) -> tuple[dict[str, engine.Variant], list[str]]:
    """Warm both sides up and choose how each is timed, forcing plain events on both when a
    CUDA-graph replay worked on one side only; (the sides, their warnings)."""
    sides = {"base": engine.Variant("base", base_fn), "head": engine.Variant("head", head_fn)}
    warnings: list[str] = []
    for v in sides.values():
        engine.warmup(v, be, cfg, flush)
    for v in sides.values():
        engine.choose_method(v, be, cfg)
    if sides["base"].method != sides["head"].method:  # never compare a graph replay with plain calls
        for name, fn in (("base", base_fn), ("head", head_fn)):
            sides[name].calls, sides[name].k, sides[name].method = [fn], 0, "events"
        warnings.append("CUDA-graph replay worked on one side only: both timed with plain events")
    for v in sides.values():
        warnings.extend(f"{v.name}: {w}" for w in v.warnings)
    return sides, warnings


def _time_round(
    sides: dict[str, engine.Variant], be: Any, flush: bool, rewarm: dict[str, int], n: int, done: int
) -> list[tuple[float, float, bool]]:
    """One round: the untimed re-warm calls, then ``n`` pairs, the order alternating pair by pair
    from the ``done`` pairs before; one synchronize, then (base ms, head ms, head first?) each."""
    marks = []
    for name in ("base", "head") if done % 4 == 0 else ("head", "base"):
        for _ in range(rewarm[name]):
            if flush:
                be.flush()
            sides[name].next_call()()
    for k in range(n):
        hf = (done + k) % 2 == 1
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
    return [(be.elapsed_ms(*pair["base"]), be.elapsed_ms(*pair["head"]), hf) for pair, hf in marks]


# --------------------------------------------------------------------------------------------
# static pass: which variants compile to the same code on both sides
