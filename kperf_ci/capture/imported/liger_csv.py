"""A Liger-Kernel benchmark CSV as kperf runs (`kperf import all_benchmark_data.csv`).

Liger-Kernel's benchmark scripts (``benchmark/scripts/utils.py``: ``run_benchmarks``,
``update_benchmark_data_csv``) time each kernel with ``triton.testing.do_bench(quantiles=[0.5,
0.2, 0.8])`` over a sweep and keep one committed CSV, one row per (kernel, provider, mode,
metric, x, extra config, GPU) with its p50/p20/p80, a timestamp and the liger version.

What a run is, from the data: ``timestamp`` is taken once per sweep (one kernel/provider/mode/
metric over all x), so one script run writes dozens of timestamps a few seconds apart (the real
file: within one sitting at most 223 s apart; between sittings of one GPU and version at least 39
minutes, mostly days). A run per timestamp would split a sitting into runs of one sweep that
share no variant with their neighbours, so nothing would compare. A run here is one *sitting*:
the rows of one (gpu_name, liger_version) whose timestamps chain with gaps under SITTING_GAP.

Its id is derived from (gpu_name, liger_version, first timestamp), so importing the same file
again rewrites the same runs instead of adding copies (``store.save_run`` replaces a run of the
same id). The file keeps only the latest row per key and GPU, so trends come from importing the
file's past commits in turn (``git show REV:benchmark/data/all_benchmark_data.csv``).
"""

from __future__ import annotations

import csv
import datetime as _dt
import hashlib
import io
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from kperf_ci.capture.imported import BadInput
from kperf_ci.metrics import metric
from kperf_ci.model import BENCH_CALL, Fingerprint, RunInfo, VariantKey, VariantResult, canonical_json

#: The columns of Liger's BenchmarkDataCSVRow that an import needs.
COLUMNS = (
    "kernel_name",
    "kernel_provider",
    "kernel_operation_mode",
    "metric_name",
    "metric_unit",
    "x_name",
    "x_value",
    "y_value_50",
    "y_value_20",
    "y_value_80",
    "extra_benchmark_config_str",
    "gpu_name",
    "timestamp",
    "liger_version",
)

#: (metric_name, metric_unit) -> kperf metrics of (p50, p20, p80); other pairs are skipped and
#: counted, never converted by guess (a "GB" row would be off by 1024 under a wrong guess).
METRICS = {
    ("speed", "ms"): ("time.median", "time.p20", "time.p80"),
    ("memory", "MB"): ("memory.peak", None, None),
}

#: Largest gap between two sweeps of one sitting (see the module docstring for the data).
SITTING_GAP = _dt.timedelta(hours=1)

#: Largest file read: the real file is 0.4 MB for 2,448 rows; 64 MiB is ~400,000 rows.
MAX_BYTES = 64 * 2**20

FORMAT = "liger-csv"


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
class _Row:
    line: int
    when: _dt.datetime
    cols: dict[str, str]
    values: tuple[float, float, float]


@dataclass
class Imported:
    runs: list[tuple[RunInfo, list[VariantResult]]] = field(default_factory=list)
    rows: int = 0
    skipped: Counter[str] = field(default_factory=Counter)


def read(path: Path) -> list[dict[str, str]]:
    """The file's rows as dicts; a missing, oversized, binary or header-less file is one line."""
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise BadInput(
                f"{path}: {size:,} bytes, more than the {MAX_BYTES // 2**20} MiB a benchmark CSV "
                "import reads; split the file by gpu_name"
            )
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise BadInput(
            f"{path}: no such file; pass Liger-Kernel's benchmark/data/all_benchmark_data.csv"
        ) from None
    except UnicodeDecodeError as e:
        raise BadInput(
            f"{path}: not UTF-8 text ({e.reason} at byte {e.start}); pass a benchmark CSV"
        ) from None
    if "\0" in text:
        raise BadInput(f"{path}: holds NUL bytes, so it is not a CSV; pass a benchmark CSV")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        header = reader.fieldnames or []
        missing = [c for c in COLUMNS if c not in header]
        if missing:
            raise BadInput(
                f"{path}: no column {', '.join(missing)}; pass a CSV written by Liger-Kernel's "
                "update_benchmark_data_csv (or use --format pytest-benchmark for a JSON file)"
            )
        return list(reader)
    except csv.Error as e:  # a field over csv's 128 KiB limit, an unterminated quote
        raise BadInput(
            f"{path}: line {reader.line_num}: not valid CSV ({e}); fix or regenerate the file"
        ) from None


def _when(path: Path, line: int, raw: str) -> _dt.datetime:
    try:
        return _dt.datetime.fromisoformat(raw.strip())
    except ValueError:
        raise BadInput(
            f"{path}: line {line}: timestamp {raw[:40]!r} is not a date and time like 2024-09-03 15:31:39; "
            "fix the row"
        ) from None


def _number(path: Path, line: int, col: str, raw: str | None) -> float:
    try:
        v = float(raw or "")
    except ValueError:
        raise BadInput(
            f"{path}: line {line}: {col} is {str(raw)[:40]!r}, not a number; fix or drop the row"
        ) from None
    if not math.isfinite(v):
        # Liger writes nan where a sweep ended early (zip_longest); kperf stores no non-number
        raise BadInput(
            f"{path}: line {line}: {col} is {raw!r}, not a finite number; drop the row or rerun it"
        )
    return v


def convert(path: Path, rows: list[dict[str, str]], *, label: str | None, kperf_version: str) -> Imported:
    """The runs of a parsed Liger CSV (each with its variants, in file order), oldest first.
    Checks every row before anything is written: bad input is one BadInput naming the line."""
    out = Imported(rows=len(rows))
    kept: list[_Row] = []
    for i, cols in enumerate(rows):
        line = i + 2  # the header is line 1
        if None in cols or any(cols.get(c) is None for c in COLUMNS):  # too many or too few fields
            raise BadInput(f"{path}: line {line}: has {len(cols)} fields, not one per column; fix the row")
        pair = (cols["metric_name"], cols["metric_unit"])
        if pair not in METRICS:
            out.skipped[f"{pair[0]} in {pair[1] or '(no unit)'}"] += 1
            continue
        vals = tuple(_number(path, line, c, cols[c]) for c in ("y_value_50", "y_value_20", "y_value_80"))
        kept.append(_Row(line, _when(path, line, cols["timestamp"]), cols, vals))  # type: ignore[arg-type]
    if not kept:
        raise BadInput(
            f"{path}: no row of a metric kperf imports (speed in ms, memory in MB); "
            "is this a Liger benchmark CSV?"
        )
    for sitting in _sittings(kept):
        out.runs.append(_run(path, sitting, label, kperf_version))
    out.runs.sort(key=lambda r: (r[0].started_at, r[0].run_id))
    return out


def _spec(provider_mode: str, x_name: str, x: str, extra: str) -> str:
    """Comma-separated ``name=value`` tokens, as a compiled variant's specialization reads:
    `kperf show` names variants of one kernel by the tokens that differ between them
    (``liger/forward, T=2048, hidden_size=4096``), where the raw JSON config cut them unreadably."""
    try:
        config = json.loads(extra) if extra else {}
    except ValueError:
        config = None
    tokens = [f"{k}={v}" for k, v in config.items()] if isinstance(config, dict) else [extra]
    return ", ".join([provider_mode, f"{x_name}={x}", *tokens])


def _sittings(rows: list[_Row]) -> list[list[_Row]]:
    """Rows grouped into sittings (module docstring), each in file order."""
    by_machine: dict[tuple[str, str], list[_Row]] = {}
    for r in rows:
        by_machine.setdefault((r.cols["gpu_name"], r.cols["liger_version"]), []).append(r)
    out = []
    for group in by_machine.values():
        chain: list[_Row] = []
        last: _dt.datetime | None = None
        for r in sorted(group, key=lambda r: (r.when, r.line)):
            if last is not None and r.when - last > SITTING_GAP:
                out.append(sorted(chain, key=lambda r: r.line))
                chain = []
            chain.append(r)
            last = r.when
        out.append(sorted(chain, key=lambda r: r.line))
    return out


def _run(
    path: Path, rows: list[_Row], label: str | None, kperf_version: str
) -> tuple[RunInfo, list[VariantResult]]:
    first = min(r.when for r in rows)
    gpu, version = rows[0].cols["gpu_name"], rows[0].cols["liger_version"]
    run_id = hashlib.sha256(canonical_json([FORMAT, gpu, version, first.isoformat()]).encode()).hexdigest()[
        :12
    ]
    info = RunInfo(
        run_id=run_id,
        started_at=first.isoformat(timespec="seconds"),  # the CSV names no zone: as written
        mode="gpu",
        fingerprint=Fingerprint(gpu=gpu, extra={"source": FORMAT, "liger_version": version}),
        kperf_version=kperf_version,
        label=label,
    )
    # speed and memory rows of one call are one variant with both metrics
    variants: dict[tuple[str, ...], VariantResult] = {}
    seen: dict[tuple[tuple[str, ...], str], int] = {}
    for r in rows:
        c = r.cols
        provider_mode = f"{c['kernel_provider']}/{c['kernel_operation_mode']}"
        extra = c["extra_benchmark_config_str"].strip()
        # the extra config tells sweeps of one provider/mode apart (embedding has two), so it is
        # part of the site: one plot per config, not two sweeps zigzagging in one
        site = f"{provider_mode} {extra}" if extra else provider_mode
        x = c["x_value"].strip()
        vk = (c["kernel_name"], site, c["x_name"], x)
        prev = seen.get((vk, c["metric_name"]))
        if prev is not None:
            raise BadInput(
                f"{path}: lines {prev} and {r.line} both hold {c['metric_name']} of {c['kernel_name']} "
                f"{site} {c['x_name']}={x} on {gpu}; keep one"
            )
        seen[(vk, c["metric_name"])] = r.line
        res = variants.get(vk)
        if res is None:
            script = f"{FORMAT}:{c['kernel_name']}"
            call = {"script": script, "site": site, "index": len(variants), "label": x}
            try:
                xf = float(x)
                if math.isfinite(xf):
                    call["x"] = int(xf) if xf.is_integer() and abs(xf) < 2**53 else xf
            except ValueError:
                pass  # a string x (a dtype, a model name): plotted by label
            res = VariantResult(
                key=VariantKey(
                    kernel=c["kernel_name"],
                    arch=gpu,  # gpu mode keys variants by GPU model
                    spec=_spec(provider_mode, c["x_name"], x, extra),
                    config=FORMAT,
                    test=f"{script}::{site}[{x}]",
                ),
                tags=[FORMAT, f"liger_version={version}"],
                artifacts={BENCH_CALL: canonical_json(call)},
            )
            variants[vk] = res
        for name, value in zip(METRICS[(c["metric_name"], c["metric_unit"])], r.values, strict=True):
            if name is not None:
                res.metrics.append(metric(name, value))
    return info, list(variants.values())
