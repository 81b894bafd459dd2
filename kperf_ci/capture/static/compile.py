"""Static mode: recorded launches -> compiled variants per arch -> static metrics.

    launches = recorder.launches                      # from kperf_ci.capture.static.record
    results = compile_variants(launches, ["sm_80", "sm_90"], jobs=2)

One :class:`~kperf_ci.model.VariantResult` per unique variant and arch, in first-seen order.
Launches that compile to the same variant (same kernel source and qualname, specialization
``spec`` and launch ``config``) are compiled once; the first test that produced the variant is
kept as ``key.test``, tags are merged. A launch that cannot be compiled (not importable, a
compile error, a timeout) gives a result with ``error`` set and no metrics, never an exception.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kperf_ci.capture.static.aot import WorkerPool
from kperf_ci.capture.static.autotune import over_shared_limit
from kperf_ci.capture.static.progress import compile_progress
from kperf_ci.capture.static.record import LaunchSpec
from kperf_ci.capture.static.repo import git_toplevel
from kperf_ci.hardware import normalize_arch
from kperf_ci.model import Metric, VariantKey, VariantResult


def source_location(launch: LaunchSpec, rootdir: str | None = None) -> str:
    """ "examples/kernels/add.py::add_kernel": relative to the git work tree that holds the file
    (the same in a base worktree, a head checkout, and from whatever directory pytest ran), else
    to rootdir when inside it."""
    path = launch.source_file
    if path:
        top = git_toplevel(os.path.dirname(os.path.abspath(path)))
        root = str(top) if top is not None else os.path.abspath(rootdir or os.getcwd())
        try:
            rel = os.path.relpath(path, root)
            if not rel.startswith(".."):
                path = rel
        except ValueError:
            pass
        path = path.replace(os.sep, "/")
    return f"{path}::{launch.qualname}" if path else launch.qualname


def variant_key(launch: LaunchSpec, arch: str, rootdir: str | None = None) -> VariantKey:
    return VariantKey(
        kernel=launch.display_name,
        arch=normalize_arch(arch),
        spec=launch.spec,
        config=launch.config,
        test=launch.test,
        source=source_location(launch, rootdir),
    )


def unique_launches(launches: Iterable[LaunchSpec]) -> list[tuple[LaunchSpec, list[str]]]:
    """[(representative launch, merged tags)] with one entry per variant identity + name."""
    groups: dict[tuple[str, str], tuple[LaunchSpec, list[str]]] = {}
    for ls in launches:
        k = (ls.identity, ls.display_name)
        if k not in groups:
            groups[k] = (ls, list(dict.fromkeys(ls.tags)))
        else:
            rep, tags = groups[k]
            for t in ls.tags:
                if t not in tags:
                    tags.append(t)
            if not rep.thresholds and ls.thresholds:
                groups[k] = (_with(rep, thresholds=ls.thresholds), tags)
    return list(groups.values())


def compile_request(
    ls: LaunchSpec, arch: str, archs: list[str], artifacts: tuple[str, ...]
) -> dict[str, Any]:
    """The worker request that compiles ``ls`` for ``arch`` (normalized, as ``archs``): the
    same dict whether it is sent at the end of the session or as soon as the launch is seen."""
    # device_arch: the device user modules see at import (fake_device), the same for every
    # request, so that a module imported once reads the same everywhere
    return {
        "op": "compile",
        "launch": ls.to_dict(),
        "arch": arch,
        "artifacts": list(artifacts),
        "device_arch": archs[0],
    }


class Compiler(Protocol):
    """What compiles the requests: a :class:`WorkerPool`, or one that started some of them
    already (:class:`kperf_ci.capture.static.ahead.CompileAhead`)."""

    def map(
        self,
        requests: list[dict[str, Any]],
        timeout: float = ...,
        on_done: Callable[[dict[str, Any]], None] | None = ...,
    ) -> list[dict[str, Any]]: ...

    def close(self, kill: bool = False) -> None: ...


def _with(ls: LaunchSpec, **changes: Any) -> LaunchSpec:
    from dataclasses import replace

    return replace(ls, **changes)


def compile_variants(
    launches: list[LaunchSpec],
    archs: list[str],
    *,
    jobs: int | None = None,
    timeout: float = 120.0,
    rootdir: str | None = None,
    cache_dir: str | None = None,
    artifacts: tuple[str, ...] = ("sass", "ptx"),
    pool: Compiler | None = None,
    stats: list[dict[str, Any]] | None = None,
    pruned: list[VariantResult] | None = None,
    warnings: list[str] | None = None,
) -> list[VariantResult]:
    """Compile every unique recorded launch for every arch and collect static metrics.

    jobs: worker processes (default: CPU count). timeout: seconds per (launch, arch) compile.
    rootdir: makes ``key.source`` relative and is put on the workers' sys.path.
    cache_dir: TRITON_CACHE_DIR for the workers (default: Triton's own).
    artifacts: asm kept in ``VariantResult.artifacts`` ("sass" = normalized SASS, "ptx",
    also "ttgir", "ttir", "llir"). pool: reuse an existing WorkerPool (or a
    :class:`~kperf_ci.capture.static.ahead.CompileAhead`, which compiled some requests already);
    a pool given is not closed.
    stats: if given, one dict per compile request is appended (key id, arch, compile_s,
    metrics_s, wall_s, ok) -- used by the benchmarks.
    pruned: if given, the autotune configs dropped because the target could not launch them
    (shared memory above its limit: the autotuner skips such a config) are appended to it;
    they are never returned, so never stored or flagged -- unless no config of that launch fits:
    then it cannot run on the target at all, and its configs are kept for compare to flag.
    warnings: if given, the workers' one-line warnings (a refused metrics-cache entry) are
    appended to it.
    """
    archs = [normalize_arch(a) for a in archs]
    plan = _plan(unique_launches(launches), archs, rootdir, artifacts)
    if plan.requests:
        _compile(
            plan,
            pool,
            jobs=jobs,
            cache_dir=cache_dir,
            rootdir=rootdir,
            timeout=timeout,
            stats=stats,
            warnings=warnings,
        )
    if not plan.autotuned:
        return plan.results
    return _prune_over_limit(plan.results, plan.autotuned, pruned)


@dataclass
class _Plan:
    """One result per (variant, arch) in first-seen order, and the compile requests they need:
    a variant compiled for an arch once, every result that shares it pointing at its request."""

    results: list[VariantResult] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    req_index: list[int] = field(default_factory=list)  # result index for each request
    shared_from: dict[int, int] = field(default_factory=dict)  # result index -> request index
    autotuned: set[int] = field(default_factory=set)  # result indices of autotune configs


def _plan(
    groups: list[tuple[LaunchSpec, list[str]]],
    archs: list[str],
    rootdir: str | None,
    artifacts: tuple[str, ...],
) -> _Plan:
    """Step 1: a result per unique launch and arch (an error for a launch that cannot be
    imported), and one compile request per (identity, arch)."""
    plan = _Plan()
    results, requests, req_index = plan.results, plan.requests, plan.req_index
    shared_from, autotuned = plan.shared_from, plan.autotuned
    compiled: dict[tuple[str, str], int] = {}  # (identity, arch) -> request index (compile once)
    for ls, tags in groups:
        for arch in archs:
            key = variant_key(ls, arch, rootdir)
            res = VariantResult(key=key, tags=list(tags), thresholds=dict(ls.thresholds or {}))
            idx = len(results)
            results.append(res)
            if ls.autotune:
                autotuned.add(idx)
            if not ls.importable:
                res.error = ls.reason or "not importable: define the kernel at module level"
                continue
            ck = (ls.identity, arch)
            if ck in compiled:
                shared_from[idx] = compiled[ck]
                continue
            compiled[ck] = len(requests)
            shared_from[idx] = len(requests)
            requests.append(compile_request(ls, arch, archs, artifacts))
            req_index.append(idx)
    return plan


def _compile(
    plan: _Plan,
    pool: Compiler | None,
    *,
    jobs: int | None,
    cache_dir: str | None,
    rootdir: str | None,
    timeout: float,
    stats: list[dict[str, Any]] | None,
    warnings: list[str] | None = None,
) -> None:
    """Step 2: the requests through the worker pool (a pool of its own unless one is given),
    each response filled into every result that shares it; ``stats`` gets one row per request."""
    results, requests, req_index, shared_from = plan.results, plan.requests, plan.req_index, plan.shared_from
    paths = [os.path.abspath(rootdir or os.getcwd())]
    own = pool is None
    if own:
        pool = WorkerPool(jobs, cache_dir=cache_dir, paths=paths)
    try:
        with compile_progress(len(requests)) as bar:
            responses = pool.map(requests, timeout=timeout, on_done=bar.advance)
    finally:
        if own:
            pool.close()
    for idx, ri in shared_from.items():
        _fill(results[idx], responses[ri])
    if warnings is not None:
        warnings.extend(
            w
            for resp in responses
            for w in (resp.get("warnings") or [])
            if isinstance(w, str) and w not in warnings
        )
    if stats is not None:
        for ri, resp in enumerate(responses):
            r = results[req_index[ri]]
            stats.append(
                {
                    "kernel": r.key.kernel,
                    "arch": r.key.arch,
                    "id": r.key.id,
                    "ok": bool(resp.get("ok")),
                    "compile_s": resp.get("compile_s"),
                    "metrics_s": resp.get("metrics_s"),
                    "wall_s": resp.get("wall_s"),
                    "error": resp.get("error"),
                }
            )


def _prune_over_limit(
    results: list[VariantResult], autotuned: set[int], pruned: list[VariantResult] | None
) -> list[VariantResult]:
    """Step 3: autotune configs over the target's shared-memory limit are dropped (into
    ``pruned``), unless no config of their launch fits."""
    over = {
        idx
        for idx in autotuned
        if over_shared_limit(
            next((m.value for m in results[idx].metrics if m.name == "shared_bytes"), None),
            results[idx].key.arch,
        )
    }

    def launch_of(idx: int) -> tuple[str, str, str, str]:
        k = results[idx].key
        return (k.kernel, k.source, k.test, k.arch)

    # A launch whose every config is over the limit cannot run on the target at all (the
    # autotuner raises OutOfResources): those configs stay, and compare flags them.
    fits = {launch_of(idx) for idx in autotuned - over}
    kept = []
    for idx, res in enumerate(results):
        if idx in over and launch_of(idx) in fits:
            if pruned is not None:
                pruned.append(res)
            continue
        kept.append(res)
    return kept


def _fill(res: VariantResult, resp: dict[str, Any]) -> None:
    if not resp.get("ok"):
        res.error = _one_line(resp.get("error") or "compile failed")
        return
    res.metrics = [
        Metric(name, float(value), unit, kind, better)
        for name, value, unit, kind, better in resp.get("metrics", [])
    ]
    res.sass_hash = resp.get("sass_hash")
    res.artifacts = dict(resp.get("artifacts") or {})


def _one_line(s: str) -> str:
    s = " ".join(str(s).split())
    return s[:500]
