"""What the commands read: the settings of the current directory, and stored runs, checked so
that a run no kperf-ci wrote is bad input (exit 2, one line) rather than a crash; the run pair
`kperf compare` judges (:func:`compare_pair`); the run pair and history a report compares (used by
`kperf report`, `kperf run` and `kperf github`)."""

from __future__ import annotations

import contextlib
import gc
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kperf_ci import config, store
from kperf_ci.error_text import error_text
from kperf_ci.errors import KperfError
from kperf_ci.hardware import MAX_SMS


def load_settings(root: Path | None = None, **cli: Any) -> Any:
    """Settings for ``root`` (the project a command works on; default the current directory);
    options given on the command line win."""
    return config.load_settings(root or Path.cwd(), {k: v for k, v in cli.items() if v is not None})


# --------------------------------------------------------------------------- reading runs

#: What decoding a stored run raises when a row holds something no kperf-ci wrote (JSON that does
#: not parse or has the wrong shape, a blob that is not zlib data).
_DECODE_ERRORS = (ValueError, TypeError, KeyError, AttributeError, RecursionError)


def _malformed(path: Any, what: str) -> KperfError:
    return KperfError(
        f"{path}: holds a malformed run ({what}); restore the file from git, or delete the run "
        "and record it again"
    )


@contextlib.contextmanager
def bulk_objects() -> Iterator[None]:
    """Around code that makes millions of objects that live on (a run's variants, metrics,
    changes): no cyclic garbage collection meanwhile, and what was made is frozen out of later
    collections. Each full collection walks every live object, so with a 100,000-variant run in
    memory the collector alone took a third of `kperf compare`'s CPU time. Commands only: they
    are short-lived processes that make no cycles worth collecting."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def read_run(path: str | os.PathLike[str], run_id: str | None = None, **kw: Any) -> Any:
    """``store.load_run``, for a command: a run whose rows do not decode, or whose fields have
    types no kperf-ci writes (SQLite keeps whatever a crafted file put in a column), is bad
    input (exit 2, one line naming the file), not a crash in whatever code reads it next."""
    import zlib

    try:
        with bulk_objects():
            record = store.load_run(path, run_id, **kw)
    except (*_DECODE_ERRORS, zlib.error, store.OperationalError) as e:  # a table dropped by hand
        raise _malformed(path, error_text(e, 120)) from None
    try:
        typed = store.rows_typed(path, record.info.run_id)
    except Exception:  # any doubt: every row is checked below
        typed = False
    problem = run_problem(record, rows_typed=typed)
    if problem:
        raise _malformed(path, problem)
    return record


def read_runs(path: str | os.PathLike[str]) -> list[Any]:
    """``store.list_runs`` with :func:`read_run`'s treatment of rows that do not decode."""
    try:
        infos = store.list_runs(path)
    except _DECODE_ERRORS as e:
        raise _malformed(path, error_text(e, 120)) from None
    for info in infos:
        problem = _info_problem(info)
        if problem:
            raise _malformed(path, problem)
    return infos


def _str(x: Any, optional: bool = False) -> bool:
    return isinstance(x, str) or (optional and x is None)


def _num(x: Any) -> bool:
    """A finite number: an Inf metric would judge every comparison with it (inf -> x is "better")."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _info_problem(info: Any) -> str | None:
    fp = info.fingerprint
    if not (_str(info.run_id) and _str(info.started_at) and _str(info.mode)):
        return f"run {info.run_id!r}: id, start time and mode must be text"
    for name in ("git_sha", "git_branch", "label"):
        if not _str(getattr(info, name), optional=True):
            return f"run {info.run_id!r}: {name} is not text"
    for name in ("gpu", "driver", "cuda", "torch"):
        if not _str(getattr(fp, name), optional=True):
            return f"run {info.run_id!r}: fingerprint.{name} is not text"
    for name in ("cpu", "triton", "python", "host_hash"):
        if not _str(getattr(fp, name)):
            return f"run {info.run_id!r}: fingerprint.{name} is not text"
    if not (fp.sm_count is None or (isinstance(fp.sm_count, int) and 0 < fp.sm_count <= MAX_SMS)):
        return f"run {info.run_id!r}: fingerprint.sm_count is not an SM count (1..{MAX_SMS})"
    if not isinstance(fp.extra, dict):
        return f"run {info.run_id!r}: fingerprint.extra is not an object"
    return None


def run_problem(record: Any, *, rows_typed: bool = False) -> str | None:
    """Why a loaded run cannot be a run kperf-ci wrote (a field of the wrong type), or None.

    ``rows_typed``: the database said (:func:`kperf_ci.store.rows_typed`) that every metric and
    sample row has the types kperf-ci writes, so those are not checked one by one here."""
    problem = _info_problem(record.info)
    if problem:
        return problem
    for r in record.results:
        k = r.key
        if not all(_str(x) for x in (k.kernel, k.arch, k.spec, k.config, k.test, k.source)):
            return f"a variant's kernel, arch, spec, config, test or source is not text ({k.kernel!r})"
        what = f"variant {k.kernel!r}"
        for m in () if rows_typed else r.metrics:
            if not (_str(m.name) and _str(m.unit) and _str(m.kind) and _str(m.better)):
                return f"{what}: metric {m.name!r} has a name, unit, kind or direction that is not text"
            if not _num(m.value):
                return f"{what}: metric {m.name!r} is {m.value!r}, not a finite number"
        if not rows_typed and not all(_num(x) for x in r.samples):
            return f"{what}: a timing sample is not a finite number"
        if not (isinstance(r.tags, list) and all(_str(t) for t in r.tags)):
            return f"{what}: tags are not a list of text"
        if not isinstance(r.thresholds, dict) or not all(
            v is None or _num(v) or (isinstance(v, list) and all(_str(x) for x in v))
            for v in r.thresholds.values()
        ):
            return f"{what}: thresholds are not an object of numbers (and a list of metric names)"
        if not (_str(r.sass_hash, optional=True) and _str(r.error, optional=True)):
            return f"{what}: sass hash or error is not text"
    return None


def exists(path: str | None) -> bool:
    return bool(path) and Path(str(path)).exists()


def load_pair(
    db: str,
    baseline: str | None,
    run_id: str | None,
    base_run: str | None,
    *,
    artifacts: bool | tuple[str, ...],
):
    """(current run, baseline run or None, the path the baseline came from or None).

    Without a baseline database, the run before the current one in ``db`` is the baseline.
    The baseline is never the current run itself (same id), even when both paths are one file.
    """
    current = read_run(db, run_id, artifacts=artifacts)
    src = baseline if exists(baseline) else None
    if baseline and src is None and base_run:
        raise KperfError(f"{baseline}: baseline does not exist")
    src = src or db
    if base_run:
        return current, read_run(src, base_run, artifacts=artifacts), src
    # an empty run (nothing measured) is never the implicit baseline
    empty = {rid for rid, status in store.run_statuses(src).items() if status == store.EMPTY}
    candidates = [r for r in read_runs(src) if r.run_id != current.info.run_id and r.run_id not in empty]
    if src == db:  # only earlier runs of the same file
        candidates = [r for r in candidates if r.started_at <= current.info.started_at]
    if not candidates:
        return current, None, None
    return current, read_run(src, candidates[-1].run_id, artifacts=artifacts), src


def compare_pair(settings: Any, run_id: str | None, base_run: str | None) -> tuple[Any, Any]:
    """(baseline run, current run) that `kperf compare` judges, refused (exit 2, one line) where
    the comparison would say nothing: no baseline, a missing one, a run compared with itself, an
    empty baseline run (every compare against it would pass)."""
    if not settings.baseline:
        raise KperfError("no baseline given; pass --baseline PATH or set [tool.kperf] baseline")
    if not Path(settings.baseline).exists():
        raise KperfError(
            f"{settings.baseline}: baseline does not exist; create it with "
            f"`kperf baseline update --db RUN.db --baseline {settings.baseline}`"
        )
    base = read_run(settings.baseline, base_run, baseline=True)  # bad rows: exit 2, not a crash
    cur = read_run(settings.db, run_id)
    if base.info.run_id == cur.info.run_id and store.same_database(settings.baseline, settings.db):
        raise KperfError(
            f"{settings.db}: --db and --baseline are the same file and both name run {cur.info.run_id}, "
            "which would be compared with itself; pass the baseline database as --baseline "
            "(or two different runs with --run/--base-run)"
        )
    if not base.results:
        raise KperfError(
            f"{settings.baseline}: baseline run {base.info.run_id} holds no variants, nothing to compare "
            "against; update it from a complete run with `kperf baseline update`"
        )
    return base, cur


class HistoryReader:
    """``history(variant_id, metric)`` for the report: the metric over the last ``limit`` runs of
    every database in ``paths`` (deduplicated by run id), oldest first, ending at the current run.

    One query per (database, metric) for all variants at once: a per-variant
    ``store.metric_history`` opens and checks the database on every call, which for a suite of
    500 variants costs far more than the rest of the report.
    """

    def __init__(self, paths: list[str], current, limit: int = 60):  # noqa: ANN001
        self.paths = list(dict.fromkeys(paths))
        self.current = current
        self.limit = limit
        self._by_id = {r.key.id: r for r in current.results}
        self._cache: dict[str, dict[str, dict[str, tuple]]] = {}

    def _load(self, metric: str) -> dict[str, dict[str, tuple]]:

        cur = self.current.info
        per_variant: dict[str, dict[str, tuple]] = {}
        for path in self.paths:
            runs = [r for r in read_runs(path) if r.started_at <= cur.started_at and r.run_id != cur.run_id][
                -self.limit :
            ]
            if not runs:
                continue
            infos = {r.run_id: r for r in runs}
            for run_id, variant_id, value in store.metric_values(path, infos, metric):
                per_variant.setdefault(variant_id, {}).setdefault(run_id, (infos[run_id], value))
        return per_variant

    def prefetch(self, metrics: list[str]) -> None:
        """Read these metrics now (before the report forks its page workers)."""
        for metric in metrics:
            if metric not in self._cache:
                self._cache[metric] = self._load(metric)

    def __call__(self, variant_id: str, metric: str) -> list[tuple]:
        if metric not in self._cache:
            self._cache[metric] = self._load(metric)
        points = sorted(self._cache[metric].get(variant_id, {}).values(), key=lambda iv: iv[0].started_at)
        points = points[-(self.limit - 1) :]
        r = self._by_id.get(variant_id)
        m = r.metric(metric) if r else None
        if m is not None:
            points.append((self.current.info, m.value))
        return points


def blob_reader(db: str, current, base_path: str | None, base):  # noqa: ANN001
    """blob(side, variant_id, name): the stored bytes of an artifact of either run (binary ones,
    such as the capture stage's timeline npz, do not survive load_run's text decoding)."""

    def blob(side: str, variant_id: str, name: str) -> bytes | None:
        if side == "current":
            return store.load_blob(db, current.info.run_id, variant_id, name)
        if base is None or base_path is None:
            return None
        return store.load_blob(base_path, base.info.run_id, variant_id, name)

    return blob
