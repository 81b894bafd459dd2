"""The optimization loop (after GPU Kernel Scientist, arXiv 2506.20807), with budgets.

Each round: take the best verified variant so far as the base (the original at first), get a
proposal (hypothesis + candidate module) for it, verify it in the harness process, benchmark it
against the original in the same job (GPU only), and record everything in the population. It
stops at the first budget spent -- LLM calls, GPU seconds, wall time, rounds -- after
``patience`` rounds without a new best, or when the proposer has nothing left to propose.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kperf_ci.agent import population as pop
from kperf_ci.agent.configsearch import ConfigSearchProposer, Proposal
from kperf_ci.agent.llm import LLMProposer, ProposerError
from kperf_ci.agent.prompts import PromptContext, build_messages
from kperf_ci.agent.targets import Target
from kperf_ci.agent.verify import Verdict, run_harness
from kperf_ci.config import ABPolicy


@dataclass
class Budget:
    llm_calls: int = 20
    gpu_seconds: float = 600.0
    wall_s: float = 1800.0
    max_rounds: int = 40
    patience: int = 6  # rounds without a new best before stopping


@dataclass
class LoopConfig:
    device: str = "cpu"
    seeds: list[int] = field(default_factory=lambda: [11, 23])
    timeout_s: float = 300.0  # one harness run
    bench_budget_s: float = 3.0
    value_check: bool = True
    # the A/B verdict's band, floor and stopping precision: the project's kperf ab settings, whole;
    # a new best beats the best so far by its threshold, as in kperf ab
    ab: ABPolicy = field(kw_only=True)


@dataclass
class LoopResult:
    session_id: str
    stop_reason: str
    rounds: int
    llm_calls: int
    gpu_seconds: float
    wall_s: float
    best: pop.VariantRow | None
    original_id: int


Verifier = Callable[..., Verdict]


class Agent:
    def __init__(
        self,
        target: Target,
        original_path: Path,
        population: pop.Population,
        proposer: ConfigSearchProposer | LLMProposer,
        context: PromptContext,
        config: LoopConfig,
        budget: Budget,
        *,
        verifier: Verifier = run_harness,
        clock: Callable[[], float] = time.monotonic,
        progress: Callable[[str], None] | None = None,
    ):
        self.target = target
        self.original_path = Path(original_path)
        self.original = self.original_path.read_text(encoding="utf-8")
        self.pop = population
        self.proposer = proposer
        self.ctx = context
        self.cfg = config
        self.budget = budget
        self.verifier = verifier
        self.clock = clock
        self.progress = progress or (lambda s: None)
        self.gpu_seconds = 0.0

    def _stop_reason(self, rounds: int, idle: int, t0: float) -> str:
        b = self.budget
        if rounds >= b.max_rounds:
            return f"round budget ({b.max_rounds}) spent"
        if self.proposer.calls >= b.llm_calls:
            return f"LLM call budget ({b.llm_calls}) spent"
        if self.gpu_seconds >= b.gpu_seconds:
            return f"GPU-second budget ({b.gpu_seconds:g} s) spent"
        if self.clock() - t0 >= b.wall_s:
            return f"wall-time budget ({b.wall_s:g} s) spent"
        if idle >= b.patience:
            return f"{idle} rounds without progress"
        return ""

    def _propose(self, base: pop.VariantRow, history: list[dict[str, Any]]) -> Proposal | None:
        if isinstance(self.proposer, ConfigSearchProposer):
            return self.proposer.propose(base.knobs or None)
        ctx = PromptContext(**{**asdict(self.ctx), "history": history})
        return self.proposer.propose(build_messages(ctx, base.code), self.target.launcher)

    def run(self, trigger: str) -> LoopResult:
        """Rounds until a budget is spent, patience runs out or the proposer stops; the session,
        every variant and the stop reason are in the population."""
        t0 = self.clock()
        if isinstance(self.proposer, LLMProposer):
            self.proposer.max_calls = self.budget.llm_calls
        sid, orig_id = self._start_session(trigger)
        rounds, idle, stop = 0, 0, ""
        while not (stop := self._stop_reason(rounds, idle, t0)):
            rounds += 1
            new_best, stop = self._round(sid, rounds, t0)
            if stop:
                break
            idle = 0 if new_best else idle + 1
        self.pop.finish_session(sid, stop)
        return LoopResult(
            sid,
            stop,
            rounds,
            self.proposer.calls,
            self.gpu_seconds,
            self.clock() - t0,
            self.pop.best(sid),
            orig_id,
        )

    def _start_session(self, trigger: str) -> tuple[str, int]:
        """A new session in the population with the original as its round-0 variant:
        (session id, the original's variant id)."""
        sid = self.pop.start_session(
            kernel=self.target.name,
            module=self.target.module,
            trigger=trigger,
            proposer=getattr(self.proposer, "name", "?"),
            device=self.cfg.device,
            budget=asdict(self.budget),
            context=asdict(self.ctx),
        )
        knobs0 = self.proposer.start if isinstance(self.proposer, ConfigSearchProposer) else {}
        orig_id = self.pop.add_variant(
            sid,
            parent_id=None,
            round=0,
            code=self.original,
            hypothesis="the original",
            proposer="-",
            verdict=pop.ORIGINAL,
            knobs=knobs0,
            timings={"ratio": 1.0},
        )
        return sid, orig_id

    def _round(self, sid: str, rounds: int, t0: float) -> tuple[bool, str]:
        """One round from the best variant so far: (a new best?, why the loop stops now or "").
        A proposer error or a duplicate is recorded and counts as a round without progress."""
        best = self.pop.best(sid)
        base = best or self.pop.variants(sid)[0]
        history = [
            {"hypothesis": v.hypothesis, "verdict": v.verdict, "reason": v.reason, "ratio": v.ratio}
            for v in self.pop.variants(sid)[1:]
        ]
        try:
            prop = self._propose(base, history)
        except ProposerError as e:
            self.pop.add_variant(
                sid,
                parent_id=base.id,
                round=rounds,
                code="",
                hypothesis="",
                proposer="llm",
                verdict=pop.PROPOSER_ERROR,
                hack=e.kind,
                reason=str(e),
            )
            self.progress(f"round {rounds}: no proposal ({e})")
            return False, (f"proposer stopped: {e}" if e.kind in ("budget", "http") else "")
        if prop is None:
            return False, "search space exhausted"
        if any(v.code == prop.source for v in self.pop.variants(sid)):  # no GPU time twice
            self.pop.add_variant(
                sid,
                parent_id=base.id,
                round=rounds,
                code=prop.source,
                hypothesis=prop.hypothesis,
                proposer=prop.proposer,
                verdict=pop.DUPLICATE,
                reason="the same code as an earlier variant",
            )
            self.progress(f"round {rounds}: {prop.hypothesis} -> duplicate of an earlier variant")
            return False, ""
        return self._verify_and_record(sid, rounds, base, best, prop, t0), ""

    def _verify_and_record(
        self,
        sid: str,
        rounds: int,
        base: pop.VariantRow,
        best: pop.VariantRow | None,
        prop: Proposal,
        t0: float,
    ) -> bool:
        """Verify (and on a GPU benchmark) the proposal within the wall time left, record the
        variant with its verdict; True when it is a new best."""
        remaining = self.budget.wall_s - (self.clock() - t0)
        v = self.verifier(
            self.target.name,
            self.original_path,
            prop.source,
            device=self.cfg.device,
            seeds=self.cfg.seeds,
            timeout_s=max(1.0, min(self.cfg.timeout_s, remaining)),
            bench=self.cfg.device == "cuda",
            bench_budget_s=self.cfg.bench_budget_s,
            value_check=self.cfg.value_check,
            ab=self.cfg.ab,
        )
        self.gpu_seconds += v.gpu_seconds
        verdict, timings = self._judge(v, best)
        self.pop.add_variant(
            sid,
            parent_id=base.id,
            round=rounds,
            code=prop.source,
            hypothesis=prop.hypothesis,
            proposer=prop.proposer,
            verdict=verdict,
            knobs=dict(prop.knobs),
            hack=v.hack,
            reason=v.reason,
            checks=v.correctness,
            timings=timings,
            profile={"value_dependence_ms": v.extra.get("value_dependence_ms")},
        )
        self.progress(
            f"round {rounds}: {prop.hypothesis} -> {verdict}"
            + (f" ({v.hack}: {v.reason})" if not v.ok else "")
            + (f" ratio {timings['ratio']:.4f}" if timings.get("ratio") is not None else "")
        )
        return verdict == pop.FASTER  # FASTER means: a new best (see _judge)

    def _judge(self, v: Verdict, best: pop.VariantRow | None) -> tuple[str, dict[str, Any]]:
        if not v.ok:
            return pop.REJECTED, {}
        if not v.bench:
            return pop.VERIFIED, {}
        b = v.bench
        timings = {
            k: b.get(k)
            for k in (
                "ratio",
                "ci_low",
                "ci_high",
                "verdict",
                "pairs",
                "base_ms",
                "head_ms",
                "method",
                "shape",
                "dtype",
                "device",
                "plausibility",
                "seconds",
            )
        }
        bar = (best.ratio if best and best.ratio is not None else 1.0) * (1 - self.cfg.ab.ab_threshold)
        faster = b.get("verdict") == "faster" and b.get("ci_high") is not None and b["ci_high"] < 1.0
        return (pop.FASTER if faster and b["ratio"] <= bar else pop.NOT_FASTER), timings
