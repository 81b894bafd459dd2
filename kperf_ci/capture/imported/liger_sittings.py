"""Liger CSV rows -> sittings -> kperf runs (:mod:`.liger_csv` reads and checks the rows).

A sitting is the rows of one (gpu_name, liger_version) in time order whose timestamps chain with
gaps under SITTING_GAP, cut where a (kernel, provider, mode, config, x, metric) comes again: one
script run measures each of them once, so a second measurement of one is a later sitting even
when it followed within the hour. The rows come in a fixed order (time, then the key), never the
file's, so the same rows give the same runs whichever file or import brought them.
"""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kperf_ci.capture.imported import BadInput
from kperf_ci.metrics import metric
from kperf_ci.model import BENCH_CALL, Fingerprint, RunInfo, VariantKey, VariantResult, canonical_json

#: The columns of Liger's BenchmarkDataCSVRow that an import needs, in the order a Row keeps them.
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
KERNEL, PROVIDER, MODE, METRIC, UNIT, X_NAME, X, Y50, Y20, Y80, EXTRA, GPU, WHEN, VERSION = range(14)

#: (metric_name, metric_unit) -> kperf metrics of (p50, p20, p80); other pairs are skipped and
#: counted, never converted by guess (a "GB" row would be off by 1024 under a wrong guess).
METRICS = {
    ("speed", "ms"): ("time.median", "time.p20", "time.p80"),
    ("memory", "MB"): ("memory.peak", None, None),
}

#: Largest gap between two sweeps of one sitting (see liger_csv's docstring for the data).
SITTING_GAP = _dt.timedelta(hours=1)

FORMAT = "liger-csv"
#: Each variant's CSV rows (canonical JSON, a list of COLUMNS lists): what a later import merges
#: with, row by row.
LIGER_ROWS = "liger_rows"


@dataclass
class Row:
    line: int  # in the file imported; 0 for a row read back from the database
    when: _dt.datetime
    cols: tuple[str, ...]  # COLUMNS
    values: tuple[float, float, float]

    @property
    def identity(self) -> tuple[str, ...]:
        """One measurement: everything but its numbers (a re-import of it replaces them)."""
        return self.cols[:Y50] + self.cols[EXTRA:]

    @property
    def measured(self) -> tuple[str, ...]:
        """What one script run measures once: the variant and the metric."""
        c = self.cols
        return (c[KERNEL], c[PROVIDER], c[MODE], c[EXTRA].strip(), c[X_NAME], c[X].strip(), c[METRIC])


@functools.lru_cache(maxsize=4096)  # one config string per sweep, repeated on every row
def _config_tokens(extra: str) -> tuple[str, ...] | None:
    try:
        config = json.loads(extra) if extra else {}
    except ValueError:
        config = None
    except RecursionError:
        return None
    return tuple(f"{k}={v}" for k, v in config.items()) if isinstance(config, dict) else (extra,)


def spec_tokens(where: str, extra: str) -> tuple[str, ...]:
    """The extra config as ``name=value`` tokens; JSON nested past the parser's depth is BadInput."""
    try:
        tokens = _config_tokens(extra)
    except RecursionError:  # str() of a deep value
        tokens = None
    if tokens is None:
        raise BadInput(
            f"{where}: extra_benchmark_config_str is JSON nested too deeply to read; "
            "write the config as a flat JSON object"
        )
    return tokens


def _x_order(x: str) -> tuple[int, float, str]:
    try:
        v = float(x)
    except ValueError:
        return (1, 0.0, x)
    return (0, v, x) if math.isfinite(v) else (1, 0.0, x)


def _order(r: Row) -> tuple[Any, ...]:
    c = r.cols
    return (r.when, c[KERNEL], c[PROVIDER], c[MODE], c[EXTRA], c[X_NAME], _x_order(c[X]), c[METRIC], c[UNIT])


def merged(path: Path, rows: list[Row], stored: list[Row]) -> list[Row]:
    """Stored rows and the file's, one per measurement: the file's replaces a stored one of the
    same identity; two of the file's are BadInput."""
    by_id = {r.identity: r for r in stored}
    seen: dict[tuple[str, ...], int] = {}
    for r in rows:
        prev = seen.get(r.identity)
        if prev is not None:
            c = r.cols
            raise BadInput(
                f"{path}: lines {prev} and {r.line} both hold {c[METRIC]} of {c[KERNEL]} {c[PROVIDER]}/"
                f"{c[MODE]} {c[X_NAME]}={c[X].strip()} on {c[GPU]} at {c[WHEN]}; keep one"
            )
        seen[r.identity] = r.line
        by_id[r.identity] = r
    return sorted(by_id.values(), key=_order)


def sittings(rows: list[Row]) -> list[list[Row]]:
    """Rows (in _order) grouped into sittings (module docstring)."""
    by_machine: dict[tuple[str, str], list[Row]] = {}
    for r in rows:
        by_machine.setdefault((r.cols[GPU], r.cols[VERSION]), []).append(r)
    out = []
    for group in by_machine.values():
        chain: list[Row] = []
        measured: set[tuple[str, ...]] = set()
        for r in group:
            if chain and (r.when - chain[-1].when > SITTING_GAP or r.measured in measured):
                out.append(chain)
                chain, measured = [], set()
            chain.append(r)
            measured.add(r.measured)
        out.append(chain)
    return out


def build_runs(
    path: Path, rows: list[Row], stored: list[Row], label: str | None, kperf_version: str
) -> list[tuple[RunInfo, list[VariantResult]]]:
    """The runs of the file's rows merged with the stored rows of the same GPUs and versions,
    oldest first."""
    runs = [_run(s, label, kperf_version) for s in sittings(merged(path, rows, stored))]
    runs.sort(key=lambda r: (r[0].started_at, r[0].run_id))
    return runs


def _variant(c: tuple[str, ...], index: int) -> VariantResult:
    provider_mode = f"{c[PROVIDER]}/{c[MODE]}"
    extra = c[EXTRA].strip()
    # the extra config tells sweeps of one provider/mode apart (embedding has two), so it is
    # part of the site: one plot per config, not two sweeps zigzagging in one
    site = f"{provider_mode} {extra}" if extra else provider_mode
    x = c[X].strip()
    script = f"{FORMAT}:{c[KERNEL]}"
    call: dict[str, Any] = {"script": script, "site": site, "index": index, "label": x}
    kind, xf, _ = _x_order(x)
    if kind == 0:  # a string x (a dtype, a model name) is plotted by label
        call["x"] = int(xf) if xf.is_integer() and abs(xf) < 2**53 else xf
    # `kperf show` names variants of one kernel by the tokens that differ between them
    # (``liger/forward, T=2048, hidden_size=4096``), where the raw JSON config cut them unreadably
    spec = ", ".join([provider_mode, f"{c[X_NAME]}={x}", *spec_tokens(FORMAT, extra)])
    return VariantResult(
        key=VariantKey(
            kernel=c[KERNEL],
            arch=c[GPU],  # gpu mode keys variants by GPU model
            spec=spec,
            config=FORMAT,
            test=f"{script}::{site}[{x}]",
        ),
        tags=[FORMAT, f"liger_version={c[VERSION]}"],
        artifacts={BENCH_CALL: canonical_json(call)},
    )


def _run(rows: list[Row], label: str | None, kperf_version: str) -> tuple[RunInfo, list[VariantResult]]:
    first = rows[0].when
    gpu, version = rows[0].cols[GPU], rows[0].cols[VERSION]
    # the sitting's first row is kept by every later import, so this id never moves
    digest = hashlib.sha256(canonical_json([FORMAT, gpu, version, first.isoformat()]).encode())
    info = RunInfo(
        run_id=digest.hexdigest()[:12],
        started_at=first.isoformat(timespec="seconds"),  # the CSV names no zone: as written
        mode="gpu",
        fingerprint=Fingerprint(gpu=gpu, extra={"source": FORMAT, "liger_version": version}),
        kperf_version=kperf_version,
        label=label,
    )
    # speed and memory rows of one call are one variant with both metrics
    variants: dict[tuple[str, ...], tuple[VariantResult, list[list[str]]]] = {}
    for r in rows:
        vk = r.measured[:-1]
        hit = variants.get(vk)
        if hit is None:
            hit = variants[vk] = (_variant(r.cols, len(variants)), [])
        res, kept = hit
        kept.append(list(r.cols))
        for name, value in zip(METRICS[(r.cols[METRIC], r.cols[UNIT])], r.values, strict=True):
            if name is not None:
                res.metrics.append(metric(name, value))
    for res, kept in variants.values():
        res.artifacts[LIGER_ROWS] = canonical_json(kept)
    return info, [res for res, _ in variants.values()]
