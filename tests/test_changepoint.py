"""Change points on synthetic series: steps found, single outliers ignored, noise thresholds."""

from __future__ import annotations

import numpy as np
import pytest

from kperf_ci.judge.changepoint import (
    current_baseline,
    detect_change_points,
    noise_model,
    regime_ratios,
)


def series(rng, levels, noise=0.005, dist="normal"):
    parts = []
    for level, n in levels:
        e = rng.standard_t(3, n) * noise if dist == "t" else rng.normal(0, noise, n)
        parts.append(level * np.exp(e))
    return np.concatenate(parts)


def test_single_step_found_with_labels_medians_and_p_value():
    rng = np.random.default_rng(1)
    x = series(rng, [(1.0, 30), (1.03, 20)])
    labels = [f"run{i}" for i in range(len(x))]
    (cp,) = detect_change_points(x, labels=labels)
    assert cp.index == 30 and cp.run == "run30"
    assert cp.rel == pytest.approx(0.03, abs=0.005)
    assert cp.before_median == pytest.approx(1.0, abs=0.003)
    assert cp.after_median == pytest.approx(1.03, abs=0.003)
    assert cp.p_value <= 0.01


def test_step_recall_over_seeds():
    found = 0
    for s in range(30):
        x = series(np.random.default_rng(s), [(1.0, 25), (1.02, 15)])
        cps = detect_change_points(x, seed=s)
        found += any(abs(cp.index - 25) <= 1 for cp in cps)
    assert found >= 29


@pytest.mark.parametrize("where", [5, 20, 38])
def test_single_outlier_is_not_a_change(where):
    for s in range(10):
        x = series(np.random.default_rng(s), [(1.0, 40)])
        x[where] *= 1.5
        assert detect_change_points(x, seed=s) == [], (s, where)


def test_latest_run_alone_cannot_make_a_step():
    x = series(np.random.default_rng(2), [(1.0, 40)])
    x[-1] *= 1.3
    assert detect_change_points(x) == []


def test_false_positive_rate_on_heavy_tailed_noise():
    hits = sum(
        bool(detect_change_points(series(np.random.default_rng(100 + s), [(1.0, 40)], dist="t"), seed=s))
        for s in range(60)
    )
    assert hits <= 3  # alpha = 0.01 per split; t(3) tails


def test_two_steps_and_relevelling():
    rng = np.random.default_rng(4)
    x = series(rng, [(1.0, 30), (1.05, 20), (0.98, 20)])
    cps = detect_change_points(x)
    assert [cp.index for cp in cps] == [30, 50]
    assert cps[0].rel > 0.04 and cps[1].rel < -0.05
    start, level = current_baseline(x, cps)
    assert start == 50 and level == pytest.approx(0.98, abs=0.004)
    assert current_baseline(x[:30], []) == (0, pytest.approx(float(np.median(x[:30]))))


def test_min_rel_drops_small_steps():
    rng = np.random.default_rng(5)
    x = series(rng, [(1.0, 30), (1.01, 30), (1.06, 30)], noise=0.001)
    assert len(detect_change_points(x)) == 2
    (cp,) = detect_change_points(x, min_rel=0.02)
    assert cp.index == 60 and cp.rel == pytest.approx(0.05, abs=0.005)


def test_deterministic_and_input_checks():
    x = series(np.random.default_rng(6), [(1.0, 20), (1.04, 20)])
    assert detect_change_points(x, seed=3) == detect_change_points(x, seed=3)
    assert detect_change_points([1.0, 2.0]) == []
    with pytest.raises(ValueError):
        detect_change_points([1.0, -1.0, 1.0, 1.0, 1.0, 1.0])
    (cp,) = detect_change_points([0.0, -0.1, 0.1] * 4 + [5.0, 5.1, 4.9] * 4, log=False)
    assert cp.index == 12
    with pytest.raises(ValueError):
        detect_change_points(x, labels=["a"])


def test_noise_model_scales_with_aa_spread():
    rng = np.random.default_rng(0)
    quiet = np.exp(rng.normal(0, 0.001, 100))
    loud = np.exp(rng.normal(0, 0.01, 100))
    tq, tl = noise_model(quiet), noise_model(loud)
    assert tq == pytest.approx(0.004, abs=0.001)  # 4 sigma, rounded up to 0.1%
    assert tl == pytest.approx(0.04, abs=0.006)
    assert noise_model([1.0, 1.001]) == 0.02  # too few: the default
    assert noise_model([1.0] * 50) == 0.002  # never below the minimum
    # a systematic A/A bias counts as noise
    assert noise_model(np.full(20, 1.01)) >= 0.04


def test_regime_ratios_ignore_steps():
    rng = np.random.default_rng(8)
    x = series(rng, [(1.0, 30), (1.2, 30)], noise=0.002)
    cps = detect_change_points(x)
    r = regime_ratios(x, cps)
    assert len(r) == 60 and noise_model(r) < 0.02
    assert noise_model(regime_ratios(x, [])) > 0.2  # without the step the noise looks huge
