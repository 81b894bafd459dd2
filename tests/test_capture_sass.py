"""Static metrics from cubin/PTX (kperf_ci.capture.static.sass)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.catalogue import uncatalogued

from kperf_ci.capture.static import sass
from kperf_ci.capture.static.ptx import classify_ptx, ptx_instructions, ptx_opcode

DATA = Path(__file__).parent / "data" / "capture"
ROOT = Path(__file__).parent.parent

RAW = """\
\t.headerflags\t@"EF_CUDA_TEXMODE_UNIFIED EF_CUDA_64BIT_ADDRESS EF_CUDA_SM90"
\t.elftype\t@"ET_EXEC"


//--------------------- .text.k           --------------------------
\t.section\t.text.k,"ax",@progbits
\t.align\t128
        .global         k
        .type           k,@function
        .size           k,(.L_x_1 - k)
k:
.text.k:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/              @!P0 BRA `(.L_x_0) ;
        /*0020*/                   LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0030*/                   FFMA R4, R4, R5, R6 ;                     /* 0x0000000504047223 */
        /*0040*/                   HGMMA.64x64x16.F32 R24, gdesc[UR12].tnspB, R24 ;
        /*0050*/                   MUFU.EX2 R7, R7 ;
        /*0060*/                   STG.E desc[UR4][R2.64], R4 ;
.L_x_0:
        /*0070*/                   EXIT ;
        /*0080*/                   BRA `(.L_x_0);
        /*0090*/                   NOP;
.L_x_1:
"""


def test_normalize_sass_strips_addresses_headers_comments():
    n = sass.normalize_sass(RAW)
    assert "/*" not in n and ".headerflags" not in n and ".section" not in n
    assert n.splitlines()[0] == "LDC R1, c[0x0][0x28]"
    assert "@!P0 BRA `(.L_x_0)" in n and ".L_x_0:" in n
    # same code at other addresses -> same text
    shifted = RAW.replace("/*00", "/*10")
    assert sass.normalize_sass(shifted) == n


def test_sass_mix_classes():
    n = sass.normalize_sass(RAW)
    mix = sass.sass_mix(n)
    assert mix["global_load"] == 1 and mix["global_store"] == 1
    assert mix["fma_alu"] == 1 and mix["wgmma"] == 1 and mix["sfu"] == 1
    assert mix["branch"] == 3  # BRA, EXIT, BRA (NOP padding is not counted)
    assert mix["other"] == 1  # LDC
    assert sum(mix.values()) == len(sass.sass_instructions(n)) == 9


def test_opcode_and_classify():
    assert sass.sass_opcode("@!P0 LDG.E.128 R4, [R2]") == "LDG"
    assert sass.classify_sass("LDGSTS") == "async_copy"
    assert sass.classify_sass("UTMALDG") == "tma"
    assert sass.classify_sass("HMMA") == "mma"
    assert sass.classify_sass("BAR") == "barrier"
    assert sass.classify_sass("F2FP") == "convert"
    assert sass.classify_sass("WHATEVER") == "other"
    assert classify_ptx("ld.global.v4.b32") == "global_load"
    assert classify_ptx("ld.param.b64") == "other"
    assert classify_ptx("ld.shared.b32") == "shared_load"
    assert classify_ptx("st.global.b32") == "global_store"
    assert classify_ptx("cp.async.cg.shared.global") == "async_copy"
    assert classify_ptx("cp.async.bulk.tensor.2d.shared::cluster.global") == "tma"
    assert classify_ptx("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16") == "wgmma"
    assert classify_ptx("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32") == "mma"
    assert classify_ptx("ex2.approx.f32") == "sfu"
    assert classify_ptx("cvt.rn.f16x2.f32") == "convert"
    assert classify_ptx("bar.sync") == "barrier"
    assert classify_ptx("ret") == "branch"


def test_ptx_instructions_skip_directives_and_labels():
    ptx = """
.visible .entry k(
\t.param .u64 k_param_0
)
{
\t.reg .b32 \t%r<4>;
\t.loc\t1 8 0   // k.py:8:0
$L__func_begin0:
\tld.param.b64 \t%rd1, [k_param_0];
\t// begin inline asm
\t@%p1 ld.global.b32 { %r1 }, [ %rd1 + 0 ];
\t// end inline asm
$L__BB0_1:
\tadd.f32 \t%r2, %r1, %r1;
\tret;
}
\t.section\t.debug_abbrev
\t{
.b8 1
\t}
"""
    insts = ptx_instructions(ptx)
    assert [ptx_opcode(i) for i in insts] == ["ld.param.b64", "ld.global.b32", "add.f32", "ret"]


def test_parse_res_usage_and_ptxas_log():
    text = """
Resource usage:
 Common:
  GLOBAL:0
 Function k:
  REG:255 STACK:312 SHARED:1024 LOCAL:0 CONSTANT[0]:592 TEXTURE:0 SURFACE:0 SAMPLER:0
"""
    assert sass.parse_res_usage(text) == {"REG": 255, "STACK": 312, "SHARED": 1024, "LOCAL": 0}
    log = """ptxas info    : Compiling entry function 'k' for 'sm_90a'
ptxas info    : Function properties for k
    312 bytes stack frame, 320 bytes spill stores, 296 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 24 bytes smem
"""
    assert sass.parse_ptxas_log(log) == {
        "stack_frame": 312,
        "spill_stores": 320,
        "spill_loads": 296,
        "registers": 255,
        "smem": 24,
    }


def test_arch_capability():
    assert sass.arch_capability("sm_90") == 90
    assert sass.arch_capability("sm_90a") == 90
    assert sass.arch_capability("100") == 100
    with pytest.raises(ValueError):
        sass.arch_capability("hopper")


COMPILE = r"""
import json, sys, os
sys.path.insert(0, sys.argv[2])
import triton
from kperf_ci.capture.static import _standins
triton.runtime.driver.set_active(_standins._make_driver())
_standins._capture_ptxas_log()
import kernels
from triton import language as tl
out = sys.argv[1]
S = _standins.StandInTensor
drv = triton.runtime.driver.active
for cc in (80, 90):
    drv.cc = cc
    k = kernels.matmul_kernel.run(S(tl.float16), S(tl.float16), S(tl.float16),
                                  64, 64, 64, 64, 1, 64, 1, 64, 1,
                                  BM=64, BN=64, BK=32, grid=(1,), warmup=True)
    open(os.path.join(out, f"mm{cc}.cubin"), "wb").write(k.asm["cubin"])
    open(os.path.join(out, f"mm{cc}.ptx"), "w").write(k.asm["ptx"])
    md = {f: getattr(k.metadata, f) for f in ("shared", "num_warps", "num_stages")}
    md["kperf_ptxas"] = getattr(k.metadata, "kperf_ptxas", None)
    json.dump(md, open(os.path.join(out, f"mm{cc}.json"), "w"))
"""


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    pytest.importorskip("triton")
    out = tmp_path_factory.mktemp("cubin")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env["TRITON_CACHE_DIR"] = str(out / "cache")
    r = subprocess.run(
        [sys.executable, "-c", COMPILE, str(out), str(DATA)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return out


def _load(d, cc):
    asm = {"cubin": (d / f"mm{cc}.cubin").read_bytes(), "ptx": (d / f"mm{cc}.ptx").read_text()}
    return asm, json.loads((d / f"mm{cc}.json").read_text())


def test_static_metrics_deterministic(compiled):
    asm, md = _load(compiled, 90)
    a = sass.static_metrics(asm, md, "sm_90")
    b = sass.static_metrics(asm, md, "sm_90")
    assert a == b
    assert repr(a[0]).encode() == repr(b[0]).encode()
    metrics, normalized, digest = a
    assert not uncatalogued(metrics)  # unit, kind, direction: the catalogue's
    names = [m.name for m in metrics]
    assert len(names) == len(set(names))
    assert len(digest) == 64 and normalized.count("\n") > 10


def test_ptxas_fallback_matches_captured_report(compiled):
    asm, md = _load(compiled, 90)
    assert md["kperf_ptxas"], "worker should capture ptxas -v during compile"
    with_log = {m.name: m.value for m in sass.static_metrics(asm, md, "sm_90")[0]}
    md2 = dict(md)
    md2.pop("kperf_ptxas")
    fallback = {m.name: m.value for m in sass.static_metrics(asm, md2, "sm_90")[0]}
    assert with_log == fallback


def test_static_metrics_relations(compiled):
    m80 = {m.name: m.value for m in sass.static_metrics(*_load(compiled, 80), "sm_80")[0]}
    m90 = {m.name: m.value for m in sass.static_metrics(*_load(compiled, 90), "sm_90")[0]}
    assert m80["sass.mma"] > 0 and m80["sass.wgmma"] == 0
    assert m90["sass.wgmma"] > 0
    for m in (m80, m90):
        assert m["sass.instructions"] == sum(m[f"sass.{c}"] for c in sass.CLASSES)
        assert m["ptx.instructions"] == sum(m[f"ptx.{c}"] for c in sass.CLASSES)
        assert m["shared_bytes"] > 0 and m["registers"] > 0
