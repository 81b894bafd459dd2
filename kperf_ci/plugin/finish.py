"""End of a kperf session: compile what static mode recorded, store the run, compare, summarise."""

from __future__ import annotations

from typing import Any

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
        self.ks.interrupted = self.ks.interrupted or "Ctrl-C while the tests ran"


def finish_session(ks: Any) -> int:
    """Compile, store, compare. Returns the exit status kperf asks for: 0, KPERF_FAILED when
    kperf reported an error or a regression, else INTERRUPTED when the run is incomplete."""
    from kperf_ci.store import RunDivertedError, StoreError

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


def worker_output(ks: Any) -> dict[str, Any]:
    """What an xdist worker hands the controller: errors (which must fail the run), warnings,
    A/B verdicts and flagged findings, in plain types (execnet carries no objects)."""
    from kperf_ci.analysis.findings import findings_to_json

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
    from kperf_ci.analysis.findings import findings_from_json

    ks.errors.extend(tuple(e) for e in out.get("errors", []))
    ks.warnings.extend(tuple(w) for w in out.get("warnings", []))
    ks.ab_results.extend(tuple(r) for r in out.get("ab_results", []))
    passed, with_launches = out.get("capture", [0, 0])
    ks.marked_passed += int(passed)
    ks.marked_with_launches += int(with_launches)
    for nodeid, label, text in out.get("findings", []):
        ks.findings.extend((nodeid, label, f) for f in findings_from_json(text))


def write_summary(ks: Any, tr: Any) -> None:
    from kperf_ci.report.safe_text import terminal_safe as t  # labels and messages quote kernel names

    tr.section("kperf", sep="-")
    n = len(ks.results)
    arch = f" for {', '.join(ks.settings.arch)}" if ks.mode == "static" else ""
    if ks._xdist_controller():
        tr.write_line(f"kperf: {ks.mode} mode{arch}; workers stored their variants in run {ks.run_id}")
    else:
        tr.write_line(f"kperf: {n} variant(s) captured in {ks.mode} mode{arch}")
    write_status(ks, tr)
    for _nodeid, label, description, verdict in ks.ab_results:
        tr.write_line(f"kperf A/B {t(label)}: {t(verdict)}: {t(description)}", red=verdict == "slower")
    write_findings(ks.findings, tr, db=ks.saved_to)
    for nodeid, message in ks.warnings:
        tr.write_line(f"kperf warning {t(nodeid)}: {t(message)}", yellow=True)
    for nodeid, reason in ks.errors:
        tr.write_line(f"kperf ERROR {t(nodeid)}: {t(reason)}", red=True)
    if ks.comparison is not None:
        from kperf_ci.commands.compare import print_table  # escapes what it prints (rich_safe)

        tr.write_line(f"kperf: compared with baseline {t(ks.settings.baseline)}")
        print_table(ks.comparison)  # its last line is the verdict
        if ks.comparison.status != "compared" and not ks.comparison.exit_code:
            # Said again in plain words after the table: a run with nothing to judge is not green.
            tr.write_line(f"kperf: {t(ks.comparison.status_line)}; no verdict", yellow=True)


def write_status(ks: Any, tr: Any) -> None:
    """One line on where the run went and, when it stopped early, that it is incomplete."""
    if not ks.interrupted:
        if ks.saved_to:
            tr.write_line(f"kperf: run {ks.run_id} stored in {ks.saved_to}")
        return
    if ks.saved_to and ks.stored_status:
        where = (
            f"stored as incomplete (status {ks.stored_status}) in {ks.saved_to}; "
            "it is never taken as the latest run or a baseline"
        )
    elif not ks.settings.save:
        where = "not stored (--kperf-no-save)"
    else:
        where = "not stored (nothing was measured)" if not ks.results else "not stored"
    tr.write_line(f"kperf: run {ks.run_id} interrupted ({ks.interrupted}): {where}", red=True)


MAX_FINDINGS = 20


def write_findings(findings: list, tr: Any, *, db: str | None = None, limit: int = MAX_FINDINGS) -> None:
    """Flagged analysis findings (GPU mode): the number, why, and what to try, one per variant."""
    if not findings:
        return
    from kperf_ci.report.safe_text import terminal_safe

    tr.write_line(f"kperf: {len(findings)} analysis finding(s) flagged")
    for _nodeid, label, f in findings[:limit]:
        lines = f.line().split("\n")  # value and why, then what to try: each line made safe
        tr.write_line(f"kperf finding {terminal_safe(label)}: {terminal_safe(lines[0])}", yellow=True)
        for more in lines[1:]:
            tr.write_line(terminal_safe(more), yellow=True)
    if len(findings) > limit:
        more = f" (all of them: kperf analyze --db {db})" if db else ""
        tr.write_line(f"kperf: {len(findings) - limit} more finding(s) not shown{more}")
