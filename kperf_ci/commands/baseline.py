"""`kperf baseline update`: copy a run into the baseline database (one transaction)."""

from __future__ import annotations

import click

from . import KperfError, load_settings, user_errors


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
    from kperf_ci import store

    settings = load_settings(db=db, baseline=baseline)
    if not settings.baseline:
        raise KperfError("no baseline given; pass --baseline PATH or set [tool.kperf] baseline")
    rid = store.copy_run(settings.db, settings.baseline, run_id)
    n = len(store.load_run(settings.baseline, rid).results)
    click.echo(f"copied run {rid} ({n} variants) from {settings.db} into {settings.baseline}")
