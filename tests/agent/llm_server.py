"""A real OpenAI-compatible HTTP server on 127.0.0.1 (stdlib), scripted reply by reply.

Each POST to ``/v1/chat/completions`` takes the next step of the script:
``("reply", content)``, ``("status", code, headers)``, ``("sleep", seconds, content)`` (answers
late: a client timeout), ``("raw", bytes)`` (a body that is not chat-completions JSON),
``("close",)`` (the connection dropped unanswered), ``("short",)`` (a body cut short).
Requests are recorded (path, headers, JSON body) for the tests to inspect.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def completion(content: str) -> bytes:
    return json.dumps(
        {
            "id": "x",
            "object": "chat.completion",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
            ],
        }
    ).encode()


def reply_with(source: str, hypothesis: str = "bigger blocks") -> str:
    return f"Hypothesis: {hypothesis}\n\n```python\n{source}```\n"


class FakeLLM:
    def __init__(self, script: list[tuple[Any, ...]]):
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n)
                owner.requests.append(
                    {"path": self.path, "headers": dict(self.headers), "json": json.loads(body or b"{}")}
                )
                if self.path != "/v1/chat/completions":
                    self._send(404, b"{}")
                    return
                step = owner.script.pop(0) if owner.script else ("status", 500, {})
                kind = step[0]
                if kind == "reply":
                    self._send(200, completion(step[1]))
                elif kind == "status":
                    self._send(
                        step[1], b'{"error": {"message": "scripted"}}', step[2] if len(step) > 2 else {}
                    )
                elif kind == "sleep":
                    time.sleep(step[1])
                    try:
                        self._send(200, completion(step[2]))
                    except OSError:
                        pass
                elif kind == "raw":
                    self._send(200, step[1])
                elif kind == "close":  # the connection dropped before any answer
                    self.close_connection = True
                    self.connection.shutdown(2)
                elif kind == "short":  # a body shorter than its Content-Length
                    self.send_response(200)
                    self.send_header("Content-Length", "1000")
                    self.end_headers()
                    self.wfile.write(b'{"choices": [')
                    self.close_connection = True

            def _send(self, code: int, body: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> FakeLLM:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
