"""The whole PR check: both static passes, the timing pass on a GPU, the stored document."""

from __future__ import annotations

import datetime as _dt
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kperf_ci import store
from kperf_ci.capture.launches.ab_launch import plan_from_tests, results_path
from kperf_ci.capture.launches.base_tree import materialize, resolve_rev, same_code_note
from kperf_ci.capture.static.repo import ABError, repo_root
from kperf_ci.config import ABPolicy, load_settings
from kperf_ci.device import cuda_available
from kperf_ci.judge.group import static_groups, static_launch_text
from kperf_ci.judge.launch_diff import unknown_text
from kperf_ci.judge.policy import ThresholdPolicy
from kperf_ci.judge.static_verdict import StaticVerdict, judge
from kperf_ci.report.ab import static_summary, terminal_lines, timing_note
from kperf_ci.report.ab_static_view import alike_groups
from kperf_ci.report.ab_view import identical_kernels, plural
from kperf_ci.report.safe_text import terminal_safe as safe

from .document import AB_BLOB, ABReport, _ab_rows, gpu_seconds, gpu_seconds_text, identical_elsewhere
from .pass_order import SIDE_BY_SIDE_MIN_CORES, resolve_order
from .pass_process import _pytest, start_clock
from .passes import StaticSide, _fail, _tail, check_bench_script, skipped_count, static_pass


def _gpu_available() -> bool:
    return cuda_available()


def timing_skipped_text(n_tests: int, *, no_gpu_asked: bool, unknown: int = 0) -> str:
    """The note when changed launches go untimed: "(--no-gpu)" when the user asked, so it does
    not claim this machine has no GPU (issue 36's third walk, item 3); the tests a GPU would time
    said as the headline counts them, changed and unknown apart (the fifth walk, item 3)."""
    why = "skipped (--no-gpu)" if no_gpu_asked else "skipped, no CUDA GPU on this machine"
    which = (
        f"{plural(n_tests, 'test')} ({n_tests - unknown} changed, {unknown} unknown)"
        if unknown
        else f"{plural(n_tests, 'test')} with changed launches"
    )
    # "the static verdicts above stand" read as if a verdict had been printed where none failed
    # (issue 34's walk, item 5)
    return f"timing: {why}: {which} would be timed A/B on a GPU; judged here by the static verdict alone"


#: the verdict of a run whose changed launches went untimed and no static metric failed; the
#: comment says it too, among its notes (walk 3 of issue 38, J2-9: only the terminal did)
UNTIMED_VERDICT = (
    "static verdict: no regression; what only timing can judge (an autotune config, a launch "
    "option) needs a GPU run"
)


def _static_regressions(
    settings: Any, tests: list[Any], timed: set[tuple[str, str]] | None = None
) -> StaticVerdict:
    """The static verdict (:mod:`kperf_ci.judge.static_verdict`): what fails, and what moved
    without failing, one entry per call of a kernel and arch."""
    return judge(tests, ThresholdPolicy.from_settings(settings), timed=timed)


def _timed_keys(timed: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(test, kernel qualname) of every launch that got a time verdict."""
    return {(t["test"], str(t.get("site") or t["kernel"]).rsplit("::", 1)[-1]) for t in timed}


def _plan_results(plan: Path) -> list[list[str]]:
    """What the timing pass said of each launch it did not time (written beside the plan)."""
    path = Path(results_path(plan))
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, list) and len(row) in (4, 5):  # 5: with the timed variant's id
            out.append([str(x) for x in row])
    return out


def not_timed_messages(
    to_time: list[str], timed: list[dict[str, Any]], results: list[list[str]]
) -> list[str]:
    """One line per launch the timing pass did not time, with its reason; one per test whose
    launches were all stored as the identical launch of another test (``identical_in`` of a
    timed row), naming it; and one per test it timed nothing of and said nothing about (it
    failed, or launched no kernel, on the GPU)."""
    out = []
    said = set()
    for test, name, description, verdict, *_id in results:
        if verdict in ("not-timed", "no-base"):
            out.append(f"not timed: {name} in {test}: {description.removeprefix('not timed: ')}")
            said.add(test)
    timed_tests = {t["test"] for t in timed}
    timed_as: dict[str, list[str]] = {}
    for t in timed:
        for other in t.get("identical_in") or []:
            timed_as.setdefault(other, []).append(t["test"])
    for test in to_time:
        if test not in timed_tests and test in timed_as:
            where = ", ".join(dict.fromkeys(timed_as[test]))
            out.append(f"{test}: timed as an identical launch in test {where}")
        elif test not in timed_tests and test not in said:
            out.append(
                f"not timed: {test} (no changed launch was replayed on the GPU: the test failed or "
                "skipped there, or launched no Triton kernel; see the log)"
            )
    return out


def _copy_runs(sides: dict[str, StaticSide], timed_db: Path | None, db: Path) -> str:
    """Both static runs and the timed run into ``db``; returns the run id the A/B document goes on."""
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
    echo: Any = print,
    time_all: bool = False,
    db: str | Path | None = None,
    settings: Any = None,
    passes: str = "auto",
    resolved: Callable[[], None] | None = None,
) -> ABReport:
    """The whole A/B job; prints as it goes through ``echo`` and returns the report.

    ``resolved`` is called once both revisions resolve, before anything is written (the command
    checks and makes its output paths there: a refused base leaves nothing behind)."""
    t_start = time.monotonic()
    start_clock(t_start)
    try:
        root = repo_root(repo)
        sha = resolve_rev(base, root)
        head_sha = resolve_rev("HEAD", root)
    except ABError:
        raise
    if resolved is not None:
        resolved()
    settings = settings or load_settings(Path(repo).resolve())
    rel_cwd = Path(os.path.relpath(Path(repo).resolve(), root.resolve()))
    # the timing pass's pytest reads the same settings (this tree's pyproject, this environment):
    # the policy its launches are judged by, stored with the document
    report = ABReport(base_rev=base, base_sha=sha, head_sha=head_sha, policy=ABPolicy.from_settings(settings))
    echo(f"kperf ab: head = working tree of {root}, base = {base} ({sha[:10]})")
    if (note := same_code_note(base, sha, head_sha, root)) is not None:
        echo(note)
        report.messages.append(note)
    with tempfile.TemporaryDirectory(prefix="kperf-ab-") as tmp, materialize(sha, root) as base_root:
        check_bench_script(list(args), base_root / rel_cwd)
        given, passes = passes, resolve_order(passes)
        how = "one after the other" if passes == "sequential" else "side by side"
        if passes != given:
            how += f" (fewer than {SIDE_BY_SIDE_MIN_CORES} cores here)"
        echo(f"static: both trees under pytest --kperf-mode static, {how} ...")
        diff, tests, msgs, sides = static_pass(
            root, base_root, rel_cwd, list(args), Path(tmp), python, order=passes
        )
        report.static, report.tests = diff, tests
        report.stage_s["static"] = sides["head"].wall_s
        report.messages += msgs
        report.skipped = skipped_count(sides["head"].output)
        _echo_static(tests, msgs, echo, report.skipped)
        to_time = [t.test for t in tests if t.needs_timing or (time_all and t.status == "identical")]
        timed_db: Path | None = None
        no_gpu_asked = gpu is False  # --no-gpu: whether this machine has one is not asked
        if gpu is None:
            gpu = _gpu_available()
        if not to_time:
            msg = "timing: every test launches identical code and work on both sides; no GPU time spent"
            echo(msg)
            report.messages.append(msg)
        elif not gpu:
            timing = set(to_time)
            unknown = sum(1 for t in tests if t.status == "unknown" and t.test in timing)
            msg = timing_skipped_text(len(to_time), no_gpu_asked=no_gpu_asked, unknown=unknown)
            report.untimed = "--no-gpu" if no_gpu_asked else "no GPU"
            echo(msg)
            report.messages.append(msg)
        else:
            trees = _Trees(root, rel_cwd, base_root, Path(tmp), list(args), python)
            timed_db = _timing_pass(report, tests, to_time, trees, time_all=time_all, echo=echo)
        # On a GPU, time decides: a launch timed A/B is judged by its time (its static changes
        # are "what moved"); static thresholds judge the launches that were not timed, and timed
        # ones only for the metrics a test's marker or [tool.kperf] asked to gate
        verdict = _static_regressions(settings, tests, _timed_keys(report.timed))
        report.static_regressions = verdict.regressions
        report.static_improved, report.static_changed = verdict.improved, verdict.changed
        _echo_static_regressions(verdict, echo, untimed=bool(report.untimed))
        if report.untimed and not verdict.regressions:
            report.messages.append(UNTIMED_VERDICT)
        report.wall_s = time.monotonic() - t_start
        echo(
            f"kperf ab: {report.wall_s:.1f} s ("
            + ", ".join(f"{k} {v:.1f} s" for k, v in report.stage_s.items())
            + f"; {report.gpu_seconds:.2f} GPU s of timing: {gpu_seconds_text(report.timed)})"
        )
        if db is not None:
            _store_document(report, sides, timed_db, Path(db))
    return report


def _echo_static(tests: list[Any], msgs: list[str], echo: Any, skipped: int = 0) -> None:
    """Step 1's output: the static pass's notes, its counts, and each test's status with what
    changed in it."""
    for m in msgs:
        echo(f"  note: {m}")
    counts = {
        s: sum(1 for t in tests if t.status == s)
        for s in ("identical", "changed", "unknown", "added", "removed")
    }
    unknown = f", {counts['unknown']} unknown ({unknown_text(tests)})" if counts["unknown"] else ""
    echo(
        f"static: {counts['identical']} test(s) launch identical code and work, no GPU time spent; "
        f"{counts['changed']} changed{unknown}, {counts['added']} new, {counts['removed']} gone"
        + (f", {skipped} skipped (by the test)" if skipped else "")
    )
    # the kernels no test changed, by name (the comment and the page name them too): the one a
    # pull request only commented reads "identical" here, not just as a count of tests
    same = identical_kernels({"tests": [t.to_dict() for t in tests]})
    if same:
        echo(f"static: identical kernels, not timed: {safe(', '.join(same))}")
    # Tests whose changes read alike are listed together and their changes said once: a cut
    # config list changes every parametrization of a test alike (attorch: one line, 12 times).
    # The comment folds them by the same rule (alike_groups); a test with no change to say keeps
    # its own place. Test ids and kernel names come from the pull request's code: printed inert.
    for members in alike_groups(tests, lambda t: (t.status, tuple(t.changes)) if t.changes else None):
        status, changes = members[0].status, members[0].changes
        alone = len(members) == 1
        for t in members:
            echo(f"  {status:<9} {safe(t.test)}")
            for line in changes if alone else ():
                echo(f"      {safe(line)}")
            for line in getattr(t, "notes", ()):  # e.g. autotuner picks that differ: no change
                echo(f"      note: {safe(line)}")
        if not alone and changes:
            echo(f"      in each of these {len(members)} tests:")
            for line in changes:
                echo(f"        {safe(line)}")


@dataclass
class _Trees:
    """Where the timing pass runs: the head checkout, the cwd within it, the base's checkout, the
    job's temporary folder, the user's pytest arguments and the Python that runs pytest."""

    root: Path
    rel_cwd: Path
    base_root: Path
    tmp: Path
    args: list[str]
    python: str


def _timing_pass(
    report: ABReport,
    tests: list[Any],
    to_time: list[str],
    trees: _Trees,
    *,
    time_all: bool,
    echo: Any,
) -> Path:
    """Step 2 on a GPU: pytest in gpu mode with the A/B plan, each changed launch timed against
    its base; the timed rows, the GPU seconds and what was not timed go into ``report``.
    Returns the timed run's database."""
    timed_db = trees.tmp / "ab.db"
    plan = trees.tmp / "ab-plan.json"
    plan_from_tests(tests, time_all=time_all).write(plan)
    t_timing = time.monotonic()
    echo(f"timing: {len(to_time)} test(s) on the GPU, each changed launch A/B against its base ...")
    # the user's own arguments (--kperf-all, -p, ...): the plugin keeps only the tests
    # the plan names
    rc, out = _pytest(
        trees.root,
        trees.rel_cwd,
        list(trees.args),
        [
            "--kperf-mode",
            "gpu",
            "--kperf-base-tree",
            str(trees.base_root),
            "--kperf-ab-plan",
            str(plan),
            "--kperf-db",
            str(timed_db),
            "--kperf-label",
            "head",
        ],
        trees.python,
    )
    report.stage_s["timing"] = time.monotonic() - t_timing
    if not timed_db.exists():
        _fail(f"A/B timing stored no run (pytest exit {rc})", out)
    timed_run = store.load_run(timed_db, artifacts=("ab", "launch"))
    report.device = timed_run.info.fingerprint.gpu
    results = _plan_results(plan)
    report.timed = _ab_rows(timed_run.results, identical_elsewhere(timed_run.results, results))
    report.gpu_seconds = sum(gpu_seconds(t) for t in report.timed)
    for msg in not_timed_messages(to_time, report.timed, results):
        report.messages.append(msg)
        echo(f"  {safe(msg)}")
    if rc not in (0, 1):
        report.messages.append(f"timing pass: pytest exit {rc}")
        echo(f"  timing pass: pytest exit {rc}\n{_tail(out)}")
    if report.timed:
        echo(f"  {timing_note({'timed': report.timed})}")
    for line in terminal_lines({"timed": report.timed}):  # per Triton kernel, its launches below
        echo(safe(line))
    return timed_db


def _echo_static_regressions(verdict: StaticVerdict, echo: Any, *, untimed: bool = False) -> None:
    """Step 3's output, in the static gate's words: one line per kernel with a static regression
    ("static regressed"), its launches below (an autotuned call once, as its worst config); then,
    the same way, the launches not timed whose code got better ("static improved": fewer spills,
    a higher occupancy) and those whose code moved without either ("static changed": instruction
    counts, registers or shared memory that left the occupancy as it was): shown, so that a
    reviewer sees them, and how to gate them."""
    words = (
        ("static regressed", "regress", verdict.regressions),
        ("static improved", "improved", verdict.improved),
        ("static changed", "changed", verdict.changed),
    )
    for word, alike, entries in words:
        for g in static_groups(entries):
            echo(safe(f"  {word}: {g['kernel']} {g['arch']} ({g['site']}): {static_summary(g)}"))
            for x in g["launches"]:
                echo(safe(f"      {static_launch_text(x, alike)}: {', '.join(x['tests'])}"))
    if verdict.changed:
        echo(
            "  static changed: shown, not failed; to gate a metric, name it in a marker's "
            "thresholds= / metrics= or in [tool.kperf.thresholds]"
        )
    if untimed and not verdict.regressions:
        # said in words: a newcomer's walk found the untimed run ended on the timing line, with
        # no verdict printed (docs/walks/issue38-walk2-2026-12-02.md, finding 12)
        echo(f"  {UNTIMED_VERDICT}")


def _store_document(report: ABReport, sides: dict[str, StaticSide], timed_db: Path | None, db: Path) -> None:
    """Both static runs and the timed run copied into ``db``, and the A/B document stored on
    the run it belongs to."""
    db.parent.mkdir(parents=True, exist_ok=True)
    run_id = _copy_runs(sides, timed_db, db)
    report.db = str(db)
    doc = report.to_dict()
    doc["created_at"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    doc["run_id"] = run_id
    store.save_blob(db, run_id, "", AB_BLOB, json.dumps(doc, default=str))
