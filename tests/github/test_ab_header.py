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
    assert ab.headline(doc("c" * 40, regs)).startswith("🔴 1 kernel(s) with static regressions in")
    assert ab.headline(doc("c" * 40, regs[:1])).startswith("🔴 1 kernel(s) with static regressions in")
    # the same kernel launched at two sizes by two tests: one kernel, two launches, one row
    two = [{**regs[0], "test": t, "args": {"n": n}} for t, n in (("t1", "1024"), ("t2", "4096"))]
    assert ab.headline(doc("c" * 40, two)).startswith("🔴 1 kernel(s) with static regressions (2 launches)")
    text = ab.render_markdown(doc("c" * 40, two))
    assert (
        text.count("- scale\\_kernel (scale\\_kernel) sm\\_80: registers +20%; 2 launch(es) in 2 test(s)")
        == 1
    )
