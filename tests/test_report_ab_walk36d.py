"""Issue 36's fourth reviewer walk (docs/reviewer-walk/fourth-walk-2026-12-01/NOTES.md): what it
found, each fixed item held by a test here (item 1, unknown tests that stopped early, is in
tests/test_ab_ended_early.py; item 4's wording in tests/test_static_verdict.py)."""

from __future__ import annotations

from kperf_ci.judge.group import static_groups
from kperf_ci.judge.launch_diff import TestDiff, unknown_text
from kperf_ci.report import ab
from kperf_ci.report.ab_static_view import static_rows
from kperf_ci.units import clip


def _reg(reason: str, severity: float | None, warps: int) -> dict:
    r = {
        "kernel": "ln (_layer_norm_fwd_1pass_kernel)",
        "arch": "sm_90",
        "test": f"t.py::t[{warps}-{reason[-8:]}]",
        "reason": reason,
        "site": "ln.py::_layer_norm_fwd_1pass_kernel",
        "args": {"X": "fp16[16384x2048]", "BLOCK_N": 2048, "W": warps},
        "arg_order": ["X", "BLOCK_N", "W"],
        "grid": [16384, 1, 1],
        "config": "num_warps=4,num_stages=3,num_ctas=1",
    }
    if severity is not None:
        r["severity"] = severity
    return r


def test_the_worst_static_launch_is_the_most_severe_not_the_first_listed():
    """Item 2: the headline quoted "100% -> 75%" (the first launch) where six launches went to
    62.5%."""
    regs = [
        _reg("theoretical occupancy 100% -> 75% (registers 31 -> 37)", 0.25, 1),
        _reg("theoretical occupancy 100% -> 62.5% (registers 32 -> 48)", 0.375, 2),
        _reg("theoretical occupancy 75% -> 62.5% (registers 34 -> 46)", 1 / 6, 3),
    ]
    (g,) = static_groups(regs)
    assert [x["reason"] for x in g["launches"]][0].endswith("62.5% (registers 32 -> 48)")
    doc = {"tests": [], "timed": [], "static_regressions": regs, "static_kernels": [g]}
    (row,) = static_rows(doc)
    assert "100% -> 62.5% (registers 32 -> 48)" in row["cause"], row["cause"]
    # a document written before severities keeps its order (the first listed)
    (old,) = static_groups([{k: v for k, v in r.items() if k != "severity"} for r in regs])
    assert old["launches"][0]["reason"].endswith("75% (registers 31 -> 37)")


def test_a_cut_never_splits_a_token_or_a_change():
    """Item 6: "registers 16 …" lost where registers went; "BLOCK_N=204…" cut a number in half."""
    cause = (
        "num_warps 4 -> 1; sm_90 theoretical occupancy 100% -> 50% (num_warps 4 -> 1: at most 32 "
        "blocks per SM); sm_90 SASS changed: registers 16 -> 33, SASS instructions 94 -> 273"
    )
    cut = clip(cause, 150)
    assert len(cut) <= 150 and cut.endswith("registers 16 -> 33 …"), cut
    args = "X=fp16[16384x2048], W=fp16[2048], BLOCK_N=2048, NORM_BEFORE_GATE=True"
    assert clip(args, 40) == "X=fp16[16384x2048], W=fp16[2048] …"
    assert clip(args, 200) == args
    # the comment's fold gives a timed launch's whole cause (twice a table cell's room)
    x = {"verdict": "slower", "ratio": 1.3, "ci_low": 1.29, "ci_high": 1.31, "base_ms": 0.0013,
         "head_ms": 0.00176, "changes": [cause], "launch": "a=fp32[16x256]; grid 16x1x1",
         "tests": ["t.py::a"]}  # fmt: skip
    assert "SASS instructions 94 -&gt; 273; launch:" in ab._launch_line(x)


def test_unknown_tests_are_counted_by_why_they_are_unknown():
    """Item 1: tests that stopped early under the interpreter read "compiled on neither side"."""
    early = TestDiff("t.py::a", "unknown", [], "the test stopped before its end: grid too large")
    other = TestDiff("t.py::b", "unknown", [])
    assert unknown_text([early, early]) == "all 2 stopped early in the static pass: later launches not seen"
    assert unknown_text([early, other]) == (
        "1 stopped early in the static pass: later launches not seen; "
        "1 with a launch compiled on neither side"
    )
    # the document's test rows carry it, so a re-rendered comment says the same
    assert unknown_text([early.to_dict(), other.to_dict()]) == unknown_text([early, other])


def test_a_pass_killed_running_alone_is_told_to_run_fewer_tests_not_to_run_alone(tmp_path):
    """Item 3: on 2 cores the passes ran one after the other, and a killed one was told "try
    kperf ab --passes sequential"."""
    import pytest

    from kperf_ci.prcheck.passes import PassFailed, _static_side

    for alone, says in (
        (True, "running alone: narrow the tests it runs (-k EXPR"),
        (False, "--passes sequential"),
    ):
        with pytest.raises(PassFailed) as e:
            _static_side("head", tmp_path, -9, "", tmp_path, tmp_path, [], peak_rss_mb=20861.0, alone=alone)
        assert "killed (SIGKILL; out of memory?) at a peak of 20,861 MB" in str(e.value)
        assert says in str(e.value), str(e.value)
        assert ("--passes sequential" in str(e.value)) is not alone


def test_a_long_signature_keeps_its_grid_in_the_launch_and_the_worst_launch_cell():
    """Item 7: the static worst-launch cell had no grid although its caption promises one; the
    launch text was cut inside the arguments, before "; grid"."""
    from kperf_ci.judge.group import LAUNCH_TEXT_MAX, launch_text
    from kperf_ci.report.ab_view import shape_text

    args = {f"ARG_{i}": f"fp16[16384x{i + 1}]" for i in range(20)}
    text = launch_text(args, [16384, 1, 1], "num_warps=4,num_stages=3,num_ctas=1")
    assert len(text) <= LAUNCH_TEXT_MAX and text.endswith("…; grid 16384x1x1; num_warps=4, num_stages=3")
    assert shape_text({"launch": text}).endswith("; grid 16384x1x1")


def test_a_pass_that_stored_nothing_names_the_first_error_pytest_printed(tmp_path):
    """Item 8: a missing module read only "static pass in the base tree stored no run (pytest
    exit 2)"; the ImportError had scrolled out of the tail."""
    import pytest

    from kperf_ci.prcheck.passes import PassFailed, _static_side

    out = (
        "==================================== ERRORS ====================================\n"
        "E   ModuleNotFoundError: No module named 'einops'\n"
        "!!!!!!!!!!!!!!!!!!!! Interrupted: 1 error during collection !!!!!!!!!!!!!!!!!!!!\n"
        "1 error in 6.48s\n"
    )
    with pytest.raises(PassFailed) as e:
        _static_side("head", tmp_path, 2, out, tmp_path, tmp_path, [])
    assert str(e.value) == (
        "static pass in the head tree stored no run (pytest exit 2); "
        "first error: ModuleNotFoundError: No module named 'einops'"
    )


# ---- the fifth walk (docs/reviewer-walk/fifth-walk-2026-12-01/NOTES.md)


def test_tests_that_stopped_early_are_said_on_the_first_screen_changed_ones_too():
    """Items 1-2: every test stopped under the interpreter, but only the unknown ones said so,
    inside a fold; "changed" read as "the test ran"."""
    early = "the test stopped before its end: captured 1 launch(es); results not checked: k: grid too large"
    tests = [
        {"test": "t.py::a", "status": "changed", "changes": [early], "ended_early": True},
        {"test": "t.py::b", "status": "unknown", "changes": [early], "ended_early": True},
        {"test": "t.py::c", "status": "identical", "changes": []},
    ]
    doc = {"tests": tests, "timed": [], "counts": {"changed": 1, "unknown": 1, "identical": 1}}
    lines = ab.render_markdown(doc).splitlines()
    said = next(x for x in lines if x.startswith("⚠️ "))
    assert lines.index(said) < 8, lines[:8]  # above every table and fold
    assert "2 of 3 tests stopped before their end in the static pass (first: k: grid too large)" in said


def test_the_skipped_timing_line_counts_tests_as_the_headline_does():
    """Item 3: "20 tests with changed launches would be timed" beside "10 changed, 10 unknown"."""
    from kperf_ci.prcheck.pipeline import timing_skipped_text

    assert "20 tests (10 changed, 10 unknown) would be timed A/B on a GPU" in timing_skipped_text(
        20, no_gpu_asked=True, unknown=10
    )


def test_every_summary_quotes_the_worst_reason_and_one_ellipsis():
    """Items 4 and 8: the terminal's summary quoted 100% -> 75%; a launch line ended "… …"."""
    from kperf_ci.report.ab_static_view import static_summary

    regs = [
        _reg("theoretical occupancy 100% -> 75% (registers 31 -> 37)", 0.25, 1),
        _reg("theoretical occupancy 100% -> 62.5% (registers 32 -> 42)", 0.375, 2),
    ]
    (g,) = static_groups(regs)
    assert static_summary(g).startswith("theoretical occupancy 100% -> 62.5% (registers 32 -> 42)")
    assert clip("x=1, y=2, NORM_BEFORE_GATE=2048 …", 24).count("…") == 1


def test_no_change_in_time_beside_an_unchanged_verdict():
    """Item 6: "1.06 µs → 1.06 µs (-1.000 ns)" beside "below the floor: 17.3 ns"."""
    from kperf_ci.report.ab_view import time_text, times_text

    assert times_text({"base_ms": 0.00106, "head_ms": 0.001059, "verdict": "unchanged"}, True) == (
        "1.06 µs → 1.06 µs"
    )
    assert times_text({"base_ms": 0.0231, "head_ms": 0.037, "verdict": "slower"}, True).endswith("(+13.9 µs)")
    assert time_text(0.99999e-6) == "1.00 ns"


def test_the_page_has_a_tile_for_unknown_tests():
    """Fourth walk item 14, fifth item 9: the banner counted 10 unknown tests, no tile did."""
    doc = {"tests": [], "timed": [], "counts": {"changed": 10, "unknown": 10, "skipped": 12}}
    page = ab.render_html(doc)
    assert "tests unknown (could not be compared)" in page


def test_the_document_records_the_floor_it_was_judged_by():
    """Issue 38's newcomer walk: `kperf ab` never wrote its floor into the A/B document, so a
    configured ab_floor_ms was explained as the default's ("below the threshold" for a row the
    2 µs floor decided)."""
    from kperf_ci.config import ABPolicy
    from kperf_ci.prcheck.document import ABReport
    from kperf_ci.report.ab_view import floor_ms

    policy = ABPolicy(ab_threshold=0.005, ab_floor_ms=0.002, ab_precision=0.01)
    doc = ABReport(base_rev="HEAD~1", base_sha="b" * 40, head_sha="h" * 40, policy=policy).to_dict()
    assert doc["ab_policy"] == {"ab_threshold": 0.005, "ab_floor_ms": 0.002, "ab_precision": 0.01}
    assert floor_ms(doc) == 0.002
    assert floor_ms({}) == 0.0001  # an older document: the setting's default, as before


def test_the_comment_lists_each_static_launch_whole_with_its_autotune_note():
    """This stop's newcomer walk on attorch: the folded list cut each launch at the comment's field
    limit, inside the arguments, so "(worst of 6 autotune configs, 5 regress)" and the grid
    the terminal and the page show never reached the pull request."""
    r = _reg("spills +412 B > 0 B allowed (default)", 1.0, 1)
    r["args"] = {f"ARG_{i}": f"fp32[4x{2000 + i}]" for i in range(20)}
    r["arg_order"] = list(r["args"])
    r["autotune"] = {"configs": 6, "regressed": 5}
    doc = {"tests": [], "timed": [], "static_regressions": [r], "static_kernels": static_groups([r])}
    fold = ab.render_markdown(doc).split("Each launch not timed", 1)[1].split("</details>", 1)[0]
    assert "grid 16384x1x1; num\\_warps=4, num\\_stages=3 (worst of 6 autotune configs, 5 regress)" in fold
