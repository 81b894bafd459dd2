"""Automatic intra-kernel regions for unmodified Triton kernels, through Proton.

The pass. A stages-inspection hook (``triton.knobs.runtime.add_stages_inspection_hook``) wraps
``stages["ttgir"]``: the wrapper takes the module the original stage returns (the program after
pipelining, as it will run), edits its text to insert ``proton.record start/end "NAME"`` lines,
and parses it back (``ir.parse_mlir_module`` on a temporary file, in the module's context).
Proton's own lowering then turns the records into clock/globaltimer/smid reads. Regions:

- ``kernel``: function entry to just before ``tt.return``;
- ``prologue``: entry to the first top-level ``scf.for``; ``loop0``, ``loop1``, ...: each
  top-level ``scf.for``; ``epilogue``: after the last top-level loop to ``tt.return``;
- ``body`` instead of prologue/epilogue in a kernel without a top-level loop (its one pair of
  records also serves as ``kernel``, which would span exactly the same code);
- optional (``RegionConfig``): ``loopN.iter`` around each iteration's body, and ``dot<i>``,
  ``copy<i>``, ``wait<i>`` around single tensor-core, async-copy and wait operations.

Every start has its end in the same block (Proton rejects crossing scopes). Scopes the user
wrote with ``triton.profiler.language`` stay; an automatic region that would cross one, or whose
name the user already uses, is left out and named in the warnings.

Cache keys. Triton's compile cache does not hash the hook. The pass edits only builds whose
``instrumentation_mode`` option carries ``:kperf_regions=<config key>``: plain builds (empty
mode) are never touched, and each region configuration has its own key in Triton's in-memory
and on-disk caches. Each configuration also compiles into its own cache directory.

Running. :func:`instrument_callable` runs the callable ONCE under
``proton.start(backend="instrumentation", data="trace")`` and parses the Chrome trace into a
:class:`RegionResult`. Never put it in a timing loop: each instrumented launch pays Proton's
host post-processing. :func:`instrumented_launches` launches the already compiled instrumented
kernels *without* a Proton session (a fixed profile buffer, no per-launch post-processing): that
is how their device time is measured next to the plain kernels (benchmarks/instrumentation_overhead.py).

Granularity. Proton 3.6 lowers only its warp granularity. ``RegionConfig.granularity="cta"``
(the default) has warp 0 of each CTA record (Proton's selective sampling): on an H100 that
cost +0.7..+2% on four of the five examples, against +7..+25% on short-CTA memory-bound kernels
when every warp records (``"warp"``; ``"warp_group"`` also records in every warp and merges
groups of 4 afterwards). See benchmarks/results/instrumentation_overhead.md.

Buffer. Default: warp 0's records go straight to a 512-byte per-CTA buffer in global memory
(``RegionConfig.buffer_type`` / ``effective_buffer_size``): with Proton's default 8 KB shared
buffer the layernorm example cost +16%, with the global one +8%.

Clock. Cycles are exact; ns/ms need the SM clock during the kernel. Proton 3.6's Chrome trace
cannot give it: it subtracts each CTA's first cycle and carries no per-CTA end time. So the
profile buffer of each launch is kept through the session (``_keep_profile_buffers``) and read
directly (:func:`read_raw_trace`): every record's absolute SM cycle plus each CTA's globaltimer
init / pre-final / post-final stamps. :func:`proton_trace.fit_clock` regresses, per SM, the
first-record cycle of each CTA on its init stamp (one slope, one intercept per SM): that slope
is the clock during this launch (``clock_source="trace"``). Without a raw buffer (or an SM
with two CTAs) the clock falls back to NVML after the launch, flagged in the warnings.

:func:`aot_compile` applies the same pass and Proton's lowering in an ahead-of-time compile
(no GPU needed: CPU CI checks the pass there).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..hardware import MAX_SHARED_PER_BLOCK
from ..model import Metric, canonical_json
from . import proton_trace
from .proton_trace import KernelTrace

TAG = "kperf_regions"
_TAG_RE = re.compile(r":" + TAG + r"=([0-9a-f]+)")


OP_CLASSES: dict[str, tuple[str, ...]] = {
    "dot": ("tt.dot", "tt.dot_scaled", "ttng.warp_group_dot", "ttng.tc_gen5_mma", "ttng.tc_gen5_mma_scaled"),
    "copy": (
        "ttg.async_copy_global_to_local",
        "ttng.async_tma_copy_global_to_local",
        "ttng.async_tma_gather",
        "ttng.async_tma_copy_local_to_global",
    ),
    "wait": ("ttg.async_wait", "ttng.warp_group_dot_wait", "ttng.wait_barrier", "ttng.async_tma_store_wait"),
}
GRANULARITIES = ("cta", "warp", "warp_group")
WARPS_PER_GROUP = 4
PHASE_REGIONS = re.compile(r"^(prologue|epilogue|body|loop\d+)$")


# --------------------------------------------------------------------------------------------
# configuration


@dataclass(frozen=True)
class RegionConfig:
    """Which regions to insert and how Proton records them."""

    kernel: bool = True
    phases: bool = True  # prologue / loopN / epilogue, or body
    per_iteration: bool = False  # loopN.iter inside each top-level loop
    ops: tuple[str, ...] = ()  # any of "dot", "copy", "wait"
    granularity: str = "cta"  # "cta" (warp 0 records), "warp" or "warp_group" (all warps record)
    # "global" (default) or "shared". Records go straight to global memory: on an H100 the
    # shared-memory buffer cost the layernorm example +15..17% against +7.8..8.2% (see
    # effective_buffer_size and benchmarks/results/instrumentation_overhead.md)
    buffer_type: str = "global"
    buffer_strategy: str = "circular"
    buffer_size: int | None = None  # bytes per CTA; 0: Proton's default; None: auto (below)
    optimizations: str = ""  # Proton's, e.g. "clock32,time_shift"

    def __post_init__(self):
        unknown = set(self.ops) - set(OP_CLASSES)
        if unknown:
            raise ValueError(f"unknown op classes {sorted(unknown)}; choose from {sorted(OP_CLASSES)}")
        if self.granularity not in GRANULARITIES:
            raise ValueError(f"granularity must be one of {GRANULARITIES}, got {self.granularity!r}")

    def effective_buffer_size(self) -> int:
        """Bytes of Proton's per-CTA buffer. Auto (``buffer_size=None``): 512 when only warp 0
        records the top-level regions (each runs once per CTA: 2 records of 8 bytes per region,
        so 512 bytes hold 32 regions; more are dropped and reported); Proton's default otherwise.

        Why small: Proton's default is 8 KB per CTA (64 KB of shared memory in the matmul
        example with a shared buffer) and the profile scratch is allocated for every CTA of the
        grid (8320 bytes x 65,536 CTAs = 545 MB for the vector-add example; 640 bytes -> 42 MB).
        It does not buy device time: on an H100 the layernorm example cost +15.0% with a 512-byte
        shared buffer and +16.7% with 8 KB; what helped was the global buffer (+8.2%), which
        also drops the end-of-CTA barrier and copy-out of the shared buffer."""
        if self.buffer_size is not None:
            return int(self.buffer_size)
        if self.granularity == "cta" and not self.per_iteration and not self.ops:
            return 512
        return 0

    def key(self) -> str:
        return hashlib.sha256(canonical_json(asdict(self)).encode()).hexdigest()[:16]

    def proton_mode(self):
        """Proton's mode. Always Proton's warp granularity: its 3.6 lowering rejects the others
        ("granularity must be warp for now"). "cta" records in warp 0 only (Proton's selective
        sampling): the records' device cost scales with the number of recording warps, and on
        an H100 all-warp recording cost 7-25% on short-CTA memory-bound kernels. "warp" and
        "warp_group" record in every warp; warp groups are aggregated afterwards (start =
        earliest warp, end = latest warp)."""
        from triton.profiler import mode

        sampling = (
            {"sampling_strategy": "selective", "sampling_options": "0"} if self.granularity == "cta" else {}
        )
        return mode.Default(
            metric_type="cycle",
            granularity="warp",
            **sampling,
            buffer_type=self.buffer_type,
            buffer_strategy=self.buffer_strategy,
            buffer_size=self.effective_buffer_size(),
            optimizations=self.optimizations,
        )

    def mode_string(self) -> str:
        """The compile option ``instrumentation_mode`` for this configuration (cache key)."""
        return f"{self.proton_mode()}:{TAG}={self.key()}"


# --------------------------------------------------------------------------------------------
# the text pass (pure; unit-tested on strings)


@dataclass
class PassReport:
    regions: list[str] = field(default_factory=list)  # in order of their start
    skipped: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    user_scopes: list[str] = field(default_factory=list)


def _strip_strings(line: str) -> str:
    return re.sub(r'"(?:[^"\\]|\\.)*"', '""', line)


def _brace_delta(line: str) -> int:
    s = _strip_strings(line)
    return s.count("{") - s.count("}")


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _op_name(line: str) -> str:
    s = line.strip()
    m = re.match(r"^(?:%[^=]+=\s*)?\"?([A-Za-z_][\w.]*)", s)
    return m.group(1) if m else ""


_RECORD = re.compile(r'^\s*proton\.record\s+(start|end)\s+"((?:[^"\\]|\\.)*)"')


def _record(line: str) -> tuple[str, str] | None:
    m = _RECORD.match(line)
    return (m.group(1), m.group(2)) if m else None


def regions_in_ttgir(text: str) -> list[str]:
    """Scope names recorded in a TTGIR text, in order of first start."""
    out: list[str] = []
    for line in text.splitlines():
        r = _record(line)
        if r and r[0] == "start" and r[1] not in out:
            out.append(r[1])
    return out


def _top_level_ops(lines: list[str], body_start: int, body_end: int) -> list[tuple[int, int]]:
    """(first line, last line) of each op directly in the block lines[body_start:body_end]."""
    ops = []
    i = body_start
    while i < body_end:
        line = lines[i]
        if not line.strip() or line.strip().startswith("//"):
            i += 1
            continue
        depth = _brace_delta(line)
        j = i
        while depth > 0 and j + 1 < body_end:
            j += 1
            depth += _brace_delta(lines[j])
        ops.append((i, j))
        i = j + 1
    return ops


def _find_kernel(lines: list[str]) -> tuple[int, int] | None:
    """(line of `tt.func public @...`, line of its closing brace)."""
    for i, line in enumerate(lines):
        if re.match(r"^\s*tt\.func\s+public\s+@", line):
            depth = _brace_delta(line)
            j = i
            while depth > 0 and j + 1 < len(lines):
                j += 1
                depth += _brace_delta(lines[j])
            return i, j
    return None


def _block_of(lines: list[str], first: int, last: int) -> tuple[int, int]:
    """Body lines (start, end exclusive) of a single-region op spanning lines[first..last]."""
    return first + 1, last  # the op's own `{` line and its closing `}` line


def insert_regions(text: str, cfg: RegionConfig) -> tuple[str, PassReport]:
    """Insert the configured `proton.record` pairs into a TTGIR module text."""
    rep = PassReport()
    lines = text.split("\n")
    found = _find_kernel(lines)
    if found is None:
        rep.warnings.append("no public tt.func found: nothing instrumented")
        return text, rep
    f0, f1 = found
    ops = _top_level_ops(lines, f0 + 1, f1)
    if not ops:
        return text, rep
    names = [_op_name(lines[a]) for a, _ in ops]
    if names[-1] != "tt.return":
        rep.warnings.append(
            f"the kernel's last top-level op is {names[-1]!r}, not tt.return: nothing instrumented"
        )
        return text, rep
    ret = len(ops) - 1
    body_indent = _indent(lines[ops[0][0]])

    # user scopes at the top level: (name, start op index, end op index)
    user: list[tuple[str, int, int]] = []
    open_: dict[str, int] = {}
    for k, (a, _) in enumerate(ops):
        r = _record(lines[a])
        if r:
            if r[0] == "start":
                open_[r[1]] = k
            elif r[1] in open_:
                user.append((r[1], open_.pop(r[1]), k))
    user_names = set(regions_in_ttgir(text))
    rep.user_scopes = sorted(user_names)

    # candidate regions over top-level op indices [a, b): (name, a, b, rank)
    cands: list[tuple[str, int, int, int]] = []
    loops = [k for k, n in enumerate(names) if n == "scf.for"]
    if cfg.kernel and (loops or not cfg.phases):
        cands.append(("kernel", 0, ret, 0))
    if cfg.phases:
        if loops:
            if loops[0] > 0:
                cands.append(("prologue", 0, loops[0], 1))
            for n, k in enumerate(loops):
                cands.append((f"loop{n}", k, k + 1, 1))
            if loops[-1] + 1 < ret:
                cands.append(("epilogue", loops[-1] + 1, ret, 1))
        else:
            # a loop-free kernel: `body` spans exactly what `kernel` would; one pair of records
            # serves both names (RegionResult reports `kernel` as an alias of `body`)
            cands.append(("body", 0, ret, 1))

    def crosses(a: int, b: int) -> str | None:
        for name, us, ue in user:
            if (a <= us < b) != (a <= ue < b):
                return name
        return None

    # insertion points: line index -> list of (sort key, text); "before line i"
    ins: dict[int, list[tuple[tuple, str]]] = {}

    def add(pos: int, key: tuple, text_: str):
        ins.setdefault(pos, []).append((key, text_))

    partner: dict[int, int] = {}
    for _, us, ue in user:
        partner[us], partner[ue] = ue, us

    def trim(a: int, b: int) -> tuple[int, int]:
        """Move the region's edges past user records whose partner lies outside it."""
        while a < b and a in partner and not (a <= partner[a] < b):
            a += 1
        while b > a and (b - 1) in partner and not (a <= partner[b - 1] < b):
            b -= 1
        return a, b

    accepted: list[tuple[str, int, int, int]] = []
    for name, a, b, rank in cands:
        a, b = trim(a, b)
        if a >= b:
            rep.skipped.append(name)
            continue
        if name in user_names:
            rep.skipped.append(name)
            rep.warnings.append(f"region {name!r} left out: the kernel already has a scope of that name")
            continue
        if (who := crosses(a, b)) is not None:
            rep.skipped.append(name)
            rep.warnings.append(f"region {name!r} left out: it would cross the user scope {who!r}")
            continue
        accepted.append((name, a, b, rank))
    for name, a, b, rank in accepted:
        start_line = ops[a][0]
        end_line = ops[b - 1][1] + 1  # before the line after the last op of the region
        # ends first (inner before outer), then starts (outer before inner)
        add(start_line, (1, -(end_line), rank), f'{body_indent}proton.record start "{name}"')
        add(end_line, (0, -start_line, -rank), f'{body_indent}proton.record end "{name}"')
        rep.regions.append(name)

    # per-iteration regions inside each top-level loop body
    if cfg.per_iteration:
        for n, k in enumerate(loops):
            name = f"loop{n}.iter"
            if name in user_names:
                rep.skipped.append(name)
                continue
            a, b = ops[k]
            inner = _top_level_ops(lines, a + 1, b)
            if not inner or _op_name(lines[inner[-1][0]]) != "scf.yield":
                rep.warnings.append(f"{name} left out: loop body does not end in scf.yield")
                continue
            ind = _indent(lines[inner[0][0]])
            add(inner[0][0], (1, -inner[-1][0], 2), f'{ind}proton.record start "{name}"')
            add(inner[-1][0], (0, -inner[0][0], -2), f'{ind}proton.record end "{name}"')
            rep.regions.append(name)

    # single operations anywhere in the kernel (not inside warp-specialized partitions)
    if cfg.ops:
        counters = {c: 0 for c in cfg.ops}
        ws_depth: list[int] = []
        depth = 0
        for i in range(f0 + 1, f1):
            line = lines[i]
            op = _op_name(line)
            delta = _brace_delta(line)
            if op == "ttg.warp_specialize":
                ws_depth.append(depth)
            if not ws_depth and delta == 0:
                for cls in cfg.ops:
                    if op in OP_CLASSES[cls]:
                        name = f"{cls}{counters[cls]}"
                        counters[cls] += 1
                        if name in user_names:
                            rep.skipped.append(name)
                            break
                        ind = _indent(line)
                        add(i, (1, -(i + 1), 3), f'{ind}proton.record start "{name}"')
                        add(i + 1, (0, -i, -3), f'{ind}proton.record end "{name}"')
                        rep.regions.append(name)
                        break
            depth += delta
            if ws_depth and depth <= ws_depth[-1]:
                ws_depth.pop()

    if not ins:
        return text, rep
    out: list[str] = []
    for i, line in enumerate(lines):
        for _, t in sorted(ins.get(i, []), key=lambda kv: kv[0]):
            out.append(t)
        out.append(line)
    return "\n".join(out), rep


# --------------------------------------------------------------------------------------------
# the hook (installed while a session or an AOT compile needs it; chained, symmetric)

_registry: dict[str, RegionConfig] = {}
_reports: dict[tuple[str, str], PassReport] = {}
_hook_lock = threading.Lock()
_hook_users = 0
_prev_hook: Any = None


def _stages_hook(backend: Any, stages: dict, options: Any, language: Any, capability: Any) -> None:
    if _prev_hook is not None:
        _prev_hook(backend, stages, options, language, capability)
    m = _TAG_RE.search(getattr(options, "instrumentation_mode", "") or "")
    if m is None or "ttgir" not in stages:
        return
    cfg = _registry.get(m.group(1))
    if cfg is None:
        raise RuntimeError(f"kperf: no region configuration registered for key {m.group(1)}")
    orig = stages["ttgir"]

    def ttgir_with_regions(src, metadata):
        module = orig(src, metadata)
        if not getattr(type(backend), "instrumentation", None):
            raise RuntimeError(
                "kperf: an instrumented kernel needs compiling but Proton's lowering is not active; "
                "run instrument_callable() first (it compiles under a Proton session)"
            )
        text, rep = insert_regions(str(module), cfg)
        _reports[(cfg.key(), str(metadata.get("name", "")))] = rep
        if text == str(module):
            return module
        return _parse_module(text, module.context)

    stages["ttgir"] = ttgir_with_regions


def _parse_module(text: str, context: Any):
    from triton._C.libtriton import ir

    fd, path = tempfile.mkstemp(suffix=".ttgir", prefix="kperf_")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        module = ir.parse_mlir_module(path, context)
        module.context = context
        return module
    finally:
        os.unlink(path)


@contextlib.contextmanager
def _hook_installed(cfg: RegionConfig) -> Iterator[None]:
    import triton

    global _hook_users, _prev_hook
    with _hook_lock:
        _registry[cfg.key()] = cfg
        if _hook_users == 0:
            current = triton.knobs.runtime.add_stages_inspection_hook
            _prev_hook = current if current is not _stages_hook else None
            triton.knobs.runtime.add_stages_inspection_hook = _stages_hook
        _hook_users += 1
    try:
        yield
    finally:
        with _hook_lock:
            _hook_users -= 1
            if _hook_users == 0:
                if triton.knobs.runtime.add_stages_inspection_hook is _stages_hook:
                    triton.knobs.runtime.add_stages_inspection_hook = _prev_hook
                _prev_hook = None


def cache_dir_for(cfg: RegionConfig) -> str:
    """A Triton cache directory of this region configuration's own."""
    import triton

    base = os.environ.get("KPERF_REGION_CACHE_DIR") or os.path.join(triton.knobs.cache.dir, TAG)
    return os.path.join(base, cfg.key())


def _enable_triton_semantic() -> None:
    import triton.profiler.language as pl

    pl.enable_semantic("triton")  # a set: idempotent


@contextlib.contextmanager
def _cache_and_mode(cfg: RegionConfig, mode_string: str | None) -> Iterator[None]:
    """Per-configuration cache directory and (optionally) the tagged instrumentation mode."""
    import triton

    with triton.knobs.cache.scope(), triton.knobs.compilation.scope():
        triton.knobs.cache.dir = cache_dir_for(cfg)
        if mode_string is not None:
            triton.knobs.compilation.instrumentation_mode = mode_string
        yield


# --------------------------------------------------------------------------------------------
# AOT (CPU CI)


@contextlib.contextmanager
def _proton_lowering(cfg: RegionConfig, capability: int) -> Iterator[None]:
    """Register Proton's lowering passes on the nvidia backend as Proton's
    ``InstrumentationHook.activate`` does, but without a device (for ahead-of-time compiles)."""
    from triton._C.libtriton import passes as triton_passes
    from triton._C.libtriton import proton as triton_proton
    from triton.backends import backends
    from triton.profiler import mode as pmode
    from triton.profiler.flags import flags
    from triton.profiler.hooks.instrumentation import Instrumentation, InstrumentationHook

    m = cfg.proton_mode()
    max_shared = MAX_SHARED_PER_BLOCK.get(capability, 232448)  # what the lowering needs to know in AOT
    compiler_cls = backends["nvidia"].compiler
    saved = (compiler_cls.instrumentation, flags.instrumentation_on)

    def to_llvmir(pm):
        long_clk = pmode.Optimize.CLOCK32 not in m.optimizations
        triton_proton.add_convert_proton_to_protongpu(
            pm,
            m.metric_type,
            m.sampling_strategy,
            m.sampling_options,
            m.granularity,
            m.buffer_strategy,
            m.buffer_type,
            m.buffer_size,
            max_shared,
            InstrumentationHook.profile_buffer_size,
            InstrumentationHook.profile_buffer_alignment,
            long_clk,
        )
        triton_passes.common.add_cse(pm)
        if pmode.Optimize.SCHED_STORES in m.optimizations:
            triton_proton.add_schedule_buffer_store(pm)
        triton_proton.add_allocate_proton_shared_memory(pm)

    def to_llvm(pm):
        triton_proton.add_allocate_proton_global_scratch_buffer(pm)
        triton_proton.add_convert_proton_nvidia_gpu_to_llvm(pm)

    compiler_cls.instrumentation = Instrumentation(
        {"ttgpuir_to_llvmir": to_llvmir, "llvmir_to_llvm": to_llvm}
    )
    flags.instrumentation_on = True
    try:
        yield
    finally:
        compiler_cls.instrumentation, flags.instrumentation_on = saved


def aot_compile(
    fn: Any,
    signature: dict[str, str],
    constexprs: dict[str, Any] | None = None,
    cfg: RegionConfig | None = None,
    *,
    capability: int = 90,
    options: dict[str, Any] | None = None,
):
    """Compile `fn` ahead of time for `sm_<capability>` with the regions of `cfg` (no GPU needed).

    ``cfg=None`` compiles the plain kernel (same options otherwise), for comparison.
    Returns Triton's ``CompiledKernel`` (asm: ttgir with the records, ptx, cubin ...).
    """
    import triton
    from triton.backends.compiler import GPUTarget

    target = GPUTarget("cuda", capability, 32)
    src = triton.compiler.ASTSource(fn=fn, signature=signature, constexprs=constexprs or {})
    opts = dict(options or {})
    if cfg is None:
        return triton.compile(src, target=target, options=opts)
    _enable_triton_semantic()
    opts["instrumentation_mode"] = cfg.mode_string()
    with _hook_installed(cfg), _proton_lowering(cfg, capability), _cache_and_mode(cfg, None):
        return triton.compile(src, target=target, options=opts)


def pass_report(cfg: RegionConfig, kernel_name: str) -> PassReport | None:
    """The pass's report for a kernel compiled in this process (None after a cache hit)."""
    return _reports.get((cfg.key(), kernel_name))


# --------------------------------------------------------------------------------------------
# results


@dataclass
class RegionStats:
    name: str
    count: int  # slices recorded (units x occurrences)
    units: int  # distinct (CTA, unit) that recorded it
    cycles_median: float
    cycles_mean: float
    cycles_p10: float
    cycles_p90: float
    cycles_min: float
    cycles_max: float
    total_cycles: float
    fraction: float | None  # total cycles / total cycles of the kernel region
    ns_median: float | None


@dataclass
class RegionResult:
    """Regions of one kernel launch: per-region statistics and the compact per-slice timeline."""

    kernel: str
    config: RegionConfig
    regions: dict[str, RegionStats]
    trace: KernelTrace
    clock_ghz: float | None  # SM cycles per ns used for ns/ms
    clock_source: str  # "trace" (measured), "nvml", "device" or "none"
    clock_trace_ghz: float | None = None
    clock_nvml_mhz: float | None = None
    span_ns: float | None = None  # first CTA start to last CTA end (instrumented launch)
    spans_ns: dict[str, float] = field(default_factory=dict)  # proton_trace.spans_from_raw
    clock_fit: dict[str, Any] = field(default_factory=dict)  # the fit behind clock_source "trace"
    n_ctas: int = 0
    grid: tuple[int, int, int] | None = None
    dropped_events: int = 0
    warnings: list[str] = field(default_factory=list)
    partition: dict[str, Any] = field(default_factory=dict)  # sum of phases vs kernel
    trace_path: str | None = None
    host_seconds: float | None = None

    def to_metrics(self) -> list[Metric]:
        """region.<name>.cycles / .fraction / .ms (METRICS.md)."""
        out: list[Metric] = []
        for name, st in self.regions.items():
            out.append(Metric(f"region.{name}.cycles", float(st.cycles_median), "cycles", "region", "lower"))
            if st.fraction is not None:
                out.append(
                    Metric(f"region.{name}.fraction", float(st.fraction), "fraction", "region", "none")
                )
            if st.ns_median is not None:
                out.append(Metric(f"region.{name}.ms", float(st.ns_median) / 1e6, "ms", "region", "lower"))
        return out

    def timeline_bytes(self) -> bytes:
        """numpy .npz (zlib-compressed) of the per-slice and per-CTA arrays plus a JSON header."""
        buf = io.BytesIO()
        header = {
            "kernel": self.kernel,
            "names": self.trace.names,
            "clock_ghz": self.clock_ghz,
            "clock_source": self.clock_source,
            "granularity": self.config.granularity,
            "dropped_events": self.dropped_events,
            "grid": self.grid,
            "config": asdict(self.config),
        }
        arrays = self.trace.arrays()
        np.savez_compressed(
            buf, header=np.frombuffer(canonical_json(header).encode(), dtype=np.uint8), **arrays
        )
        return buf.getvalue()

    def summary(self) -> str:
        lines = [
            f"{self.kernel}: {self.n_ctas} CTAs, clock {self.clock_ghz or float('nan'):.3f} GHz "
            f"({self.clock_source}), dropped {self.dropped_events}"
        ]
        for st in self.regions.values():
            frac = "" if st.fraction is None else f" {st.fraction:6.1%}"
            ns = "" if st.ns_median is None else f" {st.ns_median / 1000:9.2f} us"
            lines.append(f"  {st.name:<12} {st.cycles_median:12.0f} cyc{ns}{frac}  n={st.count}")
        return "\n".join(lines)


def load_timeline(data: bytes) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Inverse of RegionResult.timeline_bytes: (header, arrays)."""
    import json

    with np.load(io.BytesIO(data)) as z:
        header = json.loads(bytes(z["header"]).decode())
        arrays = {k: z[k] for k in z.files if k != "header"}
    return header, arrays


def _stats(kt: KernelTrace, clock_ghz: float | None) -> dict[str, RegionStats]:
    out: dict[str, RegionStats] = {}
    kid = kt.region_id("kernel")
    ktotal = float(kt.dur[kt.region == kid].sum()) if kid is not None else None
    for rid, name in enumerate(kt.names):
        sel = kt.region == rid
        d = kt.dur[sel].astype(np.float64)
        if d.size == 0:
            continue
        units = np.unique(
            np.stack([kt.cta[sel].astype(np.int64), kt.unit[sel].astype(np.int64)]), axis=1
        ).shape[1]
        med = float(np.median(d))
        out[name] = RegionStats(
            name=name,
            count=int(d.size),
            units=int(units),
            cycles_median=med,
            cycles_mean=float(d.mean()),
            cycles_p10=float(np.percentile(d, 10)),
            cycles_p90=float(np.percentile(d, 90)),
            cycles_min=float(d.min()),
            cycles_max=float(d.max()),
            total_cycles=float(d.sum()),
            fraction=(float(d.sum()) / ktotal) if ktotal else None,
            ns_median=(med / clock_ghz) if clock_ghz else None,
        )
    return out


def _partition(kt: KernelTrace) -> dict[str, Any]:
    """Sum of the non-overlapping phase regions against the kernel region, per (CTA, unit)."""
    kid = kt.region_id("kernel")
    phase_ids = [i for i, n in enumerate(kt.names) if PHASE_REGIONS.match(n)]
    if kid is None or not phase_ids:
        return {}
    if "body" in kt.names and len(phase_ids) > 1:
        phase_ids = [kt.region_id("body")]
    key = kt.cta.astype(np.int64) * 65536 + kt.unit.astype(np.int64)
    ksel = kt.region == kid
    kkeys, kinv = np.unique(key[ksel], return_inverse=True)
    kdur = np.zeros(kkeys.size)
    np.add.at(kdur, kinv, kt.dur[ksel])
    psel = np.isin(kt.region, phase_ids)
    pos = np.searchsorted(kkeys, key[psel])
    ok = (pos < kkeys.size) & (kkeys[np.minimum(pos, kkeys.size - 1)] == key[psel])
    pdur = np.zeros(kkeys.size)
    np.add.at(pdur, pos[ok], kt.dur[psel][ok])
    ratio = pdur[kdur > 0] / kdur[kdur > 0]
    if ratio.size == 0:
        return {}
    return {
        "regions": [kt.names[i] for i in phase_ids],
        "median_ratio": float(np.median(ratio)),
        "total_ratio": float(pdur.sum() / kdur.sum()),
        "min_ratio": float(ratio.min()),
        "max_ratio": float(ratio.max()),
    }


def _completeness(kt: KernelTrace, expected_ctas: int | None) -> tuple[int, list[str]]:
    """Slices missing against 'every unit that recorded anything recorded every non-repeating
    region once', plus CTAs absent altogether (against the grid)."""
    warnings = []
    missing = 0
    once = [
        i
        for i, n in enumerate(kt.names)
        if not n.endswith(".iter") and not re.match(r"^(dot|copy|wait)\d+$", n)
    ]
    key = kt.cta.astype(np.int64) * 65536 + kt.unit.astype(np.int64)
    units = np.unique(key)
    for rid in once:
        have = np.unique(key[kt.region == rid]).size
        missing += units.size - have
    if expected_ctas is not None and kt.cta_ids.size < expected_ctas:
        per_cta = units.size / max(kt.cta_ids.size, 1) * len(once)
        absent = expected_ctas - kt.cta_ids.size
        warnings.append(f"{absent} of {expected_ctas} CTAs recorded nothing")
        missing += int(round(absent * per_cta))
    return missing, warnings


def aggregate_units(kt: KernelTrace, granularity: str) -> KernelTrace:
    """Per-warp slices to per-CTA ("cta") or per-warp-group ("warp_group") slices.

    The k-th occurrence of a region in each warp of a group becomes one slice from the earliest
    start to the latest end among those warps. "warp" returns the trace unchanged.
    """
    if granularity == "warp" or kt.n_events == 0 or (granularity == "cta" and not kt.unit.any()):
        return kt  # (warp 0 alone recorded: already one slice per CTA)
    group = np.zeros_like(kt.unit) if granularity == "cta" else (kt.unit // WARPS_PER_GROUP).astype(np.uint16)
    # occurrence index of each slice within its (cta, warp, region), in start order
    order = np.lexsort((kt.start, kt.region, kt.unit, kt.cta))
    c, u, r = (
        kt.cta[order].astype(np.int64),
        kt.unit[order].astype(np.int64),
        kt.region[order].astype(np.int64),
    )
    new_run = np.ones(order.size, dtype=bool)
    new_run[1:] = (c[1:] != c[:-1]) | (u[1:] != u[:-1]) | (r[1:] != r[:-1])
    run_start = np.maximum.accumulate(np.where(new_run, np.arange(order.size), 0))
    occ = np.empty(order.size, dtype=np.int64)
    occ[order] = np.arange(order.size) - run_start
    key = np.stack([kt.cta.astype(np.int64), group.astype(np.int64), kt.region.astype(np.int64), occ])
    keys, inv = np.unique(key, axis=1, return_inverse=True)
    inv = inv.reshape(-1)
    beg = np.full(keys.shape[1], np.iinfo(np.int64).max, dtype=np.int64)
    end = np.full(keys.shape[1], np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(beg, inv, kt.start)
    np.maximum.at(end, inv, kt.start + kt.dur)
    sm = np.zeros(keys.shape[1], dtype=np.uint16)
    sm[inv] = kt.sm
    return KernelTrace(
        kernel=kt.kernel,
        names=list(kt.names),
        region=keys[2].astype(np.uint16),
        cta=keys[0].astype(np.uint32),
        sm=sm,
        unit=keys[1].astype(np.uint16),
        start=beg,
        dur=end - beg,
        cta_ids=kt.cta_ids,
        cta_sm=kt.cta_sm,
        cta_init_ns=kt.cta_init_ns,
        cta_final_ns=kt.cta_final_ns,
        warnings=list(kt.warnings),
    )


def build_result(
    kt: KernelTrace,
    cfg: RegionConfig,
    *,
    log_text: str = "",
    nvml_mhz: float | None = None,
    device_mhz: float | None = None,
    grid: tuple[int, int, int] | None = None,
    trace_path: str | None = None,
    raw: KernelTrace | None = None,
) -> RegionResult:
    """Statistics, clock, span, partition check and drops for one kernel's (per-warp) trace.

    ``raw``: the same launch read from Proton's device buffer (:func:`read_raw_trace`), with
    absolute SM cycles and per-CTA globaltimer stamps: the clock is then fitted from it
    (:func:`proton_trace.fit_clock`) and the span comes from it."""
    warnings = list(kt.warnings)
    expected = None if grid is None else grid[0] * grid[1] * grid[2]
    missing, w = _completeness(kt, expected)  # per warp, before aggregation
    warnings += w
    kt = aggregate_units(kt, cfg.granularity)
    kreg = "kernel" if "kernel" in kt.names else ("body" if "body" in kt.names else None)
    fit = proton_trace.fit_clock(raw) if raw is not None and raw.n_events else None
    clock_trace = fit.ghz if fit is not None else proton_trace.measured_clock_ghz(kt, kreg)
    if clock_trace:
        clock, source = clock_trace, "trace"
    elif nvml_mhz:
        clock, source = nvml_mhz / 1000.0, "nvml"
    elif device_mhz:
        clock, source = device_mhz / 1000.0, "device"
    else:
        clock, source = None, "none"
    if source in ("nvml", "device"):
        warnings.append(
            f"SM clock for ns/ms taken from {source} ({clock * 1000:.0f} MHz), not measured in the trace "
            "(Proton 3.6 traces have no per-CTA end time): under a power cap the clock during the kernel "
            "can be lower, so ns/ms values and the span are approximate; cycles are exact"
        )
    if clock_trace and nvml_mhz and abs(clock_trace * 1000 - nvml_mhz) / nvml_mhz > 0.05:
        warnings.append(
            f"clock measured in the trace ({clock_trace * 1000:.0f} MHz) differs from NVML's "
            f"({nvml_mhz:.0f} MHz) by more than 5%"
        )
    regions = _stats(kt, clock)
    if "kernel" not in regions and "body" in regions and cfg.kernel:
        b = regions["body"]
        regions = {"kernel": replace(b, name="kernel", fraction=1.0), **regions}
        regions["body"] = replace(b, fraction=1.0)
    logged = proton_trace.dropped_from_log(log_text)
    dropped = max(missing, logged)
    if dropped:
        warnings.append(
            f"{dropped} profiling events were dropped (buffer too small: raise RegionConfig.buffer_size "
            f"or use buffer_type='global'); statistics cover the events kept"
        )
    spans: dict[str, float] = {}
    if fit is not None and raw is not None:
        spans = proton_trace.spans_from_raw(raw, fit, kreg)
        span = spans.get("regions")
    else:
        span = proton_trace.kernel_span_ns(kt, clock, kreg) if clock else None
    return RegionResult(
        kernel=kt.kernel,
        config=cfg,
        regions=regions,
        trace=kt,
        clock_ghz=clock,
        clock_source=source,
        clock_trace_ghz=clock_trace,
        clock_nvml_mhz=nvml_mhz,
        span_ns=span,
        spans_ns=spans,
        clock_fit=(
            {
                "ghz": fit.ghz,
                "ghz_median_sm": fit.ghz_median_sm,
                "n_ctas": fit.n_ctas,
                "n_sms": fit.n_sms,
                "rms_residual_ns": fit.rms_residual_ns,
            }
            if fit is not None
            else {}
        ),
        n_ctas=int(kt.cta_ids.size),
        grid=grid,
        dropped_events=int(dropped),
        warnings=warnings,
        partition=_partition(kt),
        trace_path=trace_path,
    )


# --------------------------------------------------------------------------------------------
# running on a GPU


@contextlib.contextmanager
def _capture_fds() -> Iterator[io.StringIO]:
    """Capture what C++ writes to fds 1 and 2 (Proton's drop warnings) and echo it back after."""
    out = io.StringIO()
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    tmp = tempfile.TemporaryFile(mode="w+b")
    try:
        for fd in (1, 2):
            os.dup2(tmp.fileno(), fd)
        yield out
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, s in saved.items():
            os.dup2(s, fd)
            os.close(s)
        tmp.seek(0)
        text = tmp.read().decode(errors="replace")
        tmp.close()
        out.write(text)
        if text:
            sys.stderr.write(text)


def _device_clock_mhz() -> float | None:
    try:
        import torch

        p = torch.cuda.get_device_properties(torch.cuda.current_device())
        rate = getattr(p, "clock_rate", None)  # kHz in some torch builds
        if rate:
            return rate / 1000.0
        from triton.runtime.driver import driver

        props = driver.active.utils.get_device_properties(torch.cuda.current_device())
        return props.get("sm_clock_rate", 0) / 1000.0 or None
    except Exception:
        return None


def instrument_callable_all(
    fn: Callable[[], Any],
    cfg: RegionConfig | None = None,
    *,
    workdir: str | None = None,
    keep_trace: bool = False,
) -> dict[str, RegionResult]:
    """Run `fn()` once with regions inserted in every Triton kernel it launches; one
    RegionResult per kernel name, in launch order."""
    import time

    import torch
    import triton
    import triton.profiler as proton

    from .gpu import launch_capture
    from .timing import CudaBackend

    cfg = cfg or RegionConfig()
    _enable_triton_semantic()
    own_dir = workdir is None
    wd = Path(tempfile.mkdtemp(prefix="kperf_regions_") if own_dir else workdir)
    wd.mkdir(parents=True, exist_ok=True)
    base = wd / f"regions_{cfg.key()}"
    try:
        nvml = CudaBackend()._nvml
    except Exception:
        nvml = None

    log = io.StringIO()
    session = None
    raws: dict[str, KernelTrace] = {}
    t0 = time.perf_counter()
    nvml_mhz = None
    with _hook_installed(cfg), _cache_and_mode(cfg, None):
        try:
            with launch_capture(keep_args=False) as launches:
                session = proton.start(
                    str(base), backend="instrumentation", data="trace", mode=cfg.proton_mode()
                )
                triton.knobs.compilation.instrumentation_mode = cfg.mode_string()
                with _keep_profile_buffers() as kept:
                    fn()
                    torch.cuda.synchronize()
                raws = _read_kept(kept, launches)
            if nvml is not None:
                nvml_mhz = nvml.read().get("sm_clock_mhz")
        finally:
            if session is not None:
                with _capture_fds() as captured:
                    proton.finalize(session)
                log.write(captured.getvalue())
    host_s = time.perf_counter() - t0

    files = sorted(p for p in wd.glob(base.name + "*") if p.is_file())
    if not files:
        raise RuntimeError(f"Proton wrote no trace under {wd} (log: {log.getvalue()[-500:]})")
    events = proton_trace.load_trace(files[0])
    traces = proton_trace.parse_events(events)
    if not traces:
        head = files[0].read_text()[:1500]
        raise RuntimeError(f"no CTA slices recognised in Proton's trace {files[0].name}; it begins: {head}")
    grids: dict[str, tuple[int, int, int] | None] = {}
    not_instrumented = []
    for info in launches:
        grids.setdefault(info.name, info.grid)
        md = getattr(info.kernel, "metadata", None)
        if md is not None and not getattr(md, "profile_scratch_size", 0):
            not_instrumented.append(info.name)
    dev_mhz = _device_clock_mhz()
    out: dict[str, RegionResult] = {}
    order = [i.name for i in launches] + sorted(traces)
    for name in dict.fromkeys(order):
        if name not in traces:
            continue
        r = build_result(
            traces[name],
            cfg,
            log_text=log.getvalue(),
            nvml_mhz=nvml_mhz,
            device_mhz=dev_mhz,
            grid=grids.get(name),
            trace_path=str(files[0]) if keep_trace else None,
            raw=raws.get(name),
        )
        r.host_seconds = host_s
        rep = pass_report(cfg, name)
        if rep is not None:
            r.warnings += rep.warnings
        if [i for i in launches if i.name == name].__len__() > 1:
            r.warnings.append(
                "the callable launched this kernel more than once: slices of all launches are mixed"
            )
        out[name] = r
    for name in not_instrumented:
        if name not in out:
            out[name] = build_result(proton_trace._to_arrays(name, []), cfg, grid=grids.get(name))
            out[name].warnings.append("kernel was launched without instrumentation (compiled elsewhere?)")
    if own_dir and not keep_trace:
        for p in files:
            p.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            wd.rmdir()
    return out


class _KeepBuffers:
    """Wraps the active profile allocator (Proton's, inside a session) and keeps every buffer
    it hands out, in launch order, so the raw records can be read after the callable."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.kept: list[Any] = []

    def __call__(self, size: int, alignment: int, stream: Any):
        buf = self.inner(size, alignment, stream)
        self.kept.append(buf)
        return buf


@contextlib.contextmanager
def _keep_profile_buffers() -> Iterator[list[Any]]:
    from triton.runtime import _allocation

    saved = _allocation._profile_allocator.get()
    keep = _KeepBuffers(saved)
    _allocation.set_profile_allocator(keep)
    try:
        yield keep.kept
    finally:
        _allocation.set_profile_allocator(saved)


def _read_kept(kept: list[Any], launches: list[Any]) -> dict[str, KernelTrace]:
    """Raw traces of the first launch of each instrumented kernel (buffers pair with the
    instrumented launches in order). Best effort: any mismatch gives no raw trace (the clock
    then falls back to NVML, with a warning)."""
    out: dict[str, KernelTrace] = {}
    inst = [i for i in launches if getattr(getattr(i.kernel, "metadata", None), "profile_scratch_size", 0)]
    if len(inst) != len(kept):
        return out
    for info, buf in zip(inst, kept, strict=True):
        if info.name in out or info.grid is None:
            continue
        try:
            holder = _FixedProfileBuffer()
            holder.last = buf
            n = info.grid[0] * info.grid[1] * info.grid[2]
            out[info.name] = read_raw_trace(holder, info.kernel, n, name=info.name)
        except Exception:
            continue
    kept.clear()
    return out


def instrument_callable(
    fn: Callable[[], Any],
    cfg: RegionConfig | None = None,
    *,
    kernel: str | None = None,
    workdir: str | None = None,
    keep_trace: bool = False,
) -> RegionResult:
    """Run `fn()` once with automatic regions; the RegionResult of `kernel` (default: the first
    instrumented kernel it launched)."""
    res = instrument_callable_all(fn, cfg, workdir=workdir, keep_trace=keep_trace)
    if not res:
        raise RuntimeError("the callable launched no instrumented Triton kernel")
    if kernel is None:
        return next(iter(res.values()))
    if kernel not in res:
        raise KeyError(f"kernel {kernel!r} not among the instrumented launches {sorted(res)}")
    return res[kernel]


def _compiled_kernels(jit_fn: Any) -> list[Any]:
    out = []
    for caches in getattr(jit_fn, "device_caches", {}).values():
        try:
            out.extend(caches[0].values())
        except Exception:
            pass
    return out


class _FixedProfileBuffer:
    """Profile allocator that hands out one preallocated buffer (grown when a launch needs more)."""

    def __init__(self):
        self.buf = None
        self.last: Any = None  # the view handed to the latest launch (its raw records, after sync)
        self.last_size = 0

    def __call__(self, size: int, alignment: int, stream: Any):
        import torch

        need = (size + alignment - 1) // alignment * alignment + alignment
        if self.buf is None or self.buf.numel() < need:
            self.buf = torch.empty(need, dtype=torch.uint8, device="cuda")
        off = (-self.buf.data_ptr()) % alignment
        self.last = self.buf[off:] if off else self.buf
        self.last_size = size
        return self.last


@contextlib.contextmanager
def profile_buffer() -> Iterator[_FixedProfileBuffer]:
    """Instrumented kernels launched inside get one fixed device buffer for their records (no
    Proton session needed). Plain kernels are unaffected. Yields the allocator: after a launch
    and a sync, ``.last`` holds that launch's raw records (see read_raw_trace)."""
    from triton.runtime import _allocation

    saved = _allocation._profile_allocator.get()
    alloc = _FixedProfileBuffer()
    _allocation.set_profile_allocator(alloc)
    try:
        yield alloc
    finally:
        _allocation.set_profile_allocator(saved)


def scope_names(kernel: Any) -> dict[int, str]:
    """Proton's scope id -> name for a compiled instrumented kernel (from its TTGIR, as Proton's
    own hook does); falls back to the order of first `proton.record start` in the text."""
    text = kernel.asm["ttgir"]
    try:
        from triton._C.libtriton import ir, nvidia
        from triton._C.libtriton import proton as triton_proton

        ctx = ir.context()
        ir.load_dialects(ctx)
        nvidia.load_dialects(ctx)
        triton_proton.load_dialects(ctx)
        fd, path = tempfile.mkstemp(suffix=".ttgir", prefix="kperf_")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
            module = ir.parse_mlir_module(path, ctx)
            module.context = ctx
            return {int(i): str(n) for i, n in triton_proton.get_scope_id_names(module)}
        finally:
            os.unlink(path)
    except Exception:
        return dict(enumerate(regions_in_ttgir(text)))


def read_raw_trace(
    alloc: _FixedProfileBuffer, kernel: Any, n_ctas: int, max_records: int = 64, name: str | None = None
) -> KernelTrace:
    """The records of the latest instrumented launch into `alloc` (after a sync), parsed from
    the device buffer itself: absolute SM cycles and per-CTA globaltimer init / pre-final /
    post-final stamps, which Proton 3.6's Chrome trace does not carry."""
    md = kernel.metadata
    scratch = int(md.profile_scratch_size)
    nw = int(md.num_warps)
    width = min(scratch, proton_trace.raw_header_bytes(nw, max_records))
    buf = alloc.last[: n_ctas * scratch].view(n_ctas, scratch)[:, :width]
    blocks = buf.cpu().numpy()
    return proton_trace.parse_raw_buffer(blocks, nw, scope_names(kernel), kernel=name or md.name)


@contextlib.contextmanager
def instrumented_launches(
    cfg: RegionConfig | None = None, *, compile: bool = False
) -> Iterator[_FixedProfileBuffer]:
    """Inside: Triton launches use the instrumented build of `cfg` (compiled earlier by
    instrument_callable in this process or found in its cache directory) WITHOUT a Proton
    session: the kernels write their records into a fixed device buffer that nobody reads, and
    no host post-processing runs per launch. For measuring the instrumented kernels' own device
    time with the ordinary timing loop. A kernel that would need compiling raises, unless
    ``compile=True``: then Proton's lowering is registered as in :func:`aot_compile` (no
    session) and the instrumented kernels compile here."""
    cfg = cfg or RegionConfig()
    with contextlib.ExitStack() as stack:
        stack.enter_context(_hook_installed(cfg))
        stack.enter_context(_cache_and_mode(cfg, cfg.mode_string()))
        alloc = stack.enter_context(profile_buffer())
        if compile:
            import torch

            major, minor = torch.cuda.get_device_capability()
            _enable_triton_semantic()
            stack.enter_context(_proton_lowering(cfg, major * 10 + minor))
        yield alloc
