"""Static metrics cached by cubin (capture/static/metrics_cache.py): in memory and on disk, shared by
static mode's compile workers and GPU mode; a second process never runs the tools again."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap

import pytest
from conftest import whole_static_metrics

from kperf_ci.capture.launches.gpu import LaunchInfo, add_static_metrics
from kperf_ci.capture.static import metrics_cache

ASM = {"cubin": b"\x7fELF fake cubin bytes", "ptx": ".version 8.0"}
MD = {"shared": 1024, "num_warps": 4, "num_stages": 2}
DIGEST = hashlib.sha256(b"NORMALIZED SASS").hexdigest()  # an entry's sass_hash is checked on read


class Counting:
    def __init__(self):
        self.calls = 0

    def __call__(self, asm, md, arch):
        self.calls += 1
        return whole_static_metrics(asm["cubin"], 32.0), "NORMALIZED SASS", DIGEST


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("KPERF_METRICS_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("KPERF_NO_METRICS_CACHE", raising=False)
    metrics_cache.clear_memory()
    yield tmp_path
    metrics_cache.clear_memory()


def test_memory_then_disk_then_recompute_on_a_new_cubin(cache_dir):
    fn = Counting()
    m, sass, digest, cached = metrics_cache.cached_static_metrics(ASM, MD, "sm_90", fn)
    assert (fn.calls, cached, sass, digest) == (1, False, "NORMALIZED SASS", DIGEST)
    assert m[0].name == "registers" and m[0].value == 32.0
    assert len(list(cache_dir.glob("*.json"))) == 1
    assert metrics_cache.cached_static_metrics(ASM, MD, "sm_90", fn)[3] is True  # memory
    metrics_cache.clear_memory()  # as a fresh process would start
    again = metrics_cache.cached_static_metrics(ASM, MD, "sm_90", fn)
    assert fn.calls == 1 and again[3] is True and again[:3] == (m, sass, digest)
    # another cubin, arch or metadata is another key
    metrics_cache.cached_static_metrics({**ASM, "cubin": b"other"}, MD, "sm_90", fn)
    metrics_cache.cached_static_metrics(ASM, MD, "sm_80", fn)
    metrics_cache.cached_static_metrics(ASM, {**MD, "num_warps": 8}, "sm_90", fn)
    assert fn.calls == 4


def test_switched_off_and_corrupt_entries(cache_dir, monkeypatch):
    fn = Counting()
    metrics_cache.cached_static_metrics(ASM, MD, "sm_90", fn)
    (entry,) = cache_dir.glob("*.json")
    entry.write_text("{not json")
    metrics_cache.clear_memory()
    assert metrics_cache.cached_static_metrics(ASM, MD, "sm_90", fn)[3] is False and fn.calls == 2
    monkeypatch.setenv("KPERF_NO_METRICS_CACHE", "1")
    assert metrics_cache.cache_dir() is None


def test_gpu_mode_reads_each_kernel_once(cache_dir, monkeypatch):
    fn = Counting()
    monkeypatch.setattr(metrics_cache.sass, "static_metrics", fn)

    class K:
        asm = ASM
        metadata = MD

    a, b = K(), K()  # two compiled-kernel objects of the same binary
    launches = [LaunchInfo("k", kernel=a), LaunchInfo("k", kernel=b), LaunchInfo("k", kernel=a)]
    add_static_metrics(launches)
    assert fn.calls == 1
    assert all(i.sass_hash == DIGEST and i.static and i.static_error is None for i in launches)


def test_a_second_process_does_not_run_the_tools(cache_dir):
    metrics_cache.cached_static_metrics(ASM, MD, "sm_90", Counting())
    code = textwrap.dedent(
        f"""
        from kperf_ci.capture.static import metrics_cache
        def boom(*a):
            raise AssertionError("static metrics recomputed")
        r = metrics_cache.cached_static_metrics({ASM!r}, {MD!r}, "sm_90", boom)
        assert r[3] is True and r[2] == {DIGEST!r}, r
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ))
