"""The A/B comment's header and headline: what the reader of a PR comment sees first."""

from __future__ import annotations

from kperf_ci.report import ab


def doc(head_sha: str, regs: list[dict[str, str]] | None = None) -> dict:
    return {
        "base": {"rev": "HEAD", "sha": "b55c51b777" + "0" * 30},
        "head": {"sha": head_sha},
        "device": None,
        "counts": {"changed": 1},
        "tests": [{"test": "t", "status": "changed", "changes": ["num_warps 4 -> 1"]}],
        "static_regressions": regs or [],
    }


def test_head_that_is_the_working_tree_of_the_base_commit_says_so():
    text = ab.render_markdown(doc("b55c51b777" + "0" * 30))
    assert "Base `b55c51b777` (HEAD) vs the working tree of `b55c51b777`" in text
    assert "working tree of" in ab.render_html(doc("b55c51b777" + "0" * 30))
    other = ab.render_markdown(doc("c" * 40))
    assert "vs head `cccccccccc`" in other and "working tree" not in other


def test_static_regressions_are_counted_in_kernels():
    regs = [
        {"kernel": "scale_kernel", "arch": a, "test": "t", "reason": "registers +20%"}
        for a in ("sm_80", "sm_90")
    ]
    # one launch that regressed on two archs is one kernel and one launch
    assert ab.headline(doc("c" * 40, regs)).startswith("🔴 1 kernel regressed (static)")
    assert ab.headline(doc("c" * 40, regs[:1])).startswith("🔴 1 kernel regressed (static)")
    # the same kernel launched at two sizes by two tests: one kernel, two launches, one row; they
    # read alike and no grid tells them apart, so none is called the worst
    two = [{**regs[0], "test": t, "args": {"n": n}} for t, n in (("t1", "1024"), ("t2", "4096"))]
    assert ab.headline(doc("c" * 40, two)).startswith("🔴 1 kernel regressed (static, 2 launches)")
    text = ab.render_markdown(doc("c" * 40, two))
    rows = [
        line
        for line in text.splitlines()
        if line.startswith("| 🔴 regressed | scale\\_kernel | all 2 alike, e.g. n=1024 | sm\\_80 |")
    ]
    assert len(rows) == 1 and rows[0].endswith("| 2 of 2 changed launches regressed |"), text
    assert "- **scale\\_kernel**: sm\\_80: registers +20%" in text


def test_long_stored_fields_are_cut_and_every_row_fits():
    """One 70,000-character kernel name among 30 slower kernels: each field is cut to the comment's
    field limit, so all 30 rows are there (the whole body was cut after the table header)."""
    kernels = [
        {"kernel": ("k" * 70_000) if i == 0 else f"k{i}", "site": f"ops.py::k{i}", "verdict": "slower",
         "ratio_min": 1.1, "ratio_max": 1.1, "launches": [], "tests": ["t"], "changes": []}
        for i in range(30)
    ]  # fmt: skip
    d = {**doc("c" * 40), "kernels": kernels, "counts": {"kernels_slower": 30}, "base": {"rev": "r" * 70_000}}
    text = ab.render_markdown(d)
    assert len(text) < ab.MAX_CHARS
    assert sum(1 for line in text.splitlines() if line.startswith("| 🔴 slower |")) == 30


def test_a_malformed_document_is_one_line_exit_2(tmp_path):
    import json

    from click.testing import CliRunner

    from kperf_ci import store
    from kperf_ci.cli import main
    from kperf_ci.prcheck.document import AB_BLOB
    from tests.github.conftest import ab_db

    for bad in ({"kernels": [{}], "ratio": "abc"}, {"kernels": [{"kernel": "k", "ratio_min": "abc"}]},
                {"counts": {"slower": "x"}}, {"tests": [None]}, {"timed": [{"ratio": "1.0"}]}):  # fmt: skip
        p = ab_db(tmp_path, slower=1, name="bad.db")
        rid = store.list_runs(p)[-1].run_id
        doc = json.loads(store.load_blob(p, rid, "", AB_BLOB))
        store.save_blob(p, rid, "", AB_BLOB, json.dumps({**doc, **bad}))
        r = CliRunner().invoke(
            main, ["github", "comment", "--dry-run", "--pr", "7", "--repo", "o/n", "--ab-db", str(p)]
        )
        assert r.exit_code == 2, (bad, r.output)
        assert "the A/B document is malformed" in r.output and len(r.output.strip().splitlines()) == 1
        p.unlink()


def _timed(method: str) -> dict:
    row = {"kernel": "k", "site": "a.py::k", "launch": "n=4096", "test": "t", "verdict": "slower",
           "ratio": 1.05, "ci_low": 1.04, "ci_high": 1.06, "pairs": 40, "seconds": 0.1,
           "base_median_ms": 0.0066, "head_median_ms": 0.0069, "method": method}  # fmt: skip
    return {**doc("c" * 40), "device": "NVIDIA H100 80GB HBM3", "timed": [row]}


def test_every_place_that_shows_an_ab_time_says_how_it_was_timed():
    """Issue 32: a time is the kernel's (CUPTI) unless CUPTI was missing, and the reader is told."""
    cupti, events = _timed("cupti"), _timed("events")
    assert "CUPTI kernel durations (launch overhead excluded)" in ab.render_markdown(cupti)
    assert "launch overhead included" in ab.render_markdown(events)
    assert 'id="timing-method">Times: CUPTI kernel durations' in ab.render_html(cupti)
    assert ab.timing_note(doc("c" * 40)) == ""  # nothing timed: nothing said
    assert "launch overhead included" not in ab.render_markdown(cupti)
