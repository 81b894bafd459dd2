"""Threshold policy of a comparison: which threshold applies to a metric (the catalogue's
default, ``[tool.kperf.thresholds]``, the marker's ``thresholds=``), which metrics a marker
gates, and the timing verdict on raw samples (:func:`compare_timing`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..config import Settings
from ..metrics import DEFAULT_THRESHOLDS, TimingVerdict
from . import stats

__all__ = ["ThresholdPolicy", "compare_timing", "gated"]


def compare_timing(
    base_samples: Sequence[float], cur_samples: Sequence[float], threshold: float, floor_ms: float
) -> tuple[TimingVerdict, float, tuple[float, float]]:
    """Verdict on two sets of timing samples (ms): (verdict, rel change, CI of the ratio cur/base),
    by :func:`kperf_ci.judge.stats.compare_samples` (the rule is in its module docstring)."""
    r = stats.compare_samples(base_samples, cur_samples, threshold=threshold, floor=floor_ms)
    return r.verdict, r.rel, (r.ci_low, r.ci_high)


@dataclass(frozen=True)
class ThresholdPolicy:
    """Project thresholds on top of the defaults; markers (per variant) win over both."""

    thresholds: dict[str, float] = field(default_factory=dict)  # [tool.kperf.thresholds]
    time_floor_ms: float = Settings.time_floor_ms
    defaults: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_THRESHOLDS))
    timing: Callable[..., tuple[TimingVerdict, float, tuple[float, float]]] = compare_timing

    @classmethod
    def from_settings(cls, settings: Any) -> ThresholdPolicy:
        return cls(thresholds=dict(settings.thresholds or {}), time_floor_ms=float(settings.time_floor_ms))

    def threshold(self, metric: str, marker: dict[str, Any] | None = None) -> tuple[float | None, str]:
        """(threshold, where it came from) for a metric; None when nothing applies.

        Within each level the exact metric name wins over the "time" key for time.median.
        """
        if not marker:  # the usual case, asked once per metric of every variant: remembered
            cache = self.__dict__.setdefault("_no_marker", {})
            if metric not in cache:
                cache[metric] = self._threshold(metric, None)
            return cache[metric]
        return self._threshold(metric, marker)

    def _threshold(self, metric: str, marker: dict[str, Any] | None) -> tuple[float | None, str]:
        keys = [metric] + (["time"] if metric == "time.median" else [])
        for source, table in (("marker", marker or {}), ("[tool.kperf.thresholds]", self.thresholds)):
            for k in keys:
                if k in table and table[k] is not None:
                    return float(table[k]), source
        for k in keys:
            if k in self.defaults:
                return self.defaults[k], "default"
        return None, ""


def gated(metric: str, selection: Any) -> bool:
    """Whether a metric may fail the check, given a marker's `metrics=[...]` (None = all).

    An entry names a metric ("registers") or a family by its prefix ("time", "sass", "region").
    """
    if not selection:
        return True
    return any(metric == s or metric.startswith(f"{s}.") for s in selection)
