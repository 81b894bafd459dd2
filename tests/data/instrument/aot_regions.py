"""Run in a subprocess without TRITON_INTERPRET: AOT-compile the test kernels for sm_90 plain
and with automatic regions; print one JSON object with what the tests check."""

import json
import os
import re
import sys
import tempfile

os.environ.pop("TRITON_INTERPRET", None)
os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="kperf_test_cache_"))
sys.path.insert(0, os.path.dirname(__file__))

import kernels as K  # noqa: E402

from kperf_ci.capture.regions.hook import aot_compile  # noqa: E402
from kperf_ci.capture.regions.ttgir_pass import RegionConfig, regions_in_ttgir  # noqa: E402


def describe(ck):
    ttgir = ck.asm["ttgir"]
    ptx = ck.asm["ptx"]
    records = [line.strip().split(" loc(")[0] for line in ttgir.splitlines() if "proton.record" in line]
    return {
        "records": records,
        "regions": regions_in_ttgir(ttgir),
        "ptx_regs": sorted(set(re.findall(r"%(globaltimer|clock64|clock|smid)\b", ptx))),
        "shared": ck.metadata.shared,
        "profile_scratch_size": ck.metadata.profile_scratch_size,
        "cubin_bytes": len(ck.asm["cubin"]),
        "mode": ck.metadata.instrumentation_mode,
    }


out = {}
cfg = RegionConfig()
out["mm_plain"] = describe(aot_compile(K.mm_kernel, K.MM_SIG, K.MM_CONST))
out["mm"] = describe(aot_compile(K.mm_kernel, K.MM_SIG, K.MM_CONST, cfg))
out["add_plain"] = describe(aot_compile(K.add_kernel, K.ADD_SIG, K.ADD_CONST))
out["add"] = describe(aot_compile(K.add_kernel, K.ADD_SIG, K.ADD_CONST, cfg))
out["mm_iter_ops"] = describe(
    aot_compile(K.mm_kernel, K.MM_SIG, K.MM_CONST, RegionConfig(per_iteration=True, ops=("dot", "wait")))
)
out["mm_warp"] = describe(aot_compile(K.mm_kernel, K.MM_SIG, K.MM_CONST, RegionConfig(granularity="warp")))
out["scoped"] = describe(aot_compile(K.scoped_kernel, K.SCOPED_SIG, K.SCOPED_CONST, cfg))
# the plain build after instrumented ones must still be plain (cache keys kept apart)
out["mm_plain_again"] = describe(aot_compile(K.mm_kernel, K.MM_SIG, K.MM_CONST))
print("KPERF_JSON " + json.dumps(out))
