"""The sticky PR comment: one per workflow and GPU class, found by a hidden marker, edited in place.

The marker is an HTML comment on the first line, so GitHub shows nothing of it. Finding it pages
through every comment of the pull request (github3 follows the ``Link`` headers), because on a
busy PR the bot's comment is not on the first page. Two comments with the same marker (a create
whose answer was lost) are repaired: the first is edited, the others deleted, so re-running the
job converges on exactly one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kperf_ci.github.client import Client, GitHubUserError, not_found

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def marker(workflow: str, gpu_class: str) -> str:
    """The hidden first line of the comment of ``workflow`` on ``gpu_class``."""
    w, c = _SAFE.sub("_", workflow)[:64] or "_", _SAFE.sub("_", gpu_class)[:64] or "_"
    return f"<!-- kperf-ci:sticky workflow={w} class={c} -->"


@dataclass(frozen=True)
class CommentResult:
    action: str  # created | edited | unchanged
    comment_id: int
    deleted_duplicates: int = 0


def with_marker(body: str, mark: str) -> str:
    return f"{mark}\n{body}"


def upsert(client: Client, repo: Any, number: int, body: str, mark: str) -> CommentResult:
    """Create or edit the comment of ``mark`` on issue/PR ``number`` of ``repo``."""
    full = with_marker(body, mark)

    def op() -> CommentResult:
        issue = repo.issue(number)
        if issue is None:
            raise LookupError
        ours = [c for c in issue.comments() if (c.body or "").startswith(mark)]
        if not ours:
            created = issue.create_comment(full)
            return CommentResult("created", int(created.id))
        first, extra = ours[0], ours[1:]
        for dup in extra:
            dup.delete()
        if first.body == full:
            return CommentResult("unchanged", int(first.id), len(extra))
        first.edit(full)
        return CommentResult("edited", int(first.id), len(extra))

    try:
        return client.call(op, f"the comment on {repo.full_name}#{number}")
    except LookupError:
        raise GitHubUserError(not_found(f"pull request {repo.full_name}#{number}")) from None
