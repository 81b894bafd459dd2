"""Lets the examples run with or without the kperf plugin.

With kperf-ci installed, its pytest plugin provides the `kperf` fixture and marker. Without it
(or with `-p no:kperf`), a stand-in plugin is registered here: `kperf.mode == "off"` and
`kperf.bench(fn, *args, **kwargs)` just calls `fn`. The stand-in is registered as a plugin, not
defined in this file, so it can never shadow the real fixture.
"""

import os
import sys

import pytest

# The tests import `kernels.*` and `sizes` from this directory, whatever pytest's import mode.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


class _KperfOff:
    mode = "off"
    enabled = False

    def bench(self, fn, *args, **kwargs):
        return fn(*args, **kwargs)


class _FallbackPlugin:
    @pytest.fixture
    def kperf(self):
        """Stand-in for kperf-ci's fixture: `kperf.bench(fn, *args)` is `fn(*args)`."""
        return _KperfOff()


def pytest_configure(config):
    # Triton's interpreter converts 1-element arrays to Python ints (e.g. `range(0, N, BLOCK)` with
    # a runtime N); numpy 2.3 warns about it on every launch, numpy 2.4 makes it an error (so the
    # interpreter needs numpy < 2.4). Silence the warning, which says nothing about the examples.
    config.addinivalue_line(
        "filterwarnings", "ignore:Conversion of an array with ndim > 0 to a scalar:DeprecationWarning"
    )
    pm = config.pluginmanager
    if not (pm.hasplugin("kperf") or pm.hasplugin("kperf_ci.plugin")):
        config.addinivalue_line("markers", "kperf(name=None, tags=(), ...): a kperf-ci benchmark (inactive)")
        config.pluginmanager.register(_FallbackPlugin(), "kperf-examples-fallback")
