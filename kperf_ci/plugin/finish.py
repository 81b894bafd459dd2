"""End of a kperf session: compile what static mode recorded, store the run, compare, summarise."""

from __future__ import annotations

from typing import Any

# Exit status when kperf itself finds a problem in an otherwise green session (a regression
# against the baseline, a kernel that does not compile): the same as failed tests, so CI fails.
KPERF_FAILED = 1


def finish_session(ks: Any) -> int:
    from kperf_ci.store import StoreError

    try:
        ks.compile_pending()
        if ks.settings.save:
            if ks._xdist_controller():
                ks.saved_to = str(ks.db_path())
            else:
                ks.save()
        ks.compare_with_baseline()
    except StoreError as e:
        ks.errors.append(("<store>", str(e)))
        return KPERF_FAILED
    if ks.errors:
        return KPERF_FAILED
    if ks.comparison is not None and ks.comparison.exit_code:
        return KPERF_FAILED
    return 0


def worker_output(ks: Any) -> dict[str, Any]:
    """What an xdist worker hands the controller: errors (which must fail the run), warnings,
    A/B verdicts and flagged findings, in plain types (execnet carries no objects)."""
    from kperf_ci.analysis.findings import findings_to_json

    return {
        "errors": [list(e) for e in ks.errors],
        "warnings": [list(w) for w in ks.warnings],
        "ab_results": [list(r) for r in ks.ab_results],
        "findings": [[nodeid, label, findings_to_json([f])] for nodeid, label, f in ks.findings],
    }


def merge_worker_output(ks: Any, out: dict[str, Any] | None) -> None:
    """The controller's side of :func:`worker_output`."""
    if not out:
        return
    from kperf_ci.analysis.findings import findings_from_json

    ks.errors.extend(tuple(e) for e in out.get("errors", []))
    ks.warnings.extend(tuple(w) for w in out.get("warnings", []))
    ks.ab_results.extend(tuple(r) for r in out.get("ab_results", []))
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
    if ks.saved_to:
        tr.write_line(f"kperf: run {ks.run_id} stored in {ks.saved_to}")
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
        print_table(ks.comparison)


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
