"""The A/B verdict: a head version against its base, timed in interleaved pairs in one process
(``kperf ab``'s timing pass, a pytest run with ``--kperf-ab-plan``; the agent's candidate check).

Capture measures (:func:`kperf_ci.capture.timing.interleaved.adaptive_ab` runs the pairs and asks after
every round whether it may stop, through the :func:`stop_rule` the measurement stage hands it);
the rule that turns the pairs into a verdict lives here, next
to the other two verdicts of the judge (a run against a baseline, :mod:`kperf_ci.judge.compare`;
a run against the history's level, :mod:`kperf_ci.judge.gate`), so that a change of threshold,
floor or stopping rule is made in one place.

**The knobs** are one :class:`kperf_ci.config.ABPolicy` (built by its ``from_settings``: the
marker's ``thresholds={"time.median": ...}`` or ``{"time": ...}``, else the run's ``ab_threshold``;
``ab_floor_ms``, an absolute band in ms, the larger band winning as in every timing verdict of
:func:`kperf_ci.judge.stats.compare_samples`; ``ab_precision``, the confidence interval's
half-width at which a settled verdict stops the measurement), carried whole to this module.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..config import ABPolicy
from ..sample_stats import SampleComparison, StopRule
from .stats import compare_samples

__all__ = ["ab_verdict", "balanced_blocks", "settled", "stop_rule"]


def balanced_blocks(base_ms: Sequence[float], head_ms: Sequence[float]) -> tuple[list[float], list[float]]:
    """Geometric means of consecutive pairs (AB then BA): one order-balanced block per two pairs.

    A systematic first-call/second-call effect cancels inside each block, so the blocks are
    centred on the true ratio and the signed-rank interval's symmetry assumption holds.
    """
    n = len(base_ms) // 2 * 2
    b = [math.sqrt(base_ms[i] * base_ms[i + 1]) for i in range(0, n, 2)]
    h = [math.sqrt(head_ms[i] * head_ms[i + 1]) for i in range(0, n, 2)]
    return b, h


def ab_verdict(
    base_ms: Sequence[float],
    head_ms: Sequence[float],
    policy: ABPolicy,
    *,
    confidence: float = 0.99,
    seed: int = 0,
) -> SampleComparison:
    """The verdict on interleaved pairs (base_ms[i] and head_ms[i] timed back to back, the order
    alternating): the pairs folded into order-balanced blocks, compared pair by pair."""
    b_blocks, h_blocks = balanced_blocks(base_ms, head_ms)
    return compare_samples(
        b_blocks,
        h_blocks,
        threshold=policy.ab_threshold,
        floor=policy.ab_floor_ms,
        paired=True,
        confidence=confidence,
        seed=seed,
    )


def settled(comparison: SampleComparison, precision: float) -> bool:
    """Whether more pairs can stop: a verdict other than "inconclusive" whose interval's
    half-width is at most ``precision`` (the default 0.005: the effect is good to about +-0.5%)."""
    half_width = (comparison.ci_high - comparison.ci_low) / 2  # NaN (too few pairs) compares False
    return comparison.verdict != "inconclusive" and half_width <= precision


def stop_rule(policy: ABPolicy) -> StopRule:
    """The interleaved loop's stop rule: after every round, :func:`ab_verdict` on all pairs so
    far and whether it is :func:`settled` at the policy's precision."""

    def rule(base_ms: Sequence[float], head_ms: Sequence[float]) -> tuple[SampleComparison, bool]:
        comparison = ab_verdict(base_ms, head_ms, policy)
        return comparison, settled(comparison, policy.ab_precision)

    return rule
