"""`kperf show`'s views of a run as data, for the command to print: one line per compiled kernel
(kperf_ci.judge.group) with its headline metrics, flagged findings and verdict; a variant's
region metrics as a table."""

from __future__ import annotations

from typing import Any

from kperf_ci.analysis.findings import capped
from kperf_ci.judge.group import KernelIndex
from kperf_ci.metrics import key_metrics, unit_of
from kperf_ci.model import Metric, RunRecord, VariantResult
from kperf_ci.report.build import load_findings

#: Short column names of the compact table (a label only: which metrics, and their order, are
#: the catalogue's key metrics).
_COLUMN = {"time.median": "time", "registers": "regs", "shared_bytes": "smem", "sass.instructions": "sass"}
#: The headline metrics of a compact line, in this order: (metric, column, unit).
HEADLINE = tuple(
    (name, _COLUMN.get(name, name), unit_of(name)) for name in key_metrics("time") + key_metrics("static")
)


def kernel_lines(
    record: RunRecord, *, kernel: str | None = None, cap: int = 3, comparison: Any = None
) -> list[dict[str, Any]]:
    """One dict per compiled kernel of the run (kperf_ci.judge.group), in the run's order: its first
    variant's key, the tests that reach it, headline metrics, flagged findings (the ``cap``
    costliest, and how many more) and, with a comparison, whether it regressed."""
    index = KernelIndex.build(record.results)
    members: dict[str, list[VariantResult]] = {}
    for r in record.results:
        members.setdefault(index.kernel(r.key.id), []).append(r)
    regressed = {c.variant.id for c in comparison.regressions} if comparison is not None else set()
    added = {k.id for k in comparison.added} if comparison is not None else set()
    lines = []
    for kid, rs in members.items():
        if kernel is not None and kernel not in index.names[kid]:
            continue
        ids = {r.key.id for r in rs}
        rep = next((r for r in rs if r.key.id in regressed), rs[0])
        found = next((f for f in (load_findings(r) for r in rs) if f), [])
        shown, more = capped(found, cap)
        verdict = ""
        if comparison is not None:
            verdict = "REGRESSION" if ids & regressed else "new" if ids <= added else "ok"
        lines.append(
            {
                "result": rep,
                "tests": index.tests[kid],
                "names": index.names[kid],
                "variants": len(rs),
                "members": rs,
                "metrics": {name: rep.metric(name) for name, _col, _unit in HEADLINE},
                "findings": shown,
                "more_findings": more,
                "error": next((r.error for r in rs if r.error), None),
                "verdict": verdict,
            }
        )
    return lines


def field_order(f: str) -> tuple[int, str]:
    order = {"cycles": 0, "fraction": 1, "ms": 2}
    return (order.get(f, 9), f)


def region_table(metrics: list[Metric]) -> dict[str, dict[str, float]]:
    """region.<name>.<field> -> {name: {field: value}} in first-seen order (names may contain dots)."""
    out: dict[str, dict[str, float]] = {}
    for m in metrics:
        if not m.name.startswith("region."):
            continue
        rest = m.name[len("region.") :]
        name, _, field = rest.rpartition(".")
        if not name:
            name, field = rest, "value"
        out.setdefault(name, {})[field] = m.value
    return out
