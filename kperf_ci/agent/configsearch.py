"""The offline proposer: deterministic search over a launcher's launch keywords.

No endpoint, no randomness: from the best variant so far it proposes one launch keyword changed
at a time (block size, ``num_warps``, ``num_stages``; a block size also changes the grid, which
the example launchers derive from it), nearest values first, never a configuration already
tried. Candidates are the original module text with the launch call's keywords edited in place,
so the pull request's diff is one line.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Iterable
from dataclasses import dataclass

from kperf_ci.agent.targets import Target


@dataclass(frozen=True)
class Proposal:
    """A candidate kernel module and why it should be faster."""

    source: str
    hypothesis: str
    proposer: str
    knobs: tuple[tuple[str, int], ...] = ()


class SourceError(ValueError):
    """The original module does not have the launch call the search edits."""


def _launch_call(source: str, launcher: str) -> ast.Call:
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == launcher:
            for sub in ast.walk(node):
                if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Subscript):
                    return sub
    raise SourceError(f"no `kernel[grid](...)` launch found in {launcher}()")


def _offset(lines: list[str], lineno: int, col: int) -> int:
    # ast columns are UTF-8 byte offsets
    return sum(len(x) for x in lines[: lineno - 1]) + len(lines[lineno - 1].encode()[:col].decode())


def current_knobs(source: str, target: Target) -> dict[str, int]:
    """The launch keywords of the module as written (constants only), over the target's defaults."""
    call = _launch_call(source, target.launcher)
    out = dict(target.default_knobs)
    for kw in call.keywords:
        if kw.arg in target.knobs and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, int):
            out[kw.arg] = kw.value.value
    return out


def apply_knobs(source: str, target: Target, knobs: dict[str, int]) -> str:
    """``source`` with the launch call's keywords set to ``knobs`` (replaced or appended)."""
    call = _launch_call(source, target.launcher)
    lines = source.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = []
    seen = set()
    for kw in call.keywords:
        if kw.arg in knobs:
            v = kw.value
            start = _offset(lines, v.lineno, v.col_offset)
            end = _offset(lines, v.end_lineno or v.lineno, v.end_col_offset or v.col_offset)
            edits.append((start, end, str(knobs[kw.arg])))
            seen.add(kw.arg)
    # a knob the call does not spell out and that keeps its default stays out of the diff
    missing = [k for k in knobs if k not in seen and target.default_knobs.get(k) != knobs[k]]
    if missing:
        last = call.keywords[-1].value if call.keywords else call.args[-1]
        pos = _offset(lines, last.end_lineno or last.lineno, last.end_col_offset or 0)
        edits.append((pos, pos, "".join(f", {k}={knobs[k]}" for k in missing)))
    out = source
    for start, end, text in sorted(edits, reverse=True):
        out = out[:start] + text + out[end:]
    return out


def _key(knobs: dict[str, int]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(knobs.items()))


def neighbours(target: Target, base: dict[str, int]) -> Iterable[dict[str, int]]:
    """One knob changed at a time, nearest value (in powers of two) first; knobs in the order the
    target declares them (the one that matters most first)."""
    for name in target.knobs:
        cur = base.get(name)
        vals = [v for v in target.knobs[name] if v != cur]
        ref = cur if cur else 1
        for v in sorted(vals, key=lambda v: (abs(math.log2(v) - math.log2(ref)), v)):
            yield {**base, name: v}


class ConfigSearchProposer:
    """Hill climbing over launch keywords; ``propose`` returns None when nothing is left."""

    name = "config-search"
    calls = 0  # no LLM calls, ever

    def __init__(self, target: Target, original_source: str):
        self.target = target
        self.original = original_source
        self.start = current_knobs(original_source, target)
        self.tried: set[tuple[tuple[str, int], ...]] = {_key(self.start)}

    def mark_tried(self, knobs: dict[str, int]) -> None:
        self.tried.add(_key(knobs))

    def propose(self, base_knobs: dict[str, int] | None) -> Proposal | None:
        base = base_knobs or self.start
        for cand in neighbours(self.target, base):
            k = _key(cand)
            if k in self.tried:
                continue
            self.tried.add(k)
            changed = {n: v for n, v in cand.items() if base.get(n) != v}
            desc = ", ".join(f"{n} {base.get(n, 'default')} -> {v}" for n, v in changed.items())
            return Proposal(
                source=apply_knobs(self.original, self.target, cand),
                hypothesis=f"launch config: {desc}",
                proposer=self.name,
                knobs=k,
            )
        return None
