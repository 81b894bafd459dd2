"""`kperf import FILE`: a pytest-benchmark ``--benchmark-json`` file, or a Liger-Kernel benchmark
CSV, stored as kperf runs. The conversion is :mod:`kperf_ci.capture.imported`'s; this command
reads the file, stores what it gives and says what it did.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from kperf_ci import __version__, store
from kperf_ci.capture.imported import BadInput, liger_csv
from kperf_ci.capture.imported.pytest_benchmark import disambiguate, from_json, loads
from kperf_ci.errors import KperfError, user_errors
from kperf_ci.inputs import bulk_objects, load_settings
from kperf_ci.report.safe_text import terminal_safe


@click.command("import")
@click.argument("bench_json", metavar="FILE", type=click.Path(dir_okay=False))
@click.option("--db", type=click.Path(dir_okay=False), help="run database (default: [tool.kperf] db)")
@click.option("--label", help="label stored with the run")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["auto", "pytest-benchmark", liger_csv.FORMAT]),
    default="auto",
    show_default=True,
    help="what FILE is; auto: a .csv or a file starting with Liger's header is liger-csv",
)
@user_errors
def import_cmd(bench_json: str, db: str | None, label: str | None, fmt: str) -> None:
    """Import a pytest-benchmark JSON file (--benchmark-json), or a Liger-Kernel benchmark CSV
    (benchmark/data/all_benchmark_data.csv, one run per sitting), into a run database."""

    path = Path(bench_json)
    try:
        if fmt == liger_csv.FORMAT or (fmt == "auto" and liger_csv.looks_like(path)):
            _import_liger_csv(path, db, label)
        else:
            _import_pytest_benchmark(path, db, label)
    except BadInput as e:
        raise KperfError(str(e)) from None


def _import_pytest_benchmark(path: Path, db: str | None, label: str | None) -> None:
    try:
        with bulk_objects():
            doc = loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise KperfError(f"{path}: no such file; produce it with `pytest --benchmark-json {path}`") from None
    except (OSError, ValueError) as e:  # ValueError: not JSON, not UTF-8, an integer of 4,300+ digits
        raise KperfError(
            f"{path}: not a readable JSON file ({e}); pass a pytest-benchmark --benchmark-json file"
        ) from None
    except RecursionError:
        raise KperfError(
            f"{path}: JSON nested too deeply to be a pytest-benchmark file; pass a --benchmark-json file"
        ) from None
    with bulk_objects():
        info, results = from_json(doc, label=label, source=str(path), consume=True, kperf_version=_version())
        del doc
        renamed = disambiguate(results)
        settings = load_settings(db=db)
        store.save_run(settings.db, info, results)
    for line in renamed:
        click.echo(f"note: {terminal_safe(line)}", err=True)
    click.echo(f"imported {len(results)} benchmarks from {path} as run {info.run_id} into {settings.db}")


def _stored_liger(db: str, records: list[liger_csv.Record]) -> tuple[list[tuple[str, list]], dict]:
    """The rows the database keeps for the file's GPUs and versions, by run, and each run's
    variants that keep none (carried over, never dropped)."""
    if not Path(db).exists():
        return [], {}
    groups = {(cols[liger_csv.GPU], cols[liger_csv.VERSION]) for _, cols in records}
    stored, legacy = [], {}
    for info in store.list_runs(db, include_incomplete=True):
        extra = info.fingerprint.extra or {}
        if (
            extra.get("source") != liger_csv.FORMAT
            or (info.fingerprint.gpu, extra.get("liger_version")) not in groups
        ):
            continue
        record = store.load_run(db, info.run_id, artifacts=True)
        rows, old = liger_csv.stored_rows(info.run_id, record.results)
        stored.append((info.run_id, rows))
        legacy[info.run_id] = old
    return stored, legacy


def _import_liger_csv(path: Path, db: str | None, label: str | None) -> None:
    with bulk_objects():
        settings = load_settings(db=db)
        records = liger_csv.read(path)
        # every row checked before the database is touched (a bad file creates no database); the
        # runs as they are when nothing of the file's GPUs and versions is stored
        alone = liger_csv.convert(path, records, label=label, kperf_version=_version())
        # handed to merged(), which drops the rows once merged: not held while the runs are written
        box: dict[str, Any] = {"records": records, "alone": alone}
        del records, alone

        def merged() -> store.RunsUpdate:
            """The file's rows merged with the stored ones, read under the write lock (store.save_runs)."""
            records, imported = box.pop("records"), box.pop("alone")
            stored, legacy = _stored_liger(settings.db, records)
            if stored:
                imported = liger_csv.convert(
                    path, records, label=label, kperf_version=_version(), stored=stored
                )
            del records, stored
            # all of it in one transaction: the older import's variants kept, regrouped runs deleted
            box["again"], box["gone"] = liger_csv.carry_over(imported, legacy)
            box["imported"] = imported
            return imported.runs, box["gone"]

        store.save_runs(settings.db, merged)
    _say_liger(box["imported"], box["again"], box["gone"], path, settings.db)


def _say_liger(imported: liger_csv.Imported, again: int, gone: list[str], path: Path, db: str) -> None:
    """What the import did: the rows skipped (notes on stderr), then the runs it stored."""
    variants = sum(len(results) for _, results in imported.runs)
    for what, n in sorted(imported.skipped.items()):
        click.echo(
            f"note: skipped {n} rows of {terminal_safe(what)} (kperf imports speed in ms, memory in MB)",
            err=True,
        )
    click.echo(
        f"imported {imported.rows - sum(imported.skipped.values())} rows from {path} as "
        f"{len(imported.runs)} runs ({variants} variants) into {db}, merged row by row with "
        "what was stored"
        + (f"; {again} of these runs were already there and were replaced, not added" if again else "")
        + (f"; {len(gone)} stored runs were regrouped into these" if gone else "")
    )


def _version() -> str:
    return __version__
