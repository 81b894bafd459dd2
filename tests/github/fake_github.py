"""A small GitHub REST server on 127.0.0.1 for the `kperf github` tests.

It speaks the endpoints github3.py calls for kperf (repository, issue/PR, comments with ``Link``
pagination, create/edit/delete comment, labels, statuses, check runs, pulls, git data: refs, commits, trees,
blobs), keeps state in memory, records every request (method, path, query, headers, JSON body),
checks the token on every request and can be told to fail the next matching request with a
given status (403 secondary rate limit, 422, 5xx, ...). Payloads carry every field github3's
models read, so github3 parses them as it parses GitHub's.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

DATE = "2026-01-01T00:00:00Z"
_URL_KEYS = (
    "archive_url assignees_url blobs_url branches_url clone_url collaborators_url comments_url commits_url "
    "compare_url contents_url contributors_url deployments_url downloads_url events_url forks_url "
    "git_commits_url git_refs_url git_tags_url git_url hooks_url html_url issue_comment_url "
    "issue_events_url issues_url keys_url labels_url languages_url merges_url milestones_url "
    "notifications_url pulls_url releases_url ssh_url stargazers_url statuses_url subscribers_url "
    "subscription_url svn_url tags_url teams_url trees_url avatar_url followers_url following_url "
    "gists_url organizations_url received_events_url repos_url starred_url subscriptions_url "
    "diff_url patch_url issue_url review_comment_url review_comments_url commit_url mirror_url "
    "homepage download_url"
).split()


#: What a route answers: status, JSON payload (None for no body), extra headers.
_Response = tuple[int, Any, dict[str, str]]


def _not_found() -> _Response:
    return 404, {"message": "Not Found"}, {}


@dataclass
class Failure:
    method: str
    path_re: str
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] = field(default_factory=dict)
    times: int = 1


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any
    raw: bytes
    status: int = 0


class FakeGitHub:
    def __init__(self, token: str, owner: str = "octo", name: str = "kernels", page_size: int = 2):
        self.token = token
        self.owner, self.name = owner, name
        self.page_size = page_size
        self.requests: list[Request] = []
        self.failures: list[Failure] = []
        self.comments: dict[int, dict[str, Any]] = {}  # id -> {"issue": n, "body": str}
        self.labels: dict[int, list[str]] = {}
        self.statuses: list[dict[str, Any]] = []
        self.check_runs: list[dict[str, Any]] = []
        self.pulls: dict[int, dict[str, Any]] = {}
        self.objects: dict[str, dict[str, Any]] = {}  # git sha -> blob/tree/commit
        self.refs: dict[str, str] = {}  # "heads/x" -> commit sha
        self._next_id = 1000
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    # --- test API -------------------------------------------------------------------------
    def start(self) -> FakeGitHub:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def fail(self, method: str, path_re: str, status: int, **kw: Any) -> None:
        self.failures.append(Failure(method, path_re, status, **kw))

    def add_pull(self, number: int, head_sha: str) -> None:
        self.pulls[number] = {"number": number, "head_sha": head_sha, "title": f"PR {number}", "body": ""}
        self.labels.setdefault(number, [])

    def add_comment(self, issue: int, body: str) -> int:
        cid = self._id()
        self.comments[cid] = {"issue": issue, "body": body}
        return cid

    def issue_comments(self, issue: int) -> list[str]:
        return [c["body"] for _, c in sorted(self.comments.items()) if c["issue"] == issue]

    def calls(self, method: str, path_re: str) -> list[Request]:
        return [r for r in self.requests if r.method == method and re.fullmatch(path_re, r.path)]

    # --- payloads ---------------------------------------------------------------------------
    def _id(self) -> int:
        self._next_id += 1
        return self._next_id

    @property
    def api(self) -> str:
        return f"{self.url}/repos/{self.owner}/{self.name}"

    def _full(self, url: str, **fields: Any) -> dict[str, Any]:
        d: dict[str, Any] = dict.fromkeys(_URL_KEYS, url)
        d.update(
            {
                "url": url,
                "id": 1,
                "node_id": "x",
                "created_at": DATE,
                "updated_at": DATE,
                "pushed_at": DATE,
                "closed_at": None,
                "merged_at": None,
            }
        )
        d.update(fields)
        return d

    def _user(self) -> dict[str, Any]:
        return self._full(
            f"{self.url}/users/kperf-bot",
            login="kperf-bot",
            type="Bot",
            gravatar_id="",
            site_admin=False,
            name=None,
            email=None,
        )

    def _repo(self) -> dict[str, Any]:
        counts = "forks_count network_count open_issues_count size stargazers_count"
        counts += " subscribers_count watchers_count"
        flags = "archived fork has_downloads has_issues has_pages has_projects has_wiki private"
        return self._full(
            self.api,
            name=self.name,
            full_name=f"{self.owner}/{self.name}",
            owner=self._user(),
            default_branch="main",
            description="",
            language="Python",
            **dict.fromkeys(counts.split(), 0),
            **dict.fromkeys(flags.split(), False),
        )

    def _issue(self, n: int) -> dict[str, Any]:
        return self._full(
            f"{self.api}/issues/{n}",
            id=n,
            number=n,
            title=self.pulls[n]["title"],
            body="",
            body_html="",
            body_text="",
            state="open",
            locked=False,
            comments=0,
            user=self._user(),
            assignee=None,
            assignees=[],
            milestone=None,
            closed_by=None,
            labels=[self._label(x) for x in self.labels.get(n, [])],
            pull_request={"url": f"{self.api}/pulls/{n}"},
            author_association="OWNER",
        )

    def _label(self, name: str) -> dict[str, Any]:
        return {
            "url": f"{self.api}/labels/{name}",
            "name": name,
            "color": "d73a4a",
            "description": None,
            "id": 1,
        }

    def _comment(self, cid: int) -> dict[str, Any]:
        c = self.comments[cid]
        return self._full(
            f"{self.api}/issues/comments/{cid}",
            id=cid,
            body=c["body"],
            body_html="",
            body_text="",
            user=self._user(),
            issue_url=f"{self.api}/issues/{c['issue']}",
            author_association="OWNER",
        )

    def _branch(self, ref: str, sha: str) -> dict[str, Any]:
        return {
            "label": f"{self.owner}:{ref}",
            "ref": ref,
            "sha": sha,
            "user": self._user(),
            "repo": self._repo(),
        }

    def _pull(self, n: int) -> dict[str, Any]:
        p = self.pulls[n]
        counts = "additions comments commits deletions review_comments"
        return self._full(
            f"{self.api}/pulls/{n}",
            id=n,
            number=n,
            title=p["title"],
            body=p["body"],
            body_html="",
            body_text="",
            state="open",
            locked=False,
            draft=False,
            merged=False,
            mergeable=None,
            mergeable_state="unknown",
            merge_commit_sha=None,
            merged_by=None,
            active_lock_reason=None,
            assignee=None,
            assignees=[],
            requested_reviewers=[],
            requested_teams=[],
            user=self._user(),
            author_association="OWNER",
            head=self._branch(p.get("head", f"pr-{n}"), p["head_sha"]),
            base=self._branch(p.get("base", "main"), "0" * 40),
            _links={},
            **dict.fromkeys(counts.split(), 0),
        )

    def _status(self, sha: str, data: dict[str, Any]) -> dict[str, Any]:
        return self._full(
            f"{self.api}/statuses/{sha}",
            id=self._id(),
            state=data.get("state"),
            description=data.get("description"),
            target_url=data.get("target_url"),
            context=data.get("context"),
            creator=self._user(),
        )

    def _check_run(self, data: dict[str, Any]) -> dict[str, Any]:
        out = data.get("output") or {}
        app = {"description": "", "external_url": self.url, "html_url": f"{self.url}/apps/kperf", "id": 1}
        return {
            "url": f"{self.api}/check-runs/{len(self.check_runs)}",
            "html_url": f"{self.url}/runs/{len(self.check_runs)}",
            "id": len(self.check_runs),
            "name": data.get("name"),
            "head_sha": data.get("head_sha"),
            "status": data.get("status"),
            "conclusion": data.get("conclusion"),
            "started_at": DATE,
            "completed_at": data.get("completed_at") or DATE,
            "external_id": None,
            "pull_requests": [],
            "app": {**app, "name": "kperf", "owner": self._user()},
            "check_suite": {"id": 1},
            "output": {
                "title": out.get("title"),
                "summary": out.get("summary"),
                "text": None,
                "annotations_count": 0,
                "annotations_url": f"{self.api}/check-runs/x/annotations",
            },
        }

    def _git_obj(self, kind: str, sha: str) -> dict[str, Any]:
        o = self.objects[sha]
        url = f"{self.api}/git/{kind}s/{sha}"
        if kind == "blob":
            return {
                "url": url,
                "sha": sha,
                "size": len(o["data"]),
                "encoding": "base64",
                "content": base64.b64encode(o["data"]).decode(),
            }
        if kind == "tree":
            entries = [
                {
                    "path": p,
                    "mode": "100644",
                    "type": "blob",
                    "sha": s,
                    "url": f"{self.api}/git/blobs/{s}",
                    "size": 0,
                }
                for p, s in sorted(o["entries"].items())
            ]
            return {"url": url, "sha": sha, "tree": entries, "truncated": False}
        person = {"name": "kperf", "email": "kperf@example.com", "date": DATE}
        return {
            "url": url,
            "sha": sha,
            "html_url": url,
            "message": o["message"],
            "author": person,
            "committer": person,
            "tree": {"sha": o["tree"], "url": f"{self.api}/git/trees/{o['tree']}"},
            "parents": [{"sha": p, "url": f"{self.api}/git/commits/{p}"} for p in o["parents"]],
            "verification": {"verified": False, "reason": "unsigned", "signature": None, "payload": None},
        }

    def _ref(self, ref: str) -> dict[str, Any]:
        sha = self.refs[ref]
        return {
            "ref": f"refs/{ref}",
            "url": f"{self.api}/git/refs/{ref}",
            "object": {"sha": sha, "type": "commit", "url": f"{self.api}/git/commits/{sha}"},
        }

    def _store(self, kind: str, obj: dict[str, Any]) -> str:
        raw = json.dumps(
            {"kind": kind, **{k: (v.hex() if isinstance(v, bytes) else v) for k, v in obj.items()}},
            sort_keys=True,
        )
        sha = hashlib.sha1(raw.encode()).hexdigest()
        self.objects[sha] = {"kind": kind, **obj}
        return sha

    # --- routing ----------------------------------------------------------------------------
    # One handler per resource; each answers the paths it serves and None for any other, so
    # route() tries them in turn (their paths do not overlap).
    def route(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> _Response:
        base = f"/repos/{self.owner}/{self.name}"
        if not path.startswith(base):
            return _not_found()
        rest = path[len(base) :]
        if method == "GET" and rest == "":
            return 200, self._repo(), {}
        for handler in (self._route_issues, self._route_checks, self._route_pulls, self._route_git):
            if (answer := handler(method, rest, query, body)) is not None:
                return answer
        return 404, {"message": f"fake GitHub does not serve {method} {path}"}, {}

    def _route_issues(
        self, method: str, rest: str, query: dict[str, list[str]], body: Any
    ) -> _Response | None:
        """An issue (a pull request's), its comments and its labels."""
        m = re.fullmatch
        if r := m(r"/issues/(\d+)", rest):
            n = int(r[1])
            if n not in self.pulls:
                return _not_found()
            return 200, self._issue(n), {}
        if r := m(r"/issues/(\d+)/comments", rest):
            n = int(r[1])
            if n not in self.pulls:
                return _not_found()
            if method == "POST":
                cid = self.add_comment(n, body["body"])
                return 201, self._comment(cid), {}
            return self._list_comments(n, query)
        if r := m(r"/issues/comments/(\d+)", rest):
            return self._one_comment(method, int(r[1]), body)
        if r := m(r"/issues/(\d+)/labels(?:/(.+))?", rest):
            return self._labels_of(method, int(r[1]), r[2], body)
        return None

    def _list_comments(self, n: int, query: dict[str, list[str]]) -> _Response:
        """One page of an issue's comments, with a Link header to the next page as GitHub has."""
        ids = [cid for cid, c in sorted(self.comments.items()) if c["issue"] == n]
        page = int(query.get("page", ["1"])[0])
        size = min(self.page_size, int(query.get("per_page", ["30"])[0]))
        chunk = ids[(page - 1) * size : page * size]
        headers = {}
        if page * size < len(ids):
            nxt = f"{self.api}/issues/{n}/comments?per_page={size}&page={page + 1}"
            headers["Link"] = f'<{nxt}>; rel="next"'
        return 200, [self._comment(c) for c in chunk], headers

    def _one_comment(self, method: str, cid: int, body: Any) -> _Response:
        if cid not in self.comments:
            return _not_found()
        if method == "PATCH":
            self.comments[cid]["body"] = body["body"]
            return 200, self._comment(cid), {}
        if method == "DELETE":
            del self.comments[cid]
            return 204, None, {}
        return 200, self._comment(cid), {}

    def _labels_of(self, method: str, n: int, quoted_name: str | None, body: Any) -> _Response:
        """An issue's labels: POST adds, DELETE .../labels/NAME removes, GET lists."""
        have = self.labels.setdefault(n, [])
        if method == "POST":
            names = body if isinstance(body, list) else body.get("labels", [])
            for x in names:
                if x not in have:
                    have.append(x)
        elif method == "DELETE":
            name = unquote(quoted_name or "")
            if name not in have:
                return 404, {"message": "Label does not exist"}, {}
            have.remove(name)
        return 200, [self._label(x) for x in have], {}

    def _route_checks(
        self, method: str, rest: str, query: dict[str, list[str]], body: Any
    ) -> _Response | None:
        """Check runs and commit statuses (created only)."""
        if method == "POST" and rest == "/check-runs":
            self.check_runs.append(body)
            return 201, self._check_run(body), {}
        if method == "POST" and (r := re.fullmatch(r"/statuses/([0-9a-f]{7,40})", rest)):
            self.statuses.append({"sha": r[1], **body})
            return 201, self._status(r[1], body), {}
        return None

    def _route_pulls(
        self, method: str, rest: str, query: dict[str, list[str]], body: Any
    ) -> _Response | None:
        """A pull request; the pull requests, listed (by head and base) or created."""
        if r := re.fullmatch(r"/pulls/(\d+)", rest):
            n = int(r[1])
            return (200, self._pull(n), {}) if n in self.pulls else _not_found()
        if rest != "/pulls":
            return None
        if method == "POST":
            n = max(self.pulls, default=0) + 1
            self.pulls[n] = {
                "number": n,
                "head_sha": "f" * 40,
                "title": body["title"],
                "body": body.get("body", ""),
                "head": body["head"],
                "base": body["base"],
            }
            return 201, self._pull(n), {}
        want_head = query.get("head", [""])[0].split(":")[-1]
        want_base = query.get("base", [""])[0]
        found = [
            self._pull(n)
            for n, p in sorted(self.pulls.items())
            if (not want_head or p.get("head") == want_head)
            and (not want_base or p.get("base", "main") == want_base)
        ]
        return 200, found, {}

    def _route_git(self, method: str, rest: str, query: dict[str, list[str]], body: Any) -> _Response | None:
        """The Git database: refs read, updated and created; blobs, trees and commits."""
        m = re.fullmatch
        if method == "GET" and (r := m(r"/git/ref/(.+)", rest)):
            ref = unquote(r[1])
            return (200, self._ref(ref), {}) if ref in self.refs else _not_found()
        if method == "PATCH" and (r := m(r"/git/refs/(.+)", rest)):
            return self._update_ref(unquote(r[1]), body)
        if method == "POST" and rest == "/git/refs":
            ref = body["ref"].removeprefix("refs/")
            if ref in self.refs:
                return 422, {"message": "Reference already exists"}, {}
            self.refs[ref] = body["sha"]
            return 201, self._ref(ref), {}
        if method == "POST" and rest == "/git/blobs":
            assert body["encoding"] == "base64"
            sha = self._store("blob", {"data": base64.b64decode(body["content"])})
            return 201, {"sha": sha, "url": f"{self.api}/git/blobs/{sha}"}, {}
        if method == "POST" and rest == "/git/trees":
            entries = dict(self.objects[body["base_tree"]]["entries"]) if body.get("base_tree") else {}
            for e in body["tree"]:
                entries[e["path"]] = e["sha"]
            sha = self._store("tree", {"entries": entries})
            return 201, self._git_obj("tree", sha), {}
        if method == "POST" and rest == "/git/commits":
            sha = self._store(
                "commit", {"message": body["message"], "tree": body["tree"], "parents": body["parents"]}
            )
            return 201, self._git_obj("commit", sha), {}
        if method == "GET" and (r := m(r"/git/(blob|tree|commit)s/([0-9a-f]{40})", rest)):
            if r[2] not in self.objects:
                return _not_found()
            return 200, self._git_obj(r[1], r[2]), {}
        return None

    def _update_ref(self, ref: str, body: Any) -> _Response:
        """PATCH a ref: a fast forward, or any commit with ``force``."""
        new = body["sha"]
        if ref not in self.refs:
            return 422, {"message": "Reference does not exist"}, {}
        if not body.get("force") and self.refs[ref] not in self.objects.get(new, {}).get("parents", []):
            return 422, {"message": "Update is not a fast forward"}, {}
        self.refs[ref] = new
        return 200, self._ref(ref), {}

    def file_on_branch(self, branch: str, path: str) -> bytes | None:
        sha = self.refs.get(f"heads/{branch}")
        if sha is None:
            return None
        tree = self.objects[self.objects[sha]["tree"]]
        blob = tree["entries"].get(path)
        return None if blob is None else self.objects[blob]["data"]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _serve(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = None
                req = Request(
                    self.command, parts.path, parse_qs(parts.query), dict(self.headers.items()), body, raw
                )
                with fake.lock:
                    fake.requests.append(req)
                    status, payload, headers = self._answer(req)
                req.status = status
                data = b"" if payload is None else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _answer(self, req: Request) -> tuple[int, Any, dict[str, str]]:
                auth = req.headers.get("Authorization", "")
                if auth not in (f"token {fake.token}", f"Bearer {fake.token}"):
                    return 401, {"message": "Bad credentials"}, {}
                for f in fake.failures:
                    if f.times > 0 and f.method == req.method and re.fullmatch(f.path_re, req.path):
                        f.times -= 1
                        return f.status, f.body or {"message": f"injected {f.status}"}, f.headers
                return fake.route(req.method, req.path, req.query, req.body)

            do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _serve

        return Handler
