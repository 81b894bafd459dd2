"""The hook that applies the region pass inside Triton's compiler, and ahead-of-time compiles.

Triton calls ``triton.knobs.runtime.add_stages_inspection_hook`` for every compile; a
:class:`RegionHook` wraps ``stages["ttgir"]`` of the builds whose ``instrumentation_mode``
carries its configuration's tag: it takes the module the original stage returns (the program
after pipelining, as it will run), inserts the records (:func:`.ttgir_pass.insert_regions`) and
parses the text back. Plain builds (empty mode) are never touched.

Lifetime. A RegionHook lives for one ``with`` block: it installs itself on the knob on entry
(chained to any hook that was there) and restores that hook on exit. A scope opened while
another kperf scope holds the knob registers its configuration with that one for its duration
instead of installing a second hook, so one hook per process edits each build once. The pass
reports of the kernels compiled inside the scope are read from it (:meth:`RegionHook.report`).

Cache keys. Triton's compile cache does not hash the hook; the tag in ``instrumentation_mode``
gives each configuration its own key, and :func:`cache_and_mode` its own cache directory.

:func:`aot_compile` applies the same pass and Proton's lowering in an ahead-of-time compile
(no GPU needed: CPU CI checks the pass there).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

from kperf_ci.capture.regions.ttgir_pass import TAG, TAG_RE, PassReport, RegionConfig, insert_regions
from kperf_ci.config import ENV_REGION_CACHE_DIR, env_text
from kperf_ci.hardware import max_shared_per_block

#: Guards the swap of Triton's process-wide hook knob (the only state shared between scopes).
_KNOB_LOCK = threading.Lock()


class RegionHook:
    """Triton's stages-inspection hook for the region configurations registered with it, for
    the duration of a ``with`` block (see the module docstring)."""

    def __init__(self, cfg: RegionConfig) -> None:
        self.cfg = cfg
        self._configs: dict[str, list[RegionConfig]] = {}  # key -> one entry per scope using it
        self._reports: dict[tuple[str, str], PassReport] = {}
        self._prev: Any = None
        self._owner: RegionHook | None = None  # the hook installed on the knob while inside
        self._reports_of: RegionHook = self  # where this scope's pass reports were kept

    # -- lifetime ---------------------------------------------------------------------------
    def __enter__(self) -> RegionHook:
        import triton

        with _KNOB_LOCK:
            current = triton.knobs.runtime.add_stages_inspection_hook
            owner = current if isinstance(current, RegionHook) else self
            if owner is self:
                self._prev = current
                triton.knobs.runtime.add_stages_inspection_hook = self
            owner._configs.setdefault(self.cfg.key(), []).append(self.cfg)
            self._owner = self._reports_of = owner
        return self

    def __exit__(self, *exc: Any) -> None:
        import triton

        with _KNOB_LOCK:
            owner, self._owner = self._owner, None
            if owner is None:
                return
            users = owner._configs.get(self.cfg.key(), [])
            if users:
                users.pop()
            if not users:
                owner._configs.pop(self.cfg.key(), None)
            if owner is self:
                if triton.knobs.runtime.add_stages_inspection_hook is self:
                    triton.knobs.runtime.add_stages_inspection_hook = self._prev
                self._prev = None

    def report(self, kernel_name: str) -> PassReport | None:
        """The pass's report for a kernel compiled inside this scope (None after a cache hit)."""
        return self._reports_of._reports.get((self.cfg.key(), kernel_name))

    # -- the hook -----------------------------------------------------------------------------
    def __call__(self, backend: Any, stages: dict, options: Any, language: Any, capability: Any) -> None:
        if self._prev is not None:
            self._prev(backend, stages, options, language, capability)
        m = TAG_RE.search(getattr(options, "instrumentation_mode", "") or "")
        if m is None or "ttgir" not in stages:
            return
        users = self._configs.get(m.group(1))
        if not users:
            raise RuntimeError(f"kperf: no region configuration registered for key {m.group(1)}")
        cfg = users[-1]
        orig = stages["ttgir"]
        reports = self._reports

        def ttgir_with_regions(src, metadata):
            module = orig(src, metadata)
            if not getattr(type(backend), "instrumentation", None):
                raise RuntimeError(
                    "kperf: an instrumented kernel needs compiling but Proton's lowering is not active; "
                    "run instrument_callable() first (it compiles under a Proton session)"
                )
            text, rep = insert_regions(str(module), cfg)
            reports[(cfg.key(), str(metadata.get("name", "")))] = rep
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


def cache_dir_for(cfg: RegionConfig) -> str:
    """A Triton cache directory of this region configuration's own."""
    import triton

    base = env_text(ENV_REGION_CACHE_DIR) or os.path.join(triton.knobs.cache.dir, TAG)
    return os.path.join(base, cfg.key())


def enable_triton_semantic() -> None:
    import triton.profiler.language as pl

    pl.enable_semantic("triton")  # a set: idempotent


@contextlib.contextmanager
def cache_and_mode(cfg: RegionConfig, mode_string: str | None) -> Iterator[None]:
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
def proton_lowering(cfg: RegionConfig, capability: int) -> Iterator[None]:
    """Register Proton's lowering passes on the nvidia backend as Proton's
    ``InstrumentationHook.activate`` does, but without a device (for ahead-of-time compiles)."""
    from triton._C.libtriton import passes as triton_passes
    from triton._C.libtriton import proton as triton_proton
    from triton.backends import backends
    from triton.profiler import mode as pmode
    from triton.profiler.flags import flags
    from triton.profiler.hooks.instrumentation import Instrumentation, InstrumentationHook

    m = cfg.proton_mode()
    max_shared = max_shared_per_block(capability)  # what the lowering needs to know in AOT
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
    enable_triton_semantic()
    opts["instrumentation_mode"] = cfg.mode_string()
    with RegionHook(cfg), proton_lowering(cfg, capability), cache_and_mode(cfg, None):
        return triton.compile(src, target=target, options=opts)
