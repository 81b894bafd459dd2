"""Per-GPU-class history databases on a branch of the repository (default ``kperf-history``).

Why a branch: it is kept for ever (caches are evicted after 7 days unused, artifacts expire),
every run of every workflow can read it with the default token, each push is a commit (an
audit trail, and a bad push is reverted with git), and a non-fast-forward update is refused by
GitHub, so two writers cannot silently overwrite each other even outside the workflow's
concurrency group. Files are written through the git data API (blob, tree, commit, ref) so no
checkout is needed and the PR's working tree is never touched. One file per GPU class:
``<class>.db``.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

from github3 import exceptions as gh_exc

from kperf_ci.github.client import Client, GitHubUserError

BRANCH = "kperf-history"
_CLASS = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def history_path(gpu_class: str) -> str:
    if not _CLASS.match(gpu_class) or ".." in gpu_class:
        raise GitHubUserError(f"--class {gpu_class!r}: use letters, digits, '.', '_' or '-' (e.g. h100)")
    return f"{gpu_class}.db"


def _ref(repo: Any, branch: str) -> Any:
    """The branch's ref, or None before the first push (GitHub answers 404)."""
    try:
        return repo.ref(f"heads/{branch}")
    except gh_exc.NotFoundError:
        return None


def pull(client: Client, repo: Any, gpu_class: str, dest: Path, branch: str = BRANCH) -> bool:
    """Write the class's history database to ``dest``; False when there is none yet."""
    path = history_path(gpu_class)

    def op() -> bytes | None:
        ref = _ref(repo, branch)
        if ref is None:
            return None
        commit = repo.git_commit(ref.object.sha)
        tree = repo.tree(commit.tree.sha, recursive=True)
        entry = next((e for e in tree.tree if e.path == path and e.type == "blob"), None)
        if entry is None:
            return None
        blob = repo.blob(entry.sha)
        return base64.b64decode(blob.content)

    data = client.call(op, f"{branch}:{path} of {repo.full_name}")
    if data is None:
        return False
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    tmp.write_bytes(data)
    tmp.replace(dest)
    return True


def push(client: Client, repo: Any, gpu_class: str, src: Path, message: str, branch: str = BRANCH) -> str:
    """Commit ``src`` as the class's history on ``branch`` (created on first use); the commit sha.

    The branch moves only forward: if another job pushed in between, GitHub refuses the update
    (422) and this fails with a line saying to rerun, instead of dropping that job's runs."""
    path = history_path(gpu_class)
    content = base64.b64encode(src.read_bytes()).decode("ascii")

    def op() -> str:
        ref = _ref(repo, branch)
        parents: list[str] = []
        base_tree = None
        if ref is not None:
            parent = repo.git_commit(ref.object.sha)
            parents, base_tree = [parent.sha], parent.tree.sha
        blob_sha = repo.create_blob(content, "base64")
        tree = repo.create_tree(
            [{"path": path, "mode": "100644", "type": "blob", "sha": blob_sha}], base_tree=base_tree
        )
        commit = repo.create_commit(message, tree.sha, parents)
        if ref is None:
            repo.create_ref(f"refs/heads/{branch}", commit.sha)
        else:
            ref.update(commit.sha, force=False)
        return str(commit.sha)

    return client.call(op, f"pushing {branch}:{path} to {repo.full_name}")
