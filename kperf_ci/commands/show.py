"""`kperf show`: the runs in a database, or one run's variants and metrics."""

from __future__ import annotations

import click

from kperf_ci.model import RunInfo, RunRecord
from kperf_ci.report.safe_text import rich_safe

from . import console, fmt_value, load_settings, read_run, read_runs, user_errors

# Every stored string below is printed through rich_safe: Rich parses both f-strings and table
# cells as markup, and a database is data (a kernel named "x[/]" must print, not crash).


@click.command("show")
@click.option("--db", type=click.Path(dir_okay=False), help="run database (default: [tool.kperf] db)")
@click.option("--run", "run_id", help="show this run (id or unique prefix); 'latest' for the newest")
@click.option("--kernel", help="only variants of this kernel (implies the latest run without --run)")
@user_errors
def show_cmd(db: str | None, run_id: str | None, kernel: str | None) -> None:
    """List runs, or show a run's variants with their metrics (region.* as a breakdown)."""
    settings = load_settings(db=db)
    if run_id is None and kernel is None:
        print_runs(read_runs(settings.db))
        return
    from kperf_ci.analysis.findings import ARTIFACT

    # Only the small findings artifact: a kernel author sees what the analyses flagged and why.
    record = read_run(settings.db, None if run_id in (None, "latest") else run_id, artifacts=(ARTIFACT,))
    print_run(record, kernel=kernel)


def print_runs(runs: list[RunInfo]) -> None:
    from rich.table import Table

    t = Table(header_style="bold")
    for col in ("run", "started", "mode", "label", "git", "branch", "gpu", "triton"):
        t.add_column(col)
    for r in runs:
        fp = r.fingerprint
        t.add_row(
            *map(
                rich_safe,
                (
                    r.run_id,
                    r.started_at,
                    r.mode,
                    r.label or "",
                    (r.git_sha or "")[:10],
                    r.git_branch or "",
                    fp.gpu or "-",
                    fp.triton or "-",
                ),
            )
        )
    console().print(t if runs else "no runs")


def print_run(record: RunRecord, *, kernel: str | None = None) -> None:
    from rich.table import Table

    out = console()
    info = record.info
    s = rich_safe
    out.print(
        f"run [bold]{s(info.run_id)}[/] {s(info.started_at)} mode={s(info.mode)} "
        f"label={s(info.label or '-')} git={s((info.git_sha or '?')[:10])} {s(info.git_branch or '')} "
        f"gpu={s(info.fingerprint.gpu or '-')} triton={s(info.fingerprint.triton or '-')}",
        highlight=False,
    )
    results = [r for r in record.results if kernel is None or r.key.kernel == kernel]
    if not results:
        out.print(
            f"no variants{f' of kernel {s(repr(kernel))}' if kernel else ''} in this run", highlight=False
        )
        return
    for r in results:
        out.print(
            f"\n[bold]{s(r.key.label())}[/]  id={r.key.id} spec={s(r.key.spec or '-')} "
            f"test={s(r.key.test or '-')}",
            highlight=False,
        )
        if r.error:
            out.print(f"  [red]error:[/] {s(r.error)}", highlight=False)
        plain = [m for m in r.metrics if not m.name.startswith("region.")]
        if plain:
            t = Table(header_style="bold", box=None, padding=(0, 2))
            for col in ("metric", "value", "unit", "kind"):
                t.add_column(col)
            for m in plain:
                t.add_row(s(m.name), s(fmt_value(m.value)), s(m.unit), s(m.kind))
            out.print(t)
        regions = region_table(r.metrics)
        if regions:
            t = Table(title="regions", header_style="bold", box=None, padding=(0, 2))
            fields = sorted({f for vals in regions.values() for f in vals}, key=_field_order)
            t.add_column("region")
            for f in fields:
                t.add_column(s(f), justify="right")
            for name, vals in regions.items():
                t.add_row(
                    s(name),
                    *(
                        s(fmt_value(vals.get(f)) if f != "fraction" or f not in vals else f"{vals[f]:.1%}")
                        for f in fields
                    ),
                )
            out.print(t)
        if r.samples:
            out.print(f"  {len(r.samples)} timing samples (ms)", highlight=False)
        print_findings(r)


def print_findings(r) -> None:  # noqa: ANN001
    """The flagged findings of a variant (its ``findings`` artifact): value, why, what to try."""
    from kperf_ci.analysis.findings import flagged
    from kperf_ci.report.safe_text import terminal_safe
    from kperf_ci.report.view import load_findings

    found = load_findings(r) or []
    if not found:
        return
    shown = flagged(found)
    out = console()
    out.print(f"  findings: {len(shown)} of {len(found)} flagged", highlight=False)
    for f in shown:
        for line in f.line().split("\n"):  # markup off; terminal_safe still applies per line
            out.print(f"  {terminal_safe(line)}", highlight=False, markup=False)


def _field_order(f: str) -> tuple[int, str]:
    order = {"cycles": 0, "fraction": 1, "ms": 2}
    return (order.get(f, 9), f)


def region_table(metrics) -> dict[str, dict[str, float]]:
    """region.<name>.<field> -> {name: {field: value}} in first-seen order (names may contain dots)."""
    out: dict[str, dict[str, float]] = {}
    for m in metrics:
        if not m.name.startswith("region."):
            continue
        rest = m.name[len("region.") :]
        name, _, field = rest.rpartition(".")
        if not name:
            name, field = rest, "value"
        out.setdefault(name, {})[field] = m.value
    return out
