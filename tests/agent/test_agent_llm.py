"""The OpenAI-compatible proposer against a real local HTTP server: replies, retries, the key."""

from __future__ import annotations

from pathlib import Path

import pytest
from llm_server import FakeLLM, reply_with

from kperf_ci.agent import cheats
from kperf_ci.agent.llm import Endpoint, LLMProposer, ProposerError, endpoint_from_env, parse_reply

ROOT = Path(__file__).resolve().parents[2]
SRC = (ROOT / "examples/kernels/vector_add.py").read_text()
KEY = "sk-test-SECRET-0123456789"
MSGS = [{"role": "user", "content": "make it faster"}]


def proposer(srv: FakeLLM, **kw) -> tuple[LLMProposer, list[float]]:
    slept: list[float] = []
    p = LLMProposer(Endpoint(srv.base_url, "m1", KEY), sleep=slept.append, backoff_s=0.5, **kw)
    return p, slept


def test_good_reply_is_parsed_and_key_only_in_the_header():
    with FakeLLM([("reply", reply_with(cheats.good(SRC), "BLOCK_SIZE 2048"))]) as srv:
        p, _ = proposer(srv)
        prop = p.propose(MSGS, "add")
    assert prop.hypothesis == "BLOCK_SIZE 2048"
    assert "BLOCK_SIZE=2048, num_warps=8" in prop.source
    req = srv.requests[0]
    assert req["headers"]["Authorization"] == f"Bearer {KEY}"
    assert req["json"]["model"] == "m1" and req["json"]["messages"] == MSGS
    assert KEY not in repr(p) and KEY not in repr(p.endpoint) and KEY not in str(req["json"])


@pytest.mark.parametrize(
    "content, why",
    [
        ("I think you should use bigger blocks.", "0 python code blocks"),
        ("Hypothesis: x\n```python\nprint(1)\n```\n```python\nprint(2)\n```", "2 python code blocks"),
        ("```python\n" + SRC + "```", "no 'Hypothesis:' line"),
        ("Hypothesis: x\n```python\ndef add(x, y):\n    return x\n```", "no @triton.jit kernel"),
        ("Hypothesis: x\n```python\n" + SRC.replace("def add(", "def plus(") + "```", "no launcher add()"),
        ("Hypothesis: x\n```python\n@triton.jit\ndef add(:\n```", "not valid Python"),
    ],
)
def test_malformed_replies_are_rejected(content, why):
    with pytest.raises(ProposerError, match=why) as e:
        parse_reply(content, "add")
    assert e.value.kind == "malformed"


def test_a_body_that_is_not_chat_completions_is_malformed():
    with FakeLLM([("raw", b"<html>gateway</html>")]) as srv:
        p, _ = proposer(srv)
        with pytest.raises(ProposerError, match="not a chat-completions JSON") as e:
            p.propose(MSGS, "add")
    assert e.value.kind == "malformed" and p.calls == 1


def test_429_and_5xx_are_retried_with_backoff():
    script = [
        ("status", 429, {"Retry-After": "1.5"}),
        ("status", 503),
        ("status", 500),
        ("reply", reply_with(cheats.good(SRC))),
    ]
    with FakeLLM(script) as srv:
        p, slept = proposer(srv)
        prop = p.propose(MSGS, "add")
    assert prop.source and p.calls == 4 and len(srv.requests) == 4
    assert slept == [1.5, 1.0, 2.0]  # Retry-After honoured, then 0.5 x 2^attempt


def test_gives_up_after_the_retries_and_says_why_without_the_key():
    with FakeLLM([("status", 502)] * 5) as srv:
        p, slept = proposer(srv, retries=2)
        with pytest.raises(ProposerError, match="gave up after 3 attempts.*HTTP 502") as e:
            p.propose(MSGS, "add")
    assert p.calls == 3 and len(slept) == 2 and KEY not in str(e.value)


def test_a_client_error_is_not_retried():
    with FakeLLM([("status", 401)]) as srv:
        p, slept = proposer(srv)
        with pytest.raises(ProposerError, match="HTTP 401; check the URL, model and key") as e:
            p.propose(MSGS, "add")
    assert p.calls == 1 and not slept and KEY not in str(e.value)


def test_a_timeout_is_retried_then_answered():
    with FakeLLM([("sleep", 1.5, "late"), ("reply", reply_with(cheats.good(SRC)))]) as srv:
        p, slept = proposer(srv, timeout_s=0.3)
        prop = p.propose(MSGS, "add")
    assert prop.source and p.calls == 2 and slept == [0.5]


def test_call_budget_stops_retries():
    with FakeLLM([("status", 503)] * 5) as srv:
        p, _ = proposer(srv, max_calls=2)
        with pytest.raises(ProposerError, match=r"LLM call budget \(2\) spent") as e:
            p.propose(MSGS, "add")
    assert e.value.kind == "budget" and len(srv.requests) == 2


def test_endpoint_from_env():
    assert endpoint_from_env({}) is None
    ep = endpoint_from_env(
        {"KPERF_LLM_BASE_URL": "http://h/v1/", "KPERF_LLM_MODEL": "m", "OPENAI_API_KEY": KEY}
    )
    assert ep is not None and ep.base_url == "http://h/v1" and ep.api_key == KEY and KEY not in repr(ep)
    with pytest.raises(ValueError, match="KPERF_LLM_MODEL is not"):
        endpoint_from_env({"KPERF_LLM_BASE_URL": "http://h/v1"})
    with pytest.raises(ValueError, match="must start with http"):
        endpoint_from_env({"KPERF_LLM_BASE_URL": "h/v1", "KPERF_LLM_MODEL": "m"})


def test_endpoint_problem_only_when_the_endpoint_never_replied():
    from kperf_ci.agent.llm import endpoint_problem

    with FakeLLM([("status", 503), ("status", 500), ("reply", reply_with(cheats.good(SRC)))]) as srv:
        p, _ = proposer(srv)
        assert p.propose(MSGS, "add").source  # 5xx that recover later: fine
    assert p.answered and endpoint_problem(p) == ""
    with FakeLLM([("status", 503)] * 5) as srv:
        p, _ = proposer(srv, max_calls=3)
        with pytest.raises(ProposerError):
            p.propose(MSGS, "add")
    msg = endpoint_problem(p)
    assert "gave no reply" in msg and "HTTP 503" in msg and "kept failing" in msg and KEY not in msg
    with FakeLLM([("status", 401)]) as srv:
        p, _ = proposer(srv)
        with pytest.raises(ProposerError):
            p.propose(MSGS, "add")
    assert "HTTP 401" in endpoint_problem(p) and "key was rejected" in endpoint_problem(p)
    assert KEY not in endpoint_problem(p)


def test_the_first_backoff_is_two_seconds_unless_KPERF_LLM_BACKOFF_S_says(monkeypatch):
    """`kperf agent` builds its proposer with the default 2 s, or KPERF_LLM_BACKOFF_S (the CLI
    tests set 0: their endpoint is local); a value that is not a number >= 0 is one line."""
    from kperf_ci.agent.session import proposer_for
    from kperf_ci.config import ConfigError

    endpoint = Endpoint("http://127.0.0.1:9/v1", "m1", KEY)
    monkeypatch.delenv("KPERF_LLM_BACKOFF_S", raising=False)
    assert proposer_for(None, Path("k.py"), SRC, endpoint).backoff_s == 2.0
    monkeypatch.setenv("KPERF_LLM_BACKOFF_S", "0")
    assert proposer_for(None, Path("k.py"), SRC, endpoint).backoff_s == 0.0
    monkeypatch.setenv("KPERF_LLM_BACKOFF_S", "-1")
    with pytest.raises(ConfigError, match="KPERF_LLM_BACKOFF_S"):
        proposer_for(None, Path("k.py"), SRC, endpoint)
