"""Verdicts on raw timing samples: effect size with a confidence interval, then a decision.

The effect is the Hodges-Lehmann shift of log times, reported as a ratio (cur / base):

* unpaired (two runs, e.g. a stored baseline and this run): median of all pairwise differences
  ``log cur_j - log base_i``, with the distribution-free confidence interval that inverts the
  Mann-Whitney test (Lehmann 1963; Hollander & Wolfe, "Nonparametric Statistical Methods", 4.3);
* paired (interleaved A/B pairs, where pair i of base and cur ran back to back): median of the
  Walsh averages of ``d_i = log cur_i - log base_i``, with the interval that inverts the Wilcoxon
  signed-rank test (Tukey; Hollander & Wolfe 3.3).  Pairing cancels what both calls of a pair
  share (clock drift, thermal state, a neighbour's load), which is why interleaved A/B is the
  precise way to compare two kernels.

Both estimators have a 29% breakdown point: a few wild samples (preemption, a clock dip) move
them little, where a mean or a t-interval would swing.  Rank intervals need no distributional
assumption beyond independence and (for the paired test) symmetry of ``d``; heavy tails are fine.

Decision, with ``t`` the practical threshold (relative) and ``floor`` an absolute one (same unit
as the samples), folded into one relative band ``t_eff = max(t, floor / median(base))``:

* ``slower``   -- ci_low > 1 (statistically slower) and ratio - 1 > t_eff (practically slower);
* ``faster``   -- ci_high < 1 and 1 - ratio > t_eff;
* ``unchanged``-- the whole interval lies inside (1 - t_eff, 1 + t_eff): any change there is
  smaller than what matters (an equivalence test, as in TOST);
* ``inconclusive`` -- anything else: the interval straddles a threshold, or there are too few
  samples for an interval at this confidence.  More samples settle it.

A change that is significant but below the threshold is ``unchanged`` when its interval fits in
the band, ``inconclusive`` when it does not.  Everything is deterministic: ``seed`` only drives
the subsampling of very large inputs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

import numpy as np

from ..metrics import TimingVerdict
from ..sample_stats import SampleComparison

# Above these sizes the O(n*m) / O(n^2) sets of differences are computed on a seeded subsample:
# the interval then reflects the smaller sample, i.e. it is conservative (wider), never narrower.
MAX_PAIRWISE = 4_000_000
MAX_SIDE = 2000  # unpaired: at most this many samples per side once n*m > MAX_PAIRWISE
MAX_PAIRED = 2000  # paired: at most this many pairs (2M Walsh averages)


def _clean(x: Sequence[float]) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64).ravel()
    return a[np.isfinite(a) & (a > 0)]


def _z(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    # the standard library's normal quantile (Wichura AS241, as exact as scipy's): importing
    # scipy.stats costs a second or more, more than many comparisons take
    return statistics.NormalDist().inv_cdf(0.5 + confidence / 2.0)


def _order_stat(values: np.ndarray, k: int) -> float:
    """k-th smallest (0-based) without a full sort."""
    return float(np.partition(values, k)[k])


def hodges_lehmann_shift(x: np.ndarray, y: np.ndarray, confidence: float) -> tuple[float, float, float]:
    """Shift of y relative to x (median of y_j - x_i) with the Mann-Whitney interval.

    Returns (estimate, low, high); low/high are NaN when the samples are too small for an
    interval at this confidence.
    """
    n, m = len(x), len(y)
    diffs = (y[None, :] - x[:, None]).ravel()
    est = float(np.median(diffs))
    nm = n * m
    # Normal approximation of the Mann-Whitney U distribution (ties make it slightly conservative).
    k = math.floor(nm / 2.0 - _z(confidence) * math.sqrt(nm * (n + m + 1) / 12.0))
    if k < 1:
        return est, math.nan, math.nan
    # 1-based order statistics D_(k) and D_(nm + 1 - k).
    return est, _order_stat(diffs, k - 1), _order_stat(diffs, nm - k)


def hodges_lehmann_paired(d: np.ndarray, confidence: float) -> tuple[float, float, float]:
    """Centre of the paired differences (median of Walsh averages) with the signed-rank interval."""
    n = len(d)
    i, j = np.triu_indices(n)
    walsh = (d[i] + d[j]) / 2.0
    est = float(np.median(walsh))
    total = n * (n + 1) // 2
    k = math.floor(total / 2.0 - _z(confidence) * math.sqrt(n * (n + 1) * (2 * n + 1) / 24.0))
    if k < 1:
        return est, math.nan, math.nan
    return est, _order_stat(walsh, k - 1), _order_stat(walsh, total - k)


def decide(ratio: float, ci_low: float, ci_high: float, band: float) -> TimingVerdict:
    """The verdict rule of this module (see the module docstring) on an effect and its interval."""
    if any(math.isnan(v) for v in (ratio, ci_low, ci_high)):
        return "inconclusive"
    rel = ratio - 1.0
    if ci_low > 1.0 and rel > band:
        return "slower"
    if ci_high < 1.0 and -rel > band:
        return "faster"
    if ci_low > 1.0 - band and ci_high < 1.0 + band:
        return "unchanged"
    return "inconclusive"


def compare_samples(
    base: Sequence[float],
    cur: Sequence[float],
    *,
    threshold: float = 0.02,
    floor: float = 0.0,
    paired: bool = False,
    confidence: float = 0.99,
    seed: int = 0,
) -> SampleComparison:
    """Compare raw timing samples of a base and a current version.

    ``threshold``: relative change that matters (0.02 = 2%). ``floor``: absolute change that
    matters, in the samples' unit (ms for kperf); the larger of the two bands is used.
    ``paired``: base[i] and cur[i] were measured together (interleaved A/B); samples are then
    compared pair by pair and must have equal length.  Non-positive and non-finite samples are
    dropped (and a pair is dropped if either of its samples is).
    """
    if threshold < 0 or floor < 0:
        raise ValueError("threshold and floor must be >= 0")
    rng = np.random.default_rng(seed)
    if paired:
        b_all = np.asarray(base, dtype=np.float64).ravel()
        c_all = np.asarray(cur, dtype=np.float64).ravel()
        if len(b_all) != len(c_all):
            raise ValueError(f"paired samples need equal lengths, got {len(b_all)} and {len(c_all)}")
        ok = np.isfinite(b_all) & np.isfinite(c_all) & (b_all > 0) & (c_all > 0)
        b, c = b_all[ok], c_all[ok]
        method = "hodges-lehmann log ratio, paired (wilcoxon signed-rank interval)"
    else:
        b, c = _clean(base), _clean(cur)
        method = "hodges-lehmann log shift (mann-whitney interval)"
    n_b, n_c = len(b), len(c)
    band = threshold
    if n_b and floor > 0:
        band = max(threshold, floor / float(np.median(b)))
    if n_b < 2 or n_c < 2:
        return SampleComparison(
            "inconclusive",
            math.nan,
            math.nan,
            math.nan,
            math.nan,
            n_b,
            n_c,
            method + "; too few samples",
            confidence,
            band,
        )
    if paired:
        d = np.log(c) - np.log(b)
        if len(d) > MAX_PAIRED:
            d = rng.choice(d, MAX_PAIRED, replace=False)
            method += f"; {MAX_PAIRED}-pair subsample"
        est, lo, hi = hodges_lehmann_paired(d, confidence)
    else:
        lb, lc = np.log(b), np.log(c)
        if n_b * n_c > MAX_PAIRWISE:
            if n_b > MAX_SIDE:
                lb = rng.choice(lb, MAX_SIDE, replace=False)
            if n_c > MAX_SIDE:
                lc = rng.choice(lc, MAX_SIDE, replace=False)
            method += f"; subsampled to {len(lb)}/{len(lc)}"
        est, lo, hi = hodges_lehmann_shift(lb, lc, confidence)
    ratio = math.exp(est)
    ci_low, ci_high = (
        math.exp(lo) if not math.isnan(lo) else math.nan,
        math.exp(hi) if not math.isnan(hi) else math.nan,
    )
    return SampleComparison(
        verdict=decide(ratio, ci_low, ci_high, band),
        ratio=ratio,
        ci_low=ci_low,
        ci_high=ci_high,
        rel=ratio - 1.0,
        n_base=n_b,
        n_cur=n_c,
        method=method,
        confidence=confidence,
        threshold=band,
    )
