"""Interval arithmetic on numpy arrays of [start, end) pairs (all pure, all O(n log n))."""

from __future__ import annotations

import numpy as np


def union(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge overlapping or touching intervals; returns sorted disjoint (start, end)."""
    start = np.asarray(start, dtype=np.float64)
    end = np.asarray(end, dtype=np.float64)
    if len(start) == 0:
        return start.copy(), end.copy()
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    run_end = np.maximum.accumulate(e)
    # a new merged interval begins where the start is past every earlier end
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    out_s = s[idx]
    out_e = np.maximum.reduceat(e, idx)
    return out_s, out_e


def length(start: np.ndarray, end: np.ndarray) -> float:
    """Total length covered by the union of the intervals."""
    s, e = union(start, end)
    return float(np.sum(e - s))


def intersect(
    a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Intersection of two sets of intervals (each unioned first)."""
    as_, ae = union(*a)
    bs, be = union(*b)
    out_s: list[float] = []
    out_e: list[float] = []
    i = j = 0
    while i < len(as_) and j < len(bs):
        lo = max(as_[i], bs[j])
        hi = min(ae[i], be[j])
        if hi > lo:
            out_s.append(lo)
            out_e.append(hi)
        if ae[i] < be[j]:
            i += 1
        else:
            j += 1
    return np.array(out_s), np.array(out_e)


def gaps(start: np.ndarray, end: np.ndarray, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """Parts of [lo, hi) that no interval covers."""
    s, e = union(start, end)
    edges_s = np.concatenate(([lo], e))
    edges_e = np.concatenate((s, [hi]))
    gs = np.clip(edges_s, lo, hi)
    ge = np.clip(edges_e, lo, hi)
    keep = ge > gs
    return gs[keep], ge[keep]


def max_concurrency(start: np.ndarray, end: np.ndarray) -> int:
    """Largest number of intervals open at one instant (an end at t closes before a start at t)."""
    if len(start) == 0:
        return 0
    t = np.concatenate((np.asarray(start, float), np.asarray(end, float)))
    d = np.concatenate((np.ones(len(start)), -np.ones(len(end))))
    order = np.lexsort((d, t))  # at equal times, -1 (end) sorts before +1 (start)
    return int(np.max(np.cumsum(d[order])))
