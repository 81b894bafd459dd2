"""`kperf ab --base REV [pytest args]`: same-job A/B of the working tree against a base revision.

1. the base revision is checked out into a temporary worktree;
2. static pass: ``pytest --kperf --kperf-mode static`` runs in both trees (separate databases).
   On a machine with CUDA the tests run for real and every launch is captured through Triton's
   launch path; without one they run in Triton's interpreter.  Each run stores a launch manifest
   (:mod:`kperf_ci.capture.manifest`): per test, every launch with its compiled code per arch,
   its options, its specialization and its work (grid, integer arguments, tensor shapes).  A test
   whose launches are all identical on both sides needs no GPU time; every other test is listed
   with what changed ("num_stages 3 -> 1; sm_90 SASS changed: registers 40 -> 168");
3. on a machine with a CUDA GPU, pytest runs once more in the head tree with ``--kperf-mode gpu
   --kperf-base-tree <worktree>``, only for the tests whose launches changed; the plugin times
   each ``kperf.bench`` callable interleaved against its base version
   (:func:`kperf_ci.ab.adaptive_ab`) and instruments both once for their regions;
4. everything goes into one database (``--db``, default ``reports/ab.db``): both static runs, the
   timed run and the A/B document (blob ``ab_report``) from which the terminal table, the HTML
   page, the PR-comment markdown and the job summary are rendered (``--report-dir``);
5. exit 1 when a kernel is slower with confidence (or, without a GPU, when its static metrics
   regress beyond the thresholds `kperf compare` uses); 2 for bad input or a capture that saw
   nothing; 0 otherwise.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from kperf_ci.device import cuda_available
from kperf_ci.report.safe_text import terminal_safe as safe

from . import KperfError, user_errors

#: the blob that holds the A/B document, on the run labelled "ab"
AB_BLOB = "ab_report"
AB_LABEL = "ab"
DOC_VERSION = 1


@dataclass
class ABReport:
    base_rev: str
    base_sha: str
    head_sha: str = ""
    static: Any = None  # kperf_ci.ab.StaticDiff (variant level)
    tests: list[Any] = field(default_factory=list)  # kperf_ci.ab.TestDiff, one per test
    timed: list[dict[str, Any]] = field(default_factory=list)  # one per variant with an A/B verdict
    messages: list[str] = field(default_factory=list)
    static_regressions: list[dict[str, Any]] = field(default_factory=list)
    device: str | None = None
    gpu_seconds: float = 0.0
    wall_s: float = 0.0
    db: str | None = None

    @property
    def slower(self) -> list[dict[str, Any]]:
        return [t for t in self.timed if t["verdict"] == "slower"]

    def tests_to_time(self) -> list[str]:
        return [t.test for t in self.tests if t.status == "changed"]

    @property
    def exit_code(self) -> int:
        return 1 if self.slower or self.static_regressions else 0

    def to_dict(self) -> dict[str, Any]:
        def keys(rs: list) -> list[dict[str, str]]:
            return [
                {"kernel": r.key.kernel, "arch": r.key.arch, "config": r.key.config, "test": r.key.test}
                for r in rs
            ]

        s = self.static
        timed_by_test: dict[str, list[dict[str, Any]]] = {}
        for t in self.timed:
            timed_by_test.setdefault(t["test"], []).append(t)
        counts: dict[str, int] = {}
        for t in self.tests:
            counts[t.status] = counts.get(t.status, 0) + 1
        for t in self.timed:
            counts[t["verdict"]] = counts.get(t["verdict"], 0) + 1
        return {
            "version": DOC_VERSION,
            "base": {"rev": self.base_rev, "sha": self.base_sha},
            "head": {"sha": self.head_sha},
            "device": self.device,
            "counts": counts,
            "exit_code": self.exit_code,
            "tests": [{**t.to_dict(), "timed": timed_by_test.get(t.test, [])} for t in self.tests],
            "static": None
            if s is None
            else {
                "identical": keys(s.identical),
                "changed": keys(s.changed),
                "added": keys(s.added),
                "removed": keys(s.removed),
                "unknown": keys(s.unknown),
                "identical_tests": [t.test for t in self.tests if t.status == "identical"],
                "tests_to_time": self.tests_to_time(),
            },
            "timed": self.timed,
            "static_regressions": self.static_regressions,
            "messages": self.messages,
            "gpu_seconds": self.gpu_seconds,
            "wall_s": self.wall_s,
            "db": self.db,
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
    p = subprocess.run(cmd, cwd=root / rel_cwd, env=_env_for(root), capture_output=True, text=True)
    return p.returncode, (p.stdout + p.stderr)


def _tail(text: str, n: int = 15) -> str:
    return "\n".join("    " + line for line in text.strip().splitlines()[-n:])


def _failed_count(out: str) -> int:
    """Failed tests as pytest's closing line counts them (0 when it names none)."""
    import re

    for line in reversed(out.strip().splitlines()[-5:]):
        m = re.search(r"(\d+) failed", line)
        if m:
            return int(m.group(1))
    return 0


def _fail(message: str, out: str) -> None:
    """The end of pytest's output on stderr for context (each line made inert), then one line:
    the problem and the fix."""
    for line in _tail(out).splitlines():
        click.echo(safe(line), err=True)
    raise KperfError(message)


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


@dataclass
class StaticSide:
    db: Path
    run: Any  # RunRecord
    manifest: dict[str, list[dict[str, Any]]] | None
    rc: int
    output: str


def _static_side(
    side: str, root: Path, rel_cwd: Path, args: list[str], workdir: Path, python: str, messages: list[str]
) -> StaticSide:
    from kperf_ci import store
    from kperf_ci.capture.manifest import load_manifest

    db = workdir / f"{side}.db"
    rc, out = _pytest(
        root,
        rel_cwd,
        args,
        # only options every kperf version has: in kperf-ci's own repository the base tree's
        # copy of the plugin is the one imported there
        ["--kperf-mode", "static", "--kperf-db", str(db), "--kperf-label", f"ab-{side}-static"],
        python,
    )
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
            _fail(
                f"static pass in the head tree: {failed or 'some'} test(s) failed (pytest exit {rc}); "
                "fix them first",
                out,
            )
        if not [r for r in run.results if r.key.arch != "host"]:
            _fail(
                "static pass in the head tree captured no Triton launch: mark the tests that launch "
                "kernels (@pytest.mark.kperf or the kperf fixture)",
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
    from kperf_ci.ab import diff_static, diff_tests, tests_from_variants

    messages: list[str] = []
    sides = {}
    for side, root in (("base", base_root), ("head", head_root)):
        side_args = args
        if side == "base":
            side_args, dropped = _base_args(args, base_root / rel_cwd)
            if dropped:
                messages.append(f"not in the base revision, skipped there: {' '.join(dropped)}")
        sides[side] = _static_side(side, root, rel_cwd, side_args, workdir, python, messages)
    diff = diff_static(sides["base"].run.results, sides["head"].run.results)
    if sides["base"].manifest is not None and sides["head"].manifest is not None:
        tests = diff_tests(sides["base"].manifest, sides["head"].manifest)
    else:  # a base made by a kperf-ci without launch manifests: variant level only
        messages.append("the base run has no launch manifest: tests compared by their variants only")
        tests = tests_from_variants(diff)
    return diff, tests, messages, sides


def _gpu_available() -> bool:
    return cuda_available()


def _region_moves(base: dict[str, dict[str, float]], metrics: dict[str, float], kernel: str) -> list[str]:
    """Region shares of CTA time that moved by 2 points or more, base -> head."""
    b = base.get(kernel) or (next(iter(base.values())) if len(base) == 1 else None)
    if not b:
        return []
    out = []
    for name, bv in sorted(b.items()):
        if not name.endswith(".fraction") or name not in metrics:
            continue
        hv = metrics[name]
        if abs(hv - bv) >= 0.02:
            out.append(f"{name[len('region.') : -len('.fraction')]} {bv:.0%} -> {hv:.0%} of CTA time")
    return out


def _ab_rows(results: list[Any]) -> list[dict[str, Any]]:
    rows = []
    for r in results:
        verdict = next((t.split(":", 1)[1] for t in r.tags if t.startswith("ab:")), None)
        if verdict is None:
            continue
        m = {x.name: x.value for x in r.metrics}
        extra = json.loads(r.artifacts.get("ab") or "{}")
        kernel_name = r.key.kernel.rsplit("/", 1)[-1]
        base_ms, head_ms = extra.get("base_ms") or [], extra.get("head_ms") or []
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
                "method": extra.get("method"),
                "base_median_ms": sorted(base_ms)[len(base_ms) // 2] if base_ms else None,
                "head_median_ms": sorted(head_ms)[len(head_ms) // 2] if head_ms else None,
                "regions_moved": _region_moves(extra.get("base_regions") or {}, m, kernel_name),
            }
        )
    return rows


def _static_regressions(settings: Any, tests: list[Any]) -> list[dict[str, Any]]:
    from kperf_ci.ab import static_regressions
    from kperf_ci.compare import ThresholdPolicy

    return static_regressions(tests, ThresholdPolicy.from_settings(settings))


def _copy_runs(sides: dict[str, StaticSide], timed_db: Path | None, db: Path) -> str:
    """Both static runs and the timed run into ``db``; returns the run id the A/B document goes on."""
    from kperf_ci import store

    for side in sides.values():
        store.copy_run(side.db, db, side.run.info.run_id)
    if timed_db is not None:
        return store.copy_run(timed_db, db)
    return sides["head"].run.info.run_id


def run_ab(
    base: str,
    args: list[str],
    *,
    repo: str | Path = ".",
    gpu: bool | None = None,
    python: str = sys.executable,
    echo: Any = click.echo,
    time_all: bool = False,
    db: str | Path | None = None,
    settings: Any = None,
) -> ABReport:
    """The whole A/B job; prints as it goes through ``echo`` and returns the report."""
    from kperf_ci import store
    from kperf_ci.ab import ABError, materialize, repo_root, resolve_rev
    from kperf_ci.config import load_settings

    t_start = time.monotonic()
    try:
        root = repo_root(repo)
        sha = resolve_rev(base, root)
        head_sha = resolve_rev("HEAD", root)
    except ABError as e:
        raise KperfError(str(e)) from None
    settings = settings or load_settings(Path(repo).resolve())
    rel_cwd = Path(os.path.relpath(Path(repo).resolve(), root.resolve()))
    report = ABReport(base_rev=base, base_sha=sha, head_sha=head_sha)
    echo(f"kperf ab: head = working tree of {root}, base = {base} ({sha[:10]})")
    with tempfile.TemporaryDirectory(prefix="kperf-ab-") as tmp, materialize(sha, root) as base_root:
        diff, tests, msgs, sides = static_pass(root, base_root, rel_cwd, list(args), Path(tmp), python)
        report.static, report.tests = diff, tests
        report.messages += msgs
        for m in msgs:
            echo(f"  note: {m}")
        counts = {
            s: sum(1 for t in tests if t.status == s) for s in ("identical", "changed", "added", "removed")
        }
        echo(
            f"static: {counts['identical']} test(s) launch identical code and work, no GPU time spent; "
            f"{counts['changed']} changed, {counts['added']} new, {counts['removed']} gone"
        )
        # test ids and kernel names come from the pull request's code: printed inert
        for t in tests:
            if t.status == "identical":
                echo(f"  identical {safe(t.test)}")
                continue
            echo(f"  {t.status:<9} {safe(t.test)}")
            for line in t.changes:
                echo(f"      {safe(line)}")
        to_time = [t.test for t in tests if t.status == "changed" or (time_all and t.status == "identical")]
        timed_db: Path | None = None
        if gpu is None:
            gpu = _gpu_available()
        if not to_time:
            msg = "timing: every test launches identical code and work on both sides; no GPU time spent"
            echo(msg)
            report.messages.append(msg)
        elif not gpu:
            msg = (
                f"timing: skipped, no CUDA GPU on this machine ({len(to_time)} test(s) with changed launches "
                f"would be timed A/B on one); the static verdicts above stand"
            )
            echo(msg)
            report.messages.append(msg)
        else:
            timed_db = Path(tmp) / "ab.db"
            rc, out = _pytest(
                root,
                rel_cwd,
                to_time,
                [
                    "--kperf-mode",
                    "gpu",
                    "--kperf-base-tree",
                    str(base_root),
                    "--kperf-db",
                    str(timed_db),
                    "--kperf-label",
                    "head",
                ],
                python,
            )
            if not timed_db.exists():
                _fail(f"A/B timing stored no run (pytest exit {rc})", out)
            timed_run = store.load_run(timed_db)
            report.device = timed_run.info.fingerprint.gpu
            report.timed = _ab_rows(timed_run.results)
            report.gpu_seconds = sum(float(t["seconds"] or 0) for t in report.timed)
            timed_tests = {t["test"] for t in report.timed}
            for test in to_time:
                if test not in timed_tests:
                    msg = f"not timed: {test} (no kperf.bench callable with a base version; see the log)"
                    report.messages.append(msg)
                    echo(f"  {safe(msg)}")
            if rc not in (0, 1):
                report.messages.append(f"timing pass: pytest exit {rc}")
                echo(f"  timing pass: pytest exit {rc}\n{_tail(out)}")
            for t in report.timed:
                echo("  " + safe(timed_line(t)))
        if not gpu or not report.timed:
            report.static_regressions = _static_regressions(settings, tests)
            for r in report.static_regressions:
                echo(safe(f"  static regression: {r['kernel']} {r['arch']} ({r['test']}): {r['reason']}"))
        report.wall_s = time.monotonic() - t_start
        if db is not None:
            db = Path(db)
            db.parent.mkdir(parents=True, exist_ok=True)
            run_id = _copy_runs(sides, timed_db, db)
            report.db = str(db)
            doc = report.to_dict()
            doc["created_at"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
            doc["run_id"] = run_id
            store.save_blob(db, run_id, "", AB_BLOB, json.dumps(doc, default=str))
    return report


def timed_line(t: dict[str, Any]) -> str:
    ci = "" if t["ci_low"] is None else f" [{t['ci_low'] - 1:+.2%}, {t['ci_high'] - 1:+.2%}]"
    rel = "" if t["ratio"] is None else f" {t['ratio'] - 1:+.2%}"
    moved = f"; {', '.join(t['regions_moved'])}" if t.get("regions_moved") else ""
    return (
        f"{t['verdict']:<12} {t['kernel']}{rel}{ci} ({int(t['pairs'] or 0)} pairs, {t['seconds'] or 0:.2f} s)"
        f"  {t['test']}{moved}"
    )


def load_ab_document(db: str | Path) -> dict[str, Any] | None:
    """The newest A/B document in ``db`` (None when the database holds none)."""
    from kperf_ci import store

    for info in sorted(store.list_runs(db), key=lambda i: i.started_at, reverse=True):
        data = store.load_blob(db, info.run_id, "", AB_BLOB)
        if data:
            try:
                doc = json.loads(data)
            except ValueError as e:
                raise KperfError(f"{db}: the A/B document of run {info.run_id} is not JSON ({e})") from None
            if isinstance(doc, dict):
                return doc
    return None


@click.command("ab", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--base", "base", required=True, help="base revision (branch, tag, sha, HEAD~1, ...)")
@click.option(
    "--gpu/--no-gpu", default=None, help="time changed kernels A/B (default: when a CUDA GPU is usable)"
)
@click.option(
    "--db",
    "db",
    type=click.Path(dir_okay=False),
    default="reports/ab.db",
    show_default=True,
    help="database for both static runs, the timed run and the A/B document",
)
@click.option(
    "--report-dir",
    type=click.Path(file_okay=False),
    default="reports/ab",
    show_default=True,
    help="index.html, comment.md (PR comment) and summary.md (job summary) go here",
)
@click.option(
    "--json", "json_path", type=click.Path(dir_okay=False), help="also write the A/B document as JSON"
)
@click.option("--time-all", is_flag=True, help="time unchanged tests too (an A/A check of the method)")
@click.option("--no-fail", is_flag=True, help="exit 0 even when a kernel is slower (report only)")
@click.option("--fail-on-slower", is_flag=True, hidden=True, help="the default now; kept for old workflows")
@click.argument("pytest_args", nargs=-1, type=click.UNPROCESSED)
@user_errors
def ab_cmd(
    base: str,
    gpu: bool | None,
    db: str,
    report_dir: str,
    json_path: str | None,
    time_all: bool,
    no_fail: bool,
    fail_on_slower: bool,
    pytest_args: tuple[str, ...],
) -> None:
    """A/B the working tree against a base revision in one job.

    Tests whose launches are identical on both sides (same SASS, options and work) cost no GPU
    time; the rest are timed interleaved against their base version when a GPU is there.  Exit 1
    when a kernel is slower with confidence, or (no timing) when a changed launch's static metrics
    regress beyond kperf compare's thresholds; 2 for bad input.  Extra arguments go to pytest.
    """
    from kperf_ci.report.ab import write_ab_reports

    try:  # a report directory that cannot be written is found now, not after the whole run
        Path(report_dir).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise KperfError(
            f"{report_dir}: cannot create the report directory ({e.strerror}); pass --report-dir"
        ) from None
    report = run_ab(base, list(pytest_args), gpu=gpu, time_all=time_all, db=db)
    doc = load_ab_document(db)  # render from what was stored, as `kperf report --ab` would
    if doc is None:
        raise KperfError(f"{db}: no A/B document was stored")
    paths = write_ab_reports(doc, Path(report_dir))
    click.echo(f"kperf ab: stored in {db}; wrote {', '.join(str(p) for p in paths)}")
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as f:
            f.write(Path(report_dir, "summary.md").read_text(encoding="utf-8") + "\n")
    if json_path:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(json.dumps(doc, indent=2, default=str))
    if no_fail and report.exit_code:
        click.echo(f"kperf ab: exit {report.exit_code} (a regression) suppressed by --no-fail")
    raise SystemExit(0 if no_fail else report.exit_code)
