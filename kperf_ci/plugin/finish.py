"""End of a kperf session: compile what static mode recorded, store the run, compare; the
summary itself is printed by :mod:`kperf_ci.report.terminal`."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from kperf_ci.exit_codes import EXIT_BAD_INPUT
from kperf_ci.plugin.options import DB_OPTION
from kperf_ci.report.terminal import write_findings, write_status, write_summary  # noqa: F401 - the hooks' API
from kperf_ci.store import RunDivertedError, StoreError

if TYPE_CHECKING:
    # session.py imports the measuring stack; this module is imported with it, never before
    from kperf_ci.plugin.session import KperfSession

# The session's exit statuses are each named where they are defined, none restated here: a
# regression against the baseline is the comparison's exit code (the judge's one answer,
# kperf_ci.exit_codes.EXIT_REGRESSION); an error kperf reported in an otherwise green session (a
# kernel that does not compile) fails it as failed tests do, pytest's TESTS_FAILED; a database the
# store could not read or write, or a run that went to a pending file, is EXIT_BAD_INPUT, never 1
# (nothing was judged and the fix is the user's); a run stopped by Ctrl-C is pytest's own INTERRUPTED.


class InterruptWatch:
    """Registered with an enabled session: a Ctrl-C while tests run marks the run interrupted
    (pytest then still calls pytest_sessionfinish, which must not store it as complete)."""

    def __init__(self, ks: KperfSession) -> None:
        self.ks = ks

    def pytest_keyboard_interrupt(self, excinfo: Any) -> None:
        # pytest reports pytest.exit() here too (kperf stops a run on bad input that way)
        stopped = isinstance(excinfo.value, pytest.exit.Exception)
        if stopped:
            # pytest prints the reason as its last line: said here too, it was printed twice
            self.ks.mark_interrupted("stopped, for the reason pytest prints below")
        else:  # a real Ctrl-C, or a KeyboardInterrupt the code under test raised (Python cannot tell)
            self.ks.mark_interrupted("Ctrl-C while the tests ran", ctrl_c=True)


def finish_session(ks: KperfSession) -> int:
    """Compile, store, compare. Returns the exit status kperf asks for: 0; the comparison's
    exit code on a regression; TESTS_FAILED when kperf reported an error, EXIT_BAD_INPUT when
    its only errors are the store's (:func:`_error_status`); else pytest's INTERRUPTED when the
    run is incomplete."""
    try:
        if ks.interrupted is None:
            try:
                ks.compile_pending()
            except KeyboardInterrupt:
                ks.mark_interrupted("Ctrl-C while compiling", ctrl_c=True)
        else:
            # After a Ctrl-C the user wants out: the recorded launches are not compiled, and
            # those sent to compile while the tests ran are killed
            ks.stop_compiling()
        if ks.settings.save:
            ks.save()
            ks.compare_with_baseline()
        elif ks.settings.baseline and not ks.is_worker and (ks.results or ks._xdist_controller()):
            _compare_unsaved(ks)
        capture_error = ks.capture_error()
        if capture_error:
            ks.error("<capture>", capture_error)
    except StoreError as e:
        ks.error("<store>", e.naming(DB_OPTION))
        if isinstance(e, RunDivertedError):
            ks.diverted.append(str(e))
            if ks.is_worker:
                # this worker's part is not in the run database: the controller must not mark
                # the run there complete
                ks.mark_interrupted(f"an xdist worker's results went to {e.written_to}")
        return _error_status(ks)
    except KeyboardInterrupt:  # a second Ctrl-C while storing: the transaction rolled back
        ks.mark_interrupted("Ctrl-C while storing", ctrl_c=True)
        ks.forget_saved()
        return pytest.ExitCode.INTERRUPTED
    if ks.errors:
        return _error_status(ks)
    if ks.interrupted:
        return pytest.ExitCode.INTERRUPTED
    if ks.comparison is not None:
        return ks.comparison.exit_code  # the one answer's code: 0, or EXIT_REGRESSION
    return 0


def _error_status(ks: KperfSession) -> int:
    """EXIT_BAD_INPUT when every error is the store's (a database that could not be read or
    written, a run written to a pending file; this process's or an xdist worker's): nothing was
    judged and the fix is the user's, so never 1, which means a regression. Else TESTS_FAILED: a
    kernel that did not compile still fails the run, as a failing test does."""
    if ks.errors and all(n == "<store>" for n, _ in ks.errors):
        return EXIT_BAD_INPUT
    return pytest.ExitCode.TESTS_FAILED


#: what `kperf run` reads from ``--kperf-run-status``: the session got this far
STARTED, FINISHED = "started", "finished"


def write_run_status(ks: KperfSession, stage: str, exitstatus: int = 0) -> None:
    """Tell `kperf run` (``--kperf-run-status FILE``) how far the session got. A process that
    ends between "started" and "finished" (``os._exit`` or a signal in the code under test) never
    reached the store: `kperf run` then says so, instead of passing the exit status on as if the
    run had been judged. Written whole (a temporary file renamed), by the controller only."""
    path = ks.config.getoption("kperf_run_status", default=None)
    if not path or ks.is_worker:
        return
    doc = {"stage": stage, "exit": int(exitstatus), "ctrl_c": ks.ctrl_c, "pid": os.getpid()}
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    os.replace(tmp, path)


def _compare_unsaved(ks: KperfSession) -> None:
    """--kperf-no-save with a baseline: the run is still judged (a regression still exits 1),
    from a scratch database that is removed afterwards."""
    if ks._xdist_controller():
        # the workers' results reach the controller only through the run database
        ks.warn("<baseline>", "--kperf-no-save with -n: nothing stored, so not compared with the baseline")
        return
    with tempfile.TemporaryDirectory(prefix="kperf-unsaved-") as tmp:
        try:
            ks.save(Path(tmp) / "run.db")
            ks.compare_with_baseline()
        finally:
            ks.forget_saved()


def worker_output(ks: KperfSession) -> dict[str, Any]:
    """What an xdist worker hands the controller (:meth:`KperfSession.worker_output`)."""
    return ks.worker_output()


def merge_worker_output(ks: KperfSession, out: dict[str, Any] | None) -> None:
    """The controller's side of :func:`worker_output` (:meth:`KperfSession.merge_worker_output`)."""
    ks.merge_worker_output(out)
