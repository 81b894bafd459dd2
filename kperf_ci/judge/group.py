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
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..model import VariantKey, VariantResult, canonical_json

__all__ = [
    "KernelIndex",
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
