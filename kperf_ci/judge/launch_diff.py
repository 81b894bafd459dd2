"""What changed between the base and the head of a pull request, without running anything: the
static runs' variants (:func:`diff_static`) and, per test, every launch with its options,
arguments, grid and compiled code (:func:`diff_tests`, from the launch manifests); and which of
those changes regress the static metrics (:func:`static_regressions`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kperf_ci.judge.matching import _match, parse_config

# the static verdict's home; static_regressions is imported here for the callers of this module
from kperf_ci.judge.static_verdict import metric_moved
from kperf_ci.judge.static_verdict import static_regressions as static_regressions
from kperf_ci.metrics import MOVED_METRICS
from kperf_ci.model import VariantResult


@dataclass
class StaticDiff:
    """Variants matched across base and head by ``VariantKey.id`` (kernel, arch, spec, config)."""

    identical: list[VariantResult] = field(default_factory=list)  # head results, same SASS as base
    changed: list[VariantResult] = field(default_factory=list)  # head results, SASS differs
    added: list[VariantResult] = field(default_factory=list)  # only in head
    removed: list[VariantResult] = field(default_factory=list)  # only in base (base results)
    unknown: list[VariantResult] = field(default_factory=list)  # no SASS hash on a side (error)

    def tests(self, which: str) -> list[str]:
        """Head test ids: "identical" = every variant of the test identical; "to_time" = the rest."""
        by_test: dict[str, bool] = {}
        for r in self.identical:
            by_test.setdefault(r.key.test, True)
        for r in (*self.changed, *self.added, *self.unknown):
            by_test[r.key.test] = False
        want = which == "identical"
        return sorted(t for t, same in by_test.items() if t and same == want)


def diff_static(base: list[VariantResult], head: list[VariantResult]) -> StaticDiff:
    """Compare normalized-SASS hashes variant by variant.

    Variants are matched as ``kperf compare`` matches them (by id, then by kernel/arch/config
    when the specialization changed); a re-matched pair counts as changed.
    """

    pairs, removed, added = _match(base, head)
    out = StaticDiff(added=list(added), removed=list(removed))
    for b, h, rematched in pairs:
        if not h.sass_hash or not b.sass_hash:
            out.unknown.append(h)
        elif h.sass_hash == b.sass_hash and not rematched:
            out.identical.append(h)
        else:
            out.changed.append(h)
    return out


# --------------------------------------------------------------------------------------------
# static pass, per test: does anything a test launches differ from the base revision?


@dataclass
class LaunchChange:
    """One launch of a test compared with its base counterpart (matched by launch site, then by
    order among the launches of that site)."""

    name: str  # kernel name as stored (marker name / kernel)
    site: str  # "path::qualname" of the kernel
    status: str  # identical | changed | added | removed
    changes: list[str] = field(default_factory=list)  # "num_stages 3 -> 1", "grid 132 -> 133", ...
    base: dict[str, Any] | None = None
    head: dict[str, Any] | None = None

    @property
    def label(self) -> str:
        """The stored name, with the kernel's own name when the marker renamed it."""
        qualname = self.site.rsplit("::", 1)[-1]
        return self.name if self.name.endswith(qualname) else f"{self.name} ({qualname})"


@dataclass
class TestDiff:
    test: str
    status: str  # identical | changed | added | removed | no-launches
    launches: list[LaunchChange] = field(default_factory=list)

    @property
    def changes(self) -> list[str]:
        out = []
        for lc in self.launches:
            if lc.status == "identical":
                continue
            what = "; ".join(lc.changes) if lc.changes else lc.status
            out.append(f"{lc.label}: {what}")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "test": self.test,
            "status": self.status,
            "changes": self.changes,
            "launches": [
                {"name": lc.name, "site": lc.site, "status": lc.status, "changes": lc.changes}
                for lc in self.launches
            ],
        }


def _dict_changes(b: dict[str, Any], h: dict[str, Any], fmt: Callable[[str, Any, Any], str]) -> list[str]:
    out = []
    for k in list(dict.fromkeys([*b, *h])):
        if b.get(k) != h.get(k):
            out.append(fmt(k, b.get(k, "-"), h.get(k, "-")))
    return out


def launch_changes(b: dict[str, Any], h: dict[str, Any]) -> list[str]:
    """What differs between two manifest rows, most telling first: options, arguments, grid,
    then per arch the code (SASS) and its static metrics."""

    out = _dict_changes(
        parse_config(b.get("config", "")),
        parse_config(h.get("config", "")),
        lambda k, x, y: f"{k} {x} -> {y}",
    )
    out += _dict_changes(b.get("args") or {}, h.get("args") or {}, lambda k, x, y: f"{k} {x} -> {y}")
    if b.get("grid") != h.get("grid"):
        out.append(f"grid {tuple(b.get('grid') or ())} -> {tuple(h.get('grid') or ())}")
    if not out and b.get("spec") != h.get("spec"):
        out.append("specialization changed")  # e.g. alignment of a pointer argument
    bc, hc = b.get("code") or {}, h.get("code") or {}
    for arch in sorted(set(bc) | set(hc)):
        x, y = bc.get(arch), hc.get(arch)
        if x is None or y is None:
            out.append(f"{arch}: compiled on one side only")
            continue
        if x.get("error") or y.get("error") or not x.get("sass") or not y.get("sass"):
            out.append(f"{arch}: no SASS on a side (compile error)")
            continue
        if x.get("sass") == y.get("sass"):
            continue
        moved = [metric_moved(k, x.get(k), y.get(k)) for k in CODE_METRICS_ORDER if x.get(k) != y.get(k)]
        out.append(f"{arch} SASS changed" + (": " + ", ".join(moved) if moved else ""))
    return out


#: static metrics in the order "what moved" lists them (the catalogue's)
CODE_METRICS_ORDER = MOVED_METRICS


def _pair_launches(base: list[dict[str, Any]], head: list[dict[str, Any]]) -> list[LaunchChange]:
    by_site: dict[str, list[dict[str, Any]]] = {}
    for r in base:
        by_site.setdefault(str(r.get("site")), []).append(r)
    out = []
    for h in head:
        site = str(h.get("site"))
        queue = by_site.get(site) or []
        if not queue:
            out.append(
                LaunchChange(str(h.get("name")), site, "added", ["kernel launched in head only"], head=h)
            )
            continue
        b = queue.pop(0)
        changes = launch_changes(b, h)
        out.append(
            LaunchChange(str(h.get("name")), site, "changed" if changes else "identical", changes, b, h)
        )
    for site, rest in by_site.items():
        for b in rest:
            out.append(
                LaunchChange(str(b.get("name")), site, "removed", ["kernel launched in base only"], base=b)
            )
    return out


def diff_tests(
    base: dict[str, list[dict[str, Any]]], head: dict[str, list[dict[str, Any]]]
) -> list[TestDiff]:
    """Per test (node id), head against base.  A test needs GPU time unless every one of its
    launches is identical: same code on every arch, same options, same specialization, same work
    (grid, integer arguments, tensor shapes)."""
    out = []
    for test in sorted(set(base) | set(head)):
        if test not in head:
            out.append(TestDiff(test, "removed"))
            continue
        if test not in base:
            out.append(
                TestDiff(
                    test,
                    "added",
                    [
                        LaunchChange(str(h.get("name")), str(h.get("site")), "added", [], head=h)
                        for h in head[test]
                    ],
                )
            )
            continue
        if not head[test] and not base[test]:
            out.append(TestDiff(test, "no-launches"))
            continue
        launches = _pair_launches(base[test], head[test])
        same = all(lc.status == "identical" for lc in launches)
        out.append(TestDiff(test, "identical" if same else "changed", launches))
    return out


def tests_from_variants(diff: StaticDiff) -> list[TestDiff]:
    """Per-test diffs from a variant-level diff, for a base run without a launch manifest."""
    out = {t: TestDiff(t, "identical") for t in diff.tests("identical")}
    for r in (*diff.changed, *diff.added, *diff.unknown):
        if r.key.test:
            td = out.setdefault(r.key.test, TestDiff(r.key.test, "changed"))
            td.status = "changed"
            td.launches.append(
                LaunchChange(r.key.kernel, r.key.source, "changed", [f"{r.key.label()} differs"])
            )
    return [out[t] for t in sorted(out)]
