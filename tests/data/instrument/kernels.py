"""Small kernels for the region-pass tests: loop-free, one K loop, and one with user scopes."""

import triton
import triton.language as tl
import triton.profiler.language as pl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


@triton.jit
def mm_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    sam,
    sak,
    sbk,
    sbn,
    scm,
    scn,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = a_ptr + rm[:, None] * sam + rk[None, :] * sak
    b = b_ptr + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in range(0, K, BK):
        acc += tl.dot(tl.load(a), tl.load(b))
        a += BK * sak
        b += BK * sbk
    c = c_ptr + rm[:, None] * scm + rn[None, :] * scn
    tl.store(c, acc.to(tl.float16))


@triton.jit
def scoped_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """A user scope inside the loop and one around the store: both must survive."""
    pid = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in range(0, n, BLOCK):
        pl.enter_scope("user_load")
        acc += tl.load(x_ptr + i + tl.arange(0, BLOCK))
        pl.exit_scope("user_load")
    with pl.scope("user_store"):
        tl.store(out_ptr + pid * BLOCK + tl.arange(0, BLOCK), acc)


MM_SIG = {
    "a_ptr": "*fp16",
    "b_ptr": "*fp16",
    "c_ptr": "*fp16",
    "M": "i32",
    "N": "i32",
    "K": "i32",
    "sam": "i32",
    "sak": "i32",
    "sbk": "i32",
    "sbn": "i32",
    "scm": "i32",
    "scn": "i32",
    "BM": "constexpr",
    "BN": "constexpr",
    "BK": "constexpr",
}
MM_CONST = {"BM": 128, "BN": 128, "BK": 64}
ADD_SIG = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
ADD_CONST = {"BLOCK": 1024}
SCOPED_SIG = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
SCOPED_CONST = {"BLOCK": 256}
