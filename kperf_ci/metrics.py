"""The metric catalogue and the verdict vocabulary: what each metric is and which way is good.

One entry per metric (or family: ``sass.<class>``, ``region.<name>.cycles``) says its display name
(what prose calls it: :func:`display_name`, :func:`moved_text`), unit, kind, direction
(lower/higher is better, or none: shown, never judged), default threshold, absolute limit,
headline order, aggregate and meaning. Capture builds metrics from it (:func:`metric`),
compare judges by it (:func:`direction_of`, :data:`DEFAULT_THRESHOLDS`), the report orders rows
by it (:func:`headline`), and ``docs/METRICS.md`` is generated from it
(``python scripts/gen_metrics_doc.py``; a test fails when the committed page is stale).

The catalogue wins over the ``better`` stored with a metric: stored runs keep what the kperf of
their day wrote (``region.kernel.cycles`` was "lower" then), and a direction fixed here must
reach old runs too. The stored value is used only for names the catalogue does not know.

Directions that are easy to get wrong:

* ``analysis.wave_tail`` is the fullness of the last wave (1 = full): lower is worse.
* ``region.<name>.cycles`` / ``.ms`` are medians over a region's records (one per CTA or warp) of
  one instrumented launch, not the launch's time. One extra tail CTA made an H100 launch 46.7%
  slower while the per-CTA median of the kernel region fell from 129 to 84 us (the lone CTA of
  the last wave runs alone, and fast). So they have no direction: shown, never called better or
  worse; ``time.median`` carries the verdict of the launch. Deriving a per-launch figure would
  need the timeline, and that is what the ``analysis.*`` findings already are.

Verdicts come in levels, each a closed set of words users see:

* :data:`TimingVerdict` -- raw timing samples (``stats.decide``, ``kperf ab``, ``kperf gate``):
  slower / faster / unchanged / inconclusive. Only "slower" is a regression
  (:func:`kperf_ci.judge.verdict.is_regression`): "inconclusive" means more samples are needed,
  never that the code got slower.
* :data:`Change` -- one metric of one variant in ``kperf compare``: better / worse / same / n/a.
* :data:`RowVerdict` -- a metric row of a report: a Change, or inconclusive / changed (a metric
  without direction moved) / new / removed.
* :data:`VERDICTS` -- a variant of a report, counted on the summary.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, Literal

from .model import Better, Metric, MetricKind, make_metric
from .units import fmt_value

__all__ = [
    "ABSOLUTE_KEYS",
    "CATALOGUE",
    "CODE_METRICS",
    "DEFAULT_THRESHOLDS",
    "MAIN_VERDICTS",
    "MOVED_METRICS",
    "TIMING_VERDICTS",
    "VERDICTS",
    "VERDICT_RANK",
    "Change",
    "MetricSpec",
    "RowVerdict",
    "TimingVerdict",
    "change_of",
    "direction_of",
    "display_name",
    "headline",
    "key_metrics",
    "metric",
    "moved_text",
    "row_verdict_of_timing",
    "spec",
    "timing_change",
    "unit_of",
    "untimed_verdict",
    "variant_verdict_of_time_row",
]

# --------------------------------------------------------------------------- verdict vocabulary

TimingVerdict = Literal["slower", "faster", "unchanged", "inconclusive"]
TIMING_VERDICTS: tuple[TimingVerdict, ...] = ("slower", "faster", "unchanged", "inconclusive")
Change = Literal["better", "worse", "same", "n/a"]
RowVerdict = Literal["better", "worse", "same", "n/a", "inconclusive", "changed", "new", "removed"]

#: Variant verdicts, in the order the summary counts them. slower/faster/unchanged/inconclusive
#: come from timing; a variant without timing (static mode) is worse/better/unchanged by its
#: static metrics; new/removed have no counterpart; error: the current run failed to build it.
VERDICTS = (
    "slower",
    "faster",
    "unchanged",
    "inconclusive",
    "worse",
    "better",
    "new",
    "removed",
    "not-run",
    "error",
)
#: Always counted on the summary, even when zero.
MAIN_VERDICTS = ("slower", "faster", "unchanged", "inconclusive")
#: Sort rank of a variant verdict: worst first.
VERDICT_RANK = {
    "error": 0,
    "slower": 1,
    "worse": 2,
    "inconclusive": 3,
    "new": 4,
    "removed": 5,
    "not-run": 5,
    "faster": 6,
    "better": 7,
    "unchanged": 8,
}


#: The one table between a timing verdict and the words of a metric's change: the three
#: functions below read it, so slower/worse, faster/better, unchanged/same are paired once.
_ROW_VERDICT_OF_TIMING: dict[str, RowVerdict] = {
    "slower": "worse",
    "faster": "better",
    "unchanged": "same",
    "inconclusive": "inconclusive",
}
_TIMING_OF_ROW_VERDICT: dict[str, str] = {r: t for t, r in _ROW_VERDICT_OF_TIMING.items()}


def timing_change(verdict: str) -> Change:
    """What a timing verdict makes of time.median's Change: noise (inconclusive) is not worse,
    and a Change has no "inconclusive", so it is "same"."""
    row = row_verdict_of_timing(verdict)
    return "same" if row == "inconclusive" else row  # type: ignore[return-value]


def row_verdict_of_timing(verdict: str) -> RowVerdict:
    """A report row's verdict from a timing verdict (inconclusive stays inconclusive)."""
    return _ROW_VERDICT_OF_TIMING.get(verdict, "inconclusive")


def variant_verdict_of_time_row(row_verdict: str) -> str:
    """A variant's verdict from its time.median row (the inverse of row_verdict_of_timing)."""
    return _TIMING_OF_ROW_VERDICT.get(row_verdict, "inconclusive")


def change_of(better: Better | str, base: float, cur: float) -> Change:
    """Change of one metric with direction ``better`` from ``base`` to ``cur``."""
    if cur == base:
        return "same"
    if better == "none":
        return "n/a"
    return "better" if (cur < base) == (better == "lower") else "worse"


# --------------------------------------------------------------------------- catalogue

Code = Literal["", "manifest", "moved"]
#: How `kperf ab` judges a static metric of a launch it did not time, when nobody named the metric
#: (a marker's ``thresholds=``/``metrics=`` or ``[tool.kperf.thresholds]``; a named metric gates
#: by its threshold as in `kperf compare`):
#: "threshold" -- its default threshold and limit, as `kperf compare` (spills: any increase fails);
#: "occupancy" -- fails only when its increase lowers the launch's theoretical occupancy (or passes
#: the arch's limit), else shown as changed. More registers made a kernel 16% faster on an H100
#: (issue 33): a register count alone says nothing about time, occupancy lost does;
#: "shown" -- listed as changed, never fails: an instruction count moved +15% on a change whose
#: measured time moved -0.5% (rsqrt -> 1 / sqrt, issue 33).
Untimed = Literal["threshold", "occupancy", "shown"]


@dataclass(frozen=True)
class MetricSpec:
    """One metric, or a family of them (``<...>`` in ``pattern`` stands for any name)."""

    pattern: str
    #: what a person reads where a report says the metric in prose ("shared memory 0 B -> 4,096 B"):
    #: the pattern is the stored id and the key users configure thresholds by, never shown there
    display: str
    unit: str
    kind: MetricKind
    better: Better
    aggregate: str  # over what the number is taken: "per thread", "per call", "per launch", ...
    meaning: str  # one line
    threshold: float | None = None  # default threshold in compare (relative, or absolute below)
    threshold_key: str = ""  # the key thresholds tables use when it is not the name ("time")
    absolute: bool = False  # the threshold is in the metric's unit (bytes allowed), not relative
    limit: str = ""  # an absolute limit of the target: "max_shared_per_block"
    headline: int | None = None  # position among its kind's rows in reports (None: by name after)
    #: launch manifest of `kperf ab`: "manifest" copied into it, "moved" also listed in what moved
    code: Code = ""
    untimed: Untimed = "threshold"  # `kperf ab` without timing, metric not named (see Untimed)

    @property
    def key(self) -> str:
        return self.threshold_key or self.pattern


_S, _T, _R, _A = "static", "time", "region", "analysis"
_LAUNCH = "per launch (the instrumented launch)"
_CTA_MEDIAN = "median over the region's records (one per CTA or warp) of the instrumented launch"

# fmt: off
CATALOGUE: tuple[MetricSpec, ...] = (
    # ---- static: from the compiled kernel (cuobjdump, nvdisasm, ptxas, Triton's metadata)
    MetricSpec("registers", "registers", "count", _S, "lower", "per thread",
               "registers per thread (cuobjdump -res-usage REG)", threshold=0.10, headline=0, code="moved",
               untimed="occupancy"),
    MetricSpec("spills", "spills", "bytes", _S, "lower", "per thread",
               "bytes of spill stores (ptxas); any increase fails", threshold=0.0, absolute=True, headline=1,
               code="moved"),
    MetricSpec("spill_loads", "spill loads", "bytes", _S, "lower", "per thread",
               "bytes of spill loads (ptxas)", code="moved"),
    MetricSpec("shared_bytes", "shared memory", "bytes", _S, "lower", "per block",
               "shared memory per block (Triton's metadata: static + dynamic); above the arch's opt-in "
               "maximum the kernel cannot launch", limit="max_shared_per_block", headline=2, code="moved",
               untimed="occupancy"),
    MetricSpec("stack_bytes", "stack frame", "bytes", _S, "lower", "per thread",
               "stack frame (cuobjdump STACK)", headline=3),
    MetricSpec("local_bytes", "local memory", "bytes", _S, "lower", "per thread",
               "local memory (cuobjdump LOCAL)", headline=4),
    MetricSpec("num_warps", "num_warps", "count", _S, "none", "per block", "launch option: warps per CTA",
               headline=5),
    MetricSpec("num_stages", "num_stages", "count", _S, "none", "per kernel",
               "launch option: software pipeline stages", headline=6),
    MetricSpec("cubin_bytes", "cubin size", "bytes", _S, "none", "per kernel binary",
               "code size; the cubin carries line tables, so a comment moves it while the SASS stays the "
               "same: shown, never judged", headline=7),
    MetricSpec("sass.instructions", "SASS instructions", "count", _S, "lower", "per kernel binary",
               "SASS instructions (NOP padding not counted)", threshold=0.05, headline=8, code="moved",
               untimed="shown"),
    MetricSpec("ptx.instructions", "PTX instructions", "count", _S, "lower", "per kernel binary",
               "PTX instructions", headline=9, code="manifest"),
    MetricSpec("sass.<class>", "SASS <class> instructions", "count", _S, "none", "per kernel binary",
               "SASS instructions of one class (capture.static.sass.CLASSES): a mix, neither good nor bad"),
    MetricSpec("ptx.<class>", "PTX <class> instructions", "count", _S, "none", "per kernel binary",
               "PTX instructions of one class"),
    # ---- time: the callable timed on the GPU (capture.timing); all samples are stored too
    MetricSpec("time.median", "median time", "ms", _T, "lower", "per call, median of all samples",
               "device time per call; carries the timing verdict, decided on the raw samples (confidence "
               "interval above the threshold and the floor)", threshold=0.05, threshold_key="time",
               headline=0),
    MetricSpec("time.mean", "mean time", "ms", _T, "lower", "per call, mean of all samples",
               "shown; time.median carries the verdict", headline=1),
    MetricSpec("time.min", "fastest time", "ms", _T, "lower", "per call, fastest sample",
               "shown; time.median carries the verdict", headline=2),
    MetricSpec("time.ci_low", "median's interval low", "ms", _T, "lower", "per call",
               "low end of the median's confidence interval", headline=3),
    MetricSpec("time.ci_high", "median's interval high", "ms", _T, "lower", "per call",
               "high end of the median's confidence interval", headline=4),
    MetricSpec("time.iqr", "time IQR", "ms", _T, "lower", "per call", "interquartile range of the samples",
               headline=5),
    MetricSpec("time.cv", "time CV", "fraction", _T, "none", "per call",
               "coefficient of variation of the samples", headline=6),
    MetricSpec("time.stddev", "time std dev", "ms", _T, "none", "per call",
               "standard deviation of the samples"),
    MetricSpec("time.max", "slowest time", "ms", _T, "none", "per call, slowest sample",
               "slowest sample (pytest-benchmark imports): one outlier, never judged"),
    # do_bench's quantiles=[0.5, 0.2, 0.8] (benchmark scripts, Liger-style CSV imports): the
    # spread around the median, kept so an import loses nothing; never judged
    MetricSpec("time.p20", "20th-percentile time", "ms", _T, "lower",
               "per call, 20th percentile of the samples", "shown; time.median carries the verdict"),
    MetricSpec("time.p80", "80th-percentile time", "ms", _T, "lower",
               "per call, 80th percentile of the samples", "shown; time.median carries the verdict"),
    # kind "time": measured by calling on the GPU, so only comparable on the same GPU model
    MetricSpec("memory.peak", "peak memory", "MB", _T, "lower", "per call",
               "peak device memory allocated by the call (torch max_memory_allocated / 2**20, as Liger "
               "benchmark scripts write it); shown, never judged"),
    MetricSpec("time.graph", "CUDA-graph timing", "bool", _T, "none", "per variant",
               "1 when the samples are CUDA-graph replays, 0 for plain events; compare names a change of "
               "method next to the time verdict"),
    MetricSpec("time.cupti", "CUPTI timing", "bool", _T, "none", "per variant",
               "1 when the samples are CUPTI kernel durations (launch overhead left out), 0 for events or "
               "graph replays; compare names a change of method next to the time verdict"),
    MetricSpec("time.l2_read_flush", "L2 flush by reading", "bool", _T, "none", "per variant",
               "1 when every timed call followed an L2 flush by reading (a clean L2), 0 without a flush; "
               "absent from runs that flushed by zeroing; compare names a change next to the time verdict"),
    # ---- region: one instrumented launch (capture.regions.instrument), per region
    MetricSpec("region.dropped_events", "dropped region records", "count", _R, "lower", _LAUNCH,
               "Proton records lost in the instrumented launch"),
    MetricSpec("region.<name>.cycles", "<name> cycles", "cycles", _R, "none", _CTA_MEDIAN,
               "SM cycles of a region (kernel, prologue, loopN, epilogue, body, user scopes); a per-CTA "
               "figure, never judged: a launch can get slower while it falls"),
    MetricSpec("region.<name>.ms", "<name> time", "ms", _R, "none", _CTA_MEDIAN,
               "region.<name>.cycles over the measured SM clock; never judged, as .cycles"),
    MetricSpec("region.<name>.fraction", "<name> share", "fraction", _R, "none",
               "region's cycles over the kernel region's, all CTAs",
               "share of the launch's kernel-region cycles spent in the region"),
    # ---- analysis: findings of the intra-kernel analyses (kperf_ci.analysis), one launch
    MetricSpec("analysis.sm_utilization", "SM utilization", "fraction", _A, "higher", _LAUNCH,
               "busy SM-time / (SMs x span)"),
    MetricSpec("analysis.sm_finish_skew", "SM finish skew", "fraction", _A, "lower", _LAUNCH,
               "slowest SM's finish after the median SM's, relative to the median finish"),
    MetricSpec("analysis.cta_duration_max_over_median", "longest CTA over median", "ratio", _A, "lower",
               _LAUNCH, "longest CTA over the median CTA"),
    MetricSpec("analysis.cta_duration_cv", "CTA duration CV", "fraction", _A, "lower", _LAUNCH,
               "coefficient of variation of CTA durations"),
    MetricSpec("analysis.sm_work_max_over_mean", "busiest SM over mean", "ratio", _A, "lower", _LAUNCH,
               "busiest SM's CTA time over the mean of the used SMs"),
    MetricSpec("analysis.waves", "waves", "waves", _A, "none", "per launch (grid and occupancy)",
               "grid / (SMs x CTAs per SM)"),
    MetricSpec("analysis.ctas_per_sm", "CTAs per SM", "count", _A, "none", "per launch (grid and occupancy)",
               "CTAs that fit on one SM (registers, shared memory, warps)"),
    MetricSpec("analysis.wave_tail", "last-wave fullness", "fraction", _A, "higher",
               "per launch (grid and occupancy)",
               "fullness of the last wave: its CTAs over a wave's CTA slots (1 = full); lower is worse"),
    MetricSpec("analysis.wave_idle", "wave idle", "fraction", _A, "lower", "per launch (grid and occupancy)",
               "SM-time idled by wave quantization, equal CTAs assumed"),
    MetricSpec("analysis.grid_fill", "grid fill", "fraction", _A, "higher", "per launch (grid and occupancy)",
               "share of one wave's CTA slots the grid fills (below 1: too little work for the GPU)"),
    MetricSpec("analysis.wave_tail_idle_measured", "measured tail idle", "fraction", _A, "lower", _LAUNCH,
               "SM-time idle after each SM's last CTA (or never used), from the timeline"),
    MetricSpec("analysis.ctas_per_sm_observed", "CTAs per SM observed", "count", _A, "none", _LAUNCH,
               "most CTAs resident at once on one SM"),
    MetricSpec("analysis.prologue_fraction", "prologue share", "fraction", _A, "lower",
               "median over CTAs or warps", "share of CTA time before the first loopN region"),
    MetricSpec("analysis.epilogue_fraction", "epilogue share", "fraction", _A, "lower",
               "median over CTAs or warps", "share of CTA time after the last loopN region"),
    MetricSpec("analysis.memory_exposed_fraction", "exposed memory share", "fraction", _A, "lower",
               "median over CTAs",
               "share of the main loop in memory waits with no tensor-core region open in the CTA"),
    MetricSpec("analysis.pipeline_bubble_fraction", "pipeline bubble share", "fraction", _A, "lower",
               "median over CTAs", "share of the main loop with no tensor-core region open"),
    MetricSpec("analysis.mma_busy_fraction", "tensor-core busy share", "fraction", _A, "higher",
               "median over CTAs", "share of the main loop with a tensor-core region open"),
    MetricSpec("analysis.memory_compute_overlap", "memory/compute overlap", "fraction", _A, "higher",
               "median over CTAs", "share of memory-wait time overlapping tensor-core work in other warps"),
    MetricSpec("analysis.launch_gap_fraction", "launch gap share", "fraction", _A, "lower",
               "per call (steady state of 5 calls)", "GPU idle between consecutive kernels over the span"),
    MetricSpec("analysis.launch_gap_median_ns", "median launch gap", "ns", _A, "lower",
               "per call (steady state of 5 calls)", "median gap between consecutive kernels"),
    MetricSpec("analysis.kernel_median_ns", "median kernel duration", "ns", _A, "none",
               "per call (steady state of 5 calls)", "median kernel duration"),
    MetricSpec("analysis.bandwidth_gbs", "bandwidth", "GB/s", _A, "none", "per call (time.median)",
               "achieved bandwidth from the declared bytes; time.median carries the verdict"),
    MetricSpec("analysis.bandwidth_fraction", "bandwidth of peak", "fraction", _A, "none",
               "per call (time.median)", "achieved bandwidth over the device's peak"),
    MetricSpec("analysis.tflops", "TFLOP/s", "TFLOP/s", _A, "none", "per call (time.median)",
               "achieved FLOP/s from the declared FLOPs"),
    MetricSpec("analysis.flops_fraction", "FLOP/s of peak", "fraction", _A, "none", "per call (time.median)",
               "achieved FLOP/s over the device's peak"),
    # ---- ab: an interleaved A/B run, stored with the head variant (kperf_ci.capture.timing.interleaved)
    MetricSpec("ab.ratio", "A/B ratio", "ratio", _A, "lower", "paired blocks of calls",
               "head/base time ratio (Hodges-Lehmann)"),
    MetricSpec("ab.ci_low", "A/B interval low", "ratio", _A, "lower", "paired blocks of calls",
               "low end of the ratio's confidence interval"),
    MetricSpec("ab.ci_high", "A/B interval high", "ratio", _A, "lower", "paired blocks of calls",
               "high end of the ratio's confidence interval"),
    MetricSpec("ab.pairs", "A/B pairs", "count", _A, "none", "per A/B run",
               "interleaved pairs of calls measured"),
    MetricSpec("ab.seconds", "A/B measuring time", "s", _A, "none", "per A/B run",
               "host seconds spent measuring"),
    MetricSpec("ab.warmup_seconds", "A/B warm-up time", "s", _A, "none", "per A/B run",
               "host seconds warming both sides up before measuring"),
    MetricSpec("ab.threshold", "A/B threshold", "fraction", _A, "none", "per A/B run",
               "relative band of the verdict (floor included)"),
)
# fmt: on

_EXACT: dict[str, MetricSpec] = {s.pattern: s for s in CATALOGUE if "<" not in s.pattern}
_PATTERNS: tuple[tuple[re.Pattern[str], MetricSpec], ...] = tuple(
    (re.compile(re.sub(r"<[^>]+>", "(.+)", re.escape(s.pattern)) + "$"), s)
    for s in CATALOGUE
    if "<" in s.pattern
)

#: Default thresholds of compare by thresholds-table key: relative increase that fails, except
#: the absolute ones (bytes allowed); "time" is the relative slowdown of time.median.
DEFAULT_THRESHOLDS: dict[str, float] = {s.key: s.threshold for s in CATALOGUE if s.threshold is not None}
#: Metrics whose threshold is absolute (in their unit), not relative.
ABSOLUTE_KEYS = frozenset(s.key for s in CATALOGUE if s.absolute)
#: Static metrics copied into `kperf ab`'s launch manifest, and those its "what moved" lists.
CODE_METRICS = tuple(s.pattern for s in CATALOGUE if s.code)
MOVED_METRICS = tuple(s.pattern for s in CATALOGUE if s.code == "moved")


@functools.lru_cache(maxsize=65536)  # asked once per metric of every variant: a bounded memo
def spec(name: str) -> MetricSpec | None:
    """The catalogue entry of a metric name; None for a name it does not know."""
    hit = _EXACT.get(name)
    if hit is not None:
        return hit
    for rx, s in _PATTERNS:
        if rx.match(name):
            return s
    return None


def direction_of(name: str, fallback: Better | str = "lower") -> Better:
    """Which way is better for a metric: the catalogue, else ``fallback`` (the stored one)."""
    s = spec(name)
    return s.better if s is not None else fallback  # type: ignore[return-value]


def unit_of(name: str, fallback: str = "") -> str:
    s = spec(name)
    return s.unit if s is not None else fallback


@functools.lru_cache(maxsize=4096)
def display_name(name: str) -> str:
    """A metric as prose names it: "shared memory" for ``shared_bytes``, "SASS FMA instructions"
    for ``sass.FMA``, "loop0 share" for ``region.loop0.fraction``; a name the catalogue does not
    know is shown as it is. Stored ids and JSON keys stay what they are: they are data."""
    s = _EXACT.get(name)
    if s is not None:
        return s.display
    for rx, s in _PATTERNS:
        m = rx.match(name)
        if m:
            head, _, tail = re.split(r"(<[^>]+>)", s.display, maxsplit=1)
            return head + m.group(1) + tail
    return name


def moved_text(name: str, base: Any, head: Any, unit: str | None = None) -> str:
    """ "shared memory 0 B -> 4,096 B": one metric's move as every report says it in prose, by
    its display name, both values in its catalogue unit (``unit`` for a name it does not know)."""
    u = unit_of(name, unit or "")

    def f(v: Any) -> str:
        number = isinstance(v, (int, float)) and not isinstance(v, bool)
        return fmt_value(float(v), u) if number else fmt_value(None)

    return f"{display_name(name)} {f(base)} -> {f(head)}"


def metric(name: str, value: float) -> Metric:
    """A Metric with the unit, kind and direction of its catalogue entry (KeyError if none): the
    one way a producer makes a metric, so no producer can store a unit or direction of its own.
    Built by make_metric: an import of 100,000 variants makes millions of them."""
    s = spec(name)
    if s is None:
        raise KeyError(f"{name!r} is not in the metric catalogue (kperf_ci/metrics.py)")
    return make_metric(name, float(value), s.unit, s.kind, s.better)


def untimed_verdict(name: str) -> Untimed:
    """How `kperf ab` judges ``name`` on a launch it did not time when nobody named the metric
    (:data:`Untimed`); "threshold" for a name the catalogue does not know."""
    s = spec(name)
    return s.untimed if s is not None else "threshold"


def headline(kind: str) -> tuple[str, ...]:
    """Names of ``kind`` shown first in reports, in order (e.g. STATIC_HEADLINE)."""
    rows = sorted((s.headline, s.pattern) for s in CATALOGUE if s.kind == kind and s.headline is not None)
    return tuple(name for _h, name in rows)


def key_metrics(kind: str) -> tuple[str, ...]:
    """The headline metrics of ``kind`` that compare judges by default (a default threshold or an
    absolute limit), in headline order: what a compact line or a "changed:" line shows.
    key_metrics("static") == ("registers", "spills", "shared_bytes", "sass.instructions")."""
    return tuple(n for n in headline(kind) if _EXACT[n].threshold is not None or _EXACT[n].limit)
