"""The report of a stored run against its baseline, written as `kperf report` and `kperf run`
write it: an HTML site, a PR-comment markdown or a job summary. The command prints what
:func:`write_run_report` returns."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from kperf_ci.analysis.findings import ARTIFACT as FINDINGS
from kperf_ci.errors import KperfError
from kperf_ci.inputs import HistoryReader, blob_reader, bulk_objects, exists, load_pair
from kperf_ci.judge.compare import compare_runs
from kperf_ci.judge.policy import ThresholdPolicy
from kperf_ci.report import build_report, render_markdown, render_summary, write_site

#: `kperf report --max-chars`'s default: the markdown size limit
MAX_CHARS = 65_000


@dataclass(frozen=True)
class ReportOutput:
    """What writing a report leaves to print: ``text`` for stdout (a markdown report to "-"),
    and a ``message`` line (to stderr when ``to_stderr``)."""

    text: str | None = None
    message: str | None = None
    to_stderr: bool = False


def show(out: ReportOutput) -> None:
    """Print what writing a report produced: the text itself, or the line naming the file."""
    if out.text is not None:
        sys.stdout.write(out.text)
    if out.message is not None:
        click.echo(out.message, err=out.to_stderr)


def build_run_report(
    settings: Any, run_id: str | None, base_run: str | None, *, fmt: str, link: str | None, history: bool
) -> Any:
    """The report of the run ``run_id`` (default: the latest) in ``settings.db`` against its baseline."""
    # The markdown outputs show flagged findings but no listings: only that small artifact.
    current, base, base_path = load_pair(
        settings.db, settings.baseline, run_id, base_run, artifacts=True if fmt == "html" else (FINDINGS,)
    )
    comparison = None
    with bulk_objects():
        if base is not None:
            comparison = compare_runs(base, current, ThresholdPolicy.from_settings(settings))
        paths = [p for p in (base_path, settings.db) if p]
        return build_report(
            current,
            base,
            comparison,
            history=HistoryReader(paths, current) if history and fmt == "html" else None,
            blob=blob_reader(settings.db, current, base_path, base),
            link=link,
            findings_per_kernel=settings.findings_per_kernel,
            # the run before this one stands in for a missing baseline database: shown, not a gate
            previous_run=base is not None and not base_run and not exists(settings.baseline),
        )


def write_run_report(
    settings: Any,
    *,
    run_id: str | None = None,
    base_run: str | None = None,
    fmt: str = "html",
    output: str | None = None,
    link: str | None = None,
    max_chars: int = MAX_CHARS,
    history: bool = True,
    jobs: int | None = None,
) -> ReportOutput:
    """`kperf report`'s run report in format ``fmt`` written to ``output`` (html: a directory,
    default [tool.kperf] report; markdown/summary: a file, "-" or None for stdout)."""
    report = build_run_report(settings, run_id, base_run, fmt=fmt, link=link, history=history)
    if fmt == "html":
        out = Path(output or settings.report)
        check_writable_dir(out, "-o")
        try:
            index = write_site(report, out, jobs=jobs or settings.jobs)
        except OSError as e:
            raise write_error(e, out) from None
        return ReportOutput(message=f"wrote {index} ({report.size_words}; {report.verdict_line})")
    text = render_markdown(report, max_chars=max_chars) if fmt == "markdown" else render_summary(report)
    if not output or output == "-":
        return ReportOutput(text=text)
    target = markdown_target(output, "comment.md" if fmt == "markdown" else "summary.md")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    except OSError as e:
        raise write_error(e, target) from None
    return ReportOutput(
        message=f"wrote {target} ({len(text)} characters; {report.verdict_line})", to_stderr=True
    )


def markdown_target(output: str, name: str) -> Path:
    """The file a markdown/summary report goes to: ``output`` itself, or ``output/name`` when it
    is a directory or is spelled as one (a trailing ``/``, created if missing). Writing a file
    named ``dir`` when the user meant ``dir/`` would lose the report where nobody looks."""
    target = Path(output)
    if target.is_dir() or output.endswith(("/", os.sep)):
        return target / name
    return target


def check_writable_dir(out: Path, option: str) -> None:
    """One line before any work when the HTML output cannot be a directory."""
    for p in (out, *out.parents):
        if p.exists():
            if not p.is_dir():
                what = "the path" if p == out else f"its parent {p}"
                raise KperfError(
                    f"{out}: cannot write the report there, {what} is a file, not a directory; "
                    f"pass another {option} DIR"
                )
            break


def write_error(e: OSError, where: Path) -> KperfError:
    path = e.filename or where
    return KperfError(
        f"{path}: cannot write the report ({e.strerror or type(e).__name__}); "
        "pass a directory you can write with -o"
    )
