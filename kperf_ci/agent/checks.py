"""The checks of one candidate, run inside the harness process (see :mod:`kperf_ci.agent.harness`).

Every failure is a :class:`Rejected` with a ``hack`` code naming the reward hack it stops and a
one-line reason. The reference is always the original kernel run here, on the same inputs,
right before the candidate: never a stored output.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from kperf_ci.agent import guards
from kperf_ci.agent.targets import DISTRIBUTIONS, TOLERANCE, Target
from kperf_ci.capture.timing import engine
from kperf_ci.error_text import error_text

# hack codes (stable: tests and the population store use them)
NETWORK = "network"
TIMEOUT = "timeout"
IMPORT = "import_error"
SIGNATURE = "signature"
CRASH = "crash"
TORCH_OPS = "torch_compute"
NO_KERNEL = "no_kernel"
REFERENCE = "calls_reference"
STREAM = "other_stream"
TIMERS = "patched_timers"
LAZY = "lazy_output"
ALIAS = "aliased_output"
INPUTS = "modified_inputs"
NONFINITE = "nan_inf"
DOWNCAST = "downcast"
WRONG = "wrong_result"
CACHE = "cached_result"
VALUE_DEP = "value_dependent_speed"
ROOFLINE = "above_roofline"
TIMING_INPUTS = "wrong_after_timing"
MALFORMED = "malformed"


class Rejected(Exception):
    def __init__(self, hack: str, reason: str):
        super().__init__(reason)
        self.hack = hack
        self.reason = reason


def outputs(x: Any) -> list[Any]:
    return list(x) if isinstance(x, (tuple, list)) else [x]


def make_inputs(
    torch: Any, target: Target, shape: tuple[int, ...], dtype: str, dist: str, seed: int, device: str
) -> tuple[Any, ...]:
    gen = torch.Generator().manual_seed(seed)
    xs = target.make_inputs(torch, tuple(shape), getattr(torch, dtype), dist, gen)
    return tuple(x.to(device) for x in xs)


def clones(xs: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(x.clone() for x in xs)


def sync(torch: Any, on_gpu: bool) -> None:
    if on_gpu:
        torch.cuda.synchronize()


def check_record(cand_file: str, orig_file: str, lazy: str = "") -> None:
    """What the guards saw during the last candidate call (``lazy``: why its result is not a
    plain tensor, checked before "no kernel" because a lazy result launches nothing yet)."""
    rec = guards.RECORD
    if rec.network:
        raise Rejected(NETWORK, f"opened a network connection ({rec.network[0]})")
    if rec.streams:
        raise Rejected(
            STREAM,
            f"used another CUDA stream ({rec.streams[0]}): the caller's stream "
            "would read results that are not ready",
        )
    if lazy:
        raise Rejected(LAZY, lazy)
    if rec.torch_ops:
        ops = ", ".join(sorted(set(rec.torch_ops))[:5])
        raise Rejected(TORCH_OPS, f"computes with torch outside a Triton kernel ({ops})")
    if orig_file in rec.kernels:
        raise Rejected(REFERENCE, "launches the original (reference) kernel")
    if not rec.kernels:
        raise Rejected(NO_KERNEL, "launched no Triton kernel")
    others = [k for k in rec.kernels if k != cand_file]
    if others:
        raise Rejected(REFERENCE, "launches a kernel defined outside the candidate module")


def _lazy(torch: Any, out: Any) -> str:
    for o in outputs(out):
        if type(o) is not torch.Tensor:  # a subclass or proxy can compute on first read
            return f"returned a {type(o).__name__}, not a plain torch.Tensor (a lazy or proxy result)"
    return ""


def check_outputs(
    torch: Any, out: Any, ref: Any, inputs: Sequence[Any], before: Sequence[Any], what: str
) -> float:
    """Types, aliasing, inputs, finiteness, dtype and closeness; returns the worst error/tolerance."""
    outs, refs = outputs(out), outputs(ref)
    if len(outs) != len(refs):
        raise Rejected(WRONG, f"{what}: returned {len(outs)} outputs, the original {len(refs)}")
    if _lazy(torch, out):
        raise Rejected(LAZY, f"{what}: {_lazy(torch, out)}")
    spans = [_span(x) for x in inputs]
    for o in outs:
        s = _span(o)
        if any(s[0] < e and b < s[1] for b, e in spans):
            raise Rejected(ALIAS, f"{what}: an output shares memory with an input")
    for x, b in zip(inputs, before, strict=False):
        if not torch.equal(x, b):
            raise Rejected(INPUTS, f"{what}: modified its inputs")
    worst = 0.0
    for o, r in zip(outs, refs, strict=False):
        if o.shape != r.shape:
            raise Rejected(WRONG, f"{what}: output shape {tuple(o.shape)}, original {tuple(r.shape)}")
        if o.dtype != r.dtype:
            kind = DOWNCAST if o.dtype.itemsize < r.dtype.itemsize else WRONG
            raise Rejected(kind, f"{what}: output dtype {o.dtype}, original {r.dtype}")
        if not bool(torch.isfinite(o).all()) and bool(torch.isfinite(r).all()):
            raise Rejected(NONFINITE, f"{what}: NaN or Inf in the output (the original has none)")
        err = _err_ratio(torch, o, r, TOLERANCE[str(r.dtype).replace("torch.", "")])
        if err > 1.0:
            lower = [d for d in ("float16", "bfloat16") if TOLERANCE[d][0] > TOLERANCE[str(r.dtype)[6:]][0]]
            if any(_err_ratio(torch, o, r, TOLERANCE[d]) <= 1.0 for d in lower):
                raise Rejected(
                    DOWNCAST,
                    f"{what}: error {err:.3g}x the {r.dtype} tolerance but within "
                    "a lower precision's: computed in lower precision",
                )
            raise Rejected(WRONG, f"{what}: differs from the original by {err:.3g}x the tolerance")
        worst = max(worst, err)
    return worst


def _span(t: Any) -> tuple[int, int]:
    st = t.untyped_storage()
    return st.data_ptr(), st.data_ptr() + max(st.nbytes(), 1)


def _err_ratio(torch: Any, o: Any, r: Any, tol: tuple[float, float]) -> float:
    rtol, atol = tol
    o64, r64 = o.double(), r.double()
    fin = torch.isfinite(r64)
    if not bool(fin.any()):
        return 0.0
    mag = r64.abs()[fin]
    # elements near zero are judged against the output's typical magnitude: a reordered sum
    # (another block size) moves y = (x - mean) * rstd * w + b by rtol of |x_hat * w|, not of |y|
    err = (o64 - r64).abs()[fin] / (atol + rtol * torch.clamp(mag, min=float(mag.mean())))
    return float(err.max()) if err.numel() else 0.0


def guarded(torch: Any, fn: Callable[..., Any], args: Sequence[Any], on_gpu: bool) -> Any:
    with guards.guarded_call(torch):
        out = fn(*args)
    sync(torch, on_gpu)
    return out


def run_case(
    torch: Any,
    ref_fn: Callable[..., Any],
    cand_fn: Callable[..., Any],
    inputs: Sequence[Any],
    on_gpu: bool,
    files: tuple[str, str],
    what: str,
) -> tuple[Any, float]:
    """The original then the candidate on the same inputs; outputs poisoned, everything checked."""
    ref = guarded(torch, ref_fn, clones(inputs), on_gpu)
    before = clones(inputs)
    try:
        out = guarded(torch, cand_fn, inputs, on_gpu)
    except Exception as e:  # noqa: BLE001 - the candidate's failure is a verdict, not ours
        check_record(*files)  # a blocked cheat raises before the candidate's own error counts
        raise Rejected(CRASH, f"{what}: raised {error_text(e)}") from None
    check_record(*files, lazy=_lazy(torch, out))
    return out, check_outputs(torch, out, ref, inputs, before, what)


def correctness(
    torch: Any,
    target: Target,
    ref_fn: Callable[..., Any],
    cand_fn: Callable[..., Any],
    seeds: Sequence[int],
    on_gpu: bool,
    files: tuple[str, str],
    timers: Callable[[], list[str]],
) -> dict[str, Any]:
    """Every shape x dtype, a distribution per case, every seed; then the cache check."""
    device = "cuda" if on_gpu else "cpu"
    shapes, dtypes = target.shapes(on_gpu), target.dtypes_for(on_gpu)
    _cache_check(torch, target, ref_fn, cand_fn, seeds, on_gpu, files, device)  # first: a cache
    # keyed by pointer would otherwise show up as a plain wrong result on a reused buffer
    worst, cases, i = 0.0, 0, 0
    for seed in seeds:
        for shape in shapes:
            for dtype in dtypes:
                dist = DISTRIBUTIONS[i % len(DISTRIBUTIONS)]
                i += 1
                xs = make_inputs(torch, target, shape, dtype, dist, seed * 7919 + i, device)
                what = f"{target.name}{list(shape)} {dtype} {dist} seed {seed}"
                _, err = run_case(torch, ref_fn, cand_fn, xs, on_gpu, files, what)
                worst, cases = max(worst, err), cases + 1
                if timers():
                    raise Rejected(TIMERS, f"replaced timing functions: {', '.join(timers())}")
    return {
        "cases": cases,
        "shapes": [list(s) for s in shapes],
        "dtypes": list(dtypes),
        "distributions": list(DISTRIBUTIONS),
        "seeds": list(seeds),
        "worst_error_over_tol": worst,
        "tolerances": {d: {"rtol": TOLERANCE[d][0], "atol": TOLERANCE[d][1]} for d in dtypes},
    }


def _cache_check(
    torch: Any,
    target: Target,
    ref_fn: Callable[..., Any],
    cand_fn: Callable[..., Any],
    seeds: Sequence[int],
    on_gpu: bool,
    files: tuple[str, str],
    device: str,
) -> None:
    """Same tensors (same address, shape, dtype), new values: a result cached by pointer, shape or
    id comes back stale; a returned buffer reused across calls aliases the first result."""
    shape, dtype = target.shapes(on_gpu)[-1], target.dtypes_for(on_gpu)[0]
    xs = make_inputs(torch, target, shape, dtype, "normal", seeds[0] + 101, device)
    first, _ = run_case(torch, ref_fn, cand_fn, xs, on_gpu, files, "cache check, first call")
    new = make_inputs(torch, target, shape, dtype, "uniform_pos", seeds[0] + 202, device)
    for x, n in zip(xs, new, strict=False):
        x.copy_(n)
    try:
        second, _ = run_case(torch, ref_fn, cand_fn, xs, on_gpu, files, "cache check, same buffers")
    except Rejected as e:
        if e.hack in (WRONG, NONFINITE, NO_KERNEL):
            raise Rejected(
                CACHE,
                "returned a stale result (or launched nothing) when the same input buffers got new values "
                "(results cached across calls)",
            ) from None
        raise
    firsts = [_span(o) for o in outputs(first)]
    for o in outputs(second):
        s = _span(o)
        if any(s[0] < e and b < s[1] for b, e in firsts):
            raise Rejected(ALIAS, "returned the same output buffer on two calls (aliased across calls)")


def _time_ms(torch: Any, fns: dict[str, Callable[[], Any]], on_gpu: bool) -> dict[str, float]:
    """Milliseconds per callable: the project's timing (CUDA events) on a GPU; on the CPU the
    fastest of several interleaved host-clock runs (the interpreter shares the CPU with others)."""
    if on_gpu:
        cfg = engine.TimingConfig(budget_s=0.3, min_time_s=0.05, warmup_budget_s=0.3, warmup_min_s=0.05)
        return {k: r.median for k, r in engine.time_interleaved(fns, cfg).items()}
    ts: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(7):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            ts[k].append(time.perf_counter() - t0)
    return {k: min(v) * 1e3 for k, v in ts.items()}


def value_dependence(
    torch: Any,
    target: Target,
    ref_fn: Callable[..., Any],
    cand_fn: Callable[..., Any],
    on_gpu: bool,
    tol: float,
) -> dict[str, float]:
    """Time both kernels on zeros and on random data: a candidate whose zeros/random ratio differs
    from the original's by more than ``tol`` has a speed that depends on the values, and a
    benchmark on any one distribution says nothing about the others."""
    device = "cuda" if on_gpu else "cpu"
    shape = target.bench_shape if on_gpu else target.shapes(False)[-1]
    dtype = target.dtypes[0]
    rnd = make_inputs(torch, target, shape, dtype, "normal", 424242, device)
    zer = make_inputs(torch, target, shape, dtype, "zeros", 0, device)
    fns = {
        "ref_random": lambda: ref_fn(*rnd),
        "ref_zeros": lambda: ref_fn(*zer),
        "cand_random": lambda: cand_fn(*rnd),
        "cand_zeros": lambda: cand_fn(*zer),
    }
    # the majority of up to three measurements (in rotated order) decides: one stall of a shared
    # machine can neither reject a good candidate nor let a value-dependent one through
    votes: list[bool] = []
    for attempt in range(3):
        names = list(fns)
        names = names[attempt:] + names[:attempt]
        t = _time_ms(torch, {k: fns[k] for k in names}, on_gpu)
        r_ref = t["ref_zeros"] / t["ref_random"]
        r_cand = t["cand_zeros"] / t["cand_random"]
        votes.append(abs(math.log(r_cand / r_ref)) > math.log1p(tol))
        if votes.count(False) >= 2:
            return t
        if votes.count(True) >= 2:
            break
    raise Rejected(
        VALUE_DEP,
        f"zeros/random time ratio {r_cand:.2f} vs the original's {r_ref:.2f} "
        f"({votes.count(True)} of {len(votes)} measurements): its speed depends on the input values",
    )
