import pytest
import torch
from kernels.softmax import softmax
from sizes import DEVICE, pick

DTYPES = {"fp32": torch.float32, "fp16": torch.float16}

# (rows, cols, dtype): a power-of-two row, and a ragged one (masked tail of the block).
SHAPES = pick(
    tiny=[(64, 256, "fp32"), (37, 1000, "fp16")],
    gpu=[(8192, 4096, "fp32"), (8192, 1000, "fp16")],
)


@pytest.mark.kperf(
    name="softmax",
    tags=["memory-bound", "reduction"],
    bytes=lambda M, N, dtype: 2 * M * N * DTYPES[dtype].itemsize,  # one read, one write
)
@pytest.mark.parametrize("M, N, dtype", SHAPES)
def test_softmax(kperf, M, N, dtype):
    torch.manual_seed(0)
    x = torch.randn(M, N, device=DEVICE, dtype=DTYPES[dtype])
    y = kperf.bench(softmax, x)
    ref = torch.softmax(x.float(), dim=-1).to(x.dtype)
    tol = {"fp32": dict(rtol=1e-5, atol=1e-6), "fp16": dict(rtol=1e-3, atol=1e-4)}[dtype]
    torch.testing.assert_close(y, ref, **tol)
