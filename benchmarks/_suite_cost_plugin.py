"""pytest plugin of benchmarks/suite_cost.py: one JSON line per test with its CPU seconds.

``self`` is the test process's own user + system time over the test's whole protocol (setup, call,
teardown); ``child`` is that of the subprocesses it waited for (``os.times``' children fields:
every `kperf`, pytest and compile worker a test starts and reaps). Loaded in each xdist worker
through ``-p``; the file is named by ``KPERF_SUITE_COST_OUT``.
"""

from __future__ import annotations

import json
import os
import time

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    t0, w0 = os.times(), time.perf_counter()
    yield
    t1, w1 = os.times(), time.perf_counter()
    rec = {
        "id": item.nodeid,
        "wall": round(w1 - w0, 3),
        "self": round((t1.user - t0.user) + (t1.system - t0.system), 3),
        "child": round((t1.children_user - t0.children_user) + (t1.children_system - t0.children_system), 3),
    }
    with open(os.environ["KPERF_SUITE_COST_OUT"], "a") as f:  # one short line: an atomic append
        f.write(json.dumps(rec) + "\n")
