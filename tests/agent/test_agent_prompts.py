"""Prompts carry the profile, the findings, the regression and the history; --from-ab picks kernels."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kperf_ci import store
from kperf_ci.agent.prompts import PromptContext, build_messages, context_from_db
from kperf_ci.agent.session import kernels_from_ab
from kperf_ci.analysis.findings import ARTIFACT, Finding, findings_to_json
from kperf_ci.prcheck.document import AB_BLOB

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from conftest import make_info, make_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SRC = (ROOT / "examples/kernels/softmax.py").read_text()


def _dbs(tmp_path: Path) -> tuple[Path, Path]:
    run_db, ab_db = tmp_path / "run.db", tmp_path / "ab.db"
    r = make_result("softmax_kernel", registers=166, spills=4096, **{"sass.instructions": 900})
    r.artifacts[ARTIFACT] = findings_to_json(
        [Finding("epilogue_fraction", 0.31, "fraction", True, "epilogue 31% of CTA time", "fuse the store")]
    )
    other = make_result("add_kernel", registers=16)
    store.save_run(run_db, make_info(), [r, other])
    doc = {
        "tests": [
            {
                "test": "test_softmax[64-256]",
                "status": "changed",
                "changes": ["softmax_kernel: num_warps 4 -> 1"],
                "launches": [{"name": "softmax_kernel", "changes": ["num_warps 4 -> 1"]}],
                "timed": [
                    {
                        "kernel": "softmax_kernel",
                        "verdict": "slower",
                        "ratio": 1.42,
                        "ci_low": 1.40,
                        "ci_high": 1.44,
                        "regions_moved": ["epilogue 4% -> 9% of CTA time"],
                    }
                ],
            }
        ],
        "timed": [
            {
                "kernel": "examples/kernels/softmax.py/softmax_kernel",
                "test": "test_softmax[64-256]",
                "verdict": "slower",
            }
        ],
        "static_regressions": [],
    }
    info = make_info(label="ab")
    store.save_run(ab_db, info, [])
    store.save_blob(ab_db, info.run_id, "", AB_BLOB, json.dumps(doc))
    return run_db, ab_db


def test_context_and_messages_carry_profile_regression_and_history(tmp_path):
    run_db, ab_db = _dbs(tmp_path)
    ctx = context_from_db("softmax", "softmax", SRC, run_db=run_db, ab_db=ab_db)
    assert ctx.static["registers"] == 166 and ctx.static["spills"] == 4096 and "add_kernel" not in str(ctx)
    assert ctx.findings == ["FLAGGED epilogue_fraction = 0.31 fraction: epilogue 31% of CTA time"]
    assert "test_softmax[64-256]: num_warps 4 -> 1" in ctx.regression
    assert any("slower ratio 1.42" in r and "epilogue 4% -> 9%" in r for r in ctx.regression)
    ctx.history = [
        {"hypothesis": "num_warps 8", "verdict": "rejected", "reason": "wrong", "ratio": None},
        {"hypothesis": "num_warps 2", "verdict": "not_faster", "reason": "", "ratio": 1.01},
    ]
    msgs = build_messages(ctx, SRC)
    user = msgs[1]["content"]
    assert msgs[0]["role"] == "system" and "same name and signature" in msgs[0]["content"]
    for s in (
        "registers 166",
        "spills 4096",
        "epilogue 31% of CTA time",
        "num_warps 4 -> 1",
        "num_warps 8 -> rejected (wrong)",
        "num_warps 2 -> not_faster, time ratio 1.010",
        SRC,
    ):
        assert s in user


def test_from_ab_names_the_slower_kernels_targets(tmp_path):
    _, ab_db = _dbs(tmp_path)
    assert kernels_from_ab(str(ab_db), ROOT) == ["softmax"]


def test_no_databases_no_context():
    ctx = context_from_db("softmax", "softmax", SRC)
    assert ctx == PromptContext("softmax", "softmax") and ctx.motivation() == []


def _ab_only_static(tmp_path: Path, kernels: list[str]) -> Path:
    ab_db = tmp_path / "ab_static.db"
    doc = {
        "tests": [],
        "timed": [{"kernel": k, "test": "t", "verdict": "same"} for k in kernels],
        "static_regressions": [
            {"kernel": k, "arch": "sm_90", "test": "t", "reason": "spills 0 -> 64"} for k in kernels
        ],
    }
    info = make_info(label="ab")
    store.save_run(ab_db, info, [])
    store.save_blob(ab_db, info.run_id, "", AB_BLOB, json.dumps(doc))
    return ab_db


def test_from_ab_starts_from_a_static_regression_of_a_known_kernel(tmp_path):
    # the A/B document labels a launch "marker (qualname)" when the marker renamed it
    ab_db = _ab_only_static(tmp_path, ["test_layernorm_marker (_layer_norm_fwd_fused)", "softmax_kernel"])
    names = kernels_from_ab(str(ab_db), ROOT)
    assert sorted(names) == ["layernorm", "softmax"]


def test_from_ab_with_static_regressions_of_unknown_kernels_says_so(tmp_path):
    import pytest

    from kperf_ci.errors import KperfError

    ab_db = _ab_only_static(tmp_path, ["matmul_kernel"])
    with pytest.raises(KperfError) as e:
        kernels_from_ab(str(ab_db), ROOT)
    msg = str(e.value.message if hasattr(e.value, "message") else e.value)
    assert "holds static regressions of matmul_kernel but no timed slowdown" in msg
    assert "layernorm, softmax, vector_add" in msg
