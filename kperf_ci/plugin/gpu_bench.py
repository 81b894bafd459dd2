"""GPU mode of the plugin: `kperf.bench` calls, and kernel replay of the launches a marked test
made without it. The test's marker and parameters become a :class:`kperf_ci.measure.measure.Request`,
:mod:`kperf_ci.measure.measure` (a callable) or :mod:`kperf_ci.measure.measure_replay` (the test's launches)
measures, and what it produced is handed to the session."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kperf_ci.capture.launches.ab_launch import ABPlan, results_path
from kperf_ci.capture.launches.replay import LaunchCopier, ReplayDevice
from kperf_ci.config import ABPolicy
from kperf_ci.measure import measure, measure_replay
from kperf_ci.model import VariantResult
from kperf_ci.plugin.marker import test_id

if TYPE_CHECKING:
    import pytest

    from kperf_ci.plugin.marker import KperfMarker
    from kperf_ci.plugin.session import KperfSession


def params_of(item: pytest.Item) -> dict[str, Any]:
    callspec = getattr(item, "callspec", None)
    return dict(callspec.params) if callspec is not None else {}


def shape_id(item: pytest.Item) -> str:
    """Timing depends on the problem size, which the specialization does not capture."""
    callspec = getattr(item, "callspec", None)
    return callspec.id if callspec is not None else ""


@functools.lru_cache(maxsize=4)
def plan_of(path: str) -> ABPlan:
    """kperf ab's plan, read once per process (it does not change while the pass runs)."""
    return ABPlan.load(path)


def plan_path(ks: KperfSession) -> str | None:
    return ks.config.getoption("kperf_ab_plan", default=None)


def request_for(ks: KperfSession, item: pytest.Item, marker: KperfMarker) -> measure.Request:
    params = params_of(item)
    s = ks.settings
    path = plan_path(ks)
    return measure.Request(
        nodeid=test_id(item),
        name=marker.name,
        tags=list(marker.tags),
        thresholds=marker.threshold_dict(),
        shape=shape_id(item),
        resolve=lambda key: marker.resolved(params, key),
        budget_s=s.timing_budget_s,
        base_tree=ks.config.getoption("kperf_base_tree", default=None),
        ab=ABPolicy.from_settings(s, marker.threshold_dict()),
        ab_plan=plan_of(path) if path else None,
        named=marker.named,
    )


def keep(ks: KperfSession, m: measure.Measurement) -> None:
    """What a measurement has to say goes to the session's summary and store, and under kperf
    ab's timing pass its A/B results also to the plan's results file."""
    ks.keep(m)
    path = plan_path(ks)
    if path and m.ab_results:
        # kperf ab reads why a launch was not timed from here (one line per result, appended:
        # xdist workers write to the same file)
        with open(results_path(path), "a", encoding="utf-8") as f:
            f.write("".join(json.dumps(list(r)) + "\n" for r in m.ab_results))


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
    """Measure one or several callables given the same arguments (see :func:`measure.bench`)."""
    m = measure.bench(request_for(ks, item, marker), fns, args, kwargs, call_index=call_index)
    keep(ks, m)
    return m.results, m.variants


def replay_on_gpu(
    ks: KperfSession, item: pytest.Item, marker: KperfMarker, copier: LaunchCopier
) -> list[VariantResult]:
    """Each distinct launch the test made, replayed on copies of its arguments and measured."""
    m = measure_replay.replay(request_for(ks, item, marker), copier, ReplayDevice.cuda())
    keep(ks, m)
    return m.variants
