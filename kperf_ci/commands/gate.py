"""`kperf gate`: exit 1 when a kernel is slower than its threshold with confidence."""

from __future__ import annotations

import json

import click

from kperf_ci.errors import user_errors
from kperf_ci.gating import run_gate
from kperf_ci.report.safe_text import terminal_safe


@click.command("gate")
@click.option(
    "--db", type=click.Path(dir_okay=False), help="database of the run to gate (default: [tool.kperf] db)"
)
@click.option("--run", "run_id", help="run id (or unique prefix) in --db; default: the latest")
@click.option(
    "--policy",
    "policy_file",
    type=click.Path(dir_okay=False, exists=True),
    help="TOML file with a [tool.kperf.gate] table (default: the project's pyproject.toml)",
)
@click.option(
    "--against", type=click.Choice(["release", "history"]), help="override [tool.kperf.gate] against"
)
@click.option(
    "--history-db",
    type=click.Path(dir_okay=False),
    help="database of release/history runs (default: [tool.kperf.gate] db, else [tool.kperf] baseline)",
)
@click.option("--tag", help="glob of release tags (override [tool.kperf.gate] tag)")
@click.option("--window", type=int, help="runs of history to look at (override [tool.kperf.gate] window)")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@user_errors
def gate_cmd(
    db: str | None,
    run_id: str | None,
    policy_file: str | None,
    against: str | None,
    history_db: str | None,
    tag: str | None,
    window: int | None,
    fmt: str,
) -> None:
    """Block when a kernel is slower than its threshold with confidence.

    Against the last release tag's stored run, or a window of history with change points
    (see [tool.kperf.gate]). Lists each blocking kernel with its evidence. Exit 1 on block,
    0 when it passes, 2 on bad input.
    """
    report = run_gate(
        db=db,
        run_id=run_id,
        policy_file=policy_file,
        against=against,
        history_db=history_db,
        tag=tag,
        window=window,
    )
    if fmt == "json":
        click.echo(json.dumps(report.to_dict(), indent=2, default=str))
    else:
        # The text names kernels from the databases: each line made safe for a terminal.
        click.echo("\n".join(terminal_safe(line) for line in report.render().split("\n")))
    raise SystemExit(report.exit_code)
