"""The report's Benchmark sweeps section: runs with bench_call artifacts, `kperf report` as a
subprocess, the SVG checked as text and in headless Chromium (skipped without it, see
test_report_html)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from test_report_html import Browser, needs_chromium

from kperf_ci import store
from kperf_ci.model import Fingerprint, RunInfo, VariantKey, VariantResult, canonical_json, make_metric

SCRIPT = "benchmark/scripts/benchmark_rms_norm.py"
SITE = "utils.run_speed_benchmark#1"
HOSTILE = "<script>alert(1)</script>"


def _run(
    run_id: str, when: str, times: list[float], *, calls: bool = True
) -> tuple[RunInfo, list[VariantResult]]:
    info = RunInfo(run_id, when, "gpu", Fingerprint(gpu="NVIDIA H100 80GB HBM3"))
    labels = ["bf16:1024x4096", "bf16:2048x4096", HOSTILE]
    results = []
    for i, (label, t) in enumerate(zip(labels, times, strict=True)):
        call = {"script": SCRIPT, "site": SITE, "index": i, "label": label}
        if label != HOSTILE:
            call["x"] = 1024 * (i + 1)
        results.append(
            VariantResult(
                key=VariantKey(
                    "rms_norm_kernel", "NVIDIA H100 80GB HBM3", f"call {i}", "", f"{SCRIPT}::{SITE}[{label}]"
                ),
                metrics=[make_metric("time.median", t, "ms", "time", "lower")],
                tags=["script"],
                artifacts={"bench_call": canonical_json(call)} if calls else {},
            )
        )
    return info, results


def _report(tmp_path: Path, *, calls: bool = True) -> str:
    store.save_run(
        tmp_path / "base.db", *_run("base00000001", "2026-01-01T00:00:00", [0.10, 0.20, 0.40], calls=calls)
    )
    store.save_run(
        tmp_path / "run.db", *_run("head00000001", "2026-01-02T00:00:00", [0.11, 0.25, 0.41], calls=calls)
    )
    r = subprocess.run(
        [sys.executable, "-m", "kperf_ci", "report", "--db", "run.db", "--baseline", "base.db", "-o", "site"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return (tmp_path / "site" / "index.html").read_text(encoding="utf-8")


def test_sweep_section_draws_head_beside_baseline(tmp_path: Path) -> None:
    html = _report(tmp_path)
    assert 'id="sweeps">Benchmark sweeps (1)<' in html
    assert html.count('<div class="sweep"') == 1
    assert 'data-series="baseline"' in html and 'data-series="head"' in html
    # one call has no x, so the axis is the labels in call order; the hostile one escaped
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert HOSTILE not in html
    assert "head bf16:2048x4096: 250" in html  # a point's tooltip: series, label, value


def test_no_sweep_section_without_bench_call(tmp_path: Path) -> None:
    assert 'id="sweeps"' not in _report(tmp_path, calls=False)


@needs_chromium
def test_sweep_section_in_chromium(tmp_path: Path) -> None:
    _report(tmp_path)
    b = Browser()
    try:
        b.open(tmp_path / "site" / "index.html")
        assert b.errors == [] and b.dialogs == []
        series = b.eval(
            "[...document.querySelectorAll('#sweeps ~ .sweep path.series')].map(p => p.dataset.series)"
        )
        assert series == ["baseline", "head"]
        assert b.eval("document.querySelectorAll('.sweep circle.spt').length") == 6
        ticks = b.eval("[...document.querySelectorAll('.sweep text.tick')].map(t => t.textContent)")
        assert "<script>al" in ticks  # the label shown as text (cut to 10 characters), never run
    finally:
        b.close()


def test_ab_report_draws_a_scripts_sweep_base_beside_head() -> None:
    """`kperf ab --bench`: the timed calls of one site and kernel become one sweep of the base's
    and the head's medians; a test's rows draw none; names from the pull request are escaped."""
    from kperf_ci.report.ab import render_html

    script = "benchmark/scripts/benchmark_geglu.py"
    rows = [
        {"test": f"{script}::utils.run_speed_benchmark#3[bf16:{n}x14336]", "kernel": "_geglu_fwd",
         "verdict": "slower", "ratio": 1.3, "ci_low": 1.29, "ci_high": 1.31, "pairs": 20, "seconds": 0.1,
         "base_median_ms": 0.1 * n / 1024, "head_median_ms": 0.13 * n / 1024}
        for n in (1024, 2048, 4096)
    ]  # fmt: skip
    rows.append({**rows[0], "test": "tests/test_x.py::test_y[4096]", "kernel": HOSTILE})
    doc = {"timed": rows, "tests": [], "messages": [], "kernels": []}
    html = render_html(doc)
    assert html.count('<figure class="sweep">') == 1
    assert f"_geglu_fwd: {script} utils.run_speed_benchmark#3" in html
    assert ">base<" in html and ">head<" in html  # the legend
    assert HOSTILE not in html and "&lt;script&gt;" in html
    assert '<figure class="sweep">' not in render_html({**doc, "timed": rows[3:]})
