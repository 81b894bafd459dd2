"""The CI gate: block a change when a kernel is slower than its threshold, with confidence.

Two ways to say "slower than what" (``[tool.kperf.gate] against``):

* ``"release"``: against the stored run of the last release tag (``git describe --tags --match
  <tag>``; if the current run is that very commit, the release before it).  The comparison is
  :func:`kperf_ci.judge.compare.compare_runs` on raw samples: a ``time.median`` regression means the
  confidence interval of the ratio lies above 1 and the effect exceeds the kernel's threshold
  (marker > ``[tool.kperf.thresholds]`` > default).
* ``"history"``: against a window of stored runs (oldest first).  Change points are found in the
  window's ``time.median`` series (E-divisive, :mod:`kperf_ci.judge.changepoint`).  A slowdown step that
  is not listed in ``accept`` blocks.  The current run is then compared with the current level
  (the runs after the last change point: accepted steps re-level the baseline), on pooled raw
  samples, with the threshold raised to what the history's own run-to-run noise needs
  (:func:`kperf_ci.judge.changepoint.noise_model` on the level's ratios).

Every blocking kernel comes with its evidence (effect, interval, threshold and where it came
from, sample counts, the run or step it was compared with).  Exit status 1 when anything
blocks, 0 otherwise.  Pure functions on :class:`~kperf_ci.model.RunRecord` s; the command wires
the store and git in.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kperf_ci.exit_codes import EXIT_REGRESSION
from kperf_ci.git import git, git_or_none
from kperf_ci.judge.changepoint import (
    current_baseline,
    detect_change_points,
    noise_model,
    regime_ratios,
)
from kperf_ci.judge.compare import compare_runs
from kperf_ci.judge.policy import ThresholdPolicy
from kperf_ci.judge.stats import compare_samples
from kperf_ci.judge.verdict import is_regression
from kperf_ci.metrics import DEFAULT_THRESHOLDS
from kperf_ci.model import RunInfo, RunRecord, VariantKey, VariantResult

AGAINST = ("release", "history")


class GateError(ValueError):
    """A bad policy or missing data: one line, says what to do."""


@dataclass(frozen=True)
class GatePolicy:
    against: str = "release"  # "release" | "history"
    tag: str = "v*"  # glob of release tags
    window: int = 30  # history: runs looked at (current excluded)
    min_history: int = 5  # history: runs needed at the current level to compare with it
    alpha: float = 0.01  # history: significance of a change point
    static: bool = False  # also block on static regressions (spills, registers, ...)
    accept: tuple[str, ...] = ()  # history: run ids / commit shas (prefixes) of accepted steps
    ignore: tuple[str, ...] = ()  # kernel name globs never gated
    db: str | None = None  # database holding the release runs / the history (default: baseline)

    @classmethod
    def from_table(cls, table: dict[str, Any] | None, source: str = "[tool.kperf.gate]") -> GatePolicy:
        table = dict(table or {})
        unknown = sorted(set(table) - set(cls.__dataclass_fields__))
        if unknown:
            raise GateError(
                f"{source}: unknown key(s) {', '.join(unknown)}; known: {', '.join(cls.__dataclass_fields__)}"
            )
        kw: dict[str, Any] = {}
        for key, value in table.items():
            kw[key] = _validate(key, value, source)
        return cls(**kw)

    def merged(self, **overrides: Any) -> GatePolicy:
        kw = asdict(self)
        for key, value in overrides.items():
            if value is not None:
                kw[key] = _validate(key, value, "command line")
        return GatePolicy(**kw)


def _validate(key: str, value: Any, source: str) -> Any:
    def bad(allowed: str) -> GateError:
        return GateError(f"gate setting {key!r} from {source}: {value!r} is not valid; {allowed}")

    if key == "against":
        if value not in AGAINST:
            raise bad(f"use one of {', '.join(AGAINST)}")
        return value
    if key in ("tag", "db"):
        if not isinstance(value, str) or not value:
            raise bad("use a non-empty string")
        return value
    if key in ("window", "min_history"):
        if isinstance(value, bool) or not isinstance(value, int) or value < (6 if key == "window" else 2):
            raise bad("use an integer >= 6" if key == "window" else "use an integer >= 2")
        return value
    if key == "alpha":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
            raise bad("use a number in (0, 1)")
        return float(value)
    if key == "static":
        if not isinstance(value, bool):
            raise bad("use true or false")
        return value
    if key in ("accept", "ignore"):
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
            raise bad("use a list of strings")
        return tuple(value)
    raise bad("unknown key")


@dataclass
class Blocker:
    kernel: str
    variant: str  # VariantKey.label()
    variant_id: str
    metric: str
    evidence: str  # one line: effect, interval, threshold, n, against what
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class GateReport:
    against: str  # one line: what the current run was compared with
    current: str  # current run id
    checked: int = 0  # variants looked at
    blockers: list[Blocker] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # not blocking: skipped variants, missing data

    @property
    def blocked(self) -> bool:
        return bool(self.blockers)

    @property
    def exit_code(self) -> int:
        return EXIT_REGRESSION if self.blockers else 0

    def render(self) -> str:
        head = "BLOCKED" if self.blocked else "passed"
        lines = [
            f"kperf gate: {head} -- run {self.current} against {self.against}; "
            f"{self.checked} variants checked"
        ]
        for b in self.blockers:
            lines.append(f"  BLOCK {b.variant} [{b.metric}]: {b.evidence}")
        for n in self.notes:
            lines.append(f"  note: {n}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "against": self.against,
            "current": self.current,
            "checked": self.checked,
            "blocked": self.blocked,
            "exit_code": self.exit_code,
            "blockers": [_finite(asdict(b)) for b in self.blockers],
            "notes": list(self.notes),
        }


def _finite(d: Any) -> Any:
    if isinstance(d, dict):
        return {k: _finite(v) for k, v in d.items()}
    if isinstance(d, (list, tuple)):
        return [_finite(v) for v in d]
    if isinstance(d, float) and not math.isfinite(d):
        return None
    return d


def _ignored(key: VariantKey, policy: GatePolicy) -> bool:
    return any(fnmatch.fnmatchcase(key.kernel, pat) for pat in policy.ignore)


# --------------------------------------------------------------------------------------------
# against one stored run (a release)


def gate_against_run(
    base: RunRecord,
    cur: RunRecord,
    policy: GatePolicy,
    thresholds: ThresholdPolicy | None = None,
    *,
    label: str | None = None,
) -> GateReport:
    """Block on time.median regressions (and static ones when ``policy.static``) vs ``base``."""
    thresholds = thresholds or ThresholdPolicy()
    report = GateReport(against=label or f"run {base.info.run_id}", current=cur.info.run_id)
    comp = compare_runs(base, cur, thresholds)
    report.checked = sum(1 for r in cur.results if not _ignored(r.key, policy))
    for ch in comp.regressions:
        if _ignored(ch.variant, policy):
            continue
        if ch.metric != "time.median" and not policy.static:
            continue
        report.blockers.append(
            Blocker(
                kernel=ch.variant.kernel,
                variant=ch.variant.label(),
                variant_id=ch.variant.id,
                metric=ch.metric,
                evidence=ch.reason,
                details=ch.to_dict(),
            )
        )
    seen = set()
    for inc in comp.incomparable:
        if inc.kind == "time" and inc.reason not in seen:
            seen.add(inc.reason)
            report.notes.append(f"timing not gated: {inc.reason}")
    if comp.added:
        report.notes.append(
            f"{len(comp.added)} variant(s) new since {report.against}: nothing to gate them against"
        )
    return report


# --------------------------------------------------------------------------------------------
# against a window of history


def _time_median(r: VariantResult) -> float | None:
    m = r.metric("time.median")
    if m is not None and m.value > 0 and math.isfinite(m.value):
        return float(m.value)
    if r.samples:
        return float(np.median(r.samples))
    return None


def _accepted(info: RunInfo, policy: GatePolicy) -> bool:
    keys = [info.run_id, info.git_sha or ""]
    return any(k and a and k.startswith(a) for a in policy.accept for k in keys)


def gate_history(
    history: list[RunRecord],
    cur: RunRecord,
    policy: GatePolicy,
    thresholds: ThresholdPolicy | None = None,
    *,
    seed: int = 0,
) -> GateReport:
    """Gate ``cur`` against ``history`` (oldest first; only the last ``policy.window`` runs)."""
    thresholds = thresholds or ThresholdPolicy()
    window = history[-policy.window :]
    report = GateReport(
        against=f"history of {len(window)} run(s) (change points at alpha={policy.alpha:g})",
        current=cur.info.run_id,
    )
    by_run = [({r.key.id: r for r in rec.results}, rec.info) for rec in window]
    for res in cur.results:
        if _ignored(res.key, policy):
            continue
        cur_med = _time_median(res)
        if cur_med is None:
            continue
        report.checked += 1
        series: list[tuple[RunInfo, VariantResult, float]] = []
        for results, info in by_run:
            r = results.get(res.key.id)
            v = _time_median(r) if r is not None else None
            if v is not None:
                series.append((info, r, v))
        label = res.key.label()
        if len(series) < policy.min_history:
            report.notes.append(
                f"{label}: {len(series)} run(s) of history, need {policy.min_history}: not gated"
            )
            continue
        values = [v for _, _, v in series]
        infos = [i for i, _, _ in series]
        cps = detect_change_points(values, labels=[i.run_id for i in infos], alpha=policy.alpha, seed=seed)
        threshold, source = thresholds.threshold("time.median", res.thresholds)
        threshold = DEFAULT_THRESHOLDS["time"] if threshold is None else threshold
        for cp in cps:
            info = infos[cp.index]
            if cp.rel > threshold and not _accepted(info, policy):
                sha = f" ({info.git_sha[:10]})" if info.git_sha else ""
                report.blockers.append(
                    Blocker(
                        kernel=res.key.kernel,
                        variant=label,
                        variant_id=res.key.id,
                        metric="time.median",
                        evidence=(
                            f"step {cp.rel:+.1%} at run {info.run_id}{sha}: median {cp.before_median:.4g} -> "
                            f"{cp.after_median:.4g} ms, p={cp.p_value:.3g} "
                            f"(threshold +{threshold:.1%} {source}); "
                            f'accept it with [tool.kperf.gate] accept = ["{info.run_id}"]'
                        ),
                        details={"change_point": cp.to_dict(), "threshold": threshold},
                    )
                )
        start, level = current_baseline(values, cps)
        level_runs = series[start:]
        if len(level_runs) < policy.min_history:
            report.notes.append(
                f"{label}: {len(level_runs)} run(s) since the last step at {infos[start].run_id}, "
                f"need {policy.min_history}: current run not compared"
            )
            continue
        noise_t = noise_model(regime_ratios(values, cps))
        t_eff = max(threshold, noise_t)
        why_t = f"+{t_eff:.1%} ({source} {threshold:.1%}, history noise {noise_t:.1%})"
        pooled = [x for _, r, _ in level_runs for x in r.samples]
        if len(pooled) >= 2 and len(res.samples) >= 2:
            c = compare_samples(pooled, res.samples, threshold=t_eff, floor=thresholds.time_floor_ms)
            slower = is_regression(c.verdict)  # "inconclusive" never blocks
            evidence = (
                f"{c.rel:+.1%} [{c.ci_low - 1:+.1%}, {c.ci_high - 1:+.1%}] ({c.confidence:.0%} CI) vs the "
                f"level of the last {len(level_runs)} runs, threshold {why_t}, n={c.n_base}/{c.n_cur}"
            )
            details = {"comparison": _finite(c.to_dict())}
        else:
            rel = cur_med / level - 1.0
            slower = rel > t_eff and (cur_med - level) > thresholds.time_floor_ms
            evidence = (
                f"{rel:+.1%} vs the median of the last {len(level_runs)} runs ({level:.4g} ms), threshold "
                f"{why_t}; medians only (no samples)"
            )
            details = {"rel": rel, "level_ms": level}
        if slower:
            details.update(threshold=t_eff, level_since=infos[start].run_id)
            report.blockers.append(
                Blocker(res.key.kernel, label, res.key.id, "time.median", evidence, details)
            )
    return report


# --------------------------------------------------------------------------------------------
# git: the last release


def last_release(repo: str | Path, pattern: str, current_sha: str | None) -> tuple[str, str] | None:
    """(tag, commit sha) of the newest tag matching ``pattern`` reachable from HEAD; when that tag
    is the current commit itself, the one before it. None when there is none."""

    def describe(rev: str) -> str | None:
        return git_or_none(repo, "describe", "--tags", "--abbrev=0", "--match", pattern, rev)

    def sha_of(rev: str) -> str:
        return git(repo, "rev-parse", f"{rev}^{{commit}}")

    tag = describe("HEAD")
    if tag is None:
        return None
    sha = sha_of(tag)
    if current_sha and (sha.startswith(current_sha) or current_sha.startswith(sha)):
        tag = describe(f"{tag}^")
        if tag is None:
            return None
        sha = sha_of(tag)
    return tag, sha


# --------------------------------------------------------------------------- which runs a gate reads


def release_runs(infos: list[RunInfo], sha: str, mode: str) -> list[RunInfo]:
    """The stored runs of a release commit ``sha`` (an abbreviated sha on either side matches),
    those of the current run's ``mode`` when there are any."""
    candidates = [i for i in infos if i.git_sha and (sha.startswith(i.git_sha) or i.git_sha.startswith(sha))]
    return [i for i in candidates if i.mode == mode] or candidates


def history_runs(infos: list[RunInfo], cur: RunInfo, window: int) -> list[RunInfo]:
    """The last ``window`` runs a history gate compares ``cur`` with: other runs of its mode, on
    its GPU when it names one, started no later than it."""
    out = [i for i in infos if i.run_id != cur.run_id and i.mode == cur.mode]
    if cur.fingerprint.gpu:
        out = [i for i in out if i.fingerprint.gpu == cur.fingerprint.gpu]
    if cur.started_at:
        out = [i for i in out if i.started_at <= cur.started_at]
    return out[-window:]
