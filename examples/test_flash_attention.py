import pytest
import torch
from kernels.flash_attention import attention
from sizes import DEVICE, pick

# (batch, heads, seq, head_dim)
SHAPES = pick(tiny=[(1, 2, 64, 32), (1, 2, 50, 32)], gpu=[(4, 16, 4096, 64), (4, 16, 4000, 64)])


def _flops(Z, H, N, D, causal):
    return 4 * Z * H * N * N * D * (0.5 if causal else 1.0)  # two matmuls, half of them if causal


@pytest.mark.kperf(
    name="flash_attention",
    tags=["compute-bound", "tensor-core", "reduction"],
    flops=_flops,
    bytes=lambda Z, H, N, D: 4 * Z * H * N * D * 2,  # q, k, v read, o written; fp16
)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("Z, H, N, D", SHAPES)
def test_flash_attention(kperf, Z, H, N, D, causal):
    torch.manual_seed(0)
    q, k, v = (torch.randn(Z, H, N, D, device=DEVICE, dtype=torch.float16) for _ in range(3))
    out = kperf.bench(attention, q, k, v, causal)
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
    torch.testing.assert_close(out, ref.to(torch.float16), rtol=1e-2, atol=1e-2)
