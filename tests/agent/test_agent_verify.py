"""Every known reward hack, served by a local OpenAI-compatible server, is rejected for its reason.

The loop runs for real: proposals come over HTTP, each candidate is verified in the harness
process under TRITON_INTERPRET=1, and the population records the verdicts.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from llm_server import FakeLLM, reply_with

from kperf_ci.agent import cheats, checks, harness
from kperf_ci.agent import population as pop
from kperf_ci.agent.llm import Endpoint, LLMProposer
from kperf_ci.agent.loop import Agent, Budget, LoopConfig
from kperf_ci.agent.prompts import PromptContext
from kperf_ci.agent.targets import get_target
from kperf_ci.agent.verify import run_harness, sandbox_env
from kperf_ci.config import ABPolicy, Settings

ROOT = Path(__file__).resolve().parents[2]
ORIG = ROOT / "examples/kernels/vector_add.py"
SRC = ORIG.read_text()


@pytest.mark.slow
def test_every_cheat_rejected_good_accepted(tmp_path):
    cpu_cheats = [c for c in cheats.cheats(SRC) if not c.gpu_only]
    expected = {"good": "", "wrong": checks.WRONG, **{c.name: c.expected for c in cpu_cheats}}
    script = [
        ("reply", reply_with(cheats.good(SRC), "good")),
        ("reply", "no code here"),
        ("status", 429, {"Retry-After": "0"}),
        ("reply", reply_with(cheats.wrong(SRC), "wrong")),
    ]
    script += [("reply", reply_with(c.source, c.name)) for c in cpu_cheats]
    p = pop.Population(tmp_path / "agent.db")
    with FakeLLM(script) as srv:
        proposer = LLMProposer(Endpoint(srv.base_url, "m", "k"), sleep=lambda s: None)
        agent = Agent(
            get_target("vector_add"),
            ORIG,
            p,
            proposer,
            PromptContext("vector_add", "add"),
            LoopConfig("cpu", seeds=[5], timeout_s=120, ab=ABPolicy.from_settings(Settings())),
            Budget(llm_calls=len(script), patience=100),
        )
        res = agent.run("test")
    assert res.stop_reason == f"LLM call budget ({len(script)}) spent"
    rows = {v.hypothesis: v for v in p.variants(res.session_id)[1:] if v.hypothesis}
    got = {name: (rows[name].verdict, rows[name].hack) for name in expected}
    want = {
        name: (pop.VERIFIED, "") if name == "good" else (pop.REJECTED, hack)
        for name, hack in expected.items()
    }
    assert got == want
    errors = [v for v in p.variants(res.session_id) if v.verdict == pop.PROPOSER_ERROR]
    assert [e.hack for e in errors] == ["malformed"]  # the 429 was retried inside the same round
    good = rows["good"]
    assert good.checks["cases"] >= 8 and set(good.checks["dtypes"]) == {"float32", "float16"}
    assert any(n % 2 and n & (n - 1) for s in good.checks["shapes"] for n in s)  # odd, not a power of 2
    # the prompts carried the history of tried hypotheses with their outcomes
    last = srv.requests[-1]["json"]["messages"][1]["content"]
    assert "Already tried" in last and "wrong -> rejected" in last


def test_a_candidate_that_hangs_is_stopped_by_the_timeout():
    t0 = time.monotonic()
    ok = run_harness("vector_add", ORIG, SRC, device="cpu", seeds=[1], timeout_s=120, value_check=False)
    took = time.monotonic() - t0
    assert ok.ok, ok.reason
    limit = max(3 * took, 10.0)
    # a candidate that never returns; asleep, not spinning, so its ~10 s do not take a core from
    # the suite's other worker (the timeout is the wall clock's either way)
    hang = SRC.replace("    output = torch.empty_like(x)\n", "    import time\n    time.sleep(3600)\n")
    t0 = time.monotonic()
    v = run_harness("vector_add", ORIG, hang, device="cpu", seeds=[1], timeout_s=limit, value_check=False)
    assert (v.ok, v.hack) == (False, checks.TIMEOUT)
    assert time.monotonic() - t0 < limit + 10


@pytest.mark.parametrize(
    "source, hack",
    [
        ("import nonexistent_module_xyz\n" + SRC, checks.IMPORT),
        (SRC.replace("def add(x: torch.Tensor, y: torch.Tensor)", "def add(x, y, z=None)"), checks.SIGNATURE),
    ],
)
def test_import_errors_and_signatures(source, hack):
    v = run_harness("vector_add", ORIG, source, device="cpu", seeds=[1], timeout_s=120, value_check=False)
    assert (v.ok, v.hack) == (False, hack)


def test_sandbox_env_has_no_secrets_and_a_dead_proxy():
    env = sandbox_env(
        {
            "PATH": "/bin",
            "KPERF_LLM_API_KEY": "k1",
            "OPENAI_API_KEY": "k2",
            "GITHUB_TOKEN": "t",
            "KPERF_HOST_SALT": "s",
            "https_proxy": "http://real:3128",
        }
    )
    assert "KPERF_LLM_API_KEY" not in env and "OPENAI_API_KEY" not in env and "GITHUB_TOKEN" not in env
    assert "KPERF_HOST_SALT" not in env and env["PATH"] == "/bin"
    assert env["https_proxy"] == env["HTTP_PROXY"] == "http://127.0.0.1:9"


def test_every_watched_timing_entry_point_exists():
    # a function moved elsewhere must fail here, not silently drop out of the patched-timer check
    missing = [name for name, obj in harness._timer_objects().items() if obj is None]
    assert missing == []


def test_a_bench_without_the_projects_ab_policy_is_refused_in_the_caller():
    # the harness judges its timed A/B by the policy: without one it crashed on the GPU, and the
    # crash was reported as the candidate's (a good candidate rejected as CRASH)
    with pytest.raises(ValueError, match="needs ab="):
        run_harness("vector_add", ORIG, SRC, device="cuda", seeds=[1], timeout_s=5, bench=True)
