"""The A/B verdict: a head version against its base, timed in interleaved pairs in one process
(``kperf ab``'s timing pass, ``--kperf-ab``, the agent's candidate check).

Capture measures (:func:`kperf_ci.capture.timing.interleaved.adaptive_ab` runs the pairs and asks after
every round whether it may stop, through the :func:`stop_rule` the measurement stage hands it);
the rule that turns the pairs into a verdict lives here, next
to the other two verdicts of the judge (a run against a baseline, :mod:`kperf_ci.judge.compare`;
a run against the history's level, :mod:`kperf_ci.judge.gate`), so that a change of threshold,
floor or stopping rule is made in one place.

**Threshold sources**, most specific first: the marker's ``thresholds={"time.median": ...}`` or
``{"time": ...}``, else the run's ``ab_threshold`` (``[tool.kperf]``; its default is
:class:`kperf_ci.config.Settings`'); ``ab_floor_ms`` is an absolute band in
ms (the larger band wins, as in every timing verdict of :func:`kperf_ci.judge.stats.compare_samples`);
``ab_precision`` is the confidence interval's half-width at which a settled verdict stops the
measurement.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..config import Settings
from ..sample_stats import SampleComparison, StopRule
from .stats import compare_samples

__all__ = ["ab_threshold", "ab_verdict", "balanced_blocks", "settled", "stop_rule"]


def ab_threshold(marker_thresholds: Mapping[str, Any], default: float) -> float:
    """The relative band of an A/B verdict: the marker's ``time.median`` or ``time`` threshold
    (the same keys, in the same order, as the baseline comparison reads: judge/policy.py), else
    ``default`` (the run's ``ab_threshold``)."""
    for key in ("time.median", "time"):
        if marker_thresholds.get(key) is not None:
            return float(marker_thresholds[key])
    return float(default)


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
    *,
    threshold: float,
    floor: float = Settings.ab_floor_ms,
    confidence: float = 0.99,
    seed: int = 0,
) -> SampleComparison:
    """The verdict on interleaved pairs (base_ms[i] and head_ms[i] timed back to back, the order
    alternating): the pairs folded into order-balanced blocks, compared pair by pair."""
    b_blocks, h_blocks = balanced_blocks(base_ms, head_ms)
    return compare_samples(
        b_blocks,
        h_blocks,
        threshold=threshold,
        floor=floor,
        paired=True,
        confidence=confidence,
        seed=seed,
    )


def settled(comparison: SampleComparison, precision: float) -> bool:
    """Whether more pairs can stop: a verdict other than "inconclusive" whose interval's
    half-width is at most ``precision`` (the default 0.005: the effect is good to about +-0.5%)."""
    half_width = (comparison.ci_high - comparison.ci_low) / 2  # NaN (too few pairs) compares False
    return comparison.verdict != "inconclusive" and half_width <= precision


def stop_rule(*, threshold: float, floor: float, precision: float) -> StopRule:
    """The interleaved loop's stop rule: after every round, :func:`ab_verdict` on all pairs so
    far and whether it is :func:`settled`."""

    def rule(base_ms: Sequence[float], head_ms: Sequence[float]) -> tuple[SampleComparison, bool]:
        comparison = ab_verdict(base_ms, head_ms, threshold=threshold, floor=floor)
        return comparison, settled(comparison, precision)

    return rule
