"""capture.regions.hook.RegionHook: the compiler hook lives for a with-block, chains to the hook
that was there, shares one installed hook between nested scopes, and edits only tagged builds."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kperf_ci.capture.regions.hook import RegionHook
from kperf_ci.capture.regions.ttgir_pass import RegionConfig

triton = pytest.importorskip("triton")

TTGIR = """module {
  tt.func public @k(%arg0: !tt.ptr<f32>) {
    %c0 = arith.constant 0 : i32
    tt.return
  }
}"""


class _Backend:
    instrumentation = object()  # Proton's lowering "active"


@pytest.fixture
def knob():
    """A foreign hook on Triton's knob for the test, restored after it."""
    saved = triton.knobs.runtime.add_stages_inspection_hook
    calls = []

    def foreign(backend, stages, options, language, capability):
        calls.append(options.instrumentation_mode)

    triton.knobs.runtime.add_stages_inspection_hook = foreign
    yield foreign, calls
    triton.knobs.runtime.add_stages_inspection_hook = saved


#: No region to insert: the wrapper then returns the module unchanged, so no MLIR is parsed.
NOTHING = {"kernel": False, "phases": False}


def _compile(options_mode: str):
    class _Module:
        def __str__(self):
            return TTGIR

        context = None

    stages = {"ttgir": lambda src, md: _Module()}
    hook = triton.knobs.runtime.add_stages_inspection_hook
    hook(_Backend(), stages, SimpleNamespace(instrumentation_mode=options_mode), None, 90)
    return stages


def test_installed_for_the_block_chained_and_restored(knob):
    foreign, calls = knob
    cfg = RegionConfig(**NOTHING)
    with RegionHook(cfg) as hook:
        assert triton.knobs.runtime.add_stages_inspection_hook is hook
        plain = _compile("")
        assert calls == [""]  # the previous hook still runs
        orig = plain["ttgir"]
        assert plain["ttgir"] is orig  # an untagged build is not touched
        tagged = _compile(f"whatever:kperf_regions={cfg.key()}")
        assert tagged["ttgir"].__name__ == "ttgir_with_regions"
        module = tagged["ttgir"](None, {"name": "k"})
        assert str(module) == TTGIR and hook.report("k") is not None
    assert triton.knobs.runtime.add_stages_inspection_hook is foreign
    assert hook.report("k") is not None  # reports outlive the scope


def test_nested_scopes_share_the_installed_hook(knob):
    foreign, _ = knob
    a, b = RegionConfig(**NOTHING), RegionConfig(**NOTHING, granularity="warp")
    with RegionHook(a) as outer:
        with RegionHook(b) as inner:
            assert triton.knobs.runtime.add_stages_inspection_hook is outer  # one hook per process
            st = _compile(f"m:kperf_regions={b.key()}")
            st["ttgir"](None, {"name": "kb"})
            assert inner.report("kb") is not None and outer.report("kb") is None  # keyed by config
        with pytest.raises(RuntimeError, match="no region configuration registered"):
            _compile(f"m:kperf_regions={b.key()}")  # b's scope is over
        _compile(f"m:kperf_regions={a.key()}")
    assert triton.knobs.runtime.add_stages_inspection_hook is foreign


def test_same_config_in_nested_scopes_stays_registered_until_the_last_leaves(knob):
    cfg = RegionConfig()
    with RegionHook(cfg):
        with RegionHook(cfg):
            pass
        _compile(f"m:kperf_regions={cfg.key()}")  # still registered by the outer scope
