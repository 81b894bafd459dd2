"""Kernel replay (GPU mode): each distinct launch a marked test made, replayed on copies of its
arguments (:mod:`kperf_ci.capture.launches.replay`) and measured as :func:`kperf_ci.measure.measure.bench`
measures a callable, with the same :class:`~kperf_ci.measure.measure.Request` and
:class:`~kperf_ci.measure.measure.Measurement`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from kperf_ci.capture.launches.ab_launch import (
    ABPlan,
    PlanEntry,
    base_call,
    describe_launch,
    head_pick,
    head_side,
)
from kperf_ci.capture.launches.best_config import Side, candidates
from kperf_ci.capture.launches.replay import LIMIT_SETTING, CapturedLaunch, LaunchCopier, ReplayDevice
from kperf_ci.capture.timing import engine
from kperf_ci.capture.timing.best_of import BestPair, best_pair
from kperf_ci.capture.timing.interleaved import ABResult, adaptive_ab
from kperf_ci.error_text import error_text
from kperf_ci.measure.measure import Measurement, Request, ab_stop_rule, build_variants, instrument_regions
from kperf_ci.metrics import timing_change
from kperf_ci.model import VariantResult, canonical_json


def replay(
    req: Request,
    copier: LaunchCopier,
    device: ReplayDevice,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> Measurement:
    """Every distinct launch the copier holds (:mod:`kperf_ci.capture.launches.replay`), replayed on its
    copies and measured as kperf.bench measures a callable: one variant each, with static
    metrics, timing, regions and analyses. The copies are freed at the end."""
    out = Measurement(req.nodeid)
    launches = list(copier.launches)
    left_out = dict(copier.left_out)
    # the test's declared bytes/flops describe all its launches: they size a lone launch only
    one = len(launches) == 1
    per_launch = req if one else dataclasses.replace(req, resolve=lambda key: None)
    declared = req.resolve("bytes") if one else None
    cfg = engine.TimingConfig(budget_s=req.budget_s, input_bytes=int(declared) if declared else None)
    t0 = clock()
    replayed = 0
    try:
        names = replay_names(req.name if req.named else None, launches)
        for launch, prefix in zip(launches, names, strict=True):
            if clock() - t0 >= copier.limits.seconds:
                left_out["seconds"] = len(launches) - replayed
                break
            if req.ab_plan is not None:
                out.variants += _replay_ab(per_launch, out, launch, prefix, cfg, device, req.ab_plan)
            else:
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


def replay_names(name: str | None, launches: list[CapturedLaunch]) -> list[str]:
    """Variant names: the Triton kernel's own name when the test names none (``name`` None: a
    suite marked with --kperf-all); else as kperf.bench gives them, the marker's name for a test
    with one kernel, "<name>/<kernel>" with several. A kernel launched with several shapes gets
    "#2", "#3", ..."""
    kernels = [launch.name for launch in launches]
    several = len(set(kernels)) > 1
    seen: dict[str, int] = {}
    out = []
    for k in kernels:
        seen[k] = seen.get(k, 0) + 1
        base = k if name is None else f"{name}/{k}" if several else name
        out.append(base if seen[k] == 1 else f"{base}#{seen[k]}")
    return out


def _replay_one(
    req: Request,
    out: Measurement,
    launch: CapturedLaunch,
    prefix: str,
    cfg: engine.TimingConfig,
    device: ReplayDevice,
) -> list[VariantResult]:
    call = launch.call()
    try:
        infos = device.capture(call)  # the first replay: compiled kernel, static metrics
    except Exception as e:  # a launch that cannot be replayed: say which, go on with the rest
        out.warn(f"replay of {launch.name} failed: {error_text(e)}")
        return []
    infos = [i for i in infos if i.name == launch.name] or infos
    if not infos:
        out.warn(f"replay of {launch.name} launched no kernel; not measured")
        return []
    timed = engine.time_callable(call, cfg, backend=device.backend)
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


def _not_timed(out: Measurement, req: Request, prefix: str, why: str) -> list[VariantResult]:
    out.warn(f"{prefix}: not timed A/B: {why}")
    out.ab_results.append((req.nodeid, prefix, f"not timed: {why}", "not-timed"))
    return []


def _replay_ab(
    req: Request,
    out: Measurement,
    launch: CapturedLaunch,
    prefix: str,
    cfg: engine.TimingConfig,
    device: ReplayDevice,
    plan: ABPlan,
) -> list[VariantResult]:
    """kperf ab's timing pass: a launch of a changed kernel timed interleaved against the base's
    own launch of it (capture/launches/ab_launch.py) on the same argument copies; launches the static
    passes found identical cost no GPU time. The verdict is the A/B's; the head's samples of it
    are the variant's ``time.*`` (no second timing loop), and no instrumented launch is made
    (the static changes say what moved)."""
    try:
        spec = describe_launch(launch)
    except Exception as e:
        return _not_timed(out, req, prefix, f"the launch could not be described ({type(e).__name__}: {e})")
    entry = plan.entry_for(req.nodeid, spec)
    changed = spec.qualname in plan.changed_sites(req.nodeid)
    if entry is None:
        if changed:
            return _not_timed(out, req, prefix, "the static pass recorded no launch of these arguments")
        return []
    if entry.status == "identical" and not changed and not plan.time_all:
        return []  # same code, options and work on both sides
    base_fn, note = base_call(launch, entry, req.base_tree or "")
    if base_fn is None:
        return _not_timed(out, req, prefix, note or "no base launch")
    if note:
        out.warn(f"{prefix}: {note}")
    head_fn = launch.call()
    try:
        base_fn()  # compiles the base version; a base launch that fails is said, not timed
        picks = {"base_pick": getattr(base_fn, "pick", lambda: None)(), "head_pick": head_pick(launch, entry)}
        search = _best_of_configs(launch, entry, base_fn, device)
        if search is not None:  # an autotuned call: best against best, each side's own configs
            base_fn, head_fn = search.base, search.head
        infos = device.capture(head_fn)
    except Exception as e:
        return _not_timed(out, req, prefix, f"replay failed: {error_text(e)}")
    infos = [i for i in infos if i.name == launch.name] or infos
    if not infos:
        return _not_timed(out, req, prefix, "the replay launched no kernel")

    rule = ab_stop_rule(req)

    def run_ab(b: Callable[[], object], h: Callable[[], object]) -> ABResult:
        return adaptive_ab(b, h, stop_rule=rule, backend=device.backend, budget_s=req.budget_s, cfg=cfg)

    ab = run_ab(base_fn, head_fn)
    if search is not None:
        search, ab, head_fn, infos = _look_again(
            search, ab, run_ab, device, launch.name, head_fn, infos, lambda w: out.warn(f"{prefix}: {w}")
        )
    variants = build_variants(
        req, out, prefix, head_fn, infos[:1], ab.head_timing(), ab, None,
        regions={}, gpu_name=device.gpu_name, sm_count=device.sm_count,
    )  # fmt: skip
    # each side's autotuner pick (None without one): a tuning difference is not the change;
    # the verdict of an autotuned call is best against best (the configs compared beside them)
    doc = {**_launch_doc(entry, launch), "note": note, **picks, **(search.doc() if search else {})}
    for v in variants:
        v.tags.append("replay")
        v.artifacts["launch"] = canonical_json(doc)
    if search is not None and search.failed:
        out.warn(f"{prefix}: configs that did not launch, left out: {'; '.join(search.failed)}")
    return variants


def _look_again(
    search: BestPair,
    ab: ABResult,
    run_ab: Callable[[Callable[[], object], Callable[[], object]], ABResult],
    device: ReplayDevice,
    name: str,
    head_fn: Callable[[], object],
    infos: list[Any],
    warn: Callable[[str], None],
) -> tuple[BestPair, ABResult, Callable[[], object], list[Any]]:
    """An autotuned call's :func:`second_look`; where the head's look stood, its config's kernel
    is captured again (:func:`capture_again`) so its static metrics go with the A/B."""
    search, ab = second_look(search, ab, run_ab, warn)
    if search.head is not head_fn:
        head_fn = search.head
        infos = capture_again(device, head_fn, name, infos, warn)
    return search, ab, head_fn, infos


def capture_again(
    device: ReplayDevice,
    head_fn: Callable[[], object],
    name: str,
    infos: list[Any],
    warn: Callable[[str], None],
) -> list[Any]:
    """The compiled kernel of the head's config that a second look kept (its static metrics go
    with the A/B that stood), else ``infos`` (the search's pick): with one warning where the
    capture raised (that config launched in the search and in its A/B, but a capture can still
    fail, and a timed launch is not thrown away for it); without one where it captured no kernel
    of that name, as before the guard."""
    try:
        return [i for i in device.capture(head_fn) if i.name == name] or infos
    except Exception as e:  # noqa: BLE001 - any failure of the capture, said and survived
        warn(
            f"the second look's config could not be captured again ({error_text(e)}); "
            "its static metrics are those of the search's pick"
        )
        return infos


def second_look(
    search: BestPair,
    ab: ABResult,
    run_ab: Callable[[Callable[[], object], Callable[[], object]], ABResult],
    warn: Callable[[str], None],
) -> tuple[BestPair, ABResult]:
    """Best against best, checked before a change is called: the side the A/B found slower is
    timed again with its other good config (:meth:`BestPair.alternative`, the winner's config
    where it has one) against the same winner, and the A/B where the losing side did better
    stands. A loss that holds on both looks is the side's; one that does not was the search's
    ranking noise (attorch on an H200, ``arith_only``: the head's num_warps=32, ranked first by
    the search at 1.600 us, read 1.696 us in the A/B, +8.0% against a truth of +4.0%). A second
    A/B that fails leaves the first standing, with one ``warn`` line: it is not thrown away, nor
    the test's other timed launches with it."""
    if timing_change(ab.verdict) == "same":  # unchanged or inconclusive: no change to check
        return search, ab
    loser = "head" if ab.ratio > 1 else "base"
    config = search.alternative(loser)
    if config is None:
        return search, ab
    other = search.with_best(loser, config)
    try:
        ab2 = run_ab(other.base, other.head)
    except Exception as e:  # noqa: BLE001 - any failure of the look, said and survived
        warn(f"the second look ({loser} {config}) failed ({error_text(e)}); the first A/B stands")
        return search, ab
    kept = ab2.ratio < ab.ratio if loser == "head" else ab2.ratio > ab.ratio
    look = {
        "side": loser,
        "config": config,
        "first": {"config": search.best(loser), "verdict": ab.verdict, "ratio": round(ab.ratio, 4)},
        "second": {"verdict": ab2.verdict, "ratio": round(ab2.ratio, 4)},
        "kept": "second" if kept else "first",
    }  # fmt: skip
    chosen, result, spent = (other, ab2, ab) if kept else (search, ab, ab2)
    # the look not kept is time the search spent: counted with it, so gpu_s stays whole
    seconds = search.seconds + spent.seconds + spent.warmup_seconds
    return dataclasses.replace(chosen, second_look=look, seconds=seconds), result


def compares_best_configs(entry: PlanEntry) -> bool:
    """Whether the launch is timed best against best: either side's kernel is autotuned. An
    identical launch too (``--time-all``, an A/A): its picks were each process's own tuning
    noise (attorch's A/A on an H100 at 1447316: 33 of 56 identical launches compared different
    picks, 4 false alarms up to +51%)."""
    return bool(entry.head.get("tuned")) or bool((entry.base or {}).get("tuned"))


def _best_of_configs(
    launch: CapturedLaunch, entry: PlanEntry, base_fn: object, device: ReplayDevice
) -> BestPair | None:
    """Each side's fastest surviving config when either side's kernel is autotuned."""
    if not compares_best_configs(entry) or not isinstance(base_fn, Side):
        return None
    head = head_side(launch, entry)
    if head is None:
        return None
    (b_calls, b_out), (h_calls, h_out) = candidates(base_fn), candidates(head)
    out = {"base": b_out, "head": h_out}
    return best_pair(b_calls, h_calls, backend=device.backend, clock=time.monotonic, left_out=out)


def _launch_doc(entry: PlanEntry, launch: CapturedLaunch) -> dict:
    """What the A/B document says of the launch: where the kernel lives, its arguments and grid
    on each side, what the static pass saw change."""
    base = entry.base or {}
    return {
        "site": entry.site,
        "args": entry.head.get("args") or {},
        "arg_order": entry.head.get("arg_order"),
        "grid": list(entry.head.get("grid") or launch.grid_seen or ()),
        "config": entry.head.get("config"),
        "base_args": base.get("args") or {},
        "base_arg_order": base.get("arg_order"),
        "base_grid": list(base.get("grid") or ()),
        "base_config": base.get("config"),
        "changes": entry.changes,
        "identical_launches": launch.count,
    }
