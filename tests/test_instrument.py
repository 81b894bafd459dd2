"""The automatic-region pass (text level and in a real sm_90 AOT compile on the CPU), the
Proton trace parser on synthetic traces, and, marked `gpu`, one instrumented launch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_gpu

from kperf_ci.capture.regions.result import aggregate_units, build_result
from kperf_ci.capture.regions.ttgir_pass import RegionConfig, insert_regions, regions_in_ttgir
from kperf_ci.traces import clock as trace_clock
from kperf_ci.traces import proton_chrome
from kperf_ci.traces.timeline_file import read_npz

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data" / "instrument"

# ---------------------------------------------------------------------------------------------
# the text pass

MATMUL_TTGIR = """\
#blocked = #ttg.blocked<{sizePerThread = [1], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>
module attributes {"ttg.num-warps" = 4 : i32} {
  tt.func public @mm(%a: !tt.ptr<f16>, %K: i32) attributes {noinline = false} {
    %cst = arith.constant dense<0.000000e+00> : tensor<128x128xf32, #mma> loc(#loc1)
    %c0 = arith.constant 0 : i32 loc(#loc1)
    %r = tt.make_range {end = 128 : i32, start = 0 : i32} : tensor<128xi32, #blocked> loc(#loc2)
    %acc:2 = scf.for %k = %c0 to %K step %c64 iter_args(%x = %cst, %p = %r) -> (tensor<128xf32>, i32)  : i32 {
      %l = tt.load %p : tensor<128x64x!tt.ptr<f16>, #blocked> loc(#loc3)
      %d = ttng.warp_group_dot %l, %l, %x {isAsync = true} : !ttg.memdesc<1xf16> loc(#loc4)
      %w:3 = ttng.warp_group_dot_wait %d, %l {pendings = 0 : i32} : tensor<128x128xf32, #mma> loc(#loc4)
      %s = "tt.reduce"(%l) <{axis = 0 : i32}> ({
      ^bb0(%u: f32, %v: f32):
        %m = arith.maxnumf %u, %v : f32 loc(#loc5)
        tt.reduce.return %m : f32 loc(#loc5)
      }) : (tensor<128xf32>) -> f32 loc(#loc5)
      scf.yield %w#0, %p : tensor<128x128xf32, #mma>, i32 loc(#loc6)
    } loc(#loc7)
    %o = arith.truncf %acc#0 : tensor<128x128xf32, #mma> to tensor<128x128xf16, #mma> loc(#loc8)
    tt.store %a, %o : tensor<128x128x!tt.ptr<f16>, #blocked> loc(#loc9)
    tt.return loc(#loc10)
  } loc(#loc)
} loc(#loc)
#loc1 = loc(unknown)
"""

ADD_TTGIR = """\
module attributes {"ttg.num-warps" = 4 : i32} {
  tt.func public @add(%x: !tt.ptr<f32>) attributes {noinline = false} {
    %pid = tt.get_program_id x : i32 loc(#loc1)
    %v = tt.load %x : tensor<1024x!tt.ptr<f32>, #blocked> loc(#loc2)
    tt.store %x, %v : tensor<1024x!tt.ptr<f32>, #blocked> loc(#loc3)
    tt.return loc(#loc4)
  } loc(#loc)
} loc(#loc)
"""


def _records(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if "proton.record" in ln]


def _balanced_per_block(text: str) -> None:
    """Every start has its end at the same brace depth, properly nested."""
    stack: list[tuple[str, int]] = []
    depth = 0
    for ln in text.splitlines():
        s = ln.strip()
        if s.startswith("proton.record"):
            kind, name = s.split()[1], s.split('"')[1]
            if kind == "start":
                stack.append((name, depth))
            else:
                assert stack and stack[-1] == (name, depth), f"crossing/unbalanced at {s} (open {stack})"
                stack.pop()
        depth += ln.count("{") - ln.count("}")
    assert not stack


def test_matmul_like_kernel_gets_kernel_prologue_loop_epilogue():
    text, rep = insert_regions(MATMUL_TTGIR, RegionConfig())
    assert rep.regions == ["kernel", "prologue", "loop0", "epilogue"] and not rep.warnings
    recs = _records(text)
    assert recs == [
        'proton.record start "kernel"',
        'proton.record start "prologue"',
        'proton.record end "prologue"',
        'proton.record start "loop0"',
        'proton.record end "loop0"',
        'proton.record start "epilogue"',
        'proton.record end "epilogue"',
        'proton.record end "kernel"',
    ]
    lines = text.splitlines()
    i_for = next(i for i, ln in enumerate(lines) if "scf.for" in ln)
    assert lines[i_for - 1].strip() == 'proton.record start "loop0"'
    assert lines[i_for - 2].strip() == 'proton.record end "prologue"'
    i_close = next(i for i, ln in enumerate(lines) if ln.strip().startswith("} loc(#loc7)"))
    assert lines[i_close + 1].strip() == 'proton.record end "loop0"'
    i_ret = next(i for i, ln in enumerate(lines) if "tt.return" in ln)
    assert lines[i_ret - 1].strip() == 'proton.record end "kernel"'
    assert lines[i_ret - 2].strip() == 'proton.record end "epilogue"'
    assert lines[3].strip() == 'proton.record start "kernel"'  # right after the tt.func line
    _balanced_per_block(text)
    assert regions_in_ttgir(text) == rep.regions
    # the rest of the module is untouched
    assert [ln for ln in lines if "proton.record" not in ln] == MATMUL_TTGIR.splitlines()


def test_loop_free_kernel_gets_body():
    text, rep = insert_regions(ADD_TTGIR, RegionConfig())
    assert rep.regions == ["body"]  # one pair serves `kernel` too (same span)
    assert _records(text) == ['proton.record start "body"', 'proton.record end "body"']
    text, rep = insert_regions(ADD_TTGIR, RegionConfig(phases=False))
    assert rep.regions == ["kernel"]
    _balanced_per_block(text)


def test_options_per_iteration_and_ops():
    text, rep = insert_regions(
        MATMUL_TTGIR, RegionConfig(kernel=False, per_iteration=True, ops=("dot", "wait"))
    )
    assert rep.regions == ["prologue", "loop0", "epilogue", "loop0.iter", "dot0", "wait0"]
    _balanced_per_block(text)
    lines = [ln.strip() for ln in text.splitlines()]
    i_dot = next(i for i, ln in enumerate(lines) if ln.startswith("%d = ttng.warp_group_dot "))
    assert lines[i_dot - 1] == 'proton.record start "dot0"' and lines[i_dot + 1] == 'proton.record end "dot0"'
    i_y = next(i for i, ln in enumerate(lines) if ln.startswith("scf.yield"))
    assert lines[i_y - 1] == 'proton.record end "loop0.iter"'
    # the multi-line tt.reduce stays intact inside the iteration
    assert "^bb0(%u: f32, %v: f32):" in lines


def test_two_loops_and_nothing_when_disabled():
    two = MATMUL_TTGIR.replace(
        "    %o = arith.truncf",
        "    %z:2 = scf.for %j = %c0 to %K step %c64 iter_args(%q = %c0) -> (i32)  : i32 {\n"
        "      scf.yield %q : i32 loc(#loc6)\n    } loc(#loc7)\n    %o = arith.truncf",
    )
    text, rep = insert_regions(two, RegionConfig())
    assert rep.regions == ["kernel", "prologue", "loop0", "loop1", "epilogue"]
    _balanced_per_block(text)
    text, rep = insert_regions(MATMUL_TTGIR, RegionConfig(kernel=False, phases=False))
    assert text == MATMUL_TTGIR and rep.regions == []


def test_user_scopes_stay_and_crossing_regions_are_left_out():
    crossing = MATMUL_TTGIR.replace(
        "    %c0 = arith.constant 0 : i32 loc(#loc1)\n",
        '    %c0 = arith.constant 0 : i32 loc(#loc1)\n    proton.record start "mine" loc(#loc1)\n',
    ).replace("    tt.return", '    proton.record end "mine" loc(#loc1)\n    tt.return')
    text, rep = insert_regions(crossing, RegionConfig())
    # "mine" opens in the prologue and closes at the end: prologue would cross it, the rest nest
    assert rep.regions == ["kernel", "loop0", "epilogue"]
    assert "prologue" in rep.skipped and any("cross the user scope 'mine'" in w for w in rep.warnings)
    _balanced_per_block(text)
    assert text.count('proton.record start "mine"') == 1
    clash = MATMUL_TTGIR.replace(
        "    tt.return", '    proton.record start "kernel"\n    proton.record end "kernel"\n    tt.return'
    )
    _, rep = insert_regions(clash, RegionConfig())
    assert "kernel" in rep.skipped


def test_config_keys_and_mode_tag():
    a, b = RegionConfig(), RegionConfig(per_iteration=True)
    assert a.key() != b.key() and a.key() == RegionConfig().key()
    with pytest.raises(ValueError):
        RegionConfig(ops=("bogus",))
    with pytest.raises(ValueError):
        RegionConfig(granularity="thread")
    pytest.importorskip("triton")
    assert a.mode_string().endswith(f":kperf_regions={a.key()}")
    cta = RegionConfig(granularity="cta").mode_string()
    assert "GRANULARITY.WARP" in cta and "SELECTIVE" in cta and "sampling_options=0" in cta
    assert "SELECTIVE" not in RegionConfig(granularity="warp").mode_string()


# ---------------------------------------------------------------------------------------------
# a real AOT compile for sm_90 (no GPU), in a subprocess without TRITON_INTERPRET


@pytest.fixture(scope="module")
def aot(tmp_path_factory):
    pytest.importorskip("triton")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path_factory.mktemp("triton_cache"))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    p = subprocess.run(
        [sys.executable, str(DATA / "aot_regions.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=str(ROOT),
    )
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("KPERF_JSON ")), None)
    assert p.returncode == 0 and line, p.stderr[-3000:]
    return json.loads(line[len("KPERF_JSON ") :])


def test_aot_matmul_regions_compile_and_read_clocks(aot):
    mm = aot["mm"]
    assert mm["regions"] == ["kernel", "prologue", "loop0", "epilogue"]
    assert mm["records"] == [
        'proton.record start "kernel"',
        'proton.record start "prologue"',
        'proton.record end "prologue"',
        'proton.record start "loop0"',
        'proton.record end "loop0"',
        'proton.record start "epilogue"',
        'proton.record end "epilogue"',
        'proton.record end "kernel"',
    ]
    assert {"clock", "globaltimer", "smid"} <= set(mm["ptx_regs"])
    # default buffer: 512 bytes per CTA in global memory, so no shared memory is taken
    assert mm["profile_scratch_size"] > 0 and mm["shared"] == aot["mm_plain"]["shared"]
    assert "kperf_regions=" in mm["mode"]


def test_aot_all_warps_granularity_compiles(aot):
    r = aot["mm_warp"]
    assert r["regions"] == aot["mm"]["regions"] and "GRANULARITY.WARP" in r["mode"]
    assert "SELECTIVE" in aot["mm"]["mode"] and "SELECTIVE" not in r["mode"]
    assert {"clock", "globaltimer", "smid"} <= set(r["ptx_regs"])


def test_aot_vector_add_gets_body(aot):
    add = aot["add"]
    assert add["regions"] == ["body"]
    assert {"clock", "globaltimer", "smid"} <= set(add["ptx_regs"])


def test_aot_plain_builds_stay_plain(aot):
    for name in ("mm_plain", "add_plain", "mm_plain_again"):
        assert (
            aot[name]["records"] == []
            and aot[name]["ptx_regs"] == []
            and aot[name]["profile_scratch_size"] == 0
        )
    assert aot["mm_plain_again"]["cubin_bytes"] == aot["mm_plain"]["cubin_bytes"]


def test_aot_options_compile(aot):
    r = aot["mm_iter_ops"]
    assert r["regions"][:4] == ["kernel", "prologue", "loop0", "loop0.iter"]
    assert any(n.startswith("dot") for n in r["regions"]) and any(n.startswith("wait") for n in r["regions"])
    assert r["mode"] != aot["mm"]["mode"]  # a different configuration is a different cache key


def test_aot_user_scopes_beside_automatic_regions(aot):
    r = aot["scoped"]
    assert {"user_load", "user_store", "kernel", "loop0", "epilogue"} <= set(r["regions"])
    assert {"clock", "globaltimer", "smid"} <= set(r["ptx_regs"])


# ---------------------------------------------------------------------------------------------
# the trace parser on a synthetic Proton trace


def synthetic_trace(ctas, freq=1000.0, fmt="newer"):
    """ctas: list of dicts {cta, sm, init_ns, final_ns, warps: {warp: [(name, start_cyc, end_cyc)]}},
    written as Proton 3.6's StreamChromeTraceWriter writes them."""
    min_init = min(c["init_ns"] for c in ctas)
    events = []
    for c in ctas:
        block_min = min(s for evs in c["warps"].values() for _, s, _ in evs)
        adjust = (c["init_ns"] - min_init) - block_min
        for w, evs in c["warps"].items():
            for name, s, e in evs:
                events.append(
                    {
                        "cname": "thread_state_running",
                        "name": name,
                        "cat": "k",
                        "ph": "X",
                        "pid": f"k Core{c['sm']} CTA{c['cta']}",
                        "tid": f"warp {w} (line 0)",
                        "ts": (s + adjust) / freq,
                        "dur": (e - s) / freq,
                        "args": {
                            "Init Time (ns)": c["init_ns"],
                            "Post Final Time (ns)": c["final_ns"] + 100,
                            "Finalization Time (ns)": 100,
                            "Frequency (MHz)": freq,
                            "call_stack": [],
                        }
                        if fmt == "newer"  # Proton after 3.6; 3.6 writes only the last three
                        else {"Finalization Time (ns)": 100, "Frequency (MHz)": freq, "call_stack": []},
                    }
                )
    return {"displayTimeUnit": "ns", "traceEvents": events}


def _cta(cta, sm, init_ns, clock_ghz=2.0, loop=8000, warps=4, base=10**9):
    warps_evs = {}
    for w in range(warps):
        s = base + 10 * w
        warps_evs[w] = [
            ("kernel", s, s + 200 + loop + 300),
            ("prologue", s, s + 200),
            ("loop0", s + 200, s + 200 + loop),
            ("epilogue", s + 200 + loop, s + 200 + loop + 300),
        ]
    end_cyc = base + 10 * (warps - 1) + 200 + loop + 300
    final_ns = init_ns + (end_cyc - base) / clock_ghz
    return {"cta": cta, "sm": sm, "init_ns": init_ns, "final_ns": int(round(final_ns)), "warps": warps_evs}


def test_parse_recovers_cycles_per_cta():
    ctas = [_cta(0, 3, 5_000_000), _cta(1, 7, 5_000_123, base=7 * 10**9), _cta(2, 3, 5_004_000, loop=16000)]
    kts = proton_chrome.parse_events(synthetic_trace(ctas)["traceEvents"])
    kt = kts["k"]
    assert kt.names == ["kernel", "prologue", "loop0", "epilogue"]
    assert kt.n_events == 3 * 4 * 4
    assert list(kt.cta_ids) == [0, 1, 2] and list(kt.cta_sm) == [3, 7, 3]
    assert list(kt.cta_init_ns) == [5_000_000, 5_000_123, 5_004_000]
    loop = kt.region == kt.region_id("loop0")
    assert sorted(set(kt.dur[loop].tolist())) == [8000, 16000]
    w1 = (kt.cta == 1) & (kt.unit == 1) & (kt.region == kt.region_id("kernel"))
    assert kt.start[w1].tolist() == [10]  # cycles since the CTA's first record, whatever its clock base


def test_clock_span_stats_and_metrics():
    clock = 1.75
    ctas = [_cta(i, i % 4, 1_000_000 + 3000 * i, clock_ghz=clock, loop=150_000) for i in range(64)]
    kt = proton_chrome.parse_events(synthetic_trace(ctas)["traceEvents"])["k"]
    ghz = trace_clock.measured_clock_ghz(kt)
    assert ghz == pytest.approx(clock, rel=2e-3)
    r = build_result(kt, RegionConfig(granularity="warp"), nvml_mhz=1980, grid=(64, 1, 1))
    assert r.clock_source == "trace" and r.dropped_events == 0
    assert any("differs from NVML" in w for w in r.warnings)
    total_cyc = 30 + 200 + 150_000 + 300
    expect_span = 3000 * 63 + total_cyc / clock
    assert r.span_ns == pytest.approx(expect_span, rel=1e-3)
    k = r.regions["kernel"]
    assert k.cycles_median == 200 + 150_000 + 300 and k.count == 64 * 4 and k.units == 64 * 4
    assert r.regions["loop0"].fraction == pytest.approx(150_000 / 150_500)
    assert r.regions["kernel"].ns_median == pytest.approx(150_500 / r.clock_ghz)
    assert r.partition["median_ratio"] == pytest.approx(1.0)
    names = {m.name: m for m in r.to_metrics()}
    assert {
        "region.kernel.cycles",
        "region.loop0.fraction",
        "region.epilogue.ms",
        "region.prologue.cycles",
    } <= set(names)
    assert names["region.loop0.cycles"].kind == "region" and names["region.loop0.cycles"].unit == "cycles"
    assert names["region.kernel.ms"].value == pytest.approx(150_500 / r.clock_ghz / 1e6)
    header, arrays = read_npz(r.timeline_bytes())
    assert header["names"] == kt.names and header["kernel"] == "k"
    assert np.array_equal(arrays["dur"], kt.dur) and arrays["cta_init_ns"].dtype == np.int64
    assert len(r.timeline_bytes()) < kt.n_events * 16  # compact


def test_triton_3_6_trace_without_init_args():
    """Proton 3.6 writes no Init Time: CTA starts come from ts, the clock from NVML."""
    clock = 1.6
    ctas = [_cta(i, i % 4, 1_000_000 + 3000 * i, clock_ghz=clock, loop=150_000) for i in range(16)]
    kt = proton_chrome.parse_events(synthetic_trace(ctas, fmt="3.6")["traceEvents"])["k"]
    assert list(kt.cta_init_ns) == [3000 * i for i in range(16)]  # relative to the earliest CTA
    assert (kt.cta_final_ns == -1).all() and trace_clock.measured_clock_ghz(kt) is None
    r = build_result(kt, RegionConfig(granularity="warp"), nvml_mhz=clock * 1000, grid=(16, 1, 1))
    assert r.clock_source == "nvml" and r.clock_ghz == pytest.approx(clock)
    total_cyc = 30 + 200 + 150_000 + 300
    assert r.span_ns == pytest.approx(3000 * 15 + total_cyc / clock, rel=1e-6)
    k = kt.region == kt.region_id("kernel")
    assert sorted(set(kt.start[k].tolist())) == [0, 10, 20, 30]


def test_drops_missing_ctas_and_log_are_reported():
    ctas = [_cta(i, 0, 1000 * i) for i in range(4)]
    del ctas[2]["warps"][3][2]  # warp 3 of CTA 2 lost its loop0 slice
    kt = proton_chrome.parse_events(synthetic_trace(ctas)["traceEvents"])["k"]
    r = build_result(kt, RegionConfig(granularity="warp"), grid=(5, 1, 1))
    assert r.dropped_events == 1 + 4 * 4  # one slice, plus a CTA of 4 warps x 4 regions never seen
    assert any("CTAs recorded nothing" in w for w in r.warnings) and any("dropped" in w for w in r.warnings)
    assert (
        proton_chrome.dropped_from_log(
            "Warning (cta0, warp1): first 12 events are dropped due to ...\n"
            "Warning (cta3, warp0): first 3 events are dropped"
        )
        == 15
    )
    r = build_result(
        kt, RegionConfig(granularity="warp"), grid=(4, 1, 1), log_text="first 40 events are dropped due to"
    )
    assert r.dropped_events == 40


def test_cta_and_warp_group_granularity_aggregate_warps():
    ctas = [_cta(0, 0, 0, warps=8), _cta(1, 1, 500, warps=8)]
    kt = proton_chrome.parse_events(synthetic_trace(ctas)["traceEvents"])["k"]
    cta = aggregate_units(kt, "cta")
    k = cta.region == cta.region_id("kernel")
    assert k.sum() == 2 and cta.dur[k].tolist() == [70 + 8500] * 2  # earliest start to latest end
    wg = aggregate_units(kt, "warp_group")
    assert (wg.region == wg.region_id("loop0")).sum() == 4 and set(wg.unit.tolist()) == {0, 1}
    r = build_result(kt, RegionConfig(granularity="cta"), grid=(2, 1, 1))
    assert r.regions["kernel"].count == 2 and r.dropped_events == 0


def test_load_trace_accepts_files_and_json_lines(tmp_path):
    t = synthetic_trace([_cta(0, 0, 0)])
    p = tmp_path / "a.chrome_trace"
    p.write_text(json.dumps(t))
    assert len(proton_chrome.load_trace(p)) == 16
    q = tmp_path / "b.chrome_trace"
    q.write_text(json.dumps(t) + "\n" + json.dumps(t) + "\n")
    assert len(proton_chrome.load_trace(q)) == 32


# ---------------------------------------------------------------------------------------------
# on a GPU


@pytest.mark.gpu
@needs_gpu
def test_gpu_instrument_vector_add_and_matmul():
    import torch

    sys.path.insert(0, str(DATA))
    import kernels as K

    from kperf_ci.capture.regions.instrument import instrument_callable

    n = 1 << 22
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.empty_like(x)

    def add():
        K.add_kernel[(n // 1024,)](x, y, out, n, BLOCK=1024)

    add()
    r = instrument_callable(add, RegionConfig())
    assert set(r.regions) >= {"kernel", "body"} and r.dropped_events == 0, r.warnings
    assert r.n_ctas == n // 1024 and r.clock_ghz and 0.5 < r.clock_ghz < 3.5
    torch.testing.assert_close(out, x + y)

    a = torch.randn(1024, 1024, device="cuda", dtype=torch.float16)
    b = torch.randn(1024, 1024, device="cuda", dtype=torch.float16)
    c = torch.empty(1024, 1024, device="cuda", dtype=torch.float16)

    def mm():
        K.mm_kernel[(8, 8)](
            a,
            b,
            c,
            1024,
            1024,
            1024,
            a.stride(0),
            a.stride(1),
            b.stride(0),
            b.stride(1),
            c.stride(0),
            c.stride(1),
            BM=128,
            BN=128,
            BK=64,
        )

    r = instrument_callable(mm, RegionConfig())
    assert list(r.regions)[:4] == ["kernel", "prologue", "loop0", "epilogue"], r.regions
    assert r.regions["loop0"].fraction > 0.5 and r.dropped_events == 0
    assert 0.9 < r.partition["median_ratio"] <= 1.01
    torch.testing.assert_close(c.float(), (a.float() @ b.float()), atol=0.5, rtol=0.05)


@pytest.mark.gpu
@needs_gpu
def test_gpu_capture_launches_and_instrumented_replay():
    import torch

    sys.path.insert(0, str(DATA))
    import kernels as K

    from kperf_ci.capture.launches.gpu import capture_launches
    from kperf_ci.capture.regions.instrument import instrument_callable, instrumented_launches, profile_buffer

    n = 1 << 20
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.empty_like(x)

    def add():
        K.add_kernel[lambda meta: (triton_cdiv(n, meta["BLOCK"]),)](x, y, out, n, BLOCK=1024)
        return "done"

    result, launches = capture_launches(add)
    assert result == "done" and len(launches) == 1
    li = launches[0]
    assert li.name == "add_kernel" and li.grid == (n // 1024, 1, 1) and li.jit_fn is K.add_kernel
    assert li.n_regs and li.n_regs > 0 and li.num_warps == 4 and li.asm.get("cubin")
    out.zero_()
    li.replay()()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, x + y)

    cfg = RegionConfig()
    instrument_callable(add, cfg)
    with instrumented_launches(cfg):
        _, inst = capture_launches(add, static=False)
    assert inst[0].kernel.metadata.profile_scratch_size > 0 and inst[0].kernel is not li.kernel
    _, again = capture_launches(add, static=False)  # outside: the plain build again
    assert again[0].kernel is li.kernel
    out.zero_()
    with profile_buffer():
        inst[0].replay()()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, x + y)
    # a second session on an already loaded instrumented kernel still names its regions
    r = instrument_callable(add, cfg)
    assert set(r.regions) >= {"kernel", "body"}, r.regions
    # compiling an instrumented build without any Proton session (overhead measurements)
    with instrumented_launches(RegionConfig(granularity="warp", ops=("wait",)), compile=True):
        _, w = capture_launches(add, static=False)
    assert w[0].kernel.metadata.profile_scratch_size > 0
    torch.cuda.synchronize()
    torch.testing.assert_close(out, x + y)


def triton_cdiv(a, b):
    return (a + b - 1) // b
