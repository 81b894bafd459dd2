"""The static diff per test folds tests whose causes are identical, as `kperf ab`'s terminal does
(docs/walks/issue38-walk-2026-12-02.md, finding 4): a pull request that dropped one autotune
config of one kernel changed 48 tests, and the comment said the same cause 48 times, one bullet
under each test id."""

from __future__ import annotations

from typing import Any

from kperf_ci.judge.launch_diff import LaunchChange
from kperf_ci.judge.launch_diff import TestDiff as ABTestDiff
from kperf_ci.report import ab
from kperf_ci.report.ab_static_view import alike_groups
from tests.test_report_ab import check_folds, document

AUTOTUNE = "autotune configs: num_warps=32 dropped, 5 unchanged"
WARPS = "num_warps 4 -> 1"
SHARED = "softmax\\_forward\\_kernel: autotune configs: num\\_warps=32 dropped, 5 unchanged"
PAIR = "layernorm: num\\_warps 4 → 1"
LONE = "vector\\_add: grid 132 → 133"


def _test(test: str, kernel: str, change: str) -> dict[str, Any]:
    lc = LaunchChange(kernel, f"kernels/{kernel}.py::{kernel}", "changed", [change])
    return ABTestDiff(test, "changed", [lc]).to_dict()


def _softmax_id(i: int, functions: bool = False) -> str:
    """One function's 30 parametrizations (attorch's), or with ``functions`` 30 functions."""
    name = f"test_softmax_{i}" if functions else "test_softmax_layers"
    return f"tests/test_softmax_layers.py::{name}[False-input_dtype0-LogSoftmax-shape{i}]"


def static_document(functions: bool = False) -> dict[str, Any]:
    """30 tests with one cause, 2 with another, 1 alone: a static-only document (no GPU)."""
    doc = {**document([]), "device": None, "timed": [], "kernels": [], "untimed": "--no-gpu"}
    doc["counts"] = {"changed": 33, "identical": 1}
    doc["tests"] = (
        [_test(_softmax_id(i, functions), "softmax_forward_kernel", AUTOTUNE) for i in range(30)]
        + [_test(f"tests/test_layernorm.py::test_layernorm[{i}]", "layernorm", WARPS) for i in range(2)]
        + [_test("tests/test_add.py::test_add", "vector_add", "grid 132 -> 133")]
        + [{"test": "tests/test_same.py::test_same", "status": "identical", "changes": [], "launches": []}]
    )
    return doc


def _cut_well(text: str, limit: int, notice: str) -> None:
    """Under the limit, every fold closed, and one truncation notice, the last line."""
    assert len(text) <= limit
    check_folds(text)
    lines = text.rstrip("\n").splitlines()
    assert lines[-1] == f"… truncated: {notice} in the full report"
    assert not any("truncated" in line for line in lines[:-1])


def _fold(text: str) -> str:
    return text.split("<summary>Static diff per test</summary>", 1)[1].split("</details>", 1)[0]


def test_each_shared_cause_is_said_once_per_group_and_every_test_is_named():
    for text in (ab.render_markdown(static_document()), ab.render_summary(static_document())):
        fold = _fold(text)
        lines = fold.splitlines()
        assert lines.count(f"  - {SHARED}") == 1
        assert lines.count(f"  - {PAIR}") == 1
        assert lines.count(f"  - {LONE}") == 1
        # the group's head: its status, its count and its test function with the number of its
        # parametrizations (one function's 30 ids were most of the comment)
        (head,) = [x for x in lines if "in each of these 30 tests" in x]
        assert head == (
            "- **changed** in each of these 30 tests: "
            "tests/test\\_softmax\\_layers.py::test\\_softmax\\_layers (30 parametrizations)"
        )
        assert lines[lines.index(head) + 1] == f"  - {SHARED}"
        (pair,) = [x for x in lines if "in each of these 2 tests" in x]
        assert pair.endswith("tests/test\\_layernorm.py::test\\_layernorm (2 parametrizations)")
        assert lines[lines.index(pair) + 1] == f"  - {PAIR}"
        assert "test\\_same" not in fold  # an identical test is no changed test


def test_a_test_alone_keeps_its_own_form():
    lines = _fold(ab.render_markdown(static_document())).splitlines()
    i = lines.index("- **changed** tests/test\\_add.py::test\\_add")
    assert lines[i + 1] == f"  - {LONE}"
    # a document of one changed test reads as it always did
    doc = static_document()
    doc["tests"] = doc["tests"][-2:]
    fold = _fold(ab.render_markdown(doc))
    assert fold == f"\n\n- **changed** tests/test\\_add.py::test\\_add\n  - {LONE}\n"


def test_tests_with_different_causes_or_statuses_stay_apart():
    doc = static_document()
    doc["tests"][1]["status"] = "unknown"  # same cause, another status: its own entry
    lines = _fold(ab.render_markdown(doc)).splitlines()
    assert any("in each of these 29 tests" in x for x in lines)
    assert f"- **{ab.md(ab.test_status_word('unknown'))}** {ab.md(_softmax_id(1))}" in lines
    assert lines.count(f"  - {SHARED}") == 2


def test_tests_of_several_functions_are_each_named_in_their_order():
    lines = _fold(ab.render_markdown(static_document(functions=True))).splitlines()
    (head,) = [x for x in lines if "in each of these 30 tests" in x]
    names = [f"test\\_softmax\\_{i}\\[False-input\\_dtype0-LogSoftmax-shape{i}\\]" for i in range(30)]
    assert all(n in head for n in names) and "parametrizations" not in head
    assert [head.index(n) for n in names] == sorted(head.index(n) for n in names)


def test_a_group_too_long_for_the_budget_names_its_first_tests_and_counts_the_rest():
    """Every test of 30 functions named takes ~3,000 characters; a small comment names three and
    says the count, then the cause once: the budget still holds and every fold is closed."""
    full = ab.render_markdown(static_document(functions=True))
    limit = len(full) - 1500
    text = ab.render_markdown(static_document(functions=True), max_chars=limit)
    _cut_well(text, limit, "27 more test names")  # the page names them all
    lines = _fold(text).splitlines()
    (head,) = [x for x in lines if "in each of these 30 tests" in x]
    assert head.endswith("shape2\\] +27 more") and "shape3\\]" not in head
    assert lines[lines.index(head) + 1] == f"  - {SHARED}"
    # far too small for the fold: it is left out and its tests counted in the notice
    tiny = ab.render_markdown(static_document(functions=True), max_chars=900)
    _cut_well(tiny, 900, "33 more changed tests")


def test_the_grouping_keeps_the_first_ones_place_and_leaves_keyless_items_alone():
    groups = alike_groups(["a1", "b1", "x", "a2", "y", "b2"], lambda s: s[0] if s[1:] else None)
    assert groups == [["a1", "a2"], ["b1", "b2"], ["x"], ["y"]]


def test_tests_that_stopped_early_are_said_on_the_page_as_in_the_comment():
    """Found by this stop's second walk: the markdown's warning was missing from index.html."""
    from kperf_ci.judge.launch_diff import STOPPED_EARLY

    doc = static_document()
    doc["tests"][0]["ended_early"] = True
    doc["tests"][0]["changes"].append(f"{STOPPED_EARLY}results not checked: grid <b>too large</b>")
    page = ab.render_html(doc)
    assert '<p class="note warn" id="stopped-early">⚠️ 1 of 34 tests stopped before their end' in page
    assert "&lt;b&gt;too large&lt;/b&gt;" in page and "<b>too large" not in page  # inert
    assert "1 of 34 tests stopped before their end" in ab.render_markdown(doc)
    assert 'id="stopped-early"' not in ab.render_html(static_document())
