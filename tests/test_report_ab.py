"""The A/B reports (`kperf report --ab`, the PR comment, the job summary) from version-2 documents:
one row per kernel, each distinct launch with its own effect and times, a comment that is cut
with every fold closed and the notice outside them, bad input as one line, exit 2."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kperf_ci.cli import main
from kperf_ci.judge.group import kernel_groups
from kperf_ci.prcheck.document import DOC_VERSION
from kperf_ci.report import ab


def row(
    kernel: str,
    test: str,
    verdict: str,
    ratio: float,
    base_ms: float,
    *,
    launch: str = "",
    half: float = 0.004,
    site: str | None = None,
    changes: list[str] | None = None,
) -> dict[str, Any]:
    """One timed row as `kperf ab` stores it (prcheck/document.py `_ab_rows`)."""
    return {
        "kernel": kernel,
        "site": site if site is not None else f"ops.py::{kernel.split('#')[0]}",
        "launch": launch,
        "base_launch": launch,
        "changes": changes or [],
        "arch": "NVIDIA H100 80GB HBM3",
        "config": "num_warps=4,num_stages=3",
        "test": test,
        "verdict": verdict,
        "ratio": ratio,
        "ci_low": ratio - half,
        "ci_high": ratio + half,
        "pairs": 400.0,
        "seconds": 0.2,
        "threshold": 0.005,
        "method": "cupti",
        "base_median_ms": base_ms,
        "head_median_ms": base_ms * ratio,
        "regions_moved": [],
    }


def document(timed: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """A version-2 document, its "kernels" grouped as `kperf ab` groups them."""
    counts: dict[str, int] = {"changed": len({t["test"] for t in timed})}
    for t in timed:
        counts[t["verdict"]] = counts.get(t["verdict"], 0) + 1
    kernels = kernel_groups(timed)
    for k in kernels:
        counts[f"kernels_{k['verdict']}"] = counts.get(f"kernels_{k['verdict']}", 0) + 1
    return {
        "version": DOC_VERSION,
        "base": {"rev": "origin/main", "sha": "b" * 40},
        "head": {"sha": "a" * 40},
        "device": "NVIDIA H100 80GB HBM3",
        "counts": counts,
        "exit_code": 1,
        "tests": [
            {"test": t["test"], "status": "changed", "changes": ["num_warps 4 -> 8"], "launches": []}
            for t in timed
        ],
        "static": None,
        "timed": timed,
        "kernels": kernels,
        "static_regressions": [],
        "static_kernels": [],
        "messages": [],
        **extra,
    }


def launch(i: int) -> str:
    n = 1024 * (i + 1)
    return f"x=fp32[{n}x{n}], y=fp32[{n}x{n}], n={n * n}, BLOCK=1024; grid {n}x1x1; num_warps=4,num_stages=3"


def nine_launches() -> dict[str, Any]:
    effects = [1.0713, 1.05, 1.04, 1.03, 1.0208, 1.0001, 0.9995, 0.9990, 0.9795]
    verdicts = ["slower"] * 5 + ["unchanged"] * 3 + ["faster"]
    timed = [
        row(
            "softmax_kernel",
            f"tests/test_softmax.py::test_softmax[{i}]",
            v,
            r,
            0.0066 * (i + 1),
            launch=launch(i),
        )
        for i, (r, v) in enumerate(zip(effects, verdicts, strict=True))
    ]
    return document(timed)


def many_kernels(n: int = 240) -> dict[str, Any]:
    timed = [
        row(
            f"kernel_{i:03d}",
            f"tests/test_k.py::test_k[{i}]",
            "slower",
            1.02 + i / 1000,
            0.01,
            launch=launch(i % 4),
        )
        for i in range(n)
    ]
    return document(timed)


def check_folds(text: str) -> list[int]:
    """The fold depth after each line; every <details> closed, never below zero."""
    depth, depths = 0, []
    for line in text.splitlines():
        depth += line.count("<details") - line.count("</details>")
        assert depth >= 0, text
        depths.append(depth)
    assert depth == 0, text
    return depths


def assert_cut_well(text: str, limit: int) -> None:
    assert len(text) <= limit
    assert text.count("<details") == text.count("</details>")
    depths = check_folds(text)
    lines = text.rstrip("\n").splitlines()
    assert "truncated" in lines[-1] and depths[-1] == 0, lines[-3:]
    assert not any("truncated" in line for line in lines[:-1])  # one notice, the last line
    # the timing message stays outside every fold, before the first one
    timing = next(i for i, line in enumerate(lines) if line.startswith("Times: CUPTI"))
    assert depths[timing] == 0


def write(tmp_path: Path, doc: dict[str, Any], name: str = "ab.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(doc), encoding="utf-8")
    return p


def report(*args: str) -> Any:
    return CliRunner().invoke(main, ["report", *args])


# ------------------------------------------------------------------------ kperf report --ab


@pytest.mark.parametrize(
    ("doc", "limit"), [(nine_launches(), 2000), (many_kernels(240), 3000)], ids=["9-launches", "240-kernels"]
)
def test_a_cut_comment_closes_every_fold_and_ends_with_the_notice(tmp_path, doc, limit):
    p = write(tmp_path, doc)
    r = report("--ab", str(p), "--format", "markdown", "--max-chars", str(limit))
    assert r.exit_code == 0, r.output
    text = r.stdout
    assert_cut_well(text, limit)
    if len(doc["kernels"]) > 1:  # the kernel table is capped with a "… N more" row
        assert re.search(r"^\|  \| … \d+ more \|", text, re.M), text
        assert re.search(r"… truncated: \d+ more kernels", text)


def test_the_summary_and_the_html_render_from_the_json_and_from_the_database(tmp_path):
    from kperf_ci import store
    from kperf_ci.prcheck.document import AB_BLOB
    from tests.github.conftest import ab_db

    doc = nine_launches()
    p = write(tmp_path, doc)
    db = ab_db(tmp_path, slower=1)
    store.save_blob(db, store.list_runs(db)[-1].run_id, "", AB_BLOB, json.dumps(doc))
    for src, name in ((p, "from-json"), (db, "from-db")):
        r = report("--ab", str(src), "--format", "summary", "-o", f"{tmp_path / name}/")
        assert r.exit_code == 0, r.output
        summary = (tmp_path / name / "summary.md").read_text(encoding="utf-8")
        assert ab.MARKER not in summary and "softmax\\_kernel" in summary
        r = report("--ab", str(src), "--format", "html", "-o", str(tmp_path / f"{name}-html"))
        assert r.exit_code == 0, r.output
        assert "softmax_kernel" in (tmp_path / f"{name}-html" / "index.html").read_text(encoding="utf-8")


def test_bad_input_is_one_line_exit_2(tmp_path):
    newer = write(tmp_path, {**nine_launches(), "version": DOC_VERSION + 1}, "newer.json")
    not_doc = write(tmp_path, {"hello": "world"}, "other.json")
    garbage = tmp_path / "garbage.json"
    garbage.write_text("not json at all", encoding="utf-8")
    cases = {
        str(tmp_path / "missing.json"): "does not exist",
        str(not_doc): "not an A/B document",
        str(garbage): "neither an A/B database nor JSON",
        str(newer): f"version {DOC_VERSION + 1}, written by a newer kperf-ci",
    }
    for path, words in cases.items():
        r = report("--ab", path, "--format", "markdown")
        assert r.exit_code == 2, (path, r.output)
        assert words in r.output and len(r.output.strip().splitlines()) == 1, r.output


# ------------------------------------------------------------------------- what the comment says


THREE_EFFECTS = (
    ("slower", 1.0713, 0.0066, "+7.13%", "6.60 µs", "7.07 µs"),
    ("slower", 1.0208, 0.0120, "+2.08%", "12.0 µs", "12.2 µs"),
    ("faster", 0.9795, 0.0480, "-2.05%", "48.0 µs", "47.0 µs"),
)


@pytest.mark.parametrize("spec", [True, False], ids=["with-spec", "document-without-spec"])
def test_distinct_launches_of_one_bench_callable_each_show_their_effect_and_times(spec):
    """`kperf.bench` rows carry no launch text: three shapes of one kernel are three launches,
    never one row under an empty label with the worst effect only, in the stored document's
    kernels, the terminal of `kperf ab`, the comment and the HTML page."""
    timed = []
    for i, (verdict, ratio, base, *_) in enumerate(THREE_EFFECTS):
        r = row("vector_add", f"tests/test_add.py::test_add[{4**i}]", verdict, ratio, base)
        if spec:  # the stored variant's specialization, with the test's shape id
            r["spec"] = f"*fp32:16, *fp32:16, i32 @ {4**i}"
        timed.append(r)
    doc = document(timed)
    (k,) = doc["kernels"]  # the stored grouping: one kernel, three launches
    assert [x["ratio"] for x in k["launches"]] == [1.0713, 1.0208, 0.9795]
    text = ab.render_markdown(doc).replace("\u00a0", " ")  # times are kept on one line
    terminal = "\n".join(ab.terminal_lines(doc))
    html = ab.render_html(doc).replace("\u00a0", " ")
    for _v, _r, _b, effect, base, head in THREE_EFFECTS:
        assert re.search(rf"{re.escape(effect)} .*{base} → {head}", text), (effect, text)
        assert re.search(rf"{re.escape(effect)} .*{base} → {head}", terminal), (effect, terminal)
        assert effect in html and f"{base} → {head}" in html, effect
    assert "3 launches in 3 tests" in terminal
    # a callable that launches several kernels is keyed by an internal id: never shown
    multi = document([{**t, "config": "callable:311ceb2d"} for t in timed])
    assert "callable:" not in ab.render_markdown(multi) + ab.render_html(multi)
    assert html.count('class="chart ab-intervals"') == 1 and html.count("#3 ") >= 1  # three intervals
    # the top table: one row for the kernel, its worst launch, "N of M launches slower"
    top = [line for line in text.splitlines() if line.startswith("| 🔴 slower | vector\\_add")]
    assert len(top) == 1 and "| 2 of 3 slower |" in top[0] and "6.60 µs → 7.07 µs" in top[0]
    assert "+7.13% \\[+6.73%, +7.53%\\]" in top[0]  # the worst launch's interval, not a range
    assert "-2.05% .. " not in text


def test_one_launch_made_by_two_tests_is_one_launch_and_a_slimmed_document_reads_as_stored():
    """Rows with the same launch text are one launch with both tests; a document that holds only
    "kernels" (slimmed: no timed rows) renders its stored launches."""
    timed = [
        row("k", "t.py::test_a", "slower", 1.05, 0.01, launch=launch(0)),
        row("k", "t.py::test_b", "slower", 1.04, 0.01, launch=launch(0)),
        row("k", "t.py::test_c", "faster", 0.95, 0.01, launch=launch(1)),
    ]
    doc = document(timed)
    (k,) = doc["kernels"]
    assert [x["tests"] for x in k["launches"]] == [["t.py::test_a", "t.py::test_b"], ["t.py::test_c"]]
    slim = {**doc, "timed": []}
    assert ab.kernels_of(slim)[0]["launches"][1]["verdict"] == "faster"
    assert "-5.00%" in ab.render_markdown(slim)


def test_an_unchanged_launch_says_why():
    timed = [
        row("k", "t.py::test_k[0]", "slower", 1.05, 0.01, launch=launch(0)),
        # the interval excludes zero, but 20 ns is under the 0.1 us floor
        row("k", "t.py::test_k[1]", "unchanged", 1.01, 0.002, launch=launch(1), half=0.003),
        row("k", "t.py::test_k[2]", "unchanged", 1.001, 0.05, launch=launch(2), half=0.004),
    ]
    text = ab.render_markdown(document(timed))
    assert "below the floor: 20.0 ns (+1.00% of 2.00 µs) &lt; 100 ns" in text
    assert "the 99% interval includes zero" in text
    # one line per unchanged launch, with its shapes and its own reason (never two merged)
    lines = [x for x in text.splitlines() if x.startswith("  - ⚪ unchanged")]
    assert len(lines) == 2 and "launch(es) unchanged" not in text
    assert lines[0].endswith(
        "fp32\\[2048x2048\\]; grid 2048x1x1; below the floor: 20.0 ns (+1.00% of 2.00 µs) &lt; 100 ns"
    ), lines
    assert lines[1].endswith("fp32\\[3072x3072\\]; grid 3072x1x1; the 99% interval includes zero"), lines


def test_a_static_only_run_never_counts_zero_times(tmp_path):
    """A run without timing never reads "0 slower, 0 faster" (as if it had been timed and found
    clean): neither the A/B reports nor the run comment and summary of a static run."""
    doc = document([])
    doc.update(timed=[], kernels=[], device=None, counts={"changed": 2, "identical": 3})
    root = Path(__file__).resolve().parents[1]
    shutil.copy(root / "tests/data/static/cpu_examples.db", tmp_path / "cpu.db")
    shutil.copy(root / "baselines/main.db", tmp_path / "main.db")
    run = ["--db", str(tmp_path / "cpu.db"), "--baseline", str(tmp_path / "main.db")]
    texts = [ab.render_markdown(doc), ab.render_summary(doc), ab.render_html(doc)]
    for fmt in ("markdown", "summary"):
        r = report(*run, "--format", fmt)
        assert r.exit_code == 0, r.output
        texts.append(r.stdout)
    assert "kernels: 48 unchanged; not run here: 30 variants of 4 kernels of the baseline" in texts[-1]
    for text in texts:
        assert "0 slower" not in text and "0 faster" not in text and "0 inconclusive" not in text


# ------------------------------------------------------------------------------ the HTML page

from tests.test_report_html import Browser, needs_chromium  # noqa: E402 - the Chromium harness


@pytest.fixture(scope="module")
def wide_browser():
    b = Browser(width=1400, height=900)
    yield b
    b.close()


def wide_document() -> dict[str, Any]:
    """Kernels in no particular order, a PR-chosen hostile name, one very long launch text and
    a static regression: what can push a page sideways or inject markup."""
    evil = "k<img src=x onerror=alert(1)>"
    long_launch = ", ".join(f"arg{i}=bf16[4096x14336]" for i in range(40)) + "; grid 4096x1x1; num_warps=8"
    timed = [
        row("fast_kernel", "t.py::test_fast", "faster", 0.95, 0.02, launch=launch(0)),
        row(evil, "t.py::test_<b>evil</b>", "unchanged", 1.001, 0.004, launch=launch(1)),
        *nine_launches()["timed"],
        row("wide_kernel", "t.py::test_wide", "inconclusive", 1.004, 0.5, launch=long_launch, half=0.01),
    ]
    doc = document(timed)
    doc["static_regressions"] = [
        {"kernel": "spill_kernel", "arch": "sm_90", "test": "t.py::test_spill", "reason": "spills 0 -> 4 KiB",
         "site": "ops.py::spill_kernel", "args": {"x": "fp32[1024]"}, "grid": [8, 1, 1], "config": None}
    ]  # fmt: skip
    doc["static_kernels"] = None  # grouped by the reader, as for a document without them
    return doc


def test_the_html_page_has_the_report_design_and_a_plot_per_kernel():
    html = ab.render_html(wide_document())
    assert '<meta name="viewport"' in html and 'id="verdict" class="banner bad"' in html
    assert html.count('class="chart ab-intervals"') == 4  # one plot per timed kernel
    assert html.count('<div class="scroll">') >= 4  # every wide table scrolls inside its box
    order = re.findall(r'<tr class="(\w+)"><td><span class="badge', html.split('id="kernels"')[1])
    assert order[:4] == ["slower", "inconclusive", "faster", "unchanged"]  # worst first
    assert "<img" not in html and "&lt;img" in html and "<b>evil" not in html


@needs_chromium
def test_the_html_page_fits_1400_px_and_is_screenshotted(wide_browser, tmp_path):
    page = tmp_path / "index.html"
    page.write_text(ab.render_html(wide_document()), encoding="utf-8")
    wide_browser.open(page)
    assert wide_browser.errors == [] and wide_browser.dialogs == []
    assert [u for u in wide_browser.requests if not u.startswith("file://")] == []
    overflow = wide_browser.eval("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the page scrolls sideways by {overflow} px"
    # a table wider than the page would scroll inside its own box, never the page
    assert wide_browser.eval(
        "[...document.querySelectorAll('table')].every(t => t.parentElement.classList.contains('scroll'))"
    )
    assert wide_browser.eval("document.querySelectorAll('img').length") == 0  # the name is text
    assert wide_browser.eval("document.querySelectorAll('svg.ab-intervals').length") == 4
    shot = wide_browser.screenshot(tmp_path / "ab-index.png", full_page=True)
    assert shot.stat().st_size > 10_000
    if out := os.environ.get("KPERF_SCREENSHOT_DIR"):
        shutil.copy(shot, Path(out) / "ab-index.png")


REAL = sorted(
    (Path(__file__).resolve().parents[1] / "benchmarks/results/issue32").glob("realrepo_ab_eval.part-*.json")
)


@pytest.mark.parametrize("path", REAL, ids=[p.stem.split("part-")[1] for p in REAL])
def test_real_h100_documents_render_in_every_format_and_size(tmp_path, path):
    """The documents of issue 32's Liger-Kernel runs on an H100 (slimmed, no base/head)."""
    doc = write(tmp_path, json.loads(path.read_text(encoding="utf-8"))["doc"])
    for limit in (2000, 5000, 65_000):
        r = report("--ab", str(doc), "--format", "markdown", "--max-chars", str(limit))
        assert r.exit_code == 0, r.output
        assert len(r.stdout) <= limit
        check_folds(r.stdout)
        lines = r.stdout.rstrip("\n").splitlines()
        if any("truncated" in line for line in lines):
            assert "truncated" in lines[-1]
    r = report("--ab", str(doc), "--format", "summary")
    assert r.exit_code == 0 and ab.MARKER not in r.stdout, r.output
    r = report("--ab", str(doc), "--format", "html", "-o", str(tmp_path / "site"))
    assert r.exit_code == 0 and (tmp_path / "site/index.html").is_file(), r.output


# ------------------------------------------------------------------- a deduplicated launch


def test_a_launch_stored_as_another_tests_identical_launch_names_that_test():
    """Two tests that make the identical launch (same kernel, specialization with the same shape
    id, options) are one stored variant, the last test's. The other test reads "timed as an
    identical launch in test X", never the failure message, in the document's row, the messages,
    the comment and the HTML."""
    from kperf_ci.model import Metric, VariantKey, VariantResult
    from kperf_ci.prcheck.document import _ab_rows, identical_elsewhere
    from kperf_ci.prcheck.pipeline import not_timed_messages

    first, kept = "t.py::test_softmax[dtype0-shape0]", "t.py::test_softmax_functional[dtype0-shape0]"
    spec = "*fp32, i32 @ dtype0-shape0"  # the shape id is the tests' parameter id: the same in both
    key = VariantKey("softmax_kernel", "H100", spec=spec, config="num_warps=4", test=kept)
    stored = VariantResult(
        key=key,
        metrics=[Metric("ab.ratio", 1.07), Metric("ab.ci_low", 1.06), Metric("ab.ci_high", 1.08)],
        artifacts={
            "launch": json.dumps({"site": "ops.py::softmax_kernel", "args": {"x": "fp32[64x4096]"}}),
            "ab": json.dumps({"verdict": "slower"}),
        },
    )
    results = [
        [first, key.label(), "slower +7%", "slower", key.id],  # timed, then replaced in the store
        [kept, key.label(), "slower +7%", "slower", key.id],
        ["t.py::test_other", "k H100", "no base version found", "no-base"],  # a 4-field line still reads
    ]
    rows = _ab_rows([stored], identical_elsewhere([stored], results))
    assert [r["identical_in"] for r in rows] == [[first]]
    messages = not_timed_messages([first, kept, "t.py::test_gone"], rows, results)
    said = f"{first}: timed as an identical launch in test {kept}"
    assert said in messages
    assert not any(first in m and "no changed launch was replayed" in m for m in messages)
    assert any("t.py::test_gone" in m and "no changed launch was replayed" in m for m in messages)
    doc = document(rows, messages=messages)
    (x,) = doc["kernels"][0]["launches"]
    assert x["tests"] == [kept] and x["identical_in"] == [first]
    assert doc["kernels"][0]["tests"] == [kept, first]
    text = ab.render_markdown(doc)
    launch_line = next(line for line in text.splitlines() if line.startswith("  - 🔴 slower +7.00%"))
    assert "timed as an identical launch in test" in launch_line and "test\\_softmax\\[" in launch_line
    html = ab.render_html(doc)
    note = f"{first}: timed as an identical launch in test {kept}"
    assert html.replace("<wbr>", "").count(note) == 2  # launch, notes (names wrap at <wbr>)


# --------------------------------------------------------------------------- the header's side


def test_static_only_is_decided_by_what_was_timed_not_by_the_device_name():
    """A timing pass whose run recorded no device name (a faked device, a machine without NVML)
    timed launches all the same: its header never says "static only"; a run that timed nothing
    does, whatever device it names."""
    timed_no_name = {**nine_launches(), "device": None}
    static = {**document([]), "timed": [], "kernels": [], "device": None}
    for render in (ab.render_markdown, ab.render_summary, ab.render_html):
        text = render(timed_no_name)
        assert "static only" not in text and "on a GPU (its name was not recorded)" in text
        assert "(static only)" in render(static)
    assert "on NVIDIA H100 80GB HBM3" in ab.render_markdown(nine_launches())


# ------------------------------------------------------------------------- the static gate


def static_entry(kernel: str, reason: str, *, test: str = "t.py::test_a", n: int = 4096) -> dict[str, Any]:
    """One entry of the static verdict (judge/static_verdict.py) as the document stores it."""
    return {"kernel": kernel, "arch": "sm_90", "test": test, "reason": reason, "site": f"ops.py::{kernel}",
            "args": {"x": f"fp32[{n}]", "n": str(n)}, "grid": [4, 1, 1],
            "config": "num_warps=2,num_stages=3"}  # fmt: skip


def test_the_static_gate_reads_regressed_improved_or_changed():
    """One vocabulary for the static gate, in its own column: a change that got better (fewer
    spills, a higher occupancy) reads "improved", in the comment, the HTML and the timed table."""
    doc = document([row("timed_kernel", "t.py::test_t", "faster", 0.95, 0.02, launch=launch(0),
                        site="ops.py::timed_kernel")])  # fmt: skip
    doc["tests"] = [
        {"test": "t.py::test_a", "status": "changed", "changes": [],
         "launches": [{"site": f"ops.py::{k}", "status": "changed", "changes": ["num_warps 4 -> 2"]}
                      for k in ("spill_kernel", "fast_kernel", "busy_kernel", "timed_kernel")]},
    ]  # fmt: skip
    doc["static_regressions"] = [static_entry("spill_kernel", "spills +16 bytes > 0 bytes allowed (default)")]
    doc["static_kernels"] = None
    doc["static_improved"] = [
        static_entry("fast_kernel", "spills 184 bytes -> 0 bytes"),
        static_entry("timed_kernel", "occupancy 25% -> 50% (registers 128 -> 64)", n=64),
    ]
    doc["static_changed"] = [static_entry("busy_kernel", "sass.instructions 100 -> 120 (+20.0%)")]
    assert ab.static_gate(doc) == {
        "ops.py::spill_kernel": "regressed",
        "ops.py::fast_kernel": "improved",
        "ops.py::busy_kernel": "changed",
        "ops.py::timed_kernel": "improved",
    }
    text = ab.render_markdown(doc)
    gates = ("| 🔴 regressed", "| 🟢 improved", "| ⚪ changed")
    table = [line for line in text.splitlines() if line.startswith(gates)]
    assert [line.split(" | ")[0] for line in table] == [
        "| 🔴 regressed",
        "| 🟢 improved",
        "| 🟢 improved",
        "| ⚪ changed",
    ]
    fast = next(line for line in table if "fast\\_kernel" in line)
    assert "1 of 1 changed launch improved" in fast
    # the cause (under the table): the launch's option change first, then what the verdict says moved
    why = next(line for line in text.splitlines() if line.startswith("- **fast\\_kernel**"))
    assert why.endswith(": sm\\_90: num\\_warps 4 → 2; spills 184 B → 0 B"), why
    timed_row = next(line for line in text.splitlines() if line.startswith("| 🟢 faster | timed\\_kernel"))
    assert "| improved |" in timed_row  # the timed table's static column, in the same words
    html = ab.render_html(doc)
    for word in ("regressed", "improved", "changed"):
        assert f'<span class="badge {word}">{word}</span>' in html
    assert "kernels improved (static)" in html
    # kperf ab stores the verdict's improved and changed launches with the document
    from kperf_ci.prcheck.document import ABReport, check_ab_document

    stored = ABReport("HEAD~1", "b" * 40, static_improved=doc["static_improved"]).to_dict()
    assert check_ab_document(stored, "ab.json")["static_improved"] == doc["static_improved"]
    assert ab.static_gate(stored) == {"ops.py::fast_kernel": "improved", "ops.py::timed_kernel": "improved"}


def test_the_header_and_kernel_cell_of_a_slimmed_document_read_cleanly():
    """Found by the reviewer walk (docs/reviewer-walk/): a document that records no revisions
    read "Base `` () vs head ``"; a kernel cell said the kernel's name twice (its site)."""
    doc = {k: v for k, v in nine_launches().items() if k not in ("base", "head")}
    for text in (ab.render_markdown(doc), ab.render_html(doc)):
        assert "``" not in text and "()" not in text and "<code></code>" not in text
        assert "not recorded in this document" in text
    top = next(line for line in ab.render_markdown(doc).splitlines() if line.startswith("| 🔴 slower |"))
    assert "| softmax\\_kernel |" in top and "ops.py::softmax" not in top
    assert "- **softmax\\_kernel** in ops.py: " in ab.render_markdown(doc)
    assert ">ops.py</code>" in ab.render_html(doc)
    # each timed launch says its own cause before its arguments
    one = document(
        [row("k", "t.py::a", "slower", 1.05, 0.01, launch=launch(0), changes=["num_warps 4 -> 1"])]
    )
    line = next(x for x in ab.render_markdown(one).splitlines() if x.startswith("  - 🔴 slower +5.00%"))
    assert "ns); cause: num\\_warps 4 → 1; launch: x=fp32\\[1024x1024\\]" in line, line


def test_a_static_check_that_timed_nothing_never_reads_as_a_timed_result():
    """Issue 35's walk: a static-only `kperf ab` whose launches were all identical read
    "🟢 no kernel slower than the base", as if timed; one whose launches compiled on
    neither side must say they could not be compared."""
    from kperf_ci.report.ab_view import headline

    same = {"counts": {"identical": 4}, "tests": [], "timed": [], "kernels": []}
    assert headline(same).startswith("🟢 every launch identical to the base (code and work)"), headline(same)
    assert "slower" not in headline(same)
    unknown = {"counts": {"unknown": 3, "identical": 1}, "tests": [], "timed": [], "kernels": []}
    assert headline(unknown).startswith("🟡 3 tests could not be compared (compiled on neither side)")
    timed = {"counts": {"unchanged": 1}, "timed": [{"verdict": "unchanged"}], "kernels": [{}]}
    assert headline(timed).startswith("🟢 no kernel slower than the base")


def test_launches_all_alike_show_no_worst_one_but_the_largest():
    """Walk 3 of issue 38, J2-6: attorch's cut autotune config changed 8 launches alike, untimed,
    and the "worst launch" cell showed the first and smallest, a 1x96 input on grid 1x1x1."""

    def entry(test: str, n: int, grid: int, reason: str = "autotune configs: num_warps=32 dropped") -> dict:
        return {**static_entry("k", reason, test=test, n=n), "grid": [grid, 1, 1]}

    tests = [("t.py::test_a[96]", 96, 1), ("t.py::test_a[4096]", 4096, 32), ("t.py::test_a[1024]", 1024, 8)]
    doc = document([])
    doc["static_kernels"] = None
    doc["static_changed"] = [entry(*t) for t in tests]
    row_of = next(line for line in ab.render_markdown(doc).splitlines() if line.startswith("| ⚪ changed"))
    assert r"all 3 alike; largest: x=fp32\[4096\]; grid 32x1x1" in row_of, row_of
    doc["static_changed"][2] = entry(*tests[2], reason="sass.instructions 100 -> 120 (+20.0%)")
    row_of = next(line for line in ab.render_markdown(doc).splitlines() if line.startswith("| ⚪ changed"))
    assert "alike" not in row_of and r"x=fp32\[96\]; grid 1x1x1" in row_of, row_of
