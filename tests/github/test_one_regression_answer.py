"""Issue 38: one answer to "is this a regression?" (kperf_ci.judge.verdict.regression), read by
the exit code, the commit status, the PR comment, the terminal and the HTML. A document or a
comparison with a regression is red everywhere; one without is green everywhere."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import make_info, make_result

from kperf_ci import store
from kperf_ci.github.body import from_ab
from kperf_ci.judge.compare import compare_runs
from kperf_ci.judge.verdict import regression
from kperf_ci.model import RunRecord
from kperf_ci.prcheck.document import AB_BLOB, ABReport
from kperf_ci.report import ab, build_report, render_markdown, write_site
from kperf_ci.report.terminal import verdict_line

ROOT = Path(__file__).resolve().parents[2]


def _timed(verdict: str) -> dict[str, Any]:
    return {
        "kernel": "softmax_kernel", "site": "ops.py::softmax_kernel", "launch": "n=4096; grid 32x1x1",
        "test": "tests/test_softmax.py::test_softmax[4096]", "verdict": verdict, "ratio": 1.07,
        "ci_low": 1.06, "ci_high": 1.08, "pairs": 400.0, "seconds": 0.2, "threshold": 0.005,
        "base_median_ms": 0.05, "head_median_ms": 0.0535, "regions_moved": [],
    }  # fmt: skip


_STATIC = {
    "kernel": "scale_kernel", "site": "ops.py::scale_kernel", "arch": "sm_90", "test": "t",
    "reason": "spills 0 -> 8", "args": {"n": "1024"}, "grid": [4, 1, 1], "config": "num_warps=4",
}  # fmt: skip

#: name -> (the ABReport's rows, whether that is a regression, the headline's and banner's colour:
#: red exactly on a regression; an inconclusive kernel is not one, and not green either)
CASES = {
    "slower": ({"timed": [_timed("slower")]}, True, "🔴", "bad"),
    "static": ({"static_regressions": [_STATIC]}, True, "🔴", "bad"),
    "inconclusive": ({"timed": [_timed("inconclusive")]}, False, "🟡", "warn"),
    "faster": ({"timed": [_timed("faster")]}, False, "🟢", "good"),
}


def _stored(tmp_path: Path, doc: dict[str, Any]) -> Path:
    """The document in a database, as `kperf ab` stores it (on a copy of a committed run)."""
    p = tmp_path / "ab.db"
    shutil.copy(ROOT / "tests/data/gpu/h100_examples.db", p)
    store.save_blob(p, store.list_runs(p)[-1].run_id, "", AB_BLOB, json.dumps(doc))
    return p


@pytest.mark.parametrize("case", CASES)
def test_an_ab_document_is_red_everywhere_or_green_everywhere(case, tmp_path, kperf_gh):
    rows, expected, icon, banner = CASES[case]
    report = ABReport("origin/main", "b" * 40, "a" * 40, **rows)
    doc = report.to_dict()
    answer = regression(doc)
    assert bool(answer) is expected
    assert report.exit_code == doc["exit_code"] == answer.exit_code == int(expected)  # `kperf ab`
    db = _stored(tmp_path, doc)
    assert from_ab(db).regression is expected  # what sets the label
    r = kperf_gh("status", "--sha", "f" * 40, "--ab-db", str(db), "--dry-run")
    assert r.code == 0 and (f'"{"failure" if expected else "success"}"') in r.out, r.out
    head = ab.render_markdown(doc).splitlines()[1]  # under the sticky comment's marker
    assert head.startswith(f"## kperf ab: {icon}"), head
    assert f'class="banner {banner}"' in ab.render_html(doc)
    assert ab.headline(doc).startswith(icon)  # `kperf report --ab`'s terminal line


def _run(**metrics: float) -> RunRecord:
    return RunRecord(make_info(), [make_result(**metrics)])


@pytest.mark.parametrize("expected", [True, False])
def test_a_comparison_is_red_everywhere_or_green_everywhere(expected, tmp_path):
    base = _run(registers=32, spills=0)
    cur = _run(registers=32, spills=8 if expected else 0)
    comparison = compare_runs(base, cur)
    answer = regression(comparison)
    assert bool(answer) is expected
    assert comparison.exit_code == answer.exit_code == int(expected)  # `kperf compare`, the plugin
    assert verdict_line(comparison).startswith("[bold red]1 regressed kernel" if expected else "[green]")
    report = build_report(cur, base, comparison)
    assert report.regression == answer  # what `kperf github` reads for the status and label
    head = render_markdown(report).splitlines()[1]  # under the sticky comment's marker
    assert head.startswith("## ❌ kperf: 1 regressed kernel" if expected else "## ✅ kperf: no regressions")
    index = write_site(report, tmp_path / "site").read_text(encoding="utf-8")
    assert f'class="banner {"bad" if expected else "good"}"' in index
