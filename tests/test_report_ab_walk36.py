"""Issue 36's reviewer walk of the A/B reports (docs/reviewer-walk/): what a reviewer misread or
could not read in the PR comment and the HTML page, each fixed and held here."""

from __future__ import annotations

import json
import re
from pathlib import Path

from kperf_ci.report import ab
from kperf_ci.report.ab_html import breakable
from tests.test_report_ab import document, launch, nine_launches, row
from tests.test_report_ab import wide_browser as wide_browser  # noqa: F401 - the fixture
from tests.test_report_html import needs_chromium

ROOT = Path(__file__).resolve().parents[1]
# The H100 document the first three reviewer walks read (slimmed by realrepo_ab_eval, no revisions,
# arguments in ASCII order): kept as a fixture, since documents of earlier shapes must render;
# docs/reviewer-walk/ now shows a whole H200 document (scripts/reviewer_walk_render.py)
GPU_DOC = ROOT / "tests/data/h100-launch_option-slim.ab.json"
CSS = ROOT / "kperf_ci/report/static/ab.css"


def text_of(html: str) -> str:
    """The page's words as a reader sees them: tags gone, whitespace one space."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html))


def banner(html: str) -> str:
    return text_of(html.split('id="verdict"', 1)[1].split("</div></div>", 1)[0])


def test_the_html_banner_keeps_a_space_between_its_words():
    """ "vs headon NVIDIA H100" and "head 99c5159b3f(static only)" were the banner's words."""
    gpu = document([row("k", "t.py::a", "slower", 1.05, 0.01, launch=launch(0))])
    assert "vs head aaaaaaaaaa on NVIDIA H100 80GB HBM3" in banner(ab.render_html(gpu))
    static = {**gpu, "device": None, "timed": [], "kernels": []}
    assert banner(ab.render_html(static)).rstrip().endswith("vs head aaaaaaaaaa (static only)")
    slim = {k: v for k, v in gpu.items() if k not in ("base", "head")}
    assert "(revisions not recorded in this document) vs head on NVIDIA" in banner(ab.render_html(slim))


def test_names_wrap_at_separators_never_mid_word():
    """The page wrapped "_geglu_tanh_forw|ard_kernel" and "40 -|> 128" with room to spare
    (overflow-wrap: anywhere): names now break only after "::" and before a parameter id's "["
    (second walk, item 9: never inside a path, a shape or a parameter id)."""
    assert str(breakable("src/ops/geglu.py::k_x[dtype0-1] 40 -> 128")) == (
        "src/ops/geglu.py::<wbr>k_x<wbr>[dtype0-1] 40 -&gt; 128"
    )
    assert not re.search(r"overflow-wrap:\s*anywhere\s*;", CSS.read_text(encoding="utf-8"))
    html = ab.render_html(nine_launches())
    assert "tests/test_softmax.py::<wbr>test_softmax<wbr>[0]" in html
    assert "x=fp32[1024x1024]," in html  # a shape whole
    assert "<wbr>" not in re.search(r'<a href="#k1">(.*?)</a>', html)[1]  # "softmax_kernel" whole


def test_one_word_for_the_cause_and_a_header_for_the_time_verdict():
    """ "cause", "why", "what moved", "what changed" named one idea; the comment's verdict column
    had no header. A timed launch's cause sits in its own column, not under its launch text."""
    doc = document(
        [
            row("k", "t.py::a", "slower", 1.05, 0.01, launch=launch(0), changes=["num_warps 4 -> 1"]),
            row("k", "t.py::b", "unchanged", 1.001, 0.05, launch=launch(1)),
        ]
    )
    text, html = ab.render_markdown(doc), ab.render_html(doc)
    assert "| time | kernel |" in text
    for old in ("what moved", "what changed", "<th>why</th>"):
        assert old not in text and old not in html, old
    per_launch = html.split('<table class="launches">', 1)[1].split("</table>", 1)[0]
    assert "<th>cause</th><th>launch</th>" in per_launch
    cells = re.findall(r'<td class="cause">(.*?)</td>\s*<td class="launch">(.*?)</td>', per_launch, re.S)
    assert "num_warps 4\u00a0→ 1" in cells[0][0] and "<ul" not in cells[0][1]
    assert "the 99% interval includes zero" in cells[1][0]


def test_a_test_whose_launches_changed_reads_changed_as_in_the_terminal():
    """One word for one thing (second walk, item 6): "changed", as the terminal and the JSON say."""
    doc = document([row("k", "t.py::a", "slower", 1.05, 0.01, launch=launch(0))])
    doc["tests"][0]["launches"] = [{"site": "ops.py::k", "status": "changed", "changes": []}]
    text, html = ab.render_markdown(doc), ab.render_html(doc)
    assert "- **changed** t.py::a" in text and "differs" not in text
    assert ">differs<" not in html and "tests changed" in html
    assert '<span class="badge changed">changed</span>' in html  # the static gate keeps its word


def test_the_plot_draws_each_launchs_own_threshold_and_never_cuts_a_label():
    """The band was captioned "the threshold (±1.65%)", launch #1's floor over its base time;
    labels were cut ("grid 3…") and floor bars ran under them."""
    html = ab.render_html(json.loads(GPU_DOC.read_text(encoding="utf-8")))
    svg = html.split('class="chart ab-intervals"', 1)[1].split("</svg>", 1)[0]
    assert "…" not in svg and "#1 a=bf16[369x4231]; grid 369x1x1" in svg
    assert "threshold ±1.65% for this launch" in svg and "threshold ±0.50% for this launch" in svg
    assert "the threshold (±" not in html
    left = min(float(x) for x in re.findall(r'class="tick" x="([\d.]+)"[^>]*text-anchor="end"', svg) or ["0"])
    rects = [float(x) for x in re.findall(r'<rect class="band \w+" x="([\d.]+)"', svg)]
    assert rects and min(rects) > left  # no band under the labels


def test_times_stay_on_one_line_at_one_precision():
    """ "6.048 / µs → / 7.969 / µs" wrapped in the comment's table; "1.6 µs" stood by "6.048 µs"."""
    doc = nine_launches()
    top = next(x for x in ab.render_markdown(doc).splitlines() if x.startswith("| 🔴 slower |"))
    # the comment says the change in time too (issue 36's fourth walk, item 11)
    assert "| 6.60\u00a0µs\u00a0→\u00a07.07\u00a0µs\u00a0(+471\u00a0ns) |" in top
    assert ab.times_text({"base_ms": 0.0016, "head_ms": 0.006048}) == "1.60 µs → 6.05 µs"
    slower = {"base_ms": 0.0231, "head_ms": 0.0370, "verdict": "slower"}
    assert ab.times_text(slower, True) == "23.1 µs → 37.0 µs (+13.9 µs)"
    faster = {"base_ms": 0.00106, "head_ms": 0.001043, "verdict": "faster"}
    assert ab.times_text(faster, True) == "1.06 µs → 1.04 µs (-17.0 ns)"


def test_identical_tests_are_a_count_not_empty_rows():
    doc = document([row("k", "t.py::a", "slower", 1.05, 0.01, launch=launch(0))])
    doc["tests"] += [{"test": f"t.py::same[{i}]", "status": "identical", "changes": []} for i in range(5)]
    html = ab.render_html(doc)
    assert "t.py::<wbr>same" not in html and "badge identical" not in html
    assert "5 test(s) identical to the base" in html


@needs_chromium
def test_the_real_gpu_page_wraps_only_where_it_must_at_1400_px(wide_browser, tmp_path):  # noqa: F811
    """On the walk's GPU document: the kernel name on one line, and neither the kernel table nor
    the per-launch table wider than its box (the latter clipped its "tests" column); the folded
    per-test table may scroll in its box (test names of 40 characters without a separator)."""
    page = tmp_path / "index.html"
    page.write_text(ab.render_html(json.loads(GPU_DOC.read_text(encoding="utf-8"))), encoding="utf-8")
    wide_browser.open(page)
    assert wide_browser.eval("document.querySelector('#kernels .kname a').getClientRects().length") == 1
    wide = wide_browser.eval(
        "[...document.querySelectorAll('div.scroll')].filter(d => d.scrollWidth > d.clientWidth + 1"
        " && d.firstElementChild.id !== 'timed')"
        ".map(d => d.firstElementChild.id || d.firstElementChild.className)"
    )
    assert wide == []


def test_a_launch_without_its_own_threshold_is_drawn_with_the_documents():
    """The plot's fallback band was the setting's default (0.5%) whatever the run was judged by:
    a project with ab_threshold = 0.05 saw its launches drawn against ±0.50%."""
    doc = json.loads(GPU_DOC.read_text(encoding="utf-8"))
    for t in doc["timed"]:
        t.pop("threshold", None)
    doc["ab_policy"] = {"ab_threshold": 0.05, "ab_floor_ms": 0.0001, "ab_precision": 0.005}
    svg = ab.render_html(doc).split('class="chart ab-intervals"', 1)[1].split("</svg>", 1)[0]
    assert "threshold ±5.00% for this launch" in svg and "threshold ±0.50%" not in svg
