"""A scripted OpenAI-compatible chat-completions server on loopback: it drives the agent
frameworks of the conformance suite. It is not a model.

Each agent framework under test is pointed at this server as its model endpoint. The
replies are scripted per agent: a reply list is chosen by the first *key* (an agent's
name, a phrase of its instructions) found in the request's system text (or, when a
request has none, anywhere in its messages), and its replies are served in order. A
reply is text, tool calls (OpenAI `tool_calls`), or an HTTP error (the crash variants).
`stream: true` is answered with server-sent chunks as OpenAI sends them, tool calls
included, and `stream_options.include_usage` with a final usage chunk.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Reply", "ScriptedOpenAI", "call", "fail", "say"]


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True)
class Reply:
    """One scripted answer to a chat-completion request."""

    content: str | None = None
    tool_calls: Sequence[ToolCall] = ()
    status: int = 200
    """Not 200: the endpoint fails with this status (an OpenAI-shaped error body)."""


def say(text: str) -> Reply:
    return Reply(content=text)


def call(name: str, content: str | None = None, /, **arguments: Any) -> Reply:
    """A reply calling tool `name` with `arguments` (and optional text beside it)."""
    return Reply(content=content, tool_calls=(ToolCall(name, arguments),))


def fail(status: int = 500) -> Reply:
    return Reply(status=status)


@dataclass
class ScriptedOpenAI:
    """Serves `script` (key → replies, see the module docstring) on a free loopback port."""

    script: Mapping[str, Sequence[Reply]]
    requests: list[dict[str, Any]] = field(default_factory=list)
    served: list[tuple[str, Reply]] = field(default_factory=list)
    _cursor: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None
    _ids: Iterator[int] = field(default_factory=itertools.count)

    @property
    def base_url(self) -> str:
        """The OpenAI base URL (ends in /v1)."""
        assert self._server is not None, "the server is not running"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def remaining(self) -> dict[str, int]:
        """Replies not served yet, per key (a scenario that ran as planned has none left)."""
        return {
            key: len(replies) - self._cursor.get(key, 0)
            for key, replies in self.script.items()
            if len(replies) > self._cursor.get(key, 0)
        }

    def _choose(self, body: Mapping[str, Any]) -> tuple[str, Reply | None]:
        messages = body.get("messages") or []
        system = "\n".join(
            _text(message.get("content"))
            for message in messages
            if isinstance(message, dict) and message.get("role") in ("system", "developer")
        )
        haystack = system or json.dumps(messages, ensure_ascii=False)
        for key, replies in self.script.items():
            if key in haystack:
                position = self._cursor.get(key, 0)
                if position >= len(replies):
                    return key, None
                self._cursor[key] = position + 1
                return key, replies[position]
        return "", None

    def _answer(self, body: dict[str, Any]) -> tuple[int, Reply | None, str]:
        with self._lock:
            self.requests.append(body)
            key, reply = self._choose(body)
            if reply is None:
                detail = f"no scripted reply left for {key!r}" if key else "no key matched"
                return 500, None, detail
            self.served.append((key, reply))
            return reply.status, reply, ""

    @contextmanager
    def running(self) -> Iterator[ScriptedOpenAI]:
        scripted = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _send(self, status: int, payload: Mapping[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._send(200, {"object": "list", "data": [{"id": "scripted", "object": "model"}]})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    self._send(400, {"error": {"message": "body is not JSON"}})
                    return
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                status, reply, detail = scripted._answer(body)
                if reply is None or status != 200:
                    message = detail or f"scripted failure ({status})"
                    error = {"message": message, "type": "server_error", "code": None}
                    self._send(status, {"error": error})
                    return
                completion_id = f"chatcmpl-scripted-{next(scripted._ids)}"
                model = str(body.get("model") or "scripted")
                if body.get("stream"):
                    self._stream(completion_id, model, reply, body)
                else:
                    self._send(200, _completion(completion_id, model, reply))

            def _stream(
                self, completion_id: str, model: str, reply: Reply, body: Mapping[str, Any]
            ) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                usage = (body.get("stream_options") or {}).get("include_usage")
                for chunk in _chunks(completion_id, model, reply, with_usage=bool(usage)):
                    self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

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


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in content
        )
    return ""


_USAGE = {"prompt_tokens": 120, "completion_tokens": 24, "total_tokens": 144}


def _tool_calls(reply: Reply, completion_id: str) -> list[dict[str, Any]]:
    return [
        {
            "id": f"call_{completion_id[-6:]}_{n}",
            "type": "function",
            "function": {"name": tool.name, "arguments": json.dumps(dict(tool.arguments))},
        }
        for n, tool in enumerate(reply.tool_calls)
    ]


def _completion(completion_id: str, model: str, reply: Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = _tool_calls(reply, completion_id)
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if reply.tool_calls else "stop",
            }
        ],
        "usage": _USAGE,
    }


def _chunks(
    completion_id: str, model: str, reply: Reply, *, with_usage: bool
) -> Iterator[dict[str, Any]]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    yield chunk({"role": "assistant", "content": ""})
    if reply.content:
        # Two pieces, so a client that does not join deltas shows half an answer.
        middle = len(reply.content) // 2
        for piece in (reply.content[:middle], reply.content[middle:]):
            if piece:
                yield chunk({"content": piece})
    for n, tool in enumerate(_tool_calls(reply, completion_id)):
        arguments = tool["function"]["arguments"]
        head = {"index": n, "id": tool["id"], "type": "function"}
        yield chunk({"tool_calls": [{**head, "function": {"name": tool["function"]["name"]}}]})
        middle = len(arguments) // 2
        for piece in (arguments[:middle], arguments[middle:]):
            yield chunk({"tool_calls": [{"index": n, "function": {"arguments": piece}}]})
    yield chunk({}, "tool_calls" if reply.tool_calls else "stop")
    if with_usage:
        yield {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "choices": [],
            "usage": _USAGE,
        }
