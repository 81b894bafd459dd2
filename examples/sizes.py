"""Where the examples run, and problem sizes that suit it.

Under TRITON_INTERPRET=1 (CPU, or kperf's static mode) the kernels run in Triton's interpreter,
slowly: tiny problems. On a GPU: problems that fill an H100. The choice is made at import, because
pytest needs concrete parameters at collection; bytes=/flops= on the markers are computed from
those parameters.
"""

import torch
import triton

INTERPRET = triton.knobs.runtime.interpret  # TRITON_INTERPRET, as Triton itself reads it
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ON_GPU = DEVICE == "cuda" and not INTERPRET


def pick(tiny, gpu):
    """`gpu` when kernels run compiled on a GPU, else `tiny` (the interpreter)."""
    return gpu if ON_GPU else tiny
