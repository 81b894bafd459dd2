"""End of a kperf session: compile what static mode recorded, store the run, compare; the
summary itself is printed by :mod:`kperf_ci.report.terminal`."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest

from kperf_ci.analysis.findings import findings_from_json, findings_to_json
from kperf_ci.report.terminal import write_findings, write_status, write_summary  # noqa: F401 - the hooks' API
from kperf_ci.store import RunDivertedError, StoreError

# Exit status when kperf itself finds a problem in an otherwise green session (a regression
# against the baseline, a kernel that does not compile): the same as failed tests, so CI fails.
KPERF_FAILED = 1
# pytest's own status for a session stopped by Ctrl-C.
INTERRUPTED = 2


class InterruptWatch:
    """Registered with an enabled session: a Ctrl-C while tests run marks the run interrupted
    (pytest then still calls pytest_sessionfinish, which must not store it as complete)."""

    def __init__(self, ks: Any) -> None:
        self.ks = ks

    def pytest_keyboard_interrupt(self, excinfo: Any) -> None:
        # pytest reports pytest.exit() here too (kperf stops a run on bad input that way)
        stopped = isinstance(excinfo.value, pytest.exit.Exception)
        why = f"stopped: {excinfo.value}" if stopped else "Ctrl-C while the tests ran"
        self.ks.interrupted = self.ks.interrupted or why


def finish_session(ks: Any) -> int:
    """Compile, store, compare. Returns the exit status kperf asks for: 0, KPERF_FAILED when
    kperf reported an error or a regression, else INTERRUPTED when the run is incomplete."""
    try:
        if ks.interrupted is None:
            # After a Ctrl-C the user wants out: the recorded launches are not compiled.
            try:
                ks.compile_pending()
            except KeyboardInterrupt:
                ks.interrupted = "Ctrl-C while compiling"
        if ks.settings.save:
            ks.save()
            ks.compare_with_baseline()
        elif ks.settings.baseline and not ks.is_worker and (ks.results or ks._xdist_controller()):
            _compare_unsaved(ks)
        capture_error = ks.capture_error()
        if capture_error:
            ks.errors.append(("<capture>", capture_error))
    except StoreError as e:
        ks.errors.append(("<store>", str(e)))
        if ks.is_worker and isinstance(e, RunDivertedError):
            # this worker's part is not in the run database: the controller must not mark
            # the run there complete
            ks.interrupted = ks.interrupted or f"an xdist worker's results went to {e.written_to}"
        return KPERF_FAILED
    except KeyboardInterrupt:  # a second Ctrl-C while storing: the transaction rolled back
        ks.interrupted = ks.interrupted or "Ctrl-C while storing"
        ks.saved_to, ks.stored_status = None, None
        return INTERRUPTED
    if ks.errors:
        return KPERF_FAILED
    if ks.interrupted:
        return INTERRUPTED
    if ks.comparison is not None and ks.comparison.exit_code:
        return KPERF_FAILED
    return 0


def _compare_unsaved(ks: Any) -> None:
    """--kperf-no-save with a baseline: the run is still judged (a regression still exits 1),
    from a scratch database that is removed afterwards."""
    if ks._xdist_controller():
        # the workers' results reach the controller only through the run database
        ks.warn("<baseline>", "--kperf-no-save with -n: nothing stored, so not compared with the baseline")
        return
    db = ks.settings.db
    with tempfile.TemporaryDirectory(prefix="kperf-unsaved-") as tmp:
        ks.settings.db = str(Path(tmp) / "run.db")
        try:
            ks.save()
            ks.compare_with_baseline()
        finally:
            ks.settings.db, ks.saved_to, ks.stored_status = db, None, None


def worker_output(ks: Any) -> dict[str, Any]:
    """What an xdist worker hands the controller: errors (which must fail the run), warnings,
    A/B verdicts and flagged findings, in plain types (execnet carries no objects)."""
    return {
        "interrupted": ks.interrupted,
        "errors": [list(e) for e in ks.errors],
        "warnings": [list(w) for w in ks.warnings],
        "ab_results": [list(r) for r in ks.ab_results],
        "findings": [[nodeid, label, findings_to_json([f])] for nodeid, label, f in ks.findings],
        "capture": [ks.marked_passed, ks.marked_with_launches],
    }


def merge_worker_output(ks: Any, out: dict[str, Any] | None) -> None:
    """The controller's side of :func:`worker_output`. A worker that ended without handing
    it over (killed, crashed) took its unsaved results with it: the run is incomplete."""
    if not out:
        ks.interrupted = ks.interrupted or "an xdist worker ended before storing its results"
        return
    if out.get("interrupted"):
        ks.interrupted = ks.interrupted or f"an xdist worker: {out['interrupted']}"
    ks.errors.extend(tuple(e) for e in out.get("errors", []))
    ks.warnings.extend(tuple(w) for w in out.get("warnings", []))
    ks.ab_results.extend(tuple(r) for r in out.get("ab_results", []))
    passed, with_launches = out.get("capture", [0, 0])
    ks.marked_passed += int(passed)
    ks.marked_with_launches += int(with_launches)
    for nodeid, label, text in out.get("findings", []):
        ks.findings.extend((nodeid, label, f) for f in findings_from_json(text))
