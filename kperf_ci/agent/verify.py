"""Verify (and on a GPU, benchmark) a candidate in a separate process: never in this one.

The harness (:mod:`kperf_ci.agent.harness`) runs with a wall-clock timeout, in a fresh
temporary directory, with proxy variables pointing at a closed local port and no credentials in
its environment (``KPERF_LLM_API_KEY``, ``OPENAI_API_KEY``, ``GITHUB_TOKEN``, ... are removed):
a candidate cannot reach the network, read the key, or touch the caller's state. Its verdict is
read from a result file carrying a nonce, never from what it printed.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kperf_ci.agent import checks
from kperf_ci.config import ENV_HOST_SALT, ENV_LLM_PREFIX, ABPolicy

DEAD_PROXY = "http://127.0.0.1:9"  # the discard port: nothing listens, connections fail at once
#: environment variables never passed to candidate code (prefixes and names)
SECRET_PREFIXES = (ENV_LLM_PREFIX, "OPENAI_", "GITHUB_", "GH_", "AWS_", "HF_", "ANTHROPIC_")
SECRET_NAMES = (ENV_HOST_SALT, "ACTIONS_RUNTIME_TOKEN", "ACTIONS_ID_TOKEN_REQUEST_TOKEN")


@dataclass
class Verdict:
    """What the harness said about one candidate."""

    ok: bool
    hack: str = ""
    reason: str = ""
    correctness: dict[str, Any] = field(default_factory=dict)
    bench: dict[str, Any] | None = None
    seconds: float = 0.0  # wall seconds of the harness process
    device: str = "cpu"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def gpu_seconds(self) -> float:
        return self.seconds if self.device == "cuda" else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "hack": self.hack,
            "reason": self.reason,
            "correctness": self.correctness,
            "bench": self.bench,
            "seconds": self.seconds,
            "device": self.device,
            **self.extra,
        }


def sandbox_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The harness environment: no secrets, every proxy variable at a dead port."""
    env = {
        k: v
        for k, v in (base if base is not None else os.environ).items()
        if not k.startswith(SECRET_PREFIXES) and k not in SECRET_NAMES
    }
    for k in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        env[k] = DEAD_PROXY
    env["no_proxy"] = env["NO_PROXY"] = ""
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_harness(
    target: str,
    original: Path,
    candidate_source: str,
    *,
    device: str,
    seeds: list[int],
    timeout_s: float,
    bench: bool = False,
    bench_budget_s: float = 3.0,
    value_check: bool = True,
    python: str | None = None,
    ab: ABPolicy | None = None,
) -> Verdict:
    """Write the candidate to a fresh directory and run the harness on it; a Verdict for every
    candidate. A bench on the GPU (``bench=True``; the harness times nothing on the CPU) needs the
    project's A/B policy, ``ab``: the harness judges the timed A/B by it. Without one this raises
    ValueError here, a caller's error, where the harness would have crashed on the GPU and the
    crash been read as the candidate's."""
    if bench and device != "cpu" and ab is None:
        raise ValueError("run_harness(bench=True) needs ab=: the project's ABPolicy (ABPolicy.from_settings)")
    with tempfile.TemporaryDirectory(prefix="kperf-agent-") as d:
        cand = Path(d) / "candidate.py"
        cand.write_text(candidate_source, encoding="utf-8")
        result = Path(d) / "result.json"
        nonce = secrets.token_hex(16)
        job = {
            "target": target,
            "original": str(Path(original).resolve()),
            "candidate": str(cand),
            "device": device,
            "seeds": seeds,
            "bench": bench,
            "bench_budget_s": bench_budget_s,
            "ab": asdict(ab) if ab is not None else None,  # the A/B verdict's policy, whole
            "value_check": value_check,
            "nonce": nonce,
            "result": str(result),
        }
        env = sandbox_env()
        root = str(Path(__file__).resolve().parents[2])  # kperf_ci's parent, for -m in any cwd
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        if device == "cpu":
            env["TRITON_INTERPRET"] = "1"
            env["CUDA_VISIBLE_DEVICES"] = ""
        t0 = time.monotonic()
        try:
            proc = subprocess.run(
                [python or sys.executable, "-m", "kperf_ci.agent.harness"],
                input=json.dumps(job),
                text=True,
                capture_output=True,
                env=env,
                cwd=d,
                timeout=timeout_s,
                start_new_session=True,
            )
        except subprocess.TimeoutExpired:
            return Verdict(
                False,
                checks.TIMEOUT,
                f"did not finish within {timeout_s:.0f} s",
                seconds=time.monotonic() - t0,
                device=device,
            )
        seconds = time.monotonic() - t0
        try:
            data = json.loads(result.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = None
        if not isinstance(data, dict) or data.get("nonce") != nonce:
            tail = (proc.stderr or "").strip().splitlines()[-1:] or ["no output"]
            return Verdict(
                False,
                checks.CRASH,
                f"harness exited {proc.returncode} without a verdict: {tail[0][:200]}",
                seconds=seconds,
                device=device,
            )
    extra = {k: v for k, v in data.items() if k in ("value_dependence_ms",)}
    return Verdict(
        bool(data.get("ok")),
        str(data.get("hack", "")),
        str(data.get("reason", "")),
        data.get("correctness") or {},
        data.get("bench"),
        seconds,
        device,
        extra,
    )
