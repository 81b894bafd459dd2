"""Issue 23, finding 4 (LLM side): the API key never follows a redirect to another host, and a
reply that echoes it is masked before anything is printed, stored or shown."""

from __future__ import annotations

import base64
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from llm_server import FakeLLM, reply_with
from test_agent_cli import KEY, SRC, _run_llm, kperf

from kperf_ci.agent import cheats


class Catcher:
    """Another host (another port of 127.0.0.1): records every request's headers, any method."""

    def __init__(self) -> None:
        self.headers: list[dict[str, str]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def _any(self) -> None:
                owner.headers.append(dict(self.headers))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            do_GET = do_POST = _any  # noqa: N815 - http.server's names

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1/chat/completions"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_redirect_does_not_carry_the_key_to_another_host(tmp_path):
    other = Catcher()
    try:
        for code in (301, 302, 307, 308):
            with FakeLLM([("status", code, {"Location": other.url})]) as srv:
                p = _run_llm(tmp_path, srv.base_url, "--max-llm-calls", "1")
            out = p.stdout + p.stderr
            assert p.returncode == 2, out
            assert f"HTTP {code}" in p.stderr and "final URL" in p.stderr, p.stderr
            assert KEY not in out
        assert all("Authorization" not in h and KEY not in str(h) for h in other.headers), other.headers
    finally:
        other.close()


def test_a_reply_echoing_the_key_is_masked_everywhere(tmp_path):
    src = cheats.good(SRC).replace("def ", f"# key: {KEY}\ndef ", 1)
    script = [("reply", reply_with(src, f"blocks of 2048, key {KEY}"))]
    db = tmp_path / "a.db"
    with FakeLLM(script) as srv:
        p = _run_llm(tmp_path, srv.base_url, "--max-llm-calls", "1", "--no-value-check")
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "blocks of 2048, key ***" in out
    assert KEY not in out
    assert KEY not in db.read_bytes().decode("latin-1")
    for f in (tmp_path / "out").rglob("*"):
        if f.is_file():
            assert KEY not in f.read_bytes().decode("latin-1"), f
    shown = kperf("show", "--db", str(db))
    assert shown.returncode == 0 and KEY not in shown.stdout + shown.stderr
    assert "***" in shown.stdout


def _leaks(text: str) -> list[str]:
    """The forms of the key an endpoint may echo (issue 37): in any case, base64 on its own or
    inside a longer encoded string."""
    b64 = base64.b64encode(KEY.encode()).decode().rstrip("=")
    inside = base64.b64encode(b"key=" + KEY.encode()).decode()[8:-4]  # the key's own characters
    found = [KEY] if KEY.lower() in text.lower() else []
    hexed = KEY.encode().hex()
    found += [hexed] if hexed in text.lower() else []
    return found + [f for f in (b64, inside) if f in text]


def test_the_key_echoed_in_another_case_or_base64_is_masked(tmp_path):
    """Was: printed and stored in the agent database twice (only the exact key was masked)."""
    encoded = base64.b64encode(KEY.encode()).decode()
    inside = base64.b64encode(b"key=" + KEY.encode()).decode()
    hypothesis = f"blocks of 2048, {KEY.upper()} {encoded} {inside} {KEY.encode().hex().upper()}"
    db = tmp_path / "a.db"
    with FakeLLM([("reply", reply_with(cheats.good(SRC), hypothesis))]) as srv:
        p = _run_llm(tmp_path, srv.base_url, "--max-llm-calls", "1", "--no-value-check")
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "blocks of 2048, ***" in out
    assert not _leaks(out), _leaks(out)
    assert not _leaks(db.read_bytes().decode("latin-1"))


@pytest.mark.parametrize(
    "url",
    [
        "http://user:{key}@127.0.0.1:{port}/v1",
        "http://127.0.0.1:{port}/v1?api-key={key}",
        "http://127.0.0.1:{port}/v1?Access_Token=abc",
    ],
    ids=["userinfo", "api-key", "token"],
)
def test_a_base_url_with_credentials_is_refused_before_any_request(tmp_path, url):
    with FakeLLM([("reply", reply_with(cheats.good(SRC)))]) as srv:
        port = srv.base_url.split(":")[2].split("/")[0]
        p = _run_llm(tmp_path, url.format(key=KEY, port=port), "--max-llm-calls", "1")
        assert srv.requests == []
    assert p.returncode == 2, p.stdout + p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "KPERF_LLM_BASE_URL" in lines[0] and "KPERF_LLM_API_KEY" in lines[0], p.stderr
    assert KEY not in p.stdout + p.stderr


@pytest.mark.parametrize("broken", ["close", "short"])
def test_a_connection_that_breaks_mid_answer_is_an_endpoint_problem_not_exit_3(tmp_path, broken):
    """Found by the fresh walk of issue 37: RemoteDisconnected and IncompleteRead were exit 3
    ("a bug in kperf-ci"); they are the endpoint's problem, retried, then one line, exit 2."""
    with FakeLLM([(broken,)] * 6) as srv:
        p = _run_llm(tmp_path, srv.base_url, "--max-llm-calls", "3", "--no-value-check")
    out = p.stdout + p.stderr
    assert p.returncode == 2, out
    assert "bug in kperf-ci" not in out and "Traceback" not in out
    assert not _leaks(out)
