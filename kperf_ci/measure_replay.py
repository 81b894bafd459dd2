"""Kernel replay (GPU mode): each distinct launch a marked test made, replayed on copies of its
arguments (:mod:`kperf_ci.capture.replay`) and measured as :func:`kperf_ci.measure.bench`
measures a callable, with the same :class:`~kperf_ci.measure.Request` and
:class:`~kperf_ci.measure.Measurement`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from kperf_ci.capture import timing
from kperf_ci.capture.replay import LIMIT_SETTING, CapturedLaunch, LaunchCopier, ReplayDevice
from kperf_ci.measure import Measurement, Request, build_variants, instrument_regions
from kperf_ci.model import VariantResult, canonical_json


def replay(
    req: Request,
    copier: LaunchCopier,
    device: ReplayDevice,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> Measurement:
    """Every distinct launch the copier holds (:mod:`kperf_ci.capture.replay`), replayed on its
    copies and measured as kperf.bench measures a callable: one variant each, with static
    metrics, timing, regions and analyses. The copies are freed at the end."""
    out = Measurement(req.nodeid)
    launches = list(copier.launches)
    left_out = dict(copier.left_out)
    # the test's declared bytes/flops describe all its launches: they size a lone launch only
    one = len(launches) == 1
    per_launch = req if one else dataclasses.replace(req, resolve=lambda key: None)
    declared = req.resolve("bytes") if one else None
    cfg = timing.TimingConfig(budget_s=req.budget_s, input_bytes=int(declared) if declared else None)
    t0 = clock()
    replayed = 0
    try:
        for launch, prefix in zip(launches, replay_names(req.name, launches), strict=True):
            if clock() - t0 >= copier.limits.seconds:
                left_out["seconds"] = len(launches) - replayed
                break
            out.variants += _replay_one(per_launch, out, launch, prefix, cfg, device)
            replayed += 1
    finally:
        copier.clear()  # device memory: freed as soon as the test is measured
    for limit, n in left_out.items():
        out.warn(
            f"replay: {n} launch(es) not replayed: the {limit} limit was reached "
            f"(setting {LIMIT_SETTING[limit]}; {replayed} distinct launch(es) replayed)"
        )
    return out


def replay_names(name: str, launches: list[CapturedLaunch]) -> list[str]:
    """Variant names as kperf.bench gives them: the marker's name for a test with one kernel,
    "<name>/<kernel>" with several; a kernel launched with several shapes gets "#2", "#3", ..."""
    kernels = [launch.name for launch in launches]
    several = len(set(kernels)) > 1
    seen: dict[str, int] = {}
    out = []
    for k in kernels:
        seen[k] = seen.get(k, 0) + 1
        base = f"{name}/{k}" if several else name
        out.append(base if seen[k] == 1 else f"{base}#{seen[k]}")
    return out


def _replay_one(
    req: Request,
    out: Measurement,
    launch: CapturedLaunch,
    prefix: str,
    cfg: timing.TimingConfig,
    device: ReplayDevice,
) -> list[VariantResult]:
    call = launch.call()
    try:
        infos = device.capture(call)  # the first replay: compiled kernel, static metrics
    except Exception as e:  # a launch that cannot be replayed: say which, go on with the rest
        out.warn(f"replay of {launch.name} failed: {type(e).__name__}: {str(e)[:200]}")
        return []
    infos = [i for i in infos if i.name == launch.name] or infos
    if not infos:
        out.warn(f"replay of {launch.name} launched no kernel; not measured")
        return []
    timed = timing.time_callable(call, cfg, backend=device.backend)
    for w in timed.warnings:
        out.warn(f"{launch.name}: {w}")
    regions = device.regions(out, call) if device.regions is not None else instrument_regions(out, call)
    variants = build_variants(
        req, out, prefix, call, infos[:1], timed, None, None,
        regions=regions, gpu_name=device.gpu_name, sm_count=device.sm_count,
    )  # fmt: skip
    grid = launch.grid_seen or infos[0].grid
    for v in variants:
        v.tags.append("replay")
        v.artifacts["replay"] = canonical_json(
            {"identical_launches": launch.count, "grid": list(grid or ()), "copy_bytes": launch.copy_bytes}
        )
    return variants
