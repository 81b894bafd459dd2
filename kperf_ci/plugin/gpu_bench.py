"""`kperf.bench` in GPU mode: capture the launches, time the callable, instrument one launch.

Order matters for honest numbers: the first call compiles and records the launches; the timing
loop runs the plain kernels only; the instrumented launch (regions) runs last, alone, with its
own compiled binaries, so instrumentation never leaks into a timed sample.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kperf_ci.model import Metric, VariantKey, VariantResult, canonical_json

if TYPE_CHECKING:
    import pytest

    from kperf_ci.plugin.marker import KperfMarker
    from kperf_ci.plugin.session import KperfSession


def _params(item: pytest.Item) -> dict[str, Any]:
    callspec = getattr(item, "callspec", None)
    return dict(callspec.params) if callspec is not None else {}


def _shape_id(item: pytest.Item) -> str:
    """Timing depends on the problem size, which the specialization does not capture."""
    callspec = getattr(item, "callspec", None)
    return callspec.id if callspec is not None else ""


def _launch_spec(info: Any) -> tuple[str, str]:
    """(spec, config) of a captured launch, spelled as static mode spells them."""
    from kperf_ci.capture.record import describe_args

    md = getattr(info.kernel, "metadata", None)
    config = f"num_warps={getattr(md, 'num_warps', '?')},num_stages={getattr(md, 'num_stages', '?')}"
    try:
        if info.jit_fn is not None and info.args is not None:
            return describe_args(info.jit_fn, tuple(info.args), {})["spec"], config
    except Exception:  # fall back to the compiled hash: still stable for unchanged code
        pass
    return f"hash={getattr(md, 'hash', '?')[:16]}", config


def bench_on_gpu(
    ks: KperfSession,
    item: pytest.Item,
    marker: KperfMarker,
    fns: dict[str, Callable[..., Any]],
    args: tuple,
    kwargs: dict,
    *,
    call_index: int,
) -> tuple[dict[str, Any], list[VariantResult]]:
    """Measure one or several callables given the same arguments. Several are timed interleaved
    (A, B, ... then ..., B, A), so clock and thermal drift hit all of them alike."""
    import torch

    from kperf_ci.capture import gpu, timing

    calls = {name: (lambda f=f: f(*args, **kwargs)) for name, f in fns.items()}
    results: dict[str, Any] = {}
    launches: dict[str, list[Any]] = {}
    for name, call in calls.items():
        results[name], launches[name] = gpu.capture_launches(call)
    torch.cuda.synchronize()
    for name in [n for n, ls in launches.items() if not ls]:
        ks.warn(item.nodeid, f"kperf.bench: {name} launched no Triton kernel; nothing measured")
        del calls[name]
    if not calls:
        return results, []

    params = _params(item)
    declared_bytes = marker.resolved(params, "bytes")
    cfg = timing.TimingConfig(
        budget_s=ks.settings.timing_budget_s,
        input_bytes=int(declared_bytes) if declared_bytes else None,
    )
    ab = _ab_against_base_tree(ks, item, marker, fns, calls, args, kwargs, cfg) if len(fns) == 1 else None
    timed = timing.time_interleaved(calls, cfg)
    for name, t in timed.items():
        for w in t.warnings:
            ks.warn(item.nodeid, f"{name}: {w}" if len(calls) > 1 else w)

    variants: list[VariantResult] = []
    for name, call in calls.items():
        prefix = marker.name if len(fns) == 1 else f"{marker.name}[{name}]"
        if call_index > 1:
            prefix += f"#{call_index}"
        sequence = _launch_gaps(ks, item, call, len(launches[name]))
        variants += _variants(ks, item, marker, prefix, call, launches[name], timed[name], ab, sequence)
    return results, variants


#: calls profiled back to back for launch gaps, in one profiler session. The first is dropped:
#: on an H100 every session held a ~40-245 us host stall before the autotuned matmul's first
#: launch (examples/test_block.py) that the timing loop never showed.
GAP_CALLS = 6


def _launch_gaps(
    ks: KperfSession, item: pytest.Item, call: Callable[[], Any], n_launches: int
) -> tuple[list, list] | None:
    """(findings, kernel records) of a callable that launches several kernels (a model layer):
    the GPU's idle share over calls 2..GAP_CALLS issued back to back after timing (kernels
    warm), the steady state a model's forward pass sees."""
    if n_launches < 2:
        return None
    from kperf_ci.analysis import DEFAULT_THRESHOLDS, launch_gaps
    from kperf_ci.capture import gpu

    try:
        records = gpu.kernel_records(call, calls=GAP_CALLS)
    except Exception as e:  # gaps are extra evidence; the timing stands without them
        ks.warn(
            item.nodeid, f"launch gaps skipped: torch.profiler failed: {type(e).__name__}: {str(e)[:200]}"
        )
        return None
    per_call = split_calls(records, GAP_CALLS)
    if per_call is None or len(per_call[0]) < 2:
        ks.warn(
            item.nodeid,
            f"launch gaps skipped: {len(records)} kernel records in {GAP_CALLS} profiled calls do not "
            "split into equal calls of 2 or more kernels (the callable launches different kernels "
            "from call to call?)",
        )
        return None
    steady = [r for c in per_call[1:] for r in c]
    return launch_gaps(steady, threshold=DEFAULT_THRESHOLDS["launch_gap_fraction"]), steady


def split_calls(records: list, calls: int) -> list[list] | None:
    """Records of ``calls`` identical calls, one list per call; None unless each call ran the
    same kernels in the same order."""
    if not records or len(records) % calls:
        return None
    k = len(records) // calls
    out = [records[i * k : (i + 1) * k] for i in range(calls)]
    names = [r.name for r in out[0]]
    return out if all([r.name for r in c] == names for c in out) else None


def _ab_against_base_tree(ks, item, marker, fns, calls, args, kwargs, cfg):  # noqa: ANN001, ANN202
    base_tree = ks.config.getoption("kperf_base_tree", default=None)
    if not base_tree:
        return None
    from kperf_ci import ab as ab_mod

    (name,) = fns
    # head_root=None: the git work tree of the callable's own file (pytest's rootdir can be
    # above the repository when it has no pytest config)
    try:
        base_fn = ab_mod.load_base_callable(fns[name], None, base_tree)
    except Exception as e:  # the base tree's module does not import: say so, time nothing
        ks.warn(item.nodeid, f"A/B: the base version of {name} failed to import: {type(e).__name__}: {e}")
        ks.ab_results.append((item.nodeid, marker.name, "no base version (import failed)", "no-base"))
        return None
    if base_fn is None:
        what = getattr(fns[name], "__qualname__", None) or getattr(fns[name], "__name__", repr(fns[name]))
        ks.warn(
            item.nodeid,
            f"A/B: no base version of {what} in the base tree (a lambda or closure, a file or name new "
            "in head, or defined outside the repository); not timed against base",
        )
        ks.ab_results.append((item.nodeid, marker.name, "no base version found", "no-base"))
        return None
    threshold = float(marker.thresholds.get("time", ks.settings.ab_threshold))
    result = ab_mod.adaptive_ab(
        lambda: base_fn(*args, **kwargs),
        calls[name],
        threshold=threshold,
        budget_s=ks.settings.timing_budget_s,
        precision=ks.settings.ab_precision,
        floor=ks.settings.ab_floor_ms,
        cfg=cfg,
    )
    from kperf_ci.capture import instrument

    try:  # one instrumented launch of the base version: its regions, for "what moved"
        regions = instrument.instrument_callable_all(
            lambda: base_fn(*args, **kwargs), instrument.RegionConfig()
        )
        result.base_regions = {k: {m.name: m.value for m in r.to_metrics()} for k, r in regions.items()}
    except Exception as e:  # the verdict stands without them
        ks.warn(item.nodeid, f"A/B: instrumented launch of the base version failed: {type(e).__name__}: {e}")
    return result


def _variants(
    ks: KperfSession,
    item: pytest.Item,
    marker: KperfMarker,
    prefix: str,
    call: Callable[[], Any],
    launches: list[Any],
    timed: Any,
    ab: Any,
    sequence: tuple[list, list] | None = None,
) -> list[VariantResult]:
    """One variant per distinct kernel the callable launched, carrying its static and region
    metrics and its analyses' findings; the callable's timing (and the launch gaps of its
    kernels, ``sequence``) goes on its kernel when it launched one, else on a variant of its
    own."""
    import torch

    from kperf_ci.capture import instrument

    try:
        regions = instrument.instrument_callable_all(call, instrument.RegionConfig())
    except Exception as e:  # regions are extra evidence; the timing stands without them
        regions = {}
        ks.warn(item.nodeid, f"instrumented launch failed: {type(e).__name__}: {str(e)[:200]}")

    params = _params(item)
    gpu_name = torch.cuda.get_device_name()
    shape = _shape_id(item)
    kernels: dict[str, Any] = {}
    for info in launches:
        kernels.setdefault(info.name, info)
    single = len(kernels) == 1
    variants: list[VariantResult] = []
    for name, info in kernels.items():
        spec, config = _launch_spec(info)
        key = VariantKey(
            kernel=prefix if single else f"{prefix}/{name}",
            arch=gpu_name,
            spec=f"{spec} @ {shape}" if shape else spec,
            config=config,
            test=item.nodeid,
            source=getattr(getattr(info.jit_fn, "fn", None), "__module__", "") + f"::{name}",
        )
        metrics = list(info.static)
        region = regions.get(name)
        if region is not None:
            metrics += region.to_metrics()
            metrics.append(Metric("region.dropped_events", float(region.dropped_events), "count", "region"))
            for w in region.warnings:
                ks.warn(item.nodeid, f"{name}: {w}")
            findings = _region_findings(ks, item, name, info, region)
            ks.blobs.append((key.id, "timeline.npz", region.timeline_bytes()))
        else:
            findings = []
        variant = VariantResult(
            key=key,
            metrics=metrics,
            tags=list(marker.tags),
            thresholds=marker.threshold_dict(),
            sass_hash=info.sass_hash,
        )
        _attach_findings(ks, item, variant, findings)
        variants.append(variant)

    timed_variant = variants[0] if single else None
    if timed_variant is None:
        names = canonical_json(sorted(kernels))
        timed_variant = VariantResult(
            key=VariantKey(
                kernel=prefix,
                arch=gpu_name,
                spec=shape,
                config="callable:" + hashlib.sha256(names.encode()).hexdigest()[:8],
                test=item.nodeid,
            ),
            tags=list(marker.tags),
            thresholds=marker.threshold_dict(),
        )
        variants.insert(0, timed_variant)
    timed_variant.metrics += timed.to_metrics() + _plausibility(ks, item, marker, params, timed, gpu_name)
    if sequence:
        from kperf_ci.analysis.launch_gaps import records_to_json

        findings, records = sequence
        _attach_findings(ks, item, timed_variant, findings)
        timed_variant.artifacts["kernel_records"] = records_to_json(records)
    timed_variant.samples = list(timed.samples_ms)
    timed_variant.artifacts["timing"] = canonical_json(
        {k: v for k, v in timed.to_dict().items() if k != "samples_ms"}
    )
    if ab is not None:
        timed_variant.metrics += ab.to_metrics()
        timed_variant.tags.append(ab.tag)
        # both sides' samples, so a report can show the distributions the verdict was taken on
        timed_variant.artifacts["ab"] = canonical_json(
            {
                "base_ms": ab.base_ms,
                "head_ms": ab.head_ms,
                "head_first": ab.head_first,
                "method": ab.method,
                "stopped_by": ab.stopped_by,
                "warnings": ab.warnings,
            }
        )
        ks.ab_results.append((item.nodeid, timed_variant.key.label(), ab.describe(), ab.verdict))
    return variants


def _region_findings(ks: KperfSession, item: pytest.Item, name: str, info: Any, region: Any) -> list:
    """Every intra-kernel analysis of the instrumented launch. Wave quantization is sized with
    the plain kernel's registers, shared memory and warps (what runs in production); where the
    instrumented timeline shows another occupancy, its finding says so."""
    try:
        import torch

        from kperf_ci.analysis import LaunchConfig, analyze_timeline, from_region_result
        from kperf_ci.capture.gpu import arch_of

        sms = torch.cuda.get_device_properties(0).multi_processor_count
        launch = None
        if info.n_ctas and info.num_warps:
            launch = LaunchConfig(
                grid=int(info.n_ctas),
                num_warps=int(info.num_warps),
                registers=info.n_regs,
                shared_bytes=info.shared,
                arch=arch_of(info.kernel) or "sm_90",
                sm_count=sms,
            )
        return analyze_timeline(from_region_result(region, num_sms=sms), launch=launch, num_sms=sms)
    except Exception as e:
        ks.warn(item.nodeid, f"{name}: analyses skipped: {type(e).__name__}: {e}")
        return []


def _attach_findings(ks: KperfSession, item: pytest.Item, variant: VariantResult, findings: list) -> None:
    """Findings become ``analysis.*`` metrics (compared and gated like any metric) and the
    variant's ``findings`` artifact (explanations and suggestions, for the reports)."""
    if not findings:
        return
    from kperf_ci.analysis.findings import ARTIFACT, findings_from_json, findings_to_json, flagged, to_metrics

    variant.metrics += to_metrics(findings)
    old = findings_from_json(variant.artifacts[ARTIFACT]) if ARTIFACT in variant.artifacts else []
    variant.artifacts[ARTIFACT] = findings_to_json(old + list(findings))
    ks.findings.extend((item.nodeid, variant.key.label(), f) for f in flagged(findings))


def _plausibility(ks, item, marker, params, timed, gpu_name) -> list[Metric]:  # noqa: ANN001
    """Achieved bandwidth / FLOP/s; a result above the device's peak is a measurement error."""
    try:
        from kperf_ci import plausibility

        p = plausibility.check(
            timed.median,
            device=gpu_name,
            bytes=marker.resolved(params, "bytes"),
            flops=marker.resolved(params, "flops"),
        )
    except Exception as e:
        ks.warn(item.nodeid, f"plausibility check skipped: {e}")
        return []
    for problem in p.problems:
        ks.warn(item.nodeid, f"implausible timing: {problem}")
    return p.to_metrics()
