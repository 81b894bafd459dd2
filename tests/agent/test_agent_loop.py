"""The loop's budgets and bookkeeping, the config search, the population store, the PR output.

The verifier is faked here (the harness has its own tests): each fake verdict is what the
harness returns, so the loop's decisions are tested in milliseconds.
"""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path

import pytest

from kperf_ci import store
from kperf_ci.agent import output
from kperf_ci.agent import population as pop
from kperf_ci.agent.configsearch import ConfigSearchProposer, Proposal, apply_knobs, current_knobs
from kperf_ci.agent.loop import Agent, Budget, LoopConfig
from kperf_ci.agent.prompts import PromptContext
from kperf_ci.agent.targets import TARGETS, get_target
from kperf_ci.agent.verify import Verdict
from kperf_ci.config import ABPolicy, Settings

ROOT = Path(__file__).resolve().parents[2]
ORIG = ROOT / "examples/kernels/vector_add.py"
SRC = ORIG.read_text()
T = get_target("vector_add")

AB = ABPolicy.from_settings(Settings())  # the default settings' A/B policy


class FakeVerifier:
    """Bench ratios by BLOCK_SIZE (a made-up landscape); counts calls; GPU seconds per call."""

    def __init__(self, ratios: dict[int, float] | None = None, device: str = "cuda", seconds: float = 2.0):
        self.ratios = ratios or {}
        self.device, self.seconds, self.calls = device, seconds, 0

    def __call__(self, target, original, source, **kw) -> Verdict:
        self.calls += 1
        self.kw = kw
        knobs = current_knobs(source, T)
        r = self.ratios.get(knobs["BLOCK_SIZE"], 1.0) * (0.99 if knobs["num_warps"] == 8 else 1.0)
        bench = None
        if self.device == "cuda":
            verdict = "faster" if r < 0.995 else "unchanged"
            bench = {
                "ratio": r,
                "ci_low": r - 0.002,
                "ci_high": r + 0.002,
                "verdict": verdict,
                "base_ms": 1.0,
                "head_ms": r,
                "pairs": 40,
                "method": "events",
                "shape": [1 << 26],
                "dtype": "float32",
                "device": "NVIDIA H100 80GB HBM3",
                "plausibility": "2900 GB/s (87% of peak)",
            }
        return Verdict(
            True,
            correctness={"cases": 8, "shapes": [[3001]], "dtypes": ["float32"]},
            bench=bench,
            seconds=self.seconds,
            device=self.device,
        )


def agent(tmp_path, verifier, budget, clock=None, cfg=None) -> tuple[Agent, pop.Population]:
    p = pop.Population(tmp_path / "agent.db")
    kw = {"clock": clock} if clock else {}
    a = Agent(
        T,
        ORIG,
        p,
        ConfigSearchProposer(T, SRC),
        PromptContext("vector_add", "add"),
        cfg or LoopConfig("cuda", ab=AB),
        budget,
        verifier=verifier,
        **kw,
    )
    return a, p


def test_config_search_climbs_to_the_best_block_size(tmp_path):
    v = FakeVerifier({2048: 0.97, 4096: 0.95, 8192: 0.96})
    a, p = agent(tmp_path, v, Budget(patience=8))
    res = a.run("by hand")
    assert res.best is not None and res.best.knobs == {"BLOCK_SIZE": 4096, "num_warps": 8}
    assert res.best.ratio == pytest.approx(0.95 * 0.99)
    assert res.stop_reason in ("8 rounds without progress", "search space exhausted")
    # the best variant's parent is the previous best: the lineage is recorded
    rows = {r.id: r for r in p.variants(res.session_id)}
    assert rows[res.best.parent_id].knobs["BLOCK_SIZE"] == 4096


def test_the_harness_gets_the_projects_ab_settings(tmp_path):
    """The candidate's A/B verdict uses the band, floor and precision kperf ab would use."""
    v = FakeVerifier({2048: 0.97})
    cfg = LoopConfig("cuda", ab=ABPolicy(ab_threshold=0.02, ab_floor_ms=0.003, ab_precision=0.01))
    a, _ = agent(tmp_path, v, Budget(max_rounds=1), cfg=cfg)
    a.run("by hand")
    assert v.kw["ab"] is cfg.ab  # carried whole, into the job (agent/verify.py)


@pytest.mark.parametrize(
    "budget, ratios, stop",
    [
        (Budget(max_rounds=3), {}, "round budget (3) spent"),
        (Budget(gpu_seconds=5.0), {}, "GPU-second budget (5 s) spent"),
        (Budget(patience=2), {}, "2 rounds without progress"),
        (Budget(llm_calls=0), {}, "LLM call budget (0) spent"),
    ],
)
def test_budgets(tmp_path, budget, ratios, stop):
    v = FakeVerifier(ratios)
    a, _ = agent(tmp_path, v, budget)
    res = a.run("t")
    assert res.stop_reason == stop
    if "GPU" in stop:
        assert v.calls == 3 and res.gpu_seconds == 6.0  # 2 s a call: stops once 5 s are spent
    if "LLM" in stop:
        assert v.calls == 0  # the config search makes no LLM call; a zero budget still stops it


def test_wall_time_budget(tmp_path):
    now = [0.0]

    def clock() -> float:
        now[0] += 10.0
        return now[0]

    a, _ = agent(tmp_path, FakeVerifier(), Budget(wall_s=45.0), clock=clock)
    res = a.run("t")
    assert res.stop_reason == "wall-time budget (45 s) spent" and res.rounds == 2


def test_search_space_exhausted_and_nothing_tried_twice(tmp_path):
    a, p = agent(tmp_path, FakeVerifier(device="cpu", seconds=0.5), Budget(patience=100, max_rounds=100))
    res = a.run("t")
    assert res.stop_reason == "search space exhausted" and res.gpu_seconds == 0.0
    rows = p.variants(res.session_id)
    keys = [tuple(sorted(r.knobs.items())) for r in rows]
    assert len(keys) == len(set(keys)) == 1 + sum(len(v) - 1 for v in T.knobs.values())
    assert all(r.verdict == pop.VERIFIED for r in rows[1:])  # no GPU: verified, never "faster"


def test_apply_knobs_edits_only_the_launch_line():
    for name, t in TARGETS.items():
        src = (ROOT / t.module).read_text()
        knob = next(iter(t.knobs))
        new = apply_knobs(src, t, {knob: t.knobs[knob][0]})
        d = [line for line in output.diff(src, new, t.module).splitlines() if line[:1] in "+-"]
        assert len(d) == 4, name  # ---/+++ headers, one line out, one in
        compile(new, name, "exec")


def test_population_lives_in_the_run_database_with_its_schema_version(tmp_path):
    db = tmp_path / "run.db"
    p = pop.Population(db)
    sid = p.start_session(
        kernel="k", module="m", trigger="t", proposer="p", device="cpu", budget={}, context={}
    )
    vid = p.add_variant(
        sid, parent_id=None, round=0, code="c", hypothesis="h", proposer="p", verdict=pop.ORIGINAL
    )
    p.close()
    assert store.list_runs(db) == []  # still a valid kperf run database
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT value FROM meta WHERE key='agent_schema_version'").fetchone() == ("1",)
    conn.execute("UPDATE meta SET value='99' WHERE key='agent_schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(pop.AgentSchemaError, match="newer than this kperf-ci supports"):
        pop.Population(db)
    assert vid == 1


def _row(**kw) -> pop.VariantRow:
    base = dict(
        id=7,
        parent_id=1,
        round=3,
        code=SRC.replace("BLOCK_SIZE=1024)", "BLOCK_SIZE=4096)"),
        hypothesis="launch config: BLOCK_SIZE 1024 -> 4096",
        proposer="config-search",
        knobs={"BLOCK_SIZE": 4096},
        verdict=pop.FASTER,
        hack="",
        reason="",
        checks={
            "cases": 16,
            "shapes": [[1], [3001]],
            "dtypes": ["float32", "float16"],
            "distributions": ["normal"],
            "seeds": [11],
            "worst_error_over_tol": 0.0,
            "tolerances": {"float32": {"rtol": 2e-5, "atol": 1e-6}},
        },
        timings={
            "ratio": 0.97,
            "ci_low": 0.965,
            "ci_high": 0.975,
            "base_ms": 0.27,
            "head_ms": 0.262,
            "pairs": 60,
            "method": "events",
            "shape": [67108864],
            "dtype": "float32",
            "device": "NVIDIA H100 80GB HBM3",
            "plausibility": "3000 GB/s",
        },
        ratio=0.97,
        ci_low=0.965,
        ci_high=0.975,
    )
    base.update(kw)
    return pop.VariantRow(**base)


def test_pr_body_carries_diff_evidence_checks_and_motivation(tmp_path):
    v = _row(hypothesis="bigger <b>blocks</b> [x](http://evil)")
    body = output.pr_body("vector_add", T.module, SRC, v, ["FLAGGED wave_tail = 0.18: tail"], {"id": "s1"})
    assert "-    add_kernel[grid](x, y, output, n_elements, BLOCK_SIZE=1024)" in body
    assert "+    add_kernel[grid](x, y, output, n_elements, BLOCK_SIZE=4096)" in body
    assert "| time ratio (99% CI) | 1 | 0.9700 (0.9650 .. 0.9750) |" in body
    assert "16 cases" in body and "float16" in body and "rtol" in body and "wave\\_tail = 0.18" in body
    assert "kperf never merges" in body and "<b>" not in body and "[x](http://evil)" not in body
    files = output.write_dry_run(tmp_path / "out", output.pr_title("vector_add", v), body, "patch")
    assert files[0].read_text().startswith("# kperf agent: vector_add (3.0% faster)")


def _git(repo: Path, *a: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@e", *a],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def test_push_branch_pushes_only_a_new_agent_branch(tmp_path):
    remote, repo = tmp_path / "remote.git", tmp_path / "repo"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "examples/kernels").mkdir(parents=True)
    (repo / T.module).write_text(SRC)
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "init")
    _git(repo, "remote", "add", "origin", str(remote))
    _git(repo, "push", "-q", "origin", "main")
    main_before = _git(remote, "rev-parse", "main")
    v = _row()
    branch = output.branch_name("vector_add", "s1", v.id)
    sha = output.push_branch(repo, T.module, v.code, branch, "title", base="main")
    assert _git(remote, "rev-parse", branch) == sha and _git(remote, "rev-parse", "main") == main_before
    assert (repo / T.module).read_text() == SRC  # the caller's checkout untouched
    assert "BLOCK_SIZE=4096" in _git(remote, "show", f"{branch}:{T.module}")
    for bad in ("main", "master", "feature"):
        with pytest.raises(ValueError, match="refusing to push"):
            output.push_branch(repo, T.module, v.code, bad, "t", base="main")


def test_a_proposal_already_tried_is_not_verified_again(tmp_path):
    class Same:
        name, calls = "fixed", 0

        def propose(self, messages, launcher):
            return Proposal(SRC.replace("BLOCK_SIZE=1024)", "BLOCK_SIZE=2048)"), "2048", "fixed")

    v = FakeVerifier()
    p = pop.Population(tmp_path / "agent.db")
    a = Agent(
        T,
        ORIG,
        p,
        Same(),
        PromptContext("vector_add", "add"),
        LoopConfig("cuda", ab=AB),
        Budget(max_rounds=3),
        verifier=v,
    )
    res = a.run("t")
    assert v.calls == 1
    assert [r.verdict for r in p.variants(res.session_id)][1:] == [
        pop.NOT_FASTER,
        pop.DUPLICATE,
        pop.DUPLICATE,
    ]


def test_open_pr_goes_through_the_github_module_only(monkeypatch):
    import types

    seen = {}
    client_mod = types.ModuleType("kperf_ci.github.client")
    client_mod.connect = lambda: types.SimpleNamespace(repo=lambda name: f"<repo {name}>")
    pulls_mod = types.ModuleType("kperf_ci.github.pulls")

    def open_pull_request(client, repo, head, base, title, body):
        seen.update(repo=repo, head=head, base=base, title=title, body=body)
        return types.SimpleNamespace(html_url="https://example.invalid/pr/1")

    pulls_mod.open_pull_request = open_pull_request
    monkeypatch.setattr(output, "gh_client", client_mod)
    monkeypatch.setattr(output, "pulls", pulls_mod)
    pr = output.open_pr("o/r", "kperf-agent/x-1-2", "main", "t", "b")
    assert pr.html_url.endswith("/pr/1")
    assert seen == {
        "repo": "<repo o/r>",
        "head": "kperf-agent/x-1-2",
        "base": "main",
        "title": "t",
        "body": "b",
    }
