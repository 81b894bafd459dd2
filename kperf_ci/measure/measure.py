"""GPU-mode measurement: of one callable (:func:`bench`: capture its launches, time it,
instrument one launch, run the analyses and the plausibility check, and with a base tree time it
against its base version); each launch a test made, replayed on copies of its arguments, is
measured the same way by :func:`kperf_ci.measure.measure_replay.replay`. Plain inputs and plain results,
no pytest objects, as static mode lives in ``capture/static/compile.py``: the plugin is the caller.

Order matters for honest numbers: the first call compiles and records the launches; the timing
loop runs the plain kernels only; the instrumented launch (regions) runs last, alone, with its
own compiled binaries, so instrumentation never leaks into a timed sample.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kperf_ci.analysis import (
    FLAG_THRESHOLDS,
    LaunchConfig,
    analyze_timeline,
    from_region_result,
    launch_gaps,
)
from kperf_ci.analysis.findings import ARTIFACT, findings_from_json, findings_to_json, flagged, to_metrics
from kperf_ci.capture.launches import gpu
from kperf_ci.capture.launches.base_tree import load_base_callable
from kperf_ci.capture.regions import instrument
from kperf_ci.capture.static.record import describe_args
from kperf_ci.capture.timing import engine
from kperf_ci.capture.timing.interleaved import adaptive_ab
from kperf_ci.config import ABPolicy, Settings
from kperf_ci.error_text import error_text
from kperf_ci.judge import plausibility
from kperf_ci.judge.ab import stop_rule
from kperf_ci.metrics import metric
from kperf_ci.model import Metric, VariantKey, VariantResult, canonical_json
from kperf_ci.sample_stats import StopRule
from kperf_ci.traces.kernel_records import records_to_json


@dataclass
class Request:
    """What one measurement needs to know about the test it serves, in plain values."""

    nodeid: str
    name: str  # the marker's name: variants are "<name>", "<name>/<kernel>", "<name>[<key>]"
    tags: list[str] = field(default_factory=list)
    thresholds: dict[str, Any] = field(default_factory=dict)  # stored with each variant
    shape: str = ""  # the test's parameter id: timing depends on the problem size
    # "bytes" / "flops" -> the declared amount for this test (may raise: a callable of the
    # test's parameters); None when not declared
    resolve: Callable[[str], float | None] = lambda key: None
    # the defaults are the settings' own (config.Settings): one home for each
    budget_s: float = Settings.timing_budget_s
    base_tree: str | None = None
    # the A/B verdict's knobs, whole (config.ABPolicy.from_settings); None where nothing is timed A/B
    ab: ABPolicy | None = None
    # kperf ab's timing pass on tests without kperf.bench: each changed launch is timed against
    # the base's own launch (capture/launches/ab_launch.py); None outside it
    ab_plan: Any = None
    # the marker named the kernel; else a replayed launch is named by its Triton kernel
    named: bool = True
    # extras beyond timing and static metrics: one instrumented launch (regions) and, for a
    # callable of several kernels, the launch gaps; a benchmark script's sweep skips both
    regions: bool = True
    gaps: bool = True


@dataclass
class Measurement:
    """What a measurement produced and what it has to say, for the caller to keep or print."""

    nodeid: str
    results: dict[str, Any] = field(default_factory=dict)  # each callable's return value
    variants: list[VariantResult] = field(default_factory=list)
    warnings: list[tuple[str, str]] = field(default_factory=list)  # (nodeid, one line)
    blobs: list[tuple[str, str, bytes]] = field(default_factory=list)  # (variant id, name, data)
    # (nodeid, label, description, verdict[, variant id]): the id, for a timed variant, lets kperf
    # ab tell a launch whose identical variant another test stored (the store keeps one per run)
    ab_results: list[tuple[str, ...]] = field(default_factory=list)
    findings: list[tuple[str, str, Any]] = field(default_factory=list)  # (nodeid, variant, Finding)

    def warn(self, message: str) -> None:
        self.warnings.append((self.nodeid, message))


def launch_spec(info: Any) -> tuple[str, str]:
    """(spec, config) of a captured launch, spelled as static mode spells them."""
    md = getattr(info.kernel, "metadata", None)
    config = f"num_warps={getattr(md, 'num_warps', '?')},num_stages={getattr(md, 'num_stages', '?')}"
    try:
        if info.jit_fn is not None and info.args is not None:
            return describe_args(info.jit_fn, tuple(info.args), {})["spec"], config
    except Exception:  # fall back to the compiled hash: still stable for unchanged code
        pass
    return f"hash={(getattr(md, 'hash', None) or '?')[:16]}", config


def bench(
    req: Request,
    fns: dict[str, Callable[..., Any]],
    args: tuple,
    kwargs: dict,
    *,
    call_index: int = 1,
    cfg: engine.TimingConfig | None = None,
) -> Measurement:
    """Measure one or several callables given the same arguments. Several are timed interleaved
    (A, B, ... then ..., B, A), so clock and thermal drift hit all of them alike. ``cfg``: the
    timing settings (default: ``req.budget_s`` and the declared bytes)."""
    import torch

    out = Measurement(req.nodeid)
    calls = {name: (lambda f=f: f(*args, **kwargs)) for name, f in fns.items()}
    launches: dict[str, list[Any]] = {}
    for name, call in calls.items():
        out.results[name], launches[name] = gpu.capture_launches(call)
    torch.cuda.synchronize()
    for name in [n for n, ls in launches.items() if not ls]:
        out.warn(f"kperf.bench: {name} launched no Triton kernel; nothing measured")
        del calls[name]
    if not calls:
        return out

    if cfg is None:
        declared_bytes = req.resolve("bytes")
        cfg = engine.TimingConfig(
            budget_s=req.budget_s, input_bytes=int(declared_bytes) if declared_bytes else None
        )
    ab = ab_against_base_tree(req, out, fns, calls, args, kwargs, cfg) if len(fns) == 1 else None
    timed = engine.time_interleaved(calls, cfg)
    for name, t in timed.items():
        for w in t.warnings:
            out.warn(f"{name}: {w}" if len(calls) > 1 else w)

    for name, call in calls.items():
        kernels = {info.name for info in launches[name]}
        # a test that names nothing: its one kernel's own name (as static mode names it)
        own = req.name if req.named or len(kernels) != 1 else next(iter(kernels))
        prefix = own if len(fns) == 1 else f"{own}[{name}]"
        if call_index > 1:
            prefix += f"#{call_index}"
        sequence = measure_launch_gaps(out, call, len(launches[name])) if req.gaps else None
        regions = None if req.regions else {}
        out.variants += build_variants(
            req, out, prefix, call, launches[name], timed[name], ab, sequence, regions=regions
        )
    return out


#: calls profiled back to back for launch gaps, in one profiler session. The first is dropped:
#: on an H100 every session held a ~40-245 us host stall before the autotuned matmul's first
#: launch (examples/test_block.py) that the timing loop never showed.
GAP_CALLS = 6


def measure_launch_gaps(
    out: Measurement, call: Callable[[], Any], n_launches: int
) -> tuple[list, list] | None:
    """(findings, kernel records) of a callable that launches several kernels (a model layer):
    the GPU's idle share over calls 2..GAP_CALLS issued back to back after timing (kernels
    warm), the steady state a model's forward pass sees."""
    if n_launches < 2:
        return None
    try:
        records = gpu.kernel_records(call, calls=GAP_CALLS)
    except Exception as e:  # gaps are extra evidence; the timing stands without them
        out.warn(f"launch gaps skipped: torch.profiler failed: {error_text(e)}")
        return None
    per_call = split_calls(records, GAP_CALLS)
    if per_call is None or len(per_call[0]) < 2:
        out.warn(
            f"launch gaps skipped: {len(records)} kernel records in {GAP_CALLS} profiled calls do not "
            "split into equal calls of 2 or more kernels (the callable launches different kernels "
            "from call to call?)",
        )
        return None
    steady = [r for c in per_call[1:] for r in c]
    return launch_gaps(steady, threshold=FLAG_THRESHOLDS["launch_gap_fraction"]), steady


def split_calls(records: list, calls: int) -> list[list] | None:
    """Records of ``calls`` identical calls, one list per call; None unless each call ran the
    same kernels in the same order."""
    if not records or len(records) % calls:
        return None
    k = len(records) // calls
    out = [records[i * k : (i + 1) * k] for i in range(calls)]
    names = [r.name for r in out[0]]
    return out if all([r.name for r in c] == names for c in out) else None


def ab_against_base_tree(
    req: Request,
    out: Measurement,
    fns: dict[str, Callable[..., Any]],
    calls: dict[str, Callable[[], Any]],
    args: tuple,
    kwargs: dict,
    cfg: engine.TimingConfig,
) -> Any:
    """The callable timed against its version in ``req.base_tree`` (an ``ab.AbResult``), or
    None without a base tree or without a base version (said in a warning)."""
    if not req.base_tree:
        return None
    (name,) = fns
    # head_root=None: the git work tree of the callable's own file (pytest's rootdir can be
    # above the repository when it has no pytest config)
    try:
        base_fn = load_base_callable(fns[name], None, req.base_tree)
    except Exception as e:  # the base tree's module does not import: say so, time nothing
        out.warn(f"A/B: the base version of {name} failed to import: {type(e).__name__}: {e}")
        out.ab_results.append((req.nodeid, req.name, "no base version (import failed)", "no-base"))
        return None
    if base_fn is None:
        what = getattr(fns[name], "__qualname__", None) or getattr(fns[name], "__name__", repr(fns[name]))
        out.warn(
            f"A/B: no base version of {what} in the base tree (a lambda or closure, a file or name new "
            "in head, or defined outside the repository); not timed against base",
        )
        out.ab_results.append((req.nodeid, req.name, "no base version found", "no-base"))
        return None
    result = adaptive_ab(
        lambda: base_fn(*args, **kwargs),
        calls[name],
        stop_rule=ab_stop_rule(req),
        budget_s=req.budget_s,
        cfg=cfg,
    )
    try:  # one instrumented launch of the base version: its regions, for "what moved"
        regions = instrument.instrument_callable_all(
            lambda: base_fn(*args, **kwargs), instrument.RegionConfig()
        )
        result.base_regions = {k: {m.name: m.value for m in r.to_metrics()} for k, r in regions.items()}
    except Exception as e:  # the verdict stands without them
        out.warn(f"A/B: instrumented launch of the base version failed: {type(e).__name__}: {e}")
    return result


def ab_stop_rule(req: Request) -> StopRule:
    """The judge's stop rule on the request's A/B policy, handed whole to the timing loop."""
    if req.ab is None:
        raise ValueError(f"{req.nodeid}: an A/B needs the run's policy (Request.ab: config.ABPolicy)")
    return stop_rule(req.ab)


def instrument_regions(out: Measurement, call: Callable[[], Any]) -> dict[str, Any]:
    """One instrumented run of ``call``: regions per kernel name ({} when it failed, said)."""
    try:
        return instrument.instrument_callable_all(call, instrument.RegionConfig())
    except Exception as e:  # regions are extra evidence; the timing stands without them
        out.warn(f"instrumented launch failed: {error_text(e)}")
        return {}


def build_variants(
    req: Request,
    out: Measurement,
    prefix: str,
    call: Callable[[], Any],
    launches: list[Any],
    timed: Any,
    ab: Any,
    sequence: tuple[list, list] | None = None,
    *,
    regions: dict[str, Any] | None = None,
    gpu_name: str | None = None,
    sm_count: int | None = None,
) -> list[VariantResult]:
    """One variant per distinct kernel the callable launched, carrying its static and region
    metrics and its analyses' findings; the callable's timing (and the launch gaps of its
    kernels, ``sequence``) goes on its kernel when it launched one, else on a variant of its
    own. ``regions``, ``gpu_name`` and ``sm_count`` default to an instrumented run of ``call``
    and the current device's (given by callers that already have them, and by CPU tests)."""
    if regions is None:
        regions = instrument_regions(out, call)
    if gpu_name is None or sm_count is None:
        import torch

        gpu_name = gpu_name or torch.cuda.get_device_name()
        sm_count = sm_count or torch.cuda.get_device_properties(0).multi_processor_count
    kernels: dict[str, Any] = {}
    for info in launches:
        kernels.setdefault(info.name, info)
    single = len(kernels) == 1
    variants = [
        _kernel_variant(
            req, out, prefix if single else f"{prefix}/{name}", name, info, regions, gpu_name, sm_count
        )
        for name, info in kernels.items()
    ]
    timed_variant = variants[0] if single else None
    if timed_variant is None:
        names = canonical_json(sorted(kernels))
        timed_variant = VariantResult(
            key=VariantKey(
                kernel=prefix,
                arch=gpu_name,
                spec=req.shape,
                config="callable:" + hashlib.sha256(names.encode()).hexdigest()[:8],
                test=req.nodeid,
            ),
            tags=list(req.tags),
            thresholds=dict(req.thresholds),
        )
        variants.insert(0, timed_variant)
    _attach_timing(req, out, timed_variant, timed, ab, sequence, gpu_name)
    return variants


def _kernel_variant(
    req: Request,
    out: Measurement,
    kernel: str,
    name: str,
    info: Any,
    regions: dict[str, Any],
    gpu_name: str,
    sm_count: int,
) -> VariantResult:
    """The variant of one launched kernel: its static metrics, and from its instrumented run
    (when there was one) its region metrics, timeline blob and analyses' findings."""
    spec, config = launch_spec(info)
    key = VariantKey(
        kernel=kernel,
        arch=gpu_name,
        spec=f"{spec} @ {req.shape}" if req.shape else spec,
        config=config,
        test=req.nodeid,
        source=getattr(getattr(info.jit_fn, "fn", None), "__module__", "") + f"::{name}",
    )
    metrics = list(info.static)
    region = regions.get(name)
    if region is not None:
        metrics += region.to_metrics()
        metrics.append(metric("region.dropped_events", region.dropped_events))
        for w in region.warnings:
            out.warn(f"{name}: {w}")
        findings = region_findings(out, name, info, region, sm_count)
        out.blobs.append((key.id, "timeline.npz", region.timeline_bytes()))
    else:
        findings = []
    variant = VariantResult(
        key=key,
        metrics=metrics,
        tags=list(req.tags),
        thresholds=dict(req.thresholds),
        sass_hash=info.sass_hash,
    )
    attach_findings(out, variant, findings)
    return variant


def _attach_timing(
    req: Request,
    out: Measurement,
    timed_variant: VariantResult,
    timed: Any,
    ab: Any,
    sequence: tuple[list, list] | None,
    gpu_name: str,
) -> None:
    """The callable's timing on its variant: metrics, plausibility, samples and timing record,
    the launch-sequence findings and kernel records, and the A/B result with both sides'
    samples when it was timed A/B."""
    timed_variant.metrics += timed.to_metrics() + plausibility_metrics(req, out, timed, gpu_name)
    if sequence:
        findings, records = sequence
        attach_findings(out, timed_variant, findings)
        timed_variant.artifacts["kernel_records"] = records_to_json(records)
    timed_variant.samples = list(timed.samples_ms)
    timed_variant.artifacts["timing"] = canonical_json(
        {k: v for k, v in timed.to_dict().items() if k != "samples_ms"}
    )
    if ab is not None:
        timed_variant.metrics += ab.to_metrics()
        # the verdict as a field of its own (never a tag to parse), and both sides' samples, so a
        # report can show the distributions the verdict was taken on
        timed_variant.artifacts["ab"] = canonical_json(
            {
                "verdict": ab.verdict,
                "base_ms": ab.base_ms,
                "head_ms": ab.head_ms,
                "head_first": ab.head_first,
                "method": ab.method,
                "stopped_by": ab.stopped_by,
                "warnings": ab.warnings,
            }
        )
        out.ab_results.append(
            (req.nodeid, timed_variant.key.label(), ab.describe(), ab.verdict, timed_variant.key.id)
        )


def region_findings(out: Measurement, name: str, info: Any, region: Any, sm_count: int) -> list:
    """Every intra-kernel analysis of the instrumented launch. Wave quantization is sized with
    the plain kernel's registers, shared memory and warps (what runs in production); where the
    instrumented timeline shows another occupancy, its finding says so."""
    try:
        launch = None
        if info.n_ctas and info.num_warps:
            launch = LaunchConfig(
                grid=int(info.n_ctas),
                num_warps=int(info.num_warps),
                registers=info.n_regs,
                shared_bytes=info.shared,
                arch=gpu.arch_of(info.kernel) or "sm_90",
                sm_count=sm_count,
            )
        timeline = from_region_result(region, num_sms=sm_count)
        return analyze_timeline(timeline, launch=launch, num_sms=sm_count)
    except Exception as e:
        out.warn(f"{name}: analyses skipped: {type(e).__name__}: {e}")
        return []


def attach_findings(out: Measurement, variant: VariantResult, findings: list) -> None:
    """Findings become ``analysis.*`` metrics (compared and gated like any metric) and the
    variant's ``findings`` artifact (explanations and suggestions, for the reports)."""
    if not findings:
        return
    variant.metrics += to_metrics(findings)
    old = findings_from_json(variant.artifacts[ARTIFACT]) if ARTIFACT in variant.artifacts else []
    variant.artifacts[ARTIFACT] = findings_to_json(old + list(findings))
    out.findings.extend((out.nodeid, variant.key.label(), f) for f in flagged(findings))


def plausibility_metrics(req: Request, out: Measurement, timed: Any, gpu_name: str) -> list[Metric]:
    """Achieved bandwidth / FLOP/s; a result above the device's peak is a measurement error."""
    try:
        p = plausibility.check(
            timed.median, device=gpu_name, bytes=req.resolve("bytes"), flops=req.resolve("flops")
        )
    except Exception as e:
        out.warn(f"plausibility check skipped: {e}")
        return []
    for problem in p.problems:
        out.warn(f"implausible timing: {problem}")
    return p.to_metrics()
