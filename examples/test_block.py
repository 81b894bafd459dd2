import pytest
import torch
from kernels.block import norm_proj_softmax
from sizes import DEVICE, pick

# (rows, width): few rows (decode-like: launch-bound on a GPU) and many rows (prefill-like).
SHAPES = pick(tiny=[(4, 64), (64, 64)], gpu=[(16, 4096), (4096, 4096)])


@pytest.mark.kperf(name="block", tags=["layer", "launch-gaps"], flops=lambda M, N: 2 * M * N * N)
@pytest.mark.parametrize("M, N", SHAPES)
def test_norm_proj_softmax(kperf, M, N):
    torch.manual_seed(0)
    x = torch.randn(M, N, device=DEVICE, dtype=torch.float16)
    ln_w = torch.rand(N, device=DEVICE, dtype=torch.float16)
    ln_b = torch.rand(N, device=DEVICE, dtype=torch.float16)
    w = torch.randn(N, N, device=DEVICE, dtype=torch.float16) / N**0.5
    y = kperf.bench(norm_proj_softmax, x, ln_w, ln_b, w)
    h = torch.nn.functional.layer_norm(x.float(), (N,), ln_w.float(), ln_b.float(), 1e-5)
    ref = torch.softmax(h.half().float() @ w.float(), dim=-1) + x.float()
    torch.testing.assert_close(y.float(), ref, rtol=2e-2, atol=2e-2)
