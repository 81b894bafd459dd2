"""Compare two runs: match variants, diff every metric, decide what is a regression.

Rules (docs/METRICS.md, generated from :mod:`kperf_ci.metrics`): each metric's direction and
default threshold come from the catalogue, overridden by ``[tool.kperf.thresholds]``, overridden
by the marker's ``thresholds=`` stored with the CURRENT run's variant (:mod:`.policy`). Timing is
decided on the raw samples (``compare_timing``), never on two medians alone when samples exist.
Metrics are only compared when the two machines make them comparable (fingerprint.comparable).

Variants pair by :func:`kperf_ci.judge.matching.match_variants` (exact key; then the same
kernel/arch/test; then the same launch site or kernel when unambiguous; past the exact key only
within one problem: test parameters and argument sizes), so a launch-option or
constexpr change is one "changed" variant judged on its metrics, not one added and one removed.
A GPU-mode run meets a static baseline through the compute capability of its GPU (static metrics
only). A comparison (:mod:`.comparison`) in which fewer than MIN_COMPARED_FRACTION of the
current variants were compared has the status "no comparable baseline": consumers say so
instead of "no regressions", and nothing in it fails (exit 0 with the reason, never a red 1).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..fingerprint import incomparable_reason
from ..hardware import MAX_SHARED_PER_BLOCK
from ..metrics import (
    ABSOLUTE_KEYS,
    Change,
    change_of,
    direction_of,
    display_name,
    spec,
    timing_change,
)
from ..model import Metric, RunInfo, RunRecord, VariantKey, VariantResult
from ..units import fmt_value
from .comparison import COMPARED, Comparison, Incomparable, KeyChange, MetricChange, NotRun
from .group import KernelIndex
from .matching import VariantPair, arch_class, match_variants
from .policy import ThresholdPolicy, gated
from .verdict import is_regression

__all__ = ["SHARED_LIMITS", "compare_runs"]

#: Max dynamic shared memory per block (opt-in), bytes, by arch name. shared_bytes above it
#: cannot launch.
SHARED_LIMITS: dict[str, int] = {f"sm_{cap}": limit for cap, limit in MAX_SHARED_PER_BLOCK.items()}
#: The absolute limits a catalogue entry can name (MetricSpec.limit), by arch name.
_LIMITS: dict[str, dict[str, int]] = {"max_shared_per_block": SHARED_LIMITS}


# --------------------------------------------------------------------------- comparing


def _static_change(
    b: Metric, c: Metric, key: VariantKey, policy: ThresholdPolicy, marker: dict[str, Any]
) -> MetricChange:
    delta = c.value - b.value
    rel = delta / b.value if b.value else (0.0 if delta == 0 else None)
    better = direction_of(c.name, c.better)  # the catalogue wins over what the run stored
    direction = change_of(better, b.value, c.value)
    threshold, source = policy.threshold(c.name, marker)
    regression, reason = False, ""
    unit = c.unit or b.unit
    s = spec(c.name)
    shown_name = display_name(c.name)  # the reason is prose: "shared memory", never "shared_bytes"
    if s is not None and s.limit:
        arch = key.arch.rstrip("af") if key.arch.startswith("sm_") else key.arch
        limit = _LIMITS[s.limit].get(arch)
        if limit is not None and c.value > limit:
            over = f"{fmt_value(c.value, s.unit)} above the {arch} limit of {fmt_value(limit, s.unit)}"
            regression, reason = True, f"{shown_name} {over}"
    if not regression and threshold is not None and delta > 0 and better == "lower":
        if c.name in ABSOLUTE_KEYS:
            if delta > threshold:
                regression = True
                allowed = f"{fmt_value(threshold, unit)} allowed ({source})"
                reason = f"{shown_name} +{fmt_value(delta, unit)} > {allowed}"
        elif rel is None or rel > threshold:
            regression = True
            shown = "from 0" if rel is None else f"{rel:+.1%}"
            reason = f"{shown_name} {shown} > +{threshold:.0%} ({source})"
    elif not regression and threshold is not None and delta < 0 and better == "higher":
        if rel is not None and -rel > threshold:  # e.g. analysis.sm_utilization dropping
            regression = True
            reason = f"{shown_name} {rel:+.1%} < -{threshold:.0%} ({source})"
    if not reason and direction in ("better", "worse"):
        reason = (
            f"{shown_name} {rel:+.1%}"
            if rel is not None
            else f"{shown_name} {fmt_value(b.value, unit)} -> {fmt_value(c.value, unit)}"
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
    threshold, source = policy.threshold(c.name, marker)
    if c.name != "time.median":  # summary statistics: time.median carries the verdict
        delta = c.value - b.value
        rel = delta / b.value if b.value else (0.0 if delta == 0 else None)
        direction: Change = "same" if delta == 0 else "n/a"
        return MetricChange(
            cur.key,
            c.name,
            b.value,
            c.value,
            delta,
            rel,
            direction,
            False,
            "" if delta == 0 or direction_of(c.name, c.better) == "none" else "see time.median",
            c.kind,
            c.unit or b.unit,
            threshold,
            source,
        )
    ch = _static_change(b, c, cur.key, policy, {})  # direction and deltas; regression decided below
    ch.threshold, ch.threshold_source, ch.regression, ch.reason = threshold, source, False, ""
    if threshold is None:
        return ch
    if len(base.samples) >= 2 and len(cur.samples) >= 2:
        verdict, rel, ci = policy.timing(base.samples, cur.samples, threshold, policy.time_floor_ms)
        ch.verdict, ch.ci = verdict, ci
        ch.regression = is_regression(verdict)
        lo, hi = ci
        ci_s = "" if math.isnan(lo) or math.isnan(hi) else f" [{lo - 1:+.1%}, {hi - 1:+.1%}]"
        rel_s = "" if math.isnan(rel) else f" {rel:+.1%}"
        ch.reason = (
            f"time {verdict}{rel_s}{ci_s} (threshold +{threshold:.0%} {source}, "
            f"floor {policy.time_floor_ms:g} ms, n={len(base.samples)}/{len(cur.samples)})"
        )
        # The sample-based verdict decides the direction too: noise is not "worse".
        ch.direction = timing_change(verdict)
        ch.reason += _method_note(base, cur)
    else:
        rel = ch.rel
        big = rel is not None and rel > threshold and (ch.delta or 0) > policy.time_floor_ms
        ch.regression = bool(big)
        shown = "n/a" if rel is None else f"{rel:+.1%}"
        medians = f"(no samples; medians only; threshold +{threshold:.0%} {source})"
        ch.reason = f"{display_name(c.name)} {shown} {medians}"
    return ch


def timing_method(v: VariantResult) -> str | None:
    """How a variant's time was measured, from its flags: "cupti" (kernel durations), "graph
    replay", "events"; None for a variant with neither flag (an import, a run before them).
    A run whose calls followed an L2 flush by reading adds ", L2 read-flushed": a run before
    ``time.l2_read_flush`` flushed by zeroing, and timed the flushed lines' write-back with the
    kernel."""
    cupti, graph = v.metric("time.cupti"), v.metric("time.graph")
    if cupti is not None and cupti.value == 1.0:
        method = "cupti"
    elif graph is None:
        return None
    else:
        method = "graph replay" if graph.value == 1.0 else "events"
    flushed = v.metric("time.l2_read_flush")
    if flushed is not None and flushed.value == 1.0:
        method += ", L2 read-flushed"
    return method


def _method_note(base: VariantResult, cur: VariantResult) -> str:
    """Graph replay leaves out host time that plain events can include (on an H100 host a
    matmul read 0.1659 ms with events and 0.1676 ms replayed), and CUPTI kernel durations leave
    out the launch (2-3 us on an H100): say so when the method changed."""
    b, c = timing_method(base), timing_method(cur)
    if b is None or c is None or b == c:
        return ""
    return (
        f"; timing method changed ({b} -> {c}): part of the "
        "change may be the method, not the kernel (`kperf ab` times both sides alike)"
    )


def compare_runs(
    baseline: RunRecord,
    current: RunRecord,
    policy: ThresholdPolicy | None = None,
    *,
    allow_removed: bool = False,
) -> Comparison:
    """Diff ``current`` against ``baseline`` metric by metric (see module docstring).

    Variants pair as :func:`match_variants` says; a pair matched across a key change is judged
    like any other and its changes carry the description. Across modes (a GPU run against a
    static baseline) only static metrics compare: they come from the same compiler for the same
    target, while timings need the same GPU. A baseline variant missing from this run is
    "removed" (exit 1 unless ``allow_removed``) when this run ran its test for its arch in the
    same mode; else it is "not run".
    """
    policy = policy or ThresholdPolicy()
    ctx = _Context(baseline.info, current.info, policy)
    comp = Comparison(
        baseline=baseline.info,
        current=current.info,
        allow_removed=allow_removed,
        current_variants=len(current.results),
        shared_tests=len({r.key.test for r in current.results} & {r.key.test for r in baseline.results}),
    )
    m = match_variants(baseline.results, current.results, base_info=baseline.info, cur_info=current.info)
    comp.added = [r.key for r in m.added]
    comp.kernels = KernelIndex.build(current.results, m.removed)
    _sort_removed(comp, m.removed, current.results, ctx)
    for pair in m.pairs:
        _compare_pair(comp, pair, ctx)
    if comp.status != COMPARED:
        _not_judged(comp)
    return comp


@dataclass
class _Context:
    """What every pair of variants is judged against: the two runs' info, the policy, and the
    incomparable reason of each metric kind (same two fingerprints, so asked once per kind)."""

    base_info: RunInfo
    cur_info: RunInfo
    policy: ThresholdPolicy
    why_kind: dict[str, str | None] = field(default_factory=dict)

    @property
    def cross_mode(self) -> bool:
        return self.base_info.mode != self.cur_info.mode

    def kind_reason(self, kind: str) -> str | None:
        """Why metrics of ``kind`` do not compare between these two fingerprints, or None."""
        if kind not in self.why_kind:
            self.why_kind[kind] = incomparable_reason(
                self.base_info.fingerprint, self.cur_info.fingerprint, kind
            )
        return self.why_kind[kind]


def _sort_removed(
    comp: Comparison, removed: list[VariantResult], current: list[VariantResult], ctx: _Context
) -> None:
    """Step 1: a baseline variant missing from this run is "removed" when this run ran its test
    for its arch in the same mode, else "not run" with the reason."""
    fb, fc = ctx.base_info.fingerprint, ctx.cur_info.fingerprint
    ran_tests = {r.key.test for r in current if r.key.test}
    built = {arch_class(r.key.arch, fc) for r in current}
    for r in removed:
        arch = arch_class(r.key.arch, fb)
        if arch not in built:
            comp.not_run.append(NotRun(r.key, f"this run built no {arch} variants"))
        elif not r.key.test or r.key.test not in ran_tests:
            comp.not_run.append(NotRun(r.key, "its test did not run (deselected, renamed or deleted)"))
        elif ctx.cross_mode:
            # Static mode compiles every autotune config; GPU mode captures only what ran.
            comp.not_run.append(
                NotRun(
                    r.key, f"not captured in {ctx.cur_info.mode} mode (baseline: {ctx.base_info.mode} mode)"
                )
            )
        else:
            comp.removed.append(r.key)


def _compare_pair(comp: Comparison, pair: VariantPair, ctx: _Context) -> None:
    """Step 2, one matched pair: a new error, else each metric of the current variant against
    the baseline's (new metrics, incomparable kinds and metrics gone are listed, not judged)."""
    base, cur = pair.base, pair.current
    if pair.rematched:
        comp.rematched.append((base.key, cur.key))
    if pair.change:
        comp.key_changes.append(KeyChange(base.key, cur.key, pair.matched_by, pair.change))
    if cur.error and not base.error:
        comp.compared_variants += 1
        comp.changes.append(
            MetricChange(
                cur.key,
                "error",
                None,
                None,
                None,
                None,
                "worse",
                True,
                f"now fails: {cur.error}",
                key_change=pair.change,
            )
        )
        return
    marker = cur.thresholds or {}
    base_metrics = {m.name: m for m in base.metrics}
    seen_kinds: set[str] = set()
    compared = False
    for c in cur.metrics:
        if ctx.cross_mode and c.kind != "static":
            why: str | None = (
                f"{ctx.cur_info.mode} mode vs {ctx.base_info.mode} mode: only static metrics compare"
            )
        else:
            why = ctx.kind_reason(c.kind)
        if why:
            if c.kind not in seen_kinds:
                comp.incomparable.append(Incomparable(cur.key, c.kind, why))
                seen_kinds.add(c.kind)
            continue
        b = base_metrics.pop(c.name, None)
        if b is None:
            comp.changes.append(
                MetricChange(
                    cur.key,
                    c.name,
                    None,
                    c.value,
                    None,
                    None,
                    "n/a",
                    False,
                    "new metric",
                    c.kind,
                    c.unit,
                    key_change=pair.change,
                )
            )
            continue
        compared = True
        comp.changes.append(_judged_change(b, c, pair, ctx.policy, marker))
    comp.compared_variants += compared
    _metrics_gone(comp, base_metrics.values(), pair, ctx)


def _judged_change(
    b: Metric, c: Metric, pair: VariantPair, policy: ThresholdPolicy, marker: dict
) -> MetricChange:
    """One metric of a pair judged: timing by samples, the rest by threshold and limit; a
    regression of a metric the marker does not gate is kept but not failed."""
    base, cur = pair.base, pair.current
    if c.kind == "time":
        ch = _time_change(b, c, base, cur, policy, marker)
    else:
        ch = _static_change(b, c, cur.key, policy, marker)
    if ch.regression and not gated(c.name, marker.get("metrics")):
        ch.regression = False
        ch.reason += f" (not gated: the marker's metrics= lists {', '.join(marker['metrics'])})"
    if pair.change:
        ch.key_change = pair.change
        ch.reason = (ch.reason + "; " if ch.reason else "") + f"variant changed: {pair.change}"
    return ch


def _metrics_gone(comp: Comparison, left: Iterable[Metric], pair: VariantPair, ctx: _Context) -> None:
    """Baseline metrics the current variant no longer has, where their kind would compare."""
    cur = pair.current
    for b in left:
        if ctx.kind_reason(b.kind) is None and not (ctx.cross_mode and b.kind != "static"):
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
                    key_change=pair.change,
                )
            )


def _not_judged(comp: Comparison) -> None:
    """Too little of the run was compared for a verdict (``status_line`` says so): nothing fails.
    What did move is kept, marked as not judged, so a first run on a new GPU class against a
    static baseline is a yellow "no comparable baseline" with the reason, never a red exit 1."""
    for ch in comp.changes:
        if ch.regression:
            ch.regression = False
            ch.reason += " (not judged: no comparable baseline)"
    comp.not_run += [NotRun(k, "no comparable baseline for this run") for k in comp.removed]
    comp.removed = []
