"""What a report shows, computed once from two runs and their comparison; rendered by html/markdown.

The view holds no markup: every string in it is plain text (kernel names included) and the
renderers escape it for their format.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ..analysis.findings import ARTIFACT as FINDINGS_ARTIFACT
from ..analysis.findings import DEFAULT_PER_KERNEL, Finding, capped, findings_from_json, flagged, ranked
from ..capture.sass import CLASSES
from ..judge.group import count_words
from ..metrics import MAIN_VERDICTS as MAIN_VERDICTS  # re-exported: the renderers count them
from ..metrics import (
    VERDICT_RANK,
    direction_of,
    headline,
    row_verdict_of_timing,
    variant_verdict_of_time_row,
)
from ..metrics import VERDICTS as VERDICTS
from ..model import Fingerprint, Metric, RunInfo, RunRecord, VariantKey, VariantResult
from ..units import fmt_ci, fmt_rel, fmt_value
from .kernels import fold_kernels, label_specs
from .safe_text import terminal_safe

log = logging.getLogger(__name__)

_KIND_ORDER = {"time": 0, "region": 1, "analysis": 2, "static": 3}
#: Static metrics shown first, in this order, in the static diff (the catalogue's headline).
STATIC_HEADLINE = headline("static")
INSTRUCTION_CLASSES = CLASSES  # sass.<class> / ptx.<class> metric names (docs/METRICS.md)

HistoryFn = Callable[[str, str], list[tuple[RunInfo, float]]]
BlobFn = Callable[[str, str, str], "bytes | None"]


@dataclass(slots=True)  # slots: one per metric of every variant
class MetricRow:
    """One metric of one variant on both sides."""

    name: str
    unit: str
    kind: str
    better: str
    base: float | None
    cur: float | None
    verdict: str = "same"  # worse | better | same | inconclusive | changed | new | removed
    regression: bool = False  # this metric fails the gate
    rel: float | None = None  # relative change (cur / base - 1, or the estimated effect)
    ci: tuple[float, float] | None = None  # confidence interval of rel
    threshold: float | None = None
    note: str = ""

    @property
    def delta(self) -> float | None:
        if self.base is None or self.cur is None:
            return None
        return self.cur - self.base


@dataclass(slots=True)  # slots: one per variant, 100,000 in a large run
class VariantView:
    key: VariantKey
    base: VariantResult | None
    cur: VariantResult | None
    verdict: str
    regression: bool = False
    reasons: list[str] = field(default_factory=list)  # why it fails the gate, one line each
    notes: list[str] = field(default_factory=list)  # remarks that do not fail it (not comparable, ...)
    summary: str = ""  # what moved, e.g. "time +3.1% [+2.8%, +3.4%]; registers 96 -> 128"
    rows: list[MetricRow] = field(default_factory=list)
    score: float = 0.0  # worst-first sort key within a verdict (larger = worse)
    #: the current run's intra-kernel findings (its ``findings`` artifact), flagged ones first
    findings: list[Finding] = field(default_factory=list)
    #: names the baseline flagged; None when the baseline has no findings to compare with
    base_flagged: frozenset[str] | None = None
    #: the tests (pytest node ids) and variant names that reach this compiled kernel, and how
    #: many stored variants the row stands for (kperf_ci.report.kernels.fold_kernels)
    tests: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    members: int = 1
    spec_label: str = ""  # short_spec told apart from rows that would read alike (label_specs)

    @property
    def flagged_findings(self) -> list[Finding]:
        """Flagged findings, the costliest first (kperf_ci.analysis.findings.ranked)."""
        return flagged(ranked(self.findings))

    def top_findings(self, cap: int) -> list[Finding]:
        """What a summary lists for this kernel: the ``cap`` costliest flagged findings, one per
        piece of advice (kperf_ci.analysis.findings.capped)."""
        return capped(self.findings, cap)[0]

    def is_new_flag(self, f: Finding) -> bool:
        """Flagged now, not flagged in a baseline that had findings: what this change introduced."""
        return f.flagged and self.base_flagged is not None and f.name not in self.base_flagged

    @property
    def id(self) -> str:
        return self.key.id

    @property
    def tags(self) -> list[str]:
        r = self.cur or self.base
        return list(r.tags) if r else []

    @property
    def rank(self) -> int:
        """0 = worst; regressions come before everything else."""
        return (0 if self.regression else 1) * 10 + VERDICT_RANK.get(self.verdict, 9)

    @property
    def page(self) -> str:
        return f"k/{self.id}.html"

    @property
    def sass_changed(self) -> bool:
        return bool(
            self.base
            and self.cur
            and self.base.sass_hash
            and self.cur.sass_hash
            and self.base.sass_hash != self.cur.sass_hash
        )

    def row(self, name: str) -> MetricRow | None:
        for r in self.rows:
            if r.name == name:
                return r
        return None

    @property
    def headline(self) -> MetricRow | None:
        """The one number a list shows: the time if there is one, else the first that regressed."""
        return (
            self.row("time.median")
            or next((r for r in self.rows if r.regression), None)
            or next((r for r in self.rows if r.verdict in ("worse", "better", "changed")), None)
        )

    @property
    def headline_text(self) -> str:
        """The headline as text: the timing change with its interval, else what the metric did."""
        h = self.headline
        if h is None:
            return ""
        if h.name == "time.median":
            return f"{fmt_rel(h.rel)} {fmt_ci(h.ci)}".strip()
        return describe_row(h)

    @property
    def short_spec(self) -> str:
        """What tells variants of one kernel apart at a glance: the constexpr and specialised
        values of the signature (``BLOCK_M=128, stride_k=1``), else its end; with what tells it
        apart from a row that would read alike (label_specs)."""
        if self.spec_label:
            return self.spec_label
        parts = [p.strip() for p in self.key.spec.split(",")]
        named = [p for p in parts if "=" in p and ":" not in p]
        text = ", ".join(named) if named else self.key.spec
        return text if len(text) <= 80 else "…" + text[-79:]


@dataclass
class Report:
    current: RunInfo
    baseline: RunInfo | None
    variants: list[VariantView]  # worst first
    generated_at: str
    link: str | None = None  # URL of the full HTML report (for the markdown outputs)
    history: HistoryFn | None = None
    #: blob(side, variant_id, name) -> the stored bytes of a binary artifact ("baseline"/"current")
    blob: BlobFn | None = None
    notes: list[str] = field(default_factory=list)  # global remarks (e.g. missing baseline)
    #: the comparison's status ("compared" / "no comparable baseline"; compare.Comparison.status)
    #: and its line; None without a comparison
    comparison_status: str | None = None
    comparison_line: str = ""
    #: flagged findings listed per kernel in summaries (the kernel page lists all, costliest first)
    findings_per_kernel: int = DEFAULT_PER_KERNEL

    @property
    def regressions(self) -> list[VariantView]:
        """Kernels that fail the gate: regressed ones and failing removed ones."""
        return [v for v in self.variants if v.regression]

    @property
    def regressed_kernels(self) -> int:
        """The count kperf compare prints (Comparison.regressed_kernels), from the rows."""
        return sum(1 for v in self.variants if v.regression and v.verdict != "removed")

    @property
    def removed_kernels(self) -> int:
        return sum(1 for v in self.variants if v.regression and v.verdict == "removed")

    @property
    def counts(self) -> dict[str, int]:
        c = dict.fromkeys(VERDICTS, 0)
        for v in self.variants:
            c[v.verdict] = c.get(v.verdict, 0) + 1
        return c

    @property
    def tags(self) -> list[str]:
        return sorted({t for v in self.variants for t in v.tags})

    @property
    def flagged_findings(self) -> list[tuple[VariantView, Finding]]:
        """The flagged findings of the current run, at most ``findings_per_kernel`` per kernel
        (the costliest): those new since the baseline first, then in kernel order (worst first)."""
        cap = self.findings_per_kernel
        pairs = [(v, f) for v in self.variants for f in v.top_findings(cap)]
        return sorted(pairs, key=lambda vf: not vf[0].is_new_flag(vf[1]))

    @property
    def flagged_total(self) -> int:
        """Every flagged finding of the current run, the ones over the per-kernel cap included."""
        return sum(len(v.flagged_findings) for v in self.variants)

    @property
    def fingerprint_rows(self) -> list[tuple[str, str, str, bool]]:
        """(field, baseline, current, differs) for each fingerprint field either side has."""
        return fingerprint_rows(
            self.baseline.fingerprint if self.baseline else None, self.current.fingerprint
        )

    @property
    def fingerprints_differ(self) -> list[str]:
        """Names of the fields that differ and matter for comparing numbers."""
        return [
            f
            for f, _b, _c, d in self.fingerprint_rows
            if d and f not in _FP_IGNORED and not f.startswith("extra.")
        ]

    @property
    def comparable(self) -> bool:
        """Whether a baseline was there and enough of this run was compared with it to judge."""
        return self.baseline is not None and self.comparison_status in (None, "compared")

    @property
    def verdict_line(self) -> str:
        if self.regressions:
            return count_words(self.regressed_kernels, self.removed_kernels)
        if self.baseline is None:
            return "no baseline to compare with"
        if not self.comparable:
            return "no comparable baseline for this machine class"
        return "no regressions"

    @property
    def verdict_state(self) -> str:
        """The banner's state: "bad" (regressions), "warn" (nothing to judge against: no
        baseline, or none comparable), "good" (compared, no regressions). Only "good" gets a
        check mark."""
        if self.regressions:
            return "bad"
        return "good" if self.comparable else "warn"


# Fingerprint fields that differ between machines without changing what the numbers mean
# (extra.* too: clocks, temperature, platform strings); they are listed, never warned about.
_FP_IGNORED = {"host_hash"}
_FP_FIELDS = ("gpu", "sm_count", "driver", "cuda", "torch", "triton", "python", "cpu", "host_hash")


def _fp_str(v: Any) -> str:
    return "" if v is None else str(v)


def fingerprint_rows(base: Fingerprint | None, cur: Fingerprint) -> list[tuple[str, str, str, bool]]:
    rows = []
    for f in _FP_FIELDS:
        b = _fp_str(getattr(base, f)) if base else ""
        c = _fp_str(getattr(cur, f))
        if b or c:
            rows.append((f, b, c, base is not None and b != c))
    bx = base.extra if base else {}
    for k in sorted(set(bx) | set(cur.extra)):
        b, c = _fp_str(bx.get(k)), _fp_str(cur.extra.get(k))
        rows.append((f"extra.{k}", b, c, base is not None and b != c))
    return rows


# --------------------------------------------------------------------------- findings


def _text(x: Any) -> str:
    return "" if x is None else " ".join(str(x).split())


def load_findings(r: VariantResult | None) -> list[Finding] | None:
    """A variant's findings from its ``findings`` artifact (``findings_to_json``), flagged first;
    None when it has none. The artifact comes from the run, so a malformed one costs only
    its section (logged), and every text field is made a one-line string."""
    raw = r.artifacts.get(FINDINGS_ARTIFACT) if r is not None and r.artifacts else None
    if raw is None:
        return None
    try:
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        parsed = findings_from_json(text)
        out = []
        for f in parsed:
            th = _num(f.threshold)
            out.append(
                Finding(
                    name=_text(f.name),
                    value=float(f.value),
                    unit=_text(f.unit),
                    flagged=bool(f.flagged),
                    explanation=_text(f.explanation),
                    suggestion=_text(f.suggestion),
                    better=f.better if f.better in ("lower", "higher") else "none",
                    threshold=th,
                    cost_ns=_num(f.cost_ns),
                )
            )
    except Exception as e:  # noqa: BLE001 - any malformed artifact: no section, never no report
        # the label and the message quote stored text, and a warning reaches the terminal
        log.warning("findings of %s not shown: %s", terminal_safe(r.key.label()), terminal_safe(e))  # type: ignore[union-attr]
        return None
    return sorted(out, key=lambda f: not f.flagged)


def threshold_text(f: Finding) -> str:
    """Where the flag starts, in the finding's unit: "flagged above 20.0%" (or below)."""
    if f.threshold is None:
        return ""
    th = fmt_value(f.threshold, f.unit)
    if f.better == "higher":
        return f"flagged below {th}"
    if f.better == "lower":
        return f"flagged above {th}"
    return f"threshold {th}"


# --------------------------------------------------------------------------- building


def _num(v: Any) -> float | None:
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def _rel(base: float | None, cur: float | None) -> float | None:
    if base is None or cur is None:
        return None
    if base == 0:
        return 0.0 if cur == 0 else math.inf
    return cur / base - 1.0


def _plain_rows(base: VariantResult | None, cur: VariantResult | None) -> list[MetricRow]:
    """Rows from the metrics alone (no comparison policy): direction of change, no gate. The
    direction is the catalogue's (kperf_ci.metrics), as compare judges, not the one stored."""
    bm: dict[str, Metric] = {m.name: m for m in base.metrics} if base else {}
    cm: dict[str, Metric] = {m.name: m for m in cur.metrics} if cur else {}
    rows = []
    for name in list(cm) + [n for n in bm if n not in cm]:
        m = cm.get(name) or bm[name]
        better = direction_of(name, m.better)
        b, c = (bm[name].value if name in bm else None), (cm[name].value if name in cm else None)
        if b is None:
            verdict = "new"
        elif c is None:
            verdict = "removed"
        elif b == c:
            verdict = "same"
        elif better == "none":
            verdict = "changed"
        else:
            verdict = "worse" if (c > b) == (better == "lower") else "better"
        rows.append(MetricRow(name, m.unit, m.kind, better, b, c, verdict, rel=_rel(b, c)))
    rows.sort(key=_row_order)
    return rows


_TIME_ORDER = {name: i for i, name in enumerate(headline("time"))}


def _row_order(r: MetricRow) -> tuple:
    kind = _KIND_ORDER.get(r.kind, 9)
    if r.kind == "static":
        head = STATIC_HEADLINE.index(r.name) if r.name in STATIC_HEADLINE else len(STATIC_HEADLINE)
        return (kind, head, r.name)
    if r.kind == "time":
        return (kind, _TIME_ORDER.get(r.name, 99), r.name)
    return (kind, 0, r.name)


def describe_row(r: MetricRow) -> str:
    """Short attribution text: 'registers 96 -> 128', 'time.median +3.1% [+2.8%, +3.4%]'."""
    name = r.name.removeprefix("region.").removesuffix(".cycles") if r.kind == "region" else r.name
    if r.kind in ("time", "region") and r.rel is not None:
        return f"{name} {fmt_rel(r.rel)} {fmt_ci(r.ci)}".rstrip()
    if r.name == "spills" and r.base is not None and r.cur is not None and r.cur > r.base:
        return f"{fmt_value(r.cur - r.base)} B more spills ({fmt_value(r.base)} -> {fmt_value(r.cur)})"
    return f"{name} {fmt_value(r.base)} -> {fmt_value(r.cur)}"


def _summary(rows: Iterable[MetricRow], limit: int = 3) -> str:
    moved = [r for r in rows if r.regression] + [
        r
        for r in rows
        if not r.regression
        and r.verdict in ("worse", "better")
        and r.name not in ("time.mean", "time.min", "time.ci_low", "time.ci_high", "time.iqr")
        and not r.name.endswith((".fraction", ".ms"))
    ]
    return "; ".join(describe_row(r) for r in moved[:limit])


def _score(rows: list[MetricRow]) -> float:
    """How bad: the largest relative worsening among regressing rows, else among worse rows."""
    worst = [r.rel for r in rows if r.regression and r.rel is not None and not math.isinf(r.rel)]
    if not worst:
        worst = [
            abs(r.rel) if r.verdict == "worse" else -abs(r.rel)
            for r in rows
            if r.rel is not None and not math.isinf(r.rel) and r.verdict in ("worse", "better")
        ]
    return max(worst, default=0.0) + (1000.0 if any(r.regression for r in rows) else 0.0)


def plain_verdict(base: VariantResult | None, cur: VariantResult | None, rows: list[MetricRow]) -> str:
    """A variant's verdict from its rows: the time row if there is one, else the static rows."""
    if cur is None:
        return "removed"
    if base is None:
        return "new"
    if cur.error:
        return "error"
    t = next((r for r in rows if r.name == "time.median"), None)
    if t is not None:
        return variant_verdict_of_time_row(t.verdict)
    static = [r for r in rows if r.kind == "static"]
    if any(r.regression or r.verdict == "worse" for r in static):
        return "worse"
    if any(r.verdict == "better" for r in static):
        return "better"
    return "unchanged"


def build_report(
    current: RunRecord,
    baseline: RunRecord | None,
    comparison: Any = None,
    *,
    history: HistoryFn | None = None,
    blob: BlobFn | None = None,
    link: str | None = None,
    generated_at: str | None = None,
    findings_per_kernel: int = DEFAULT_PER_KERNEL,
) -> Report:
    """Join the two runs by variant and apply the comparison (``kperf_ci.judge.compare.Comparison``).

    Without a comparison every metric still gets its direction of change and a variant's verdict
    follows its time.median (no statistics, no gate): enough for a look, not for CI.

    One row per compiled kernel: variants of the same kernel reached through several tests are
    folded into the worst of them, which lists the tests (kperf_ci.report.kernels).
    """
    base_by_id = {r.key.id: r for r in baseline.results} if baseline else {}
    cur_by_id = {r.key.id: r for r in current.results}
    # Variants the comparison matched across a key change or across modes: one view, current's key.
    rematched = {c.id: b.id for b, c in getattr(comparison, "rematched", [])}
    key_changes = {k.current.id: k.description for k in getattr(comparison, "key_changes", [])}
    paired_base = set(rematched.values())
    views: dict[str, VariantView] = {}
    for vid in list(cur_by_id) + [i for i in base_by_id if i not in cur_by_id and i not in paired_base]:
        b, c = base_by_id.get(rematched.get(vid, vid)), cur_by_id.get(vid)
        rows = _plain_rows(b, c)
        key = (c or b).key  # type: ignore[union-attr]
        v = VariantView(key=key, base=b, cur=c, verdict="", rows=rows)
        if vid in key_changes and b is not None:
            v.notes.append(f"matched across a change of specialization or launch options: {key_changes[vid]}")
        if c is not None and c.error:
            v.reasons.append(f"error: {c.error}")
        v.findings = load_findings(c) or []
        base_findings = load_findings(b)
        if base_findings is not None:
            v.base_flagged = frozenset(f.name for f in base_findings if f.flagged)
        views[vid] = v
    if comparison is not None:
        _apply_comparison(comparison, views)
    for v in views.values():
        v.verdict = plain_verdict(v.base, v.cur, v.rows) if baseline is not None else "new"
        if v.verdict == "error" and v.base is not None and not v.base.error:
            v.regression = True
        if not v.summary:
            v.summary = _summary(v.rows)
        v.score = _score(v.rows)
    ordered = sorted(views.values(), key=lambda v: (v.rank, -v.score, v.key.kernel, v.key.arch, v.key.config))
    ordered = fold_kernels(ordered)
    label_specs(ordered)
    notes = []
    if baseline is None:
        notes.append("No baseline run: every variant is shown as new.")
    for kind, why in sorted({(i.kind, i.reason) for i in getattr(comparison, "incomparable", [])}):
        notes.append(f"{kind} metrics not compared: {why}.")
    status = getattr(comparison, "status", None)
    if status is not None and status != "compared":
        notes.insert(0, f"{comparison.status_line[:1].upper()}{comparison.status_line[1:]}.")
    not_run: dict[str, int] = {}
    for n in getattr(comparison, "not_run", []):
        not_run[n.reason] = not_run.get(n.reason, 0) + 1
    for why, count in not_run.items():
        notes.append(f"{count} baseline variant(s) not run here: {why}.")
    return Report(
        current=current.info,
        baseline=baseline.info if baseline else None,
        variants=ordered,
        generated_at=generated_at or datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        link=link,
        history=history,
        blob=blob,
        notes=notes,
        comparison_status=status,
        comparison_line=getattr(comparison, "status_line", ""),
        findings_per_kernel=findings_per_kernel,
    )


# --------------------------------------------------------------------------- comparison

_DIRECTION = {"better": "better", "worse": "worse", "same": "same"}


def _apply_comparison(comparison: Any, views: dict[str, VariantView]) -> None:
    """Copy the verdicts, intervals, thresholds and gate results of a Comparison onto the rows.

    Rows of a metric kind the comparison refused to compare (different GPU, Triton) lose their
    direction: they are shown, never judged.
    """
    for inc in getattr(comparison, "incomparable", []):
        v = views.get(inc.variant.id)
        if v is None:
            continue
        v.notes.append(f"{inc.kind} metrics not compared: {inc.reason}")
        for r in v.rows:
            if r.kind == inc.kind:
                r.verdict, r.note = "n/a", "not comparable"
    for key in getattr(comparison, "failing_removed", []):
        v = views.get(key.id)
        if v is not None:  # kperf compare exits 1 on it: the report must not look greener
            v.regression = True
            v.reasons.append("removed: measured in the baseline, missing from this run although its test ran")
    for ch in comparison.changes:
        v = views.get(ch.variant.id)
        if v is None:
            continue
        if ch.metric == "error":
            v.regression = True
            if ch.reason not in v.reasons:
                v.reasons.append(ch.reason)
            continue
        r = v.row(ch.metric)
        if r is None:
            continue
        if ch.base is not None and ch.current is not None:
            if ch.direction == "n/a":
                r.verdict = "changed" if ch.base != ch.current and r.better == "none" else "same"
            else:
                r.verdict = _DIRECTION.get(ch.direction, r.verdict)
        if ch.verdict:  # timing decided on samples
            r.verdict = row_verdict_of_timing(ch.verdict)
        if ch.rel is not None and not math.isnan(ch.rel):
            r.rel = ch.rel
        if ch.ci and not any(math.isnan(x) for x in ch.ci):
            r.ci = (ch.ci[0] - 1.0, ch.ci[1] - 1.0)  # compare gives the ratio's interval
        r.threshold = ch.threshold
        r.regression = bool(ch.regression)
        if ch.regression:
            v.regression = True
            v.reasons.append(ch.reason)
        if ch.regression or ch.verdict:
            r.note = ch.reason
