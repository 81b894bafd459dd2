"""Compare two runs: match variants, diff every metric, decide what is a regression.

Rules (docs/METRICS.md, generated from :mod:`kperf_ci.metrics`): each metric's direction and
default threshold come from the catalogue, overridden by ``[tool.kperf.thresholds]``, overridden
by the marker's ``thresholds=`` stored with the CURRENT run's variant. Timing is
decided on the raw samples (``compare_timing``), never on two medians alone when samples exist.
Metrics are only compared when the two machines make them comparable (fingerprint.comparable).

Variants pair by :func:`match_variants` (exact key; then the same kernel/arch/test; then the same
launch site or kernel when unambiguous), so a launch-option or constexpr change is one "changed"
variant judged on its metrics, not one added and one removed. A GPU-mode run meets a static
baseline through the compute capability of its GPU (static metrics only). A comparison in which
fewer than MIN_COMPARED_FRACTION of the current variants were compared has the status "no
comparable baseline": consumers say so instead of "no regressions".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..fingerprint import incomparable_reason
from ..hardware import MAX_SHARED_PER_BLOCK
from ..metrics import (
    ABSOLUTE_KEYS,
    DEFAULT_THRESHOLDS,
    Change,
    TimingVerdict,
    change_of,
    direction_of,
    is_regression,
    spec,
    timing_change,
)
from ..model import DEFAULT_OPTIONS, Fingerprint, Metric, RunInfo, RunRecord, VariantKey, VariantResult
from ..units import fmt_value
from . import stats
from .group import KernelIndex

__all__ = [
    "COMPARED",
    "DEFAULT_THRESHOLDS",
    "MIN_COMPARED_FRACTION",
    "NO_COMPARABLE_BASELINE",
    "KeyChange",
    "NotRun",
    "VariantMatch",
    "VariantPair",
    "arch_class",
    "describe_key_change",
    "match_variants",
    "parse_config",
    "parse_spec",
    "SHARED_LIMITS",
    "ThresholdPolicy",
    "MetricChange",
    "Comparison",
    "compare_runs",
    "compare_timing",
    "direction_of",
]

#: Max dynamic shared memory per block (opt-in), bytes, by arch name. shared_bytes above it
#: cannot launch.
SHARED_LIMITS: dict[str, int] = {f"sm_{cap}": limit for cap, limit in MAX_SHARED_PER_BLOCK.items()}
#: The absolute limits a catalogue entry can name (MetricSpec.limit), by arch name.
_LIMITS: dict[str, dict[str, int]] = {"max_shared_per_block": SHARED_LIMITS}


# --------------------------------------------------------------------------- timing


def compare_timing(
    base_samples: Sequence[float], cur_samples: Sequence[float], threshold: float, floor_ms: float
) -> tuple[TimingVerdict, float, tuple[float, float]]:
    """Verdict on two sets of timing samples (ms): (verdict, rel change, CI of the ratio cur/base),
    by :func:`kperf_ci.judge.stats.compare_samples` (the rule is in its module docstring)."""
    r = stats.compare_samples(base_samples, cur_samples, threshold=threshold, floor=floor_ms)
    return r.verdict, r.rel, (r.ci_low, r.ci_high)


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


# --------------------------------------------------------------------------- results


@dataclass(slots=True)  # slots: one per metric of every variant
class MetricChange:
    variant: VariantKey
    metric: str
    base: float | None
    current: float | None
    delta: float | None
    rel: float | None  # delta / base; None when base is 0 (or missing)
    direction: Change
    regression: bool
    reason: str
    kind: str = "static"
    unit: str = ""
    threshold: float | None = None
    threshold_source: str = ""
    ci: tuple[float, float] | None = None  # time.median: CI of the ratio cur/base
    verdict: str | None = None  # time.median: slower/faster/unchanged/inconclusive
    key_change: str = ""  # the variant was matched across this key change ("num_warps 4 -> 1")

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


@dataclass(frozen=True)
class KeyChange:
    """A variant matched across a change of its key (see :func:`match_variants`)."""

    base: VariantKey
    current: VariantKey
    matched_by: MatchStage
    description: str  # "num_warps 4 -> 1; BLOCK 1024 -> 512"; "" for a match across modes only


@dataclass(frozen=True)
class NotRun:
    """A baseline variant missing from the current run for a reason that is not a finding."""

    variant: VariantKey
    reason: str  # "its test did not run", "this run built no sm_80 variants", ...


ComparisonStatus = Literal["compared", "no comparable baseline"]
COMPARED: ComparisonStatus = "compared"
NO_COMPARABLE_BASELINE: ComparisonStatus = "no comparable baseline"
#: A comparison stands only when at least this share of the current run's variants was compared
#: with a baseline variant (matched, and at least one metric comparable). Below it the baseline
#: describes another machine class or another suite, and "no regressions" would mean nothing.
MIN_COMPARED_FRACTION = 0.5


@dataclass
class Comparison:
    baseline: RunInfo
    current: RunInfo
    changes: list[MetricChange] = field(default_factory=list)
    added: list[VariantKey] = field(default_factory=list)
    #: baseline variants missing from this run although their test ran: a finding, fails the
    #: comparison unless ``allow_removed``
    removed: list[VariantKey] = field(default_factory=list)
    not_run: list[NotRun] = field(default_factory=list)  # missing for a reason that is no finding
    #: (base, current) of every pair whose ids differ: a key change, or a match across modes
    rematched: list[tuple[VariantKey, VariantKey]] = field(default_factory=list)
    key_changes: list[KeyChange] = field(default_factory=list)  # the pairs whose key changed
    incomparable: list[Incomparable] = field(default_factory=list)
    allow_removed: bool = False
    current_variants: int = 0  # variants in the current run
    compared_variants: int = 0  # of them, matched with at least one metric compared
    #: variant -> compiled kernel (kperf_ci.judge.group): regressions are counted in kernels, not rows
    kernels: KernelIndex = field(default_factory=KernelIndex)

    @property
    def regressions(self) -> list[MetricChange]:
        return [c for c in self.changes if c.regression]

    @property
    def improvements(self) -> list[MetricChange]:
        return [c for c in self.changes if c.direction == "better" and not c.regression]

    @property
    def regressed_kernels(self) -> int:
        """Kernels with at least one regressed metric (or a new build error): the one
        regression count of compare, show and the reports (a metric row is not a unit)."""
        return self.kernels.count(c.variant.id for c in self.regressions)

    @property
    def removed_kernels(self) -> int:
        """Kernels among the removed variants that fail the comparison."""
        return self.kernels.count(k.id for k in self.failing_removed)

    @property
    def failing_removed(self) -> list[VariantKey]:
        """Removed variants that fail the comparison (none with ``allow_removed``)."""
        return [] if self.allow_removed else list(self.removed)

    @property
    def exit_code(self) -> int:
        return 1 if self.regressions or self.failing_removed else 0

    @property
    def status(self) -> ComparisonStatus:
        """ "compared", or "no comparable baseline" when fewer than MIN_COMPARED_FRACTION of the
        current run's variants (or none at all) were compared: a baseline of another machine
        class, another Triton, another suite."""
        if (
            self.compared_variants == 0
            or self.compared_variants < MIN_COMPARED_FRACTION * self.current_variants
        ):
            return NO_COMPARABLE_BASELINE
        return COMPARED

    @property
    def status_line(self) -> str:
        """One line for every consumer: what was compared, or why the verdict means nothing."""
        n, m = self.compared_variants, self.current_variants
        if self.status == COMPARED:
            return f"compared {n} of {m} variant(s) with the baseline"
        return (
            f"no comparable baseline for this machine class: {n} of {m} variant(s) of this run "
            f"were compared with the baseline (at least {MIN_COMPARED_FRACTION:.0%} needed)"
        )

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
            return {
                "id": v.id,
                "kernel": v.kernel,
                "arch": v.arch,
                "spec": v.spec,
                "config": v.config,
                "test": v.test,
            }

        return {
            "baseline": self.baseline.run_id,
            "current": self.current.run_id,
            "exit_code": self.exit_code,
            "status": self.status,
            "status_line": self.status_line,
            "compared_variants": self.compared_variants,
            "current_variants": self.current_variants,
            "regressions": len(self.regressions),
            "regressed_kernels": self.regressed_kernels,
            "improvements": len(self.improvements),
            "changes": [c.to_dict() for c in self.sorted_changes(all=all)],
            "added": [k(v) for v in self.added],
            "removed": [k(v) for v in self.removed],
            "allow_removed": self.allow_removed,
            "not_run": [{"variant": k(n.variant), "reason": n.reason} for n in self.not_run],
            "rematched": [{"base": k(b), "current": k(c)} for b, c in self.rematched],
            "changed": [
                {
                    "base": k(c.base),
                    "current": k(c.current),
                    "matched_by": c.matched_by,
                    "change": c.description,
                }
                for c in self.key_changes
            ],
            "incomparable": [
                {"variant": k(i.variant), "kind": i.kind, "reason": i.reason} for i in self.incomparable
            ],
        }


# --------------------------------------------------------------------------- matching

MatchStage = Literal["id", "test", "source", "kernel"]

#: GPU model -> the compile target of its kernels, for runs whose fingerprint lacks the compute
#: capability (fingerprint.extra["capability"] wins). Substrings of the name torch reports; the
#: first that matches is used, so a longer name comes before its substring (A100 before A10).
GPU_ARCH: tuple[tuple[str, str], ...] = (
    ("GB200", "sm_100"),
    ("B200", "sm_100"),
    ("H200", "sm_90"),
    ("H100", "sm_90"),
    ("H800", "sm_90"),
    ("GH200", "sm_90"),
    ("L40", "sm_89"),
    ("L4", "sm_89"),
    ("RTX 4090", "sm_89"),
    ("A100", "sm_80"),
    ("A800", "sm_80"),
    ("A30", "sm_80"),
    ("A10", "sm_86"),
    ("RTX 3090", "sm_86"),
    ("T4", "sm_75"),
)


def arch_class(arch: str, fingerprint: Fingerprint | None = None) -> str:
    """The compile target whose static metrics a variant carries: a static run's "sm_90" as is; a
    GPU run's variant ("NVIDIA H100 80GB HBM3") maps to its GPU's compute capability, from the
    run's fingerprint, else from :data:`GPU_ARCH`; unknown names stay as they are."""
    if not arch or arch == "host" or arch.startswith("sm_"):
        return arch
    cap = str((fingerprint.extra if fingerprint else {}).get("capability") or "")
    major, _, minor = cap.partition(".")
    if major.isdigit():
        return f"sm_{major}{minor if minor.isdigit() else '0'}"
    upper = arch.upper()
    for needle, sm in GPU_ARCH:
        if needle in upper:
            return sm
    return arch


def _split_top(text: str, sep: str = ",") -> list[str]:
    """``text`` split at ``sep`` outside parentheses (tuple arguments render as "(a,b)")."""
    if "(" not in text and ")" not in text:  # the usual case: depth stays 0, a plain split
        return [t for t in (t.strip() for t in text.split(sep)) if t]
    out, depth, cur = [], 0, []
    for ch in text:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == sep and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur).strip())
    return [t for t in out if t]


def parse_config(config: str) -> dict[str, str]:
    """ "num_warps=4,num_stages=3,num_ctas=1" -> {"num_warps": "4", ...}, with Triton's defaults
    filled in (GPU mode spells only num_warps and num_stages). Anything else (e.g. the
    "callable:..." of a multi-kernel timing) is one item named "config"."""
    items = _split_top(config)
    if not items or not all("=" in t for t in items):
        return {"config": config} if config else {}
    out = dict(t.split("=", 1) for t in items)
    if "num_warps" in out:
        for k, v in DEFAULT_OPTIONS.items():
            out.setdefault(k, str(v))
    return out


def parse_spec(spec: str, *, with_shape: bool = True) -> dict[str, str]:
    """A specialization string (capture.record: "x:*fp16:D, n:i32, BLOCK=1024", plus GPU mode's
    " @ <test parameters>") -> {"x": "*fp16:D", "n": "i32", "BLOCK": "1024", "shape": ...}."""
    body, at, shape = spec.partition(" @ ")
    out: dict[str, str] = {}
    for item in _split_top(body):
        eq, colon = item.find("="), item.find(":")
        if eq > 0 and (colon < 0 or eq < colon):  # a constexpr: "BLOCK=1024"
            out[item[:eq]] = item[eq + 1 :]
        elif colon > 0:  # an argument: "x:*fp16:D"
            out[item[:colon]] = item[colon + 1 :]
        else:
            out[item] = ""
    if at and with_shape:
        out["shape"] = shape
    return out


def describe_key_change(base: VariantKey, cur: VariantKey, *, with_shape: bool = True) -> str:
    """What differs between two keys of one matched variant, launch options first:
    "num_warps 4 -> 1; BLOCK 1024 -> 512" ("-" where a side lacks the item); "" when nothing."""
    return "; ".join(_key_diff(base, cur, with_shape=with_shape))


def _key_diff(base: VariantKey, cur: VariantKey, *, with_shape: bool) -> list[str]:
    if base.config == cur.config and base.spec == cur.spec:  # the usual pair: nothing to parse
        return []
    parts = []
    for b, c in (
        (parse_config(base.config), parse_config(cur.config)),
        (parse_spec(base.spec, with_shape=with_shape), parse_spec(cur.spec, with_shape=with_shape)),
    ):
        for name in [*b, *(n for n in c if n not in b)]:
            if b.get(name) != c.get(name):
                # "-": the side lacks the item; "(set)": a bare item without a value
                bv, cv = (("(set)" if v == "" else v) for v in (b.get(name, "-"), c.get(name, "-")))
                parts.append(f"{name} {bv} -> {cv}")
    return parts


def _site(source: str) -> str:
    """The launch site, spelled alike by both modes: static mode stores
    "examples/kernels/add.py::add_kernel", GPU mode "kernels.add::add_kernel"; both -> "add::add_kernel"."""
    path, sep, qual = source.rpartition("::")
    if not sep:
        return source
    stem = path.replace("\\", "/").rsplit("/", 1)[-1].removesuffix(".py").rsplit(".", 1)[-1]
    return f"{stem}::{qual}"


@dataclass(frozen=True)
class VariantPair:
    """A baseline variant and the current variant it was matched with."""

    base: VariantResult
    current: VariantResult
    matched_by: MatchStage  # the stage of match_variants that paired them
    change: str = ""  # what differs in the key: "num_warps 4 -> 1; BLOCK 1024 -> 512"

    @property
    def rematched(self) -> bool:
        """Paired although their ids differ (a key change, or the other mode's arch name)."""
        return self.base.key.id != self.current.key.id


@dataclass
class VariantMatch:
    pairs: list[VariantPair] = field(default_factory=list)
    removed: list[VariantResult] = field(default_factory=list)  # in the baseline only
    added: list[VariantResult] = field(default_factory=list)  # in the current run only


def match_variants(
    base: Sequence[VariantResult],
    cur: Sequence[VariantResult],
    *,
    base_info: RunInfo | None = None,
    cur_info: RunInfo | None = None,
) -> VariantMatch:
    """Pair the variants of two runs, in stages; each stage sees only what earlier ones left.

    1. ``id``: kernel, arch, spec and config all equal.
    2. ``test``: the same kernel, arch and pytest node id: a constexpr or launch option changed.
       When a test has several such variants on each side, the closest pairs go first (fewest
       differing config/spec items; ties by test, spec, config), so the sorting is deterministic.
    3. ``source``: the same kernel, arch and launch site (``VariantKey.source``; a renamed test),
    4. ``kernel``: the same kernel and arch (the kernel moved and its test was renamed).
       Stages 3 and 4 pair only where exactly one variant is left on each side: across tests
       the problem sizes can differ, and a guess among several would judge unrelated kernels.

    Arch compares by :func:`arch_class`, so with the runs' infos a GPU-mode variant meets the
    static baseline's variant of its compute capability. Across modes the GPU side's " @ <test
    parameters>" suffix of the spec is ignored (static specs have none) and launch options are
    compared with Triton's defaults filled in.
    """
    fb = base_info.fingerprint if base_info else None
    fc = cur_info.fingerprint if cur_info else None
    cross_mode = bool(base_info and cur_info and base_info.mode != cur_info.mode)

    def ident(r: VariantResult, fp: Fingerprint | None) -> tuple:
        k = r.key
        # sorted items: equal exactly when the parsed dicts are (cheaper than their JSON spelling)
        spec = tuple(sorted(parse_spec(k.spec, with_shape=not cross_mode).items()))
        return (k.kernel, arch_class(k.arch, fp), spec, tuple(sorted(parse_config(k.config).items())))

    def order(r: VariantResult) -> tuple[str, str, str, str]:
        return (r.key.test, r.key.spec, r.key.config, r.key.id)

    left_b = sorted(base, key=order)
    left_c = sorted(cur, key=order)
    out = VariantMatch()

    def stage(name: MatchStage, group: Callable[[VariantResult, Fingerprint | None], tuple | None]) -> None:
        nonlocal left_b, left_c
        gb: dict[tuple, list[VariantResult]] = {}
        gc: dict[tuple, list[VariantResult]] = {}
        for r in left_b:
            g = group(r, fb)
            if g is not None:
                gb.setdefault(g, []).append(r)
        for r in left_c:
            g = group(r, fc)
            if g is not None:
                gc.setdefault(g, []).append(r)
        used: set[int] = set()
        for g, cs in gc.items():
            bs = gb.get(g, [])
            if not bs or (name in ("source", "kernel") and (len(bs) != 1 or len(cs) != 1)):
                continue
            for b, c in _closest_pairs(bs, cs, cross_mode):
                change = describe_key_change(b.key, c.key, with_shape=not cross_mode)
                if name in ("source", "kernel") and b.key.test != c.key.test and not cross_mode:
                    change = "; ".join(filter(None, [change, f"test {b.key.test} -> {c.key.test}"]))
                out.pairs.append(VariantPair(b, c, name, change))
                used.update((id(b), id(c)))
        left_b = [r for r in left_b if id(r) not in used]
        left_c = [r for r in left_c if id(r) not in used]

    stage("id", ident)
    stage(
        "test", lambda r, fp: (r.key.kernel, arch_class(r.key.arch, fp), r.key.test) if r.key.test else None
    )
    stage(
        "source",
        lambda r, fp: (
            (r.key.kernel, arch_class(r.key.arch, fp), _site(r.key.source)) if r.key.source else None
        ),
    )
    stage("kernel", lambda r, fp: (r.key.kernel, arch_class(r.key.arch, fp)))
    out.removed, out.added = left_b, left_c
    return out


def _closest_pairs(
    bs: list[VariantResult], cs: list[VariantResult], cross_mode: bool
) -> list[tuple[VariantResult, VariantResult]]:
    """Greedy pairing of two sorted groups: fewest differing key items first, then same test,
    then the groups' own order; a variant is paired at most once."""

    def distance(b: VariantResult, c: VariantResult) -> int:
        return len(_key_diff(b.key, c.key, with_shape=not cross_mode))

    cands = sorted(
        (distance(b, c), b.key.test != c.key.test, i, j) for i, b in enumerate(bs) for j, c in enumerate(cs)
    )
    taken_b: set[int] = set()
    taken_c: set[int] = set()
    pairs = []
    for _d, _t, i, j in cands:
        if i not in taken_b and j not in taken_c:
            taken_b.add(i)
            taken_c.add(j)
            pairs.append((bs[i], cs[j]))
    return sorted(pairs, key=lambda p: bs.index(p[0]))


def _match(
    base: list[VariantResult], cur: list[VariantResult]
) -> tuple[list[tuple[VariantResult, VariantResult, bool]], list[VariantResult], list[VariantResult]]:
    """Pairs (base, current, rematched), removed, added: :func:`match_variants` in the shape
    ``kperf ab``'s static diff reads."""
    m = match_variants(base, cur)
    return [(p.base, p.current, p.rematched) for p in m.pairs], m.removed, m.added


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
    if s is not None and s.limit:
        arch = key.arch.rstrip("af") if key.arch.startswith("sm_") else key.arch
        limit = _LIMITS[s.limit].get(arch)
        if limit is not None and c.value > limit:
            regression, reason = True, f"{c.name} {int(c.value)} above the {arch} limit of {limit} {s.unit}"
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
    fb, fc = baseline.info.fingerprint, current.info.fingerprint
    cross_mode = baseline.info.mode != current.info.mode
    comp = Comparison(
        baseline=baseline.info,
        current=current.info,
        allow_removed=allow_removed,
        current_variants=len(current.results),
    )
    why_kind: dict[str, str | None] = {}  # incomparable_reason by metric kind (same two fingerprints)
    m = match_variants(baseline.results, current.results, base_info=baseline.info, cur_info=current.info)
    comp.added = [r.key for r in m.added]
    comp.kernels = KernelIndex.build(current.results, m.removed)
    ran_tests = {r.key.test for r in current.results if r.key.test}
    built = {arch_class(r.key.arch, fc) for r in current.results}
    for r in m.removed:
        arch = arch_class(r.key.arch, fb)
        if arch not in built:
            comp.not_run.append(NotRun(r.key, f"this run built no {arch} variants"))
        elif not r.key.test or r.key.test not in ran_tests:
            comp.not_run.append(NotRun(r.key, "its test did not run (deselected, renamed or deleted)"))
        elif cross_mode:
            # Static mode compiles every autotune config; GPU mode captures only what ran.
            comp.not_run.append(
                NotRun(
                    r.key, f"not captured in {current.info.mode} mode (baseline: {baseline.info.mode} mode)"
                )
            )
        else:
            comp.removed.append(r.key)
    for pair in m.pairs:
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
            continue
        marker = cur.thresholds or {}
        base_metrics = {m.name: m for m in base.metrics}
        seen_kinds: set[str] = set()
        compared = False
        for c in cur.metrics:
            if cross_mode and c.kind != "static":
                why: str | None = (
                    f"{current.info.mode} mode vs {baseline.info.mode} mode: only static metrics compare"
                )
            else:
                if c.kind not in why_kind:
                    why_kind[c.kind] = incomparable_reason(fb, fc, c.kind)
                why = why_kind[c.kind]
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
            comp.changes.append(ch)
        comp.compared_variants += compared
        for b in base_metrics.values():
            if b.kind not in why_kind:
                why_kind[b.kind] = incomparable_reason(fb, fc, b.kind)
            if why_kind[b.kind] is None and not (cross_mode and b.kind != "static"):
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
    return comp
