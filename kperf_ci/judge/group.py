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
from ..units import clip

__all__ = [
    "KernelIndex",
    "kernel_groups",
    "kernel_name",
    "kernel_site",
    "launch_identity",
    "launch_label",
    "launch_text",
    "ordered_args",
    "severity",
    "static_groups",
    "count_words",
    "distinct_spec_labels",
    "kernel_id",
    "plural",
    "size_words",
    "triton_kernels",
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


def triton_kernels(keys: Iterable[VariantKey]) -> int:
    """How many Triton kernels these variants are of: launch sites (the Triton function, over
    every arch and specialization), else names (a timed callable, an imported benchmark)."""
    return len({k.source or f"name:{k.kernel}" for k in keys})


def size_words(variants: int, kernels: int, rows: int | None = None) -> str:
    """The one spelling of a run's size, as the pytest summary counts it: "6 variants of 1 kernel"
    (variants as stored; kernels: :func:`triton_kernels`), and, where a table lists a compiled
    variant that several tests reach once, how many rows that makes ("in 3 rows")."""
    folded = f" in {plural(rows, 'row')}" if rows is not None and rows != variants else ""
    return f"{plural(variants, 'variant')} of {plural(kernels, 'kernel')}{folded}"


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


def ordered_args(args: dict[str, Any], order: Any = None) -> dict[str, Any]:
    """``args`` in the kernel's signature order: ``order`` is the manifest row's ``arg_order``
    (the manifest is JSON written with sorted keys, and an A/B document may be too, so a dict's
    own order is ASCII order by then: "B, Mean, N, ..., X, Y"). Names ``order`` lacks follow in
    their own order; without ``order`` (a manifest or document written before it) the dict's."""
    if not isinstance(order, (list, tuple)) or not order:
        return dict(args)
    out = {str(k): args[str(k)] for k in order if str(k) in args}
    out.update((k, v) for k, v in args.items() if k not in out)
    return out


def _said_option(option: str) -> bool:
    """Whether a launch text says this option: num_warps and num_stages always, num_ctas when it
    is not Triton's default 1 (a launch on one CTA per cluster, the usual case, says nothing)."""
    name, _, value = option.partition("=")
    return name in ("num_warps", "num_stages") or (name == "num_ctas" and value not in ("1", ""))


def launch_text(args: dict[str, Any] | None, grid: Any, config: Any, order: Any = None) -> str:
    """ "x=fp32[4096x4096], n_cols=4096, BLOCK_SIZE=4096; grid 4096x1x1; num_warps=8, num_stages=3"
    (options with a space after each comma, as the arguments; num_ctas only when not 1), the
    arguments in the kernel's signature order when ``order`` gives it (:func:`ordered_args`)."""
    args = args if isinstance(args, dict) else {}
    if not args and not grid:
        return ""
    parts = ", ".join(f"{k}={v}" for k, v in ordered_args(args, order).items())
    g = "x".join(str(int(x)) for x in grid or ()) if isinstance(grid, (list, tuple)) else ""
    opts = ", ".join(o.strip() for o in str(config or "").split(",") if _said_option(o.strip()))
    rest = "; ".join(x for x in (f"grid {g}" if g else "", opts) if x)
    # the arguments are cut, never the grid and options after them: a long signature (mamba's
    # gated layer norm) hid the grid the worst-launch cell promises (issue 36's fourth walk, item 7)
    parts = clip(parts, max(LAUNCH_TEXT_MAX - len(rest) - 2, 40)) if rest else clip(parts, LAUNCH_TEXT_MAX)
    return "; ".join(x for x in (parts, rest) if x)


def static_launch_text(x: dict[str, Any], alike: str = "regress") -> str:
    """:func:`launch_text` of a static verdict's launch; an autotuned call, one entry for all its
    configs (:mod:`kperf_ci.judge.static_verdict`), also says that it shows the worst config and
    how many of the call's configs are alike: "...; num_warps=4 (worst of 3 autotune configs, 3
    regress)". Read from stored documents: counts that are not plain integers are left out."""
    text = launch_text(x.get("args") or {}, x.get("grid"), x.get("config"), x.get("arg_order"))
    auto = x.get("autotune")
    counts = [auto.get(k) for k in ("configs", "regressed")] if isinstance(auto, dict) else []
    if counts and all(isinstance(n, int) and not isinstance(n, bool) for n in counts):
        text += f" (worst of {counts[0]} autotune configs, {counts[1]} {alike})"
    return text


#: verdict order, worst first: what the reader should look at first comes first
_SEVERITY = {"slower": 0, "inconclusive": 1, "no-base": 2, "faster": 3, "unchanged": 4, "identical": 5}


def severity(x: dict[str, Any]) -> tuple[int, float]:
    """Worst first: slower before inconclusive before faster before unchanged; among slower
    rows the largest slowdown first, among faster ones the largest speedup first."""
    ratio = x.get("ratio")
    r = float(ratio) if isinstance(ratio, (int, float)) and not isinstance(ratio, bool) else 1.0
    return _SEVERITY.get(str(x.get("verdict")), 9), (-r if x.get("verdict") != "faster" else r)


def launch_identity(t: dict[str, Any]) -> tuple[str, ...]:
    """What makes two timed rows one launch: its kernel, shapes, options and constexprs. A
    replayed launch carries them as its launch text. A `kperf.bench` callable's row (or a
    do_bench call's) carries none: its stored variant stands in (kernel, arch, specialization
    with the test's shape id, options), and for a document that lacks the specialization the
    row's test, so distinct launches are never merged under an empty label."""
    launch = str(t.get("launch") or "")
    if launch:
        return ("launch", str(t.get("site") or ""), launch)
    kernel, config = str(t.get("kernel") or ""), str(t.get("config") or "")
    if t.get("spec"):
        return ("variant", kernel, str(t.get("arch") or ""), str(t["spec"]), config)
    return ("variant", kernel, config, str(t.get("test") or ""))


def launch_label(t: dict[str, Any]) -> str:
    """The launch in words: its launch text, else (a callable's row) its stored name, options
    and test: "vector_add; num_warps=4,num_stages=3; in tests/test_add.py::test_add[1024]"."""
    if t.get("launch"):
        return str(t["launch"])
    config = str(t.get("config") or "")
    if config.startswith("callable:"):  # a multi-kernel callable's internal key, never shown
        config = ""
    bits = [str(t.get("kernel") or ""), config, f"in {t.get('test')}"]
    return "; ".join(b for b in bits if b)


def _launch_entry(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One launch of a kernel from its timed rows (several when tests made the same launch):
    the worst row's verdict, effect, interval and times, and every test that made it."""
    runs = sorted(runs, key=severity)
    w = runs[0]
    tests = list(dict.fromkeys(str(r["test"]) for r in runs))
    identical = [str(x) for r in runs for x in r.get("identical_in") or [] if str(x) not in tests]
    return {
        "launch": launch_label(w),
        "verdict": str(w["verdict"]),
        "ratio": w.get("ratio"),
        "ci_low": w.get("ci_low"),
        "ci_high": w.get("ci_high"),
        "threshold": w.get("threshold"),
        "base_ms": w.get("base_median_ms"),
        "head_ms": w.get("head_median_ms"),
        "tests": tests,
        # tests that made the identical launch, timed as this one (the run stores one variant)
        "identical_in": list(dict.fromkeys(identical)),
        "changes": [str(c) for c in [*(w.get("changes") or []), *(w.get("regions_moved") or [])]],
        "base_launch": w.get("base_launch") or "",
    }


def kernel_name(t: dict[str, Any]) -> str:
    """A timed row's Triton kernel name (a stored variant's ``#`` suffix dropped)."""
    return str(t.get("kernel") or "").split("#", 1)[0]


def kernel_site(t: dict[str, Any]) -> str:
    """The Triton kernel a timed row is of: its launch site, else its name. One kernel per site
    in :func:`kernel_groups`, and so in :func:`kperf_ci.judge.verdict.regression`'s count."""
    return str(t.get("site") or kernel_name(t))


def kernel_groups(timed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The timed rows as one entry per Triton kernel, worst first: its worst verdict, the range
    of its changes, and its launches, each distinct launch once (:func:`launch_identity`) with
    the tests that made it, worst first. The stored document's ``kernels``, the terminal of
    `kperf ab` and every A/B report read this one grouping."""
    groups: dict[str, dict[str, Any]] = {}
    for t in timed:
        site = kernel_site(t)
        g = groups.setdefault(site, {"kernel": kernel_name(t), "site": site, "launches": {}, "tests": []})
        for test in [t["test"], *(t.get("identical_in") or [])]:
            if test not in g["tests"]:
                g["tests"].append(test)
        g["launches"].setdefault(launch_identity(t), []).append(t)
    out = []
    for g in groups.values():
        launches = sorted((_launch_entry(runs) for runs in g["launches"].values()), key=severity)
        ratios = [float(x["ratio"]) for x in launches if isinstance(x.get("ratio"), (int, float))]
        out.append(
            {
                "kernel": g["kernel"],
                "site": g["site"],
                "verdict": launches[0]["verdict"],
                "ratio_min": min(ratios) if ratios else None,
                "ratio_max": max(ratios) if ratios else None,
                "launches": launches,
                "tests": g["tests"],
                "changes": list(dict.fromkeys(c for x in launches for c in x["changes"])),
            }
        )
    out.sort(key=lambda k: severity(k["launches"][0]))
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
            key, {"args": r.get("args") or {}, "arg_order": r.get("arg_order"), "grid": r.get("grid"),
                  "config": r.get("config"), "reason": r.get("reason"), "autotune": r.get("autotune"),
                  "tests": []},
        )  # fmt: skip
        launch["tests"].append(r.get("test"))
        sev = r.get("severity")
        if isinstance(sev, (int, float)) and not isinstance(sev, bool):
            launch["severity"] = max(float(sev), float(launch.get("severity") or 0.0))
    # worst first (a stable sort: equals, and documents without severities, keep their order),
    # and the reasons in the same order, so every summary quotes the worst (the fifth walk,
    # item 4: the terminal said 100% -> 75% where the comment said 100% -> 62.5%)
    out = []
    for g in groups.values():
        launches = sorted(g["launches"].values(), key=lambda x: -float(x.get("severity") or 0.0))
        first = list(dict.fromkeys(x.get("reason") for x in launches))
        reasons = first + [r for r in g["reasons"] if r not in first]
        out.append({**g, "launches": launches, "reasons": reasons})
    return out
