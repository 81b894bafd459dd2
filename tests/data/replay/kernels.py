"""Kernels for tests/test_replay.py: one that writes its input in place, one with atomics.
Loaded with TRITON_INTERPRET=1 so they run on CPU tensors."""

import triton
import triton.language as tl


@triton.jit
def double_inplace(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(x_ptr + offs, x * 2, mask=mask)


@triton.jit
def atomic_sum(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    # one atomic per element into one address (no tl.sum: a jit'd library function, which the
    # interpreter cannot call in a process that imported Triton without TRITON_INTERPRET)
    tl.atomic_add(out_ptr + offs * 0, x, mask=mask)


def run_once(kernel_call, quantiles=None):
    """The autotuner's benchmark without a GPU: each config runs once and all tie."""
    kernel_call()
    return [0.0, 0.0, 0.0] if quantiles else 0.0


@triton.autotune(
    configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})], key=["n"], do_bench=run_once
)
@triton.jit
def tuned_double(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)
