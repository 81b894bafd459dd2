"""One authenticated github3.py session: token, API URL, retries, errors that say the fix.

Everything kperf sends to GitHub goes through :func:`connect` and :meth:`Client.call`:

- the token comes from ``KPERF_GITHUB_TOKEN`` or ``GITHUB_TOKEN`` and is never printed: every
  message that leaves this module passes :func:`Client.redact`;
- the API root comes from ``GITHUB_API_URL`` (set by Actions; GitHub Enterprise Server's is
  ``https://HOST/api/v3``), so tests point it at a local server;
- 5xx answers, secondary rate limits (403/429 with ``Retry-After``) and an exhausted primary
  limit (``x-ratelimit-remaining: 0``) are retried with backoff; a whole operation is retried,
  never half of one, so an operation must be idempotent (find-then-edit, not blind create);
- 401/403/404 and validation errors (422) become one :class:`GitHubUserError` line naming the fix.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import github3
from github3 import exceptions as gh_exc

from kperf_ci.config import ENV_GITHUB_BACKOFF_S, ENV_GITHUB_TOKEN, env_seconds

T = TypeVar("T")

TOKEN_VARS = (ENV_GITHUB_TOKEN, "GITHUB_TOKEN")
DEFAULT_API = "https://api.github.com"
ATTEMPTS = 5
BACKOFF_S = 1.0  # first wait after a 5xx; doubles per attempt
MAX_WAIT_S = 60.0  # a Retry-After longer than this is not waited out in a CI job


class GitHubUserError(Exception):
    """A problem the user fixes (token, permission, repository, PR number): exit 2, one line."""


class GitHubRefused(GitHubUserError):
    """GitHub answered one of the codes the caller said it can do without (``refused``)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class _Retry(Exception):
    def __init__(self, wait_s: float, why: str) -> None:
        super().__init__(why)
        self.wait_s = wait_s


@dataclass
class Client:
    """A github3 session plus the token it must never show."""

    gh: Any
    token: str
    api_url: str
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)
    backoff_s: float = BACKOFF_S  # the first wait of a retry kperf times itself; doubles per attempt

    def redact(self, text: object) -> str:
        s = str(text)
        return s.replace(self.token, "***") if self.token else s

    def repo(self, full_name: str) -> Any:
        check_repo_name(full_name)
        owner, _, name = full_name.partition("/")
        found = self.call(lambda: self.gh.repository(owner, name), f"repository {full_name}")
        if found is None:  # github3 answers a 404 with None
            raise GitHubUserError(not_found(f"repository {full_name}"))
        return found

    def call(self, op: Callable[[], T], what: str, *, refused: tuple[int, ...] = ()) -> T:
        """Run ``op`` (one idempotent operation), retrying what GitHub says to retry. An answer
        with a code in ``refused`` that is not to be retried raises :class:`GitHubRefused`, for
        a caller with another way (a token that may not create check runs sets a status)."""
        for attempt in range(ATTEMPTS):
            try:
                return op()
            except gh_exc.GitHubError as e:
                # github3's UnprocessableResponseBody (valid JSON that lacks the fields it
                # expects) skips GitHubError's __init__: no code, no response. An unusable
                # answer, said in one line, never a kperf-ci bug (exit 3).
                for attr in ("code", "response"):
                    if not hasattr(e, attr):
                        setattr(e, attr, None)
                retry = _retry_for(e, attempt, self.backoff_s)
                if retry is None and e.code in refused:
                    raise GitHubRefused(self.redact(_message(e, what, self.redact)), e.code) from None
                if retry is None or attempt == ATTEMPTS - 1:
                    raise GitHubUserError(self.redact(_message(e, what, self.redact))) from None
            except gh_exc.ConnectionError as e:
                if attempt == ATTEMPTS - 1:
                    raise GitHubUserError(
                        self.redact(f"{what}: cannot reach {self.api_url} ({e}); check GITHUB_API_URL")
                    ) from None
                retry = _Retry(self.backoff_s * 2**attempt, "connection error")
            self.sleep(retry.wait_s)
        raise AssertionError("unreachable")  # pragma: no cover


def _header(e: gh_exc.GitHubError, name: str) -> str | None:
    headers = getattr(e.response, "headers", None) or {}
    return headers.get(name)


def _retry_for(e: gh_exc.GitHubError, attempt: int, backoff_s: float = BACKOFF_S) -> _Retry | None:
    code = e.code
    if not isinstance(code, int):  # no HTTP status: github3 could not use the answer (IncompleteResponse)
        return None
    if code >= 500:
        return _Retry(backoff_s * 2**attempt, f"{code} from GitHub")
    if code in (403, 429):
        after = _header(e, "Retry-After")
        if after is not None:  # a secondary rate limit says how long to wait
            try:
                return _Retry(min(float(after), MAX_WAIT_S), "secondary rate limit")
            except ValueError:
                return _Retry(backoff_s * 2**attempt, "secondary rate limit")
        if _header(e, "x-ratelimit-remaining") == "0":
            reset = _header(e, "x-ratelimit-reset")
            try:
                wait = float(reset) - time.time() if reset else backoff_s
            except ValueError:
                wait = backoff_s
            if wait <= MAX_WAIT_S:
                return _Retry(max(wait, 0.0), "rate limit")
        if code == 429 or "secondary rate limit" in str(getattr(e, "msg", "") or "").lower():
            return _Retry(max(backoff_s * 2**attempt, 1.0), "secondary rate limit")
    return None


def not_found(what: str) -> str:
    return (
        f"GitHub answered 404 for {what}: it does not exist or the token cannot see it; "
        "check --repo / --pr and that the token has access to the repository"
    )


#: GitHub's own rules: an owner is letters, digits and single hyphens; a repository name letters,
#: digits, ``.``, ``_`` and ``-``. Anything else (``?``, ``#``, ``/``, ``..``) would change the API
#: URL the name is pasted into.
_REPO_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/(?!\.\.?$)[A-Za-z0-9._-]{1,100}")


def check_repo_name(full_name: str) -> None:
    """Refuse what is not OWNER/NAME before it reaches an API URL (GitHubUserError, exit 2)."""
    if not _REPO_NAME.fullmatch(full_name or ""):
        raise GitHubUserError(f"--repo {full_name!r}: expected OWNER/NAME (e.g. octo-org/kernels)")


def _message(e: gh_exc.GitHubError, what: str, redact: Callable[[object], str] = str) -> str:
    # redacted before it is cut: a cut through the token would leave part of it unmasked
    detail = " ".join(redact(getattr(e, "msg", "") or "").split())[:200]
    if not isinstance(e.code, int):
        return (
            f"GitHub's answer for {what} was not what the API documents ({type(e).__name__}: "
            f"{detail or 'incomplete or unreadable body'}); check that GITHUB_API_URL is the GitHub REST API"
        )
    if e.code == 401:
        return (
            f"GitHub answered 401 for {what}: the token is missing, expired or invalid; "
            f"set {' or '.join(TOKEN_VARS)} to a valid token"
        )
    if e.code == 403:
        if _header(e, "x-ratelimit-remaining") == "0" or "rate limit" in detail.lower():
            return f"GitHub rate limit for {what} not lifted after {ATTEMPTS} attempts; rerun the job later"
        return (
            f"GitHub answered 403 for {what} ({detail}): the token lacks a permission; give the job "
            "`pull-requests: write`, `issues: write`, `statuses: write` and `contents: write` as it needs "
            "(a fork PR's token is read-only: post from the workflow_run job, see docs/github.md)"
        )
    if e.code == 404:
        return not_found(what)
    if e.code == 422:
        errors = redact("; ".join(str(x) for x in (e.errors or [])))[:200]
        return f"GitHub refused {what} as invalid (422: {detail}{'; ' + errors if errors else ''})"
    if e.code >= 500:
        return f"GitHub kept failing on {what} ({e.code}) after {ATTEMPTS} attempts; rerun the job later"
    return f"GitHub answered {e.code} for {what} ({detail})"


def token_from_env(env: dict[str, str] | None = None) -> str:
    env = dict(os.environ) if env is None else env
    for name in TOKEN_VARS:
        if env.get(name):
            return env[name]
    raise GitHubUserError(
        f"no GitHub token: set {' or '.join(TOKEN_VARS)} (in Actions: `env: GITHUB_TOKEN: "
        "${{ secrets.GITHUB_TOKEN }}`), or pass --dry-run to see what would be sent"
    )


def api_url_from_env(env: dict[str, str] | None = None) -> str:
    env = dict(os.environ) if env is None else env
    url = (env.get("GITHUB_API_URL") or DEFAULT_API).rstrip("/")
    if not url.startswith(("https://", "http://")):
        raise GitHubUserError(f"GITHUB_API_URL={url!r}: expected an http(s) URL such as {DEFAULT_API}")
    return url


def connect(env: dict[str, str] | None = None, sleep: Callable[[float], None] = time.sleep) -> Client:
    """A client for the token and API URL in the environment."""
    token = token_from_env(env)
    url = api_url_from_env(env)
    gh = github3.GitHub(token=token)
    gh.session.base_url = url  # github3 builds every URL from this; GitHubEnterprise does the same
    backoff_s = env_seconds(ENV_GITHUB_BACKOFF_S, BACKOFF_S, env)
    return Client(gh=gh, token=token, api_url=url, sleep=sleep, backoff_s=backoff_s)
