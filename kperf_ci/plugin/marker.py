"""The `@pytest.mark.kperf(...)` marker: parsed and validated once per test."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

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
    name = merged.get("name") or default_name(item)
    if not isinstance(name, str) or not name.strip():
        raise MarkerError(f"{item.nodeid}: kperf marker name must be a non-empty string, got {name!r}")
    tags = merged.get("tags", ())
    if isinstance(tags, str):
        tags = (tags,)
    if not all(isinstance(t, str) for t in tags):
        raise MarkerError(f"{item.nodeid}: kperf marker tags must be strings, got {tags!r}")
    metrics = merged.get("metrics")
    if metrics is not None:
        if isinstance(metrics, str):
            metrics = (metrics,)
        metrics = tuple(metrics)
    thresholds = merged.get("thresholds") or {}
    if not isinstance(thresholds, Mapping):
        raise MarkerError(
            f"{item.nodeid}: kperf marker thresholds must be a dict like {{'registers': 0.2}}, "
            f"got {type(thresholds).__name__}"
        )
    for key, value in thresholds.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
            raise MarkerError(
                f"{item.nodeid}: kperf threshold {key!r} must be a non-negative number "
                f"(0.1 = +10%), got {value!r}"
            )
    for key in ("bytes", "flops"):
        value = merged.get(key)
        if value is not None and not callable(value) and not isinstance(value, (int, float)):
            raise MarkerError(
                f"{item.nodeid}: kperf marker {key}= must be a number or a callable of the test's "
                f"parameters, got {type(value).__name__}"
            )
    return KperfMarker(
        name=name.strip(),
        tags=tuple(tags),
        metrics=metrics,
        thresholds=dict(thresholds),
        bytes=merged.get("bytes"),
        flops=merged.get("flops"),
    )
