"""`kperf github`: post what a run found to GitHub (comment, status, label) and keep history.

Every subcommand renders from databases, talks to GitHub through :mod:`kperf_ci.github`, and
with ``--dry-run`` prints what it would send instead (no token needed, none printed). A GitHub
problem (token, permission, repository, PR) is one line and exit 2; 1 is never used here: the
verdict is the job of ``kperf compare`` / ``kperf ab`` / ``kperf gate``.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from kperf_ci.config import ENV_COMMENT_KEY, ENV_GPU_CLASS
from kperf_ci.errors import KperfError, user_errors
from kperf_ci.github import body as bodies
from kperf_ci.github import client as ghc
from kperf_ci.github import comment as sticky
from kperf_ci.github import history, labels, pulls, status
from kperf_ci.report.safe_text import terminal_safe

F = TypeVar("F", bound=Callable[..., Any])


def github_errors(fn: F) -> F:
    """GitHubUserError -> one line, exit 2 (the token already redacted by the client)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ghc.GitHubUserError as e:
            raise KperfError(str(e)) from None

    return user_errors(wrapper)  # type: ignore[return-value]


def _repo_opt(fn: F) -> F:
    return click.option(
        "--repo",
        default=lambda: os.environ.get("GITHUB_REPOSITORY", ""),
        help="OWNER/NAME (default: $GITHUB_REPOSITORY)",
    )(fn)


def _class_opt(fn: F) -> F:
    return click.option(
        "--class",
        "gpu_class",
        default=lambda: os.environ.get(ENV_GPU_CLASS) or "default",
        show_default="$KPERF_GPU_CLASS or default",
        help="machine class (runner label such as h100): one comment, status and history per class",
    )(fn)


def _inputs(fn: F, *, link: bool = True) -> F:
    opts = [
        click.option(
            "--ab-db",
            "ab_db",
            multiple=True,
            type=click.Path(dir_okay=False),
            help="database written by `kperf ab` (repeatable: one section each)",
        ),
        click.option(
            "--db", type=click.Path(dir_okay=False), help="run database (`kperf run`, merged shards)"
        ),
        click.option("--baseline", type=click.Path(dir_okay=False), help="baseline database for --db"),
    ]
    if link:
        opts.append(
            click.option(
                "--link",
                help="URL of the full report (workflow run or artifact page): linked from the comment; "
                "for `status`, the target URL when --target-url is not given",
            )
        )
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def _inputs_no_link(fn: F) -> F:
    return _inputs(fn, link=False)


def _dry_opt(fn: F) -> F:
    return click.option("--dry-run", is_flag=True, help="print what would be sent; send nothing")(fn)


def _need_repo(repo: str) -> str:
    if not repo:
        raise KperfError("no repository: pass --repo OWNER/NAME (Actions sets $GITHUB_REPOSITORY)")
    try:
        ghc.check_repo_name(repo)  # before any database is read, and in --dry-run too
    except ghc.GitHubUserError as e:
        raise KperfError(str(e)) from None
    return repo


def _existing(path: str | None, option: str) -> Path | None:
    if path is None:
        return None
    p = Path(path)
    if not p.is_file():
        raise KperfError(f"{path}: no such database ({option}); download the job's reports/ artifact first")
    return p


def _verdict(
    gpu_class: str, ab_db: tuple[str, ...], db: str | None, baseline: str | None, link: str | None
) -> bodies.Verdict:
    parts = []
    # each section gets an equal share of what GitHub accepts for one comment (the renderers'
    # minimum is 2,000 characters each)
    share = max(2000, (bodies.COMMENT_BUDGET - 200) // max(1, len(ab_db) + (db is not None)))
    for i, path in enumerate(ab_db):
        ab = _existing(path, "--ab-db")
        assert ab is not None
        # the link once per comment: under the last A/B section, or in the static section (--db)
        last = i == len(ab_db) - 1 and db is None
        parts.append(bodies.from_ab(ab, share, link if last else None))
    run = _existing(db, "--db")
    if run is not None:
        parts.append(bodies.from_run(run, _existing(baseline, "--baseline"), link, share))
    return bodies.combine(gpu_class, parts)


def _plan(action: str, **what: Any) -> None:
    click.echo(f"dry run: would {action}")
    click.echo(json.dumps(what, indent=2, ensure_ascii=False))


@click.group("github")
def github_group() -> None:
    """Post results to GitHub: sticky PR comment, commit status, label; history on a branch.

    Token: $KPERF_GITHUB_TOKEN or $GITHUB_TOKEN (never printed). API: $GITHUB_API_URL."""


@github_group.command("comment")
@_repo_opt
@click.option("--pr", "pr", type=click.IntRange(1, None), required=True, help="pull request number")
@click.option("--expect-head-sha", help="refuse unless the PR is at this commit (fork-safe workflow_run job)")
@click.option(
    "--workflow",
    default=lambda: os.environ.get(ENV_COMMENT_KEY) or "kperf",
    show_default="$KPERF_COMMENT_KEY or kperf",
    help="key of the sticky comment (one comment per key and class)",
)
@_class_opt
@_inputs
@_dry_opt
@github_errors
def comment_cmd(
    repo: str,
    pr: int,
    expect_head_sha: str | None,
    workflow: str,
    gpu_class: str,
    ab_db: tuple[str, ...],
    db: str | None,
    baseline: str | None,
    link: str | None,
    dry_run: bool,
) -> None:
    """Create or edit the sticky comment of this workflow and GPU class on a pull request."""
    repo = _need_repo(repo)
    verdict = _verdict(gpu_class, ab_db, db, baseline, link)
    mark = sticky.marker(workflow, gpu_class)
    if dry_run:
        _plan(
            f"create or edit the comment marked {mark} on {repo}#{pr}",
            body=sticky.with_marker(verdict.markdown, mark),
        )
        return
    client = ghc.connect()
    repository = client.repo(repo)
    if expect_head_sha:
        pulls.check_head(client, repository, pr, expect_head_sha)
    result = sticky.upsert(client, repository, pr, verdict.markdown, mark)
    extra = f", {result.deleted_duplicates} duplicate(s) deleted" if result.deleted_duplicates else ""
    click.echo(
        terminal_safe(f"kperf github: comment {result.action} on {repo}#{pr} (id {result.comment_id}{extra})")
    )


@github_group.command("status")
@_repo_opt
@click.option("--sha", default=lambda: os.environ.get("GITHUB_SHA", ""), help="commit (default: $GITHUB_SHA)")
@click.option(
    "--state", type=click.Choice(status.STATES), help="override the state derived from the databases"
)
@click.option(
    "--target-url", help="where the status links to (the report artifact or the run page; default: --link)"
)
@click.option("--description", help="override the one-line summary derived from the databases")
@_class_opt
@_inputs
@_dry_opt
@github_errors
def status_cmd(
    repo: str,
    sha: str,
    state: str | None,
    target_url: str | None,
    description: str | None,
    gpu_class: str,
    ab_db: tuple[str, ...],
    db: str | None,
    baseline: str | None,
    link: str | None,
    dry_run: bool,
) -> None:
    """Set the commit status kperf/<class>: failure on a regression, success when judged clean;
    a run with no verdict (no comparable baseline) is a neutral check run, or an error status
    where the token may not create check runs, never a success."""
    repo = _need_repo(repo)
    target_url = target_url or link
    if not sha:
        raise KperfError("no commit: pass --sha (Actions sets $GITHUB_SHA)")
    given = state and description is not None  # e.g. the release gate: its verdict comes from `kperf gate`
    verdict = None if given else _verdict(gpu_class, ab_db, db, baseline, link)
    state, summary, no_verdict = bodies.status_of(verdict, state, description)
    ctx = status.context(gpu_class)
    description = status.one_line(summary)
    if no_verdict:
        _no_verdict(repo, sha, ctx, no_verdict, target_url, dry_run)
        return
    if dry_run:
        _plan(
            f"set status {ctx} on {repo}@{sha}", state=state, description=description, target_url=target_url
        )
        return
    client = ghc.connect()
    status.set_status(client, client.repo(repo), sha, state, description, ctx, target_url)
    click.echo(terminal_safe(f"kperf github: status {ctx} = {state} on {sha[:12]}: {description}"))


def _no_verdict(repo: str, sha: str, ctx: str, reason: str, target_url: str | None, dry_run: bool) -> None:
    if dry_run:
        _plan(
            f"create check run {ctx} = neutral on {repo}@{sha} (a status {ctx} = error where the token "
            "may not create check runs)",
            reason=status.one_line(reason),
            target_url=target_url,
        )
        return
    client = ghc.connect()
    got = status.set_no_verdict(client, client.repo(repo), sha, reason, ctx, target_url)
    what = "check run" if got == "neutral" else "status"
    click.echo(terminal_safe(f"kperf github: {what} {ctx} = {got} on {sha[:12]}: no verdict: {reason}"))


@github_group.command("label")
@_repo_opt
@click.option("--pr", "pr", type=click.IntRange(1, None), required=True, help="pull request number")
@click.option(
    "--set/--clear", "present", default=None, help="force the label on/off (default: from the databases)"
)
@click.option("--name", default=labels.LABEL, show_default=True, help="label name")
@_class_opt
@_inputs_no_link
@_dry_opt
@github_errors
def label_cmd(
    repo: str,
    pr: int,
    present: bool | None,
    name: str,
    gpu_class: str,
    ab_db: tuple[str, ...],
    db: str | None,
    baseline: str | None,
    dry_run: bool,
) -> None:
    """Set the perf-regression label when a regression was found, clear it when none was."""
    repo = _need_repo(repo)
    if present is None:
        present = _verdict(gpu_class, ab_db, db, baseline, None).regression
    if dry_run:
        _plan(f"{'add' if present else 'remove'} label {name} on {repo}#{pr}", label=name, present=present)
        return
    client = ghc.connect()
    action = labels.apply_label(client, client.repo(repo), pr, present, name)
    click.echo(terminal_safe(f"kperf github: label {name} {action} on {repo}#{pr}"))


@github_group.group("baseline")
def baseline_group() -> None:
    """History databases per GPU class on the kperf-history branch."""


@baseline_group.command("pull")
@_repo_opt
@_class_opt
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False), required=True, help="where to write the database"
)
@click.option("--branch", default=history.BRANCH, show_default=True)
@_dry_opt
@github_errors
def pull_cmd(repo: str, gpu_class: str, output: str, branch: str, dry_run: bool) -> None:
    """Download the class's history database (exit 0 with a note when there is none yet)."""
    repo = _need_repo(repo)
    path = history.history_path(gpu_class)
    if dry_run:
        _plan(f"download {branch}:{path} of {repo} to {output}", replaces=Path(output).exists())
        return
    client = ghc.connect()
    if history.pull(client, client.repo(repo), gpu_class, Path(output), branch):
        click.echo(terminal_safe(f"kperf github: {branch}:{path} -> {output}"))
    else:
        click.echo(terminal_safe(f"kperf github: no {branch}:{path} yet; the first push on main creates it"))


@baseline_group.command("push")
@_repo_opt
@_class_opt
@click.option(
    "--db", "db", type=click.Path(dir_okay=False), required=True, help="the history database to store"
)
@click.option("--branch", default=history.BRANCH, show_default=True)
@click.option("--message", help="commit message (default: names the class and $GITHUB_SHA)")
@_dry_opt
@github_errors
def push_cmd(repo: str, gpu_class: str, db: str, branch: str, message: str | None, dry_run: bool) -> None:
    """Commit the class's history database to the history branch (fast-forward only)."""
    repo = _need_repo(repo)
    src = _existing(db, "--db")
    assert src is not None
    bodies.check_database(src)  # a broken database is never pushed over a good history
    path = history.history_path(gpu_class)
    message = message or f"kperf history: {gpu_class} at {os.environ.get('GITHUB_SHA', 'local')[:12]}"
    if dry_run:
        _plan(f"commit {src} as {branch}:{path} on {repo}", message=message, bytes=src.stat().st_size)
        return
    client = ghc.connect()
    sha = history.push(client, client.repo(repo), gpu_class, src, message, branch)
    click.echo(terminal_safe(f"kperf github: {src} -> {branch}:{path} (commit {sha[:12]})"))
