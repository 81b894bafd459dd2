"""pytest plugin used by benchmarks/static_speed.py: record every kernel launch of each test.

Load with ``-p _kperf_record_plugin`` (this directory on PYTHONPATH) under TRITON_INTERPRET=1;
the launches are written as JSON lines to $KPERF_RECORD_OUT at the end of the session.
"""

import os

import pytest

from kperf_ci.capture.static.record import LaunchRecorder

_REC = LaunchRecorder()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    with _REC.recording(test=item.nodeid):
        yield


def pytest_sessionfinish(session, exitstatus):
    out = os.environ.get("KPERF_RECORD_OUT")
    if out:
        _REC.dump(out)
