"""open_pull_request (the agent's way to propose a change) and the client's policy, in process
against the fake GitHub: a PR is opened once, never merged; waits follow Retry-After."""

from __future__ import annotations

import pytest

from kperf_ci.github import client as ghc
from kperf_ci.github.pulls import head_sha, open_pull_request
from tests.github.conftest import TOKEN


@pytest.fixture
def client(fake_gh):
    waits: list[float] = []
    c = ghc.connect({"GITHUB_TOKEN": TOKEN, "GITHUB_API_URL": fake_gh.url}, sleep=waits.append)
    c.gh.session.trust_env = False  # no proxy between the test and 127.0.0.1
    c.waits = waits
    return c


def test_open_pull_request_once_and_never_merge(fake_gh, client):
    repo = client.repo("octo/kernels")
    pr = open_pull_request(client, repo, "kperf/faster-softmax", "main", "softmax: 2 warps", "why: ...")
    (create,) = fake_gh.calls("POST", "/repos/octo/kernels/pulls")
    assert create.body == {
        "title": "softmax: 2 warps",
        "base": "main",
        "head": "kperf/faster-softmax",
        "body": "why: ...",
    }
    again = open_pull_request(client, repo, "kperf/faster-softmax", "main", "softmax: 2 warps", "why: ...")
    assert again.number == pr.number and len(fake_gh.calls("POST", "/repos/octo/kernels/pulls")) == 1
    assert not [r for r in fake_gh.requests if r.path.endswith("/merge")]


def test_head_sha(fake_gh, client):
    assert head_sha(client, client.repo("octo/kernels"), 7) == "a" * 40
    with pytest.raises(ghc.GitHubUserError, match="404"):
        head_sha(client, client.repo("octo/kernels"), 99)


def test_waits_follow_retry_after_and_backoff(fake_gh, client):
    fake_gh.fail(
        "GET",
        "/repos/octo/kernels",
        403,
        headers={"Retry-After": "7"},
        body={"message": "secondary rate limit"},
    )
    fake_gh.fail("GET", "/repos/octo/kernels", 500)
    fake_gh.fail("GET", "/repos/octo/kernels", 429)
    client.repo("octo/kernels")
    assert client.waits == [7.0, ghc.BACKOFF_S * 2, max(ghc.BACKOFF_S * 4, 1.0)]


def test_KPERF_GITHUB_BACKOFF_S_sets_the_first_wait_of_a_5xx_not_a_retry_after(fake_gh):
    """The CLI tests set 0 (their GitHub is local); a Retry-After is still waited out as sent."""
    waits: list[float] = []
    env = {"GITHUB_TOKEN": TOKEN, "GITHUB_API_URL": fake_gh.url, "KPERF_GITHUB_BACKOFF_S": "0.25"}
    c = ghc.connect(env, sleep=waits.append)
    c.gh.session.trust_env = False
    fake_gh.fail("GET", "/repos/octo/kernels", 502)
    fake_gh.fail("GET", "/repos/octo/kernels", 503)
    fake_gh.fail("GET", "/repos/octo/kernels", 403, headers={"Retry-After": "3"}, body={"message": "x"})
    c.repo("octo/kernels")
    assert waits == [0.25, 0.5, 3.0]
    default = ghc.connect({"GITHUB_TOKEN": TOKEN, "GITHUB_API_URL": fake_gh.url})
    assert default.backoff_s == ghc.BACKOFF_S == 1.0


def test_primary_rate_limit_waits_until_reset(fake_gh, client, monkeypatch):
    monkeypatch.setattr(ghc.time, "time", lambda: 1000.0)
    fake_gh.fail(
        "GET", "/repos/octo/kernels", 403, headers={"x-ratelimit-remaining": "0", "x-ratelimit-reset": "1012"}
    )
    client.repo("octo/kernels")
    assert client.waits == [12.0]


def test_token_never_in_errors(fake_gh, client):
    fake_gh.fail("GET", "/repos/octo/kernels", 404, body={"message": f"no {TOKEN}"})
    with pytest.raises(ghc.GitHubUserError) as e:
        client.repo("octo/kernels")
    assert TOKEN not in str(e.value)


def test_bad_api_url_and_repo_name():
    with pytest.raises(ghc.GitHubUserError, match="GITHUB_API_URL"):
        ghc.connect({"GITHUB_TOKEN": "x", "GITHUB_API_URL": "ftp://nope"})
    c = ghc.connect({"KPERF_GITHUB_TOKEN": "x", "GITHUB_TOKEN": "y", "GITHUB_API_URL": "http://127.0.0.1:9"})
    assert c.token == "x"  # the kperf-specific variable wins
    with pytest.raises(ghc.GitHubUserError, match="OWNER/NAME"):
        c.repo("just-a-name")
