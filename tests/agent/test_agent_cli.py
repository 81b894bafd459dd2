"""`kperf agent` as a subprocess, against the local OpenAI-compatible server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from llm_server import FakeLLM, reply_with

from kperf_ci.agent import cheats

ROOT = Path(__file__).resolve().parents[2]
SRC = (ROOT / "examples/kernels/vector_add.py").read_text()
KEY = "sk-e2e-SECRET-abcdef987654"


def kperf(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("KPERF_LLM_", "OPENAI_"))}
    e["PYTHONPATH"] = str(ROOT)
    # the fake endpoint is local: a retry need not wait out the client's 2 s, 4 s, ... backoff
    # (what the waits are is tests/agent/test_agent_llm.py's, with the sleep injected)
    e["KPERF_LLM_BACKOFF_S"] = "0"
    e.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "kperf_ci", "agent", *args],
        cwd=ROOT,
        env=e,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_end_to_end_with_an_llm_endpoint(tmp_path):
    torch_cheat = next(c for c in cheats.cheats(SRC) if c.name == "torch_compute")
    script = [
        ("status", 429, {"Retry-After": "0"}),
        ("reply", reply_with(cheats.good(SRC), "blocks of 2048")),
        ("reply", reply_with(torch_cheat.source, "let torch do it")),
        ("reply", "Sure! Bigger blocks."),
    ]
    db = tmp_path / "agent.db"
    with FakeLLM(script) as srv:
        env = {"KPERF_LLM_BASE_URL": srv.base_url, "KPERF_LLM_MODEL": "fake-model", "KPERF_LLM_API_KEY": KEY}
        p = kperf(
            "run",
            "vector_add",
            "--db",
            str(db),
            "--device",
            "cpu",
            "--max-llm-calls",
            "4",
            "--seeds",
            "3",
            "--no-value-check",
            "--out",
            str(tmp_path / "out"),
            env=env,
        )
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert KEY not in out
    assert all(r["headers"].get("Authorization") == f"Bearer {KEY}" for r in srv.requests)
    assert "proposer llm" in out
    assert "blocks of 2048 -> verified" in out
    assert "let torch do it -> rejected (torch_compute: " in out
    assert "no proposal (reply has 0 python code blocks" in out
    assert "stopped: LLM call budget (4) spent" in out
    assert "no GPU: candidates were verified but not timed" in out and "dry run wrote nothing" in out
    shown = kperf("show", "--db", str(db))
    assert shown.returncode == 0 and "verified: blocks of 2048" in shown.stdout
    assert "rejected: let torch do it (torch_compute:" in shown.stdout
    assert KEY not in db.read_bytes().decode("latin-1")  # nor in the population


@pytest.mark.parametrize(
    "args, env, msg",
    [
        (["run", "nope"], {}, "unknown kernel 'nope'; known: layernorm, softmax, vector_add"),
        (["run", "vector_add", "--pr"], {}, "--pr needs --repo OWNER/NAME"),
        (["run", "vector_add", "--seeds", "a"], {}, "--seeds 'a': expected integers"),
        (["run", "vector_add"], {"KPERF_LLM_BASE_URL": "http://127.0.0.1:9/v1"}, "KPERF_LLM_MODEL is not"),
        (["run"], {}, "name a kernel"),
        (["show", "--db", "/nonexistent/agent.db"], {}, "no such agent database"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, env, msg):
    p = kperf(*args, "--db", str(tmp_path / "a.db"), env=env) if args[0] == "run" else kperf(*args, env=env)
    assert p.returncode == 2, p.stdout + p.stderr
    assert msg in p.stderr and len(p.stderr.strip().splitlines()) == 1


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_llm(tmp_path, base_url: str, *extra: str) -> subprocess.CompletedProcess:
    env = {"KPERF_LLM_BASE_URL": base_url, "KPERF_LLM_MODEL": "fake-model", "KPERF_LLM_API_KEY": KEY}
    args = ["run", "vector_add", "--db", str(tmp_path / "a.db"), "--device", "cpu", "--seeds", "3"]
    return kperf(*args, "--out", str(tmp_path / "out"), *extra, env=env)


@pytest.mark.parametrize(
    "script, extra, msgs",
    [
        (None, [], ["cannot reach", "check KPERF_LLM_BASE_URL"]),
        ([("status", 401)], [], ["HTTP 401", "key was rejected", "KPERF_LLM_API_KEY"]),
        (
            [("status", 503)] * 5,
            ["--max-llm-calls", "2"],
            ["LLM call budget (2) spent", "HTTP 503", "kept failing"],
        ),
    ],
    ids=["unreachable", "401", "5xx-until-budget"],
)
def test_an_endpoint_that_never_replies_is_exit_2_without_the_key(tmp_path, script, extra, msgs):
    if script is None:
        p = _run_llm(tmp_path, f"http://127.0.0.1:{_closed_port()}/v1", *extra)
    else:
        with FakeLLM(script) as srv:
            p = _run_llm(tmp_path, srv.base_url, *extra)
    out = p.stdout + p.stderr
    assert p.returncode == 2, out
    assert len(p.stderr.strip().splitlines()) == 1 and "gave no reply" in p.stderr
    assert all(m in p.stderr for m in msgs), p.stderr
    assert KEY not in out


def test_an_endpoint_that_recovers_after_5xx_goes_on(tmp_path):
    script = [("status", 503), ("reply", reply_with(cheats.good(SRC), "blocks of 2048"))]
    with FakeLLM(script) as srv:
        p = _run_llm(tmp_path, srv.base_url, "--max-llm-calls", "2", "--no-value-check")
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "blocks of 2048 -> verified" in out and KEY not in out


def test_a_wrong_root_leaves_no_database_and_show_says_empty(tmp_path):
    db = tmp_path / "reports" / "agent.db"
    p = kperf("run", "vector_add", "--root", str(tmp_path), "--db", str(db))
    assert p.returncode == 2 and "no such kernel module" in p.stderr, p.stdout + p.stderr
    assert not db.exists() and not db.parent.exists()
    from kperf_ci.agent.population import Population

    Population(str(tmp_path / "empty.db")).close()
    shown = kperf("show", "--db", str(tmp_path / "empty.db"))
    assert shown.returncode == 2 and not shown.stdout
    assert len(shown.stderr.strip().splitlines()) == 1 and "holds no agent sessions" in shown.stderr


def _request_fields(**changes) -> dict:
    """Every field of a `kperf agent run` request, in the dataclass's order, for a run by hand."""
    from kperf_ci.agent.loop import Budget

    values = dict(
        root=Path("."),
        endpoint=None,
        device="cpu",
        ab_db=None,
        run_db=None,
        seeds=[1],
        timeout_s=1.0,
        bench_budget_s=1.0,
        value_check=True,
        budget=Budget(),
        out=Path("o"),
        open_pr=False,
        repo=None,
        base="main",
    )
    return {**values, **changes}


def test_the_session_request_is_built_by_keyword_only():
    """Fourteen fields, several of one type (ab_db / run_db / repo, timeout_s / bench_budget_s):
    a positional call that swaps two of them would still run, so none is accepted."""
    import dataclasses

    from kperf_ci.agent.session import Request

    values = _request_fields()
    assert [f.name for f in dataclasses.fields(Request)] == list(values)
    assert Request(**values).trigger == "by hand"
    with pytest.raises(TypeError):
        Request(*values.values())  # type: ignore[misc]


def test_the_loop_reads_the_ab_settings_of_the_root_not_of_where_it_runs(tmp_path, monkeypatch):
    """A fresh walk of issue 38: with a bad ab_floor_ms in the current directory's pyproject.toml
    and --root naming another project, `kperf agent run` said the current directory's was bad."""
    import dataclasses

    from kperf_ci.agent.session import Request, loop_config

    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / "pyproject.toml").write_text("[tool.kperf]\nab_floor_ms = 0.125\nab_precision = 0.002\n")
    (elsewhere / "pyproject.toml").write_text('[tool.kperf]\nab_floor_ms = "not a number"\n')
    monkeypatch.chdir(elsewhere)
    monkeypatch.delenv("KPERF_AB_FLOOR_MS", raising=False)
    monkeypatch.delenv("KPERF_AB_PRECISION", raising=False)
    req = Request(**_request_fields(root=project, out=tmp_path / "o"))
    ab = dataclasses.asdict(loop_config(req).ab)
    assert ab["ab_floor_ms"] == 0.125 and ab["ab_precision"] == 0.002, ab
