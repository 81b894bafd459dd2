"""How an A/B document's prose reads in the reports: a stored cause in today's words (an older
document named metrics by their ids: "sass.instructions 375 -> 1,252", "shared_bytes 1,040
bytes"), and the order a cause is said in, the same for a timed launch and one judged
statically (options, then the occupancy change, then the compiled code's lines).

Below report/ab_view.py, which reads the document for every renderer; nothing here escapes.
"""

from __future__ import annotations

import re
from typing import Any

from kperf_ci.metrics import CODE_METRICS, display_name

__all__ = ["CODE_LINES", "cause_order", "options_first", "readable", "stored_words"]

#: a metric id in the prose of a document written before the catalogue's display names: its
#: launch diff and static reasons said "sass.instructions 375 -> 1,252", "shared_bytes 1,040
#: bytes -> 0 bytes", "not lowered by shared_bytes)"
_STORED_IDS = re.compile(
    r"(?<![\w.])("
    + "|".join(re.escape(n) for n in CODE_METRICS if display_name(n) != n)
    + r")(?=\)| [-+]?\d| from 0| or )"
)
_STORED_BYTES = re.compile(r"(\d[\d,]*(?:\.\d+)?) bytes\b")
#: the fields of a document that hold prose about metrics (never names, tests or launches)
_PROSE_KEYS = frozenset({"changes", "reason", "reasons", "notes"})
#: the fields of a document that hold a launch's text ("a=fp32[4x8]; grid 4x1x1; num_warps=4,
#: num_stages=3" in a document written before the options were spaced as the arguments are)
_LAUNCH_KEYS = frozenset({"launch", "base_launch"})
_OPTION_COMMA = re.compile(r"(?<=\d),(?=num_(?:warps|stages|ctas)=)")


def stored_words(text: str) -> str:
    """Stored prose in today's words: "SASS instructions 375 → 1,252", "shared memory 1,040 B
    → 0 B" for what an older document said with the metric's id and "bytes", and one arrow,
    the times' "→", for the launch diff's "->" (a row said "6.05 µs → 7.97 µs" beside
    "num_warps 16 -> 4"). The document
    itself is left as it is (it is data); today's documents read the same through this."""
    text = _STORED_IDS.sub(lambda m: display_name(m.group(1)), text)
    return _STORED_BYTES.sub(r"\1 B", text).replace(" -> ", " → ")


def readable(doc: Any) -> Any:
    """A copy of ``doc`` whose prose about metrics (:data:`_PROSE_KEYS`) reads as today's
    (:func:`stored_words`) and whose launch texts space their options as today's ("num_warps=4,
    num_stages=3"): what every renderer of an A/B document reads."""

    def walk(v: Any, prose: bool) -> Any:
        if isinstance(v, dict):
            return {
                k: _OPTION_COMMA.sub(", ", x)
                if k in _LAUNCH_KEYS and isinstance(x, str)
                else walk(x, k in _PROSE_KEYS)
                for k, x in v.items()
            }
        if isinstance(v, list):
            return [walk(x, prose) for x in v]
        return stored_words(v) if prose and isinstance(v, str) else v

    return walk(doc, False)


#: what a launch diff says of the compiled code rather than of the call: the verdict's to say
#: in a static cause (ab_view.static_rows), said after the occupancy in a timed one (cause_order)
CODE_LINES = ("SASS changed", "theoretical occupancy")
_OCCUPANCY = "theoretical occupancy"


def options_first(options: list[str], reasons: list[str]) -> list[str]:
    """A cause in the order a reviewer reads it, the one rule of both tables and the terminal:
    the option and argument changes ("num_warps 4 -> 1"), then the reasons. An option a reason
    names too ("num_warps 4 -> 1: at most 32 blocks per SM") still leads: the terminal's launch
    diff says it first, and a cause that dropped it read differently there (issue 36's third
    walk, item 5). A part of a reason ("a; b") that is one of the options is not said again: a
    changed call no metric moved has its launch's own change as its reason (issue 38's third
    walk: "autotune configs: num_warps=32 dropped, ...; autotune configs: ..." twice)."""
    kept = ("; ".join(part for part in r.split("; ") if part not in options) for r in reasons)
    return [*options, *(r for r in kept if r)]


def cause_order(changes: list[Any]) -> list[str]:
    """A timed launch's changes as its cause reads, like a static one (:func:`options_first`):
    its options and arguments, then the theoretical occupancy change where the launch diff
    says one (a document written since kperf said it for timed launches), then the code's
    lines (SASS, registers, instruction counts) and region shares. An older document, without
    an occupancy line, keeps its order."""
    text = [str(c) for c in changes]
    occupancy = [c for c in text if _OCCUPANCY in c]
    if not occupancy:
        return text
    first_code = next((i for i, c in enumerate(text) if any(w in c for w in CODE_LINES)), len(text))
    options = text[:first_code]
    rest = [c for c in text[first_code:] if _OCCUPANCY not in c]
    return options_first(options, occupancy) + rest
