"""`kperf import BENCH.json`: a pytest-benchmark ``--benchmark-json`` file as a kperf run.

Each benchmark becomes a variant (kernel = its group, else its name with parameters;
spec = its full node id; arch = "host"); its statistics become time.* metrics in ms and its raw
``data`` (present with ``--benchmark-save-data``) the timing samples.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from kperf_ci import __version__, store
from kperf_ci.fingerprint import host_hash
from kperf_ci.metrics import metric
from kperf_ci.model import Fingerprint, RunInfo, VariantKey, VariantResult
from kperf_ci.report.safe_text import terminal_safe

from . import KperfError, bulk_objects, import_csv, load_settings, user_errors

# pytest-benchmark stat -> (kperf metric, better)
_STATS = {
    "median": "time.median",
    "mean": "time.mean",
    "min": "time.min",
    "max": "time.max",
    "iqr": "time.iqr",
    "stddev": "time.stddev",
}


@click.command("import")
@click.argument("bench_json", metavar="FILE", type=click.Path(dir_okay=False))
@click.option("--db", type=click.Path(dir_okay=False), help="run database (default: [tool.kperf] db)")
@click.option("--label", help="label stored with the run")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["auto", "pytest-benchmark", import_csv.FORMAT]),
    default="auto",
    show_default=True,
    help="what FILE is; auto: a .csv or a file starting with Liger's header is liger-csv",
)
@user_errors
def import_cmd(bench_json: str, db: str | None, label: str | None, fmt: str) -> None:
    """Import a pytest-benchmark JSON file (--benchmark-json), or a Liger-Kernel benchmark CSV
    (benchmark/data/all_benchmark_data.csv, one run per sitting), into a run database."""

    path = Path(bench_json)
    if fmt == import_csv.FORMAT or (fmt == "auto" and import_csv.looks_like(path)):
        _import_liger_csv(path, db, label)
        return
    try:
        with bulk_objects():
            doc = _loads(path.read_text(encoding="utf-8"))
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
        info, results = from_pytest_benchmark(doc, label=label, source=str(path), consume=True)
        del doc
        renamed = disambiguate(results)
        settings = load_settings(db=db)
        store.save_run(settings.db, info, results)
    for line in renamed:
        click.echo(f"note: {terminal_safe(line)}", err=True)
    click.echo(f"imported {len(results)} benchmarks from {path} as run {info.run_id} into {settings.db}")


def _import_liger_csv(path: Path, db: str | None, label: str | None) -> None:
    with bulk_objects():
        imported = import_csv.convert(path, import_csv.read(path), label=label, kperf_version=_version())
        settings = load_settings(db=db)
        held = (
            {r.run_id for r in store.list_runs(settings.db, include_incomplete=True)}
            if Path(settings.db).exists()
            else set()
        )
        again = sum(1 for info, _ in imported.runs if info.run_id in held)
        # one transaction per run, each replacing its deterministic id: an import cut short is
        # finished by running it again, and a second import of the same file adds nothing
        for info, results in imported.runs:
            store.save_run(settings.db, info, results)
    variants = sum(len(results) for _, results in imported.runs)
    for what, n in sorted(imported.skipped.items()):
        click.echo(
            f"note: skipped {n} rows of {terminal_safe(what)} (kperf imports speed in ms, memory in MB)",
            err=True,
        )
    click.echo(
        f"imported {imported.rows - sum(imported.skipped.values())} rows from {path} as "
        f"{len(imported.runs)} runs ({variants} variants) into {settings.db}"
        + (f"; {again} of these runs were already there and were replaced, not added" if again else "")
    )


def disambiguate(results: list[VariantResult]) -> list[str]:
    """Give benchmarks that would be stored as one variant (same kernel and node id, e.g. a file
    with the same benchmark twice) distinct specs, in file order: the second becomes
    ``<spec> #2``, and so on. Deterministic, so re-importing the file matches the same variants.
    Returns one line per renamed benchmark (the command prints them)."""
    seen: dict[str, int] = {}
    taken = {r.key.id for r in results}
    notes = []
    for i, r in enumerate(results):
        n = seen.get(r.key.id, 0) + 1
        seen[r.key.id] = n
        if n == 1:
            continue
        key = r.key
        k = n
        while True:  # a name that happens to exist already ("x #2" in the file) is skipped
            new = replace(key, spec=f"{key.spec} #{k}", test=f"{key.test} #{k}")
            if new.id not in taken:
                break
            k += 1
        taken.add(new.id)
        results[i] = replace(r, key=new)
        notes.append(f"benchmark {key.spec!r} appears more than once; occurrence {n} stored as {new.spec!r}")
    return notes


def _ci_of_median(data_ms: list[float], z: float = 2.576) -> tuple[float, float] | None:
    """Distribution-free 99% interval of the median (order statistics, normal approximation)."""
    n = len(data_ms)
    if n < 6:
        return None
    s = sorted(data_ms)
    half = z * math.sqrt(n) / 2
    lo, hi = max(0, math.floor(n / 2 - half) - 1), min(n - 1, math.ceil(n / 2 + half))
    return s[lo], s[hi]


def _obj(parent: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    """An optional JSON object field: {} when absent or null, one-line error when not an object."""
    value = parent.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise KperfError(
            f"{where}: '{key}' is {_kind(value)}, not an object; is this a --benchmark-json file?"
        )
    return value


# A \uD800-\uDFFF escape: JSON allows a lone one, which no UTF-8 file, database or terminal can hold.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_LONE = re.compile("[\ud800-\udfff]")


def _visible(value: Any) -> Any:
    """Strings with lone surrogates spelled out ("\\udc80"), in lists too (dicts are done by the hook)."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8") if _LONE.search(value) else value
    if isinstance(value, list):
        return [_visible(v) for v in value]
    return value


def _loads(text: str) -> Any:
    """``json.loads``; a file with surrogate escapes gets its lone surrogates spelled out, so a
    name stays distinct and readable instead of crashing the store (exit 3)."""
    if not _SURROGATE_ESCAPE.search(text):  # the usual file: no walk over 20,000 benchmarks
        return json.loads(text)
    return _visible(json.loads(text, object_pairs_hook=lambda kv: {_visible(k): _visible(v) for k, v in kv}))


def _text(value: Any) -> str | None:
    """A JSON string field as text; numbers are accepted as their spelling, anything else as absent."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return None


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "null" if value is None else "a number"
    )


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _ms(value: Any) -> float | None:
    """Seconds (pytest-benchmark's unit) as finite milliseconds; None for anything else (NaN,
    Infinity, 1e999, a huge integer, a string), which SQLite would refuse or compare would choke on."""
    if not _number(value):
        return None
    try:
        ms = float(value) * 1e3
    except OverflowError:
        return None
    return ms if math.isfinite(ms) else None


def from_pytest_benchmark(
    doc: Any, *, label: str | None = None, source: str = "", consume: bool = False
) -> tuple[RunInfo, list[VariantResult]]:
    """Convert a parsed pytest-benchmark JSON document into (RunInfo, results).

    The document comes from a file anyone may hand over: a field of the wrong type or a
    statistic that is not a finite number is a one-line KperfError (exit 2) naming the file and
    the benchmark, never a crash.

    ``consume``: drop each benchmark from ``doc`` once converted, so that a file of 100,000
    benchmarks is not held twice (as parsed JSON and as results) at the peak."""
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        raise KperfError(f"{source}: no 'benchmarks' list; is this a pytest-benchmark --benchmark-json file?")
    machine = _obj(doc, "machine_info", source)
    commit = _obj(doc, "commit_info", source)
    cpu = machine.get("cpu")
    fp = Fingerprint(
        cpu=(_text(cpu.get("brand_raw")) if isinstance(cpu, dict) else None)
        or _text(machine.get("processor"))
        or "",
        python=_text(machine.get("python_version")) or "",
        host_hash=host_hash(_text(machine.get("node")) or ""),
        extra={
            "source": "pytest-benchmark",
            "pytest_benchmark": _text(doc.get("version")),
            **{
                k: _text(machine[k])
                for k in ("machine", "system", "release", "python_implementation")
                if k in machine
            },
        },
    )
    started = _text(doc.get("datetime")) or _dt.datetime.now(_dt.timezone.utc).isoformat()
    try:
        started = _dt.datetime.fromisoformat(started.replace("Z", "+00:00")).isoformat(timespec="seconds")
    except ValueError:
        pass
    info = RunInfo(
        run_id=uuid.uuid4().hex[:12],
        started_at=started,
        mode="gpu",  # a timing run (on the host); compare matches it by CPU model
        fingerprint=fp,
        git_sha=_text(commit.get("id")),
        git_branch=_text(commit.get("branch")),
        kperf_version=_version(),
        label=label,
    )
    results = []
    benchmarks = doc["benchmarks"]
    for i, b in enumerate(benchmarks):
        if consume:
            benchmarks[i] = None
        if not isinstance(b, dict):
            raise KperfError(f"{source}: benchmarks[{i}] is {_kind(b)}, not an object")
        name = _text(b.get("name")) or _text(b.get("fullname")) or "benchmark"
        where = f"{source}: benchmark {name!r}"
        stats = _obj(b, "stats", where)
        fullname = _text(b.get("fullname")) or name
        key = VariantKey(
            kernel=_text(b.get("group")) or name,
            arch="host",
            spec=fullname,
            config="pytest-benchmark",
            test=fullname,
        )
        metrics = []
        for stat, metric_name in _STATS.items():
            v = stats.get(stat)
            if v is None:
                continue
            ms = _ms(v)
            if ms is None:
                raise KperfError(f"{where}: stats.{stat} is {str(v)[:40]!r}, not a finite number of seconds")
            metrics.append(metric(metric_name, ms))
        mean, sd = _ms(stats.get("mean")), _ms(stats.get("stddev"))
        if mean is not None and sd is not None and mean > 0 and math.isfinite(sd / mean):
            metrics.append(metric("time.cv", sd / mean))
        data = stats.get("data") or []
        samples = [_ms(x) for x in data] if isinstance(data, list) else [None]
        if any(x is None for x in samples):
            raise KperfError(f"{where}: stats.data is not a list of finite numbers of seconds")
        ci = _ci_of_median(samples)
        if ci:
            metrics += [
                metric("time.ci_low", ci[0]),
                metric("time.ci_high", ci[1]),
            ]
        rounds = stats.get("rounds")
        tags = [f"rounds={rounds}"] if _number(rounds) else []
        results.append(VariantResult(key=key, metrics=metrics, samples=samples, tags=tags))
    return info, results


def _version() -> str:

    return __version__
