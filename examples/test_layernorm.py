import pytest
import torch
from kernels.layernorm import layer_norm
from sizes import DEVICE, pick

DTYPES = {"fp32": torch.float32, "fp16": torch.float16}

# (rows, cols, dtype): a power-of-two row in fp16, and a ragged one in fp32.
SHAPES = pick(
    tiny=[(64, 256, "fp16"), (37, 1000, "fp32")],
    gpu=[(8192, 4096, "fp16"), (8192, 1000, "fp32")],
)


def _bytes(M, N, dtype):
    size = DTYPES[dtype].itemsize
    return 2 * M * N * size + 2 * N * size + 2 * M * 4  # x in, y out, weight+bias, mean+rstd


@pytest.mark.kperf(name="layernorm", tags=["memory-bound", "reduction"], bytes=_bytes)
@pytest.mark.parametrize("M, N, dtype", SHAPES)
def test_layernorm(kperf, M, N, dtype):
    torch.manual_seed(0)
    dt = DTYPES[dtype]
    eps = 1e-5
    x = -2.3 + 0.5 * torch.randn(M, N, device=DEVICE, dtype=dt)
    weight = torch.rand(N, device=DEVICE, dtype=dt)
    bias = torch.rand(N, device=DEVICE, dtype=dt)
    y, mean, rstd = kperf.bench(layer_norm, x, weight, bias, eps)

    xf = x.float()
    ref_y = torch.nn.functional.layer_norm(xf, (N,), weight.float(), bias.float(), eps).to(dt)
    ref_mean = xf.mean(dim=-1)
    ref_rstd = torch.rsqrt(xf.var(dim=-1, unbiased=False) + eps)
    tol = {"fp32": dict(rtol=1e-5, atol=1e-5), "fp16": dict(rtol=1e-3, atol=1e-2)}[dtype]
    torch.testing.assert_close(y, ref_y, **tol)
    torch.testing.assert_close(mean, ref_mean, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rstd, ref_rstd, rtol=1e-4, atol=1e-4)
