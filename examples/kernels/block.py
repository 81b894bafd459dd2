"""A model layer's sub-block built from the other examples: ``softmax(layer_norm(x) @ w) + x``.

Four launches in a row (layernorm, the autotuned matmul, softmax, vector_add), as a framework
would issue them. It is the subject of kperf's launch-gap analysis: at decode-like sizes (a few
rows) each kernel runs for microseconds and the GPU mostly waits for the host to launch the next
one, which CUDA graphs or fusion would remove; at prefill sizes the kernels dominate.
"""

import torch

from kernels.layernorm import layer_norm
from kernels.matmul import matmul
from kernels.softmax import softmax
from kernels.vector_add import add


def norm_proj_softmax(
    x: torch.Tensor, ln_weight: torch.Tensor, ln_bias: torch.Tensor, w: torch.Tensor
) -> torch.Tensor:
    """``softmax(layer_norm(x) @ w) + x`` for fp16 ``x`` (M, N) and ``w`` (N, N)."""
    h, _, _ = layer_norm(x, ln_weight, ln_bias)
    return add(softmax(matmul(h, w)), x)
