"""Issue 23, finding 4 (GitHub side): the token is masked before an error detail is cut, and a
--repo that is not OWNER/NAME never reaches an API URL."""

from __future__ import annotations

import pytest

from tests.github.conftest import TOKEN


def _token_pieces(text: str, n: int = 8) -> list[str]:
    """Every run of ``n`` token characters found in ``text``: a cut token is still a leak."""
    return [TOKEN[i : i + n] for i in range(len(TOKEN) - n + 1) if TOKEN[i : i + n] in text]


@pytest.mark.parametrize("status", [403, 422, 418])
def test_a_token_echoed_in_an_error_detail_is_masked_before_the_cut(fake_gh, kperf_gh, status):
    # the token straddles character 200 of the detail, where the message is cut
    fake_gh.fail("POST", r"/repos/octo/kernels/statuses/.*", status, body={"message": "x" * 185 + TOKEN})
    r = kperf_gh("status", "--sha", "a" * 40, "--state", "success", "--description", "fine")
    assert r.code == 2, r.err
    assert len(r.err.strip().splitlines()) == 1
    assert not _token_pieces(r.out + r.err), r.err
    assert "***" in r.err


@pytest.mark.parametrize("repo", ["o/n?x=1", "o/n#frag", "o/../n", "../x", "o/n/extra", "o", "-o/n", "o/.."])
@pytest.mark.parametrize("dry", [True, False])
def test_a_repo_that_is_not_owner_name_is_refused_before_any_request(fake_gh, kperf_gh, repo, dry):
    args = ["status", "--sha", "a" * 40, "--state", "success", "--description", "d", "--repo", repo]
    r = kperf_gh(*args, *(["--dry-run"] if dry else []))
    assert r.code == 2, (r.out, r.err)
    assert "expected OWNER/NAME" in r.err and len(r.err.strip().splitlines()) == 1
    assert not fake_gh.requests


def test_real_repo_names_still_pass(fake_gh, kperf_gh):
    r = kperf_gh(
        "status", "--sha", "a" * 40, "--state", "success", "--description", "d", "--repo", "octo/kernels"
    )
    assert r.code == 0, r.err
