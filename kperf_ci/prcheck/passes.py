"""The pytest passes of the PR check, each a subprocess in one tree (head or base)."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kperf_ci import store
from kperf_ci.capture.static.manifest import BLOB as MANIFEST_BLOB
from kperf_ci.capture.static.repo import ABError
from kperf_ci.judge.launch_diff import diff_static, diff_tests, tests_from_variants

from .pass_process import _Pass, _start, heartbeat, say_next_pass


class PassFailed(ABError):
    """A pass that cannot go on; ``output`` holds pytest's output for context."""

    def __init__(self, message: str, output: str):
        super().__init__(message)
        self.output = output


def _tail(text: str, n: int = 15) -> str:
    """The end of pytest's output: from its short test summary when it printed one (the lines
    that name what failed), else the last ``n`` lines."""
    lines = text.strip().splitlines()
    start = next((i for i in range(len(lines) - 1, -1, -1) if "short test summary info" in lines[i]), None)
    shown = lines[start:][: n * 2] if start is not None else lines[-n:]
    return "\n".join("    " + line for line in shown)


def _closing_lines(out: str) -> list[str]:
    """pytest's closing line ("1 failed, 2 passed in 3.10s"), not a plugin's summary above it;
    none when the process ended before pytest did."""
    return [line for line in out.strip().splitlines()[-5:] if re.search(r" in [\d.]+s\b", line)]


def _failed_count(out: str) -> int:
    """Failed tests as pytest's closing line counts them (0 when it names none)."""
    for line in reversed(_closing_lines(out)):
        m = re.search(r"(\d+) failed", line)
        if m:
            return int(m.group(1))
    return 0


def skipped_count(out: str) -> int:
    """Tests skipped as pytest's closing line counts them ("2 skipped"; 0 when it names none):
    a test that skipped itself launched nothing to compare, and `kperf ab` counts it."""
    for line in reversed(_closing_lines(out)):
        m = re.search(r"(\d+) skipped", line)
        if m:
            return int(m.group(1))
    return 0


def _bench_script(args: list[str]) -> str | None:
    """The benchmark script of ``kperf ab --bench`` (``--kperf-bench SCRIPT``), else None."""
    i = next((i for i, a in enumerate(args) if a == "--kperf-bench"), None)
    return args[i + 1] if i is not None and i + 1 < len(args) else None


def check_bench_script(args: list[str], base_cwd: Path) -> None:
    """PassFailed (one line, no pass output) when ``kperf ab --bench``'s script is not in the
    base tree (new in head): found before either pass, whose base side would otherwise end on
    pytest's usage error and read as a broken pass."""
    script = _bench_script(args)
    if script is not None and not (base_cwd / script).is_file():
        _fail(
            f"{script} does not exist in the base tree: nothing to compare; run it on the head "
            f"alone with `kperf run --bench {script}`, or compare once the base revision has it",
            "",
        )


def _ended_early(rc: int, out: str) -> bool:
    """The pass's process ended before pytest's own end (``os._exit``, an exit from a forked
    child's code path): no closing line, and neither pytest's usage error (4) nor its internal
    error, which end without one too."""
    return rc >= 0 and rc != 4 and "INTERNALERROR>" not in out and not _closing_lines(out)


def _first_error(out: str) -> str:
    """ "; first error: ModuleNotFoundError: No module named 'einops'" from pytest's output, or ""
    (issue 36's fourth walk, item 8: only the tail's "1 error during collection" was shown)."""
    for line in out.splitlines():
        m = re.match(r"^E\s+(\w+(?:Error|Exception)\b.*)$", line)
        if m:
            return f"; first error: {m.group(1).strip()[:200]}"
    return ""


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
    wall_s: float = 0.0  # both static passes, side by side or one after the other
    peak_rss_mb: float | None = None


def killed_message(side: str, rc: int, peak_mb: float | None) -> str:
    """One line for a pass the system killed."""
    import signal

    try:
        name = signal.Signals(-rc).name
    except ValueError:
        name = f"signal {-rc}"
    peak = f" at a peak of {peak_mb:,.0f} MB" if peak_mb else ""
    why = "; out of memory?" if -rc == signal.SIGKILL else ""
    return f"static pass in the {side} tree was killed ({name}{why}){peak}"


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
    peak_rss_mb: float | None = None,
    args: tuple[str, ...] | list[str] = (),
    alone: bool = True,
) -> StaticSide:
    db = workdir / f"{side}.db"
    if rc < 0 and rc != -2:  # killed by a signal other than Ctrl-C's
        if not alone:
            _fail(killed_message(side, rc, peak_rss_mb) + "; try kperf ab --passes sequential", out)
        # it ran alone (sequential, or run again alone after a side-by-side kill): fewer passes
        # at once cannot help, fewer tests can (issue 36's fourth walk, item 3)
        _fail(
            killed_message(side, rc, peak_rss_mb) + " running alone: narrow the tests it runs "
            "(-k EXPR, fewer files or smaller parametrized sizes; Triton's interpreter keeps every "
            "tensor in host memory), or give a slow test a budget (--kperf-test-budget SECONDS)",
            out,
        )
    if not db.exists() and _ended_early(rc, out):
        # as `kperf run` says it; "stored no run (pytest exit 0)" read as a kperf-ci fault
        script = _bench_script(args)
        who = f"{script}: the script" if script else "the tests"
        _fail(
            f"static pass in the {side} tree: {who} ended the process (exit {rc}) before kperf-ci "
            "could store the run: nothing stored; let it return or call sys.exit() instead of os._exit()",
            out,
        )
    if not db.exists():
        # the first error pytest printed (a collection's ImportError scrolls out of the tail):
        # what to fix, e.g. a module the tests import that this environment lacks
        cause = _first_error(out)
        _fail(f"static pass in the {side} tree stored no run (pytest exit {rc}){cause}", out)
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
                "bf16 tests can fail in Triton's interpreter: docs/static-mode.md)"
                if marked_all
                else "tests that pass only on a GPU, or only when marked, can be marked for the whole "
                "suite with --kperf-all or [tool.kperf] mark"
            )
            _fail(
                f"static pass in the head tree: {failed or 'some'} test(s) failed (pytest exit {rc}); "
                f"fix them first, or {hint}",
                out,
            )
        compiled = [r for r in run.results if r.key.arch != "host"]
        if compiled and all(r.error for r in compiled):
            # nothing can be compared: "changed" or a pass would be a lie a CI gate believes
            first = " ".join(str(compiled[0].error).split())[:300]
            _fail(
                f"static pass in the head tree: all {len(compiled)} compile(s) failed, nothing could be "
                f"compared; the first: {compiled[0].key.kernel}: {first}",
                out,
            )
        if not compiled:
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
    return StaticSide(db, run, load_manifest(str(db), run.info.run_id), rc, out, peak_rss_mb=peak_rss_mb)


def _stop_others_on_usage_error(passes: list[_Pass], watched: _Pass) -> None:
    """Wait for ``watched`` (the head's pass); if it ends on pytest's usage error (exit 4: a path
    that does not exist, an unknown option), stop the others at once. A path missing in head is
    dropped from the base's arguments (taken for a test file new in head), so the base pass would
    otherwise run the whole suite, for minutes and gigabytes, before the check says anything."""
    if not hasattr(os, "waitid"):
        return
    while watched.running():  # asked without reaping: _reap keeps the pass's peak memory
        if not any(p.running() for p in passes if p is not watched):
            return  # nothing left to stop
        time.sleep(0.1)
    if watched._reap() == USAGE_ERROR:
        for p in passes:
            if p is not watched and p.proc.poll() is None:
                p.proc.kill()


def _run_passes(
    passes: list[_Pass], watched: _Pass | None = None
) -> list[tuple[tuple[int, str], float | None]]:
    """Wait for passes started together: ((exit code, output), peak MB) each; on an error or
    Ctrl-C none outlives the command, and when ``watched`` ends on pytest's usage error the
    others are stopped (:func:`_stop_others_on_usage_error`)."""
    try:
        with heartbeat(passes):
            if watched is not None:
                _stop_others_on_usage_error(passes, watched)
            return [(p.wait(), p.peak_rss_mb) for p in passes]
    finally:
        for p in passes:
            if p.proc.poll() is None:
                p.proc.kill()


#: pytest's exit status for a usage error (bad arguments, a path not found, a plugin's refusal)
USAGE_ERROR = 4


def usage_error_line(out: str) -> str | None:
    """pytest's own words for its usage error: argparse's message ("unrecognized arguments:
    --bogus-flag") or the text of its first ``ERROR:`` line ("file or directory not found: x.py");
    None when it printed neither."""
    lines = out.splitlines()
    usage = next((i for i, line in enumerate(lines) if line.startswith("ERROR: usage:")), None)
    for line in lines[usage + 1 : usage + 4] if usage is not None else ():
        m = re.search(r": error: (.+)$", line)  # argparse's "python -m pytest: error: ..."
        if m:
            return m.group(1).strip()
    for line in lines:
        if line.startswith("ERROR: ") and not line.startswith("ERROR: usage:"):
            return line.removeprefix("ERROR: ").strip()
    return None


def _refuse_head_usage_error(rc: int, out: str) -> None:
    """The head pass ended on pytest's usage error: the arguments are wrong, in both trees or in
    head's (the base's exit 4 alone is a test new in head, and goes on); one line, pytest's."""
    if rc == USAGE_ERROR:
        line = usage_error_line(out)
        # pytest's own line says it all; the rest of its output (kperf's "no test ran marked",
        # a run stored in a scratch database) is noise around a usage error, shown only when
        # no line could be found in it
        message = (
            f"pytest refused the arguments in the head tree (usage error, exit 4): {line or 'see above'}"
        )
        _fail(message, "" if line else out)


def static_pass(
    head_root: Path,
    base_root: Path,
    rel_cwd: Path,
    args: list[str],
    workdir: Path,
    python: str = sys.executable,
    order: str = "auto",
) -> tuple[Any, list[Any], list[str], dict[str, StaticSide]]:
    """Run the static pass in both trees; (variant-level StaticDiff, per-test diffs, messages,
    the two sides). ``order`` is one of :data:`~kperf_ci.prcheck.pass_order.PASS_ORDERS`."""
    messages: list[str] = []
    base_args, dropped = _base_args(args, base_root / rel_cwd)
    if dropped:
        messages.append(f"not in the base revision, skipped there: {' '.join(dropped)}")
    # the head first: where both trees fail alike (a module their tests import is missing), the
    # message names the pull request's tree, which ran first, not the base (fourth walk, item 8)
    roots = {"head": head_root, "base": base_root}
    side_args = {"base": base_args, "head": args}

    def start(side: str) -> _Pass:
        return _static_start(side, roots[side], rel_cwd, side_args[side], workdir, python)

    marked_all = any(a == "--kperf-all" or a.startswith("--kperf-mark") for a in args)
    done: dict[str, tuple[int, str]] = {}
    peaks: dict[str, float | None] = {}
    sides: dict[str, StaticSide] = {}

    def judge(side: str) -> None:
        # "parallel" never runs a killed pass again alone; "auto" does, "sequential" always is
        rc, out = done[side]
        sides[side] = _static_side(
            side, roots[side], rc, out, workdir, rel_cwd, messages, marked_all, peaks[side],
            side_args[side], alone=order != "parallel",
        )  # fmt: skip

    t0 = time.monotonic()
    if order == "sequential":
        # head first: arguments pytest refuses, failing tests or nothing captured end the check
        # before the base's pass, not after it (a newcomer waited 51 s for a failing head's
        # verdict where its own pass took 25 s)
        for side in ("head", "base"):
            done[side], peaks[side] = _run_passes([start(side)])[0]
            if side == "head":
                _refuse_head_usage_error(*done[side])
                judge("head")
                say_next_pass("head static pass", time.monotonic() - t0, "base static pass")
    else:
        # Both trees at once: a static pass times nothing, so the two share the machine (and
        # the GPU, on a GPU runner) without harm, and the check waits for the slower one only.
        base, head = start("base"), start("head")
        for side, (res, peak) in zip(("base", "head"), _run_passes([base, head], watched=head), strict=True):
            done[side], peaks[side] = res, peak
        _refuse_head_usage_error(*done["head"])  # before the base's kill reads as out of memory
        killed = [s for s in ("base", "head") if done[s][0] == -9]  # SIGKILL: the OOM killer's signal
        if killed and order == "auto":
            for side in killed:
                note = killed_message(side, done[side][0], peaks[side]) + " side by side; run again alone"
                messages.append(note)  # printed with the pass's other notes
                done[side], peaks[side] = _run_passes([start(side)])[0]
    wall_s = time.monotonic() - t0
    for side in roots:  # the head first, as the passes: its messages come first
        if side not in sides:
            judge(side)
        sides[side].wall_s = wall_s
    diff = diff_static(sides["base"].run.results, sides["head"].run.results)
    if sides["base"].manifest is not None and sides["head"].manifest is not None:
        tests = diff_tests(sides["base"].manifest, sides["head"].manifest)
    else:  # a base made by a kperf-ci without launch manifests: variant level only
        messages.append("the base run has no launch manifest: tests compared by their variants only")
        tests = tests_from_variants(diff)
    return diff, tests, messages, sides
