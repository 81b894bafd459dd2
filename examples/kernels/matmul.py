"""Autotuned fp16 matrix multiplication (after Triton tutorial 03): C = A @ B.

fp16 inputs, fp32 accumulation, fp16 output. Blocks of C are visited in grouped order
(GROUP_SIZE_M block-rows at a time) so that neighbouring programs reuse the same A and B tiles
from L2. Compute-bound on tensor cores; `@triton.autotune` picks the tile shape per (M, N, K).

Planted regressions (for testing kperf's compare; the default build is unaffected): the
environment variable KPERF_EXAMPLE_PLANT, read once at import, sets the module-level constexprs
below. The planted kernels keep the same signature, constexprs and launch options, so each
compiled variant keeps its identity and only its code changes. See examples/regressions/.

- "spills": each K block is split in two halves accumulated into two accumulators; on sm_90 the
  bigger tiles then need more than 255 registers per thread and spill to local memory.
- "smem": the K loop is software-pipelined so deep (`tl.range(num_stages=...)`) that its shared
  memory buffers exceed PLANT_SMEM_BYTES, above the sm_90 limit of 232448 bytes per block.
"""

import os

import torch
import triton
import triton.language as tl

PLANT = os.environ.get("KPERF_EXAMPLE_PLANT", "")
_PLANTS = ("", "spills", "smem")
if PLANT not in _PLANTS:
    raise ValueError(f"KPERF_EXAMPLE_PLANT must be one of {_PLANTS[1:]} or unset, got {PLANT!r}")
PLANT_SPLIT_ACC = tl.constexpr(PLANT == "spills")
PLANT_SMEM_BYTES = tl.constexpr(256 * 1024 if PLANT == "smem" else 0)


def get_autotune_config() -> list[triton.Config]:
    """Tile shapes that do well for fp16 on sm_80/sm_90 (the tutorial's list, trimmed)."""
    return [
        triton.Config({"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8},
                      num_stages=3, num_warps=8),
        triton.Config({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8},
                      num_stages=4, num_warps=4),
        triton.Config({"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8},
                      num_stages=4, num_warps=4),
        triton.Config({"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8},
                      num_stages=4, num_warps=4),
        triton.Config({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8},
                      num_stages=4, num_warps=4),
        triton.Config({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8},
                      num_stages=3, num_warps=4),
    ]  # fmt: skip


def _run_once(kernel_call, quantiles=None):
    """Autotune 'benchmark' under TRITON_INTERPRET=1, where there is no GPU driver to time with:
    run each config once (so each is exercised) and call them all equal (the first one wins)."""
    kernel_call()
    return [0.0, 0.0, 0.0] if quantiles else 0.0


@triton.autotune(
    configs=get_autotune_config(),
    key=["M", "N", "K"],
    do_bench=_run_once if triton.knobs.runtime.interpret else None,
)
@triton.jit
def matmul_kernel(
    # Pointers to matrices
    a_ptr, b_ptr, c_ptr,
    # Matrix dimensions
    M, N, K,
    # The stride variables represent how much to increase the ptr by when moving by 1
    # element in a particular dimension.
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_cm, stride_cn,
    # Meta-parameters
    BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr,
):  # fmt: skip
    """Kernel for computing the matmul C = A x B.
    A has shape (M, K), B has shape (K, N) and C has shape (M, N)
    """
    # -----------------------------------------------------------
    # Map program ids `pid` to the block of C it should compute.
    # This is done in a grouped ordering to promote L2 data reuse.
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    # ----------------------------------------------------------
    # Create pointers for the first blocks of A and B.
    # Rows of A and columns of B past the edge wrap around (% M, % N): they are computed but
    # never stored, and the loads need no mask.
    offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)

    # -----------------------------------------------------------
    # Iterate to compute a block of the C matrix, accumulating in fp32.
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    if PLANT_SPLIT_ACC:
        # Planted regression "spills": each K block is loaded as two halves, and each half is
        # accumulated into its own accumulator: the same loads and shared memory as below, twice
        # the accumulator registers.
        HALF_K: tl.constexpr = BLOCK_SIZE_K // 2
        offs_kh = tl.arange(0, HALF_K)
        a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_kh[None, :] * stride_ak)
        b_ptrs = b_ptr + (offs_kh[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
        acc2 = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
            k_left = K - k * BLOCK_SIZE_K
            a = tl.load(a_ptrs, mask=offs_kh[None, :] < k_left, other=0.0)
            b = tl.load(b_ptrs, mask=offs_kh[:, None] < k_left, other=0.0)
            a2 = tl.load(a_ptrs + HALF_K * stride_ak, mask=offs_kh[None, :] < k_left - HALF_K, other=0.0)
            b2 = tl.load(b_ptrs + HALF_K * stride_bk, mask=offs_kh[:, None] < k_left - HALF_K, other=0.0)
            accumulator = tl.dot(a, b, accumulator)
            acc2 = tl.dot(a2, b2, acc2)
            a_ptrs += BLOCK_SIZE_K * stride_ak
            b_ptrs += BLOCK_SIZE_K * stride_bk
        accumulator += acc2
    else:
        # Planted regression "smem": a pipeline deep enough to overflow shared memory
        # (None: the kernel's num_stages, as in the default build).
        STAGE_BYTES: tl.constexpr = (BLOCK_SIZE_M + BLOCK_SIZE_N) * BLOCK_SIZE_K * 2  # fp16 A and B tiles
        LOOP_STAGES: tl.constexpr = PLANT_SMEM_BYTES // STAGE_BYTES + 1 if PLANT_SMEM_BYTES else None
        for k in tl.range(0, tl.cdiv(K, BLOCK_SIZE_K), num_stages=LOOP_STAGES):
            # Load the next block of A and B, generate a mask by checking the K dimension.
            # If it is out of bounds, set it to 0.
            a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
            # We accumulate along the K dimension.
            accumulator = tl.dot(a, b, accumulator)
            # Advance the ptrs to the next K block.
            a_ptrs += BLOCK_SIZE_K * stride_ak
            b_ptrs += BLOCK_SIZE_K * stride_bk
    c = accumulator.to(tl.float16)

    # -----------------------------------------------------------
    # Write back the block of the output matrix C with masks.
    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, c, mask=c_mask)


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`a @ b` for fp16 matrices of shapes (M, K) and (K, N); returns fp16 (M, N)."""
    assert a.ndim == 2 and b.ndim == 2, "2-D inputs only"
    assert a.shape[1] == b.shape[0], "Incompatible dimensions"
    assert a.dtype == torch.float16 and b.dtype == torch.float16, "fp16 inputs only"
    assert a.device == b.device
    M, K = a.shape
    K, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    # 1D launch kernel where each block gets its own program.
    grid = lambda META: (triton.cdiv(M, META["BLOCK_SIZE_M"]) * triton.cdiv(N, META["BLOCK_SIZE_N"]),)
    matmul_kernel[grid](
        a, b, c,
        M, N, K,
        a.stride(0), a.stride(1),
        b.stride(0), b.stride(1),
        c.stride(0), c.stride(1),
    )  # fmt: skip
    return c
