"""Purpose-built kernels whose intra-kernel behaviour is known in advance, one pair per analysis
(a case that must be flagged and a control that must not):

- wave tail:   ``wave_matmul`` with 133 output tiles on a 132-SM H100 vs 132 tiles. Tiles of
               128x256x64 with 4 stages use ~192 KB of shared memory: one CTA per SM.
- imbalance:   ``work_kernel`` where every 16th CTA runs 8x the main-loop iterations vs all equal.
- prologue:    ``work_kernel`` with as many setup iterations before the main loop as in it vs none.
- overlap:     ``pipelined_matmul`` (Gluon, Hopper TMA + wgmma) with NUM_STAGES=1 (each tile
               loaded then consumed: every wait exposed) vs NUM_STAGES=3 (loads 2 tiles ahead),
               at two problem sizes; NUM_STAGES=2 is measured without an expectation.
- launch gaps: 64 launches of ``tiny_add`` vs one ``fused_add`` doing the same work.

``TAG`` (an unused constexpr) gives each profiled case its own compiled kernel: Proton learns a
kernel's scope names when the kernel is loaded inside a session, so a binary loaded in an
earlier session would report its regions as ``scope_<n>``.

Regions are written with Proton's DSL (``triton.profiler.language``), outside loops for the
Triton kernels (as Proton advises) and inside the loop only for the Gluon kernel. Nothing here
runs at import time; ``run.py`` launches them.
"""

from __future__ import annotations

import triton
import triton.language as tl
import triton.profiler.language as pl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

# --------------------------------------------------------------------------------------------
# wave tail: a plain Triton matmul, one output tile per CTA


@triton.jit
def wave_matmul(
    a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, TAG: tl.constexpr = 0
):
    pl.enter_scope("kernel")
    pid = tl.program_id(0)
    n_tiles_n = tl.cdiv(N, BN)
    pid_m = pid // n_tiles_n
    pid_n = pid % n_tiles_n
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = a_ptr + rm[:, None] * K + rk[None, :]
    b = b_ptr + rk[:, None] * N + rn[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in range(0, K, BK):
        acc += tl.dot(tl.load(a), tl.load(b))
        a += BK
        b += BK * N
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.float16))
    pl.exit_scope("kernel")


# --------------------------------------------------------------------------------------------
# imbalance and prologue: a latency-bound FMA chain, iterations per CTA from a tensor


@triton.jit
def work_kernel(out_ptr, pro_iters_ptr, main_iters_ptr, BLOCK: tl.constexpr, TAG: tl.constexpr = 0):
    pl.enter_scope("kernel")
    pl.enter_scope("prologue")
    pid = tl.program_id(0)
    n_pro = tl.load(pro_iters_ptr + pid)
    n_main = tl.load(main_iters_ptr + pid)
    x = tl.arange(0, BLOCK).to(tl.float32) * 1e-3 + pid
    for _ in range(n_pro):  # "setup" work before the main loop
        x = x * 0.999 + 0.001
    pl.exit_scope("prologue")
    pl.enter_scope("loop0")
    for _ in range(n_main):
        x = x * 1.0001 - 0.0001
    pl.exit_scope("loop0")
    pl.enter_scope("epilogue")
    tl.store(out_ptr + pid * BLOCK + tl.arange(0, BLOCK), x)
    pl.exit_scope("epilogue")
    pl.exit_scope("kernel")


# --------------------------------------------------------------------------------------------
# overlap: a Gluon matmul with an explicit NUM_STAGES-deep TMA pipeline


@gluon.constexpr_function
def _wgmma_layout(BM, BN, num_warps):
    # instr_shape [16, n, 16] for fp16; warps along M first
    wm = min(num_warps, BM // 16)
    wn = num_warps // wm
    n = 256
    while n > BN // wn or (BN // wn) % n != 0:
        n -= 8
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[wm, wn], instr_shape=[16, n, 16])


@gluon.jit
def pipelined_matmul(
    a_desc, b_desc, c_desc, K, NUM_STAGES: gl.constexpr, num_warps: gl.constexpr, TAG: gl.constexpr = 0
):
    BM: gl.constexpr = c_desc.block_type.shape[0]
    BN: gl.constexpr = c_desc.block_type.shape[1]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    dtype: gl.constexpr = a_desc.dtype
    pl.enter_scope("kernel")
    off_m = gl.program_id(0) * BM
    off_n = gl.program_id(1) * BN
    a_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BM, BK], a_desc.layout)
    b_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BK, BN], b_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(bars.index(i), count=1)
    nbytes: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes
    num_k = gl.cdiv(K, BK)
    for i in gl.static_range(NUM_STAGES - 1):  # prefetch the first NUM_STAGES-1 tiles
        mbarrier.expect(bars.index(i), nbytes)
        tma.async_copy_global_to_shared(a_desc, [off_m, i * BK], bars.index(i), a_smem.index(i))
        tma.async_copy_global_to_shared(b_desc, [i * BK, off_n], bars.index(i), b_smem.index(i))
    acc = gl.zeros((BM, BN), dtype=gl.float32, layout=_wgmma_layout(BM, BN, num_warps))
    pl.enter_scope("loop0")
    for k in range(num_k):
        nk = k + NUM_STAGES - 1  # the tile to load now: its slot was consumed in iteration k-1
        if nk < num_k:
            ns = nk % NUM_STAGES
            mbarrier.expect(bars.index(ns), nbytes)
            tma.async_copy_global_to_shared(a_desc, [off_m, nk * BK], bars.index(ns), a_smem.index(ns))
            tma.async_copy_global_to_shared(b_desc, [nk * BK, off_n], bars.index(ns), b_smem.index(ns))
        s = k % NUM_STAGES
        with pl.scope("tma_wait"):
            mbarrier.wait(bars.index(s), phase=(k // NUM_STAGES) & 1)
        with pl.scope("mma"):
            acc = warpgroup_mma(a_smem.index(s), b_smem.index(s), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    pl.exit_scope("loop0")
    for i in gl.static_range(NUM_STAGES):
        mbarrier.invalidate(bars.index(i))
    c_smem = gl.allocate_shared_memory(dtype, [BM, BN], c_desc.layout)
    c_smem.store(acc.to(dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(c_desc, [off_m, off_n], c_smem)
    tma.store_wait(pendings=0)
    pl.exit_scope("kernel")


# --------------------------------------------------------------------------------------------
# launch gaps: many tiny launches vs one fused launch (no instrumentation)


@triton.jit
def tiny_add(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=m) + 1.0, mask=m)


@triton.jit
def fused_add(x_ptr, n, REPS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    for _ in tl.static_range(REPS):
        x = x + 1.0
    tl.store(x_ptr + offs, x, mask=m)
