"""A real local HTTP server speaking the OpenAI wire format, answering from a script.

TEST DOUBLE of an OpenAI-compatible endpoint: it knows no language, it only serves what the
test scripted. It exists so that ``OpenAILLM`` / ``OpenAIEmbeddings`` (and the services using
them) are tested through the real ``openai`` client, real HTTP and real JSON.

Usage::

    from tests.support.fake_openai_server import run_fake_openai

    with run_fake_openai({"What is 2+2?": "4"}) as base_url:
        llm = OpenAILLM("fake-model", base_url=base_url, api_key="k")
        assert llm.complete([{"role": "user", "content": "What is 2+2?"}]) == "4"
        assert base_url.requests[-1]["body"]["model"] == "fake-model"

``run_fake_openai(script, *, fail_first=0, fail_status=429, delay_sec=0.0, slow_first=None,
embed=None)`` yields a ``FakeOpenAI``: a ``str`` (the base URL, ``http://127.0.0.1:PORT/v1``)
that also carries ``requests`` (every request: ``{"path", "body", "headers"}``; header
names lowercased).

* ``script``: ``dict`` keyed by the last user message's content -> answer, or a callable
  ``(request_body: dict) -> answer``. An answer is a ``str`` (the assistant content) or a
  ``dict``/``list`` (sent as its JSON text, handy for structured output). A message that is
  not in the dict gets HTTP 400 ``"no scripted answer for ..."`` (the client raises).
* ``fail_first=N``: the first N requests (any endpoint) answer ``fail_status`` (429 -> with
  ``Retry-After: 0``; 500/503 -> server error) before normal service.
* ``delay_sec``/``slow_first``: sleep ``delay_sec`` before answering the first ``slow_first``
  requests (all requests when ``slow_first`` is None) - to trigger client timeouts.
* ``embed``: ``(texts, dimensions | None) -> list[list[float]]`` for ``POST /v1/embeddings``;
  default: the ``HashEmbedder`` test double (384-d, or ``dimensions`` if requested).

Outages, switched on and off while the test runs (an LLM that is down "for a while")::

    base_url.fail_with(503)   # every request answers 503 (or 429, 500...) until restore()
    base_url.refuse()         # stop listening: clients get "connection refused"
    base_url.restore()        # answer again, on the same port

Like a real server it honours ``max_tokens`` / ``max_completion_tokens``: an answer longer
than that many tokens (counted as 4 characters each, the project's ``approx_tokens``) is
cut there and sent with ``finish_reason: "length"``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from engramdb.infra.providers.scripted import HashEmbedder, last_user_content

Script = Mapping[str, Any] | Callable[[dict[str, Any]], Any]
EmbedFn = Callable[[list[str], int | None], list[list[float]]]


class FakeOpenAI(str):
    """The base URL (``.../v1``), plus the log of requests the server received and the
    outage switches (see the module doc)."""

    requests: list[dict[str, Any]]
    _control: _Control

    @property
    def base_url(self) -> str:
        return str(self)

    def fail_with(self, status: int) -> None:
        self._control.state.outage_status = status

    def refuse(self) -> None:
        self._control.stop_listening()

    def restore(self) -> None:
        self._control.state.outage_status = None
        self._control.listen()

    def chat_requests(self) -> int:
        """Chat-completion requests the server received (answered or failed)."""
        return sum(1 for r in self.requests if r["path"].rstrip("/").endswith("/chat/completions"))


def _default_embed(texts: list[str], dimensions: int | None) -> list[list[float]]:
    return HashEmbedder(dimensions or 384).embed(texts)


class _State:
    def __init__(
        self,
        script: Script,
        fail_first: int,
        fail_status: int,
        delay_sec: float,
        slow_first: int | None,
        embed: EmbedFn,
    ) -> None:
        self.script = script
        self.fail_first = fail_first
        self.fail_status = fail_status
        self.delay_sec = delay_sec
        self.slow_first = slow_first
        self.embed = embed
        self.count = 0
        self.outage_status: int | None = None
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []


def _make_handler(state: _State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet tests
            return

        def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
            body = json.dumps(payload).encode("utf-8")
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):  # client gave up (timeout)
                pass

        def _error(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
            kind = "rate_limit_error" if status == 429 else "server_error"
            if status == 400:
                kind = "invalid_request_error"
            self._send(status, {"error": {"message": message, "type": kind}}, headers)

        def do_POST(self) -> None:  # noqa: N802 - http.server naming
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw or b"{}")
            except json.JSONDecodeError:
                self._error(400, "body is not JSON")
                return
            with state.lock:
                index = state.count
                state.count += 1
                state.requests.append(
                    {
                        "path": self.path,
                        "body": body,
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                    }
                )
            if state.outage_status is not None:
                self._error(state.outage_status, f"scripted outage ({state.outage_status})")
                return
            if state.delay_sec and (state.slow_first is None or index < state.slow_first):
                time.sleep(state.delay_sec)
            if index < state.fail_first:
                status = state.fail_status
                extra = {"Retry-After": "0"} if status == 429 else None
                self._error(status, f"scripted failure {index + 1}/{state.fail_first}", extra)
                return
            path = self.path.split("?", 1)[0].rstrip("/")
            if path.endswith("/chat/completions"):
                self._chat(body)
            elif path.endswith("/embeddings"):
                self._embeddings(body)
            else:
                self._error(404, f"unknown path {self.path}")

        def _chat(self, body: dict[str, Any]) -> None:
            if callable(state.script):
                try:
                    answer = state.script(body)
                except KeyError as exc:
                    self._error(400, f"no scripted answer: {exc}")
                    return
            else:
                key = last_user_content(body.get("messages", []))
                if key not in state.script:
                    self._error(400, f"no scripted answer for {key[:300]!r}")
                    return
                answer = state.script[key]
            content = answer if isinstance(answer, str) else json.dumps(answer)
            finish_reason = "stop"
            limit = body.get("max_tokens") or body.get("max_completion_tokens")
            if isinstance(limit, int) and len(content) > 4 * limit:
                content, finish_reason = content[: 4 * limit], "length"
            self._send(
                200,
                {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model", "fake"),
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": content},
                            "finish_reason": finish_reason,
                            "logprobs": None,
                        }
                    ],
                    "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
                },
            )

        def _embeddings(self, body: dict[str, Any]) -> None:
            texts = body.get("input", [])
            if isinstance(texts, str):
                texts = [texts]
            vectors = state.embed(list(texts), body.get("dimensions"))
            self._send(
                200,
                {
                    "object": "list",
                    "data": [
                        {"object": "embedding", "index": i, "embedding": v}
                        for i, v in enumerate(vectors)
                    ],
                    "model": body.get("model", "fake"),
                    "usage": {"prompt_tokens": 0, "total_tokens": 0},
                },
            )

    return Handler


class _Control:
    """The listening socket, which ``refuse()`` closes and ``restore()`` reopens on the port."""

    def __init__(self, state: _State) -> None:
        self.state = state
        self.handler = _make_handler(state)
        self.port = 0
        self.server: ThreadingHTTPServer | None = None
        self.thread: threading.Thread | None = None
        self.listen()

    def listen(self) -> None:
        if self.server is not None:
            return
        server = ThreadingHTTPServer(("127.0.0.1", self.port), self.handler)
        server.daemon_threads = True
        self.port = server.server_address[1]
        self.thread = threading.Thread(target=server.serve_forever, name="fake-openai", daemon=True)
        self.thread.start()
        self.server = server

    def stop_listening(self) -> None:
        server, self.server = self.server, None
        if server is not None:
            server.shutdown()
            server.server_close()
            assert self.thread is not None
            self.thread.join(timeout=5)


@contextmanager
def run_fake_openai(
    script: Script | None = None,
    *,
    fail_first: int = 0,
    fail_status: int = 429,
    delay_sec: float = 0.0,
    slow_first: int | None = None,
    embed: EmbedFn | None = None,
) -> Iterator[FakeOpenAI]:
    """Serve on 127.0.0.1 (free port) in a daemon thread; yields the base URL (see module doc)."""
    state = _State(
        script if script is not None else {},
        fail_first,
        fail_status,
        delay_sec,
        slow_first,
        embed or _default_embed,
    )
    control = _Control(state)
    base = FakeOpenAI(f"http://127.0.0.1:{control.port}/v1")
    base.requests = state.requests
    base._control = control
    try:
        yield base
    finally:
        control.stop_listening()
