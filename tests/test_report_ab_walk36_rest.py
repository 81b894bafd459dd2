"""Issue 36's reviewer walk, the rest (docs/reviewer-walk/fresh-walk-2026-11-27/NOTES.md items 11
and 13 to 16): the occupancy cause names what limits it, in both modes; metric ids read as words;
shapes in the kernel's order; one kernel cell and one column order for the timed and the static
tables."""

from __future__ import annotations

import copy
import html as html_lib
import json
import re
from typing import Any

from kperf_ci import metrics
from kperf_ci.judge.launch_diff import LaunchChange, launch_changes
from kperf_ci.judge.launch_diff import TestDiff as ABTestDiff
from kperf_ci.judge.policy import ThresholdPolicy
from kperf_ci.judge.static_verdict import judge
from kperf_ci.report import ab
from tests.test_report_ab import document, launch, row, static_entry
from tests.test_report_ab_walk36 import GPU_DOC, text_of

CODE = {"sass": "a", "spills": 0, "spill_loads": 0, "shared_bytes": 0, "sass.instructions": 100}


def _row(warps: int, registers: int, sass: str) -> dict[str, Any]:
    return {
        "config": f"num_warps={warps},num_stages=3",
        "args": {"X": "fp32[370x1000]", "N": "1000"},
        # more blocks than SMs: a grid of 37 puts one block on an SM, where occupancy does not
        # bind (the third walk's item 1, tests/test_static_verdict.py)
        "grid": [370, 1, 1],
        "code": {"sm_90": {**CODE, "registers": registers, "sass": sass}},
    }


def test_the_occupancy_cause_names_what_limits_it_on_each_side():
    """num_warps 4 -> 1 at 40 registers already gives 50% (32 blocks per SM at most): the
    registers 40 -> 128 explain only 50% -> 25%, and the cause said "(registers 40 -> 128)"."""
    lc = LaunchChange(
        "layernorm", "k.py::layernorm", "changed", ["num_warps 4 -> 1"], _row(4, 40, "a"), _row(1, 128, "b")
    )
    (reg,) = judge([ABTestDiff("t.py::t", "changed", [lc])], ThresholdPolicy()).regressions
    assert reg["reason"] == (
        "theoretical occupancy 75% -> 50% (num_warps 4 -> 1: at most 32 blocks per SM) -> 25% "
        "(registers 40 -> 128)"
    )
    # the report's per-launch line keeps the option change (it said only the occupancy)
    doc = {**document([]), "device": None, "timed": [], "kernels": []}
    doc["tests"] = [
        {"test": "t.py::t", "status": "changed", "changes": [],
         "launches": [{"site": "ops.py::k", "status": "changed",
                       "changes": ["num_warps 4 -> 1", "BLOCK 8 -> 16"]}]},
    ]  # fmt: skip
    doc["static_regressions"], doc["static_kernels"] = (
        [static_entry("k", reg["reason"], test="t.py::t")],
        None,
    )
    launch_line = next(
        x for x in ab.render_markdown(doc).splitlines() if x.startswith("- ") and "regressed" in x
    )
    assert "BLOCK 8 → 16; theoretical occupancy 75% → 50% (num\\_warps 4 → 1: at most" in launch_line


def test_a_timed_launch_says_its_occupancy_change_too():
    """GPU mode showed no occupancy for 16 -> 4 warps, registers 37 -> 110 (75% -> 25%) while
    static mode led with it: the launch diff, which both modes show, says it."""
    b, h = _row(16, 37, "a"), _row(4, 110, "b")
    changes = launch_changes(b, h)
    assert "sm_90 theoretical occupancy 75% -> 25% (registers 37 -> 110)" in changes
    assert changes[0] == "num_warps 16 -> 4"
    # num_warps alone moving it is said with its limit
    assert "sm_90 theoretical occupancy 75% -> 50% (num_warps 4 -> 1: at most 32 blocks per SM)" in (
        launch_changes(_row(4, 40, "a"), _row(1, 40, "b"))
    )


# ---- item 11: metric ids read as words, one unit spelling


def test_every_metric_has_a_display_name_that_is_no_id():
    for s in metrics.CATALOGUE:
        assert s.display and s.display.strip() == s.display, s.pattern
        # an id has "_" or "." between words; a launch option keeps the name users write
        assert (
            s.display == s.pattern
            or not re.fullmatch(r"[a-z0-9_.<>]+", s.display)
            or ("_" not in s.display and "." not in s.display)
        ), s.pattern
    assert metrics.display_name("shared_bytes") == "shared memory"
    assert metrics.display_name("sass.instructions") == "SASS instructions"
    assert metrics.display_name("sass.FMA") == "SASS FMA instructions"
    assert metrics.display_name("region.loop0.fraction") == "loop0 share"
    assert metrics.display_name("not.in.the.catalogue") == "not.in.the.catalogue"
    assert metrics.moved_text("shared_bytes", 0, 4096) == "shared memory 0 B -> 4,096 B"


def test_a_launch_diff_says_metrics_by_their_display_names_and_units():
    """ "shared_bytes 3,072 bytes" mixed a metric id and a spelled unit (walk item 11)."""
    b, h = _row(4, 40, "a"), _row(4, 40, "b")
    h["code"]["sm_90"].update({"shared_bytes": 4096, "sass.instructions": 120})
    (sass,) = [c for c in launch_changes(b, h) if "SASS changed" in c]
    assert sass == "sm_90 SASS changed: shared memory 0 B -> 4,096 B, SASS instructions 100 -> 120"
    # the stored ids are data: the manifest row keeps its keys
    assert h["code"]["sm_90"]["shared_bytes"] == 4096


def test_an_older_documents_metric_ids_read_as_words_and_the_document_is_left_as_it_is():
    """The committed GPU document (written before display names) says "sass.instructions 375 ->
    1,252"; its static diff of another document "shared_bytes 1,040 bytes -> 0 bytes". Every
    report reads them as today's words; the document is data and stays as stored."""
    doc = json.loads(GPU_DOC.read_text(encoding="utf-8"))
    doc["tests"][0]["launches"][0]["changes"] = ["sm_90 SASS changed: shared_bytes 1,040 bytes -> 0 bytes"]
    doc["static_changed"] = [
        static_entry(
            "k", "registers 18 -> 22 (occupancy 100% -> 50%: not lowered by registers or shared_bytes)"
        )
    ]
    stored = copy.deepcopy(doc)
    text, html = ab.render_markdown(doc), html_lib.unescape(text_of(ab.render_html(doc)))
    terminal = "\n".join(ab.terminal_lines(doc))
    for out in (text.replace("\\_", "_"), html, terminal):
        assert "sass.instructions" not in out and "shared_bytes" not in out
        assert not re.search(r"\d bytes", out)
    assert "SASS instructions 375 → 1,252" in text and "SASS instructions 375 → 1,252" in html
    assert "shared memory 1,040 B → 0 B" in text and "not lowered by registers or shared memory" in html
    assert doc == stored


# ---- item 16: arguments in the kernel's signature order, the worst launch's tensors named

#: layernorm's signature (examples/kernels/layernorm.py), which ASCII order turns into
#: "B, BLOCK_SIZE, Mean, N, Rstd, W, X, Y, eps, stride"
_LN = [("X", "37x1000"), ("Y", "37x1000"), ("W", "1000"), ("B", "1000"), ("Mean", "37"), ("Rstd", "37")]


def _layernorm_row(n: int = 1000, block: int = 1024, grid: tuple[int, ...] = (37, 1, 1)) -> dict[str, Any]:
    """A manifest row of a layernorm launch as `kperf ab` reads it back: through its JSON, whose
    keys are sorted."""
    from kperf_ci.capture.static.launch_spec import ArgSpec, LaunchSpec
    from kperf_ci.capture.static.manifest import build_manifest, manifest_json

    args = [ArgSpec(name, "tensor", dtype="fp32") for name, _ in _LN]
    args += [
        ArgSpec("stride", "int", value=n),
        ArgSpec("N", "int", value=n),
        ArgSpec("eps", "float", value=1e-5),
    ]
    args += [ArgSpec("BLOCK_SIZE", "int", constexpr=True, value=block)]
    shapes = {name: [int(d) for d in shape.split("x")] for name, shape in _LN}
    name = "_layer_norm_fwd_fused"
    ls = LaunchSpec(kernel=name, qualname=name, module="kernels.layernorm",
                    source_file="", args=tuple(args), options={}, grid=grid, spec="",
                    config="num_warps=4,num_stages=3,num_ctas=1", test="t.py::t", shapes=shapes)  # fmt: skip
    (row,) = json.loads(manifest_json(build_manifest([ls], [], ["sm_90"], None)))["t.py::t"]
    row["code"] = {"sm_90": {**CODE, "registers": 40}}
    return row


def test_a_launch_lists_its_arguments_in_the_kernels_order_and_its_worst_shape_by_name():
    """The manifest is JSON with sorted keys: launch lines read "BLOCK_SIZE=1024, B=fp32[1000],
    Mean=..., X=...", and the worst-launch cell "fp32[1000], fp32[37], fp32[37x1000]" (B,
    Mean/Rstd, X/Y), the main tensor last and unnamed (walk item 16)."""
    from kperf_ci.judge.group import launch_text

    # 370 blocks: more than sm_90's SMs, so the registers' occupancy regresses
    b, h = _layernorm_row(grid=(370, 1, 1)), _layernorm_row(n=2000, block=2048, grid=(370, 1, 1))
    assert h["arg_order"] == ["X", "Y", "W", "B", "Mean", "Rstd", "stride", "N", "eps", "BLOCK_SIZE"]
    text = launch_text(h["args"], h["grid"], h["config"], h["arg_order"])
    assert text.startswith("X=fp32[37x1000], Y=fp32[37x1000], W=fp32[1000], B=fp32[1000], Mean=fp32[37]")
    # what changed, in the signature's order too (ASCII put BLOCK_SIZE first)
    h["code"]["sm_90"].update(sass="b", registers=128)
    changes = launch_changes(b, h)
    assert changes[:3] == ["stride 1000 -> 2000", "N 1000 -> 2000", "BLOCK_SIZE 1024 -> 2048"]
    # the static verdict's entry carries the order into the document and its reports
    lc = LaunchChange("layernorm", "kernels/layernorm.py::_layer_norm_fwd_fused", "changed", changes, b, h)
    (reg,) = judge([ABTestDiff("t.py::t", "changed", [lc])], ThresholdPolicy()).regressions
    doc = {**document([]), "device": None, "timed": [], "kernels": [], "static_kernels": None}
    doc["static_regressions"] = json.loads(json.dumps([reg], sort_keys=True))  # stored sorted, too
    text = ab.render_markdown(doc)
    (table_row,) = [x for x in text.splitlines() if x.startswith("| 🔴 regressed")]
    assert "| X=fp32\\[37x1000\\], W=fp32\\[1000\\], Mean=fp32\\[37\\]; grid 370x1x1 |" in table_row
    (line,) = [x for x in text.splitlines() if x.startswith("- ") and "regressed" in x]
    assert "; X=fp32\\[37x1000\\], Y=fp32\\[37x1000\\], W=fp32\\[1000\\]" in line


def test_a_timed_launch_keeps_the_kernels_order_through_the_stored_variant():
    """The timing pass stores the launch as canonical (sorted) JSON; the document's launch line
    is built from it in the signature's order, the base's too."""
    from kperf_ci.capture.launches.ab_launch import PlanEntry
    from kperf_ci.measure.measure_replay import _launch_doc
    from kperf_ci.model import VariantKey, VariantResult, canonical_json
    from kperf_ci.prcheck.document import _ab_rows

    b, h = _layernorm_row(), _layernorm_row(n=2000)
    entry = PlanEntry("t.py::t", "kernels/layernorm.py::_layer_norm_fwd_fused", "changed", [], h, b)

    class Launch:
        grid_seen = (37, 1, 1)
        count = 1

    r = VariantResult(VariantKey("layernorm", "NVIDIA H100 80GB HBM3", test="t.py::t"),
                      artifacts={"launch": canonical_json(_launch_doc(entry, Launch())),
                                 "ab": canonical_json({"verdict": "slower"})})  # fmt: skip
    (row,) = _ab_rows([r])
    assert row["launch"].startswith("X=fp32[37x1000], Y=fp32[37x1000], W=fp32[1000], B=fp32[1000]")
    assert row["base_launch"].startswith("X=fp32[37x1000], Y=fp32[37x1000], W=fp32[1000], B=fp32[1000]")


def test_an_older_document_without_the_order_still_renders_its_shapes_named():
    """A document (or manifest) written before ``arg_order`` keeps its stored order; its shapes
    are named all the same."""
    from kperf_ci.judge.group import launch_text

    old = static_entry("k", "registers 40 -> 128")
    old["args"] = {"B": "fp32[1000]", "BLOCK_SIZE": "1024", "Mean": "fp32[37]", "X": "fp32[37x1000]"}
    assert "arg_order" not in old
    assert launch_text(old["args"], old["grid"], old["config"]).startswith("B=fp32[1000], BLOCK_SIZE=1024")
    doc = {**document([]), "device": None, "timed": [], "kernels": [], "static_kernels": None}
    doc["static_regressions"] = [old]
    (table_row,) = [x for x in ab.render_markdown(doc).splitlines() if x.startswith("| 🔴 regressed")]
    assert "B=fp32\\[1000\\], Mean=fp32\\[37\\], X=fp32\\[37x1000\\]; grid 4x1x1" in table_row
    # the committed GPU document, timed before either: its launches named by their first tensor
    gpu = json.loads(GPU_DOC.read_text(encoding="utf-8"))
    assert "| a=bf16\\[369x4231\\]; grid 369x1x1 |" in ab.render_markdown(gpu)


# ---- item 15: one kernel cell and one column order for the timed and the static tables


def _both_tables() -> dict[str, Any]:
    """A document with a timed kernel and a kernel regressed statically, each named by a marker
    ("layernorm", "softmax") other than its Triton function."""
    site = "kernels/layernorm.py::_layer_norm_fwd_fused"
    doc = document([row("layernorm", "t.py::a", "slower", 1.1, 0.01, launch=launch(0), site=site)])
    reg = static_entry("softmax (softmax_kernel)", "registers 27 -> 72", test="t.py::b")
    doc["static_regressions"] = [{**reg, "site": "kernels/softmax.py::softmax_kernel"}]
    doc["static_kernels"] = None
    return doc


def _columns(header: str) -> list[str]:
    return [c.strip() for c in header.strip().strip("|").split("|")]


def test_the_timed_and_static_tables_share_one_kernel_cell_and_one_column_order():
    """GPU "_geglu_tanh_forward_kernel (src/.../geglu.py)" against static "layernorm
    (_layer_norm_fwd_fused) in kernels/layernorm.py"; "launches" before "static" in the timed
    table, last in the static one (walk item 15)."""
    doc = _both_tables()
    text = ab.render_markdown(doc)
    timed_head = _columns(next(x for x in text.splitlines() if x.startswith("| time |")))
    static_head = _columns(next(x for x in text.splitlines() if x.startswith("| static |")))
    # the cause is a line under each table (second walk, item 1), the file said there
    shared = ["kernel", "worst launch", "launches"]
    for head in (timed_head, static_head):
        head = [c.split(" (")[0] for c in head]
        assert [c for c in head if c in shared] == shared, head
        assert head[1:3] == ["kernel", "worst launch"] and "cause" not in head, head
    timed_row = _columns(next(x for x in text.splitlines() if x.startswith("| 🔴 slower |")))
    static_row = _columns(next(x for x in text.splitlines() if x.startswith("| 🔴 regressed |")))
    assert timed_row[1] == "layernorm (\\_layer\\_norm\\_fwd\\_fused)"
    assert static_row[1] == "softmax (softmax\\_kernel)"
    assert "- **layernorm (\\_layer\\_norm\\_fwd\\_fused)** in kernels/layernorm.py: " in text
    assert "- **softmax (softmax\\_kernel)** in kernels/softmax.py: " in text
    # the HTML: the same columns in the same order, the same cell (name, then the file)
    html = ab.render_html(doc)
    heads, cells = {}, {}
    for table in ("kernels", "static"):
        part = html.split(f'<table id="{table}">', 1)[1].split("</table>", 1)[0]
        heads[table] = [text_of(th).strip() for th in re.findall(r"<th[^>]*>(.*?)</th>", part)]
        cells[table] = re.search(r'<td class="kname">(.*?)</td>', part, re.S).group(1)
    # the page has the room for the cause in its tables (the comment says it under them)
    assert heads["kernels"] == [*timed_head, "cause"] and heads["static"] == [*static_head, "cause"]
    assert re.sub(r"<a [^>]*>|</a>", "", cells["kernels"]) == (
        'layernorm (_layer_norm_fwd_fused)<br><code class="small">kernels/layernorm.py</code>'
    )
    assert cells["static"] == 'softmax (softmax_kernel)<br><code class="small">kernels/softmax.py</code>'


# ---- item 14, in the reports: a timed launch's cause states its occupancy change as a static one


def test_a_timed_cause_states_the_occupancy_change_as_the_static_cause_does():
    """The same change (num_warps 4 -> 1, registers 40 -> 128: 75% -> 25%) timed on a GPU and
    judged statically: the static cause leads with "theoretical occupancy 75% -> 25% (num_warps
    4 -> 1: ...; registers 40 -> 128)"; the timed one said the SASS line first and the occupancy
    last, after 'registers 40 -> 128, SASS instructions ...'. Both now read alike; a document
    without the occupancy line (written before kperf said it for timed launches) renders
    without it."""
    b, h = _row(4, 40, "a"), _row(1, 128, "b")
    h["code"]["sm_90"]["sass.instructions"] = 300
    changes = launch_changes(b, h)
    timed = document([row("layernorm", "t.py::a", "slower", 1.2, 0.01, launch=launch(0), changes=changes)])
    text = ab.render_markdown(timed)
    # the cause: a line of its own under the table (second walk, item 1)
    cause = next(x for x in text.splitlines() if x.startswith("- **layernorm**")).split(": ", 1)[1]
    occupancy = (
        "theoretical occupancy 75% → 50% (num\\_warps 4 → 1: at most 32 blocks per SM) → 25% "
        "(registers 40 → 128)"
    )
    sass = "sm\\_90 SASS changed: registers 40 → 128, SASS instructions 100 → 300"
    # the option change leads, though the occupancy names it too (third walk, item 5)
    assert cause == f"num\\_warps 4 → 1; sm\\_90 {occupancy}; {sass}"
    (line,) = [x for x in text.splitlines() if x.startswith("  - 🔴 slower")]
    assert f"; cause: num\\_warps 4 → 1; sm\\_90 {occupancy}; sm\\_90 SASS changed" in line
    html = html_lib.unescape(text_of(ab.render_html(timed)))
    assert "sm_90 theoretical occupancy 75% → 50% (num_warps 4 → 1" in html.split("SASS changed")[0]
    # the static cause of the same pair: the same words, the arch in its own column
    lc = LaunchChange("k", "k.py::k", "changed", changes, b, h)
    (reg,) = judge([ABTestDiff("t.py::a", "changed", [lc])], ThresholdPolicy()).regressions
    static = {**document([]), "device": None, "timed": [], "kernels": [], "static_kernels": None}
    static["static_regressions"] = [reg]
    why = next(x for x in ab.render_markdown(static).splitlines() if x.startswith("- **k**"))
    assert why.endswith(f": sm\\_90: {occupancy}")
    # the committed GPU document predates it: no occupancy said, nothing invented
    gpu = json.loads(GPU_DOC.read_text(encoding="utf-8"))
    assert "occupancy" not in ab.render_markdown(gpu) and "occupancy" not in ab.render_html(gpu)


def test_the_static_diff_per_test_says_the_occupancy_before_the_code_and_whole():
    """The per-test fold cut its line at 200 characters inside the occupancy change ("sm_90
    theoretical occupancy 100% -> 43.8% (num_w…"), said after the SASS line."""
    b, h = _row(4, 40, "a"), _row(1, 128, "b")
    h["code"]["sm_90"].update({"sass.instructions": 300, "shared_bytes": 4096})
    lc = LaunchChange("layernorm", "kernels/layernorm.py::_layer_norm_fwd_fused", "changed", [], b, h)
    lc.changes = launch_changes(b, h)
    doc = {**document([]), "device": None, "timed": [], "kernels": []}
    doc["tests"] = [ABTestDiff("t.py::t", "changed", [lc]).to_dict()]
    text = ab.render_markdown(doc)
    fold = text.split("Static diff per test", 1)[1]
    (line,) = [x for x in fold.splitlines() if x.startswith("  - layernorm")]
    name = "layernorm (\\_layer\\_norm\\_fwd\\_fused)"
    # the option change first, as the terminal says it (third walk, item 5)
    occupancy = "sm\\_90 theoretical occupancy 75% → 50% (num\\_warps"
    assert line.startswith(f"  - {name}: num\\_warps 4 → 1; {occupancy}")
    assert "…" not in line and line.endswith("SASS instructions 100 → 300")
    html = html_lib.unescape(text_of(ab.render_html(doc)))
    assert "_layer_norm_fwd_fused): num_warps 4 → 1; sm_90 theoretical occupancy 75% → 50%" in html
