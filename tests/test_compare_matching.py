"""Matching variants across key changes and modes, removed variants, and "no comparable baseline"
(issue 13 items 2 and 6), on real run databases and through the `kperf compare` CLI."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from conftest import make_info, make_result

from kperf_ci import store
from kperf_ci.cli import main
from kperf_ci.judge.compare import compare_runs
from kperf_ci.judge.comparison import COMPARED, NO_COMPARABLE_BASELINE, OTHER_TESTS
from kperf_ci.judge.matching import (
    _match,
    arch_class,
    describe_key_change,
    match_variants,
    parse_config,
    parse_spec,
)
from kperf_ci.model import Fingerprint, RunInfo, RunRecord, VariantKey, VariantResult
from kperf_ci.report import build_report, render_markdown, render_summary, write_site

H100 = "NVIDIA H100 80GB HBM3"
SOFTMAX_TEST = "examples/test_softmax.py::test_softmax[1024]"
SOFTMAX_SITE = "examples/kernels/softmax.py::softmax_kernel"
CFG4 = "num_warps=4,num_stages=3,num_ctas=1"
SPEC = "x:*fp16:D, y:*fp16:D, n:i32, BLOCK=1024"


def variant(
    kernel: str = "softmax",
    arch: str = "sm_90",
    *,
    test: str = SOFTMAX_TEST,
    source: str = SOFTMAX_SITE,
    config: str = CFG4,
    spec: str = SPEC,
    **metrics: float,
) -> VariantResult:
    r = make_result(kernel, arch, config=config, spec=spec, **metrics)
    r.key = replace(r.key, test=test, source=source)
    return r


def gpu_info(run_id: str, *, capability: str | None = "9.0", gpu: str = H100) -> RunInfo:
    info = make_info(run_id, mode="gpu", gpu=gpu)
    extra = {"mode": "gpu", **({"capability": capability} if capability else {})}
    return replace(info, fingerprint=replace(info.fingerprint, extra=extra))


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project directory without [tool.kperf] settings as the cwd; paths given on the CLI."""
    for key in list(__import__("os").environ):
        if key.startswith("KPERF_"):
            monkeypatch.delenv(key)
    (tmp_path / ".git").mkdir()
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def save(project: Path, base: tuple[RunInfo, list], cur: tuple[RunInfo, list]) -> None:
    store.save_run(project / "base.db", *base)
    store.save_run(project / "run.db", *cur)


def kperf_compare(*args: str):
    cmd = ["compare", "--baseline", "base.db", "--db", "run.db", *args]
    return CliRunner().invoke(main, cmd, catch_exceptions=False)


def one_line(output: str) -> str:
    """The terminal output with rich's line wrapping undone, for substring checks."""
    return " ".join(output.split())


# --------------------------------------------------------------------------- item 2: key changes


def test_num_warps_change_is_changed_and_the_register_blowup_fails(project):
    """The suite from the issue: num_warps=1 on a softmax made registers 34 -> 166 and SASS
    295 -> 1,777; compare said '40 new, 40 removed, no regressions' and exited 0."""
    other = dict(kernel="add", test="examples/test_add.py::test_add", source="examples/kernels/add.py::add")
    save(
        project,
        (
            make_info("b"),
            [variant(registers=34, **{"sass.instructions": 295}), variant(**other, registers=20)],
        ),
        (
            make_info("c"),
            [
                variant(
                    config="num_warps=1,num_stages=3,num_ctas=1", registers=166, **{"sass.instructions": 1777}
                ),
                variant(**other, registers=20),
            ],
        ),
    )
    r = kperf_compare()
    out = one_line(r.output)
    assert r.exit_code == 1, r.output
    assert (
        f"changed: softmax sm_90 num_warps=1,num_stages=3,num_ctas=1 ({SOFTMAX_TEST}): "
        "num_warps 4 -> 1; registers 34 -> 166; SASS instructions 295 -> 1,777" in out
    )
    # one kernel regressed on two metrics: counted once, in kernels (kperf_ci.judge.group)
    assert "REGRESSION" in out and "1 regressed kernel (2 metric rows over threshold)" in out
    assert "added:" not in out and "removed:" not in out and "no regressions" not in out

    doc = json.loads(kperf_compare("--format", "json").output)
    assert doc["exit_code"] == 1 and doc["added"] == [] and doc["removed"] == []
    (changed,) = doc["changed"]
    assert changed["change"] == "num_warps 4 -> 1" and changed["matched_by"] == "test"
    regs = {c["metric"]: c for c in doc["changes"] if c["regression"]}
    assert set(regs) == {"registers", "sass.instructions"}
    assert regs["registers"]["key_change"] == "num_warps 4 -> 1"
    assert doc["status"] == COMPARED and doc["compared_variants"] == 2


def test_a_constexpr_change_is_changed_not_added_and_removed(project):
    save(
        project,
        (make_info("b"), [variant(registers=40, spills=0)]),
        (make_info("c"), [variant(spec=SPEC.replace("BLOCK=1024", "BLOCK=512"), registers=40, spills=0)]),
    )
    r = kperf_compare()
    assert r.exit_code == 0, r.output
    out = one_line(r.output)
    assert "): BLOCK 1024 -> 512" in out and "added:" not in out and "removed:" not in out
    assert "no regressions" in out


def test_launch_options_and_specialization_described_together():
    b = VariantKey("k", "sm_90", SPEC, CFG4)
    c = VariantKey(
        "k", "sm_90", "x:*fp16, y:*fp16:D, n:i32, BLOCK=512, USE_MASK=True", "num_warps=8,num_stages=1"
    )
    assert describe_key_change(b, c) == (
        "num_warps 4 -> 8; num_stages 3 -> 1; x *fp16:D -> *fp16; BLOCK 1024 -> 512; USE_MASK - -> True"
    )
    assert describe_key_change(b, b) == ""
    # GPU mode spells no num_ctas; Triton's default is filled in, so it is no change
    assert parse_config("num_warps=4,num_stages=3") == parse_config(CFG4)
    assert parse_config("callable:311ceb2d") == {"config": "callable:311ceb2d"}
    # tuple arguments keep their commas; GPU mode's " @ <test parameters>" is the shape
    assert parse_spec("t:(*fp16:D,i32), B=(1,2) @ 4-64") == {
        "t": "(*fp16:D,i32)",
        "B": "(1,2)",
        "shape": "4-64",
    }
    assert "shape" not in parse_spec("a:i32 @ 4-64", with_shape=False)


def test_several_variants_of_one_test_pair_closest_first():
    """An autotuned kernel whose every config gained a stage: each pairs with its own BLOCK_M."""

    def configs(stages: int) -> list[VariantResult]:
        return [
            variant(
                "mm", spec=f"a:*fp16:D, BLOCK_M={bm}", config=f"num_warps={w},num_stages={stages},num_ctas=1"
            )
            for bm, w in ((128, 8), (64, 4))
        ]

    m = match_variants(configs(3), configs(4)[::-1])
    assert not m.added and not m.removed and [p.matched_by for p in m.pairs] == ["test", "test"]
    assert {
        (parse_spec(p.base.key.spec)["BLOCK_M"], parse_spec(p.current.key.spec)["BLOCK_M"]) for p in m.pairs
    } == {
        ("64", "64"),
        ("128", "128"),
    }
    assert {p.change for p in m.pairs} == {"num_stages 3 -> 4"}


def test_renamed_test_matches_by_launch_site_and_says_so():
    base = [variant(test="t.py::test_old", registers=32)]
    cur = [variant(test="t.py::test_new", config="num_warps=2,num_stages=3,num_ctas=1", registers=32)]
    (p,) = match_variants(base, cur).pairs
    assert p.matched_by == "source" and p.change == "num_warps 4 -> 2; test t.py::test_old -> t.py::test_new"
    # two candidates per side across tests: not guessed
    m = match_variants(base * 2, [cur[0], replace(cur[0], key=replace(cur[0].key, spec="x:i32"))])
    assert not m.pairs and len(m.added) == 2


def test_match_keeps_the_shape_diff_static_reads():
    base = [variant(registers=1), variant("gone", test="t::gone", source="")]
    cur = [variant(config="num_warps=1,num_stages=3,num_ctas=1"), variant("new", test="t::new", source="")]
    pairs, removed, added = _match(base, cur)
    assert [(b.key.kernel, c.key.kernel, re) for b, c, re in pairs] == [("softmax", "softmax", True)]
    assert [r.key.kernel for r in removed] == ["gone"] and [r.key.kernel for r in added] == ["new"]
    pairs, _, _ = _match(base[:1], base[:1])
    assert pairs[0][2] is False


# --------------------------------------------------------------------------- item 2: removed


def test_removed_variant_of_a_test_that_ran_fails_unless_allowed(project):
    bwd = variant("softmax_bwd", source="examples/kernels/softmax.py::softmax_bwd", registers=30)
    save(
        project,
        (make_info("b"), [variant(registers=34), bwd]),
        (make_info("c"), [variant(registers=34)]),  # same test ran; the backward kernel vanished
    )
    r = kperf_compare()
    out = one_line(r.output)
    assert r.exit_code == 1, r.output
    assert (
        "removed: 1 variant(s) measured in the baseline are missing from this run although their test ran"
        in out
    )
    assert f"softmax_bwd sm_90 {CFG4} ({SOFTMAX_TEST})" in out and "1 removed kernel" in out
    assert "no regressions" not in out
    doc = json.loads(kperf_compare("--format", "json").output)
    assert doc["exit_code"] == 1 and [v["kernel"] for v in doc["removed"]] == ["softmax_bwd"]
    r = kperf_compare("--allow-removed")
    assert r.exit_code == 0, r.output
    assert "allowed by --allow-removed" in one_line(r.output)


def test_variant_of_a_deselected_test_is_not_run_and_passes(project):
    other = variant("add", test="examples/test_add.py::test_add", source="examples/kernels/add.py::add")
    save(
        project,
        (
            make_info("b"),
            [variant(registers=34), other, replace(other, key=replace(other.key, arch="sm_80"))],
        ),
        (make_info("c"), [variant(registers=34)]),  # run with -k softmax
    )
    r = kperf_compare()
    out = one_line(r.output)
    assert r.exit_code == 0, r.output
    assert "not run: 1 baseline variant(s), its test did not run" in out
    assert "not run: 1 baseline variant(s), this run built no sm_80 variants" in out
    assert "removed:" not in out and "no regressions" in out
    doc = json.loads(kperf_compare("--format", "json").output)
    assert doc["removed"] == [] and len(doc["not_run"]) == 2 and doc["status"] == COMPARED
    cur, base = store.load_run(project / "run.db"), store.load_run(project / "base.db")
    report = build_report(cur, base, compare_runs(base, cur))
    assert "1 baseline variant(s) not run here: this run built no sm_80 variants." in report.notes
    # the comment and summary say what the terminal says: not run, never "removed" (walk 2 of
    # issue 38, finding 5: a bench run's comment read "66 removed" where nothing was)
    assert report.counts["not-run"] == 2 and report.counts["removed"] == 0
    for text in (render_markdown(report), render_summary(report)):
        assert "removed" not in text.lower(), text
    assert "not run here: 2 variants of 1 kernel of the baseline" in render_markdown(report)
    assert "Not run here" in render_markdown(report)


def test_a_baseline_of_other_tests_is_one_count_and_names_the_fix(project):
    """Walk 2 of issue 38, finding 3: a bench script's run against the suite's baseline listed 20
    of its 78 variants as not run, on four lines, and named no fix."""
    others = [
        variant(
            f"add{i}", test=f"examples/test_add.py::test_add[{i}]", source=f"examples/kernels/add.py::add{i}"
        )
        for i in range(30)
    ]
    bench = variant(test="bench_softmax.py::softmax[64x128]")
    save(project, (make_info("b"), others), (make_info("c"), [bench]))
    r = kperf_compare()
    out = one_line(r.output)
    assert r.exit_code == 0, r.output
    assert f"not run: 30 baseline variants, {OTHER_TESTS} (--format json lists them)" in out
    assert "bench script" in OTHER_TESTS and "deselected" not in out
    assert "test_add[" not in out and "and 10 more" not in out  # no listing of them
    assert "the baseline holds none of these tests" in out
    fix = "keep a baseline of these tests in a new file (kperf baseline update --baseline NEW.db)"
    assert f"nothing was judged; {fix}, never in the suite" in out
    assert len(json.loads(kperf_compare("--format", "json").output)["not_run"]) == 30
    # the comment counts them per kernel, not in 30 rows that each say "not run" (walk 3 of
    # issue 38, J1-7: 66 rows, 11,497 characters, were almost all of a bench run's comment)
    cur, base = store.load_run(project / "run.db"), store.load_run(project / "base.db")
    text = render_markdown(build_report(cur, base, compare_runs(base, cur)))
    assert "<b>Not run here</b> (30 variants of 30 kernels)" in text, text
    assert "- add0: 1 variant (sm\\_90)" in text and "| ⏭️ |" not in text, text


def test_labels_that_read_alike_are_listed_once_with_their_count(project):
    """Walk 2 of issue 38, finding 4: `block/matmul_kernel sm_80 num_warps=4,...` five times in one
    "not run" list read as duplicates (the variants differ in their specialization)."""
    adds = [
        variant(
            "add", test="examples/test_add.py::test_add", source="examples/kernels/add.py::add", spec=f"n:{i}"
        )
        for i in range(5)
    ]
    save(project, (make_info("b"), [variant(registers=34), *adds]), (make_info("c"), [variant(registers=34)]))
    out = one_line(kperf_compare().output)
    assert "not run: 5 baseline variant(s), its test did not run" in out
    assert f": add sm_90 {CFG4} (5 variants)" in out
    assert out.count(f"add sm_90 {CFG4}") == 1


def test_a_removed_variant_stays_removed_in_the_comment(project):
    bwd = variant("softmax_bwd", source="examples/kernels/softmax.py::softmax_bwd", registers=30)
    save(project, (make_info("b"), [variant(registers=34), bwd]), (make_info("c"), [variant(registers=34)]))
    cur, base = store.load_run(project / "run.db"), store.load_run(project / "base.db")
    report = build_report(cur, base, compare_runs(base, cur))
    assert report.counts["removed"] == 1 and report.counts["not-run"] == 0
    assert "1 removed" in render_markdown(report)


# --------------------------------------------------------------------------- item 6: across modes


def test_gpu_run_meets_the_static_baseline_by_arch(project):
    """The H100 run: its sm_90 static metrics meet the static baseline's sm_90 variant; the
    baseline's sm_80 variant is not run; timings have nothing to compare with."""
    gpu = variant(
        arch=H100,
        config="num_warps=4,num_stages=3",  # GPU mode's spelling
        spec=SPEC + " @ 1024",
        source="kernels.softmax::softmax_kernel",
        registers=60,
        spills=0,
        **{"time.median": 0.01},
    )
    save(
        project,
        (make_info("b"), [variant(registers=34, spills=0), variant(arch="sm_80", registers=30, spills=0)]),
        (gpu_info("c"), [gpu]),
    )
    doc = json.loads(kperf_compare("--format", "json").output)
    assert doc["exit_code"] == 1 and doc["status"] == COMPARED and doc["added"] == [] and doc["removed"] == []
    assert [(c["metric"], c["base"], c["current"]) for c in doc["changes"] if c["regression"]] == [
        ("registers", 34.0, 60.0)
    ]
    assert doc["changed"] == []  # the same variant; only the arch's name differs
    (pair,) = doc["rematched"]
    assert (pair["base"]["arch"], pair["current"]["arch"]) == ("sm_90", H100)
    assert [n["reason"] for n in doc["not_run"]] == ["this run built no sm_80 variants"]
    assert [(i["kind"], i["reason"]) for i in doc["incomparable"]] == [
        ("time", "gpu mode vs static mode: only static metrics compare")
    ]
    # the report joins the two into one variant, judged on its registers
    report = build_report(
        store.load_run(project / "run.db"), store.load_run(project / "base.db"), _cmp(project)
    )
    (v,) = [v for v in report.variants if v.cur is not None]
    assert v.base is not None and v.base.key.arch == "sm_90" and v.regression


def _cmp(project: Path):
    return compare_runs(store.load_run(project / "base.db"), store.load_run(project / "run.db"))


def test_arch_class():
    fp = Fingerprint(gpu=H100, extra={"capability": "9.0"})
    assert arch_class(H100, fp) == "sm_90" and arch_class("sm_86") == "sm_86" and arch_class("host") == "host"
    assert arch_class("NVIDIA A100-SXM4-80GB") == "sm_80"  # no capability stored: the name table
    assert arch_class("NVIDIA A10") == "sm_86" and arch_class("Some Future GPU") == "Some Future GPU"
    assert arch_class("NVIDIA A10", Fingerprint(extra={"capability": "8.6"})) == "sm_86"


def test_cross_mode_vanished_autotune_configs_are_not_removals():
    """Static mode compiles every autotune config, GPU mode captures the one that ran."""
    base = RunRecord(
        make_info(), [variant(registers=34), variant(config="num_warps=8,num_stages=3,num_ctas=1")]
    )
    cur = RunRecord(gpu_info("g"), [variant(arch=H100, config="num_warps=4,num_stages=3", registers=34)])
    c = compare_runs(base, cur)
    assert not c.removed and c.exit_code == 0 and c.status == COMPARED
    assert [n.reason for n in c.not_run] == ["not captured in gpu mode (baseline: static mode)"]


# --------------------------------------------------------------------------- item 6: no baseline


def _no_comparable(project: Path) -> None:
    """A GPU run on an A100 against a baseline compiled for sm_90 only: nothing can match."""
    save(
        project,
        (make_info("b"), [variant(registers=34), variant("add", test="t::add", source="", registers=8)]),
        (
            gpu_info("c", capability="8.0", gpu="NVIDIA A100-SXM4-80GB"),
            [
                variant(arch="NVIDIA A100-SXM4-80GB", registers=34),
                variant("add", "NVIDIA A100-SXM4-80GB", test="t::add", source="", registers=8),
            ],
        ),
    )


def test_nothing_matched_says_no_comparable_baseline_everywhere(project):
    _no_comparable(project)
    r = kperf_compare()
    out = one_line(r.output)
    assert r.exit_code == 0, r.output  # not a regression
    assert "no comparable baseline for this machine class: 0 of 2 variant(s) of this run" in out
    assert "no regressions" not in out
    doc = json.loads(kperf_compare("--format", "json").output)
    assert doc["status"] == NO_COMPARABLE_BASELINE and doc["exit_code"] == 0
    assert doc["status_line"].startswith("no comparable baseline for this machine class")
    r = kperf_compare("--require-baseline")
    assert r.exit_code == 2 and "no comparable baseline" in r.output and "Traceback" not in r.output

    report = build_report(
        store.load_run(project / "run.db"), store.load_run(project / "base.db"), _cmp(project)
    )
    assert report.verdict_line == "no comparable baseline for this machine class"
    for text in (render_markdown(report), render_summary(report)):
        assert "⚠️ kperf: no comparable baseline for this machine class" in text
        assert "✅" not in text and "no regressions" not in text
    index = write_site(report, project / "site", jobs=1).read_text()
    assert '<div id="verdict" class="banner warn">' in index and "✓" not in index
    assert "no comparable baseline for this machine class" in index and "no regressions" not in index


def test_a_baseline_of_other_tests_says_so_not_another_machine_class(project):
    """Found by a fresh walk: `kperf run --bench` against the suite's baseline (none of the
    script's tests in it) was blamed on the machine class, which was the same."""
    save(
        project,
        (make_info("b"), [variant(registers=34, test="t::suite")]),
        (make_info("c"), [variant("add", test="bench::add", source="", registers=8)]),
    )
    out = one_line(kperf_compare().output)
    assert "no comparable baseline: the baseline holds none of these tests: 0 of 1 variant(s)" in out
    assert "machine class" not in out
    report = build_report(
        store.load_run(project / "run.db"), store.load_run(project / "base.db"), _cmp(project)
    )
    assert report.verdict_line == "no comparable baseline: the baseline holds none of these tests"
    assert "⚠️ kperf: no comparable baseline: the baseline holds none of these tests" in render_markdown(
        report
    )


def test_compared_baseline_keeps_its_green_check(project):
    """The counterpart of the test above: the same renderers still show a check when it holds."""
    save(project, (make_info("b"), [variant(registers=34)]), (make_info("c"), [variant(registers=34)]))
    report = build_report(
        store.load_run(project / "run.db"), store.load_run(project / "base.db"), _cmp(project)
    )
    assert report.verdict_line == "no regressions"
    assert "## ✅ kperf: no regressions" in render_markdown(report)
    index = write_site(report, project / "site", jobs=1).read_text()
    assert '<div id="verdict" class="banner good">' in index and "✓ no regressions" in index


@pytest.mark.parametrize("compared, status", [(1, NO_COMPARABLE_BASELINE), (2, COMPARED), (3, COMPARED)])
def test_half_of_the_run_must_compare(compared, status):
    """4 variants in this run; the rule is compared >= 50% of them."""
    base = [variant(f"k{i}", test=f"t::k{i}", registers=1) for i in range(compared)]
    cur = [variant(f"k{i}", test=f"t::k{i}", registers=1) for i in range(4)]
    c = compare_runs(RunRecord(make_info(), base), RunRecord(make_info(), cur))
    assert c.status == status and c.compared_variants == compared and c.current_variants == 4


def test_other_triton_compares_nothing():
    base = RunRecord(make_info(triton="3.5.0"), [variant(registers=10)])
    c = compare_runs(base, RunRecord(make_info(), [variant(registers=99)]))
    assert c.status == NO_COMPARABLE_BASELINE and c.exit_code == 0 and not c.changes


def test_session_summary_verdict(capsys):
    from kperf_ci.plugin.finish import write_summary

    lines: list[str] = []
    tr = SimpleNamespace(section=lambda *a, **k: None, write_line=lambda s, **k: lines.append(s))
    base = RunRecord(make_info(triton="3.5.0"), [variant(registers=10)])
    ks = SimpleNamespace(
        results=[variant()],
        mode="static",
        settings=SimpleNamespace(arch=["sm_90"], baseline="baselines/main.db"),
        _xdist_controller=lambda: False,
        interrupted=None,
        saved_to=None,
        ab_results=[],
        findings=[],
        warnings=[],
        errors=[],
        comparison=compare_runs(base, RunRecord(make_info(), [variant(registers=10)])),
    )
    write_summary(ks, tr)
    printed = one_line(capsys.readouterr().out)
    # said once, in the table's verdict line; a second "; no verdict" line repeated it (walk 3 of
    # issue 38, J1-6)
    assert not any("no comparable baseline" in line for line in lines), lines
    assert "no comparable baseline for this machine class" in printed and "nothing was judged" in printed
    assert "no regressions" not in printed


def test_report_fails_the_removed_variant_that_compare_fails(project):
    bwd = variant("softmax_bwd", source="examples/kernels/softmax.py::softmax_bwd", registers=30)
    save(project, (make_info("b"), [variant(registers=34), bwd]), (make_info("c"), [variant(registers=34)]))
    cur, base = store.load_run(project / "run.db"), store.load_run(project / "base.db")
    report = build_report(cur, base, compare_runs(base, cur))
    (v,) = report.regressions
    assert v.key.kernel == "softmax_bwd" and v.cur is None and v.reasons[0].startswith("removed:")
    assert "\n## ❌ kperf: 1 removed kernel\n" in render_markdown(report)
    allowed = build_report(cur, base, compare_runs(base, cur, allow_removed=True))
    assert not allowed.regressions and allowed.verdict_line == "no regressions"
