"""Grouped GEMM (after Triton tutorial 08): many independent fp16 matmuls in one persistent launch.

A fixed number of programs (one per SM) walks the tiles of all the problems in turn, so a batch of
small matmuls of different shapes fills the GPU without one launch per problem. The problems are
passed as one device array of addresses, shapes and leading dimensions; the kernel loads a
problem's addresses and casts them to pointers. Tests the scheduling side: the per-tile loop runs a
different number of iterations per program, and its work depends on data read at run time.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def grouped_matmul_kernel(
    # int64 device tensor of shape [group_size, 9], one row per gemm:
    # addresses of A, B, C; sizes M, N, K; leading dimensions lda, ldb, ldc
    group_meta,
    # number of gemms
    group_size,
    # number of virtual SM
    NUM_SM: tl.constexpr,
    # tile sizes
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    # all addresses 16-byte aligned and leading dimensions multiples of 8 elements: 16-byte loads
    ALIGNED: tl.constexpr,
):
    tile_idx = tl.program_id(0)
    last_problem_end = 0
    for g in range(group_size):
        # get the gemm size of the current problem
        meta = group_meta + g * 9
        gm = tl.load(meta + 3).to(tl.int32)
        gn = tl.load(meta + 4).to(tl.int32)
        gk = tl.load(meta + 5).to(tl.int32)
        num_m_tiles = tl.cdiv(gm, BLOCK_SIZE_M)
        num_n_tiles = tl.cdiv(gn, BLOCK_SIZE_N)
        num_tiles = num_m_tiles * num_n_tiles
        # iterate through the tiles in the current gemm problem
        while tile_idx >= last_problem_end and tile_idx < last_problem_end + num_tiles:
            # pick up a tile from the current gemm problem
            a_ptr = tl.load(meta + 0).to(tl.pointer_type(tl.float16))
            b_ptr = tl.load(meta + 1).to(tl.pointer_type(tl.float16))
            c_ptr = tl.load(meta + 2).to(tl.pointer_type(tl.float16))
            lda = tl.load(meta + 6).to(tl.int32)
            ldb = tl.load(meta + 7).to(tl.int32)
            ldc = tl.load(meta + 8).to(tl.int32)
            if ALIGNED:
                a_ptr = tl.multiple_of(a_ptr, 16)
                b_ptr = tl.multiple_of(b_ptr, 16)
                c_ptr = tl.multiple_of(c_ptr, 16)
                lda = tl.multiple_of(lda, 8)
                ldb = tl.multiple_of(ldb, 8)
                ldc = tl.multiple_of(ldc, 8)
            # figure out tile coordinates
            tile_idx_in_gemm = tile_idx - last_problem_end
            tile_m_idx = tile_idx_in_gemm // num_n_tiles
            tile_n_idx = tile_idx_in_gemm % num_n_tiles

            # do regular gemm here
            offs_am = tile_m_idx * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
            offs_bn = tile_n_idx * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
            offs_k = tl.arange(0, BLOCK_SIZE_K)
            a_ptrs = a_ptr + offs_am[:, None] * lda + offs_k[None, :]
            b_ptrs = b_ptr + offs_k[:, None] * ldb + offs_bn[None, :]
            accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
            for kk in range(0, tl.cdiv(gk, BLOCK_SIZE_K)):
                k_left = gk - kk * BLOCK_SIZE_K
                a = tl.load(a_ptrs, mask=(offs_am[:, None] < gm) & (offs_k[None, :] < k_left), other=0.0)
                b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_bn[None, :] < gn), other=0.0)
                accumulator = tl.dot(a, b, accumulator)
                a_ptrs += BLOCK_SIZE_K
                b_ptrs += BLOCK_SIZE_K * ldb
            c = accumulator.to(tl.float16)

            offs_cm = tile_m_idx * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
            offs_cn = tile_n_idx * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
            c_ptrs = c_ptr + ldc * offs_cm[:, None] + offs_cn[None, :]
            tl.store(c_ptrs, c, mask=(offs_cm[:, None] < gm) & (offs_cn[None, :] < gn))

            # go to the next tile by advancing NUM_SM
            tile_idx += NUM_SM

        # get ready to go to the next gemm problem
        last_problem_end = last_problem_end + num_tiles


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4  # Triton's interpreter on the CPU: a few programs, each walking many tiles


def group_gemm(group_a: list[torch.Tensor], group_b: list[torch.Tensor]) -> list[torch.Tensor]:
    """`[a @ b for a, b in zip(group_a, group_b)]` for row-major fp16 matrices, in one launch."""
    assert len(group_a) == len(group_b) and group_a
    device = group_a[0].device
    group_c, rows = [], []
    # 16-byte aligned addresses and leading dimensions let the loads be vectorized (2-3x faster)
    aligned = True
    for a, b in zip(group_a, group_b, strict=True):
        assert a.shape[1] == b.shape[0] and a.dtype == b.dtype == torch.float16
        assert a.device == b.device == device and a.stride(1) == 1 and b.stride(1) == 1
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty((M, N), device=device, dtype=a.dtype)
        group_c.append(c)
        addresses = [a.data_ptr(), b.data_ptr(), c.data_ptr()]
        lds = [a.stride(0), b.stride(0), c.stride(0)]
        rows.append(addresses + [M, N, K] + lds)
        aligned &= all(p % 16 == 0 for p in addresses) and all(ld % 8 == 0 for ld in lds)
    # One host-to-device copy for all the problems' metadata, asynchronous from pinned memory.
    meta = torch.tensor(rows, dtype=torch.int64, pin_memory=device.type == "cuda")
    meta = meta.to(device, non_blocking=True)
    num_sm = _num_sms(device)
    grouped_matmul_kernel[(num_sm,)](
        meta, len(group_a),
        NUM_SM=num_sm, BLOCK_SIZE_M=128, BLOCK_SIZE_N=256, BLOCK_SIZE_K=64, ALIGNED=aligned,
        num_warps=8, num_stages=3,
    )  # fmt: skip
    return group_c
