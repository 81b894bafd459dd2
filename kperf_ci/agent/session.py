"""One `kperf agent run`, as a library: which targets a kperf ab document names, the proposer a
target gets, the loop's settings, and what a faster variant becomes (a dry run's files or a pull
request). The command (``kperf_ci.commands.agent``) parses the options and prints.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kperf_ci.agent import output
from kperf_ci.agent.configsearch import ConfigSearchProposer, SourceError
from kperf_ci.agent.llm import BACKOFF_S as LLM_BACKOFF_S
from kperf_ci.agent.llm import LLMProposer, endpoint_problem
from kperf_ci.agent.loop import Budget, LoopConfig, LoopResult
from kperf_ci.agent.prompts import PromptContext, jit_names
from kperf_ci.agent.targets import TARGETS, Target
from kperf_ci.config import ENV_LLM_BACKOFF_S, ABPolicy, env_seconds
from kperf_ci.errors import KperfError
from kperf_ci.inputs import load_settings
from kperf_ci.judge.verdict import is_regression
from kperf_ci.prcheck.document import load_ab_document
from kperf_ci.report.safe_text import terminal_safe as safe


@dataclass(frozen=True, kw_only=True)  # 14 fields, several of one type: built by name only
class Request:
    """What one `kperf agent run` asks of every target it optimizes."""

    root: Path
    endpoint: Any  #: the LLM endpoint, or None for the offline config search
    device: str
    ab_db: str | None
    run_db: str | None
    seeds: list[int]
    timeout_s: float
    bench_budget_s: float
    value_check: bool
    budget: Budget
    out: Path  #: the dry run's folder (one subfolder per target)
    open_pr: bool
    repo: str | None
    base: str

    @property
    def trigger(self) -> str:
        """What the population records as the reason for the session."""
        return f"kperf ab {self.ab_db}" if self.ab_db else "by hand"


@dataclass
class Delivery:
    """What became of a faster variant: a dry run's files, or a pushed branch and its PR."""

    files: list[Path] = field(default_factory=list)
    branch: str = ""
    sha: str = ""
    pr: Any = None


def loop_config(req: Request) -> LoopConfig:
    """The loop's settings; its A/B verdict uses the project's own kperf ab settings
    ([tool.kperf] ab_threshold, ab_floor_ms, ab_precision), as `kperf ab` would: those of the
    project --root names, wherever the command runs (a fresh walk found the current directory's
    read instead)."""
    s = load_settings(req.root)
    return LoopConfig(
        req.device,
        req.seeds,
        req.timeout_s,
        req.bench_budget_s,
        value_check=req.value_check,
        ab=ABPolicy.from_settings(s),
    )


def proposer_for(target: Target, path: Path, source: str, endpoint: Any) -> Any:
    """The endpoint's proposer when one is configured, else the offline config search (a module
    it cannot read knobs from is bad input, named by its path)."""
    if endpoint is not None:
        return LLMProposer(endpoint, backoff_s=env_seconds(ENV_LLM_BACKOFF_S, LLM_BACKOFF_S))
    try:
        return ConfigSearchProposer(target, source)
    except SourceError as e:
        raise KperfError(f"{path}: {e}") from None


def check_endpoint(proposer: Any) -> None:
    """A configured endpoint that never answered is bad input (exit 2), not "no faster variant"."""
    if isinstance(proposer, LLMProposer):
        problem = endpoint_problem(proposer)
        if problem:
            raise KperfError(problem)


def deliver(target: Target, source: str, res: LoopResult, ctx: PromptContext, req: Request) -> Delivery:
    """The best variant as a dry run (title, body and patch under ``req.out``) or, with
    ``req.open_pr``, as a pushed ``kperf-agent/*`` branch and a pull request (never merged)."""
    best = res.best
    assert best is not None  # the caller says "no faster variant" itself
    title = output.pr_title(target.name, best)
    body = output.pr_body(target.name, target.module, source, best, ctx.motivation(), {"id": res.session_id})
    patch = output.diff(source, best.code, target.module)
    if not req.open_pr:
        return Delivery(files=output.write_dry_run(req.out / target.name, title, body, patch))
    branch = output.branch_name(target.name, res.session_id, best.id)
    sha = output.push_branch(req.root, target.module, best.code, branch, title, base=req.base)
    return Delivery(branch=branch, sha=sha, pr=output.open_pr(req.repo or "", branch, req.base, title, body))


def _ab_names(label: str) -> set[str]:
    """Kernel names one A/B entry may go by: ``path/kernel``, ``path::kernel``, ``marker (kernel)``."""
    out = set()
    for part in re.split(r"[()]", label):
        part = part.strip()
        if part:
            out.add(re.split(r"::|/", part)[-1].strip())
    return out


def _known_targets(wanted: set[str], root: Path) -> list[str]:
    """The targets one of whose names (its own, its launcher's, its jit functions') is wanted."""
    out = []
    for name, t in TARGETS.items():
        p = t.path(root)
        known = {name, t.launcher}
        if p.is_file():
            known |= set(jit_names(p.read_text(encoding="utf-8")))
        if known & wanted:
            out.append(name)
    return out


def _listed(labels: list[str]) -> str:
    uniq = sorted({safe(x) for x in labels if x})
    return ", ".join(uniq[:5]) + (f" and {len(uniq) - 5} more" if len(uniq) > 5 else "")


def kernels_from_ab(ab_db: str, root: Path) -> list[str]:
    """Targets whose kernels the A/B document calls slower or statically regressed.

    KperfError (one line) when none maps to a target: what the document holds and what to name.
    """
    doc = load_ab_document(ab_db)
    if doc is None:
        raise KperfError(f"{ab_db}: holds no A/B document; run `kperf ab --base REV` first")
    slow_labels = [str(r.get("kernel", "")) for r in doc.get("timed", []) if is_regression(r.get("verdict"))]
    static_labels = [str(r.get("kernel", "")) for r in doc.get("static_regressions") or []]
    wanted: set[str] = set()
    for label in slow_labels + static_labels:
        wanted |= _ab_names(label)
    out = _known_targets(wanted, root)
    if out:
        return out
    targets = ", ".join(sorted(TARGETS))
    if slow_labels:
        raise KperfError(
            f"{ab_db}: the slower kernels ({_listed(slow_labels)}) are none the agent knows; "
            f"name one of its targets ({targets})"
        )
    if static_labels:
        raise KperfError(
            f"{ab_db} holds static regressions of {_listed(static_labels)} but no timed slowdown; "
            f"the agent starts from a static regression only of a kernel it knows ({targets}): name one"
        )
    raise KperfError(
        f"{ab_db}: the A/B document names no slower or statically regressed kernel; name a kernel ({targets})"
    )
