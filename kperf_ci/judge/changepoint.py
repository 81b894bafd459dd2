"""Change points in a metric's history, per-kernel noise thresholds, and re-levelling.

Method: E-divisive means (Matteson & James 2014, "A Nonparametric Approach for Multiple Change
Point Analysis of Multivariate Data"), the detector behind Hunter/Apache Otava.  Each segment of
the series is split where the energy distance between the two sides, scaled by n*m/(n+m), is
largest; the split is kept when a permutation test (values shuffled within every current
segment, the maximum statistic recomputed) finds it significant, and splitting repeats on the
new segments.  It works on log values, so a step is a ratio whatever the kernel's scale.

Why this and not a penalised cost (e.g. ruptures' PELT): a permutation p-value per change point
needs no penalty tuned to each kernel's noise, makes no normality assumption, and is what the
change point record reports; the energy statistic with exponent 1 is rank-like enough that one
wild run does not make a step.  A segment has at least ``min_size`` points (default 3), so a
single outlier can never be a segment of its own.  The whole thing is O(n^2) per permutation,
fine for the windows a CI history has (tens to a few hundred runs), and needs only numpy.

Re-levelling: after an accepted step, later runs are compared with the median after the last
change point (``current_baseline``), not with the level before it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class ChangePoint:
    index: int  # first index of the new level
    run: str | None  # label of that point (run id or commit), when labels were given
    before_median: float  # median of the segment before (from the previous change point)
    after_median: float  # median of the segment after (up to the next change point)
    rel: float  # after / before - 1
    p_value: float  # permutation p-value of the split when it was found

    def to_dict(self) -> dict:
        return asdict(self)


def _split_stats(d: np.ndarray, min_size: int) -> tuple[int, float]:
    """Best split of one segment given its pairwise distance matrix: (tau, q).

    Split at tau means left = [0, tau), right = [tau, n).  q = a*b/(a+b) * (2*mean|X-Y| -
    mean|X-X'| - mean|Y-Y'|) (the scaled sample energy distance); tau=-1 when no split fits.
    """
    n = d.shape[0]
    if n < 2 * min_size:
        return -1, -math.inf
    up = np.triu(d, 1)
    col = up.sum(axis=0)  # col[t] = sum_{i<t} d[i, t]
    row = up.sum(axis=1)  # row[t] = sum_{j>t} d[t, j]
    within_prefix = np.concatenate(([0.0], np.cumsum(col)))  # [t] = sum over i<j<t
    within_suffix = np.concatenate((np.cumsum(row[::-1])[::-1], [0.0]))  # [t] = sum over t<=i<j
    total = within_prefix[-1]
    taus = np.arange(min_size, n - min_size + 1)
    a = taus.astype(np.float64)
    b = n - a
    wl = within_prefix[taus]
    wr = within_suffix[taus]
    between = total - wl - wr
    energy = 2.0 * between / (a * b) - 2.0 * wl / (a * (a - 1)) - 2.0 * wr / (b * (b - 1))
    q = a * b / (a + b) * energy
    i = int(np.argmax(q))
    return int(taus[i]), float(q[i])


def _best_over_segments(z: np.ndarray, bounds: list[int], min_size: int) -> tuple[int, float]:
    """Best split over all segments delimited by ``bounds`` (sorted, with 0 and len)."""
    best_tau, best_q = -1, -math.inf
    for s, e in zip(bounds[:-1], bounds[1:], strict=True):
        seg = z[s:e]
        tau, q = _split_stats(np.abs(seg[:, None] - seg[None, :]), min_size)
        if tau >= 0 and q > best_q:
            best_tau, best_q = s + tau, q
    return best_tau, best_q


def detect_change_points(
    values: Sequence[float],
    *,
    labels: Sequence[str] | None = None,
    alpha: float = 0.01,
    permutations: int = 199,
    min_size: int = 3,
    min_rel: float = 0.0,
    seed: int = 0,
    log: bool = True,
) -> list[ChangePoint]:
    """Change points of ``values`` (in order), most recent last.

    ``alpha``: significance level of each split's permutation test (p = (k+1)/(permutations+1),
    so permutations must allow p <= alpha).  ``min_rel``: drop steps whose |after/before - 1| is
    smaller (weakest first, neighbours recomputed), as Hunter's merge step does with its minimum
    magnitude.  ``log``: work on log values (times, ratios); set False for values that can be
    <= 0.  Deterministic for a given seed.
    """
    x = np.asarray(values, dtype=np.float64)
    if labels is not None and len(labels) != len(x):
        raise ValueError("labels must have the same length as values")
    if not np.all(np.isfinite(x)):
        raise ValueError("values must be finite")
    if len(x) < 2 * min_size:
        return []
    if log:
        if np.any(x <= 0):
            raise ValueError("log=True needs positive values")
        z = np.log(x)
    else:
        z = x
    rng = np.random.default_rng(seed)
    bounds = [0, len(z)]
    found: dict[int, float] = {}
    while True:
        tau, q = _best_over_segments(z, bounds, min_size)
        if tau < 0 or q <= 0:
            break
        exceed = 0
        for _ in range(permutations):
            zp = z.copy()
            for s, e in zip(bounds[:-1], bounds[1:], strict=True):
                zp[s:e] = rng.permutation(zp[s:e])
            if _best_over_segments(zp, bounds, min_size)[1] >= q:
                exceed += 1
                if (exceed + 1) / (permutations + 1) > alpha:
                    # p only grows from here: the split is rejected whatever the remaining
                    # permutations say, and rejection ends the search, so stop early.
                    break
        p = (exceed + 1) / (permutations + 1)
        if p > alpha:
            break
        found[tau] = p
        bounds = sorted(bounds + [tau])
    cps = sorted(found)
    while True:
        points = _describe(x, cps, found, labels)
        weak = [cp for cp in points if abs(cp.rel) < min_rel]
        if not weak:
            return points
        cps.remove(min(weak, key=lambda cp: abs(cp.rel)).index)


def _describe(
    x: np.ndarray, cps: list[int], pvals: dict[int, float], labels: Sequence[str] | None
) -> list[ChangePoint]:
    edges = [0, *cps, len(x)]
    out = []
    for k, idx in enumerate(cps):
        before = float(np.median(x[edges[k] : idx]))
        after = float(np.median(x[idx : edges[k + 2]]))
        out.append(
            ChangePoint(
                index=idx,
                run=None if labels is None else str(labels[idx]),
                before_median=before,
                after_median=after,
                rel=after / before - 1.0 if before else math.inf,
                p_value=pvals[idx],
            )
        )
    return out


def current_baseline(values: Sequence[float], change_points: Sequence[ChangePoint]) -> tuple[int, float]:
    """Re-levelled baseline: (start index, median) of the values after the last change point."""
    start = max((cp.index for cp in change_points), default=0)
    tail = np.asarray(values[start:], dtype=np.float64)
    return start, float(np.median(tail)) if len(tail) else math.nan


def regime_ratios(values: Sequence[float], change_points: Sequence[ChangePoint]) -> list[float]:
    """Each value over the median of its own segment: A/A-like ratios from a history with steps.

    Feed them to ``noise_model`` to derive a threshold from run-to-run noise that steps do not
    inflate.
    """
    x = np.asarray(values, dtype=np.float64)
    edges = [0, *sorted(cp.index for cp in change_points), len(x)]
    out: list[float] = []
    for s, e in zip(edges[:-1], edges[1:], strict=True):
        seg = x[s:e]
        if len(seg) >= 2:
            out.extend((seg / np.median(seg)).tolist())
    return out


def noise_model(
    aa_ratios: Sequence[float],
    *,
    k: float = 4.0,
    min_threshold: float = 0.002,
    default: float = 0.02,
    min_count: int = 5,
) -> float:
    """Per-kernel relative threshold from A/A ratios (same code compared with itself).

    sigma = 1.4826 * median |log r| (a robust SD around "no change": a systematic A/A bias counts
    as noise too), threshold = max(min_threshold, k * sigma), rounded up to 0.1%.  With k=4 a
    normal A/A noise crosses it once in ~30,000 comparisons; heavy tails are why k is not 3.
    Too few ratios (< min_count) give ``default``.
    """
    r = np.asarray(aa_ratios, dtype=np.float64)
    r = r[np.isfinite(r) & (r > 0)]
    if len(r) < min_count:
        return default
    sigma = 1.4826 * float(np.median(np.abs(np.log(r))))
    t = max(min_threshold, k * sigma)
    return math.ceil(t * 1000 - 1e-9) / 1000
