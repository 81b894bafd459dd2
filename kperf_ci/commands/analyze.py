"""``kperf analyze``: intra-kernel analyses of a recorded timeline.

    kperf analyze --trace FILE [--kernel NAME] [--perfetto out.json]
    kperf analyze --db run.db [--run ID] [--kernel NAME] [--perfetto out.json]

FILE is a Proton Chrome trace (``data="trace"``) or a kperf timeline JSON. From a database, the
timelines are the run's trace artifacts (blobs whose name contains "trace" or "timeline"), and
the launch numbers (registers, shared memory, warps, grid) come from the variant's metrics.
Layers: :func:`kperf_ci.analysis.pipeline.analyze` does the work and returns a report;
:func:`run` reads the run for it (callable from tests); :func:`analyze_cmd` is the click command
that maps options to it and prints. Exit status 0;
1 with ``--fail-on-flag`` when a finding is flagged; 2 on bad input (one line, no traceback).
"""

from __future__ import annotations

import json
from typing import Any

import click

from kperf_ci.analysis import FLAG_THRESHOLDS, LaunchConfig
from kperf_ci.analysis.overlap import largest_bubbles
from kperf_ci.analysis.pipeline import AnalyzeReport, analyze, launch_report
from kperf_ci.errors import KperfError, user_errors
from kperf_ci.exit_codes import EXIT_REGRESSION
from kperf_ci.inputs import read_run
from kperf_ci.report.safe_text import terminal_safe


def _parse_thresholds(items: tuple[str, ...] | list[str]) -> dict[str, float]:
    out = {}
    for it in items:
        name, sep, val = it.partition("=")
        if not sep or name not in FLAG_THRESHOLDS:
            raise click.BadParameter(
                f"{it!r}: expected NAME=VALUE with NAME one of {', '.join(FLAG_THRESHOLDS)}",
                param_hint="--threshold",
            )
        try:
            out[name] = float(val)
        except ValueError as e:
            raise click.BadParameter(f"{it!r}: {val!r} is not a number", param_hint="--threshold") from e
    return out


def run(
    *,
    trace: str | None = None,
    db: str | None = None,
    run_id: str | None = None,
    **kw: Any,
) -> AnalyzeReport:
    """Analyze every launch of a trace file or of a run in ``db`` (see
    :func:`kperf_ci.analysis.pipeline.analyze` for the other arguments). Raises ValueError on bad
    input; a run that does not decode is a KperfError (exit 2)."""
    record = read_run(db, run_id, artifacts=True) if db and not trace else None
    return analyze(trace=trace, db=db, record=record, **kw)


@click.command("analyze")
@click.option(
    "--trace",
    type=click.Path(exists=True, dir_okay=False),
    help="Proton Chrome trace or kperf timeline JSON.",
)
@click.option("--db", type=click.Path(dir_okay=False), help="Run database with trace artifacts.")
@click.option("--run", "run_id", help="Run id (unique prefix) in --db; default the latest.")
@click.option("--kernel", help="Only kernels whose name contains this.")
@click.option("--perfetto", type=click.Path(dir_okay=False), help="Write a Perfetto/Chrome-trace JSON here.")
@click.option(
    "--records",
    type=click.Path(exists=True, dir_okay=False),
    help="Kernel records (JSON list of name/start_ns/end_ns, or a profiler trace) for launch gaps.",
)
@click.option(
    "--num-sms", type=click.IntRange(min=1), help="SMs on the device (default: from the run or the trace)."
)
@click.option(
    "--clock-mhz", type=click.FloatRange(min=1), help="SM clock for Proton cycles (default: estimated)."
)
@click.option("--grid", type=click.IntRange(min=1), help="CTAs in the launch, for wave quantization.")
@click.option("--num-warps", type=click.IntRange(min=1))
@click.option("--registers", type=click.IntRange(min=1, max=255))
@click.option("--shared-bytes", type=click.IntRange(min=0))
@click.option(
    "--arch", default="sm_90", show_default=True, help="sm_XX or a GPU name, for wave quantization."
)
@click.option(
    "--threshold",
    "threshold_items",
    multiple=True,
    metavar="NAME=VALUE",
    help=f"Override a flag threshold ({', '.join(FLAG_THRESHOLDS)}).",
)
@click.option("--per-warp", is_flag=True, help="Also one Perfetto process per CTA with a thread per warp.")
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
@click.option("--fail-on-flag", is_flag=True, help="Exit with status 1 when anything is flagged.")
@user_errors
def analyze_cmd(
    trace: str | None,
    db: str | None,
    perfetto: str | None,
    records: str | None,
    num_sms: int | None,
    grid: int | None,
    num_warps: int | None,
    registers: int | None,
    shared_bytes: int | None,
    arch: str,
    threshold_items: tuple[str, ...],
    as_json: bool,
    fail_on_flag: bool,
    **pipeline: Any,
) -> None:
    """Intra-kernel analyses: SM utilization, load imbalance, wave quantization, prologue/epilogue,
    memory/tensor-core overlap, launch gaps."""
    # ``pipeline``: the options analyze() takes as they are (--run, --kernel, --per-warp, --clock-mhz)
    thresholds = _parse_thresholds(threshold_items)
    launch = _launch(grid, num_warps, registers, shared_bytes, arch, num_sms, alone=not trace and not db)
    try:
        if launch is not None and not trace and not db and not records:
            report = launch_report(launch, f"grid {grid}", thresholds)
        else:
            report = run(
                trace=trace, db=db, perfetto=perfetto, records=records, num_sms=num_sms, launch=launch,
                thresholds=thresholds, **pipeline,
            )  # fmt: skip
    except (ValueError, OSError) as e:
        raise KperfError(str(e)) from None
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=1, default=str))  # JSON escapes controls
    else:
        _print_report(report, perfetto)
    if fail_on_flag and report.flagged:
        raise SystemExit(EXIT_REGRESSION)  # something was found, as for compare


def _launch(
    grid: int | None,
    num_warps: int | None,
    registers: int | None,
    shared_bytes: int | None,
    arch: str,
    num_sms: int | None,
    *,
    alone: bool,
) -> LaunchConfig | None:
    """The launch that --grid and --num-warps describe; --grid without --num-warps is bad input
    when the launch is all there is to analyze (``alone``: no --trace, no --db)."""
    if grid and num_warps:
        return LaunchConfig(
            grid=grid,
            num_warps=num_warps,
            registers=registers,
            shared_bytes=shared_bytes,
            arch=arch,
            sm_count=num_sms,
        )
    if grid and alone:
        raise KperfError("--grid needs --num-warps")
    return None


def _print_report(report: AnalyzeReport, perfetto: str | None) -> None:
    """The findings as text. Labels, region and kernel names come from the trace or the
    database: terminal_safe per line, so none of them reaches the terminal as an escape sequence."""
    for lr in report.launches:
        click.echo(f"== {terminal_safe(lr.label)}")
        for f in lr.findings:
            _echo_lines(f.line())
        for line in largest_bubbles(lr.findings)[:5]:
            click.echo(f"       bubble: {terminal_safe(line)}")
    if report.sequence:
        click.echo("== kernel sequence")
        for f in report.sequence:
            _echo_lines(f.line())
    for n in report.notes:
        click.echo(f"note: {terminal_safe(n)}")
    if perfetto:
        click.echo(f"wrote {perfetto} (open in https://ui.perfetto.dev)")


def _echo_lines(text: str) -> None:
    """A finding's lines (value, why, what to try), indented, each made safe for a terminal."""
    for line in text.split("\n"):
        click.echo("  " + terminal_safe(line))
