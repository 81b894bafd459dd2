"""traces.records: the Timeline table and its grouping helpers."""

from __future__ import annotations

import numpy as np
import pytest

from kperf_ci.traces.records import Timeline, group_min, group_slices


def test_group_helpers():
    keys = np.array([3, 1, 3, 2, 1])
    assert group_min(keys, np.array([5.0, 2.0, 1.0, 7.0, 4.0])).tolist() == [1.0, 2.0, 1.0, 7.0, 2.0]
    uniq, groups = group_slices(keys)
    assert uniq.tolist() == [1, 2, 3]
    assert {int(k): idx.tolist() for k, idx in groups} == {1: [1, 4], 2: [3], 3: [0, 2]}


def test_cta_spans_prefer_the_kernel_region():
    tl = Timeline.from_records(
        [
            (0, 0, 4, "kernel", 10.0, 110.0),
            (0, 0, 4, "loop0", 5.0, 120.0),  # outside the kernel region: not the span
            (1, -1, 5, "body", 50.0, 80.0),  # a CTA without a kernel region: all its records
        ]
    )
    sp = tl.cta_spans()
    assert sp.cta.tolist() == [0, 1] and sp.sm.tolist() == [4, 5]
    assert sp.start_ns.tolist() == [10.0, 50.0] and sp.end_ns.tolist() == [110.0, 80.0]


def test_validation_and_views():
    with pytest.raises(ValueError, match="ends before it starts"):
        Timeline([0], [0], [0], ["kernel"], [5.0], [1.0])
    tl = Timeline.from_records([{"cta": 0, "sm": 1, "region": "kernel", "start_ns": 100.0, "end_ns": 300.0}])
    assert tl.warp.tolist() == [-1] and tl.span_ns == 200.0 and tl.sm_count() == 2
    assert tl.shifted().start_ns.tolist() == [0.0] and tl.to_records()[0]["end_ns"] == 300.0
