"""`kperf report`: an HTML site, a PR-comment markdown or a job summary for a run vs its baseline."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from kperf_ci.capture.static.repo import ABError
from kperf_ci.errors import KperfError, user_errors
from kperf_ci.inputs import load_settings
from kperf_ci.prcheck.document import read_ab_file
from kperf_ci.report import ab as ab_report
from kperf_ci.report.safe_text import plain_url
from kperf_ci.reporting import (
    MAX_CHARS,
    check_writable_dir,
    markdown_target,
    show,
    write_error,
    write_run_report,
)


@click.command("report")
@click.option("--db", type=click.Path(dir_okay=False), help="run database (default: [tool.kperf] db)")
@click.option(
    "--baseline",
    type=click.Path(dir_okay=False),
    help="baseline database (default: [tool.kperf] baseline; without one, the previous run in --db)",
)
@click.option("--run", "run_id", help="run id (or unique prefix) in --db; default: the latest")
@click.option("--base-run", "base_run", help="run id in --baseline; default: the latest other run")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["html", "markdown", "summary"]),
    default="html",
    show_default=True,
    help="html: a static site in a directory; markdown: a PR comment; summary: for $GITHUB_STEP_SUMMARY",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(),
    help="html: output directory (default: [tool.kperf] report); markdown/summary: a file "
    "(default: stdout; a directory gets comment.md / summary.md)",
)
@click.option(
    "--link", help="URL of the published HTML report, linked from markdown (ending in / = per-kernel links)"
)
@click.option(
    "--max-chars",
    type=click.IntRange(2000, None),
    default=MAX_CHARS,
    show_default=True,
    help="markdown size limit",
)
@click.option(
    "--ab",
    "ab_path",
    type=click.Path(),
    help="render an A/B document instead of a run: the JSON `kperf ab --json` wrote or its database",
)
@click.option("--history/--no-history", default=True, show_default=True, help="chart past runs (html)")
@click.option(
    "--jobs", type=click.IntRange(1, None), help="processes rendering pages (default: [tool.kperf] jobs)"
)
@user_errors
def report_cmd(
    db: str | None,
    baseline: str | None,
    run_id: str | None,
    base_run: str | None,
    fmt: str,
    output: str | None,
    link: str | None,
    max_chars: int,
    ab_path: str | None,
    history: bool,
    jobs: int | None,
) -> None:
    """Write a report of a run compared with its baseline, or (--ab) of an A/B document.
    Exit 0 (the gate is `kperf compare`, or `kperf ab` itself)."""
    if ab_path is not None:
        _report_ab(ab_path, fmt, output, link, max_chars)
        return

    settings = load_settings(db=db, baseline=baseline)
    out = write_run_report(
        settings,
        run_id=run_id,
        base_run=base_run,
        fmt=fmt,
        output=output,
        link=link,
        max_chars=max_chars,
        history=history,
        jobs=jobs,
    )
    show(out)


def _report_ab(path: str, fmt: str, output: str | None, link: str | None, max_chars: int) -> None:
    """`kperf report --ab PATH`: one format of an A/B document, as `kperf ab` renders it."""
    try:
        doc = read_ab_file(path)
    except ABError as e:
        raise KperfError(str(e)) from None
    if link and not plain_url(link):  # it goes into the comment as a markdown link
        raise KperfError(f"--link {link!r}: expected a plain http(s) URL (the workflow run or artifact page)")
    if fmt == "html":
        out = Path(output or "reports/ab")
        target = out if out.suffix == ".html" else out / "index.html"
        check_writable_dir(target.parent, "-o")
        text = ab_report.render_html(doc)
    else:
        render = ab_report.render_markdown if fmt == "markdown" else ab_report.render_summary
        text = render(doc, max_chars=max_chars, link=link)
        if not output or output == "-":
            sys.stdout.write(text)
            return
        target = markdown_target(output, "comment.md" if fmt == "markdown" else "summary.md")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(target)  # never a half-written report
    except OSError as e:
        raise write_error(e, target) from None
    click.echo(f"wrote {target} ({len(text)} characters; {ab_report.headline(doc)})", err=True)
