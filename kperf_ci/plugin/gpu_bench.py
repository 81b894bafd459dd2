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
    fn: Callable[..., Any],
    args: tuple,
    kwargs: dict,
    *,
    call_index: int,
) -> tuple[Any, list[VariantResult]]:
    import torch

    from kperf_ci.capture import gpu, instrument, timing

    def call() -> Any:
        return fn(*args, **kwargs)

    result, launches = gpu.capture_launches(call)
    torch.cuda.synchronize()
    if not launches:
        ks.warn(item.nodeid, "kperf.bench() launched no Triton kernel; nothing measured")
        return result, []

    params = _params(item)
    declared_bytes = marker.resolved(params, "bytes")
    cfg = timing.TimingConfig(
        budget_s=ks.settings.timing_budget_s,
        input_bytes=int(declared_bytes) if declared_bytes else None,
    )
    gpu_name = torch.cuda.get_device_name()
    suffix = f"#{call_index}" if call_index > 1 else ""
    shape = _shape_id(item)

    ab = None
    base_tree = ks.config.getoption("kperf_base_tree", default=None)
    if base_tree:
        from kperf_ci import ab as ab_mod

        base_fn = ab_mod.load_base_callable(fn, str(ks.config.rootpath), base_tree)
        if base_fn is not None:
            threshold = float(marker.thresholds.get("time", ks.settings.thresholds.get("time", 0.02)))
            ab = ab_mod.adaptive_ab(
                lambda: base_fn(*args, **kwargs),
                call,
                threshold=threshold,
                budget_s=ks.settings.timing_budget_s,
                cfg=cfg,
            )
    timed = timing.time_callable(call, cfg)
    for w in timed.warnings:
        ks.warn(item.nodeid, w)

    try:
        regions = instrument.instrument_callable_all(call, instrument.RegionConfig())
    except Exception as e:  # regions are extra evidence; the timing above stands without them
        regions = {}
        ks.warn(item.nodeid, f"instrumented launch failed: {type(e).__name__}: {str(e)[:200]}")

    kernels: dict[str, Any] = {}
    for info in launches:
        kernels.setdefault(info.name, info)
    single = len(kernels) == 1
    variants: list[VariantResult] = []
    plaus_metrics: list[Metric] = []
    try:
        from kperf_ci import plausibility

        flops = marker.resolved(params, "flops")
        p = plausibility.check(timed.median, device=gpu_name, bytes=declared_bytes, flops=flops)
        plaus_metrics = p.to_metrics()
        for problem in p.problems:
            ks.warn(item.nodeid, f"implausible timing: {problem}")
    except Exception as e:
        ks.warn(item.nodeid, f"plausibility check skipped: {e}")

    for name, info in kernels.items():
        spec, config = _launch_spec(info)
        kname = (marker.name if single else f"{marker.name}/{name}") + suffix
        key = VariantKey(
            kernel=kname,
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
            try:
                from kperf_ci.analysis import analysis_metrics

                metrics += analysis_metrics(
                    region, num_sms=torch.cuda.get_device_properties(0).multi_processor_count
                )
            except Exception as e:
                ks.warn(item.nodeid, f"{name}: analyses skipped: {type(e).__name__}: {e}")
        vr = VariantResult(
            key=key,
            metrics=metrics,
            tags=list(marker.tags),
            thresholds=marker.threshold_dict(),
            sass_hash=info.sass_hash,
        )
        if region is not None:
            ks.blobs.append((key.id, "timeline.npz", region.timeline_bytes()))
        variants.append(vr)

    # The timing belongs to the whole callable: on the kernel when it launched one, else on a
    # variant of its own named after the marker.
    timed_variant = variants[0] if single else None
    if timed_variant is None:
        names = canonical_json(sorted(kernels))
        timed_variant = VariantResult(
            key=VariantKey(
                kernel=marker.name + suffix,
                arch=gpu_name,
                spec=shape,
                config="callable:" + hashlib.sha256(names.encode()).hexdigest()[:8],
                test=item.nodeid,
            ),
            tags=list(marker.tags),
            thresholds=marker.threshold_dict(),
        )
        variants.insert(0, timed_variant)
    timed_variant.metrics += timed.to_metrics() + plaus_metrics
    timed_variant.samples = list(timed.samples_ms)
    timed_variant.artifacts["timing"] = canonical_json(
        {k: v for k, v in timed.to_dict().items() if k != "samples_ms"}
    )
    if ab is not None:
        timed_variant.metrics += ab.to_metrics()
        timed_variant.tags.append(ab.tag)
        ks.ab_results.append((item.nodeid, timed_variant.key.label(), ab.describe(), ab.verdict))
    return result, variants
