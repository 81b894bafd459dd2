import pytest
import torch
from kernels.matmul import matmul
from sizes import DEVICE, pick

# (M, N, K): square, and one that is no multiple of the tiles (masked edges, a partial last K
# block). The tiny ragged shape is not even a multiple of 16 (a different specialization); on
# the GPU such a shape would mostly measure unaligned loads, so it stays a multiple of 16 there.
SHAPES = pick(
    tiny=[(128, 128, 64), (100, 72, 40)],
    gpu=[(4096, 4096, 4096), (4000, 6000, 2000)],
)


@pytest.mark.kperf(
    name="matmul",
    tags=["compute-bound", "tensor-core", "autotune"],
    flops=lambda M, N, K: 2 * M * N * K,
    bytes=lambda M, N, K: 2 * (M * K + K * N + M * N),  # fp16 A, B read once, C written once
)
@pytest.mark.parametrize("M, N, K", SHAPES)
def test_matmul(kperf, M, N, K):
    torch.manual_seed(0)
    a = torch.randn(M, K, device=DEVICE, dtype=torch.float16)
    b = torch.randn(K, N, device=DEVICE, dtype=torch.float16)
    c = kperf.bench(matmul, a, b)
    ref = (a.float() @ b.float()).to(torch.float16)
    # fp32 accumulation in a different order, then rounding to fp16 (|c| ~ sqrt(K)).
    torch.testing.assert_close(c, ref, rtol=1e-2, atol=1e-2 * K**0.5 / 8)
