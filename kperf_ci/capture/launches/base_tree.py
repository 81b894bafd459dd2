"""The base revision's code, next to the head's: :func:`materialize` checks a revision out into a
temporary git worktree (removed afterwards); :func:`load_base_callable` imports the base tree's
copy of the module that defines a callable under an alias module name and returns the object of
the same qualified name. Used by `kperf ab` (kperf_ci.prcheck) and by GPU-mode A/B timing
(kperf_ci.measure.measure).
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import os
import shutil
import sys
import tempfile
import types
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from kperf_ci.capture.static.repo import ABError, git_toplevel, repo_root, run_git


def _remote_branch(rev: str, repo: Path, remotes: list[str]) -> tuple[str, str, list[str]] | None:
    """(remote, branch, that remote's branches this clone knows) when ``rev`` reads
    ``REMOTE/BRANCH`` for one of ``remotes``."""
    remote, _, branch = rev.partition("/")
    if not branch or remote not in remotes:
        return None
    known = run_git(repo, "for-each-ref", "--format=%(refname:short)", f"refs/remotes/{remote}/").split()
    return remote, branch, [k for k in known if k != f"{remote}/HEAD"]


def _known_text(remote: str, names: list[str]) -> str:
    """What this clone knows of ``remote``'s branches, a likely --base when it knows one."""
    if len(names) == 1:
        return f"{remote}'s one branch known here is {names[0]} (`--base {names[0]}`?); "
    listed = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return f"{remote}'s branches known here: {listed}; " if names else ""


def same_code_note(rev: str, sha: str, head_sha: str, root: Path) -> str | None:
    """One line when the base is HEAD itself and the working tree has no change (a push to the
    default branch, `--base origin/main` on main): both sides are the same code, and the static
    passes still take minutes (walk 2 of issue 38, finding 21). None otherwise, or when git
    cannot say."""
    if sha != head_sha:
        return None
    try:
        if run_git(root, "status", "--porcelain"):
            return None
    except ABError:
        return None
    return (
        f"kperf ab: note: the base ({rev}) is HEAD and the working tree has no change: both sides "
        "are the same code, every launch will read identical (--time-all times them as an A/A)"
    )


def resolve_rev(rev: str, repo: str | os.PathLike[str] = ".") -> str:
    """Full commit sha of ``rev`` (branch, tag, sha, ``HEAD~1`` ...)."""
    try:
        return run_git(Path(repo), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except ABError:
        where = Path(repo)
        shallow = run_git(where, "rev-parse", "--is-shallow-repository") == "true"
        remotes = run_git(where, "remote").split()
        on_remote = _remote_branch(rev, where, remotes)
        # the fetch to suggest is the one for the branch asked for, never a guessed `main`; the
        # remote's branches known here tell a `main` that is `master` there (a fresh walk's
        # shallow clone was told to fetch an origin/main its remote never had)
        fetch = f"`git fetch {on_remote[0]} {on_remote[1]}`" if on_remote else "`git fetch origin main`"
        known = _known_text(on_remote[0], on_remote[2]) if on_remote else ""
        if shallow:
            hint = (
                f"this clone is shallow: fetch the base (e.g. `git fetch --deepen=1` or {fetch}; "
                "in GitHub Actions `actions/checkout` with `fetch-depth: 0`)"
            )
        elif not remotes:
            # nothing to fetch from: how far back HEAD goes says what HEAD~N can reach
            hint = (
                f"this repository has no remote to fetch it from and {_commits_text(where)} on "
                "HEAD: name a branch, tag or sha that exists here"
            )
        else:
            hint = f"fetch it first (e.g. {fetch}) or name a branch, tag or sha that exists here"
        raise ABError(f"base revision {rev!r} is not a commit in this repository; {known}{hint}") from None


def _commits_text(repo: Path) -> str:
    try:
        n = int(run_git(repo, "rev-list", "--count", "HEAD"))
    except (ABError, ValueError):
        return "no commit"
    return f"{n} commit{'s' if n != 1 else ''}"


@contextmanager
def materialize(rev: str, repo: str | os.PathLike[str] = ".") -> Iterator[Path]:
    """Check ``rev`` out into a temporary detached worktree; yields its root, removes it after.

    ``with materialize("origin/main") as base_root: ...``.  Uncommitted changes of the working
    copy are not in it (it is the revision as committed).
    """
    root = repo_root(repo)
    sha = resolve_rev(rev, root)
    tmp = Path(tempfile.mkdtemp(prefix="kperf-base-"))
    path = tmp / "tree"
    run_git(root, "worktree", "add", "--detach", "--quiet", str(path), sha)
    try:
        yield path
    finally:
        try:
            run_git(root, "worktree", "remove", "--force", str(path))
        except ABError:
            pass
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            run_git(root, "worktree", "prune")
        except ABError:
            pass


# --------------------------------------------------------------------------------------------
# loading the base version of a callable


def _defining_function(obj: Any) -> Any:
    """The plain Python function under Triton wrappers (JITFunction, Autotuner, Heuristics)."""
    seen = 0
    while not inspect.isfunction(obj) and hasattr(obj, "fn") and seen < 10:
        obj = obj.fn
        seen += 1
    return obj if inspect.isfunction(obj) else None


def _alias_module(base_file: Path, modname: str, base_root: Path) -> types.ModuleType:
    """Import ``base_file`` as ``_kperf_base_<hash>.<modname>``.

    Parent packages are created empty, with ``__path__`` pointing into the base tree, so relative
    imports (``from .utils import x``) resolve to the base tree's files too.  Absolute imports of
    the project's own modules still resolve to the head's (they are already imported).
    """
    prefix = "_kperf_base_" + hashlib.sha256(str(base_root.resolve()).encode()).hexdigest()[:10]
    alias = f"{prefix}.{modname}"
    if alias in sys.modules:
        return sys.modules[alias]
    parts = modname.split(".")
    # the directory that plays the role of each package level, from the file upwards
    dirs = [base_file.parent]
    for _ in parts[:-1]:
        dirs.append(dirs[-1].parent)
    pkg_names = [prefix] + [f"{prefix}.{'.'.join(parts[: i + 1])}" for i in range(len(parts) - 1)]
    pkg_dirs = list(reversed(dirs))  # prefix <-> the top directory, then one level down each
    for name, d in zip(pkg_names, pkg_dirs, strict=True):
        if name not in sys.modules:
            pkg = types.ModuleType(name)
            pkg.__path__ = [str(d)]
            pkg.__package__ = name
            sys.modules[name] = pkg
    spec = importlib.util.spec_from_file_location(alias, base_file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {base_file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[alias] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(alias, None)
        raise
    return module


def _git_toplevel(directory: Path) -> Path | None:
    return git_toplevel(str(directory))


def load_base_callable(
    fn: Any, head_root: str | os.PathLike[str] | None, base_root: str | os.PathLike[str]
) -> Any:
    """The base tree's version of ``fn``, or None when it has none.

    ``fn`` is a Python function, a Triton kernel (JITFunction, Autotuner, Heuristics) or a
    ``functools.partial`` of one, defined at module level in a file under ``head_root``.  The
    file at the same relative path under ``base_root`` is imported under an alias module name
    and the object of the same qualified name is returned (for a partial, re-wrapped with the
    same arguments).  ``head_root=None``: the git work tree that holds the defining file (pytest's
    rootdir is not always the repository root: without a pytest config of its own it lands above
    it).  None when: the file or the name is absent in the base tree, ``fn`` is a
    lambda/closure (no importable name), or it is defined outside ``head_root``.  An import
    error in the base file propagates: the base tree is broken, which the caller should report.
    """
    if isinstance(fn, partial):
        base = load_base_callable(fn.func, head_root, base_root)
        return None if base is None else partial(base, *fn.args, **fn.keywords)
    target = _defining_function(fn)
    if target is None:
        return None
    qualname = target.__qualname__
    if "<locals>" in qualname or "<lambda>" in qualname:
        return None
    module = sys.modules.get(target.__module__)
    src = getattr(module, "__file__", None) or inspect.getsourcefile(target)
    if not src:
        return None
    if head_root is None:
        head_root = git_toplevel(str(Path(src).resolve().parent))
        if head_root is None:
            return None
    head_root, base_root = Path(head_root).resolve(), Path(base_root).resolve()
    try:
        rel = Path(src).resolve().relative_to(head_root)
    except ValueError:
        return None
    base_file = base_root / rel
    if not base_file.is_file():
        return None
    module_name = target.__module__ if target.__module__ != "__main__" else rel.stem
    base_mod = _alias_module(base_file, module_name, base_root)
    obj: Any = base_mod
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


# --------------------------------------------------------------------------------------------
# interleaved, adaptive timing
