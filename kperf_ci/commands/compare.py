"""`kperf compare`: diff a run against a baseline; exit 1 when a threshold is crossed."""

from __future__ import annotations

import json

import click

from kperf_ci.errors import KperfError, user_errors
from kperf_ci.inputs import bulk_objects, compare_pair, load_settings
from kperf_ci.judge.compare import compare_runs
from kperf_ci.judge.comparison import COMPARED
from kperf_ci.judge.policy import ThresholdPolicy

# the table lives with the plugin's summary, which prints it too
from kperf_ci.report.terminal import print_table


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
    settings = load_settings(db=db, baseline=baseline)
    base, cur = compare_pair(settings, run_id, base_run)
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
