"""`kperf baseline update`: copy a run into the baseline database (one transaction)."""

from __future__ import annotations

import click

from kperf_ci import store
from kperf_ci.errors import KperfError, user_errors
from kperf_ci.inputs import load_settings, read_run


@click.group("baseline")
def baseline_group() -> None:
    """Manage the baseline database."""


@baseline_group.command("update")
@click.option("--db", type=click.Path(dir_okay=False), help="run database (default: [tool.kperf] db)")
@click.option(
    "--baseline", type=click.Path(dir_okay=False), help="baseline database (default: [tool.kperf] baseline)"
)
@click.option("--run", "run_id", help="run id (or unique prefix); default: the latest")
@user_errors
def update_cmd(db: str | None, baseline: str | None, run_id: str | None) -> None:
    """Copy a run from --db into --baseline, replacing a run of the same id there."""

    settings = load_settings(db=db, baseline=baseline)
    if not settings.baseline:
        raise KperfError("no baseline given; pass --baseline PATH or set [tool.kperf] baseline")
    run = read_run(settings.db, run_id)  # a run that does not decode is never copied
    rid = run.info.run_id
    if run.skipped:
        passed = ", ".join(f"{r} ({status})" for r, status in run.skipped)
        click.echo(f"kperf: passed over incomplete run(s) {passed}; taking {rid}", err=True)
    if run.status != store.COMPLETE or not run.results:
        # an interrupted or empty baseline makes every later compare pass: never copied
        what = (
            f"is incomplete (status {run.status})" if run.status in store.INCOMPLETE else "holds no variants"
        )
        raise KperfError(
            f"{settings.db}: run {rid} {what}, not a baseline; rerun the tests to the end "
            "and update from that run (--run ID)"
        )
    store.copy_run(settings.db, settings.baseline, rid)
    n = len(run.results)
    click.echo(f"copied run {rid} ({n} variants) from {settings.db} into {settings.baseline}")
