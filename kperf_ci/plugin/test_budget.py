"""Static mode's clock on each test (issue 35): Triton's interpreter runs a kernel in Python, so a
test that takes seconds on a GPU can take many minutes on a CPU runner, with nothing on screen.

- A test still running after ``slow_test_s`` is named on pytest's terminal as it runs, once.
- With ``test_budget_s`` (``--kperf-test-budget``, ``[tool.kperf] test_budget_s``), a test still in
  its call phase after that long is stopped (SIGALRM in the main thread) and skipped with the
  reason, rather than holding the job until CI's own timeout kills everything.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Generator
from typing import Any

import pytest

from kperf_ci.config import slow_test_line


class OverBudget(pytest.skip.Exception):
    """Raised in the test's thread when its budget is spent: a skip, with the reason."""


class TestClock:
    """Registered by the plugin in static mode only."""

    __test__ = False  # not a test class, whatever pytest collects

    def __init__(self, slow_s: float, budget_s: float, config: Any = None) -> None:
        self.slow_s = slow_s
        self.budget_s = budget_s
        self.config = config  # its terminal writer: the one stream capture leaves alone in a test

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: Any) -> Generator[None, Any, Any]:
        timer = None
        if self.slow_s > 0:
            timer = threading.Timer(self.slow_s, _say_slow, (self.config, item.nodeid, self.slow_s))
            timer.daemon = True
            timer.start()
        try:
            return (yield)
        finally:
            if timer is not None:
                timer.cancel()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, Any, Any]:
        usable = (
            self.budget_s > 0
            and hasattr(signal, "setitimer")
            and threading.current_thread() is threading.main_thread()
        )
        if not usable:
            return (yield)
        budget = self.budget_s

        def over(signum: int, frame: Any) -> None:
            raise OverBudget(
                f"kperf: stopped after the {budget:g} s test budget under Triton's interpreter "
                "(static mode; --kperf-test-budget / [tool.kperf] test_budget_s)"
            )

        previous = signal.signal(signal.SIGALRM, over)
        signal.setitimer(signal.ITIMER_REAL, budget)
        try:
            return (yield)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


def _writer(config: Any) -> Any:
    """pytest's terminal writer, or None (no terminal reporter: -p no:terminal)."""
    try:
        return config.get_terminal_writer() if config is not None else None
    except (AssertionError, AttributeError):
        return None


def _say_slow(config: Any, nodeid: str, after_s: float) -> None:
    # For the person watching the job now. pytest redirects the output file descriptors during a
    # test, so its capture is suspended around the line (as pytest-timeout does from its timer
    # thread). An xdist worker has no terminal of its own: its line goes to its stderr.
    worker = getattr(config, "workerinput", None)
    who = f"[{worker.get('workerid', '?')}] " if isinstance(worker, dict) else ""
    line = slow_test_line(who, nodeid, after_s)
    writer = None if who else _writer(config)
    capman = config.pluginmanager.getplugin("capturemanager") if config is not None else None
    with capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext():
        if writer is not None:
            writer.line()
            writer.line(line, yellow=True)
            writer.flush()
        else:
            sys.stderr.write("\n" + line + "\n")
            sys.stderr.flush()
