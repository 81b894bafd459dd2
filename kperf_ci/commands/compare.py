"""`kperf compare`: diff a run against a baseline; exit 1 when a threshold is crossed."""

from __future__ import annotations

import json
import math

import click

from . import KperfError, console, fmt_value, load_settings, user_errors

_VERDICT_STYLE = {"worse": "yellow", "better": "green", "same": "dim", "n/a": "dim"}


@click.command("compare")
@click.option(
    "--baseline", "baseline", type=click.Path(dir_okay=False), help="baseline database [tool.kperf] baseline"
)
@click.option("--db", type=click.Path(dir_okay=False), help="run database (default: [tool.kperf] db)")
@click.option("--run", "run_id", help="run id (or unique prefix) in --db; default: the latest")
@click.option("--base-run", "base_run", help="run id in --baseline; default: the latest")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--all", "show_all", is_flag=True, help="list unchanged metrics too")
@user_errors
def compare_cmd(
    baseline: str | None, db: str | None, run_id: str | None, base_run: str | None, fmt: str, show_all: bool
) -> None:
    """Compare a run with a baseline. Exit 1 on a regression, 0 otherwise, 2 on bad input."""
    from pathlib import Path

    from kperf_ci import store
    from kperf_ci.compare import ThresholdPolicy, compare_runs

    settings = load_settings(db=db, baseline=baseline)
    if not settings.baseline:
        raise KperfError("no baseline given; pass --baseline PATH or set [tool.kperf] baseline")
    if not Path(settings.baseline).exists():
        raise KperfError(
            f"{settings.baseline}: baseline does not exist; create it with "
            f"`kperf baseline update --db RUN.db --baseline {settings.baseline}`"
        )
    base = store.load_run(settings.baseline, base_run)
    cur = store.load_run(settings.db, run_id)
    comparison = compare_runs(base, cur, ThresholdPolicy.from_settings(settings))
    if fmt == "json":
        click.echo(json.dumps(comparison.to_dict(all=show_all), indent=2, default=str))
    else:
        print_table(comparison, show_all=show_all)
    raise SystemExit(comparison.exit_code)


def print_table(comparison, *, show_all: bool = False) -> None:
    from rich.table import Table

    out = console()
    b, c = comparison.baseline, comparison.current
    out.print(
        f"baseline [bold]{b.run_id}[/] ({b.git_sha and b.git_sha[:8] or '?'} {b.git_branch or ''}) -> "
        f"current [bold]{c.run_id}[/] ({c.git_sha and c.git_sha[:8] or '?'} {c.git_branch or ''})",
        highlight=False,
    )
    rows = comparison.sorted_changes(all=show_all)
    if rows:
        t = Table(show_lines=False, header_style="bold")
        for col in ("kernel", "arch", "config", "metric", "base -> current", "delta", "verdict", "why"):
            t.add_column(col, overflow="fold")
        for ch in rows:
            rel = "-" if ch.rel is None or math.isnan(ch.rel) else f"{ch.rel:+.1%}"
            verdict = (
                "[bold red]REGRESSION[/]"
                if ch.regression
                else (f"[{_VERDICT_STYLE[ch.direction]}]{ch.direction}[/]")
            )
            t.add_row(
                ch.variant.kernel,
                ch.variant.arch,
                ch.variant.config,
                ch.metric,
                f"{fmt_value(ch.base, ch.unit)} -> {fmt_value(ch.current, ch.unit)}",
                rel,
                verdict,
                ch.reason,
            )
        out.print(t)
    else:
        out.print("no changes" + ("" if show_all else " (use --all to list every metric)"))
    for label, keys in (("added", comparison.added), ("removed", comparison.removed)):
        if keys:
            out.print(f"{label}: " + ", ".join(k.label() for k in keys), highlight=False)
    for bk, ck in comparison.rematched:
        out.print(
            f"matched by kernel/arch/config: {ck.label()} (spec {bk.spec or '-'} -> {ck.spec or '-'})",
            highlight=False,
        )
    if comparison.incomparable:
        seen = sorted({(i.kind, i.reason) for i in comparison.incomparable})
        for kind, reason in seen:
            n = sum(1 for i in comparison.incomparable if (i.kind, i.reason) == (kind, reason))
            out.print(f"not compared: {kind} metrics of {n} variant(s): {reason}", highlight=False)
    n = len(comparison.regressions)
    out.print(
        f"[bold red]{n} regression(s)[/]" if n else "[green]no regressions[/]",
        f"{len(comparison.improvements)} improvement(s)",
    )
