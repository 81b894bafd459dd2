"""Kernels at suite scale: one compiled kernel listed once, however many tests reach it.

Storage keeps a variant per test (a marker names the variant after its test, so
``liger_softmax/_softmax_kernel`` and ``liger_softmax_functional/_softmax_kernel`` are two
variants of one compiled kernel). Readers group them here: the same launch site (the Triton
function), arch, specialization, launch options and SASS hash are one kernel, and its tests
are an attribute of the row. The regression count of every consumer (``kperf compare``,
``kperf show``, the HTML report, the PR comment) is a number of such kernels, counted here.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..model import VariantKey, VariantResult, canonical_json

__all__ = [
    "KernelIndex",
    "kernel_groups",
    "launch_text",
    "static_groups",
    "count_words",
    "distinct_spec_labels",
    "kernel_id",
    "plural",
]


def kernel_id(key: VariantKey, sass_hash: str | None = None) -> str:
    """Identity of the compiled kernel behind a variant. The launch site (``key.source``) stands
    for the Triton function; without one (a timed callable, an imported benchmark) the
    user-facing name does, so such variants never merge with anything but themselves."""
    site = key.source or f"name:{key.kernel}"
    raw = canonical_json([site, key.arch, key.spec, key.config, sass_hash or ""])
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


@dataclass
class KernelIndex:
    """Variant id -> kernel id, and per kernel its tests and names (first-seen order)."""

    of: dict[str, str] = field(default_factory=dict)
    tests: dict[str, list[str]] = field(default_factory=dict)
    names: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def build(cls, results: Iterable[VariantResult], removed: Iterable[VariantResult] = ()) -> KernelIndex:
        """Index ``results`` (one run) and the ``removed`` baseline variants of a comparison.
        Removed variants are kernels of their own ("-" prefix): a kernel that vanished is not
        the same row as one that is still there."""
        out = cls()
        for prefix, rs in (("", results), ("-", removed)):
            for r in rs:
                out.add(r.key, r.sass_hash, prefix=prefix)
        return out

    def add(self, key: VariantKey, sass_hash: str | None, *, prefix: str = "") -> str:
        kid = prefix + kernel_id(key, sass_hash)
        self.of[key.id] = kid
        tests = self.tests.setdefault(kid, [])
        if key.test and key.test not in tests:
            tests.append(key.test)
        names = self.names.setdefault(kid, [])
        if key.kernel not in names:
            names.append(key.kernel)
        return kid

    def kernel(self, variant_id: str) -> str:
        """The kernel of a variant (a variant not indexed is a kernel of its own)."""
        return self.of.get(variant_id, variant_id)

    def count(self, variant_ids: Iterable[str]) -> int:
        """How many kernels these variants are."""
        return len({self.kernel(v) for v in variant_ids})


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def count_words(regressed: int, removed: int = 0) -> str:
    """The one spelling of the gate's count: "2 regressed kernels, 1 removed kernel"."""
    parts = [plural(regressed, "regressed kernel")] if regressed or not removed else []
    if removed:
        parts.append(plural(removed, "removed kernel"))
    return ", ".join(parts)


def _tokens(spec: str) -> list[str]:
    return [t.strip() for t in spec.split(",") if t.strip()]


def distinct_spec_labels(labels: dict[str, tuple[str, str, str]]) -> dict[str, str]:
    """``{id: (group, short label, full spec)}`` -> labels that never read alike within a group.

    A short label (constexprs only, or a truncated spec) can be the same for two rows that
    differ elsewhere in the specialization (a dtype, an alignment): those rows get the items
    of their spec that the colliding rows do not share appended in full, never truncated."""
    by_label: dict[tuple[str, str], list[str]] = {}
    for vid, (grp, short, _spec) in labels.items():
        by_label.setdefault((grp, short), []).append(vid)
    out = {vid: short for vid, (_g, short, _s) in labels.items()}
    for (_grp, short), ids in by_label.items():
        if len(ids) < 2:
            continue
        tokens = {vid: _tokens(labels[vid][2]) for vid in ids}
        common = set.intersection(*(set(t) for t in tokens.values()))
        for vid in ids:
            extra = [t for t in tokens[vid] if t not in common]
            if extra:
                out[vid] = " · ".join(filter(None, [short, ", ".join(extra)]))
    return out


# --------------------------------------------------------------------------------------------
# kperf ab's timed launches, per Triton kernel

#: longest launch description kept (a kernel with dozens of arguments)
LAUNCH_TEXT_MAX = 240


def launch_text(args: dict[str, Any], grid: Any, config: Any) -> str:
    """ "x=fp32[4096x4096], n_cols=4096, BLOCK_SIZE=4096; grid 4096x1x1; num_warps=8" """
    if not args and not grid:
        return ""
    parts = ", ".join(f"{k}={v}" for k, v in args.items())
    g = "x".join(str(int(x)) for x in grid or ()) if isinstance(grid, (list, tuple)) else ""
    opts = ",".join(
        o for o in str(config or "").split(",") if o.startswith("num_warps") or o.startswith("num_stages")
    )
    text = "; ".join(x for x in (parts, f"grid {g}" if g else "", opts) if x)
    return text if len(text) <= LAUNCH_TEXT_MAX else text[: LAUNCH_TEXT_MAX - 1] + "…"


def static_launch_text(x: dict[str, Any], alike: str = "regress") -> str:
    """:func:`launch_text` of a static verdict's launch; an autotuned call, one entry for all its
    configs (:mod:`kperf_ci.judge.static_verdict`), also says that it shows the worst config and
    how many of the call's configs are alike: "...; num_warps=4 (worst of 3 autotune configs, 3
    regress)". Read from stored documents: counts that are not plain integers are left out."""
    text = launch_text(x.get("args") or {}, x.get("grid"), x.get("config"))
    auto = x.get("autotune")
    counts = [auto.get(k) for k in ("configs", "regressed")] if isinstance(auto, dict) else []
    if counts and all(isinstance(n, int) and not isinstance(n, bool) for n in counts):
        text += f" (worst of {counts[0]} autotune configs, {counts[1]} {alike})"
    return text


_VERDICT_ORDER = {"slower": 0, "inconclusive": 1, "faster": 2, "unchanged": 3}


def _worst_first(r: dict[str, Any]) -> tuple[int, float]:
    return _VERDICT_ORDER.get(r["verdict"], 9), -(r.get("ratio") or 0)


def kernel_groups(timed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The timed rows as one entry per Triton kernel: its worst verdict, the range of its changes,
    and its launches (each distinct launch once, with the tests that made it) as attributes."""
    groups: dict[str, dict[str, Any]] = {}
    for t in timed:
        name = str(t["kernel"]).split("#", 1)[0]
        site = str(t.get("site") or name)
        g = groups.setdefault(site, {"kernel": name, "site": site, "launches": {}, "tests": []})
        if t["test"] not in g["tests"]:
            g["tests"].append(t["test"])
        launch = g["launches"].setdefault(
            str(t.get("launch") or ""), {"launch": t.get("launch") or "", "runs": []}
        )
        launch["runs"].append(t)
    out = []
    for g in groups.values():
        launches = []
        for entry in g["launches"].values():
            runs = sorted(entry["runs"], key=_worst_first)
            worst = runs[0]
            launches.append(
                {
                    "launch": entry["launch"],
                    "verdict": worst["verdict"],
                    "ratio": worst.get("ratio"),
                    "ci_low": worst.get("ci_low"),
                    "ci_high": worst.get("ci_high"),
                    "tests": [r["test"] for r in runs],
                    "changes": worst.get("changes") or [],
                    "base_launch": worst.get("base_launch") or "",
                }
            )
        launches.sort(key=_worst_first)
        ratios = [x["ratio"] for x in launches if x.get("ratio") is not None]
        changes = list(dict.fromkeys(c for x in launches for c in x["changes"]))
        out.append(
            {
                "kernel": g["kernel"],
                "site": g["site"],
                "verdict": launches[0]["verdict"],
                "ratio_min": min(ratios) if ratios else None,
                "ratio_max": max(ratios) if ratios else None,
                "launches": launches,
                "tests": g["tests"],
                "changes": changes,
            }
        )
    out.sort(key=lambda k: (_VERDICT_ORDER.get(k["verdict"], 9), -(k.get("ratio_max") or 0)))
    return out


def static_groups(regs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Static regressions of `kperf ab` (one entry per launch and arch) as one entry per Triton
    kernel and arch: its reasons (each once), its launches and the tests that made them."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for r in regs:
        site = str(r.get("site") or r.get("kernel", ""))
        g = groups.setdefault(
            (site, str(r.get("arch", ""))),
            {"kernel": str(r.get("kernel", "")), "arch": str(r.get("arch", "")), "site": site,
             "reasons": [], "launches": {}, "tests": []},
        )  # fmt: skip
        if r.get("reason") not in g["reasons"]:
            g["reasons"].append(r.get("reason"))
        if r.get("test") not in g["tests"]:
            g["tests"].append(r.get("test"))
        key = json.dumps([r.get("args"), r.get("grid"), r.get("config")], sort_keys=True, default=str)
        launch = g["launches"].setdefault(
            key, {"args": r.get("args") or {}, "grid": r.get("grid"), "config": r.get("config"),
                  "reason": r.get("reason"), "autotune": r.get("autotune"), "tests": []},
        )  # fmt: skip
        launch["tests"].append(r.get("test"))
    return [{**g, "launches": list(g["launches"].values())} for g in groups.values()]
