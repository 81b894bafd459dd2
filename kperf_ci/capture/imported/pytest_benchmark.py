"""pytest-benchmark's statistics as kperf variants: one converter for its ``--benchmark-json``
file (:func:`from_json`, `kperf import`) and for its live ``benchmark`` fixture in a marked test
(:func:`from_fixture`, the plugin), so a benchmark gives the same metrics either way.

Each benchmark becomes a variant (kernel = its group, else its name with parameters; spec = its
full node id; arch = "host"); its statistics become ``time.*`` metrics in ms and its raw ``data``
(present with ``--benchmark-save-data``, always in the fixture) the timing samples.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from kperf_ci.capture.imported import BadInput
from kperf_ci.fingerprint import host_hash
from kperf_ci.metrics import metric
from kperf_ci.model import Fingerprint, Metric, RunInfo, VariantKey, VariantResult
from kperf_ci.sample_stats import median_ci

# pytest-benchmark stat -> kperf metric
_STATS = {
    "median": "time.median",
    "mean": "time.mean",
    "min": "time.min",
    "max": "time.max",
    "iqr": "time.iqr",
    "stddev": "time.stddev",
}
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_LONE = re.compile("[\ud800-\udfff]")


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


def _obj(parent: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    """An optional JSON object field: {} when absent or null, one-line error when not an object."""
    value = parent.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadInput(f"{where}: '{key}' is {_kind(value)}, not an object; is this a --benchmark-json file?")
    return value


def _visible(value: Any) -> Any:
    """Strings with lone surrogates spelled out ("\\udc80"), in lists too (dicts are done by the hook)."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8") if _LONE.search(value) else value
    if isinstance(value, list):
        return [_visible(v) for v in value]
    return value


def loads(text: str) -> Any:
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


def stats_metrics(stats: Mapping[str, Any], where: str) -> tuple[list[Metric], list[float]]:
    """One benchmark's statistics (pytest-benchmark's ``Stats.as_dict()``, as its JSON writes
    them: seconds) as ``time.*`` metrics in ms, and its raw ``data`` as samples in ms. A value
    that is not a finite number is a :class:`BadInput` naming ``where``."""
    metrics = []
    for stat, metric_name in _STATS.items():
        v = stats.get(stat)
        if v is None:
            continue
        ms = _ms(v)
        if ms is None:
            raise BadInput(f"{where}: stats.{stat} is {str(v)[:40]!r}, not a finite number of seconds")
        metrics.append(metric(metric_name, ms))
    mean, sd = _ms(stats.get("mean")), _ms(stats.get("stddev"))
    if mean is not None and sd is not None and mean > 0 and math.isfinite(sd / mean):
        metrics.append(metric("time.cv", sd / mean))
    data = stats.get("data") or []
    samples = [_ms(x) for x in data] if isinstance(data, list) else [None]
    if any(x is None for x in samples):
        raise BadInput(f"{where}: stats.data is not a list of finite numbers of seconds")
    if len(samples) >= 6:  # fewer: median_ci is only [min, max], no interval worth storing
        low, high = median_ci(samples, confidence=0.99)  # the timing engine's own interval
        metrics += [metric("time.ci_low", low), metric("time.ci_high", high)]
    return metrics, samples  # type: ignore[return-value]


def from_fixture(
    fixture: Any, key: VariantKey, *, tags: list[str], thresholds: dict[str, float]
) -> list[VariantResult]:
    """A marked test's live ``benchmark`` fixture, converted as its JSON would be: no result when
    it holds no samples (the test never called it)."""
    stats = getattr(getattr(fixture, "stats", None), "stats", None)
    if stats is None or not list(getattr(stats, "data", []) or []):
        return []
    doc = stats.as_dict() if hasattr(stats, "as_dict") else {}
    doc = {**doc, "data": list(stats.data)}
    metrics, samples = stats_metrics(doc, f"benchmark fixture of {key.test}")
    return [VariantResult(key=key, metrics=metrics, samples=samples, tags=tags, thresholds=thresholds)]


def from_json(
    doc: Any, *, label: str | None = None, source: str = "", consume: bool = False, kperf_version: str = ""
) -> tuple[RunInfo, list[VariantResult]]:
    """Convert a parsed pytest-benchmark JSON document into (RunInfo, results).

    The document comes from a file anyone may hand over: a field of the wrong type or a
    statistic that is not a finite number is a one-line BadInput naming the file and
    the benchmark, never a crash.

    ``consume``: drop each benchmark from ``doc`` once converted, so that a file of 100,000
    benchmarks is not held twice (as parsed JSON and as results) at the peak."""
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        raise BadInput(f"{source}: no 'benchmarks' list; is this a pytest-benchmark --benchmark-json file?")
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
        kperf_version=kperf_version,
        label=label,
    )
    results = []
    benchmarks = doc["benchmarks"]
    for i, b in enumerate(benchmarks):
        if consume:
            benchmarks[i] = None
        if not isinstance(b, dict):
            raise BadInput(f"{source}: benchmarks[{i}] is {_kind(b)}, not an object")
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
        metrics, samples = stats_metrics(stats, where)
        rounds = stats.get("rounds")
        tags = [f"rounds={rounds}"] if _number(rounds) else []
        results.append(VariantResult(key=key, metrics=metrics, samples=samples, tags=tags))
    return info, results
