"""Each side's fastest candidate under one interleaved measurement (best against best, issue 34).

The candidates are zero-argument launches named by config (built by
:mod:`kperf_ci.capture.launches.best_config` from each side's autotuner). Cost is bounded: a
short first pass over all of them, and a second, longer pass only over each side's contenders
(within :data:`CONTENDER_REL` of its best), so a ten-config kernel adds about a second of GPU
time. The verdict's own measurement is the A/B's (:func:`~kperf_ci.capture.timing.interleaved.adaptive_ab`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kperf_ci.capture.timing import engine
from kperf_ci.error_text import error_text

#: a config whose first-pass median is within this fraction of its side's best is timed again
CONTENDER_REL = 0.03
#: contenders per side in the second pass
MAX_CONTENDERS = 3

# Short passes: they only rank configs, on a device the autotuner and the replay have just
# warmed; the verdict's own measurement is adaptive_ab's. A pass is one CUPTI collection per
# round of a few calls per config, no per-config warm-up to convergence, no pacing and no
# CUDA graphs (attorch on an H100: the engine's defaults made the search ~3 s per launch, most
# of `kperf ab`'s time on a suite of short autotuned kernels).
_RANK = dict(
    warmup_batch=3, warmup_min_batches=1, warmup_settle=0, warmup_min_s=0.0, warmup_min_warm_s=0.0,
    warmup_budget_s=0.05, min_time_s=0.0, duty_cycle=1.0, use_graph=False, rewarm_ms=0.0,
    cupti_round_ms=0.1, cupti_round_max=10, round_samples=5,
)  # fmt: skip
FIRST_PASS = engine.TimingConfig(budget_s=0.005, min_samples=5, max_samples=10, **_RANK)
SECOND_PASS = engine.TimingConfig(budget_s=0.05, min_samples=30, max_samples=60, **_RANK)


@dataclass
class BestPair:
    """Each side's fastest config for the call, and what was timed to find it."""

    base: Callable[[], Any]
    head: Callable[[], Any]
    base_best: str
    head_best: str
    timed: dict[str, int] = field(default_factory=dict)  # configs timed per side
    left_out: dict[str, int] = field(default_factory=dict)  # configs over MAX_CONFIGS per side
    failed: list[str] = field(default_factory=list)  # "head BLOCK=256,...: OutOfResources ..."
    seconds: float = 0.0  # host seconds of both passes (GPU time of the search)
    # each config's median (ms) as last ranked ("base BT=16,num_warps=2": the second pass's where it
    # ran): the evidence for each side's pick, so a reviewer can check why a config won
    ranked: dict[str, float] = field(default_factory=dict)
    # every runnable candidate ("base <config>" -> launch): what a second look may take
    calls: dict[str, Callable[[], Any]] = field(default_factory=dict, repr=False)
    # the verdict's second look, where one was taken (:meth:`alternative`): the doc's record
    second_look: dict[str, Any] | None = None

    def best(self, side: str) -> str:
        """``side``'s ("base" or "head") fastest config as this search has it."""
        return self.base_best if side == "base" else self.head_best

    def alternative(self, loser: str) -> str | None:
        """The config the side that lost the A/B (``loser``: "base" or "head") is timed with
        again before the loss is called: its version of the winner's config when it has one,
        else its next-ranked config; None when it has no other. The search ranks short kernels
        within a tick or two of CUPTI's clock (attorch on an H200: rms_norm_backward's six
        configs within 0.1 us of each other at 1.6 us), so the config it ranked first is
        often a lucky draw; a loss is only the side's loss if its other good config loses too."""
        mine, theirs = self.best(loser), self.best("head" if loser == "base" else "base")
        if theirs != mine and f"{loser} {theirs}" in self.calls:
            return theirs
        ranked = sorted((m, k) for k, m in self.ranked.items() if k.startswith(loser + " "))
        rest = [k.split(" ", 1)[1] for _, k in ranked if k != f"{loser} {mine}"]
        return rest[0] if rest else None

    def with_best(self, side: str, config: str) -> BestPair:
        """The same search with ``side``'s candidate replaced by its ``config``."""
        call = self.calls[f"{side} {config}"]
        if side == "base":
            return dataclasses.replace(self, base=call, base_best=config)
        return dataclasses.replace(self, head=call, head_best=config)

    def doc(self) -> dict[str, Any]:
        """What the A/B document records of the search."""
        return {
            "compare": "best_of_configs",
            "base_best": self.base_best or None,
            "head_best": self.head_best or None,
            "configs_timed": dict(self.timed),
            "configs_left_out": {k: v for k, v in self.left_out.items() if v},
            "configs_failed": list(self.failed),
            "search_s": round(self.seconds, 3),
            # a list, fastest first: a JSON object's key order is not kept by every writer
            "configs_ranked_us": [
                [k, round(v * 1e3, 4)] for k, v in sorted(self.ranked.items(), key=lambda kv: kv[1])
            ],
            **({"second_look": dict(self.second_look)} if self.second_look else {}),
        }


def _runnable(
    side: str, calls: dict[str, Callable[[], Any]], failed: list[str]
) -> dict[str, Callable[[], Any]]:
    """The configs that launch (each compiled once here); a config the device rejects
    (``OutOfResources``) is one the autotuner skips too, so it is left out and named."""
    ok = {}
    for label, call in calls.items():
        try:
            call()
        except Exception as e:
            failed.append(f"{side} {label or 'launch'}: {error_text(e, 120)}")
            continue
        ok[label] = call
    return ok


def _medians(
    calls: dict[str, Callable[[], Any]], cfg: engine.TimingConfig, backend: Any
) -> tuple[dict[str, float], set[str]]:
    """Each call's median under one interleaved measurement, and the methods that timed them."""
    timed = engine.time_interleaved(calls, cfg, backend=backend)
    return {k: r.median for k, r in timed.items()}, {r.method for r in timed.values()}


def best_pair(
    b_calls: dict[str, Callable[[], Any]],
    h_calls: dict[str, Callable[[], Any]],
    *,
    backend: Any,
    clock: Callable[[], float],
    left_out: dict[str, int] | None = None,
) -> BestPair | None:
    """Each side's fastest candidate (config text -> launch; "" names a side's only launch)
    under one interleaved measurement (both sides' configs in the same loop, so neither is
    timed on a warmer GPU), or None when neither side has several configs or a side has none
    that launches. ``left_out``: configs per side not among the candidates, for the record."""
    t0 = clock()
    if set(b_calls) == {""} and set(h_calls) == {""}:
        return None
    failed: list[str] = []
    b_calls, h_calls = _runnable("base", b_calls, failed), _runnable("head", h_calls, failed)
    if not b_calls or not h_calls:
        return None
    calls = {f"base {k}": v for k, v in b_calls.items()} | {f"head {k}": v for k, v in h_calls.items()}
    medians, first_methods = (
        _medians(calls, FIRST_PASS, backend) if len(calls) > 2 else ({k: 0.0 for k in calls}, set())
    )
    best: dict[str, str] = {}
    near: dict[str, list[str]] = {}
    for side in ("base", "head"):
        mine = {k: m for k, m in medians.items() if k.startswith(side + " ")}
        floor = min(mine.values())
        near[side] = sorted((k for k, m in mine.items() if m <= floor * (1 + CONTENDER_REL)), key=mine.get)
        near[side] = near[side][:MAX_CONTENDERS]
        best[side] = near[side][0]
    # The second look: each side's contenders, and each side's version of the other side's
    # first-pass winner (a config both lists hold), so that a config one side's short first pass
    # happened to rank low is not compared only on the other side (attorch on an H100: the head's
    # 4-warp config against the base's 8-warp one, -6%, where the base's own 4-warp config was
    # as fast). A side with one candidate and no mirror needs no second look.
    again_keys = set()
    for side, other in (("base", "head"), ("head", "base")):
        mirror = f"{side} {best[other].split(' ', 1)[1]}"
        mine = set(near[side]) | ({mirror} if mirror in calls else set())
        if len(mine) > 1:
            again_keys |= mine
    ranked = dict(medians) if len(calls) > 2 else {}
    if again_keys:
        again, methods = _medians({k: calls[k] for k in sorted(again_keys)}, SECOND_PASS, backend)
        # A pass that fell back from CUPTI to events reads the launch too: its medians do not
        # rank with the other pass's, so the ranking keeps the second pass's alone.
        ranked = dict(again) if first_methods and methods != first_methods else ranked | again
        for side in ("base", "head"):
            mine = {k: m for k, m in again.items() if k.startswith(side + " ")}
            if mine:
                best[side] = min(mine, key=mine.get)
    return BestPair(
        base=calls[best["base"]],
        head=calls[best["head"]],
        base_best=best["base"].split(" ", 1)[1],
        head_best=best["head"].split(" ", 1)[1],
        timed={"base": len(b_calls), "head": len(h_calls)},
        left_out=dict(left_out or {}),
        failed=failed,
        seconds=clock() - t0,
        ranked=ranked,
        calls=calls,
    )
