"""`kperf ab --base REV [pytest args]`: same-job A/B of the working tree against a base revision.

1. the base revision is checked out into a temporary worktree;
2. static pass: ``pytest --kperf --kperf-mode static`` runs in both trees (separate databases) and
   the normalized-SASS hash of every variant is compared: tests whose kernels all compile to the
   same code need no GPU time; kernels on one side only are "added" / "removed";
3. on a machine with a CUDA GPU, pytest runs once more in the head tree with ``--kperf-mode gpu
   --kperf-base-tree <worktree>``, only for the tests whose code changed; the plugin times each
   kernel interleaved against its base version (:func:`kperf_ci.ab.adaptive_ab`);
4. the verdicts are printed.  Without a GPU step 3 is skipped, saying so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from . import KperfError, user_errors


@dataclass
class ABReport:
    base_rev: str
    base_sha: str
    static: Any = None  # kperf_ci.ab.StaticDiff
    timed: list[dict[str, Any]] = field(default_factory=list)  # one per variant with an A/B verdict
    messages: list[str] = field(default_factory=list)

    @property
    def slower(self) -> list[dict[str, Any]]:
        return [t for t in self.timed if t["verdict"] == "slower"]

    def to_dict(self) -> dict[str, Any]:
        def keys(rs: list) -> list[dict[str, str]]:
            return [
                {"kernel": r.key.kernel, "arch": r.key.arch, "config": r.key.config, "test": r.key.test}
                for r in rs
            ]

        s = self.static
        return {
            "base": {"rev": self.base_rev, "sha": self.base_sha},
            "static": None
            if s is None
            else {
                "identical": keys(s.identical),
                "changed": keys(s.changed),
                "added": keys(s.added),
                "removed": keys(s.removed),
                "unknown": keys(s.unknown),
                "identical_tests": s.tests("identical"),
                "tests_to_time": s.tests("to_time"),
            },
            "timed": self.timed,
            "messages": self.messages,
        }


def _env_for(root: Path) -> dict[str, str]:
    """The tree's own sources first on sys.path, so an installed (head) copy of the project
    does not shadow the base tree's modules."""
    env = os.environ.copy()
    paths = [str(root)] + ([str(root / "src")] if (root / "src").is_dir() else [])
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def _pytest(
    root: Path, rel_cwd: Path, args: list[str], kperf_args: list[str], python: str
) -> tuple[int, str]:
    cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--kperf", *kperf_args, *args]
    p = subprocess.run(cmd, cwd=root / rel_cwd, env=_env_for(root), capture_output=True, text=True)
    return p.returncode, (p.stdout + p.stderr)


def _tail(text: str, n: int = 15) -> str:
    return "\n".join("    " + line for line in text.strip().splitlines()[-n:])


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


def static_pass(
    head_root: Path,
    base_root: Path,
    rel_cwd: Path,
    args: list[str],
    workdir: Path,
    python: str = sys.executable,
) -> tuple[Any, list[str]]:
    """Run the static pass in both trees; (StaticDiff, messages)."""
    from kperf_ci import store
    from kperf_ci.ab import diff_static

    messages: list[str] = []
    runs = {}
    for side, root in (("base", base_root), ("head", head_root)):
        side_args = args
        if side == "base":
            side_args, dropped = _base_args(args, base_root / rel_cwd)
            if dropped:
                messages.append(f"not in the base revision, skipped there: {' '.join(dropped)}")
        db = workdir / f"{side}.db"
        rc, out = _pytest(
            root,
            rel_cwd,
            side_args,
            # only options every kperf version has: in kperf-ci's own repository the base tree's
            # copy of the plugin is the one imported there
            ["--kperf-mode", "static", "--kperf-db", str(db)],
            python,
        )
        if not db.exists():
            raise KperfError(
                f"static pass in the {side} tree stored no run (pytest exit {rc}):\n{_tail(out)}"
            )
        if rc not in (0, 1, 5):
            messages.append(f"static pass in the {side} tree: pytest exit {rc}")
        runs[side] = store.load_run(db)
    return diff_static(runs["base"].results, runs["head"].results), messages


def _absolute_node_ids(node_ids: list[str], root: Path, rel_cwd: Path) -> list[str]:
    """Node ids are relative to pytest's rootdir, somewhere between the invocation directory and
    the repository root: make each absolute where its file is found, so any cwd works."""
    out = []
    cwd = (root / rel_cwd).resolve()
    for nid in node_ids:
        path, sep, rest = nid.partition("::")
        for d in (cwd, *cwd.parents):
            if (d / path).is_file():
                nid = str(d / path) + sep + rest
                break
            if d == root.resolve():
                break
        out.append(nid)
    return out


def _gpu_available() -> bool:
    from kperf_ci.plugin.session import cuda_available

    return cuda_available()


def _ab_rows(results: list[Any]) -> list[dict[str, Any]]:
    rows = []
    for r in results:
        verdict = next((t.split(":", 1)[1] for t in r.tags if t.startswith("ab:")), None)
        if verdict is None:
            continue
        m = {x.name: x.value for x in r.metrics}
        rows.append(
            {
                "kernel": r.key.kernel,
                "arch": r.key.arch,
                "config": r.key.config,
                "test": r.key.test,
                "verdict": verdict,
                "ratio": m.get("ab.ratio"),
                "ci_low": m.get("ab.ci_low"),
                "ci_high": m.get("ab.ci_high"),
                "pairs": m.get("ab.pairs"),
                "seconds": m.get("ab.seconds"),
                "threshold": m.get("ab.threshold"),
            }
        )
    return rows


def run_ab(
    base: str,
    args: list[str],
    *,
    repo: str | Path = ".",
    gpu: bool | None = None,
    python: str = sys.executable,
    echo: Any = click.echo,
) -> ABReport:
    """The whole A/B job; prints as it goes through ``echo`` and returns the report."""
    from kperf_ci.ab import ABError, materialize, repo_root, resolve_rev

    try:
        root = repo_root(repo)
        sha = resolve_rev(base, root)
    except ABError as e:
        raise KperfError(str(e)) from None
    rel_cwd = Path(os.path.relpath(Path(repo).resolve(), root.resolve()))
    report = ABReport(base_rev=base, base_sha=sha)
    echo(f"kperf ab: head = working tree of {root}, base = {base} ({sha[:10]})")
    with tempfile.TemporaryDirectory(prefix="kperf-ab-") as tmp, materialize(sha, root) as base_root:
        diff, msgs = static_pass(root, base_root, rel_cwd, list(args), Path(tmp), python)
        report.static = diff
        report.messages += msgs
        for m in msgs:
            echo(f"  note: {m}")
        echo(
            f"static: {len(diff.identical)} variant(s) identical code, no GPU time spent; "
            f"{len(diff.changed)} changed, {len(diff.added)} added, {len(diff.removed)} removed"
            + (f", {len(diff.unknown)} without SASS (compile error)" if diff.unknown else "")
        )
        for what, rows in (
            ("identical", diff.identical),
            ("changed", diff.changed),
            ("added", diff.added),
            ("removed", diff.removed),
            ("no SASS", diff.unknown),
        ):
            for r in rows:
                echo(f"  {what:<9} {r.key.label()}  ({r.key.test or '?'})")
        to_time = diff.tests("to_time")
        if not to_time:
            msg = "timing: every kernel compiles to identical code on both sides; no GPU time spent"
            echo(msg)
            report.messages.append(msg)
            return report
        if gpu is None:
            gpu = _gpu_available()
        if not gpu:
            msg = (
                f"timing: skipped, no CUDA GPU on this machine ({len(to_time)} test(s) with changed code "
                f"would be timed A/B on one); the static verdicts above stand"
            )
            echo(msg)
            report.messages.append(msg)
            return report
        db = Path(tmp) / "ab.db"
        rc, out = _pytest(
            root,
            rel_cwd,
            _absolute_node_ids(to_time, root, rel_cwd),
            [
                "--kperf-mode",
                "gpu",
                "--kperf-base-tree",
                str(base_root),
                "--kperf-db",
                str(db),
                "--kperf-label",
                "head",
            ],
            python,
        )
        if not db.exists():
            raise KperfError(f"A/B timing stored no run (pytest exit {rc}):\n{_tail(out)}")
        from kperf_ci import store

        report.timed = _ab_rows(store.load_run(db).results)
        if not report.timed:
            msg = f"timing: pytest exit {rc} but no A/B verdict was recorded (tags ab:*)"
            echo(msg + "\n" + _tail(out))
            report.messages.append(msg)
        for t in report.timed:
            ci = "" if t["ci_low"] is None else f" [{t['ci_low'] - 1:+.2%}, {t['ci_high'] - 1:+.2%}]"
            rel = "" if t["ratio"] is None else f" {t['ratio'] - 1:+.2%}"
            echo(
                f"  {t['verdict']:<12} {t['kernel']} {t['arch']} {t['config']}{rel}{ci}"
                f" ({int(t['pairs'] or 0)} pairs, {t['seconds'] or 0:.2f} s)"
            )
    return report


@click.command("ab", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--base", "base", required=True, help="base revision (branch, tag, sha, HEAD~1, ...)")
@click.option(
    "--gpu/--no-gpu", default=None, help="time changed kernels A/B (default: when a CUDA GPU is usable)"
)
@click.option(
    "--json", "json_path", type=click.Path(dir_okay=False), help="also write the report as JSON here"
)
@click.option("--fail-on-slower", is_flag=True, help="exit 1 when a kernel is slower with confidence")
@click.argument("pytest_args", nargs=-1, type=click.UNPROCESSED)
@user_errors
def ab_cmd(
    base: str, gpu: bool | None, json_path: str | None, fail_on_slower: bool, pytest_args: tuple[str, ...]
) -> None:
    """A/B the working tree against a base revision in one job.

    Kernels whose SASS is identical on both sides cost no GPU time; the rest are timed
    interleaved against their base version when a GPU is there.  Extra arguments go to pytest.
    """
    report = run_ab(base, list(pytest_args), gpu=gpu)
    if json_path:
        Path(json_path).write_text(json.dumps(report.to_dict(), indent=2, default=str))
    raise SystemExit(1 if fail_on_slower and report.slower else 0)
