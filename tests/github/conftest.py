"""Fixtures for the GitHub tests: a fake GitHub on 127.0.0.1 and the `kperf github` CLI as a
subprocess pointed at it through GITHUB_API_URL, with a token whose every appearance is checked."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from kperf_ci import store
from kperf_ci.prcheck.document import AB_BLOB
from tests.github.fake_github import FakeGitHub

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "ghp_kperfTESTtoken0123456789abcdefSECRET"


@dataclass
class Result:
    code: int
    out: str
    err: str


@pytest.fixture
def fake_gh():
    gh = FakeGitHub(TOKEN).start()
    gh.add_pull(7, head_sha="a" * 40)
    yield gh
    gh.stop()


@pytest.fixture
def kperf_gh(fake_gh, tmp_path):
    """Run ``kperf github ARGS`` as a subprocess against the fake server; every output is kept
    so the test end can assert the token never appeared anywhere."""
    outputs: list[str] = []

    def run(*args: str, token: str | None = TOKEN, env: dict[str, str] | None = None) -> Result:
        e = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "KPERF_"))}
        e.update(
            PYTHONPATH=str(ROOT),
            GITHUB_API_URL=fake_gh.url,
            GITHUB_REPOSITORY="octo/kernels",
            NO_PROXY="127.0.0.1,localhost",
            no_proxy="127.0.0.1,localhost",
            # the fake GitHub is local: a retry need not wait out the client's 1 s, 2 s, 4 s, 8 s
            # backoff (what the waits are is tests/github/test_pulls.py's, with the sleep injected)
            KPERF_GITHUB_BACKOFF_S="0",
        )
        if token is not None:
            e["GITHUB_TOKEN"] = token
        e.update(env or {})
        p = subprocess.run(
            [sys.executable, "-m", "kperf_ci", "github", *args],
            cwd=tmp_path,
            env=e,
            capture_output=True,
            text=True,
            timeout=120,
        )
        outputs.extend([p.stdout, p.stderr])
        return Result(p.returncode, p.stdout, p.stderr)

    yield run
    for text in outputs:
        assert TOKEN not in text
    for req in fake_gh.requests:
        assert TOKEN.encode() not in req.raw, f"token in the body of {req.method} {req.path}"
    for f in tmp_path.rglob("*"):
        if f.is_file() and f.suffix in (".md", ".html", ".txt", ".json"):
            assert TOKEN not in f.read_text(errors="replace")


@pytest.fixture
def run_db(tmp_path) -> Path:
    """A copy of the committed H100 run (the committed file stays untouched)."""
    p = tmp_path / "run.db"
    shutil.copy(ROOT / "tests/data/gpu/h100_examples.db", p)
    return p


@pytest.fixture
def baseline_db(tmp_path) -> Path:
    p = tmp_path / "baseline.db"
    shutil.copy(ROOT / "baselines/main.db", p)
    return p


def ab_db(tmp_path: Path, *, slower: int, name: str = "ab.db") -> Path:
    """An A/B database as `kperf ab` stores it: runs plus the A/B document blob."""
    p = tmp_path / name
    shutil.copy(ROOT / "tests/data/gpu/h100_examples.db", p)
    rid = store.list_runs(p)[-1].run_id
    verdict = "slower" if slower else "unchanged"
    doc = {
        "base": {"rev": "origin/main", "sha": "b" * 40},
        "head": {"sha": "a" * 40},
        "device": "NVIDIA H100 80GB HBM3",
        "counts": {"slower": slower, "unchanged": 0 if slower else 1, "changed": 1},
        "timed": [
            {
                "test": "test_softmax[4096]",
                "kernel": "softmax_kernel",
                "verdict": verdict,
                "ratio": 1.072 if slower else 1.001,
                "ci_low": 1.065 if slower else 0.998,
                "ci_high": 1.079 if slower else 1.004,
                "regions_moved": ["epilogue 4% -> 9% of CTA time"] if slower else [],
            }
        ],
        "tests": [{"test": "test_softmax[4096]", "status": "changed", "changes": ["num_warps 4 -> 1"]}],
        "static_regressions": [],
        "messages": [],
    }
    store.save_blob(p, rid, "", AB_BLOB, json.dumps(doc))
    return p
