import pytest
import torch
from kernels.vector_add import add
from sizes import DEVICE, pick

# A multiple of the block size, and a ragged length that exercises the mask (and specializes
# n_elements differently: not divisible by 16).
SIZES = pick(tiny=[4096, 3001], gpu=[2**26, 2**26 - 3])


@pytest.mark.kperf(
    name="vector_add",
    tags=["memory-bound", "elementwise"],
    bytes=lambda n: 3 * 4 * n,  # read x and y, write out; fp32
    flops=lambda n: n,
)
@pytest.mark.parametrize("n", SIZES)
def test_vector_add(kperf, n):
    torch.manual_seed(0)
    x = torch.rand(n, device=DEVICE, dtype=torch.float32)
    y = torch.rand(n, device=DEVICE, dtype=torch.float32)
    out = kperf.bench(add, x, y)
    torch.testing.assert_close(out, x + y, rtol=0, atol=0)
