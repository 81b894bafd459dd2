"""A commit status per GPU class: ``kperf/<class>`` with a one-line summary and the report's URL.

A commit status (not a check run) because a workflow's ``GITHUB_TOKEN`` can set one with
``statuses: write``, also from the ``workflow_run`` job of a fork PR, while check runs need a
GitHub App for anything but the job's own check suite. A run with no verdict (no comparable
baseline) is never a green status, and commit statuses have no neutral state: it is a check
run with conclusion ``neutral`` where the token may create one, else a status ``error`` whose
description gives the reason (:func:`set_no_verdict`)."""

from __future__ import annotations

import datetime as _dt
from typing import Any

from github3.repos.repo import Repository

from kperf_ci.github.client import Client, GitHubRefused

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


#: what GitHub answers a token that may not create check runs (403: no ``checks: write``; 404 /
#: 422: a token of no GitHub App, an Enterprise Server without the checks API)
_NO_CHECKS = (403, 404, 422)


def set_no_verdict(client: Client, repo: Any, sha: str, reason: str, ctx: str, target_url: str | None) -> str:
    """A run that was not judged (``reason``): a check run ``ctx`` with conclusion ``neutral``
    where the token may create check runs, else a commit status ``error`` whose description
    gives the reason. Returns what was set: "neutral" (check run) or "error" (status)."""
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    data = {
        "name": ctx,
        "head_sha": sha,
        "status": "completed",
        "conclusion": "neutral",
        "completed_at": now,
        "details_url": target_url or None,
        "output": {"title": "no verdict", "summary": one_line(reason)},
    }
    # github3 lets only a session it knows to be a GitHub App's create check runs, but a
    # workflow's GITHUB_TOKEN is an App installation token it cannot recognise: the call that
    # github3's decorator wraps is made directly (same URL, headers and body)
    create = Repository.create_check_run.__wrapped__  # type: ignore[attr-defined]
    try:
        client.call(
            lambda: create(repo, **{k: v for k, v in data.items() if v is not None}),
            f"the check run {ctx} on {sha[:12]}",
            refused=_NO_CHECKS,
        )
        return "neutral"
    except GitHubRefused:
        set_status(client, repo, sha, "error", f"no verdict: {reason}", ctx, target_url)
        return "error"
