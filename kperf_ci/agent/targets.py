"""What the agent may optimize: a kernel module, its launcher, and how to feed and judge it.

A target names the original module (a file under ``examples/kernels`` or any path), the launcher
function a candidate must provide with the same signature, how to build inputs for a shape, a
dtype, a value distribution and a seed, and which launch keywords the offline proposer may vary.
Inputs are built here from (shape, dtype, distribution, seed) alone, so the harness can make the
same inputs for the original and the candidate without ever storing an output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: value distributions every check cycles through: not only N(0, 1), so a kernel that is right
#: only near zero, only for positive values or only without outliers fails somewhere
DISTRIBUTIONS = ("normal", "uniform_pos", "heavy_tail", "offset", "sparse")

#: relative/absolute tolerance per output dtype (|cand - orig| <= atol + rtol * max(|orig|,
#: mean |orig|)): what another reduction order moves (the reference is the original kernel, not a
#: float64 oracle), and below what computing in the next lower precision moves, so that a
#: downcast is told apart (fp32 1e-4 < the ~5e-4 of fp16 arithmetic < fp16's 2e-3)
TOLERANCE: dict[str, tuple[float, float]] = {
    "float32": (1e-4, 1e-5),
    "float16": (2e-3, 1e-4),
    "bfloat16": (1.6e-2, 1e-3),
}


@dataclass(frozen=True)
class Target:
    """One optimizable kernel: module file, launcher, inputs, search space."""

    name: str
    module: str  # repository-relative path of the original kernel module
    launcher: str  # function the candidate must define with the same signature
    make_inputs: Callable[[Any, tuple[int, ...], Any, str, Any], tuple[Any, ...]]
    cpu_shapes: tuple[tuple[int, ...], ...]
    gpu_shapes: tuple[tuple[int, ...], ...]
    bench_shape: tuple[int, ...]
    dtypes: tuple[str, ...]  # supported input dtypes (torch names)
    gpu_only_dtypes: tuple[str, ...] = ()  # the interpreter has no bfloat16 arithmetic
    knobs: dict[str, tuple[int, ...]] = field(default_factory=dict)  # launch keyword -> values
    default_knobs: dict[str, int] = field(default_factory=dict)

    def path(self, root: str | Path) -> Path:
        return Path(root) / self.module

    def shapes(self, on_gpu: bool) -> Sequence[tuple[int, ...]]:
        return self.gpu_shapes if on_gpu else self.cpu_shapes

    def dtypes_for(self, on_gpu: bool) -> tuple[str, ...]:
        return self.dtypes + (self.gpu_only_dtypes if on_gpu else ())


def values(torch: Any, shape: Sequence[int], dtype: Any, dist: str, gen: Any) -> Any:
    """A tensor of ``shape`` drawn from ``dist`` (see DISTRIBUTIONS), made in fp32 then cast."""
    n = 1
    for s in shape:
        n *= s
    if dist == "normal":
        t = torch.randn(n, generator=gen)
    elif dist == "uniform_pos":
        t = torch.rand(n, generator=gen) * 4.0
    elif dist == "heavy_tail":  # a few large values: catches kernels that lose them in fp16 sums
        t = torch.randn(n, generator=gen) * torch.exp(torch.randn(n, generator=gen) * 1.5)
        t = t.clamp(-3e4, 3e4)
    elif dist == "offset":  # far from zero with a small spread: catches naive variance formulas
        t = 50.0 + torch.randn(n, generator=gen) * 0.5
    elif dist == "sparse":
        t = torch.randn(n, generator=gen) * (torch.rand(n, generator=gen) < 0.1)
    elif dist == "zeros":  # only for the value-dependence timing check, never for correctness
        t = torch.zeros(n)
    else:
        raise ValueError(f"unknown distribution {dist!r}")
    return t.reshape(tuple(shape)).to(dtype)


def _add_inputs(torch: Any, shape: tuple[int, ...], dtype: Any, dist: str, gen: Any) -> tuple[Any, ...]:
    return (values(torch, shape, dtype, dist, gen), values(torch, shape, dtype, dist, gen))


def _softmax_inputs(torch: Any, shape: tuple[int, ...], dtype: Any, dist: str, gen: Any) -> tuple[Any, ...]:
    return (values(torch, shape, dtype, dist, gen),)


def _layernorm_inputs(torch: Any, shape: tuple[int, ...], dtype: Any, dist: str, gen: Any) -> tuple[Any, ...]:
    n = shape[-1]
    x = values(torch, shape, dtype, dist, gen)
    w = values(torch, (n,), dtype, "uniform_pos" if dist == "zeros" else dist, gen)
    b = values(torch, (n,), dtype, dist, gen)
    return (x, w, b)


TARGETS: dict[str, Target] = {
    "vector_add": Target(
        name="vector_add",
        module="examples/kernels/vector_add.py",
        launcher="add",
        make_inputs=_add_inputs,
        cpu_shapes=((1,), (3001,), (4096,), (1000,)),
        gpu_shapes=((1,), (3001,), (1 << 20,), (1_000_003,)),
        bench_shape=(1 << 26,),
        dtypes=("float32", "float16"),
        gpu_only_dtypes=("bfloat16",),
        knobs={"BLOCK_SIZE": (256, 512, 1024, 2048, 4096, 8192), "num_warps": (1, 2, 4, 8, 16)},
        default_knobs={"BLOCK_SIZE": 1024, "num_warps": 4},
    ),
    "softmax": Target(
        name="softmax",
        module="examples/kernels/softmax.py",
        launcher="softmax",
        make_inputs=_softmax_inputs,
        cpu_shapes=((5, 17), (37, 1000), (64, 256)),
        gpu_shapes=((5, 17), (37, 1000), (1024, 4096), (333, 2049)),
        bench_shape=(8192, 4096),
        dtypes=("float32", "float16"),
        gpu_only_dtypes=("bfloat16",),
        knobs={"num_warps": (1, 2, 4, 8, 16, 32)},  # no loop: num_stages changes nothing
        default_knobs={},
    ),
    "layernorm": Target(
        name="layernorm",
        module="examples/kernels/layernorm.py",
        launcher="layer_norm",
        make_inputs=_layernorm_inputs,
        cpu_shapes=((3, 17), (37, 1000), (64, 256)),
        gpu_shapes=((3, 17), (37, 1000), (1024, 4096), (257, 3001)),
        bench_shape=(8192, 4096),
        dtypes=("float16", "float32"),
        gpu_only_dtypes=("bfloat16",),
        knobs={"BLOCK_SIZE": (256, 512, 1024, 2048, 4096, 8192), "num_warps": (1, 2, 4, 8, 16)},
        default_knobs={},
    ),
}


def get_target(name: str) -> Target:
    """The target called ``name``; ValueError naming the known ones otherwise."""
    try:
        return TARGETS[name]
    except KeyError:
        raise ValueError(f"unknown kernel {name!r}; known: {', '.join(sorted(TARGETS))}") from None
