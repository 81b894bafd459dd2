"""Verdicts on synthetic samples with known effects: rates over many seeds, not single cases."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from kperf_ci.judge.stats import compare_samples, decide

SEEDS = 400


def lognormal(rng, n, noise, effect=0.0):
    return np.exp(rng.normal(0.0, noise, n)) * (1.0 + effect)


def heavy(rng, n, noise, effect=0.0):
    """Student-t(2) noise plus 5% preemption spikes of 1.5-3x: a hostile timing distribution."""
    x = np.exp(rng.standard_t(2, n) * noise)
    spikes = rng.random(n) < 0.05
    x[spikes] *= rng.uniform(1.5, 3.0, spikes.sum())
    return x * (1.0 + effect)


def verdicts(make, effect, *, n=50, noise=0.005, paired=False, threshold=0.02, seeds=SEEDS):
    c = Counter()
    for s in range(seeds):
        rng = np.random.default_rng(s)
        base = make(rng, n, noise)
        cur = make(rng, n, noise, effect)
        c[compare_samples(base, cur, threshold=threshold, paired=paired).verdict] += 1
    return c


@pytest.mark.parametrize("paired", [False, True])
def test_true_3pct_slowdown_is_slower_in_99pct_of_seeds(paired):
    c = verdicts(lognormal, 0.03, paired=paired)
    assert c["slower"] / SEEDS >= 0.99, c


@pytest.mark.parametrize("paired", [False, True])
def test_true_3pct_speedup_is_faster(paired):
    c = verdicts(lognormal, -0.03, paired=paired)
    assert c["faster"] / SEEDS >= 0.99, c


@pytest.mark.parametrize("paired", [False, True])
def test_aa_false_alarms_at_most_1pct_and_mostly_unchanged(paired):
    c = verdicts(lognormal, 0.0, paired=paired, seeds=1000)
    assert (c["slower"] + c["faster"]) / 1000 <= 0.01, c
    assert c["unchanged"] / 1000 >= 0.99, c


@pytest.mark.parametrize("paired", [False, True])
def test_interval_is_calibrated_without_a_practical_threshold(paired):
    # threshold 0: the verdict is the bare test; a 99% interval misses 1 in 100 (two-sided)
    c = verdicts(lognormal, 0.0, paired=paired, threshold=0.0, seeds=2000)
    assert (c["slower"] + c["faster"]) / 2000 <= 0.02, c


def test_heavy_tails_and_spikes():
    c = verdicts(heavy, 0.03)
    assert c["slower"] / SEEDS >= 0.99, c
    aa = verdicts(heavy, 0.0)
    assert aa["slower"] + aa["faster"] <= SEEDS * 0.01, aa


def test_effect_estimate_is_accurate_and_robust_to_outliers():
    rng = np.random.default_rng(7)
    base = lognormal(rng, 200, 0.005)
    cur = lognormal(rng, 200, 0.005, 0.03)
    cur[:10] *= 50.0  # 5% wild samples do not move a Hodges-Lehmann estimate
    r = compare_samples(base, cur)
    assert r.rel == pytest.approx(0.03, abs=0.003)
    assert r.ci_low < r.ratio < r.ci_high


def _drift(n_total, amplitude):
    """A clock that slows down linearly by `amplitude` over the whole measurement."""
    return 1.0 + amplitude * np.linspace(0.0, 1.0, n_total)


def test_drifting_clock_paired_interleaving_cancels_drift():
    fa_seq, fa_pair, hit_pair = 0, 0, 0
    seeds = 200
    for s in range(seeds):
        rng = np.random.default_rng(s)
        n = 50
        # sequential (a stored baseline, then this run): base sees the early clock, cur the late
        d = _drift(2 * n, 0.06)
        base_seq = lognormal(rng, n, 0.005) * d[:n]
        cur_seq = lognormal(rng, n, 0.005) * d[n:]
        fa_seq += compare_samples(base_seq, cur_seq).verdict == "slower"
        # interleaved pairs: both calls of a pair see the same clock
        dp = _drift(n, 0.06)
        base_p = lognormal(rng, n, 0.005) * dp
        cur_p = lognormal(rng, n, 0.005) * dp
        fa_pair += compare_samples(base_p, cur_p, paired=True).verdict in ("slower", "faster")
        cur_p3 = lognormal(rng, n, 0.005, 0.03) * dp
        hit_pair += compare_samples(base_p, cur_p3, paired=True).verdict == "slower"
    assert fa_seq / seeds > 0.5  # why sequential comparisons cannot be trusted under drift
    assert fa_pair / seeds <= 0.01
    assert hit_pair / seeds >= 0.99


def test_paired_beats_unpaired_when_pairs_share_noise():
    rng = np.random.default_rng(3)
    shared = np.exp(rng.normal(0, 0.05, 60))  # large per-pair noise both calls share
    base = shared * lognormal(rng, 60, 0.002)
    cur = shared * lognormal(rng, 60, 0.002, 0.01)
    unpaired = compare_samples(base, cur, threshold=0.005)
    paired = compare_samples(base, cur, threshold=0.005, paired=True)
    assert paired.verdict == "slower"
    assert (paired.ci_high - paired.ci_low) < (unpaired.ci_high - unpaired.ci_low) / 5


def test_decision_rule():
    t = 0.02
    assert decide(1.03, 1.01, 1.05, t) == "slower"
    assert decide(1.03, 0.99, 1.07, t) == "inconclusive"  # significant? no
    assert decide(1.01, 1.005, 1.015, t) == "unchanged"  # significant but inside the band
    assert decide(1.015, 1.005, 1.025, t) == "inconclusive"  # straddles +2%
    assert decide(1.00, 0.985, 1.015, t) == "unchanged"
    assert decide(0.97, 0.95, 0.99, t) == "faster"
    assert decide(0.97, 0.95, 1.001, t) == "inconclusive"
    assert decide(math.nan, math.nan, math.nan, t) == "inconclusive"


def test_floor_turns_tiny_absolute_changes_into_unchanged():
    rng = np.random.default_rng(0)
    base = 0.010 * lognormal(rng, 100, 0.002)  # 10 us kernel
    cur = 0.010 * lognormal(rng, 100, 0.002, 0.05)  # +5% = +0.5 us
    assert compare_samples(base, cur).verdict == "slower"
    r = compare_samples(base, cur, floor=0.001)  # 1 us floor -> a 10% band
    assert r.verdict == "unchanged" and r.threshold == pytest.approx(0.1, rel=0.01)


def test_too_few_or_bad_samples_are_inconclusive():
    assert compare_samples([1.0], [1.1]).verdict == "inconclusive"
    r = compare_samples([1.0, 1.01, 0.99, 1.0, 1.02], [1.1, 1.12, 1.09, 1.1, 1.11])
    assert r.verdict == "inconclusive" and math.isnan(r.ci_low)  # n=5: no 99% interval exists
    r = compare_samples([1.0, 0.0, -1.0, float("nan"), 1.0], [1.0, 1.0])
    assert r.n_base == 2
    with pytest.raises(ValueError):
        compare_samples([1.0, 2.0], [1.0], paired=True)
    with pytest.raises(ValueError):
        compare_samples([1.0], [1.0], threshold=-0.1)


def test_deterministic_including_subsampled_inputs():
    rng = np.random.default_rng(5)
    base, cur = lognormal(rng, 2500, 0.01), lognormal(rng, 2500, 0.01, 0.02)
    a = compare_samples(base, cur, seed=1)
    assert a == compare_samples(base, cur, seed=1)
    assert "subsampled" in a.method and a.verdict == "slower"
    p = compare_samples(base, cur, paired=True, seed=1)
    assert p == compare_samples(base, cur, paired=True, seed=1) and "subsample" in p.method


def test_describe_is_one_line():
    rng = np.random.default_rng(0)
    r = compare_samples(lognormal(rng, 50, 0.005), lognormal(rng, 50, 0.005, 0.03))
    line = r.describe()
    assert line.startswith("slower +2.9") and "\n" not in line and "n=50/50" in line


def _reference_median_ci(xs, confidence):
    """The straightforward version: sort, then scipy's binomial quantile for this n alone."""
    from scipy.stats import binom

    s = sorted(xs)
    n = len(s)
    if n < 6:
        return s[0], s[-1]
    low = max(1, int(binom.ppf((1.0 - confidence) / 2, n, 0.5)))
    return s[low - 1], s[min(n - 1, n - low)]


def test_numpy_median_and_ci_agree_with_the_reference_on_random_data():
    import statistics

    from kperf_ci.sample_stats import median, median_ci

    rng = np.random.default_rng(7)
    sizes = [1, 2, 5, 6, 7, 20, 99, 100, 101, 1000, 1023, 1024, 1025, 4097, 10000]
    sizes += [int(n) for n in rng.integers(6, 12000, 40)]
    for n in sizes:
        xs = list(np.exp(rng.normal(0.0, 0.05, n)) * rng.uniform(0.005, 2.0))
        if n % 3 == 0:
            xs = [round(x, 2) for x in xs]  # ties
        assert median(xs) == pytest.approx(statistics.median(xs), rel=1e-12, abs=0)
        assert median(np.asarray(xs)) == pytest.approx(statistics.median(xs), rel=1e-12, abs=0)
        for conf in (0.95, 0.99, 0.9):
            assert median_ci(xs, conf) == _reference_median_ci(xs, conf), (n, conf)
    assert math.isnan(median([])) and all(math.isnan(v) for v in median_ci(np.array([])))
