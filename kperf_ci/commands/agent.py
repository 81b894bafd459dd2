"""`kperf agent run KERNEL | --from-ab reports/ab.db`: propose, verify, benchmark, open a PR.

Without ``KPERF_LLM_BASE_URL`` the offline config search proposes; with it, the endpoint does.
Every candidate runs in a separate harness process (never in this one). Exit 0 whether or not a
faster variant was found (the agent is not a check); 2 for bad input, a configured endpoint
that never replied included (unreachable, key rejected, failing until the budget is spent).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import click

from kperf_ci.agent import session
from kperf_ci.agent.llm import endpoint_from_env
from kperf_ci.agent.loop import Agent, Budget
from kperf_ci.agent.population import Population
from kperf_ci.agent.prompts import context_from_db
from kperf_ci.agent.targets import TARGETS, Target, get_target
from kperf_ci.capture.static.repo import ABError
from kperf_ci.device import cuda_available
from kperf_ci.errors import KperfError, user_errors
from kperf_ci.report.safe_text import terminal_safe as safe


@click.group("agent")
def agent_group() -> None:
    """Optimization agent: profile-guided proposals, verified in a sandbox, opened as pull requests."""


def _device(choice: str) -> str:
    """The device candidates run on; ``cuda`` asked for where none is usable is bad input (every
    candidate would fail to launch and the run would end "no faster variant", exit 0)."""
    if choice == "cpu":
        return choice
    usable = cuda_available()
    if choice == "cuda" and not usable:
        raise KperfError("--device cuda: no usable CUDA GPU here; use --device cpu (verify only) or auto")
    return "cuda" if usable else "cpu"


#: Seeds go to torch and numpy, which take at most 2**32 - 1 (numpy) or 2**64 - 1 (torch).
MAX_SEED = 2**32 - 1


def _finite(ctx: click.Context, param: click.Parameter, value: float) -> float:
    """A budget or timeout that is a number: NaN compares False with everything, so a NaN
    budget is never spent (and an infinite one never ends a run)."""
    if not math.isfinite(value):
        raise KperfError(f"{param.opts[0]} {value}: not a finite number; give seconds, e.g. {param.default}")
    return value


@agent_group.command("run")
@click.argument("kernel", required=False)
@click.option(
    "--from-ab",
    "ab_db",
    type=click.Path(dir_okay=False),
    help="optimize the kernels this kperf ab database calls slower or statically regressed",
)
@click.option(
    "--db",
    default="reports/agent.db",
    show_default=True,
    type=click.Path(dir_okay=False),
    help="population database",
)
@click.option(
    "--run-db",
    type=click.Path(dir_okay=False),
    help="run database with the kernel's static metrics and findings",
)
@click.option(
    "--root", default=".", show_default=True, type=click.Path(file_okay=False), help="repository root"
)
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--max-llm-calls", type=click.IntRange(0), default=20, show_default=True)
@click.option(
    "--max-gpu-seconds", type=click.FloatRange(0), default=600.0, show_default=True, callback=_finite
)
@click.option("--max-wall-s", type=click.FloatRange(0), default=1800.0, show_default=True, callback=_finite)
@click.option("--max-rounds", type=click.IntRange(0), default=40, show_default=True)
@click.option(
    "--patience", type=click.IntRange(1), default=6, show_default=True, help="rounds without progress"
)
@click.option("--seeds", default="11,23", show_default=True, help="verification seeds, comma-separated")
@click.option(
    "--timeout-s",
    type=click.FloatRange(1),
    default=300.0,
    show_default=True,
    help="per candidate",
    callback=_finite,
)
@click.option(
    "--bench-budget-s", type=click.FloatRange(0.1), default=3.0, show_default=True, callback=_finite
)
@click.option("--no-value-check", is_flag=True, help="skip the zeros-vs-random timing check")
@click.option(
    "--out",
    default="reports/agent",
    show_default=True,
    type=click.Path(file_okay=False),
    help="dry-run output",
)
@click.option(
    "--pr", "open_pr", is_flag=True, help="push a kperf-agent/* branch and open a pull request (else dry run)"
)
@click.option("--repo", help="OWNER/NAME for --pr")
@click.option("--base", default="main", show_default=True, help="base branch of the pull request")
@user_errors
def run_cmd(
    kernel: str | None,
    ab_db: str | None,
    db: str,
    run_db: str | None,
    root: str,
    device: str,
    max_llm_calls: int,
    max_gpu_seconds: float,
    max_wall_s: float,
    max_rounds: int,
    patience: int,
    seeds: str,
    timeout_s: float,
    bench_budget_s: float,
    no_value_check: bool,
    out: str,
    open_pr: bool,
    repo: str | None,
    base: str,
) -> None:
    """Optimize KERNEL (one of the targets) or the kernels a kperf ab database names."""
    if open_pr and not repo:
        raise KperfError("--pr needs --repo OWNER/NAME (or drop --pr for a dry run)")
    seed_list = _seed_list(seeds)
    targets, endpoint = _targets(kernel, ab_db, Path(root))
    dev = _device(device)
    _warn_no_pr_on_cpu(open_pr, dev)
    budget = Budget(max_llm_calls, max_gpu_seconds, max_wall_s, max_rounds, patience)
    req = session.Request(  # packed: a keyword per line takes run_cmd over the commands' 40 lines
        root=Path(root), endpoint=endpoint, device=dev, ab_db=ab_db, run_db=run_db, seeds=seed_list,
        timeout_s=timeout_s, bench_budget_s=bench_budget_s, value_check=not no_value_check,
        budget=budget, out=Path(out), open_pr=open_pr, repo=repo, base=base,
    )  # fmt: skip
    pop = Population(db)
    try:
        for target in targets:
            _one(target, pop, req)
    finally:
        pop.close()


def _seed_list(seeds: str) -> list[int]:
    """--seeds as integers, each one that torch and numpy take."""
    try:
        seed_list = [int(s) for s in seeds.split(",") if s.strip()]
    except ValueError:
        raise KperfError(f"--seeds {seeds!r}: expected integers separated by commas, e.g. 11,23") from None
    if not seed_list:
        raise KperfError("--seeds: give at least one seed, e.g. 11,23")
    if not all(0 <= x <= MAX_SEED for x in seed_list):
        raise KperfError(f"--seeds {seeds!r}: each seed must be from 0 to {MAX_SEED}")
    return seed_list


def _targets(kernel: str | None, ab_db: str | None, root: Path) -> tuple[list[Target], Any]:
    """The targets to optimize and the configured endpoint (None: the offline search), all checked
    before the population database is created: a wrong --root leaves nothing."""
    try:
        names = [kernel] if kernel else (session.kernels_from_ab(ab_db, root) if ab_db else [])
    except ABError as e:
        raise KperfError(str(e)) from None
    if not names:
        raise KperfError(
            "name a kernel (" + ", ".join(sorted(TARGETS)) + ") or give --from-ab with a slower kernel"
        )
    try:
        endpoint = endpoint_from_env()
        targets = [get_target(n) for n in names]
    except ValueError as e:
        raise KperfError(str(e)) from None
    for t in targets:
        if not t.path(root).is_file():
            raise KperfError(
                f"{t.path(root)}: no such kernel module; run from the repository root or pass --root"
            )
    return targets, endpoint


def _warn_no_pr_on_cpu(open_pr: bool, dev: str) -> None:
    if open_pr and dev != "cuda":
        click.echo(
            "kperf agent: warning: no pull request will be opened on CPU: candidates are verified "
            "but not timed, and a pull request needs a timed speedup (run with a GPU)",
            err=True,
        )


def _progress(line: str) -> None:
    click.echo("  " + safe(line))


def _one(target: Target, pop: Population, req: session.Request) -> None:
    """One target through the loop, saying what it did and where the result went."""
    path = target.path(req.root)
    source = path.read_text(encoding="utf-8")
    ctx = context_from_db(target.name, target.launcher, source, run_db=req.run_db, ab_db=req.ab_db)
    proposer = session.proposer_for(target, path, source, req.endpoint)
    click.echo(f"kperf agent: {target.name} ({target.module}), proposer {proposer.name}, device {req.device}")
    config = session.loop_config(req)
    res = Agent(target, path, pop, proposer, ctx, config, req.budget, progress=_progress).run(req.trigger)
    click.echo(
        f"stopped: {safe(res.stop_reason)}; {res.rounds} rounds, {res.llm_calls} LLM calls, "
        f"{res.gpu_seconds:.1f} GPU s, {res.wall_s:.1f} s"
    )
    session.check_endpoint(proposer)
    if res.best is None:
        _say_no_variant(req)
        return
    best, done = res.best, session.deliver(target, source, res, ctx, req)
    if done.files:
        click.echo(
            f"best: ratio {best.ratio:.4f} ({safe(best.hypothesis)}); dry run, PR body: {done.files[0]}"
        )
        return
    click.echo(
        f"pushed {done.branch} ({done.sha[:10]}); pull request: {safe(getattr(done.pr, 'html_url', done.pr))}"
    )


def _say_no_variant(req: session.Request) -> None:
    if req.device != "cuda":
        click.echo(
            "no GPU: candidates were verified but not timed, so there is no faster variant and "
            + ("no pull request was opened" if req.open_pr else f"the dry run wrote nothing to {req.out}")
            + " (run with a GPU for a timed speedup)"
        )
    else:
        click.echo(
            "no verified variant faster than the original"
            + ("; no pull request was opened" if req.open_pr else f"; the dry run wrote nothing to {req.out}")
        )


@agent_group.command("show")
@click.option(
    "--db", default="reports/agent.db", show_default=True, type=click.Path(dir_okay=False, exists=False)
)
@user_errors
def show_cmd(db: str) -> None:
    """Agent sessions and their variants."""
    if not os.path.exists(db):
        raise KperfError(f"{db}: no such agent database; run `kperf agent run` first")
    pop = Population(db)
    try:
        if not pop.sessions():
            raise KperfError(f"{db}: holds no agent sessions; run `kperf agent run KERNEL --db {db}` first")
        for s in pop.sessions():
            click.echo(
                f"session {s['id']} {safe(s['kernel'])} [{safe(s['proposer'])}, {s['device']}] "
                f"{s['started_at']}: {safe(s['stop_reason'] or 'running')}"
            )
            for v in pop.variants(s["id"]):
                ratio = "" if v.ratio is None else f" ratio {v.ratio:.4f}"
                why = f" ({safe(v.hack)}: {safe(v.reason)})" if v.reason else ""
                click.echo(f"  #{v.id} round {v.round} {v.verdict}{ratio}: {safe(v.hypothesis)}{why}")
    finally:
        pop.close()
