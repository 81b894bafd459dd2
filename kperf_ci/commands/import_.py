"""`kperf import BENCH.json`: a pytest-benchmark ``--benchmark-json`` file as a kperf run.

Each benchmark becomes a variant (kernel = its group, else its name with parameters;
spec = its full node id; arch = "host"); its statistics become time.* metrics in ms and its raw
``data`` (present with ``--benchmark-save-data``) the timing samples.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import uuid
from pathlib import Path
from typing import Any

import click

from kperf_ci.model import Fingerprint, Metric, RunInfo, VariantKey, VariantResult

from . import KperfError, load_settings, user_errors

# pytest-benchmark stat -> (kperf metric, better)
_STATS = {
    "median": ("time.median", "lower"),
    "mean": ("time.mean", "lower"),
    "min": ("time.min", "lower"),
    "max": ("time.max", "none"),
    "iqr": ("time.iqr", "lower"),
    "stddev": ("time.stddev", "none"),
}


@click.command("import")
@click.argument("bench_json", type=click.Path(dir_okay=False))
@click.option("--db", type=click.Path(dir_okay=False), help="run database (default: [tool.kperf] db)")
@click.option("--label", help="label stored with the run")
@user_errors
def import_cmd(bench_json: str, db: str | None, label: str | None) -> None:
    """Import a pytest-benchmark JSON file (--benchmark-json) into a run database."""
    from kperf_ci import store

    path = Path(bench_json)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise KperfError(f"{path}: no such file; produce it with `pytest --benchmark-json {path}`") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise KperfError(
            f"{path}: not a readable JSON file ({e}); pass a pytest-benchmark --benchmark-json file"
        ) from None
    info, results = from_pytest_benchmark(doc, label=label, source=str(path))
    settings = load_settings(db=db)
    store.save_run(settings.db, info, results)
    click.echo(f"imported {len(results)} benchmarks from {path} as run {info.run_id} into {settings.db}")


def _ci_of_median(data_ms: list[float], z: float = 2.576) -> tuple[float, float] | None:
    """Distribution-free 99% interval of the median (order statistics, normal approximation)."""
    n = len(data_ms)
    if n < 6:
        return None
    s = sorted(data_ms)
    half = z * math.sqrt(n) / 2
    lo, hi = max(0, math.floor(n / 2 - half) - 1), min(n - 1, math.ceil(n / 2 + half))
    return s[lo], s[hi]


def from_pytest_benchmark(
    doc: dict[str, Any], *, label: str | None = None, source: str = ""
) -> tuple[RunInfo, list[VariantResult]]:
    """Convert a parsed pytest-benchmark JSON document into (RunInfo, results)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        raise KperfError(f"{source}: no 'benchmarks' list; is this a pytest-benchmark --benchmark-json file?")
    machine = doc.get("machine_info") or {}
    commit = doc.get("commit_info") or {}
    cpu = machine.get("cpu") or {}
    fp = Fingerprint(
        cpu=(cpu.get("brand_raw") if isinstance(cpu, dict) else None) or machine.get("processor") or "",
        python=machine.get("python_version") or "",
        host_hash=hashlib.sha256(str(machine.get("node", "")).encode()).hexdigest()[:12],
        extra={
            "source": "pytest-benchmark",
            "pytest_benchmark": doc.get("version"),
            **{
                k: machine[k]
                for k in ("machine", "system", "release", "python_implementation")
                if k in machine
            },
        },
    )
    started = doc.get("datetime") or _dt.datetime.now(_dt.timezone.utc).isoformat()
    try:
        started = _dt.datetime.fromisoformat(str(started).replace("Z", "+00:00")).isoformat(
            timespec="seconds"
        )
    except ValueError:
        pass
    info = RunInfo(
        run_id=uuid.uuid4().hex[:12],
        started_at=started,
        mode="gpu",  # a timing run (on the host); compare matches it by CPU model
        fingerprint=fp,
        git_sha=commit.get("id"),
        git_branch=commit.get("branch"),
        kperf_version=_version(),
        label=label,
    )
    results = []
    for b in doc["benchmarks"]:
        stats = b.get("stats") or {}
        name = str(b.get("name") or b.get("fullname") or "benchmark")
        key = VariantKey(
            kernel=b.get("group") or name,
            arch="host",
            spec=str(b.get("fullname") or name),
            config="pytest-benchmark",
            test=str(b.get("fullname") or name),
        )
        metrics = [
            Metric(metric, float(stats[stat]) * 1e3, "ms", "time", better)  # type: ignore[arg-type]
            for stat, (metric, better) in _STATS.items()
            if isinstance(stats.get(stat), (int, float))
        ]
        mean, sd = stats.get("mean"), stats.get("stddev")
        if isinstance(mean, (int, float)) and isinstance(sd, (int, float)) and mean > 0:
            metrics.append(Metric("time.cv", sd / mean, "fraction", "time", "none"))
        samples = [float(x) * 1e3 for x in (stats.get("data") or []) if isinstance(x, (int, float))]
        ci = _ci_of_median(samples)
        if ci:
            metrics += [
                Metric("time.ci_low", ci[0], "ms", "time"),
                Metric("time.ci_high", ci[1], "ms", "time"),
            ]
        tags = [f"rounds={stats['rounds']}"] if "rounds" in stats else []
        results.append(VariantResult(key=key, metrics=metrics, samples=samples, tags=tags))
    return info, results


def _version() -> str:
    from kperf_ci import __version__

    return __version__
