"""pytest plugin used by benchmarks/suites_eval.py: per test, its outcome and how many Triton
launches it made, written as JSON lines to $KPERF_SUITES_COUNTS.

Launches are counted twice and the larger count is kept: by wrapping the launch entry points
(``JITFunction.run``, ``InterpretedFunction.run``) around the test's call, which sees every launch
that reaches Triton (GPU mode), and from the launches kperf's static recorder kept for the test
(static mode; a launch captured without executing its body never reaches the wrapped entry).
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from kperf_ci.plugin.session import LAUNCHES_KEY

_COUNT = pytest.StashKey[list]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_call(item: pytest.Item):
    counter = [0]
    item.stash[_COUNT] = counter
    patched = []
    try:
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction

        for cls in (JITFunction, InterpretedFunction):
            orig = cls.run

            def run(self, *args, _orig=orig, **kwargs):  # noqa: ANN001
                if not kwargs.get("warmup"):
                    counter[0] += 1
                return _orig(self, *args, **kwargs)

            cls.run = run
            patched.append((cls, orig))
    except ImportError:
        pass
    try:
        return (yield)
    finally:
        for cls, orig in patched:
            cls.run = orig


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    path = os.environ.get("KPERF_SUITES_COUNTS")
    if not path:
        return report
    if call.when == "call" or (call.when == "setup" and not report.passed):
        recorded = len(item.stash.get(LAUNCHES_KEY, []))
        counted = item.stash.get(_COUNT, [0])[0]
        outcome = "xfailed" if hasattr(report, "wasxfail") else report.outcome
        row: dict[str, Any] = {
            "test": item.nodeid,
            "when": call.when,
            "outcome": outcome,
            "launches": max(recorded, counted),
        }
        if report.failed:
            crash = getattr(report.longrepr, "reprcrash", None)
            row["error"] = (getattr(crash, "message", "") or "")[:300]
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
    return report
