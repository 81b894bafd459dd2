"""Issue 36's second reviewer walk (docs/reviewer-walk/second-walk-2026-11-27/NOTES.md) and
issue 33's walk (docs/walks/issue33-2026-11-27.md, items 2, 3, 5): what a fresh reviewer of the
A/B PR comment, HTML page and terminal misread, each fixed and held here."""

from __future__ import annotations

import json
from typing import Any

from kperf_ci.judge.group import launch_text
from kperf_ci.report import ab
from kperf_ci.report.ab_html import _plot
from kperf_ci.report.ab_view import kernels_of, shape_text
from tests.test_report_ab import document, launch, row
from tests.test_report_ab_walk36 import GPU_DOC, text_of


def gpu_doc() -> dict[str, Any]:
    return json.loads(GPU_DOC.read_text(encoding="utf-8"))


def test_a_worst_launch_writes_its_shapes_as_the_launch_lines_do():
    """Item 5: "a bf16[369x4231]" read as "a bf16 tensor"; the launch lines say "a=bf16[...]"."""
    doc = gpu_doc()
    (k,) = kernels_of(doc)
    assert shape_text(k["launches"][0]) == "a=bf16[369x4231]; grid 369x1x1"
    comment = ab.render_markdown(doc)
    assert "a=bf16\\[369x4231\\]; grid 369x1x1" in comment and "a bf16" not in comment
    svg = str(_plot(k, 1e-4, 0.005))
    assert "#1 a=bf16[369x4231]; grid 369x1x1" in svg and "a bf16" not in svg
    assert "a bf16" not in text_of(ab.render_html(doc))


def test_options_are_spaced_as_the_arguments_and_num_ctas_said_only_when_not_one():
    """Item 10: "num_warps=4,num_stages=3" beside "; grid 369x1x1"; num_ctas=1 dropped silently."""
    assert launch_text({"x": "fp32[4]"}, [4, 1, 1], "num_warps=4,num_stages=3,num_ctas=1") == (
        "x=fp32[4]; grid 4x1x1; num_warps=4, num_stages=3"
    )
    assert launch_text({"x": "fp32[4]"}, [4, 1, 1], "num_warps=4,num_stages=3,num_ctas=2").endswith(
        "num_warps=4, num_stages=3, num_ctas=2"
    )
    # a stored document's launch texts read the same
    comment = ab.render_markdown(gpu_doc())
    assert "num\\_warps=4, num\\_stages=3" in comment and "num\\_warps=4,num" not in comment
    assert "num_warps=4,num" not in ab.render_html(gpu_doc())
    doc = document([row("k", "t.py::a", "slower", 1.05, 0.01, launch=launch(0))])
    assert "num_warps=4, num_stages=3" in "\n".join(ab.terminal_lines(doc))


def test_the_headline_counts_the_tests_in_one_short_line():
    """Item 8: the 9 changed tests were only on a tile; "24 test(s) identical code, not timed"."""
    head = ab.headline(gpu_doc())
    assert head == "🔴 1 kernel slower than the base · tests: 9 changed, 24 identical (not timed)"
    static = json.loads(
        (GPU_DOC.parents[2] / "docs/reviewer-walk/static-softmax.ab.json").read_text(encoding="utf-8")
    )
    # the walk's static softmax: its occupancy drop regresses (judged for production sizes)
    assert ab.headline(static) == "🔴 1 kernel regressed (static) · tests: 2 changed, 4 identical (not timed)"
    first = ab.render_markdown(static).splitlines()[1]
    assert first == "## kperf ab: " + ab.headline(static)
    assert "tests identical (not timed)" in ab.render_html(static)


def test_skipped_tests_are_counted_not_lost():
    """Issue 33's walk, item 3: 14 tests selected, 12 accounted for; 2 had skipped themselves."""
    from kperf_ci.prcheck.document import ABReport
    from kperf_ci.prcheck.passes import skipped_count
    from kperf_ci.prcheck.pipeline import _echo_static

    out = "....ss\nkperf: run abc stored\n===== 4 passed, 2 skipped, 6 xfailed in 87.02s =====\n"
    assert skipped_count(out) == 2 and skipped_count("== 3 passed in 1.0s ==") == 0
    report = ABReport("main", "b" * 40, "a" * 40, skipped=2)
    assert report.to_dict()["counts"]["skipped"] == 2
    lines: list[str] = []
    _echo_static([], [], lines.append, 2)
    assert lines[0].endswith(", 0 new, 0 gone, 2 skipped (by the test)")
    doc = gpu_doc()
    doc["counts"]["skipped"] = 2
    assert ab.headline(doc).endswith("tests: 9 changed, 24 identical (not timed), 2 skipped")
    assert "2</b>tests skipped" in ab.render_html(doc)


def test_a_test_whose_launches_changed_reads_changed_everywhere():
    """Item 6: "changed" in the terminal and the JSON, "differs" in the comment and the page."""
    doc = gpu_doc()
    text, html = ab.render_markdown(doc), ab.render_html(doc)
    assert "differs" not in text and ">differs<" not in html and "tests differ" not in html
    assert "- **changed** test/transformers/test\\_geglu.py::test\\_correctness" in text
    assert '<span class="badge changed">changed</span>' in html and "9</b>tests changed" in html
    assert "1 launch in 1 test" in "\n".join(
        ab.terminal_lines(document([row("k", "t.py::a", "slower", 1.05, 0.01)]))
    )


def test_the_why_is_a_line_of_its_own_at_comment_width():
    """Item 1: the cause was the 8th column of the kernel table, behind a horizontal scroll at a
    PR comment's ~900 px; the kernel cell's path took the width it needed."""
    text = ab.render_markdown(gpu_doc())
    lines = text.splitlines()
    header = next(x for x in lines if x.startswith("| time |"))
    assert "cause" not in header
    top = next(x for x in lines if x.startswith("| 🔴 slower |"))
    assert "geglu.py" not in top and len(top) < 200, top
    why = lines.index("Why (the worst launch's cause):")
    assert lines[why + 1] == (
        "- **\\_geglu\\_tanh\\_forward\\_kernel** in src/liger\\_kernel/ops/geglu.py: num\\_warps 16 → 4; "
        "sm\\_90 SASS changed: registers 37 → 110, SASS instructions 375 → 1,252 · "
        # the largest change in time, where it is not the worst launch's (third walk, item 2)
        "largest in time: +6.88 µs (+18.47%) at a=bf16\\[4096x4096\\]; grid 4096x1x1"
    )


def test_the_change_is_labelled_paired_and_the_floor_is_said_on_the_same_estimator():
    """Item 3: +32.18% beside 6.05 µs → 7.97 µs (+31.8%); "below the floor: 32 ns" beside
    -1.87% of 1.28 µs (24 ns): the verdict's paired change said as what it is, its floor in ns
    from that change."""
    doc = gpu_doc()
    text, html = ab.render_markdown(doc), ab.render_html(doc)
    assert "| paired change [99% CI] |" in text and "paired change [99% CI]</th>" in html
    note = next(x for x in text.splitlines() if x.startswith("Times: "))
    assert "Paired change: the median head/base ratio of the pairs" in note and "…" not in note
    assert "below the floor: 23.9 ns (-1.87% of 1.28 µs) &lt; 100 ns" in text
    assert "below the floor: 23.9 ns (-1.87% of 1.28 µs) &lt; 100 ns" in html
    assert "32 ns" not in text


def test_the_worst_launch_says_its_ranking_rule():
    """Item 4: the worst launch is the largest relative change, not the most µs; nothing said so."""
    doc = gpu_doc()
    text, html = ab.render_markdown(doc), ab.render_html(doc)
    assert "| worst launch (largest %) |" in text and "<th>worst launch (largest %)</th>" in html
    assert "a kernel's worst launch is its largest relative change" in text


def test_one_arrow_and_one_name_per_section():
    """Item 6: "→" for times, "->" for options in the same row; the per-test fold was "Timed A/B
    per test" on the page and nothing like it in the comment; "Static diff per test (cause)"."""
    doc = gpu_doc()
    text, html = ab.render_markdown(doc), ab.render_html(doc)
    assert "-&gt;" not in text and "-&gt;" not in html and " -> " not in "\n".join(ab.terminal_lines(doc))
    assert "num\\_warps 16 → 4" in text
    assert (
        "<summary>Each timed launch (9)</summary>" in text and "<b>Each timed launch, by test</b> (9)" in html
    )
    assert "<summary>Static diff per test</summary>" in text and "<h2>Static diff per test</h2>" in html


def test_the_comment_names_the_kernels_seen_identical():
    """Issue 33's walk, item 2: a kernel only commented on was never named; "9 tests identical"."""
    text = ab.render_markdown(gpu_doc())
    assert "<summary>Identical kernels, not timed (" in text
    assert "- \\_softmax\\_single\\_block\\_forward\\_kernel in src/liger\\_kernel/ops/softmax.py (" in text
    assert "\\_geglu\\_tanh\\_forward\\_kernel in" not in text.split("Identical kernels")[1]


def test_a_document_without_revisions_says_so_and_todays_carry_them():
    """Item 7: the committed GPU document predates base/head in the document; it is said, never
    invented, and a document `kperf ab --json` writes today carries both revisions."""
    from kperf_ci.prcheck.document import DOC_VERSION, ABReport

    assert "Base (revisions not recorded in this document) vs head" in ab.render_markdown(gpu_doc())
    d = ABReport("origin/main", "b" * 40, "a" * 40).to_dict()
    assert d["version"] == DOC_VERSION and d["base"] == {"rev": "origin/main", "sha": "b" * 40}
    assert d["head"] == {"sha": "a" * 40}
    assert "Base `bbbbbbbbbb` (origin/main) vs head `aaaaaaaaaa`" in ab.render_markdown(d)


def test_tests_changed_alike_say_their_change_once_and_the_identical_kernel_is_named():
    """Issue 34's walk, items 1 and 3: attorch's cut config list printed one line 12 times (once
    per parametrization), and the terminal never named the kernel the pull request only
    commented (the comment and the page do)."""
    from kperf_ci.judge.launch_diff import LaunchChange, TestDiff
    from kperf_ci.prcheck.pipeline import _echo_static

    cut = "autotune configs: num_warps=4 dropped, 2 unchanged"
    fwd = "a/softmax.py::softmax_forward_kernel"
    bwd = "a/softmax.py::softmax_backward_kernel"

    def test(i: int, change: str = cut) -> TestDiff:
        return TestDiff(
            f"t.py::test_s[{i}]",
            "changed",
            [LaunchChange("softmax_forward_kernel", fwd, "changed", [change]),
             LaunchChange("softmax_backward_kernel", bwd, "identical")],
        )  # fmt: skip

    lines: list[str] = []
    bwd_only = [LaunchChange("softmax_backward_kernel", bwd, "identical")]
    alike = TestDiff("t.py::test_same", "identical", bwd_only)
    _echo_static([test(0), alike, test(1), test(2), test(3, "num_warps 4 -> 1")], [], lines.append)
    # an identical test, with nothing to say, keeps its place; it joins no group
    assert lines[2:4] == ["  changed   t.py::test_s[0]", "  changed   t.py::test_s[1]"]
    assert "  identical t.py::test_same" in lines and lines.index("  identical t.py::test_same") > 4
    same = "softmax_backward_kernel in a/softmax.py (5 tests)"
    assert lines[1] == f"static: identical kernels, not timed: {same}"
    text = "\n".join(lines)
    assert text.count(cut) == 1 and "in each of these 3 tests:" in text
    listed = [x.split()[-1] for x in lines if x.startswith("  changed ")]
    assert listed == [f"t.py::test_s[{i}]" for i in range(4)]
    assert lines[-2:] == ["  changed   t.py::test_s[3]", "      softmax_forward_kernel: num_warps 4 -> 1"]
