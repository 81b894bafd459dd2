"""`kperf compare`: diff a run against a baseline; exit 1 when a threshold is crossed."""

from __future__ import annotations

import json
import math

import click

from kperf_ci.report.safe_text import rich_safe as _s  # stored text in Rich markup and cells

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
        f"baseline [bold]{_s(b.run_id)}[/] "
        f"({_s(b.git_sha and b.git_sha[:8] or '?')} {_s(b.git_branch or '')}) -> "
        f"current [bold]{_s(c.run_id)}[/] "
        f"({_s(c.git_sha and c.git_sha[:8] or '?')} {_s(c.git_branch or '')})",
        highlight=False,
    )
    rows = comparison.sorted_changes(all=show_all)
    if rows:
        t = Table(show_lines=False, header_style="bold")
        for col in ("kernel", "arch", "variant", "metric", "base -> current", "delta", "verdict", "why"):
            t.add_column(col, overflow="fold")
        variant = variant_labels([ch.variant for ch in rows])
        for ch in rows:
            if ch.rel is not None and not math.isnan(ch.rel):
                rel = f"{ch.rel:+.1%}"
            else:
                rel = "-" if ch.delta is None else f"{ch.delta:+g}"
            verdict = (
                "[bold red]REGRESSION[/]"
                if ch.regression
                else (f"[{_VERDICT_STYLE[ch.direction]}]{ch.direction}[/]")
            )
            t.add_row(
                _s(ch.variant.kernel),
                _s(ch.variant.arch),
                _s(variant[ch.variant.id]),
                _s(ch.metric),
                _s(f"{fmt_value(ch.base, ch.unit)} -> {fmt_value(ch.current, ch.unit)}"),
                rel,
                verdict,
                _s(ch.reason),
            )
        out.print(t)
    else:
        out.print("no changes" + ("" if show_all else " (use --all to list every metric)"))
    for label, keys in (("added", comparison.added), ("removed", comparison.removed)):
        if keys:
            out.print(f"{label}: " + ", ".join(_s(k.label()) for k in keys), highlight=False)
    for bk, ck in comparison.rematched:
        out.print(
            f"matched by kernel/arch/config: {_s(ck.label())} "
            f"(spec {_s(bk.spec or '-')} -> {_s(ck.spec or '-')})",
            highlight=False,
        )
    if comparison.incomparable:
        seen = sorted({(i.kind, i.reason) for i in comparison.incomparable})
        for kind, reason in seen:
            n = sum(1 for i in comparison.incomparable if (i.kind, i.reason) == (kind, reason))
            out.print(f"not compared: {_s(kind)} metrics of {n} variant(s): {_s(reason)}", highlight=False)
    n = len(comparison.regressions)
    out.print(
        f"[bold red]{n} regression(s)[/]" if n else "[green]no regressions[/]",
        f"{len(comparison.improvements)} improvement(s)",
    )


def _short_config(config: str) -> str:
    parts = []
    for tok in config.replace(" ", "").split(","):
        name, _, value = tok.partition("=")
        if name in ("num_ctas", "maxnreg") and value in ("1", "None", ""):
            continue
        parts.append({"num_warps": "w", "num_stages": "s", "num_ctas": "ctas"}.get(name, name + "=") + value)
    return " ".join(p for p in parts if p)


def variant_labels(keys) -> dict[str, str]:
    """Short names telling variants of one kernel/arch apart: the compact config plus the parts of
    the specialization that differ between them (e.g. "w4 s3 *fp16 BLOCK_SIZE=1024")."""
    groups: dict[tuple[str, str], dict[str, object]] = {}
    for k in keys:
        groups.setdefault((k.kernel, k.arch), {})[k.id] = k
    out: dict[str, str] = {}
    for members in groups.values():
        tokens = {vid: [t.strip() for t in k.spec.split(",") if t.strip()] for vid, k in members.items()}
        common = set.intersection(*(set(t) for t in tokens.values())) if len(tokens) > 1 else None
        for vid, k in members.items():
            differing = [] if common is None else [t for t in tokens[vid] if t not in common]
            shown = [t.split(":", 1)[1] if ":" in t else t for t in differing]
            out[vid] = " ".join(filter(None, [_short_config(k.config), *shown]))
    return out
