"""`kperf ab --base REV [pytest args]`: same-job A/B of the working tree against a base revision.

The job itself is :mod:`kperf_ci.prcheck`; this module is its command line.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import click

from kperf_ci.capture.static.repo import ABError
from kperf_ci.errors import KperfError, user_errors
from kperf_ci.prcheck.document import load_ab_document
from kperf_ci.prcheck.outputs import check_outputs, publish
from kperf_ci.prcheck.pass_order import PASS_ORDERS
from kperf_ci.prcheck.passes import PassFailed, _tail
from kperf_ci.prcheck.pipeline import ABReport, run_ab
from kperf_ci.pytest_args import bench_args
from kperf_ci.report.ab import earlier_reports_line, write_ab_reports
from kperf_ci.report.safe_text import terminal_safe as safe


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
@click.option(
    "--passes",
    type=click.Choice(PASS_ORDERS),
    default="auto",
    show_default=True,
    help="the two static passes: side by side (auto: on 4 cores or more; a pass killed for memory "
    "runs again alone; one after the other on fewer), "
    "or one after the other (sequential: half the peak memory)",
)
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
    passes: str,
    no_fail: bool,
    fail_on_slower: bool,
    pytest_args: tuple[str, ...],
) -> None:
    """A/B the working tree against a base revision in one job.

    Tests whose launches are identical on both sides (same SASS, options and work) cost no GPU
    time; the rest are timed interleaved against their base version when a GPU is there.  Exit 1
    when a kernel is slower with confidence, or (no timing) when a changed launch's code spills
    more, or lowers its theoretical occupancy, or exceeds the arch's shared memory (docs/pr-check.md,
    "The static verdict"); 2 for bad input.  Extra arguments go to pytest;
    `--bench SCRIPT [ARGS]` last: an existing benchmark script instead of tests, each of its
    do_bench calls of a changed kernel timed A/B (the script's path relative to here).
    """
    _refuse_own_options(pytest_args)
    if any(a == "--bench" or a.startswith("--bench=") for a in pytest_args):
        pytest_args = tuple(bench_args(list(pytest_args)))
    report, doc = _run(
        base,
        list(pytest_args),
        gpu=gpu,
        time_all=time_all,
        db=db,
        passes=passes,
        outputs=(report_dir, json_path),
    )
    paths = write_ab_reports(doc, Path(report_dir))
    click.echo(f"kperf ab: stored in {db}; wrote {', '.join(str(p) for p in paths)}")
    publish(doc, report_dir, json_path)
    if no_fail and report.exit_code:
        click.echo(f"kperf ab: exit {report.exit_code} (a regression) suppressed by --no-fail")
    raise SystemExit(0 if no_fail else report.exit_code)


def _run(
    base: str, pytest_args: list[str], *, db: str, outputs: tuple[str, str | None], **job: Any
) -> tuple[ABReport, dict[str, Any]]:
    """The job, and the A/B document it stored (rendered from what was stored, as `kperf report
    --ab` would); a failed pass prints the end of pytest's output for context, then one line.
    ``outputs`` (the report directory, the JSON copy) are checked, and the directory made, once
    the base resolves: a refused base left reports/.gitignore behind (walk 2 of issue 38, 22)."""
    report_dir, json_path = outputs
    resolved = functools.partial(check_outputs, db, report_dir, json_path)
    try:
        report = run_ab(base, pytest_args, db=db, echo=click.echo, resolved=resolved, **job)
        doc = load_ab_document(db)
    except PassFailed as e:
        for line in _tail(e.output).splitlines():  # each line made inert
            click.echo(safe(line), err=True)
        raise KperfError(str(e)) from None
    except ABError as e:
        raise KperfError(str(e)) from None
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (kperf_ci.errors.Terminated)
        line = earlier_reports_line(Path(report_dir))
        if line:
            click.echo(line, err=True)
        raise
    if doc is None:
        raise KperfError(f"{db}: no A/B document was stored")
    return report, doc


def _refuse_own_options(pytest_args: tuple[str, ...]) -> None:
    """One line, before any pass, for kperf ab's own options written after the pytest arguments:
    everything after the first of those goes to pytest (`--db F` after a test path), which
    refused it in both trees and the check blamed the base tree."""
    ctx = click.get_current_context()
    own = {o for p in ctx.command.params for o in (*p.opts, *p.secondary_opts) if o.startswith("--")}
    found = []
    for a in pytest_args:
        if a == "--bench" or a.startswith("--bench="):
            break  # the benchmark script's own arguments follow
        name = a.split("=", 1)[0]
        if name in own and name not in found:
            found.append(name)
    if found:
        what = f"{found[0]} is an option" if len(found) == 1 else f"{', '.join(found)} are options"
        it = "it" if len(found) == 1 else "them"
        raise KperfError(
            f"{what} of kperf ab: put {it} before the pytest arguments (kperf ab [OPTIONS] [PYTEST_ARGS]...)"
        )
