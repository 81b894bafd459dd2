"""The `@pytest.mark.kperf(...)` marker: parsed and validated once per test."""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kperf_ci.capture.static.repo import git_toplevel

MARKER_HELP = (
    "kperf(name=None, tags=(), metrics=None, thresholds=None, bytes=None, flops=None): "
    "benchmark the Triton kernels this test launches (see kperf-ci README)"
)

_ALLOWED = ("name", "tags", "metrics", "thresholds", "bytes", "flops")


class MarkerError(ValueError):
    """A kperf marker with a bad argument; the message names the test, the key and the fix."""


@dataclass(frozen=True)
class KperfMarker:
    name: str
    tags: tuple[str, ...] = ()
    metrics: tuple[str, ...] | None = None  # metrics that gate this kernel; None = all
    thresholds: Mapping[str, float] = field(default_factory=dict)
    bytes: float | Callable[..., float] | None = None
    flops: float | Callable[..., float] | None = None
    # name= was given: variants carry it; else launches are named by their Triton kernel
    named: bool = True

    def resolved(self, params: Mapping[str, Any], key: str) -> float | None:
        """`bytes`/`flops` may be numbers or callables of the test's parameters."""
        value = getattr(self, key)
        if callable(value):
            import inspect

            wanted = inspect.signature(value).parameters
            return float(value(**{k: params[k] for k in wanted if k in params}))
        return None if value is None else float(value)

    def threshold_dict(self) -> dict[str, Any]:
        """What the store keeps with each variant so compare can apply per-kernel overrides."""
        out: dict[str, Any] = dict(self.thresholds)
        if self.metrics is not None:
            out["metrics"] = list(self.metrics)
        return out


def default_name(item: pytest.Item) -> str:
    fn = getattr(item, "originalname", None) or item.name
    return fn[len("test_") :] if fn.startswith("test_") else fn


def parse_marker(item: pytest.Item) -> KperfMarker | None:
    """Merge all kperf markers on the item (closest wins) and validate them."""
    marks = list(item.iter_markers("kperf"))
    if not marks:
        return None
    merged: dict[str, Any] = {}
    for mark in reversed(marks):  # outermost (module/class) first, the function's own last
        if mark.args:
            if len(mark.args) == 1 and isinstance(mark.args[0], str):
                merged["name"] = mark.args[0]
            else:
                raise MarkerError(
                    f"{item.nodeid}: kperf marker takes keyword arguments only "
                    f"(got positional {mark.args!r}); write @pytest.mark.kperf(name=...)"
                )
        merged.update(mark.kwargs)
    unknown = sorted(set(merged) - set(_ALLOWED))
    if unknown:
        raise MarkerError(
            f"{item.nodeid}: unknown kperf marker argument(s) {', '.join(unknown)}; "
            f"allowed: {', '.join(_ALLOWED)}"
        )
    where = f"{item.nodeid}: kperf marker"
    name = merged.get("name") or default_name(item)
    if not isinstance(name, str) or not name.strip():
        raise MarkerError(f"{where} name= must be a non-empty string, got {name!r}")
    tags = _strings(merged.get("tags", ()), f"{where} tags=", 'tags=["memory-bound"]')
    metrics = merged.get("metrics")
    if metrics is not None:
        metrics = _strings(metrics, f"{where} metrics=", 'metrics=["registers", "time"]')
    thresholds = merged.get("thresholds") or {}
    if not isinstance(thresholds, Mapping):
        raise MarkerError(
            f"{where} thresholds= must be a dict like {{'registers': 0.2}}, got {type(thresholds).__name__}"
        )
    for key, value in thresholds.items():
        if not isinstance(key, str) or not key:
            raise MarkerError(f"{where} thresholds= keys must be metric names, got {key!r}")
        # the same rule as [tool.kperf] thresholds: a NaN would silently switch the gate off
        if not _finite_number(value) or value < 0:
            raise MarkerError(
                f"{where} threshold {key!r} must be a finite number >= 0 (0.1 = +10%), got {value!r}"
            )
    for key in ("bytes", "flops"):
        value = merged.get(key)
        if value is None or callable(value):
            continue
        if not _finite_number(value) or value < 0:
            raise MarkerError(
                f"{where} {key}= must be a finite number >= 0 or a callable of the test's "
                f"parameters, got {value!r}"
            )
    return KperfMarker(
        named=bool(merged.get("name")),
        name=name.strip(),
        tags=tags,
        metrics=metrics,
        thresholds=dict(thresholds),
        bytes=merged.get("bytes"),
        flops=merged.get("flops"),
    )


def _finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _strings(value: Any, what: str, example: str) -> tuple[str, ...]:
    """A string or a list/tuple of non-empty strings, as a tuple; MarkerError otherwise."""
    if isinstance(value, str):
        value = (value,)
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
        raise MarkerError(f"{what} must be a string or a list of strings such as {example}, got {value!r}")
    return tuple(value)


def mark_matches(item: pytest.Item, mark: str | list[str] | tuple[str, ...] | None) -> bool:
    """Whether the ``mark`` setting (``--kperf-all`` / ``[tool.kperf] mark``) marks this test:
    "all", or a glob matching its node id ("tests/test_x.py::test_y[a-b]") or its file path
    relative to the rootdir ("tests/ops/test_x.py"). Parameter ids hold "[" and "]", which
    fnmatch reads as a character class, so a glob is also tried against the id with them escaped."""
    if not mark:
        return False
    if mark == "all":
        return True
    nodeid = item.nodeid
    path = nodeid.split("::", 1)[0]
    for pattern in mark:
        if fnmatch.fnmatchcase(nodeid, pattern) or fnmatch.fnmatchcase(path, pattern):
            return True
        if pattern == nodeid:
            return True
    return False


def marker_for(item: pytest.Item, mark: str | list[str] | tuple[str, ...] | None) -> KperfMarker | None:
    """The test's merged kperf marker; a default one (as ``@pytest.mark.kperf``) when only the
    ``mark`` setting selects it; None when it is not marked."""
    marker = parse_marker(item)
    if marker is None and mark_matches(item, mark):
        marker = KperfMarker(name=default_name(item), named=False)
    return marker


def test_id(item: pytest.Item) -> str:
    """The id kperf stores for a test: its node id with the file path relative to the git
    repository that holds it. pytest's node ids are relative to its rootdir, which in a repository
    without a pytest config is the arguments' common ancestor: ``tests/test_x.py::t`` in one
    session, ``<parent folders>/tests/test_x.py::t`` in the next. Outside a repository, the node id."""
    root = git_toplevel(str(Path(item.path).resolve().parent))
    if root is None:
        return item.nodeid
    try:
        rel = Path(item.path).resolve().relative_to(root).as_posix()
    except ValueError:
        return item.nodeid
    _, sep, rest = item.nodeid.partition("::")
    return rel + sep + rest if sep else item.nodeid
