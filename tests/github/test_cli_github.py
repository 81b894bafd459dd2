"""`kperf github` end to end against a fake GitHub on 127.0.0.1 (a subprocess per command)."""

from __future__ import annotations

from kperf_ci.github.comment import marker
from tests.github.conftest import TOKEN, ab_db

COMMENTS = r"/repos/octo/kernels/issues/7/comments"


def test_comment_created_then_edited_not_duplicated(fake_gh, kperf_gh, tmp_path, run_db, baseline_db):
    # other people's comments fill more than one page, so the bot's comment is on page 2
    for i in range(3):
        fake_gh.add_comment(7, f"review comment {i}")
    first = ab_db(tmp_path, slower=1, name="ab1.db")
    r = kperf_gh("comment", "--pr", "7", "--class", "h100", "--ab-db", str(first))
    assert r.code == 0, r.err
    assert "comment created" in r.out
    ours = [b for b in fake_gh.issue_comments(7) if b.startswith(marker("kperf", "h100"))]
    assert len(ours) == 1 and "slower" in ours[0] and "+7.20%" in ours[0]
    assert len(fake_gh.calls("POST", COMMENTS)) == 1

    second = ab_db(tmp_path, slower=0, name="ab2.db")
    r = kperf_gh("comment", "--pr", "7", "--class", "h100", "--ab-db", str(second), "--db", str(run_db))
    assert r.code == 0, r.err
    assert "comment edited" in r.out
    ours = [b for b in fake_gh.issue_comments(7) if b.startswith(marker("kperf", "h100"))]
    assert len(ours) == 1, "the second push must edit the comment, not add one"
    assert "no kernel slower" in ours[0] and "kperf:" in ours[0]  # A/B section and static section
    assert len(fake_gh.calls("POST", COMMENTS)) == 1
    patches = fake_gh.calls("PATCH", r"/repos/octo/kernels/issues/comments/\d+")
    assert len(patches) == 1 and patches[0].body["body"] == ours[0]
    # pagination was followed: the list was read page by page
    pages = {tuple(r.query.get("page", ["1"])) for r in fake_gh.calls("GET", COMMENTS)}
    assert ("2",) in pages
    assert len(fake_gh.issue_comments(7)) == 4  # three reviews + ours


def test_each_gpu_class_gets_its_own_comment(fake_gh, kperf_gh, tmp_path):
    db = ab_db(tmp_path, slower=0)
    for cls in ("h100", "a100", "h100"):
        assert kperf_gh("comment", "--pr", "7", "--class", cls, "--ab-db", str(db)).code == 0
    bodies = fake_gh.issue_comments(7)
    assert sum(b.startswith(marker("kperf", "h100")) for b in bodies) == 1
    assert sum(b.startswith(marker("kperf", "a100")) for b in bodies) == 1


def test_duplicate_sticky_comments_are_repaired(fake_gh, kperf_gh, tmp_path):
    mark = marker("kperf", "h100")
    fake_gh.add_comment(7, mark + "\nold 1")
    fake_gh.add_comment(7, mark + "\nold 2")
    r = kperf_gh("comment", "--pr", "7", "--class", "h100", "--ab-db", str(ab_db(tmp_path, slower=0)))
    assert r.code == 0, r.err
    assert [b for b in fake_gh.issue_comments(7) if b.startswith(mark)] == [
        b for b in fake_gh.issue_comments(7) if "kperf ab" in b
    ]
    assert len([b for b in fake_gh.issue_comments(7) if b.startswith(mark)]) == 1


def test_status_set_per_class_with_link(fake_gh, kperf_gh, tmp_path):
    url = "https://github.com/octo/kernels/actions/runs/1"
    sha = "c" * 40
    r = kperf_gh(
        "status",
        "--sha",
        sha,
        "--class",
        "h100",
        "--ab-db",
        str(ab_db(tmp_path, slower=1)),
        "--target-url",
        url,
    )
    assert r.code == 0, r.err
    (req,) = fake_gh.calls("POST", rf"/repos/octo/kernels/statuses/{sha}")
    assert req.body["state"] == "failure"
    assert req.body["context"] == "kperf/h100"
    assert req.body["target_url"] == url
    assert "slower" in req.body["description"] and "\n" not in req.body["description"]
    assert len(req.body["description"]) <= 140
    r = kperf_gh(
        "status", "--sha", sha, "--class", "h100", "--ab-db", str(ab_db(tmp_path, slower=0, name="b.db"))
    )
    assert r.code == 0 and fake_gh.statuses[-1]["state"] == "success"


def test_label_set_and_cleared(fake_gh, kperf_gh, tmp_path):
    assert kperf_gh("label", "--pr", "7", "--ab-db", str(ab_db(tmp_path, slower=1))).code == 0
    assert fake_gh.labels[7] == ["perf-regression"]
    (add,) = fake_gh.calls("POST", r"/repos/octo/kernels/issues/7/labels")
    assert add.body == ["perf-regression"]
    # a second run with the regression still there changes nothing
    assert kperf_gh("label", "--pr", "7", "--ab-db", str(ab_db(tmp_path, slower=1, name="x.db"))).code == 0
    assert len(fake_gh.calls("POST", r"/repos/octo/kernels/issues/7/labels")) == 1
    r = kperf_gh("label", "--pr", "7", "--ab-db", str(ab_db(tmp_path, slower=0, name="y.db")))
    assert r.code == 0 and "removed" in r.out
    assert fake_gh.labels[7] == []
    assert len(fake_gh.calls("DELETE", r"/repos/octo/kernels/issues/7/labels/perf-regression")) == 1


def test_retries_on_5xx_and_secondary_rate_limit(fake_gh, kperf_gh, tmp_path):
    fake_gh.fail("POST", COMMENTS, 502)
    fake_gh.fail(
        "GET",
        COMMENTS,
        403,
        headers={"Retry-After": "0"},
        body={"message": "You have exceeded a secondary rate limit."},
    )
    r = kperf_gh("comment", "--pr", "7", "--ab-db", str(ab_db(tmp_path, slower=0)))
    assert r.code == 0, r.err
    assert [x.status for x in fake_gh.calls("POST", COMMENTS)] == [502, 201]
    assert len(fake_gh.issue_comments(7)) == 1  # retried as a whole: found nothing, created once


def test_gives_up_after_persistent_5xx_with_one_line(fake_gh, kperf_gh, tmp_path, monkeypatch):
    fake_gh.fail("GET", r"/repos/octo/kernels", 503, times=99, headers={"Retry-After": "0"})
    r = kperf_gh("status", "--sha", "d" * 40, "--state", "success", "--ab-db", str(ab_db(tmp_path, slower=0)))
    assert r.code == 2
    assert len(r.err.strip().splitlines()) == 1 and "503" in r.err and "rerun" in r.err
    assert len(fake_gh.calls("GET", r"/repos/octo/kernels")) == 5


def test_422_is_one_line(fake_gh, kperf_gh, tmp_path):
    fake_gh.fail("POST", r"/repos/octo/kernels/statuses/.*", 422, body={"message": "Validation Failed"})
    r = kperf_gh("status", "--sha", "e" * 40, "--ab-db", str(ab_db(tmp_path, slower=0)))
    assert r.code == 2 and "422" in r.err and "Validation Failed" in r.err
    assert len(r.err.strip().splitlines()) == 1


def test_bad_token_401_is_one_line_exit_2(fake_gh, kperf_gh, tmp_path):
    wrong = "ghp_wrongTOKENvalue99999999"
    r = kperf_gh("comment", "--pr", "7", "--ab-db", str(ab_db(tmp_path, slower=0)), token=wrong)
    assert r.code == 2
    line = r.err.strip()
    assert len(line.splitlines()) == 1 and "401" in line and "GITHUB_TOKEN" in line
    assert wrong not in r.err + r.out


def test_missing_pr_404_and_missing_token(fake_gh, kperf_gh, tmp_path):
    db = str(ab_db(tmp_path, slower=0))
    r = kperf_gh("comment", "--pr", "999", "--ab-db", db)
    assert r.code == 2 and "404" in r.err and "--pr" in r.err and len(r.err.strip().splitlines()) == 1
    r = kperf_gh("comment", "--pr", "7", "--ab-db", db, env={"GITHUB_REPOSITORY": "octo/nope"})
    assert r.code == 2 and "404" in r.err
    r = kperf_gh("comment", "--pr", "7", "--ab-db", db, token=None)
    assert r.code == 2 and "no GitHub token" in r.err
    assert fake_gh.calls("POST", COMMENTS) == []


def test_403_without_rate_limit_names_the_permission(fake_gh, kperf_gh, tmp_path):
    fake_gh.fail("POST", COMMENTS, 403, body={"message": "Resource not accessible by integration"})
    r = kperf_gh("comment", "--pr", "7", "--ab-db", str(ab_db(tmp_path, slower=0)))
    assert r.code == 2 and "pull-requests: write" in r.err and "workflow_run" in r.err
    assert len(fake_gh.calls("POST", COMMENTS)) == 1  # a plain 403 is not retried


def test_fork_safe_head_check(fake_gh, kperf_gh, tmp_path):
    db = str(ab_db(tmp_path, slower=0))
    r = kperf_gh("comment", "--pr", "7", "--ab-db", db, "--expect-head-sha", "b" * 40)
    assert r.code == 2 and "nothing was posted" in r.err
    assert fake_gh.issue_comments(7) == []
    r = kperf_gh("comment", "--pr", "7", "--ab-db", db, "--expect-head-sha", "a" * 40)
    assert r.code == 0 and len(fake_gh.issue_comments(7)) == 1


def test_dry_run_sends_nothing_and_needs_no_token(fake_gh, kperf_gh, tmp_path):
    db = str(ab_db(tmp_path, slower=1))
    r = kperf_gh("comment", "--pr", "7", "--class", "h100", "--ab-db", db, "--dry-run", token=None)
    assert r.code == 0 and marker("kperf", "h100") in r.out and "slower" in r.out
    r = kperf_gh("status", "--sha", "f" * 40, "--ab-db", db, "--dry-run")
    assert r.code == 0 and '"failure"' in r.out
    r = kperf_gh("label", "--pr", "7", "--ab-db", db, "--dry-run")
    assert r.code == 0 and "add label perf-regression" in r.out
    assert fake_gh.requests == []


def test_history_push_then_pull(fake_gh, kperf_gh, tmp_path, run_db):
    r = kperf_gh("baseline", "pull", "--class", "h100", "-o", str(tmp_path / "none.db"))
    assert r.code == 0 and "no kperf-history:h100.db yet" in r.out
    r = kperf_gh("baseline", "push", "--class", "h100", "--db", str(run_db), env={"GITHUB_SHA": "1" * 40})
    assert r.code == 0, r.err
    assert fake_gh.file_on_branch("kperf-history", "h100.db") == run_db.read_bytes()
    # second push: a commit on top (fast-forward), the other class untouched
    r = kperf_gh("baseline", "push", "--class", "a100", "--db", str(run_db))
    assert r.code == 0, r.err
    assert fake_gh.file_on_branch("kperf-history", "h100.db") == run_db.read_bytes()
    assert fake_gh.file_on_branch("kperf-history", "a100.db") == run_db.read_bytes()
    assert len(fake_gh.calls("PATCH", r"/repos/octo/kernels/git/refs/heads/kperf-history")) == 1
    out = tmp_path / "pulled.db"
    r = kperf_gh("baseline", "pull", "--class", "h100", "-o", str(out))
    assert r.code == 0, r.err
    assert out.read_bytes() == run_db.read_bytes()


def test_history_push_refuses_a_broken_database(fake_gh, kperf_gh, tmp_path):
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"not a database at all" * 10)
    r = kperf_gh("baseline", "push", "--class", "h100", "--db", str(bad))
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1
    assert fake_gh.requests == []


def test_token_in_a_server_message_is_redacted(fake_gh, kperf_gh, tmp_path):
    # a proxy or server that echoes the credential must not make kperf print it
    fake_gh.fail("POST", COMMENTS, 422, body={"message": f"bad header token {TOKEN}"})
    r = kperf_gh("comment", "--pr", "7", "--ab-db", str(ab_db(tmp_path, slower=0)))
    assert r.code == 2 and "***" in r.err


def test_comment_fits_githubs_size_limit(fake_gh, kperf_gh, tmp_path, run_db, baseline_db):
    db = str(ab_db(tmp_path, slower=1))
    many = [arg for _ in range(200) for arg in ("--ab-db", db)]
    r = kperf_gh("comment", "--pr", "7", *many, "--db", str(run_db), "--baseline", str(baseline_db))
    assert r.code == 0, r.err
    (body,) = fake_gh.issue_comments(7)
    assert len(body) <= 65_536 and "truncated" in body


def test_an_answer_github3_cannot_use_is_one_line_exit_2_not_retried(fake_gh, kperf_gh, tmp_path):
    # a 200 whose body lacks what the API documents: github3 raises IncompleteResponse, code None
    fake_gh.fail("GET", r"/repos/octo/kernels", 200, times=99, body={"message": "hello from a proxy"})
    r = kperf_gh("status", "--sha", "f" * 40, "--state", "success", "--ab-db", str(ab_db(tmp_path, slower=0)))
    assert r.code == 2, (r.out, r.err)
    assert len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err
    assert "GITHUB_API_URL" in r.err
    assert len(fake_gh.calls("GET", r"/repos/octo/kernels")) == 1  # not retried
    # a created comment answered with a minimal body fails the same way
    fake_gh.failures.clear()
    fake_gh.fail("POST", COMMENTS, 201, body={"id": 1})
    r = kperf_gh("comment", "--pr", "7", "--ab-db", str(ab_db(tmp_path, slower=0, name="m.db")))
    assert r.code == 2, (r.out, r.err)
    assert len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err


def test_link_reaches_the_ab_comment_and_the_status_and_label_has_none(fake_gh, kperf_gh, tmp_path):
    url = "https://github.com/octo/kernels/actions/runs/42"
    db = str(ab_db(tmp_path, slower=1))
    r = kperf_gh("comment", "--pr", "7", "--class", "h100", "--ab-db", db, "--link", url)
    assert r.code == 0, r.err
    (ours,) = [b for b in fake_gh.issue_comments(7) if b.startswith(marker("kperf", "h100"))]
    assert f"[Full report]({url})" in ours
    # --link is the status's target URL when --target-url is not given; --target-url wins
    sha = "b" * 40
    assert kperf_gh("status", "--sha", sha, "--ab-db", db, "--link", url).code == 0
    assert fake_gh.statuses[-1]["target_url"] == url
    other = "https://example.com/report/"
    assert kperf_gh("status", "--sha", sha, "--ab-db", db, "--link", url, "--target-url", other).code == 0
    assert fake_gh.statuses[-1]["target_url"] == other
    # label has nothing to link: the option is gone
    r = kperf_gh("label", "--pr", "7", "--ab-db", db, "--link", url)
    assert r.code == 2 and "--link" in r.err
    # a link that is not a plain URL is refused, not rendered
    r = kperf_gh("comment", "--pr", "7", "--ab-db", db, "--link", "javascript:alert(1)", "--dry-run")
    assert r.code == 2 and "--link" in r.err


def test_history_pull_dry_run_sends_nothing_and_writes_nothing(fake_gh, kperf_gh, tmp_path):
    out = tmp_path / "h.db"
    r = kperf_gh("baseline", "pull", "--class", "h100", "-o", str(out), "--dry-run", token=None)
    assert r.code == 0, r.err
    assert "dry run: would download kperf-history:h100.db of octo/kernels" in r.out
    assert not out.exists()
    assert fake_gh.requests == []


def test_no_comparable_baseline_is_never_a_success_status(fake_gh, kperf_gh, tmp_path, run_db, baseline_db):
    """Issue 37, item 15. Was: a `success` commit status. Now a check run with conclusion
    `neutral`, or, where the token may not create check runs, a status `error` with the reason."""
    sha = "d" * 40
    args = ("status", "--sha", sha, "--class", "h100", "--db", str(run_db), "--baseline", str(baseline_db))
    r = kperf_gh(*args)
    assert r.code == 0, r.err
    (check,) = fake_gh.check_runs
    assert check["conclusion"] == "neutral" and check["status"] == "completed", check
    assert check["head_sha"] == sha and check["name"] == "kperf/h100"
    assert "no comparable baseline" in check["output"]["summary"]
    assert not fake_gh.statuses, fake_gh.statuses
    assert "check run kperf/h100 = neutral" in r.out
    # a workflow token without `checks: write`
    fake_gh.fail("POST", r"/repos/octo/kernels/check-runs", 403, body={"message": "Resource not accessible"})
    r = kperf_gh(*args)
    assert r.code == 0, r.err
    (st,) = fake_gh.statuses
    assert st["state"] == "error" and st["context"] == "kperf/h100", st
    assert st["description"].startswith("no verdict: no comparable baseline"), st
    assert len(st["description"]) <= 140
    assert "status kperf/h100 = error" in r.out


def test_an_answer_without_the_fields_github_documents_is_one_line_not_exit_3(
    fake_gh, kperf_gh, run_db, baseline_db
):
    """Found by the fresh walk of issue 37: a 200 whose JSON is not the repository object made
    github3 raise UnprocessableResponseBody, which has no ``code``: AttributeError, exit 3."""
    fake_gh.fail("GET", r"^/repos/octo/kernels$", 200, body=["not", "a", "repository"], times=10)
    r = kperf_gh(
        "status", "--sha", "e" * 40, "--class", "h100", "--db", str(run_db), "--baseline", str(baseline_db)
    )
    assert r.code == 2, r.out + r.err
    lines = [ln for ln in r.err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "not what the API documents" in lines[0], r.err
    assert "bug in kperf-ci" not in r.err
