"""`kperf merge a.db b.db ... -o all.db`: one database from several (shards, workers, history).

What merging guarantees, and how, is :mod:`kperf_ci.merging`'s docstring; this is its command line.
"""

from __future__ import annotations

from pathlib import Path

import click

from kperf_ci.errors import KperfError, user_errors
from kperf_ci.merging import merge_databases, merge_into_existing
from kperf_ci.report.safe_text import terminal_safe
from kperf_ci.store.merge import MergeStats


@click.command("merge")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="database to write")
@click.option(
    "--shards",
    is_flag=True,
    help="combine the runs of one commit and machine class (from --kperf-shard i/n) into one run",
)
@user_errors
def merge_cmd(inputs: tuple[str, ...], output: str, shards: bool) -> None:
    """Merge run databases into one: no row lost or duplicated, machine classes kept apart.

    An existing output is a merge target: the inputs are merged into it in place, in one
    transaction under its write lock (exit 2 when another writer keeps the lock), so nothing in it
    is lost, not even what another process commits meanwhile, and running the same merge again (a
    retried CI step) changes nothing. An existing file that is not a kperf database is refused and
    left as it is."""
    out = Path(output)
    paths = [Path(p) for p in inputs]
    existing = out.exists()
    if existing:
        if not out.is_file():
            raise KperfError(f"{output}: exists and is not a database file; choose another -o")
        click.echo(terminal_safe(f"kperf merge: {output} exists; merging into it"))
        stats = merge_into_existing(out, paths, shards=shards)
    else:
        stats = merge_databases(paths, out, shards=shards)
    _say(stats, len(paths), output, shards=shards, added=existing)


def _say(stats: MergeStats, inputs: int, output: str, *, shards: bool, added: bool) -> None:
    """What was merged: counts, variants seen twice, and with --shards which runs were combined."""
    click.echo(
        terminal_safe(
            f"kperf merge: {inputs} database(s) -> {output}: {stats.runs} run(s), "
            f"{stats.variants} variant(s), {stats.rows} row(s){' added' if added else ''}"
        )
    )
    if stats.conflicting_variants:
        click.echo(
            terminal_safe(
                f"kperf merge: {stats.conflicting_variants} variant(s) measured differently in more than one "
                "input for the same run; the first input's measurement was kept"
            ),
            err=True,
        )
    elif stats.duplicate_variants:
        click.echo(f"kperf merge: {stats.duplicate_variants} variant(s) were already there, unchanged")
    if shards:
        for rid, members in stats.combined.items():
            if len(members) > 1:
                click.echo(terminal_safe(f"kperf merge: run {rid} = {', '.join(members)}"))
