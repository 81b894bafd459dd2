"""`kperf show`: the runs in a database, or one run's kernels: one line per compiled kernel
(compact, the default), or every variant with its metrics (``--details``, alone: the latest run's)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from kperf_ci import store
from kperf_ci.analysis.findings import ARTIFACT, flagged, ranked
from kperf_ci.errors import KperfError, user_errors
from kperf_ci.inputs import load_settings, read_run, read_runs
from kperf_ci.judge.compare import compare_runs
from kperf_ci.judge.group import size_words, triton_kernels
from kperf_ci.judge.policy import ThresholdPolicy
from kperf_ci.model import Metric, RunInfo, RunRecord, VariantResult
from kperf_ci.report.build import load_findings
from kperf_ci.report.run_lines import HEADLINE, field_order, kernel_lines, region_table
from kperf_ci.report.safe_text import rich_safe, terminal_safe
from kperf_ci.report.terminal import console, variant_labels, verdict_line
from kperf_ci.units import fmt_value

# Every stored string below is printed through rich_safe: Rich parses both f-strings and table
# cells as markup, and a database is data (a kernel named "x[/]" must print, not crash).


@click.command("show")
@click.option("--db", type=click.Path(dir_okay=False), help="run database (default: [tool.kperf] db)")
@click.option("--run", "run_id", help="show this run (id or unique prefix); 'latest' for the newest")
@click.option("--kernel", help="only variants of this kernel (implies the latest run without --run)")
@click.option(
    "--details", is_flag=True, help="every variant with all its metrics, regions and findings (long)"
)
@click.option(
    "--baseline",
    type=click.Path(dir_okay=False),
    help="judge the run against this database, as kperf compare does (default: [tool.kperf] baseline)",
)
@user_errors
def show_cmd(
    db: str | None, run_id: str | None, kernel: str | None, details: bool, baseline: str | None
) -> None:
    """List runs, or show a run: one line per compiled kernel (the tests that reach it counted,
    headline metrics, the costliest flagged findings); --details for every variant's metrics."""
    settings = load_settings(db=db, baseline=baseline)
    if run_id is None and kernel is None and not details:
        print_runs(read_runs(settings.db), store.run_sizes(settings.db))
        return
    # Only the small findings artifact: a kernel author sees what the analyses flagged and why.
    record = read_run(settings.db, None if run_id in (None, "latest") else run_id, artifacts=(ARTIFACT,))
    if details:
        print_run(record, kernel=kernel)
        return
    comparison = _comparison(settings, record, explicit=baseline is not None)
    print_kernels(record, kernel=kernel, cap=settings.findings_per_kernel, comparison=comparison)


def _comparison(settings: Any, record: RunRecord, *, explicit: bool) -> Any:
    """The run compared with the baseline, as `kperf compare` judges it; None without one (a
    configured baseline that is missing, empty or this very run is no error for a look)."""
    path = settings.baseline
    if not path:
        return None
    if not Path(path).exists():
        if explicit:
            raise KperfError(f"{path}: baseline does not exist; pass an existing run database")
        return None
    if not explicit and store.same_database(path, settings.db):
        return None  # showing a run of the baseline database itself: nothing to judge it against
    try:
        base = read_run(path)
    except KperfError as e:
        if explicit:
            raise
        click.echo(f"kperf: configured baseline not read, no verdict shown: {terminal_safe(e)}", err=True)
        return None
    if not base.results or (
        base.info.run_id == record.info.run_id and store.same_database(path, settings.db)
    ):
        return None
    return compare_runs(base, record, ThresholdPolicy.from_settings(settings))


def print_kernels(
    record: RunRecord, *, kernel: str | None = None, cap: int = 3, comparison: Any = None
) -> None:
    """The compact view: the run line, one table line per compiled kernel, a count line and,
    with a comparison, the verdict line of `kperf compare` (the same regression count)."""
    out = console()
    _run_line(record.info)
    lines = kernel_lines(record, kernel=kernel, cap=cap, comparison=comparison)
    if not lines:
        _no_variants(kernel)
        return
    out.print(_kernel_table(lines, comparison))
    # counted as the pytest summary counts them: variants as variants, Triton kernels as kernels
    # (a row is a compiled variant; "6 kernels" here read against pytest's "(1 kernel(s))")
    n_var = sum(line["variants"] for line in lines)
    kernels = triton_kernels(r.key for line in lines for r in line["members"])
    out.print(
        f"{size_words(n_var, kernels, len(lines))}; findings: the {cap} costliest flagged per row "
        "(findings_per_kernel); --details lists every variant's metrics",
        highlight=False,
    )
    if comparison is not None:
        out.print(verdict_line(comparison), highlight=False)


def _no_variants(kernel: str | None) -> None:
    console().print(
        f"no variants{f' of kernel {rich_safe(repr(kernel))}' if kernel else ''} in this run", highlight=False
    )


def _kernel_table(lines: list[dict[str, Any]], comparison: Any) -> Any:
    """The compact view's table: a row per compiled kernel, a verdict column with a comparison."""
    from rich.table import Table

    t = Table(header_style="bold", box=None, padding=(0, 1))
    cols = ["kernel", "arch", "variant", "tests"] + [col for _n, col, _u in HEADLINE] + ["findings"]
    cols += ["verdict"] if comparison is not None else []
    for col in cols:
        t.add_column(col, overflow="fold")
    labels = variant_labels([line["result"].key for line in lines])
    for line in lines:
        row = [rich_safe(c) for c in _kernel_cells(line, labels[line["result"].key.id])]
        if comparison is not None:
            v = line["verdict"]
            row.append("[bold red]REGRESSION[/]" if v == "REGRESSION" else rich_safe(v))
        t.add_row(*row)
    return t


def _kernel_cells(line: dict[str, Any], label: str) -> list[str]:
    """One kernel line's cells as plain text: key, tests, headline metrics, findings (or the error)."""
    key = line["result"].key
    metrics = [(line["metrics"][name], unit) for name, _col, unit in HEADLINE]
    found = ", ".join(f.name for f in line["findings"])
    if line["more_findings"]:
        found += f" +{line['more_findings']}"
    if line["error"]:
        found = f"error: {line['error']}"
    return [
        key.kernel,
        key.arch,
        label,
        str(len(line["tests"]) or "-"),
        *(fmt_value(m.value, unit) if m is not None else "-" for m, unit in metrics),
        found,
    ]


_RUN_COLUMNS = (
    *("run", "started", "mode", "label", "ran", "variants", "tests"),
    *("git", "branch", "gpu", "triton"),
)


def print_runs(runs: list[RunInfo], sizes: dict[str, store.RunSize] | None = None) -> None:
    """One row per run: what it ran, its variants and tests counted (``sizes``:
    :func:`kperf_ci.store.run_sizes`), so that a suite's run and a bench script's, both without a
    label, are told apart (walk 3 of issue 38, J1-8: only their counts differed)."""
    from rich.table import Table

    t = Table(header_style="bold")
    for col in _RUN_COLUMNS:
        t.add_column(col, justify="right" if col in ("variants", "tests") else "left")
    for r in runs:
        fp = r.fingerprint
        size = (sizes or {}).get(r.run_id)
        cells = (
            (r.run_id, r.started_at, r.mode, r.label or "", ran_text(size))
            + (str(size.variants if size else 0), _tests_cell(size))
            + ((r.git_sha or "")[:10], r.git_branch or "", fp.gpu or "-", fp.triton or "-")
        )
        t.add_row(*map(rich_safe, cells))
    console().print(t if runs else "no runs")


def ran_text(size: store.RunSize | None) -> str:
    """ "bench examples/benchmarks/bench_softmax.py", "examples/tests/test_softmax.py",
    "3 files in examples/tests/": the files of a run's tests (their common folder)."""
    if size is None:
        return "-"
    what = "bench " if size.bench else ""
    if size.files <= 1:
        return f"{what}{size.first_file or '-'}"
    common = os.path.commonprefix([size.first_file, size.last_file]).rpartition("/")[0]
    return f"{what}{size.files} files" + (f" in {common}/" if common else "")


def _tests_cell(size: store.RunSize | None) -> str:
    # a bench run's "tests" are its do_bench calls: "2 calls" where pytest collected 1 item
    n = size.tests if size else 0
    return f"{n} {'call' if n == 1 else 'calls'}" if size and size.bench else str(n)


def _run_line(info: RunInfo) -> None:
    s = rich_safe
    console().print(
        f"run [bold]{s(info.run_id)}[/] {s(info.started_at)} mode={s(info.mode)} "
        f"label={s(info.label or '-')} git={s((info.git_sha or '?')[:10])} {s(info.git_branch or '')} "
        f"gpu={s(info.fingerprint.gpu or '-')} triton={s(info.fingerprint.triton or '-')}",
        highlight=False,
    )


def print_run(record: RunRecord, *, kernel: str | None = None) -> None:
    """Every variant with its metrics, regions and flagged findings (``--details``)."""
    _run_line(record.info)
    results = [r for r in record.results if kernel is None or r.key.kernel == kernel]
    if not results:
        _no_variants(kernel)
        return
    for r in results:
        _print_variant(r)


def _print_variant(r: VariantResult) -> None:
    """One variant of ``--details``: its key, error, metrics, regions, samples and findings."""
    out, s = console(), rich_safe
    out.print(
        f"\n[bold]{s(r.key.label())}[/]  id={r.key.id} spec={s(r.key.spec or '-')} "
        f"test={s(r.key.test or '-')}",
        highlight=False,
    )
    if r.error:
        out.print(f"  [red]error:[/] {s(r.error)}", highlight=False)
    plain = [m for m in r.metrics if not m.name.startswith("region.")]
    if plain:
        out.print(_metric_table(plain))
    regions = region_table(r.metrics)
    if regions:
        out.print(_region_table(regions))
    if r.samples:
        out.print(f"  {len(r.samples)} timing samples (ms)", highlight=False)
    print_findings(r)


def _metric_table(metrics: list[Metric]) -> Any:
    from rich.table import Table

    s = rich_safe
    t = Table(header_style="bold", box=None, padding=(0, 2))
    for col in ("metric", "value", "unit", "kind"):
        t.add_column(col)
    for m in metrics:
        t.add_row(s(m.name), s(fmt_value(m.value)), s(m.unit), s(m.kind))
    return t


def _region_table(regions: dict[str, dict[str, float]]) -> Any:
    """A row per region, a column per field (cycles, fraction as a percentage, ms, ...)."""
    from rich.table import Table

    s = rich_safe
    t = Table(title="regions", header_style="bold", box=None, padding=(0, 2))
    fields = sorted({f for vals in regions.values() for f in vals}, key=field_order)
    t.add_column("region")
    for f in fields:
        t.add_column(s(f), justify="right")
    for name, vals in regions.items():
        t.add_row(
            s(name),
            *(
                s(fmt_value(vals.get(f)) if f != "fraction" or f not in vals else f"{vals[f]:.1%}")
                for f in fields
            ),
        )
    return t


def print_findings(r: VariantResult) -> None:
    """The flagged findings of a variant (its ``findings`` artifact), the costliest first:
    value, why, what to try."""
    found = load_findings(r) or []
    if not found:
        return
    shown = flagged(ranked(found))
    out = console()
    out.print(f"  findings: {len(shown)} of {len(found)} flagged", highlight=False)
    for f in shown:
        for line in f.line().split("\n"):  # markup off; terminal_safe still applies per line
            out.print(f"  {terminal_safe(line)}", highlight=False, markup=False)
