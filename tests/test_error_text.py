"""One home for how an exception is told in a message (kperf_ci/error_text.py)."""

from __future__ import annotations

import re
from pathlib import Path

from kperf_ci.error_text import error_text

PACKAGE = Path(__file__).resolve().parents[1] / "kperf_ci"


def test_an_exception_is_told_by_its_type_and_the_start_of_its_text() -> None:
    assert error_text(ValueError("x" * 500)) == "ValueError: " + "x" * 200
    assert error_text(KeyError("k"), 120) == "KeyError: 'k'"
    assert error_text(RuntimeError("abcdef"), 3) == "RuntimeError: abc"


def test_no_module_writes_the_cut_exception_text_out_by_hand() -> None:
    by_hand = re.compile(r"type\((\w+)\)\.__name__\}: \{str\(\1\)\[\s*:\s*\d+\s*\]")
    sites = [
        f"{p.relative_to(PACKAGE)}:{n}"
        for p in sorted(PACKAGE.rglob("*.py"))
        if p.name != "error_text.py"
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if by_hand.search(line)
    ]
    assert not sites, f"use kperf_ci.error_text.error_text instead: {sites}"
