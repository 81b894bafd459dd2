"""A proposer backed by any OpenAI-compatible chat-completions endpoint.

``KPERF_LLM_BASE_URL`` (e.g. ``https://api.openai.com/v1``), ``KPERF_LLM_MODEL``, and the key
from ``KPERF_LLM_API_KEY`` or ``OPENAI_API_KEY``. The key goes into one request header and
nowhere else: not into messages, exceptions, ``repr`` or the population store. 429 and 5xx are
retried with exponential backoff (``Retry-After`` honoured up to a cap), timeouts too; every
HTTP attempt counts against the LLM-call budget. A reply without exactly the expected parts (a
hypothesis line and one python block defining the launcher) is rejected as malformed.
"""

from __future__ import annotations

import base64
import functools
import http.client
import json
import os
import re
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kperf_ci.agent.configsearch import Proposal
from kperf_ci.config import ENV_LLM_API_KEY, ENV_LLM_BASE_URL, ENV_LLM_MODEL

RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
MAX_RETRY_AFTER_S = 30.0
BACKOFF_S = 2.0  # first wait before a retry (no Retry-After); doubles per attempt
_CODE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.S)
_HYP = re.compile(r"^\s*(?:\*\*)?hypothesis(?:\*\*)?\s*:\s*(.+)$", re.I | re.M)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Follow no redirect: urllib copies headers set with ``add_header`` onto the redirected
    request, so a 302 to another host would receive ``Authorization: Bearer <key>``. A 3xx
    becomes an HTTPError that names the fix (use the final URL)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001, ANN201
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def mask_key(text: str, key: str) -> str:
    """``text`` with the key replaced: a reply that echoes it (asked to, or by a prompt
    injection in the kernel source) must not be printed, stored in the population or shown.
    Its case variants, its hex form and its base64 forms (standard and URL-safe, at any
    alignment in a longer encoded string) are the key too: an endpoint told to "encode it"
    echoes those."""
    if not key or len(key) < 4:
        return text
    hexed = key.encode().hex()
    for form in _key_forms(key):
        text = re.sub(re.escape(form), "***", text, flags=re.I if form in (key, hexed) else 0)
    return text


@functools.lru_cache(maxsize=4)
def _key_forms(key: str) -> tuple[str, ...]:
    """The key, then the base64 runs that only it determines: encoded after 0, 1 or 2 bytes of
    something else, the characters that mix in a neighbour's bits are left out (at least 8
    characters are kept, so that short runs do not mask ordinary words)."""
    raw = key.encode()
    forms = {key, raw.hex()}
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + raw + b"\0\0").decode()
        start = -(-shift * 4 // 3)  # the first character made of the key's bits only
        end = (shift + len(raw)) * 8 // 6  # the last one
        run = encoded[start:end]
        if len(run) >= 8:
            forms.add(run)
            forms.add(run.replace("+", "-").replace("/", "_"))
    return tuple(sorted(forms, key=len, reverse=True))


class ProposerError(Exception):
    """One line, never with the key: why no proposal came back (``kind``: malformed, http, ...)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Endpoint:
    base_url: str
    model: str
    api_key: str = ""

    def __repr__(self) -> str:  # the key never reaches a log through repr()
        key = "set" if self.api_key else "unset"
        return f"Endpoint(base_url={self.base_url!r}, model={self.model!r}, api_key=<{key}>)"


def endpoint_from_env(env: Mapping[str, str] | None = None) -> Endpoint | None:
    """The configured endpoint, or None when ``KPERF_LLM_BASE_URL`` is unset (offline search)."""
    env = os.environ if env is None else env
    base = env.get(ENV_LLM_BASE_URL, "").strip()
    if not base:
        return None
    if not base.startswith(("http://", "https://")):
        raise ValueError(
            "KPERF_LLM_BASE_URL must start with http:// or https:// (e.g. https://api.openai.com/v1)"
        )
    model = env.get(ENV_LLM_MODEL, "").strip()
    if not model:
        raise ValueError("KPERF_LLM_BASE_URL is set but KPERF_LLM_MODEL is not; set the model name")
    key = env.get(ENV_LLM_API_KEY) or env.get("OPENAI_API_KEY") or ""
    _refuse_credentials_in_url(base, key)
    return Endpoint(base.rstrip("/"), model, key)


#: query parameters that carry a credential (compared without case, ``-`` and ``_``)
_SECRET_PARAMS = ("key", "apikey", "token", "accesstoken", "secret", "password", "auth", "sig", "signature")


def _refuse_credentials_in_url(base: str, key: str) -> None:
    """The base URL is printed in messages and was handed whole to name resolution: a key in its
    userinfo (``http://u:KEY@host``) or its query string (``?api-key=KEY``) would leak there.
    Refused before any request; the message never repeats the URL."""
    parts = urllib.parse.urlsplit(base)
    if "@" in parts.netloc:
        raise ValueError(
            "KPERF_LLM_BASE_URL holds credentials before the host (user:password@); remove them and put "
            "the key in KPERF_LLM_API_KEY (sent as a header, never printed)"
        )
    names = [re.sub(r"[-_]", "", n.lower()) for n, _ in urllib.parse.parse_qsl(parts.query, True)]
    where = ""
    if any(n in _SECRET_PARAMS or n.endswith(_SECRET_PARAMS[:5]) for n in names):
        where = "a credential in its query string (key=, api-key=, token=, ...)"
    elif key and len(key) >= 4 and key.lower() in urllib.parse.unquote(base).lower():
        where = "the API key itself"
    if where:
        raise ValueError(
            f"KPERF_LLM_BASE_URL carries {where}; remove it and put the key in KPERF_LLM_API_KEY "
            "(sent as a header, never printed)"
        )


def parse_reply(content: str, launcher: str) -> tuple[str, str]:
    """(hypothesis, source) from a reply; ProposerError("malformed") when a part is missing."""
    blocks = _CODE.findall(content or "")
    if len(blocks) != 1:
        raise ProposerError("malformed", f"reply has {len(blocks)} python code blocks, expected exactly 1")
    source = blocks[0]
    if "@triton.jit" not in source:
        raise ProposerError("malformed", "the code block has no @triton.jit kernel")
    if not re.search(rf"^def {re.escape(launcher)}\(", source, re.M):
        raise ProposerError("malformed", f"the code block defines no launcher {launcher}()")
    try:
        compile(source, "<candidate>", "exec")
    except SyntaxError as e:
        raise ProposerError("malformed", f"the code block is not valid Python (line {e.lineno})") from None
    m = _HYP.search(content)
    if not m:
        raise ProposerError("malformed", "reply has no 'Hypothesis:' line")
    return m.group(1).strip()[:500], source


class LLMProposer:
    """Chat-completions client with retries; ``calls`` counts HTTP attempts."""

    name = "llm"

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        timeout_s: float = 120.0,
        retries: int = 3,
        backoff_s: float = BACKOFF_S,
        sleep: Callable[[float], None] = time.sleep,
        max_calls: int | None = None,
    ):
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.sleep = sleep
        self.max_calls = max_calls
        self.calls = 0
        self.answered = False  # any HTTP 200 from the endpoint in this process
        self.failure = ""  # why the latest attempt failed: "unreachable", "timeout" or "HTTP <code>"
        self.last_error = ""  # the latest ProposerError("http"/"budget") message (no key in it)

    def __repr__(self) -> str:
        return f"LLMProposer({self.endpoint!r})"

    def propose(self, messages: list[dict[str, str]], launcher: str) -> Proposal:
        content = self._complete(messages)
        hyp, source = parse_reply(content, launcher)
        return Proposal(source=source, hypothesis=hyp, proposer=f"llm:{self.endpoint.model}")

    def _complete(self, messages: list[dict[str, str]]) -> str:
        try:
            return self._attempts(messages)
        except ProposerError as e:
            if e.kind in ("http", "budget"):
                self.last_error = str(e)
            raise

    def _attempts(self, messages: list[dict[str, str]]) -> str:
        body = json.dumps({"model": self.endpoint.model, "messages": messages, "temperature": 0.2}).encode()
        url = self.endpoint.base_url + "/chat/completions"
        last = ""
        for attempt in range(self.retries + 1):
            if self.max_calls is not None and self.calls >= self.max_calls:
                raise ProposerError("budget", f"LLM call budget ({self.max_calls}) spent{last}")
            self.calls += 1
            req = urllib.request.Request(
                url, data=body, method="POST", headers={"Content-Type": "application/json"}
            )
            if self.endpoint.api_key:  # unredirected as well: never copied to a redirect
                req.add_unredirected_header("Authorization", "Bearer " + self.endpoint.api_key)
            try:
                with _OPENER.open(req, timeout=self.timeout_s) as resp:
                    raw = resp.read()
                self.answered = True
                return mask_key(_content(raw), self.endpoint.api_key)
            except urllib.error.HTTPError as e:
                self.failure = f"HTTP {e.code}"
                if 300 <= e.code < 400:
                    raise ProposerError(
                        "http",
                        f"{url} answered HTTP {e.code} (a redirect, not followed: the key is never sent "
                        "to another address); set KPERF_LLM_BASE_URL to the final URL",
                    ) from None
                if e.code not in RETRY_STATUS:
                    raise ProposerError(
                        "http", f"{url} answered HTTP {e.code}; check the URL, model and key"
                    ) from None
                last = f" (last: HTTP {e.code})"
                wait = _retry_after(e.headers.get("Retry-After")) if e.code == 429 else None
            except TimeoutError:
                self.failure = "timeout"
                last, wait = f" (last: no answer within {self.timeout_s:.0f} s)", None
            except urllib.error.URLError as e:
                if isinstance(e.reason, (TimeoutError, socket.timeout)):
                    self.failure = "timeout"
                    last, wait = f" (last: no answer within {self.timeout_s:.0f} s)", None
                else:
                    self.failure = "unreachable"
                    raise ProposerError("http", f"cannot reach {url}: {e.reason}") from None
            except (http.client.HTTPException, ConnectionError) as e:
                # the connection broke mid-answer (closed, reset, a bad status line, a short
                # body): an endpoint problem like a 5xx, retried, never a kperf-ci bug (exit 3)
                self.failure = "broken connection"
                last, wait = f" (last: {type(e).__name__}: the connection broke mid-answer)", None
            if attempt < self.retries:
                self.sleep(wait if wait is not None else self.backoff_s * (2**attempt))
        raise ProposerError("http", f"{url}: gave up after {self.retries + 1} attempts{last}")


def endpoint_problem(p: LLMProposer) -> str:
    """One line naming the problem and the fix when the configured endpoint never answered in
    this run (unreachable, key rejected, 5xx or timeouts until the budget); "" when it answered
    at least once, or was never asked. Never contains the key."""
    if p.answered or p.calls == 0 or not p.last_error:
        return ""
    f = p.failure
    if f == "unreachable":
        fix = "check KPERF_LLM_BASE_URL, or unset it to use the offline config search"
    elif f in ("HTTP 401", "HTTP 403"):
        fix = "the key was rejected: check KPERF_LLM_API_KEY (or OPENAI_API_KEY) for this endpoint"
    elif f.startswith("HTTP 3"):
        fix = "the endpoint redirects (not followed: the key stays); set KPERF_LLM_BASE_URL to the final URL"
    elif f == "HTTP 404":
        fix = "check KPERF_LLM_BASE_URL (the path before /chat/completions, e.g. .../v1) and KPERF_LLM_MODEL"
    elif f.startswith("HTTP 4"):
        fix = "check KPERF_LLM_BASE_URL, KPERF_LLM_MODEL and the key"
    else:  # 429, 5xx, timeouts until the budget or the retries ran out
        fix = (
            "the endpoint kept failing: try again later, raise --max-llm-calls, "
            "or unset KPERF_LLM_BASE_URL to use the offline config search"
        )
    return f"the configured LLM endpoint gave no reply in this run ({p.last_error}); {fix}"


def _retry_after(value: str | None) -> float | None:
    try:
        return min(max(float(value), 0.0), MAX_RETRY_AFTER_S) if value else None
    except ValueError:
        return None


def _content(raw: bytes) -> str:
    try:
        data: Any = json.loads(raw)
        content = data["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise ProposerError(
            "malformed", "the endpoint's answer is not a chat-completions JSON object"
        ) from None
    if not isinstance(content, str):
        raise ProposerError("malformed", "the reply's message content is not text")
    return content
