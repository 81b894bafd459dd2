"""A Liger-Kernel benchmark CSV as kperf runs (`kperf import all_benchmark_data.csv`).

Liger-Kernel's benchmark scripts (``benchmark/scripts/utils.py``: ``run_benchmarks``,
``update_benchmark_data_csv``) time each kernel with ``triton.testing.do_bench(quantiles=[0.5,
0.2, 0.8])`` over a sweep and keep one committed CSV, one row per (kernel, provider, mode,
metric, x, extra config, GPU) with its p50/p20/p80, a timestamp and the liger version.

What a run is, from the data: ``timestamp`` is taken once per sweep (one kernel/provider/mode/
metric over all x), so one script run writes dozens of timestamps a few seconds apart (the real
file: within one sitting at most 223 s apart; between sittings of one GPU and version at least 39
minutes, mostly days). A run per timestamp would split a sitting into runs of one sweep that
share no variant with their neighbours, so nothing would compare. A run here is one *sitting*
(:mod:`.liger_sittings`): the rows of one (gpu_name, liger_version) whose timestamps chain with
gaps under SITTING_GAP, and which measure no (key, metric) twice.

The file keeps only the latest row per key and GPU, so trends come from importing the file's
past commits in turn (``git show REV:benchmark/data/all_benchmark_data.csv``). Each import is
merged row by row with the rows already stored for the same GPUs and versions (every variant
keeps its CSV rows in a ``liger_rows`` artifact): a row a later file re-measured stays in the
sitting where it was measured, a run's id hashes the first row of its sitting (which a later
file may drop, but the database keeps), and importing the history in order stores what
importing the union of its files once does.

Bounded: at most MAX_BYTES and MAX_ROWS rows, read as a stream; the rows are kept as tuples of
interned strings, so an import holds well under 20x the file's size.
"""

from __future__ import annotations

import csv
import datetime as _dt
import json
import math
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from kperf_ci.capture.imported import BadInput
from kperf_ci.capture.imported.liger_sittings import (
    COLUMNS,
    FORMAT,
    GPU,
    LIGER_ROWS,
    METRIC,
    METRICS,
    SITTING_GAP,
    UNIT,
    VERSION,
    Row,
    build_runs,
    spec_tokens,
)
from kperf_ci.model import RunInfo, VariantResult

__all__ = [
    "COLUMNS",
    "FORMAT",
    "LIGER_ROWS",
    "MAX_BYTES",
    "MAX_ROWS",
    "METRICS",
    "SITTING_GAP",
    "GPU",
    "VERSION",
    "Record",
    "Imported",
    "convert",
    "looks_like",
    "read",
    "stored_rows",
]

#: Largest file read: the real file is 0.4 MB for 2,448 rows.
MAX_BYTES = 64 * 2**20
#: Most data rows read: 40x the real file; a longer history is imported a GPU at a time.
MAX_ROWS = 100_000

#: One data row: (its first line in the file, its COLUMNS values).
Record = tuple[int, tuple[str, ...]]


def looks_like(path: Path) -> bool:
    """A Liger CSV by name (``.csv``) or by its header line."""
    if path.suffix.lower() == ".csv":
        return True
    try:
        with path.open("rb") as f:
            head = f.read(256)
    except OSError:
        return False
    return head.lstrip(b"\xef\xbb\xbf").startswith(b"kernel_name,")


@dataclass
class Imported:
    runs: list[tuple[RunInfo, list[VariantResult]]] = field(default_factory=list)
    rows: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    replaced: list[str] = field(default_factory=list)  # stored run ids regrouped into others


def read(path: Path) -> list[Record]:
    """The file's data rows; a missing, oversized, binary or header-less file is one line.
    Line numbers are the file's (the header is line 1; a quoted field may span lines)."""
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise BadInput(
                f"{path}: {size:,} bytes, more than the {MAX_BYTES // 2**20} MiB a benchmark CSV "
                "import reads; split the file by gpu_name"
            )
        with path.open(encoding="utf-8-sig", newline="") as f:
            return _records(path, csv.reader(f))
    except FileNotFoundError:
        raise BadInput(
            f"{path}: no such file; pass Liger-Kernel's benchmark/data/all_benchmark_data.csv"
        ) from None
    except UnicodeDecodeError as e:
        raise BadInput(f"{path}: not UTF-8 text ({e.reason}); pass a benchmark CSV") from None
    except IsADirectoryError:
        raise BadInput(f"{path}: a directory; pass a benchmark CSV file") from None


def _records(path: Path, reader: csv.Reader) -> list[Record]:
    out: list[Record] = []
    start = 1
    try:
        header = next(reader, [])
        if any("\0" in h for h in header):
            raise BadInput(f"{path}: holds NUL bytes, so it is not a CSV; pass a benchmark CSV")
        missing = [c for c in COLUMNS if c not in header]
        if missing:
            raise BadInput(
                f"{path}: no column {', '.join(missing)}; pass a CSV written by Liger-Kernel's "
                "update_benchmark_data_csv (or use --format pytest-benchmark for a JSON file)"
            )
        at = [header.index(c) for c in COLUMNS]
        intern = sys.intern  # gpu, version, kernel, config and timestamps repeat row after row
        start = reader.line_num + 1
        for rec in reader:
            if len(rec) != len(header):
                raise BadInput(
                    f"{path}: line {start}: has {len(rec)} fields, not one per column; fix the row"
                )
            if len(out) >= MAX_ROWS:
                raise BadInput(
                    f"{path}: more than {MAX_ROWS:,} rows, the most one import reads; "
                    "split the file by gpu_name and import each part"
                )
            if any("\0" in v for v in rec):
                raise BadInput(f"{path}: line {start}: holds NUL bytes; pass a benchmark CSV")
            out.append((start, tuple(intern(rec[i]) for i in at)))
            start = reader.line_num + 1
    except csv.Error as e:  # a field over csv's 128 KiB limit, an unterminated quote
        raise BadInput(f"{path}: line {start}: not valid CSV ({e}); fix or regenerate the file") from None
    return out


def _when(where: str, raw: str) -> _dt.datetime:
    try:
        return _dt.datetime.fromisoformat(raw.strip())
    except ValueError:
        raise BadInput(
            f"{where}: timestamp {raw[:40]!r} is not a date and time like 2024-09-03 15:31:39; fix the row"
        ) from None


def _number(where: str, col: str, raw: str) -> float:
    try:
        v = float(raw)
    except ValueError:
        raise BadInput(f"{where}: {col} is {raw[:40]!r}, not a number; fix or drop the row") from None
    if not math.isfinite(v):
        # Liger writes nan where a sweep ended early (zip_longest); kperf stores no non-number
        raise BadInput(f"{where}: {col} is {raw[:40]!r}, not a finite number; drop the row or rerun it")
    return v


def parse_row(where: str, line: int, cols: tuple[str, ...]) -> Row:
    """One row checked: numbers finite, a timestamp, a config that is readable (BadInput)."""
    c = dict(zip(COLUMNS, cols, strict=True))
    vals = tuple(_number(where, k, c[k]) for k in ("y_value_50", "y_value_20", "y_value_80"))
    spec_tokens(where, c["extra_benchmark_config_str"].strip())  # deep JSON: one line, not a crash
    return Row(line, _when(where, c["timestamp"]), cols, vals)  # type: ignore[arg-type]


def _check_zones(path: Path, rows: list[Row]) -> None:
    """Timestamps with a zone and without cannot be ordered: one line naming a row of each."""
    aware = [r for r in rows if r.when.tzinfo is not None]
    if aware and len(aware) != len(rows):
        naive = next(r for r in rows if r.when.tzinfo is None)
        a, n = (f"line {r.line}" if r.line else "a stored run" for r in (aware[0], naive))
        raise BadInput(
            f"{path}: {a} has a timestamp with a time zone and {n} one without, which cannot be "
            "ordered; write every timestamp the same way"
        )


def convert(
    path: Path,
    records: list[Record],
    *,
    label: str | None,
    kperf_version: str,
    stored: list[tuple[str, list[Row]]] = (),  # type: ignore[assignment]
) -> Imported:
    """The runs of a parsed Liger CSV merged with ``stored`` (run id, its rows) of the same
    GPUs and versions (see the module docstring), oldest first. Checks every row before
    anything is written: bad input is one BadInput naming the line."""
    out = Imported(rows=len(records))
    kept: list[Row] = []
    for line, cols in records:
        pair = (cols[METRIC], cols[UNIT])
        if pair not in METRICS:
            out.skipped[f"{pair[0]} in {pair[1] or '(no unit)'}"] += 1
            continue
        kept.append(parse_row(f"{path}: line {line}", line, cols))
    if not kept:
        raise BadInput(
            f"{path}: no row of a metric kperf imports (speed in ms, memory in MB); "
            "is this a Liger benchmark CSV?"
        )
    groups = {(r.cols[GPU], r.cols[VERSION]) for r in kept}  # (gpu_name, liger_version)
    old = [
        (rid, rows) for rid, rows in stored if rows and (rows[0].cols[GPU], rows[0].cols[VERSION]) in groups
    ]
    _check_zones(path, kept + [r for _, rows in old for r in rows])
    out.runs = build_runs(path, kept, [r for _, rows in old for r in rows], label, kperf_version)
    ids = {info.run_id for info, _ in out.runs}
    out.replaced = sorted({rid for rid, _ in old} - ids)
    return out


def stored_rows(run_id: str, results: list[VariantResult]) -> tuple[list[Row], list[VariantResult]]:
    """The CSV rows a stored run keeps (its variants' ``liger_rows``), and the variants that keep
    none (imported by an older kperf-ci, or a malformed artifact): those are carried over as
    they are, never dropped. The database is data: every row is checked as a file's row is."""
    rows: list[Row] = []
    legacy: list[VariantResult] = []
    for v in results:
        try:
            doc = json.loads(v.artifacts.get(LIGER_ROWS) or "null")
        except (ValueError, RecursionError):
            doc = None
        ok = (
            isinstance(doc, list)
            and doc
            and all(
                isinstance(c, list) and len(c) == len(COLUMNS) and all(isinstance(x, str) for x in c)
                for c in doc
            )
        )
        if not ok:
            legacy.append(v)
            continue
        for c in doc:
            cols = tuple(sys.intern(x) for x in c)
            if (cols[METRIC], cols[UNIT]) not in METRICS:
                raise BadInput(f"stored run {run_id}: a liger_rows row of {cols[METRIC]!r}; delete that run")
            rows.append(parse_row(f"stored run {run_id}", 0, cols))
    return rows, legacy


def carry_over(imported: Imported, legacy: dict[str, list[VariantResult]]) -> tuple[int, list[str]]:
    """Put back into ``imported``'s runs the variants an older kperf-ci imported (``legacy``, by
    run id, from :func:`stored_rows`: they keep no rows to merge, so they stay where they were).
    Returns how many of the runs were stored already, and the stored runs regrouped into others
    to delete: those left that keep no such variants (the others are left as they are)."""
    again = sum(1 for info, _ in imported.runs if info.run_id in legacy)
    for info, results in imported.runs:
        ids = {r.key.id for r in results}
        results += [v for v in legacy.get(info.run_id, []) if v.key.id not in ids]
    return again, [rid for rid in imported.replaced if not legacy.get(rid)]
