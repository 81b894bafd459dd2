"""What a proposer is told: the kernel, and what blackbox loops never see.

Static metrics (registers, spills, shared memory, SASS mix) and the intra-kernel findings come
from a run database; the regression (what changed in the launch, the A/B verdict, which regions
moved) from a ``kperf ab`` database; the history is every variant tried so far with its verdict,
so the model does not propose a rejected idea twice. Database text is data: it is quoted into
the prompt as data, never executed or opened.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kperf_ci import store
from kperf_ci.analysis.findings import ARTIFACT, findings_from_json
from kperf_ci.prcheck.document import load_ab_document

STATIC_PREFIXES = ("registers", "spills", "shared_bytes", "sass.", "ptx.instructions", "region.", "time")
MAX_HISTORY = 30


@dataclass
class PromptContext:
    kernel: str
    launcher: str
    static: dict[str, float] = field(default_factory=dict)
    findings: list[str] = field(default_factory=list)
    regression: list[str] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)

    def motivation(self) -> list[str]:
        """The lines of profile and regression that motivated the search (for the PR body)."""
        out = [f"{k} = {v:g}" for k, v in sorted(self.static.items())[:20]]
        return out + self.findings[:10] + self.regression[:10]


def jit_names(source: str) -> list[str]:
    return re.findall(r"@triton\.jit[^\n]*\n(?:@[^\n]*\n)*def (\w+)\(", source)


def context_from_db(
    kernel: str,
    launcher: str,
    source: str,
    *,
    run_db: str | Path | None = None,
    ab_db: str | Path | None = None,
) -> PromptContext:
    """Profile and regression of the kernel's launches in the given databases (either optional)."""
    ctx = PromptContext(kernel=kernel, launcher=launcher)
    names = set(jit_names(source))
    if run_db:
        rec = store.load_run(run_db, artifacts=[ARTIFACT])
        for r in rec.results:
            if r.key.kernel.rsplit("/", 1)[-1] not in names:
                continue
            for m in r.metrics:
                if m.name.startswith(STATIC_PREFIXES) and m.name not in ctx.static:
                    ctx.static[m.name] = m.value
            text = r.artifacts.get(ARTIFACT)
            if text:
                for f in findings_from_json(text):
                    line = (
                        f"{'FLAGGED ' if f.flagged else ''}{f.name} = {f.value:.3g} {f.unit}: {f.explanation}"
                    )
                    if line not in ctx.findings:
                        ctx.findings.append(line)
    if ab_db:
        doc = load_ab_document(ab_db) or {}
        for t in doc.get("tests", []):
            rows = [x for x in t.get("timed", []) if str(x.get("kernel", "")).rsplit("/", 1)[-1] in names]
            launches = [
                c for lc in t.get("launches", []) if lc.get("name") in names for c in lc.get("changes", [])
            ]
            if not rows and not launches:
                continue
            ctx.regression += [f"{t.get('test')}: {c}" for c in launches]
            for x in rows:
                moved = x.get("regions_moved") or "n/a"
                moved = ", ".join(map(str, moved)) if isinstance(moved, list) else moved
                ctx.regression.append(
                    f"{t.get('test')}: A/B {x.get('verdict')} ratio {x.get('ratio')} "
                    f"(CI {x.get('ci_low')} .. {x.get('ci_high')}); moved: {moved}"
                )
    return ctx


SYSTEM = (
    "You optimize Triton GPU kernels. Reply with one line 'Hypothesis: <why this is faster>' and "
    "exactly one ```python code block holding the complete kernel module: the @triton.jit kernel(s) "
    "and the launcher with the same name and signature as the original. The launcher must launch "
    "your Triton kernel on the current stream, allocate fresh outputs, never modify its inputs, "
    "compute in the original precision, and not call torch compute ops, the original module, the "
    "network or any timer. Every candidate is checked for all of this on random inputs of several "
    "shapes, dtypes and distributions, and timed against the original on other inputs."
)


def build_messages(ctx: PromptContext, base_source: str) -> list[dict[str, str]]:
    parts = [
        f"Kernel: {ctx.kernel}; launcher: {ctx.launcher}().",
        "Current best version:",
        f"```python\n{base_source}```",
    ]
    if ctx.static:
        parts.append(
            "Static metrics (sm_90 compile): "
            + "; ".join(f"{k} {v:g}" for k, v in sorted(ctx.static.items()))
        )
    if ctx.findings:
        parts.append("Profile findings:\n" + "\n".join(f"- {f}" for f in ctx.findings))
    if ctx.regression:
        parts.append("The regression being fixed (kperf ab):\n" + "\n".join(f"- {r}" for r in ctx.regression))
    if ctx.history:
        lines = []
        for h in ctx.history[-MAX_HISTORY:]:
            outcome = h.get("verdict", "?")
            if h.get("ratio") is not None:
                outcome += f", time ratio {h['ratio']:.3f}"
            if h.get("reason"):
                outcome += f" ({h['reason'][:160]})"
            lines.append(f"- {h.get('hypothesis', '')[:200]} -> {outcome}")
        parts.append("Already tried (do not repeat):\n" + "\n".join(lines))
    parts.append("Propose one change that makes the kernel faster on an H100.")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]
