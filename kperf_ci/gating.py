"""What `kperf gate` judges: its policy ([tool.kperf.gate] or a ``--policy`` file), the history
database, and the runs the verdict is taken against (the last release's stored run, or a window of
history); the verdict itself is :mod:`kperf_ci.judge.gate`'s. The command prints the report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kperf_ci.config import _load_toml
from kperf_ci.errors import KperfError
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


def _read_policy_file(path: str) -> dict[str, Any]:
    """The [tool.kperf.gate] table of a TOML file (or the whole file when it has none)."""

    data = _load_toml(Path(path))  # a ConfigError (one line, exit 2) when unreadable
    table = data.get("tool", {}).get("kperf", {}).get("gate", data)
    if not isinstance(table, dict):
        raise KperfError(f"{path}: [tool.kperf.gate] is not a table")
    return table


def _policy(settings: Any, policy_file: str | None, **overrides: Any) -> GatePolicy:
    """The gate's policy from the file (or the settings' table), the command line's overrides on top."""
    try:
        table = _read_policy_file(policy_file) if policy_file else settings.gate
        source = policy_file or f"{settings.pyproject or 'pyproject.toml'} [tool.kperf.gate]"
        return GatePolicy.from_table(table, source).merged(**overrides)
    except GateError as e:
        raise KperfError(str(e)) from None


def _history_db(settings: Any, policy: GatePolicy, policy_file: str | None, history_db: str | None) -> str:
    """The database of release/history runs, which must exist."""
    hist_db = policy.db or settings.baseline or settings.db
    if policy.db and not history_db and not Path(policy.db).is_absolute():
        # a relative [tool.kperf.gate] db is relative to the file it is written in
        hist_db = str(Path(policy_file or settings.pyproject or ".").parent / policy.db)
    if not Path(hist_db).exists():
        raise KperfError(f"{hist_db}: no such database (set [tool.kperf.gate] db or pass --history-db)")
    return hist_db


def _against_release(
    cur: Any, hist_db: str, policy: GatePolicy, thresholds: ThresholdPolicy, repo: str | Path
) -> Any:
    """The run against the stored run of the last release tag reachable from HEAD."""
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
    policy = _policy(settings, policy_file, against=against, tag=tag, window=window, db=history_db)
    thresholds = ThresholdPolicy.from_settings(settings)
    cur = read_run(settings.db, run_id)
    hist_db = _history_db(settings, policy, policy_file, history_db)
    if policy.against == "release":
        return _against_release(cur, hist_db, policy, thresholds, repo)
    history = [read_run(hist_db, i.run_id) for i in history_runs(read_runs(hist_db), cur.info, policy.window)]
    return gate_history(history, cur, policy, thresholds)
