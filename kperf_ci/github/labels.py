"""The ``perf-regression`` label: set while a regression stands, cleared when it is gone."""

from __future__ import annotations

from typing import Any

from kperf_ci.github.client import Client

LABEL = "perf-regression"


def apply_label(client: Client, repo: Any, number: int, present: bool, name: str = LABEL) -> str:
    """Make ``name`` present or absent on issue/PR ``number``; returns added/removed/unchanged."""

    def op() -> str:
        issue = repo.issue(number)
        have = {lbl.name for lbl in issue.labels()}
        if present and name not in have:
            issue.add_labels(name)
            return "added"
        if not present and name in have:
            issue.remove_label(name)
            return "removed"
        return "unchanged"

    return client.call(op, f"the label {name} on {repo.full_name}#{number}")
