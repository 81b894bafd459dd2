"""The `kperf` fixture: how a test hands kernels over to be measured."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import pytest

    from kperf_ci.plugin.marker import KperfMarker
    from kperf_ci.plugin.session import KperfSession

T = TypeVar("T")


class KperfFixture:
    """Handed to tests as `kperf`.

    `kperf.bench(fn, *args, **kwargs)` calls `fn(*args, **kwargs)` and returns its result, so a
    test keeps its own correctness checks. What happens around the call depends on the mode:

    - "off" (plugin disabled): nothing; the call is a plain call.
    - "static": every Triton launch in the test is recorded (also outside `bench`) and compiled
      ahead of time for each target arch at the end of the session.
    - "gpu": the launches are captured, the callable is timed with CUDA events (adaptive
      repetitions, L2 flushed between them), and one extra launch runs instrumented to get
      per-region times. A marked test that never calls `bench` has its launches replayed and
      measured one by one instead (kperf_ci.capture.launches.replay).
    """

    def __init__(
        self,
        session: KperfSession | None,
        item: pytest.Item | None,
        marker: KperfMarker | None,
    ) -> None:
        self._session = session
        self._item = item
        self._marker = marker
        self._bench_calls = 0

    @property
    def mode(self) -> str:
        if self._session is None or self._marker is None:
            return "off"
        return self._session.mode

    @property
    def enabled(self) -> bool:
        return self.mode != "off"

    def bench(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if self.mode == "off":
            return fn(*args, **kwargs)
        return self._run({"fn": fn}, args, kwargs)["fn"]

    def bench_interleaved(
        self, fns: Mapping[str, Callable[..., Any]], *args: Any, **kwargs: Any
    ) -> dict[str, Any]:
        """Measure several implementations on the same arguments, e.g. `{"old": f, "new": g}`.

        In GPU mode they are timed interleaved (A, B, ... then ..., B, A), so clock and thermal
        drift affect all alike; each becomes a variant named `<marker name>[<key>]`. Returns
        each callable's result, by key.
        """
        if not fns:
            raise ValueError("kperf.bench_interleaved needs at least one callable")
        if self.mode == "off":
            return {name: fn(*args, **kwargs) for name, fn in fns.items()}
        return self._run(dict(fns), args, kwargs)

    def _run(self, fns: dict[str, Callable[..., Any]], args: tuple, kwargs: dict) -> dict[str, Any]:
        self._bench_calls += 1
        assert self._session is not None and self._item is not None and self._marker is not None
        return self._session.bench(self._item, self._marker, fns, args, kwargs, call_index=self._bench_calls)
