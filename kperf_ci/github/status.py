"""A commit status per GPU class: ``kperf/<class>`` with a one-line summary and the report's URL.

A commit status (not a check run) because a workflow's ``GITHUB_TOKEN`` can set one with
``statuses: write``, also from the ``workflow_run`` job of a fork PR, while check runs need a
GitHub App for anything but the job's own check suite."""

from __future__ import annotations

from typing import Any

from kperf_ci.github.client import Client

STATES = ("success", "failure", "error", "pending")
MAX_DESCRIPTION = 140  # GitHub's limit for a status description


def context(gpu_class: str, prefix: str = "kperf") -> str:
    return f"{prefix}/{gpu_class}"


def one_line(text: str) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= MAX_DESCRIPTION else line[: MAX_DESCRIPTION - 1] + "…"


def set_status(
    client: Client,
    repo: Any,
    sha: str,
    state: str,
    description: str,
    ctx: str,
    target_url: str | None,
) -> Any:
    if state not in STATES:
        raise ValueError(f"state {state!r} not in {STATES}")
    return client.call(
        lambda: repo.create_status(
            sha, state, target_url=target_url or None, description=one_line(description), context=ctx
        ),
        f"the status {ctx} on {sha[:12]}",
    )
