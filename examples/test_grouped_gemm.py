import pytest
import torch
from kernels.grouped_gemm import group_gemm
from sizes import DEVICE, pick

# Groups of problems of different shapes (M, N, K), some not multiples of the tiles. "aligned":
# every row starts 16-byte aligned (vectorized loads); "unaligned": some leading dimension is not
# a multiple of 8 elements, which the wrapper passes on as ALIGNED=False (another variant).
GROUPS = pick(
    tiny={
        "aligned": [(128, 128, 64), (64, 96, 40), (200, 64, 128)],
        "unaligned": [(64, 64, 36), (50, 70, 64)],
    },
    gpu={
        "aligned": [(1024, 1024, 1024), (512, 2048, 1024), (2048, 512, 768), (1000, 1000, 1000)] * 4,
        "unaligned": [(1024, 1024, 1020), (1000, 1004, 998)] * 4,
    },
)


def _flops(group):
    return sum(2 * M * N * K for M, N, K in GROUPS[group])


def _bytes(group):
    return sum(2 * (M * K + K * N + M * N) for M, N, K in GROUPS[group])


@pytest.mark.kperf(
    name="grouped_gemm", tags=["compute-bound", "tensor-core", "persistent"], flops=_flops, bytes=_bytes
)
@pytest.mark.parametrize("group", sorted(GROUPS))
def test_grouped_gemm(kperf, group):
    torch.manual_seed(0)
    shapes = GROUPS[group]
    group_a = [torch.randn(M, K, device=DEVICE, dtype=torch.float16) for M, N, K in shapes]
    group_b = [torch.randn(K, N, device=DEVICE, dtype=torch.float16) for M, N, K in shapes]
    group_c = kperf.bench(group_gemm, group_a, group_b)
    for a, b, c in zip(group_a, group_b, group_c, strict=True):
        ref = (a.float() @ b.float()).to(torch.float16)
        torch.testing.assert_close(c, ref, rtol=1e-2, atol=1e-2 * a.shape[1] ** 0.5 / 8)
