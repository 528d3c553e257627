"""A scripted OpenAI-compatible HTTP stub on loopback, for protocol fault cases only.

It is not a model: it replays the replies a test scripts (slow replies, HTTP errors,
malformed JSON, refusals, wrong answers) so the client's handling of each can be
checked through a real HTTP exchange. Model behaviour is tested against the real
local model (tests/llm_server.py).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class ScriptedReply:
    """One scripted answer to a chat-completion request."""

    content: str | None = None
    """The assistant message's text (a normal 200 completion)."""
    status: int = 200
    raw_body: str | None = None
    """Sent as-is instead of a completion (for non-JSON bodies and error bodies)."""
    delay: float = 0.0
    """Seconds to wait before answering (to trigger client timeouts)."""
    refusal: str | None = None
    usage: tuple[int, int] | None = (100, 20)
    """(prompt_tokens, completion_tokens), or None to omit usage."""
    finish_reason: str = "stop"


def answer(data: dict[str, Any], **fields: Any) -> ScriptedReply:
    """A completion whose text is `data` as JSON."""
    return ScriptedReply(content=json.dumps(data), **fields)


def error(status: int, message: str = "scripted failure") -> ScriptedReply:
    return ScriptedReply(status=status, raw_body=json.dumps({"error": {"message": message}}))


@dataclass(frozen=True)
class ContextWindow:
    """A model context the stub enforces as llama.cpp's server does: a prompt of more than
    `tokens` tokens (counted as `chars_per_token` characters each) gets HTTP 400."""

    tokens: int
    chars_per_token: float = 2.5
    reports_counts: bool = True
    """Whether the error says the counts (llama.cpp since 2025) or not (older servers)."""

    def prompt_tokens(self, body: dict[str, Any]) -> int:
        chars = sum(len(str(m.get("content") or "")) for m in body.get("messages", []))
        return int(chars / self.chars_per_token) + 1

    def refusal(self, body: dict[str, Any]) -> ScriptedReply | None:
        """The 400 answer to `body`, or None when its prompt fits."""
        requested = self.prompt_tokens(body)
        if requested <= self.tokens:
            return None
        if not self.reports_counts:
            return error(400, "the request exceeds the available context size, try increasing it")
        problem = {
            "code": 400,
            "message": f"request ({requested} tokens) exceeds the available context size "
            f"({self.tokens} tokens), try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": requested,
            "n_ctx": self.tokens,
        }
        return ScriptedReply(status=400, raw_body=json.dumps({"error": problem}))


class StubLLM:
    """Serves `script` in order to POST /v1/chat/completions; records every request body.

    With `reject_json_schema`, requests asking for `response_format.type == "json_schema"`
    get HTTP 500 (as llama-cpp-python's server does) without consuming the script; with
    `context`, so do prompts longer than that window (HTTP 400).
    """

    def __init__(
        self,
        script: Iterable[ScriptedReply],
        *,
        reject_json_schema: bool = False,
        context: ContextWindow | None = None,
    ):
        self.script = list(script)
        self.reject_json_schema = reject_json_schema
        self.context = context
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None, "the stub is not running"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    @property
    def completions(self) -> list[dict[str, Any]]:
        """Request bodies that reached the script (not rejected for their format)."""
        return [r for r in self.requests if not r.get("_rejected")]

    def _next(self, body: dict[str, Any]) -> ScriptedReply:
        with self._lock:
            self.requests.append(body)
            response_format = body.get("response_format") or {}
            if self.reject_json_schema and response_format.get("type") == "json_schema":
                body["_rejected"] = True
                return error(500, "response_format json_schema is not supported")
            refusal = self.context.refusal(body) if self.context is not None else None
            if refusal is not None:
                body["_rejected"] = True
                return refusal
            if not self.script:
                return error(500, "the stub's script is exhausted")
            return self.script.pop(0)

    @contextmanager
    def running(self) -> Iterator[StubLLM]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _send(self, status: int, body: str) -> None:
                data = body.encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    # The client gave up (timeout test); nothing to deliver.
                    pass

            def do_GET(self) -> None:
                self._send(200, json.dumps({"object": "list", "data": [{"id": "stub"}]}))

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                reply = stub._next(body)
                if reply.delay:
                    time.sleep(reply.delay)
                if reply.raw_body is not None:
                    self._send(reply.status, reply.raw_body)
                    return
                message: dict[str, Any] = {"role": "assistant", "content": reply.content}
                if reply.refusal is not None:
                    message = {"role": "assistant", "content": None, "refusal": reply.refusal}
                completion: dict[str, Any] = {
                    "id": f"stub-{len(stub.requests)}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model", "stub"),
                    "choices": [
                        {"index": 0, "message": message, "finish_reason": reply.finish_reason}
                    ],
                }
                if reply.usage is not None:
                    prompt, done = reply.usage
                    completion["usage"] = {
                        "prompt_tokens": prompt,
                        "completion_tokens": done,
                        "total_tokens": prompt + done,
                    }
                self._send(reply.status, json.dumps(completion))

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._server = server
        thread.start()
        try:
            yield self
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)
