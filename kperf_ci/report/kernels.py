"""Report rows at suite scale: one row per compiled kernel (kperf_ci.judge.group), tests as its attribute.

The views are built per variant (each stored variant keeps its own metrics and verdict); this
module folds the views of one compiled kernel into its worst one, which lists every test and
name that reached it, and tells apart rows whose short specialization would read alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..judge.group import distinct_spec_labels, kernel_id

if TYPE_CHECKING:
    from .view import VariantView

__all__ = ["fold_kernels", "label_specs", "view_kernel_id"]


def view_kernel_id(v: VariantView) -> str:
    """The compiled kernel of a view, as ``KernelIndex.build`` spells it (removed: "-" prefix)."""
    if v.cur is not None:
        return kernel_id(v.cur.key, v.cur.sass_hash)
    return "-" + kernel_id(v.key, v.base.sass_hash if v.base is not None else None)


def fold_kernels(ordered: Sequence[VariantView]) -> list[VariantView]:
    """One view per compiled kernel, worst first: ``ordered`` is sorted worst first, so the first
    view of a kernel represents it; it gains the tests and names of the others, their gate
    reasons, and their findings when it has none."""
    reps: dict[str, VariantView] = {}
    for v in ordered:
        kid = view_kernel_id(v)
        rep = reps.get(kid)
        if rep is None:
            reps[kid] = v
            v.tests = [v.key.test] if v.key.test else []
            v.names = [v.key.kernel]
            v.members = 1
            continue
        rep.members += 1
        if v.key.test and v.key.test not in rep.tests:
            rep.tests.append(v.key.test)
        if v.key.kernel not in rep.names:
            rep.names.append(v.key.kernel)
        rep.regression = rep.regression or v.regression
        rep.reasons.extend(r for r in v.reasons if r not in rep.reasons)
        if not rep.findings and v.findings:
            rep.findings, rep.base_flagged = v.findings, v.base_flagged
    return list(reps.values())


SPEC_CHARS = 80


def short_spec(spec: str) -> str:
    """The constexpr and specialised values of a signature (``BLOCK_M=128, stride_k=1``), else the
    signature; over SPEC_CHARS, its last whole items after "…, " (a cut inside a value read as
    another name: "…OCK_N=2048")."""
    parts = [p.strip() for p in spec.split(",")]
    named = [p for p in parts if "=" in p and ":" not in p]
    items = named if named else parts
    text = ", ".join(items)
    if len(text) <= SPEC_CHARS:
        return text
    kept: list[str] = []
    for item in reversed(items):
        if len("…, " + ", ".join([item, *kept])) > SPEC_CHARS:
            break
        kept.insert(0, item)
    return "…, " + ", ".join(kept) if kept else text[: SPEC_CHARS - 1] + "…"


def label_specs(views: Sequence[VariantView]) -> None:
    """Set each view's ``spec_label``: the constexprs of its specialization (or its truncated
    end), plus, where two rows of one kernel name, arch and config would read alike, the items
    that tell them apart, in full."""
    labels = {
        v.id: ("\0".join((v.key.kernel, v.key.arch, v.key.config)), short_spec(v.key.spec), v.key.spec)
        for v in views
    }
    shown = distinct_spec_labels(labels)
    for v in views:
        v.spec_label = shown[v.id]
