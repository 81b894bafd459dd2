"""The static side of an A/B document read for people: each changed launch's static verdict
(regressed, improved, changed) with its cause, per test and per kernel. Shared by the comment,
the HTML page and the terminal, as report/ab_view.py is for the timed side; nothing here
escapes."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Hashable, Iterable
from typing import Any, TypeVar

from kperf_ci.judge.group import static_groups, static_launch_text
from kperf_ci.report.ab_view import (
    changed_tests,
    changes_of_test,
    kernel_where,
    shape_text,
    static_kernels_of,
)
from kperf_ci.report.ab_words import CODE_LINES, options_first


def sides(doc: dict[str, Any]) -> tuple[str, str, str, bool]:
    """(base sha, base rev, head sha, head is the working tree of the base commit)."""
    base = doc.get("base") or {}
    base_sha = str(base.get("sha", ""))[:10]
    head_sha = str((doc.get("head") or {}).get("sha", ""))[:10]
    return base_sha, str(base.get("rev", "")), head_sha, bool(head_sha) and head_sha == base_sha


#: the static gate's words, worst first (never a time verdict's)
GATE_WORDS = ("regressed", "improved", "changed")


def static_gate(doc: dict[str, Any]) -> dict[str, str]:
    """Per kernel site, the static gate's word (its own column, never a time verdict): regressed
    (a static regression of a launch not timed), improved (fewer spills, a higher occupancy, and
    nothing regressed) or changed (its code changed)."""
    out: dict[str, str] = {}
    for t in doc.get("tests") or []:
        for lc in t.get("launches") or [] if isinstance(t, dict) else []:
            if isinstance(lc, dict) and lc.get("status") == "changed":
                out.setdefault(str(lc.get("site") or lc.get("name") or ""), "changed")
    for g in static_groups(_entries(doc, "static_improved")):
        out[str(g["site"])] = "improved"
    for g in static_kernels_of(doc):
        out[str(g["site"])] = "regressed"
    return out


def _entries(doc: dict[str, Any], name: str) -> list[dict[str, Any]]:
    rows = doc.get(name)
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def _option_changes(doc: dict[str, Any]) -> dict[tuple[str, str], list[str]]:
    """(test, kernel site) -> what the launch diff says changed besides the compiled code: its
    options, constexprs and work ("num_warps 4 -> 1"), the cause a reviewer looks for first."""
    out: dict[tuple[str, str], list[str]] = {}
    for t in doc.get("tests") or []:
        for lc in t.get("launches") or [] if isinstance(t, dict) else []:
            if isinstance(lc, dict) and lc.get("status") == "changed":
                # the code's lines (SASS, occupancy) are the verdict's to say, not an option's
                changes = [
                    str(c) for c in lc.get("changes") or [] if not any(w in str(c) for w in CODE_LINES)
                ]
                out.setdefault((str(t.get("test")), str(lc.get("site"))), changes)
    return out


def static_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The launches not timed, one row per Triton kernel and arch, worst first, in the static
    gate's words: its worst launch (shapes and grid), the cause (option changes, then what the
    verdict says moved), "N of M launches regressed", and every launch with its own word."""
    options = _option_changes(doc)
    kernels: dict[tuple[str, str], dict[str, Any]] = {}
    groups = (
        ("regressed", static_kernels_of(doc)),
        ("improved", static_groups(_entries(doc, "static_improved"))),
        ("changed", static_groups(_entries(doc, "static_changed"))),
    )
    for gate, gs in groups:
        for g in gs:
            k = kernels.setdefault(
                (str(g["site"]), str(g["arch"])),
                {"gate": gate, "kernel": str(g["kernel"]), "site": str(g["site"]), "arch": str(g["arch"]),
                 "launches": [], "tests": []},
            )  # fmt: skip
            k["tests"] += [str(t) for t in g.get("tests") or [] if str(t) not in k["tests"]]
            for x in g.get("launches") or []:
                text = static_launch_text(x, "regress" if gate == "regressed" else gate)
                moved = options.get((str((x.get("tests") or [""])[0]), str(g["site"])), [])
                reason = str(x.get("reason") or "")
                # the option changes first, unless the reason names them ("num_warps 4 -> 1: ...")
                cause = "; ".join(options_first(moved, [reason] if reason else []))
                k["launches"].append({**x, "gate": gate, "launch": text, "options": moved, "reason": cause})
    out = []
    for k in kernels.values():
        w = k["launches"][0]
        n = sum(1 for x in k["launches"] if x["gate"] == k["gate"])
        out.append(
            {
                **k,
                "shape": _shape_cell(k["launches"]),
                "file": kernel_where(k)[1],
                "cause": w["reason"] or "-",
                "count": _count(n, len(k["launches"]), k["gate"]),
            }
        )
    return sorted(out, key=lambda k: GATE_WORDS.index(k["gate"]))


def _grid_size(x: dict[str, Any]) -> int:
    m = re.search(r"grid ([0-9x]+)", str(x.get("launch") or ""))
    return math.prod(int(d) for d in m.group(1).split("x") if d) if m else 0


def _shape_cell(launches: list[dict[str, Any]]) -> str:
    """The worst launch's shapes; when every launch has the same word, cause and severity none is
    worst, and the cell says so and shows the largest grid's, or the first where the grids are
    equal (attorch's cut autotune config: the 1x96 first of 8 launches read as the worst, walk 3
    of issue 38, J2-6)."""
    w = launches[0]
    same = {(x["gate"], x["reason"], x.get("severity")) for x in launches}
    if len(launches) < 2 or len(same) > 1:
        return shape_text(w)
    if len({_grid_size(x) for x in launches}) == 1:
        return f"all {len(launches)} alike, e.g. {shape_text(w)}"
    return f"all {len(launches)} alike; largest: {shape_text(max(launches, key=_grid_size))}"


def _count(n: int, of: int, gate: str) -> str:
    """ "2 of 3 changed launches regress"; only the launches whose code changed are listed, so
    never "1 of 1" for a kernel whose other launch is identical; a "changed" gate's launches are
    just counted ("8 of 8 changed launches changed" said nothing, walk 3 of issue 38, J2-5)."""
    launches = "launch" if of == 1 else "launches"
    if gate == "changed":
        return f"{n} changed {'launch' if n == 1 else 'launches'}" + (f" of {of}" if n != of else "")
    return f"{n} of {of} changed {launches} {gate}"


def static_summary(g: dict[str, Any]) -> str:
    """ "registers +244.8% > +10% (default) (+3 other change(s)); 4 launch(es) in 4 test(s)" """
    reasons = [str(r) for r in g.get("reasons") or []]
    more = f" (+{len(reasons) - 1} other change(s))" if len(reasons) > 1 else ""
    return (
        f"{reasons[0] if reasons else '?'}{more}; {len(g.get('launches') or [])} launch(es) in "
        f"{len(g.get('tests') or [])} test(s)"
    )


T = TypeVar("T")


def alike_groups(items: Iterable[T], key: Callable[[T], Hashable | None]) -> list[list[T]]:
    """``items`` grouped by ``key``, each group at its first item's place and in its items'
    order; an item whose key is None is a group of its own. The one rule by which `kperf ab`'s
    terminal and its comment fold tests whose changes read alike: a cut autotune config changes
    every parametrization of a test alike (attorch: one cause, 48 tests)."""
    groups: dict[tuple[bool, Hashable], list[T]] = {}
    for i, item in enumerate(items):
        k = key(item)
        groups.setdefault((False, i) if k is None else (True, k), []).append(item)
    return list(groups.values())


def changed_test_groups(doc: dict[str, Any]) -> list[tuple[list[dict[str, Any]], list[str]]]:
    """The tests that are not identical, as (tests, their causes): tests of one status whose
    cause lines (:func:`changes_of_test`) are the same are one group, said once; a test with no
    cause to say keeps its own place."""
    pairs = [(t, changes_of_test(t)) for t in changed_tests(doc)]
    groups = alike_groups(pairs, lambda p: (str(p[0].get("status")), tuple(p[1])) if p[1] else None)
    return [([t for t, _ in g], g[0][1]) for g in groups]
