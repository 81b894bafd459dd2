"""Compare two runs: match variants, diff every metric, decide what is a regression.

Rules (see METRICS.md): default static thresholds, overridden by ``[tool.kperf.thresholds]``,
overridden by the marker's ``thresholds=`` stored with the CURRENT run's variant. Timing is
decided on the raw samples (``compare_timing``), never on two medians alone when samples exist.
Metrics are only compared when the two machines make them comparable (fingerprint.comparable).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .archs import MAX_SHARED_PER_BLOCK
from .fingerprint import incomparable_reason
from .model import Better, Metric, RunInfo, RunRecord, VariantKey, VariantResult
from .units import fmt_value

__all__ = [
    "DEFAULT_THRESHOLDS",
    "SHARED_LIMITS",
    "ThresholdPolicy",
    "MetricChange",
    "Comparison",
    "compare_runs",
    "compare_timing",
    "direction_of",
]

Direction = Literal["better", "worse", "same", "n/a"]
TimingVerdict = Literal["slower", "faster", "unchanged", "inconclusive"]

#: Relative increase that fails, per metric; "spills" is absolute bytes allowed; "time" is the
#: relative slowdown of time.median.
DEFAULT_THRESHOLDS: dict[str, float] = {
    "spills": 0.0,
    "registers": 0.10,
    "sass.instructions": 0.05,
    "time": 0.05,
}
ABSOLUTE_KEYS = frozenset({"spills"})

#: Max dynamic shared memory per block (opt-in), bytes, by arch name. shared_bytes above it
#: cannot launch.
SHARED_LIMITS: dict[str, int] = {f"sm_{cap}": limit for cap, limit in MAX_SHARED_PER_BLOCK.items()}

# Which way is good, by metric name; the table wins over Metric.better for the names it knows.
_BETTER_EXACT: dict[str, Better] = {
    "registers": "lower",
    "spills": "lower",
    "stack_bytes": "lower",
    "local_bytes": "lower",
    "shared_bytes": "lower",
    "num_warps": "none",
    "num_stages": "none",
    "cubin_bytes": "lower",
    "ptx.instructions": "lower",
    "sass.instructions": "lower",
    "time.cv": "none",
    "time.stddev": "none",
    "time.iqr": "lower",
    "analysis.sm_utilization": "higher",
    "analysis.wave_tail": "lower",
}


def direction_of(name: str, fallback: Better = "lower") -> Better:
    """Which way is better for a metric: the table above, then patterns, then ``fallback``."""
    if name in _BETTER_EXACT:
        return _BETTER_EXACT[name]
    if name.startswith(("sass.", "ptx.")):  # instruction classes: a mix, neither good nor bad
        return "none"
    if name.startswith("time."):
        return "lower"
    if name.startswith("region."):
        return "none" if name.endswith(".fraction") else "lower"
    return fallback


# --------------------------------------------------------------------------- timing


def compare_timing(
    base_samples: Sequence[float], cur_samples: Sequence[float], threshold: float, floor_ms: float
) -> tuple[TimingVerdict, float, tuple[float, float]]:
    """Verdict on two sets of timing samples (ms): (verdict, rel change, CI of the ratio cur/base).

    Uses ``kperf_ci.stats.compare_samples`` when that module is present; otherwise a ratio of
    medians with a seeded bootstrap interval and a Mann-Whitney test. "slower" needs all of:
    the ratio above 1 + threshold, the test saying different, and |delta| above ``floor_ms``.
    """
    try:
        from . import stats  # noqa: PLC0415 - optional, better statistics
    except ImportError:
        stats = None
    if stats is not None and hasattr(stats, "compare_samples"):
        r = stats.compare_samples(base_samples, cur_samples, threshold=threshold, floor=floor_ms)
        return r.verdict, r.rel, (r.ci_low, r.ci_high)
    return _compare_timing_fallback(base_samples, cur_samples, threshold, floor_ms)


def _compare_timing_fallback(
    base_samples: Sequence[float], cur_samples: Sequence[float], threshold: float, floor_ms: float
) -> tuple[TimingVerdict, float, tuple[float, float]]:
    import numpy as np  # noqa: PLC0415
    from scipy.stats import mannwhitneyu  # noqa: PLC0415

    b = np.asarray([x for x in base_samples if x > 0 and math.isfinite(x)], dtype=float)
    c = np.asarray([x for x in cur_samples if x > 0 and math.isfinite(x)], dtype=float)
    if len(b) < 2 or len(c) < 2:
        return "inconclusive", math.nan, (math.nan, math.nan)
    mb, mc = float(np.median(b)), float(np.median(c))
    ratio = mc / mb
    rng = np.random.default_rng(0)
    boots = np.median(rng.choice(c, (1000, len(c))), axis=1) / np.median(
        rng.choice(b, (1000, len(b))), axis=1
    )
    lo, hi = (float(v) for v in np.quantile(boots, [0.005, 0.995]))
    p = float(mannwhitneyu(b, c, alternative="two-sided").pvalue)
    different = p < 0.01 and (lo > 1 or hi < 1)
    big = abs(ratio - 1) > threshold and abs(mc - mb) > floor_ms
    if different and big:
        verdict: TimingVerdict = "slower" if ratio > 1 else "faster"
    elif lo > 1 - threshold and hi < 1 + threshold or abs(mc - mb) <= floor_ms and p >= 0.01:
        verdict = "unchanged"
    else:
        verdict = "inconclusive"
    return verdict, ratio - 1, (lo, hi)


# --------------------------------------------------------------------------- policy


@dataclass(frozen=True)
class ThresholdPolicy:
    """Project thresholds on top of the defaults; markers (per variant) win over both."""

    thresholds: dict[str, float] = field(default_factory=dict)  # [tool.kperf.thresholds]
    time_floor_ms: float = 0.001
    defaults: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_THRESHOLDS))
    timing: Callable[..., tuple[TimingVerdict, float, tuple[float, float]]] = compare_timing

    @classmethod
    def from_settings(cls, settings: Any) -> ThresholdPolicy:
        return cls(thresholds=dict(settings.thresholds or {}), time_floor_ms=float(settings.time_floor_ms))

    def threshold(self, metric: str, marker: dict[str, Any] | None = None) -> tuple[float | None, str]:
        """(threshold, where it came from) for a metric; None when nothing applies.

        Within each level the exact metric name wins over the "time" key for time.median.
        """
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


# --------------------------------------------------------------------------- results


@dataclass
class MetricChange:
    variant: VariantKey
    metric: str
    base: float | None
    current: float | None
    delta: float | None
    rel: float | None  # delta / base; None when base is 0 (or missing)
    direction: Direction
    regression: bool
    reason: str
    kind: str = "static"
    unit: str = ""
    threshold: float | None = None
    threshold_source: str = ""
    ci: tuple[float, float] | None = None  # time.median: CI of the ratio cur/base
    verdict: str | None = None  # time.median: slower/faster/unchanged/inconclusive

    @property
    def changed(self) -> bool:
        return self.regression or self.direction in ("better", "worse")

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "variant"}
        d["variant"] = {
            "id": self.variant.id,
            "kernel": self.variant.kernel,
            "arch": self.variant.arch,
            "spec": self.variant.spec,
            "config": self.variant.config,
            "test": self.variant.test,
        }
        d = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in d.items()}
        if self.ci is not None:
            d["ci"] = [None if math.isnan(v) else v for v in self.ci]
        return d


@dataclass
class Incomparable:
    variant: VariantKey
    kind: str
    reason: str


@dataclass
class Comparison:
    baseline: RunInfo
    current: RunInfo
    changes: list[MetricChange] = field(default_factory=list)
    added: list[VariantKey] = field(default_factory=list)
    removed: list[VariantKey] = field(default_factory=list)
    rematched: list[tuple[VariantKey, VariantKey]] = field(default_factory=list)  # (base, current)
    incomparable: list[Incomparable] = field(default_factory=list)

    @property
    def regressions(self) -> list[MetricChange]:
        return [c for c in self.changes if c.regression]

    @property
    def improvements(self) -> list[MetricChange]:
        return [c for c in self.changes if c.direction == "better" and not c.regression]

    @property
    def exit_code(self) -> int:
        return 1 if self.regressions else 0

    def sorted_changes(self, *, all: bool = False) -> list[MetricChange]:
        """Worst first: regressions, then worse, better, the rest; larger relative moves first."""
        rows = self.changes if all else [c for c in self.changes if c.changed]
        order = {"worse": 1, "better": 2, "same": 3, "n/a": 3}

        def key(c: MetricChange) -> tuple:
            mag = abs(c.rel) if c.rel is not None and not math.isnan(c.rel) else math.inf
            return (0 if c.regression else order[c.direction], -mag, c.variant.label(), c.metric)

        return sorted(rows, key=key)

    def to_dict(self, *, all: bool = True) -> dict[str, Any]:
        def k(v: VariantKey) -> dict:
            return {"id": v.id, "kernel": v.kernel, "arch": v.arch, "spec": v.spec, "config": v.config}

        return {
            "baseline": self.baseline.run_id,
            "current": self.current.run_id,
            "exit_code": self.exit_code,
            "regressions": len(self.regressions),
            "improvements": len(self.improvements),
            "changes": [c.to_dict() for c in self.sorted_changes(all=all)],
            "added": [k(v) for v in self.added],
            "removed": [k(v) for v in self.removed],
            "rematched": [{"base": k(b), "current": k(c)} for b, c in self.rematched],
            "incomparable": [
                {"variant": k(i.variant), "kind": i.kind, "reason": i.reason} for i in self.incomparable
            ],
        }


# --------------------------------------------------------------------------- comparing


def _match(
    base: list[VariantResult], cur: list[VariantResult]
) -> tuple[list[tuple[VariantResult, VariantResult, bool]], list[VariantResult], list[VariantResult]]:
    """Pairs (base, current, rematched), removed, added. By id; then by (kernel, arch, config)
    when exactly one unmatched variant on each side shares it (the specialization changed)."""
    by_id = {r.key.id: r for r in base}
    pairs: list[tuple[VariantResult, VariantResult, bool]] = []
    unmatched_cur = []
    for r in cur:
        b = by_id.pop(r.key.id, None)
        if b is not None:
            pairs.append((b, r, False))
        else:
            unmatched_cur.append(r)

    def loose(r: VariantResult) -> tuple[str, str, str]:
        return (r.key.kernel, r.key.arch, r.key.config)

    left: dict[tuple, list[VariantResult]] = {}
    for b in by_id.values():
        left.setdefault(loose(b), []).append(b)
    cur_groups: dict[tuple, list[VariantResult]] = {}
    for r in unmatched_cur:
        cur_groups.setdefault(loose(r), []).append(r)
    added = []
    for lk, rs in cur_groups.items():
        bs = left.get(lk, [])
        if len(rs) == 1 and len(bs) == 1:
            pairs.append((bs[0], rs[0], True))
            del left[lk]
        else:
            added.extend(rs)
    removed = [b for bs in left.values() for b in bs]
    return pairs, removed, added


def _static_change(
    b: Metric, c: Metric, key: VariantKey, policy: ThresholdPolicy, marker: dict[str, Any]
) -> MetricChange:
    delta = c.value - b.value
    rel = delta / b.value if b.value else (0.0 if delta == 0 else None)
    better = direction_of(c.name, c.better)
    if delta == 0:
        direction: Direction = "same"
    elif better == "none":
        direction = "n/a"
    else:
        direction = "better" if (delta < 0) == (better == "lower") else "worse"
    threshold, source = policy.threshold(c.name, marker)
    regression, reason = False, ""
    unit = c.unit or b.unit
    if c.name == "shared_bytes":
        arch = key.arch.rstrip("af") if key.arch.startswith("sm_") else key.arch
        limit = SHARED_LIMITS.get(arch)
        if limit is not None and c.value > limit:
            regression, reason = True, f"shared_bytes {int(c.value)} above the {arch} limit of {limit} bytes"
    if not regression and threshold is not None and delta > 0 and better == "lower":
        if c.name in ABSOLUTE_KEYS:
            if delta > threshold:
                regression = True
                reason = (
                    f"{c.name} +{fmt_value(delta, unit)} > {fmt_value(threshold, unit)} allowed ({source})"
                )
        elif rel is None or rel > threshold:
            regression = True
            shown = "from 0" if rel is None else f"{rel:+.1%}"
            reason = f"{c.name} {shown} > +{threshold:.0%} ({source})"
    elif not regression and threshold is not None and delta < 0 and better == "higher":
        if rel is not None and -rel > threshold:  # e.g. analysis.sm_utilization dropping
            regression = True
            reason = f"{c.name} {rel:+.1%} < -{threshold:.0%} ({source})"
    if not reason and direction in ("better", "worse"):
        reason = (
            f"{c.name} {rel:+.1%}"
            if rel is not None
            else f"{c.name} {fmt_value(b.value, unit)} -> {fmt_value(c.value, unit)}"
        )
        if threshold is not None and direction == "worse":
            reason += f" within +{threshold:.0%} ({source})" if c.name not in ABSOLUTE_KEYS else ""
    return MetricChange(
        key,
        c.name,
        b.value,
        c.value,
        delta,
        rel,
        direction,
        regression,
        reason,
        c.kind,
        unit,
        threshold,
        source,
    )


def _time_change(
    b: Metric,
    c: Metric,
    base: VariantResult,
    cur: VariantResult,
    policy: ThresholdPolicy,
    marker: dict[str, Any],
) -> MetricChange:
    ch = _static_change(b, c, cur.key, policy, {})  # direction and deltas; regression decided below
    threshold, source = policy.threshold(c.name, marker)
    ch.threshold, ch.threshold_source, ch.regression, ch.reason = threshold, source, False, ""
    if c.name != "time.median":
        if ch.direction in ("better", "worse"):  # summary statistics: time.median carries the verdict
            ch.direction, ch.reason = "n/a", "see time.median"
        return ch
    if threshold is None:
        return ch
    if len(base.samples) >= 2 and len(cur.samples) >= 2:
        verdict, rel, ci = policy.timing(base.samples, cur.samples, threshold, policy.time_floor_ms)
        ch.verdict, ch.ci = verdict, ci
        ch.regression = verdict == "slower"
        lo, hi = ci
        ci_s = "" if math.isnan(lo) or math.isnan(hi) else f" [{lo - 1:+.1%}, {hi - 1:+.1%}]"
        rel_s = "" if math.isnan(rel) else f" {rel:+.1%}"
        ch.reason = (
            f"time {verdict}{rel_s}{ci_s} (threshold +{threshold:.0%} {source}, "
            f"floor {policy.time_floor_ms:g} ms, n={len(base.samples)}/{len(cur.samples)})"
        )
        # The sample-based verdict decides the direction too: noise is not "worse".
        ch.direction = {"slower": "worse", "faster": "better"}.get(verdict, "same")
        ch.reason += _method_note(base, cur)
    else:
        rel = ch.rel
        big = rel is not None and rel > threshold and (ch.delta or 0) > policy.time_floor_ms
        ch.regression = bool(big)
        shown = "n/a" if rel is None else f"{rel:+.1%}"
        ch.reason = f"time.median {shown} (no samples; medians only; threshold +{threshold:.0%} {source})"
    return ch


def _method_note(base: VariantResult, cur: VariantResult) -> str:
    """Graph replay leaves out host time that plain events can include (on an H100 host a
    matmul read 0.1659 ms with events and 0.1676 ms replayed): say so when the method changed."""
    b, c = base.metric("time.graph"), cur.metric("time.graph")
    if b is None or c is None or b.value == c.value:
        return ""
    name = {0.0: "events", 1.0: "graph replay"}
    return (
        f"; timing method changed ({name.get(b.value, '?')} -> {name.get(c.value, '?')}): part of the "
        "change may be the method, not the kernel (`kperf ab` times both sides alike)"
    )


def compare_runs(
    baseline: RunRecord, current: RunRecord, policy: ThresholdPolicy | None = None
) -> Comparison:
    """Diff ``current`` against ``baseline`` metric by metric (see module docstring)."""
    policy = policy or ThresholdPolicy()
    comp = Comparison(baseline=baseline.info, current=current.info)
    pairs, removed, added = _match(baseline.results, current.results)
    comp.removed = [r.key for r in removed]
    comp.added = [r.key for r in added]
    fb, fc = baseline.info.fingerprint, current.info.fingerprint
    for base, cur, rematched in pairs:
        if rematched:
            comp.rematched.append((base.key, cur.key))
        if cur.error and not base.error:
            comp.changes.append(
                MetricChange(
                    cur.key, "error", None, None, None, None, "worse", True, f"now fails: {cur.error}"
                )
            )
            continue
        marker = cur.thresholds or {}
        base_metrics = {m.name: m for m in base.metrics}
        seen_kinds: set[str] = set()
        for c in cur.metrics:
            why = incomparable_reason(fb, fc, c.kind)
            if why:
                if c.kind not in seen_kinds:
                    comp.incomparable.append(Incomparable(cur.key, c.kind, why))
                    seen_kinds.add(c.kind)
                continue
            b = base_metrics.pop(c.name, None)
            if b is None:
                comp.changes.append(
                    MetricChange(
                        cur.key, c.name, None, c.value, None, None, "n/a", False, "new metric", c.kind, c.unit
                    )
                )
                continue
            if c.kind == "time":
                ch = _time_change(b, c, base, cur, policy, marker)
            else:
                ch = _static_change(b, c, cur.key, policy, marker)
            if ch.regression and not gated(c.name, marker.get("metrics")):
                ch.regression = False
                ch.reason += f" (not gated: the marker's metrics= lists {', '.join(marker['metrics'])})"
            if rematched:
                ch.reason = (ch.reason + "; " if ch.reason else "") + (
                    f"specialization changed ({base.key.spec or '-'} -> {cur.key.spec or '-'})"
                )
            comp.changes.append(ch)
        for b in base_metrics.values():
            if incomparable_reason(fb, fc, b.kind) is None:
                comp.changes.append(
                    MetricChange(
                        cur.key,
                        b.name,
                        b.value,
                        None,
                        None,
                        None,
                        "n/a",
                        False,
                        "metric gone",
                        b.kind,
                        b.unit,
                    )
                )
    return comp
