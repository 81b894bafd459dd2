"""Pull requests: open one (never merge), and check which commit a PR is at.

``open_pull_request`` is what the agent calls to propose a change; kperf never merges."""

from __future__ import annotations

from typing import Any

from kperf_ci.github.client import Client, GitHubUserError, not_found


def open_pull_request(client: Client, repo: Any, head: str, base: str, title: str, body: str) -> Any:
    """Open a PR from ``head`` into ``base``; an open PR of the same head and base is reused."""

    def op() -> Any:
        for pr in repo.pull_requests(state="open", head=_qualified(repo, head), base=base):
            return pr
        return repo.create_pull(title, base, head, body)

    return client.call(op, f"a pull request {head} -> {base} on {repo.full_name}")


def _qualified(repo: Any, head: str) -> str:
    return head if ":" in head else f"{repo.full_name.split('/')[0]}:{head}"


def head_sha(client: Client, repo: Any, number: int) -> str:
    pr = client.call(lambda: repo.pull_request(number), f"pull request {repo.full_name}#{number}")
    if pr is None:
        raise GitHubUserError(not_found(f"pull request {repo.full_name}#{number}"))
    return str(pr.head.sha)


def check_head(client: Client, repo: Any, number: int, expected_sha: str) -> None:
    """Refuse to post when PR ``number`` is not at ``expected_sha``.

    In the fork-safe workflow the PR number comes from the (untrusted) artifact while the sha
    comes from GitHub's own ``workflow_run`` event: a forged number cannot move the comment onto
    another pull request."""
    sha = head_sha(client, repo, number)
    if sha != expected_sha:
        raise GitHubUserError(
            f"pull request {repo.full_name}#{number} is at {sha[:12]}, not {expected_sha[:12]} "
            "(--expect-head-sha): the artifact names another PR or the PR moved on; nothing was posted"
        )
