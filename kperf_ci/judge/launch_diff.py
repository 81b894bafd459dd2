"""What changed between the base and the head of a pull request, without running anything: the
static runs' variants (:func:`diff_static`) and, per test, every launch with its options,
arguments, grid and compiled code (:func:`diff_tests`, from the launch manifests); and which of
those changes regress the static metrics (:func:`static_regressions`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kperf_ci.judge.group import ordered_args
from kperf_ci.judge.matching import _match, parse_config

# the static verdict's home; static_regressions is imported here for the callers of this module
from kperf_ci.judge.static_verdict import (
    _num_warps,
    _small_grid_note,
    metric_moved,
    occupancy_change,
)
from kperf_ci.judge.static_verdict import static_regressions as static_regressions
from kperf_ci.launch_calls import (
    autotuned,
    call_key,
    calls,
    config_id,
    config_labels,
    config_list,
    pick,
    set_rows,
    value_labels,
)
from kperf_ci.metrics import MOVED_METRICS
from kperf_ci.model import VariantResult
from kperf_ci.occupancy import grid_within_sms


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
    """One launch (a call) of a test compared with its base counterpart.

    A launch is its call: kernel, launch site and the caller's arguments and options. Values the
    kernel's decorators set (``@triton.heuristics``, an autotune config) and the config the
    autotuner picks are what changed, not identity; an autotuned call compiles every config, and
    its configs are compared as sets (:func:`_pair_configs`)."""

    name: str  # kernel name as stored (marker name / kernel)
    site: str  # "path::qualname" of the kernel
    status: str  # identical | changed | unknown (compiled on neither side) | added | removed
    changes: list[str] = field(default_factory=list)  # "num_stages 3 -> 1", "grid 132 -> 133", ...
    base: dict[str, Any] | None = None  # manifest row standing for the call (its pick if known)
    head: dict[str, Any] | None = None
    # informational, never a change: "the autotuner picked num_warps=1 in base and 4 in head ..."
    notes: list[str] = field(default_factory=list)
    # (base row, head row) of every config compiled on both sides (one pair for a plain launch)
    pairs: list[tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=list)

    @property
    def label(self) -> str:
        """The stored name, with the kernel's own name when the marker renamed it."""
        qualname = self.site.rsplit("::", 1)[-1]
        return self.name if self.name.endswith(qualname) else f"{self.name} ({qualname})"


@dataclass
class TestDiff:
    test: str
    status: str  # identical | changed | unknown | added | removed | no-launches
    launches: list[LaunchChange] = field(default_factory=list)
    # a test that stopped before its end in a static pass (an unchecked result failed it): its
    # later launches were never seen, so its launches alike are "unknown", never "identical"
    ended_early: str = ""

    @property
    def needs_timing(self) -> bool:
        """Changed, or unknown (the static pass could not compare its code; timing still can)."""
        return self.status in ("changed", "unknown")

    @property
    def changes(self) -> list[str]:
        out = []
        for lc in self.launches:
            if lc.status == "identical":
                continue
            what = "; ".join(lc.changes) if lc.changes else lc.status
            out.append(f"{lc.label}: {what}")
        if self.ended_early:
            out.append(self.ended_early)
        return out

    @property
    def notes(self) -> list[str]:
        """What is worth knowing but changed nothing (autotuner picks that differ)."""
        return [f"{lc.label}: {n}" for lc in self.launches for n in lc.notes]

    def to_dict(self) -> dict[str, Any]:
        return {
            "test": self.test,
            "status": self.status,
            "changes": self.changes,
            "launches": [
                {
                    "name": lc.name,
                    "site": lc.site,
                    "status": lc.status,
                    "changes": lc.changes,
                    "notes": lc.notes,
                }
                for lc in self.launches
            ],
            "notes": self.notes,
            # why an unknown test is unknown: it stopped early (its launches seen were alike), or
            # a launch compiled on neither side; the reports count the two apart
            **({"ended_early": True} if self.ended_early else {}),
        }


def unknown_text(tests: list[Any]) -> str:
    """What "N unknown" means, from the unknown tests themselves (TestDiffs or their document
    dicts): a test that stopped early under the interpreter (its later launches never seen) is
    not a launch compiled on neither side (issue 36's fourth walk, item 1)."""

    def early(t: Any) -> bool:
        return bool(t.get("ended_early") if isinstance(t, dict) else t.ended_early)

    unknown = [t for t in tests if (t.get("status") if isinstance(t, dict) else t.status) == "unknown"]
    n_early = sum(1 for t in unknown if early(t))
    parts = []
    if n_early:
        parts.append(
            f"{'all ' if n_early == len(unknown) and n_early > 1 else ''}{n_early} stopped early in the "
            "static pass: later launches not seen"
        )
    if len(unknown) - n_early:
        parts.append(f"{len(unknown) - n_early} with a launch compiled on neither side")
    return "; ".join(parts)


#: how a test that stopped early is said in its changes (written in diff_tests, read back below)
STOPPED_EARLY = "the test stopped before its end: "


def stopped_early_text(tests: list[dict[str, Any]]) -> str:
    """One line when tests stopped before their end in a static pass (document test rows), or "":
    "changed" and "unknown" tests alike, their later launches unseen and their results unchecked,
    which a reviewer would otherwise read as tests that ran (issue 36's fifth walk, items 1-2)."""
    early = [t for t in tests if isinstance(t, dict) and t.get("ended_early")]
    if not early:
        return ""
    first = next((str(c) for c in early[0].get("changes") or [] if str(c).startswith(STOPPED_EARLY)), "")
    why = first[len(STOPPED_EARLY) :].split("results not checked: ", 1)[-1]
    why = f" (first: {why[:160]}{'…' if len(why) > 160 else ''})" if why else ""
    return (
        f"{len(early)} of {len(tests)} tests stopped before their end in the static pass{why}: their "
        "later launches were not seen and their results not checked"
    )


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
    # in the kernel's signature order (the head's), not the manifest's sorted keys
    b_args = ordered_args(b.get("args") or {}, h.get("arg_order") or b.get("arg_order"))
    h_args = ordered_args(h.get("args") or {}, h.get("arg_order"))
    out += _dict_changes(b_args, h_args, lambda k, x, y: f"{k} {x} -> {y}")
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
        # what the warps and resources do to the occupancy, timed or not (both modes say it),
        # before the code's line: the order every report says a cause in (the terminal too)
        occ = occupancy_change(x, y, _num_warps(b.get("config")), _num_warps(h.get("config")), arch)
        if occ:
            out.append(f"{arch} {occ}" + _small_grid_note(grid_within_sms(b, h, arch)))
        out.append(f"{arch} SASS changed" + (": " + ", ".join(moved) if moved else ""))
    return out


#: static metrics in the order "what moved" lists them (the catalogue's)
CODE_METRICS_ORDER = MOVED_METRICS


def _pair_configs(site: str, b_rows: list[dict[str, Any]], h_rows: list[dict[str, Any]]) -> LaunchChange:
    """One autotuned call on both sides: its configs paired as sets (by the values each config
    sets), so a cut or extended config list is one changed launch, never "launched in base
    only" per config. Configs compiled on both sides are compared as any launch is."""
    bs, hs = set_rows(b_rows), set_rows(h_rows)
    labels = config_labels([*bs.values(), *hs.values()])
    changes: list[str] = []
    b_list, h_list = config_list(b_rows), config_list(h_rows)
    if b_list is not None and h_list is not None:
        # both sides recorded the call's whole list: dropped and added are read from the lists,
        # so a config one side happened to sample and the other did not is neither
        labels = value_labels({k: json.loads(k) for k in [*b_list, *h_list, *bs, *hs]})
        dropped = [labels[c] for c in b_list if c not in set(h_list)]
        added = [labels[c] for c in h_list if c not in set(b_list)]
    else:
        dropped = [labels[c] for c in bs if c not in hs]
        added = [labels[c] for c in hs if c not in bs]
    pairs = [(bs[c], hs[c]) for c in hs if c in bs]
    moved = []
    for b, h in pairs:
        ch = launch_changes(b, h)
        if ch:
            moved.append(f"config {labels[config_id(h)]}: " + "; ".join(ch))
    if dropped or added:
        parts = [f"{x} dropped" for x in dropped] + [f"{x} added" for x in added]
        parts.append(f"{len(pairs) - len(moved)} unchanged")
        if moved:
            parts.append(f"{len(moved)} changed")
        changes.append("autotune configs: " + ", ".join(parts))
    if len(pairs) == 1 and not dropped and not added and moved:
        changes.append(moved[0].split(": ", 1)[1])  # a single config: said as a plain launch's
    else:
        changes += moved
    bp, hp = pick(b_rows), pick(h_rows)
    notes = []
    if bp is not None and hp is not None and config_id(bp) != config_id(hp):
        pick_labels = config_labels([bp, hp])
        notes.append(
            f"the autotuner picked {pick_labels[config_id(bp)]} in base and {pick_labels[config_id(hp)]} "
            "in head: a tuning difference, not this change"
        )
    # The rows that stand for the call: one config compiled on both sides (the head's pick when
    # the base compiled it too), so that whoever reads base against head (the static verdict)
    # compares a config with itself, never one run's pick with another's. Only when no config
    # is common to both sides do the picks (else the first configs) stand for it.
    common = [p for p in pairs if hp is not None and config_id(p[1]) == config_id(hp)] or pairs
    if common:
        base_row, head_row = common[0]
    else:
        base_row = bp if bp is not None else next(iter(bs.values()))
        head_row = hp if hp is not None else next(iter(hs.values()))
    return LaunchChange(
        str(head_row.get("name")), site, launch_status(changes, b_rows, h_rows), changes,
        base_row, head_row, notes, pairs,
    )  # fmt: skip


def _compiled_nowhere(rows: list[dict[str, Any]]) -> bool:
    """Every row was compiled for some arch and none of it gave SASS (rows without any code
    record, a pass that compiled nothing at all, are not called so)."""
    codes = [c for r in rows for c in (r.get("code") or {}).values()]
    return bool(codes) and not any(c.get("sass") and not c.get("error") for c in codes)


def launch_status(
    changes: list[str], base_rows: list[dict[str, Any]], head_rows: list[dict[str, Any]]
) -> str:
    """identical | changed | unknown. A launch compiled on neither side is unknown, never
    changed: whatever its options say, nothing about its code could be compared (on a CPU
    runner whose compiles all failed, "changed" would send every launch to a verdict it
    cannot have)."""
    if not changes:
        return "identical"
    if _compiled_nowhere(base_rows) and _compiled_nowhere(head_rows):
        return "unknown"
    return "changed"


def diff_status(launches: list[LaunchChange]) -> str:
    """A test is identical when every launch is, unknown when the rest could not be compared,
    else changed (a launch that changed, appeared or disappeared)."""
    statuses = {lc.status for lc in launches}
    if statuses <= {"identical"}:
        return "identical"
    return "unknown" if statuses <= {"identical", "unknown"} else "changed"


def _pair_launches(base: list[dict[str, Any]], head: list[dict[str, Any]]) -> list[LaunchChange]:
    """One LaunchChange per call of the head (then per call only in the base). Calls pair by
    site: first the same call (same caller arguments), then the rest of a site in order (a
    caller that changed an argument or option)."""
    base_calls = calls(base)
    unpaired: dict[str, list[list[dict[str, Any]]]] = {}
    for c in base_calls:
        unpaired.setdefault(str(c[0].get("site")), []).append(c)
    head_calls = calls(head)
    match: dict[int, list[dict[str, Any]]] = {}
    for i, hc in enumerate(head_calls):  # the same call first
        queue = unpaired.get(str(hc[0].get("site"))) or []
        key = call_key(hc[0])
        j = next((j for j, bc in enumerate(queue) if call_key(bc[0]) == key), None)
        if j is not None:
            match[i] = queue.pop(j)
    for i, hc in enumerate(head_calls):  # then by order within the site
        if i not in match and (queue := unpaired.get(str(hc[0].get("site")))):
            match[i] = queue.pop(0)
    out = []
    for i, hc in enumerate(head_calls):
        site = str(hc[0].get("site"))
        bc = match.get(i)
        if bc is None:
            out.append(
                LaunchChange(
                    str(hc[0].get("name")), site, "added", ["kernel launched in head only"], head=hc[0]
                )
            )
        elif autotuned(bc) or autotuned(hc):
            out.append(_pair_configs(site, bc, hc))
        else:
            b, h = bc[0], hc[0]
            changes = launch_changes(b, h)
            out.append(
                LaunchChange(
                    str(h.get("name")), site, launch_status(changes, [b], [h]), changes, b, h, pairs=[(b, h)]
                )
            )
    for site, rest in unpaired.items():
        for bc in rest:
            out.append(
                LaunchChange(
                    str(bc[0].get("name")), site, "removed", ["kernel launched in base only"], base=bc[0]
                )
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
                        LaunchChange(str(c[0].get("name")), str(c[0].get("site")), "added", [], head=c[0])
                        for c in calls(head[test])
                    ],
                )
            )
            continue
        if not head[test] and not base[test]:
            out.append(TestDiff(test, "no-launches"))
            continue
        launches = _pair_launches(base[test], head[test])
        status = diff_status(launches)
        early = next((r["ended_early"] for r in (*head[test], *base[test]) if r.get("ended_early")), None)
        if early and status == "identical":
            # the launches seen are the same, but the test stopped before its end in a static
            # pass: what it would have launched after is unknown, never identical
            status = "unknown"
        why = f"{STOPPED_EARLY}{early}" if early else ""
        out.append(TestDiff(test, status, launches, why))
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
