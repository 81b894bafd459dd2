"""`kperf compare`: diff a run against a baseline; exit 1 when a threshold is crossed."""

from __future__ import annotations

import json
import math

import click

from kperf_ci.report.safe_text import rich_safe as _s  # stored text in Rich markup and cells

from . import KperfError, bulk_objects, console, fmt_value, load_settings, read_run, user_errors

#: Rows of the table at most: a 100,000-variant run changes on every metric's noise, and a
#: terminal table of all of them would take minutes to lay out and nobody would read it.
MAX_TABLE_ROWS = 500
#: What the "changed:" line shows next to the key change: the numbers a launch option moves.
_KEY_METRICS = ("registers", "spills", "shared_bytes", "sass.instructions")
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
@click.option(
    "--allow-removed",
    is_flag=True,
    help="do not fail on baseline variants missing from this run although their test ran",
)
@click.option(
    "--require-baseline",
    is_flag=True,
    help="exit 2 when the baseline has nothing comparable for this run (another machine class)",
)
@user_errors
def compare_cmd(
    baseline: str | None,
    db: str | None,
    run_id: str | None,
    base_run: str | None,
    fmt: str,
    show_all: bool,
    allow_removed: bool,
    require_baseline: bool,
) -> None:
    """Compare a run with a baseline. Exit 1 on a regression (a metric over its threshold, or a
    variant whose test ran but that vanished), 0 otherwise, 2 on bad input.

    When less than half of this run's variants could be compared ("no comparable baseline": the
    baseline comes from another machine class or Triton) the verdict says so and the exit is 0,
    or 2 with --require-baseline; a regression among the few that compared still exits 1.
    """
    from pathlib import Path

    from kperf_ci import store
    from kperf_ci.compare import COMPARED, ThresholdPolicy, compare_runs

    settings = load_settings(db=db, baseline=baseline)
    if not settings.baseline:
        raise KperfError("no baseline given; pass --baseline PATH or set [tool.kperf] baseline")
    if not Path(settings.baseline).exists():
        raise KperfError(
            f"{settings.baseline}: baseline does not exist; create it with "
            f"`kperf baseline update --db RUN.db --baseline {settings.baseline}`"
        )
    base = read_run(settings.baseline, base_run, baseline=True)  # bad rows: exit 2, not a crash
    cur = read_run(settings.db, run_id)
    if base.info.run_id == cur.info.run_id and store.same_database(settings.baseline, settings.db):
        raise KperfError(
            f"{settings.db}: --db and --baseline are the same file and both name run {cur.info.run_id}, "
            "which would be compared with itself; pass the baseline database as --baseline "
            "(or two different runs with --run/--base-run)"
        )
    if not base.results:  # every compare against it would pass
        raise KperfError(
            f"{settings.baseline}: baseline run {base.info.run_id} holds no variants, nothing to compare "
            "against; update it from a complete run with `kperf baseline update`"
        )
    # notes only once the comparison goes ahead: an error stays one line
    _note_status(settings.baseline, base)
    _note_status(settings.db, cur)
    with bulk_objects():
        comparison = compare_runs(
            base, cur, ThresholdPolicy.from_settings(settings), allow_removed=allow_removed
        )
    if fmt == "json":
        click.echo(json.dumps(comparison.to_dict(all=show_all), indent=2, default=str))
    else:
        print_table(comparison, show_all=show_all)
    if not comparison.exit_code and require_baseline and comparison.status != COMPARED:
        raise KperfError(comparison.status_line + " (--require-baseline)")
    raise SystemExit(comparison.exit_code)


def _note_status(path: str, run) -> None:
    """Say on stderr when a run is not a whole one, or when newer incomplete runs were passed over."""
    if run.skipped:
        passed = ", ".join(f"{rid} ({status})" for rid, status in run.skipped)
        click.echo(f"kperf: {path}: passed over incomplete run(s) {passed}", err=True)
    if run.status != "complete":
        click.echo(f"kperf: {path}: run {run.info.run_id} is {run.status}, not a complete run", err=True)


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
    hidden = max(0, len(rows) - MAX_TABLE_ROWS)
    if rows:
        t = Table(show_lines=False, header_style="bold")
        for col in ("kernel", "arch", "variant", "metric", "base -> current", "delta", "verdict", "why"):
            t.add_column(col, overflow="fold")
        variant = variant_labels([ch.variant for ch in rows])  # labels as told apart among all rows
        for ch in rows[:MAX_TABLE_ROWS]:
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
        if hidden:
            out.print(
                f"... and {hidden} more row(s), not shown: the table lists the first {MAX_TABLE_ROWS}, "
                "worst first (--format json lists all)",
                highlight=False,
            )
    else:
        out.print("no changes" + ("" if show_all else " (use --all to list every metric)"))
    key_moves: dict[str, list[str]] = {}
    if comparison.key_changes:
        for ch in comparison.changes:
            if ch.metric in _KEY_METRICS and ch.base != ch.current:
                key_moves.setdefault(ch.variant.id, []).append(
                    f"{ch.metric} {fmt_value(ch.base, ch.unit)} -> {fmt_value(ch.current, ch.unit)}"
                )
    for kc in comparison.key_changes:
        moved = key_moves.get(kc.current.id, [])
        text = "; ".join([kc.description, *moved])
        out.print(_s(f"changed: {kc.current.label()} ({kc.current.test or '?'}): {text}"), highlight=False)
    removed = comparison.removed
    if removed:
        style = "dim" if comparison.allow_removed else "bold red"
        why = (
            "allowed by --allow-removed" if comparison.allow_removed else "fails; --allow-removed accepts it"
        )
        out.print(
            f"[{style}]removed: {len(removed)} variant(s) measured in the baseline are missing from this "
            f"run although their test ran ({why}):[/] "
            + _s(_listing([k.label() + f" ({k.test})" for k in removed])),
            highlight=False,
        )
    if comparison.not_run:
        by_reason: dict[str, list[str]] = {}
        for n in comparison.not_run:
            by_reason.setdefault(n.reason, []).append(n.variant.label())
        for reason, labels in by_reason.items():
            text = f"not run: {len(labels)} baseline variant(s), {reason}: {_listing(labels)}"
            out.print(_s(text), highlight=False)
    if comparison.added:
        out.print(_s("added: " + _listing([k.label() for k in comparison.added])), highlight=False)
    if comparison.incomparable:
        seen = sorted({(i.kind, i.reason) for i in comparison.incomparable})
        for kind, reason in seen:
            n = sum(1 for i in comparison.incomparable if (i.kind, i.reason) == (kind, reason))
            out.print(_s(f"not compared: {kind} metrics of {n} variant(s): {reason}"), highlight=False)
    out.print(verdict_line(comparison), highlight=False)


#: Names listed per line of the summary; the JSON output lists all of them.
MAX_LISTED = 20


def _listing(labels: list[str]) -> str:
    shown = ", ".join(labels[:MAX_LISTED])
    return shown + (
        f" and {len(labels) - MAX_LISTED} more (--format json lists all)" if len(labels) > MAX_LISTED else ""
    )


def verdict_line(comparison) -> str:
    """The last line, in rich markup: regressions and removals first; without them, whether
    anything was compared at all, and only then "no regressions"."""

    from kperf_ci.compare import COMPARED

    n, removed = len(comparison.regressions), len(comparison.failing_removed)
    bad = [f"{n} regression(s)"] if n else []
    bad += [f"{removed} removed variant(s)"] if removed else []
    improvements = f"{len(comparison.improvements)} improvement(s)"
    if bad:
        tail = "" if comparison.status == COMPARED else f"; {_s(comparison.status_line)}"
        return f"[bold red]{', '.join(bad)}[/] {improvements}{tail}"
    if comparison.status != COMPARED:
        return f"[bold yellow]{_s(comparison.status_line)}[/]; nothing was judged"
    return f"[green]no regressions[/] {improvements} ({_s(comparison.status_line)})"


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
