"""The pytest passes of the PR check, each a subprocess in one tree (head or base)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kperf_ci import store
from kperf_ci.capture.static.manifest import BLOB as MANIFEST_BLOB
from kperf_ci.capture.static.repo import ABError
from kperf_ci.config import env_name
from kperf_ci.judge.launch_diff import diff_static, diff_tests, tests_from_variants


class PassFailed(ABError):
    """A pass that cannot go on; ``output`` holds pytest's output for context."""

    def __init__(self, message: str, output: str):
        super().__init__(message)
        self.output = output


def _env_for(root: Path) -> dict[str, str]:
    """The tree's own sources first on sys.path, so an installed (head) copy of the project
    does not shadow the base tree's modules."""
    env = os.environ.copy()
    paths = [str(root)] + ([str(root / "src")] if (root / "src").is_dir() else [])
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    # the passes are judged here, base against head: the project's own baseline comparison
    # ([tool.kperf] baseline) would end a pass with exit 1 on a regression, read as failing tests
    env[env_name("baseline")] = ""
    return env


def _pytest(
    root: Path, rel_cwd: Path, args: list[str], kperf_args: list[str], python: str
) -> tuple[int, str]:
    return _start(root, rel_cwd, args, kperf_args, python).wait()


class _Pass:
    """One pytest pass running as a subprocess; its output goes to a temporary file, so that
    two passes can run side by side without filling a pipe."""

    def __init__(self, cmd: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.out = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
        self.proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=self.out, stderr=subprocess.STDOUT, text=True
        )

    def wait(self) -> tuple[int, str]:
        try:
            rc = self.proc.wait()
        except BaseException:  # Ctrl-C: no pass outlives the command
            self.proc.kill()
            self.proc.wait()
            raise
        self.out.seek(0)
        text = self.out.read()
        self.out.close()
        return rc, text


def _start(root: Path, rel_cwd: Path, args: list[str], kperf_args: list[str], python: str) -> _Pass:
    # One rootdir for every pass (the invocation directory, unless the user names one): node ids
    # are relative to it, and the static passes' ids select the tests of the timing pass.  Left
    # to pytest, a repository without a pytest config gets a rootdir from the arguments, which
    # differ between the passes.
    rootdir = (
        []
        if any(a == "--rootdir" or a.startswith("--rootdir=") for a in args)
        else [f"--rootdir={root / rel_cwd}"]
    )
    cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *rootdir, "--kperf", *kperf_args, *args]
    return _Pass(cmd, root / rel_cwd, _env_for(root))


def _tail(text: str, n: int = 15) -> str:
    """The end of pytest's output: from its short test summary when it printed one (the lines
    that name what failed), else the last ``n`` lines."""
    lines = text.strip().splitlines()
    start = next((i for i in range(len(lines) - 1, -1, -1) if "short test summary info" in lines[i]), None)
    shown = lines[start:][: n * 2] if start is not None else lines[-n:]
    return "\n".join("    " + line for line in shown)


def _failed_count(out: str) -> int:
    """Failed tests as pytest's closing line counts them (0 when it names none)."""
    for line in reversed(out.strip().splitlines()[-5:]):
        m = re.search(r"(\d+) failed", line)
        if m:
            return int(m.group(1))
    return 0


def _fail(message: str, out: str) -> None:
    raise PassFailed(message, out)


def _base_args(args: list[str], base_cwd: Path) -> tuple[list[str], list[str]]:
    """Drop path arguments that do not exist in the base tree (a test file new in head)."""
    keep, dropped = [], []
    for a in args:
        path = a.split("::", 1)[0]
        if not a.startswith("-") and ("/" in path or path.endswith(".py")) and not (base_cwd / path).exists():
            dropped.append(a)
        else:
            keep.append(a)
    return keep, dropped


def load_manifest(db: str, run_id: str) -> dict[str, list[dict[str, Any]]] | None:
    """The run's manifest (all workers' parts merged), or None when the run has none (a run made
    by an older kperf-ci, or not in static mode). Read here, not in capture: capture never reads the
    store."""
    names = [n for n in store.blob_names(db, run_id) if n.split(":")[0] == MANIFEST_BLOB]
    if not names:
        return None
    out: dict[str, list[dict[str, Any]]] = {}
    for n in sorted(names):
        data = store.load_blob(db, run_id, "", n)
        if not data:
            continue
        try:
            part = json.loads(data)
        except ValueError:
            continue
        if isinstance(part, dict):
            for test, rows in part.items():
                if isinstance(rows, list):
                    out.setdefault(str(test), []).extend(r for r in rows if isinstance(r, dict))
    return out


@dataclass
class StaticSide:
    db: Path
    run: Any  # RunRecord
    manifest: dict[str, list[dict[str, Any]]] | None
    rc: int
    output: str
    wall_s: float = 0.0  # both static passes, run side by side


def _static_start(side: str, root: Path, rel_cwd: Path, args: list[str], workdir: Path, python: str) -> _Pass:
    db = workdir / f"{side}.db"
    return _start(
        root,
        rel_cwd,
        args,
        # only options every kperf version has: in kperf-ci's own repository the base tree's
        # copy of the plugin is the one imported there
        ["--kperf-mode", "static", "--kperf-db", str(db), "--kperf-label", f"ab-{side}-static"],
        python,
    )


def _static_side(
    side: str,
    root: Path,
    rc: int,
    out: str,
    workdir: Path,
    rel_cwd: Path,
    messages: list[str],
    marked_all: bool = False,
) -> StaticSide:
    db = workdir / f"{side}.db"
    if not db.exists():
        _fail(f"static pass in the {side} tree stored no run (pytest exit {rc})", out)
    run = store.load_run(db)
    failed = _failed_count(out)
    # kperf's own errors (a kernel that does not compile, one defined inside a function) make
    # pytest exit 1 with every test passed: those tests are listed, the check goes on
    kperf_errors = [line.strip() for line in out.splitlines() if line.startswith("kperf ERROR ")]
    if side == "head":
        if rc == 5:
            _fail(f"static pass in the head tree ({root / rel_cwd}) collected no test", out)
        if rc != 0 and (failed or not kperf_errors):
            # failing tests: the head is broken, not slower
            hint = (
                "deselect tests that cannot pass here (-k, --deselect; on a machine without a GPU, "
                "bf16 tests can fail in Triton's interpreter: README, Static mode)"
                if marked_all
                else "tests that pass only on a GPU, or only when marked, can be marked for the whole "
                "suite with --kperf-all or [tool.kperf] mark"
            )
            _fail(
                f"static pass in the head tree: {failed or 'some'} test(s) failed (pytest exit {rc}); "
                f"fix them first, or {hint}",
                out,
            )
        if not [r for r in run.results if r.key.arch != "host"]:
            _fail(
                "static pass in the head tree captured no Triton launch: mark the tests that launch "
                'kernels (@pytest.mark.kperf, the kperf fixture, or [tool.kperf] mark = "all")',
                out,
            )
    elif rc not in (0, 5):
        messages.append(
            f"static pass in the base tree: pytest exit {rc}; its failing tests read as new in head"
        )
    messages += [f"{side}: {e}" for e in kperf_errors if "captured no Triton launch" not in e]
    return StaticSide(db, run, load_manifest(str(db), run.info.run_id), rc, out)


def static_pass(
    head_root: Path,
    base_root: Path,
    rel_cwd: Path,
    args: list[str],
    workdir: Path,
    python: str = sys.executable,
) -> tuple[Any, list[Any], list[str], dict[str, StaticSide]]:
    """Run the static pass in both trees; (variant-level StaticDiff, per-test diffs, messages,
    the two sides)."""
    messages: list[str] = []
    base_args, dropped = _base_args(args, base_root / rel_cwd)
    if dropped:
        messages.append(f"not in the base revision, skipped there: {' '.join(dropped)}")
    # Both trees at once: a static pass times nothing, so the two share the machine (and the
    # GPU, on a GPU runner) without harm, and the check waits for the slower one only.
    t0 = time.monotonic()
    running = {
        "base": _static_start("base", base_root, rel_cwd, base_args, workdir, python),
        "head": _static_start("head", head_root, rel_cwd, args, workdir, python),
    }
    try:
        done = {side: p.wait() for side, p in running.items()}
    finally:
        for p in running.values():
            if p.proc.poll() is None:
                p.proc.kill()
    wall_s = time.monotonic() - t0
    sides = {}
    for side, root in (("base", base_root), ("head", head_root)):
        rc, out = done[side]
        marked_all = any(a == "--kperf-all" or a.startswith("--kperf-mark") for a in args)
        sides[side] = _static_side(side, root, rc, out, workdir, rel_cwd, messages, marked_all)
        sides[side].wall_s = wall_s
    diff = diff_static(sides["base"].run.results, sides["head"].run.results)
    if sides["base"].manifest is not None and sides["head"].manifest is not None:
        tests = diff_tests(sides["base"].manifest, sides["head"].manifest)
    else:  # a base made by a kperf-ci without launch manifests: variant level only
        messages.append("the base run has no launch manifest: tests compared by their variants only")
        tests = tests_from_variants(diff)
    return diff, tests, messages, sides
