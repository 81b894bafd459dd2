"""What a report shows, computed once from two runs and their comparison (by
:func:`kperf_ci.report.build.build_report`); rendered by html/markdown.

The view holds no markup: every string in it is plain text (kernel names included) and the
renderers escape it for their format.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..analysis.findings import DEFAULT_PER_KERNEL, Finding, capped, flagged, ranked
from ..capture.static.sass import CLASSES
from ..judge.comparison import OTHER_MACHINE_CLASS
from ..judge.group import count_words, size_words, triton_kernels
from ..judge.verdict import Regression
from ..metrics import MAIN_VERDICTS as MAIN_VERDICTS  # re-exported: the renderers count them
from ..metrics import VERDICT_RANK, display_name, headline, moved_text, unit_of
from ..metrics import VERDICTS as VERDICTS
from ..model import Fingerprint, RunInfo, VariantKey, VariantResult
from ..units import fmt_ci, fmt_rel, fmt_value
from .kernels import short_spec

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
    #: the timing verdict the row was decided by (slower / faster / unchanged / inconclusive; None
    #: when no samples decided it), kept so that the variant's verdict is not decoded back from
    #: ``verdict``
    timing: str | None = None

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
    def shown_config(self) -> str:
        """The launch options as a headline shows them: a multi-kernel callable's timing is keyed
        by an internal "callable:<hash>" (its kernels are rows of their own), never shown."""
        return "" if self.key.config.startswith("callable:") else self.key.config

    @property
    def touched(self) -> bool:
        """Whether the change touched this kernel: a verdict other than unchanged (slower, worse,
        new, ...; without a baseline every kernel is new), or compiled code that differs."""
        if self.verdict not in ("unchanged", "same"):
            return True
        b, c = self.base, self.cur
        return b is not None and c is not None and b.sass_hash != c.sass_hash

    @property
    def short_spec(self) -> str:
        """What tells variants of one kernel apart at a glance: the constexpr and specialised
        values of the signature (``BLOCK_M=128, stride_k=1``), else its end; with what tells it
        apart from a row that would read alike (label_specs)."""
        if self.spec_label:
            return self.spec_label
        return short_spec(self.key.spec)


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
    #: the comparison's status ("compared" / "no comparable baseline"; comparison.Comparison.status)
    #: and its line; None without a comparison
    comparison_status: str | None = None
    comparison_line: str = ""
    #: why there is no verdict in a few words (comparison.Comparison.no_verdict_reason)
    comparison_reason: str = ""
    #: flagged findings listed per kernel in summaries (the kernel page lists all, costliest first)
    findings_per_kernel: int = DEFAULT_PER_KERNEL
    #: the baseline is the run before this one, standing in for a missing baseline database
    #: (`kperf run` without baselines/main.db): what moved is shown, but nothing gated the run
    previous_run: bool = False
    #: the comparison's one answer (:func:`kperf_ci.judge.verdict.regression`), as `kperf
    #: compare`'s exit code reads it; the headline, banner and commit status read it from here.
    #: Empty without a comparison: nothing was judged
    regression: Regression = field(default_factory=Regression)

    @property
    def regressions(self) -> list[VariantView]:
        """The kernels listed as failing the gate: regressed ones and failing removed ones (the
        rows the comparison marked; whether the report is a regression is :attr:`regression`)."""
        return [v for v in self.variants if v.regression]

    @property
    def regressed_kernels(self) -> int:
        """The count kperf compare prints (Comparison.regressed_kernels)."""
        return self.regression.regressed

    @property
    def removed_kernels(self) -> int:
        return self.regression.removed

    @property
    def ran_words(self) -> str:
        """ "6 variants of 1 kernel" (in N rows where tests share a compiled variant) of this run,
        counted as the pytest summary and `kperf show` count them."""
        return _size([v for v in self.variants if v.verdict != "not-run"])

    @property
    def not_run_words(self) -> str:
        """ "not run here: 78 variants of 5 kernels in 66 rows of the baseline", or "": never counted
        into this run's size (a bench run's 4 read "82 variants", walk 3 of issue 38, J1-4)."""
        gone = [v for v in self.variants if v.verdict == "not-run"]
        return f"not run here: {_size(gone)} of the baseline" if gone else ""

    @property
    def not_run_kernels(self) -> list[tuple[str, int, list[str]]] | None:
        """(kernel, variants, archs) of the baseline's not-run rows, per kernel, when no variant of
        this run was compared (each is new: a bench run against a suite's baseline), where one row
        each said nothing (66 rows of a comment, walk 3 of issue 38, J1-7); None when some were:
        then each row says what did not run."""
        if any(v.verdict not in ("new", "not-run") for v in self.variants):
            return None
        out: dict[str, tuple[int, set[str]]] = {}
        for v in self.variants:
            if v.verdict == "not-run":
                n, archs = out.get(v.key.kernel, (0, set()))
                out[v.key.kernel] = (n + v.members, archs | {v.key.arch})
        return [(k, n, sorted(a)) for k, (n, a) in out.items()]

    @property
    def size_words(self) -> str:
        """This run's size, then the baseline's variants that did not run here, if any."""
        return "; ".join(w for w in (self.ran_words, self.not_run_words) if w)

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
    def pr_findings(self) -> list[tuple[VariantView, Finding]]:
        """What a pull-request comment lists: the flagged findings of kernels the change touched
        (:attr:`VariantView.touched`); those of kernels it left alone pre-date it (full report)."""
        return [(v, f) for v, f in self.flagged_findings if v.touched]

    @property
    def pr_flagged_total(self) -> int:
        return sum(len(v.flagged_findings) for v in self.variants if v.touched)

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
        if self.regression:
            words = count_words(self.regressed_kernels, self.removed_kernels)
            return (
                f"{words} since the previous run (no baseline database: not gated)"
                if self.previous_run
                else words
            )
        if self.baseline is None:
            return "no baseline to compare with"
        if not self.comparable:
            return self.comparison_reason or OTHER_MACHINE_CLASS
        return "no regressions"

    @property
    def verdict_state(self) -> str:
        """The banner's state: "bad" (regressions), "warn" (nothing to judge against: no
        baseline, or none comparable), "good" (compared, no regressions). Only "good" gets a
        check mark."""
        if self.regression:
            return "warn" if self.previous_run else "bad"
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


# --------------------------------------------------------------------------- text


def describe_row(r: MetricRow) -> str:
    """Short attribution text, in the catalogue's display names: 'registers 96 -> 128',
    'median time +3.1% [+2.8%, +3.4%]', '16 B more spills (0 B -> 16 B)'."""
    if r.kind in ("time", "region") and r.rel is not None:
        return f"{display_name(r.name)} {fmt_rel(r.rel)} {fmt_ci(r.ci)}".rstrip()
    if r.name == "spills" and r.base is not None and r.cur is not None and r.cur > r.base:
        unit = unit_of(r.name, r.unit)
        more = fmt_value(r.cur - r.base, unit)
        return f"{more} more spills ({fmt_value(r.base, unit)} -> {fmt_value(r.cur, unit)})"
    return moved_text(r.name, r.base, r.cur, r.unit)


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


def _size(views: list[VariantView]) -> str:
    return size_words(sum(v.members for v in views), triton_kernels(v.key for v in views), len(views))
