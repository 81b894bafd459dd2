"""`kperf gate`: exit 1 when a kernel is slower than its threshold with confidence."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from kperf_ci.config import _load_toml
from kperf_ci.errors import KperfError, user_errors
from kperf_ci.inputs import load_settings, read_run, read_runs
from kperf_ci.judge.gate import (
    GateError,
    GatePolicy,
    gate_against_run,
    gate_history,
    history_runs,
    last_release,
    release_runs,
)
from kperf_ci.judge.policy import ThresholdPolicy
from kperf_ci.report.safe_text import terminal_safe


def _read_policy_file(path: str) -> dict[str, Any]:
    """The [tool.kperf.gate] table of a TOML file (or the whole file when it has none)."""

    data = _load_toml(Path(path))  # a ConfigError (one line, exit 2) when unreadable
    table = data.get("tool", {}).get("kperf", {}).get("gate", data)
    if not isinstance(table, dict):
        raise KperfError(f"{path}: [tool.kperf.gate] is not a table")
    return table


def run_gate(
    *,
    db: str | None = None,
    run_id: str | None = None,
    policy_file: str | None = None,
    against: str | None = None,
    history_db: str | None = None,
    tag: str | None = None,
    window: int | None = None,
    repo: str | Path = ".",
) -> Any:
    """Load settings, policy and runs; return the GateReport (the command prints it)."""

    settings = load_settings(db=db)
    try:
        table = _read_policy_file(policy_file) if policy_file else settings.gate
        source = policy_file or f"{settings.pyproject or 'pyproject.toml'} [tool.kperf.gate]"
        policy = GatePolicy.from_table(table, source).merged(
            against=against, tag=tag, window=window, db=history_db
        )
    except GateError as e:
        raise KperfError(str(e)) from None
    thresholds = ThresholdPolicy.from_settings(settings)
    cur = read_run(settings.db, run_id)
    hist_db = policy.db or settings.baseline or settings.db
    if policy.db and not history_db and not Path(policy.db).is_absolute():
        # a relative [tool.kperf.gate] db is relative to the file it is written in
        hist_db = str(Path(policy_file or settings.pyproject or ".").parent / policy.db)
    if not Path(hist_db).exists():
        raise KperfError(f"{hist_db}: no such database (set [tool.kperf.gate] db or pass --history-db)")

    if policy.against == "release":
        found = last_release(repo, policy.tag, cur.info.git_sha)
        if found is None:
            raise KperfError(
                f"no release tag matching {policy.tag!r} reachable from HEAD; set [tool.kperf.gate] tag"
            )
        tag_name, sha = found
        same_mode = release_runs(read_runs(hist_db), sha, cur.info.mode)
        if not same_mode:
            raise KperfError(
                f"no run of release {tag_name} ({sha[:10]}) in {hist_db}; store one by running the "
                f"benchmarks at that commit with --kperf-db {hist_db}"
            )
        base = read_run(hist_db, same_mode[-1].run_id)
        label = f"release {tag_name} ({sha[:10]}, run {base.info.run_id})"
        return gate_against_run(base, cur, policy, thresholds, label=label)

    history = [read_run(hist_db, i.run_id) for i in history_runs(read_runs(hist_db), cur.info, policy.window)]
    return gate_history(history, cur, policy, thresholds)


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
