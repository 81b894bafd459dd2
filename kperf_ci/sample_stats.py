"""Plain statistics of timing samples, for every stage that measures or judges: one sample
set's median and the distribution-free interval of that median (:func:`median_ci`, the timing
loop's stop rule), and :class:`SampleComparison`, the record of two sets compared. The rule that
compares them is the judge's (:func:`kperf_ci.judge.stats.compare_samples`); capture reads these
without asking the judge.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from kperf_ci.metrics import TimingVerdict

__all__ = ["SampleComparison", "StopRule", "median", "median_ci"]


@dataclass(frozen=True)
class SampleComparison:
    verdict: TimingVerdict  # the vocabulary of kperf_ci.metrics
    ratio: float  # effect as cur / base (Hodges-Lehmann shift of log times, exponentiated)
    ci_low: float  # confidence interval of ratio
    ci_high: float
    rel: float  # ratio - 1
    n_base: int
    n_cur: int
    method: str
    confidence: float = 0.99
    threshold: float = 0.02  # the effective relative band used for the verdict (floor included)

    def to_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        """One line, e.g. ``slower +3.1% [+2.8%, +3.4%] (99% CI, n=50/50)``."""
        if math.isnan(self.ratio):
            return f"{self.verdict} (n={self.n_base}/{self.n_cur})"
        lo = "?" if math.isnan(self.ci_low) else f"{self.ci_low - 1:+.2%}"
        hi = "?" if math.isnan(self.ci_high) else f"{self.ci_high - 1:+.2%}"
        return (
            f"{self.verdict} {self.rel:+.2%} [{lo}, {hi}] "
            f"({self.confidence:.0%} CI, n={self.n_base}/{self.n_cur}, threshold {self.threshold:.2%})"
        )


#: When an interleaved A/B may stop: all pairs so far (base ms, head ms) -> (their comparison,
#: settled?). The judge makes one (:func:`kperf_ci.judge.ab.stop_rule`); the measurement stage
#: hands it to the timing loop (:func:`kperf_ci.capture.timing.interleaved.adaptive_ab`).
StopRule = Callable[[Sequence[float], Sequence[float]], tuple[SampleComparison, bool]]


def median(xs: Sequence[float] | np.ndarray) -> float:
    """The median of ``xs``; NaN when there is none (numpy: the timing loop asks for it on
    thousands of samples after every round)."""
    a = np.asarray(xs, dtype=np.float64)
    return float(np.median(a)) if a.size else math.nan


# confidence -> lower_rank[n]: 1-based rank of the lower bound of the median's interval for n
# samples, for every n below the table's length. scipy's binom.ppf costs ~1 ms a call, and the
# timing loop asked for a new n after every round (8,423 calls, 8.6 s, in 16 tests on an H100
# host); one vectorized call gives the same quantiles for all n at once.
_RANKS: dict[float, np.ndarray] = {}


def _lower_rank(n: int, confidence: float) -> int:
    table = _RANKS.get(confidence)
    if table is None or len(table) <= n:
        # here, not at the top: importing scipy.stats costs a second or more, and only a timing
        # loop on a GPU needs it
        from scipy.stats import binom  # noqa: PLC0415

        size = max(1024, 1 << int(n).bit_length())  # the next power of two above n
        with np.errstate(all="ignore"):
            table = binom.ppf((1.0 - confidence) / 2, np.arange(size), 0.5)
        _RANKS[confidence] = table
    return int(table[n])


def median_ci(xs: Sequence[float] | np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free confidence interval of the median from order statistics (the timing
    loop's stop rule).

    The number of samples below the median is Binomial(n, 1/2); the interval is
    [x_(j), x_(k)] with j, k its exact binomial quantiles. Fewer than 6 samples: [min, max].
    """
    a = np.asarray(xs, dtype=np.float64)
    n = a.size
    if n == 0:
        return math.nan, math.nan
    if n < 6:
        return float(a.min()), float(a.max())
    low = max(1, _lower_rank(n, confidence))  # 1-based rank of the lower order statistic
    j = low - 1  # 0-based; the upper bound is the symmetric rank n - low + 1
    k = min(n - 1, n - low)
    part = np.partition(a, (j, k))  # two order statistics without a full sort
    return float(part[j]), float(part[k])
