"""An OpenAI-compatible front for llama-server that returns the tool calls a small model
writes as text as OpenAI `tool_calls`.

llama-server parses a tool call only in the form the chat template shows
(`<tool_call>{...}</tool_call>` for Qwen2.5). Qwen2.5-Coder-1.5B mostly writes the same
call another way: bare JSON, a ```json block, inside `<tools>` tags, or with the
template's doubled braces (`{{"name": …}}`). The front forwards each request unchanged
and, when the request offered tools and the reply holds no `tool_calls`, reads every
JSON object in the reply's text that names one of the offered tools with an
`arguments` object as a call. A streamed request is answered from one upstream reply as
an OpenAI event stream: the text, or one tool-call delta per call, then the finish
reason, the usage when asked for, and `[DONE]`.
"""

from __future__ import annotations

import json
import re
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["ToolCallFront", "events", "recover_tool_calls"]

_FENCE = re.compile(r"```[a-zA-Z]*\n?|```")
_TAGS = re.compile(r"</?(?:tool_call|tools|tool|function_call|json)>")


def _objects(text: str) -> Iterator[dict[str, Any]]:
    """Every top-level JSON object in `text`, in order (others are skipped)."""
    decoder = json.JSONDecoder()
    position = 0
    while (start := text.find("{", position)) != -1:
        try:
            value, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            position = start + 1
            continue
        if isinstance(value, dict):
            yield value
        position = end


def _unwrap(value: dict[str, Any]) -> dict[str, Any]:
    # {"type": "function", "function": {"name": …, "arguments": …}}
    inner = value.get("function")
    return inner if isinstance(inner, dict) and "name" in inner else value


def recover_tool_calls(text: str, tools: Mapping[str, set[str] | None]) -> list[dict[str, Any]]:
    """The OpenAI tool calls written in `text`: JSON objects naming one of `tools` with
    an `arguments` object (a tool's definition echoed back, with `parameters`, is not
    one). `tools` maps each name to its declared parameters (None: any); arguments it
    does not declare are dropped. Empty when there are none."""
    cleaned = _TAGS.sub("\n", _FENCE.sub("\n", text))
    candidates = [cleaned, cleaned.replace("{{", "{").replace("}}", "}")]
    for candidate in candidates:
        calls = []
        for found in _objects(candidate):
            value = _unwrap(found)
            name = value.get("name")
            arguments = value.get("arguments")
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments)
                except json.JSONDecodeError:
                    continue
            if isinstance(name, str) and name in tools and isinstance(arguments, dict):
                declared = tools[name]
                if declared is not None:
                    arguments = {k: v for k, v in arguments.items() if k in declared}
                calls.append(
                    {
                        "id": f"call_{uuid.uuid4().hex[:24]}",
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps(arguments)},
                    }
                )
        if calls:
            return calls
    return []


def _offered(request: dict[str, Any]) -> dict[str, set[str] | None]:
    """The request's tools: name → declared parameter names (None when not declared)."""
    if request.get("tool_choice") == "none":
        return {}
    offered: dict[str, set[str] | None] = {}
    for tool in request.get("tools") or ():
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            schema = function.get("parameters")
            properties = schema.get("properties") if isinstance(schema, dict) else None
            offered[function["name"]] = set(properties) if isinstance(properties, dict) else None
    return offered


def _repair(request: dict[str, Any], reply: dict[str, Any]) -> dict[str, Any]:
    names = _offered(request)
    if not names:
        return reply
    for choice in reply.get("choices") or ():
        message = choice.get("message") or {}
        if message.get("tool_calls") or not isinstance(message.get("content"), str):
            continue
        calls = recover_tool_calls(message["content"], names)
        if calls:
            message["tool_calls"] = calls
            message["content"] = None
            choice["finish_reason"] = "tool_calls"
    return reply


def events(reply: dict[str, Any], include_usage: bool = False) -> Iterator[bytes]:
    """A non-streamed chat completion as the server-sent events of a streamed one."""
    base = {
        "id": reply.get("id", f"chatcmpl-{uuid.uuid4().hex}"),
        "object": "chat.completion.chunk",
        "created": reply.get("created", 0),
        "model": reply.get("model", ""),
    }

    def event(choices: list[dict[str, Any]], **extra: Any) -> bytes:
        return b"data: " + json.dumps({**base, "choices": choices, **extra}).encode() + b"\n\n"

    for choice in reply.get("choices") or ():
        index = choice.get("index", 0)
        message = choice.get("message") or {}
        yield event([{"index": index, "delta": {"role": "assistant", "content": ""}}])
        if message.get("content"):
            yield event([{"index": index, "delta": {"content": message["content"]}}])
        for position, call in enumerate(message.get("tool_calls") or ()):
            delta = {
                "index": position,
                "id": call.get("id"),
                "type": "function",
                "function": call.get("function", {}),
            }
            yield event([{"index": index, "delta": {"tool_calls": [delta]}}])
        yield event([{"index": index, "delta": {}, "finish_reason": choice.get("finish_reason")}])
    if include_usage and reply.get("usage"):
        yield event([], usage=reply["usage"])
    yield b"data: [DONE]\n\n"


class ToolCallFront:
    """The front, serving on `host:port` in a background thread, forwarding to
    `upstream` (an OpenAI-compatible base URL ending in /v1)."""

    def __init__(self, upstream: str, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.upstream = upstream.rstrip("/")
        front = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                front._relay(self, None)

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path.rstrip("/").endswith("/chat/completions"):
                    front._chat(self, body)
                else:
                    front._relay(self, body)

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def _url(self, path: str) -> str:
        return self.upstream + (path[len("/v1") :] if path.startswith("/v1") else path)

    def _call(self, method: str, path: str, body: bytes | None) -> tuple[int, str, bytes]:
        request = urllib.request.Request(
            self._url(path), data=body, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=3600) as answer:
                return answer.status, answer.headers.get("Content-Type", ""), answer.read()
        except urllib.error.HTTPError as error:
            return error.code, error.headers.get("Content-Type", ""), error.read()
        except OSError as error:
            message = {"error": {"message": f"the model server failed: {error}", "code": 502}}
            return 502, "application/json", json.dumps(message).encode()

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, kind: str, body: bytes) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", kind or "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def _relay(self, handler: BaseHTTPRequestHandler, body: bytes | None) -> None:
        self._send(handler, *self._call(handler.command, handler.path, body))

    def _chat(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        try:
            request = json.loads(body)
        except json.JSONDecodeError:
            request = None
        if not isinstance(request, dict):
            self._relay(handler, body)
            return
        stream = bool(request.pop("stream", False))
        options = request.pop("stream_options", None) or {}
        status, kind, answer = self._call("POST", handler.path, json.dumps(request).encode())
        if status != 200:
            self._send(handler, status, kind, answer)
            return
        reply = _repair(request, json.loads(answer))
        if not stream:
            self._send(handler, 200, "application/json", json.dumps(reply).encode())
            return
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Cache-Control", "no-cache")
        handler.send_header("Connection", "close")
        handler.end_headers()
        for chunk in events(reply, include_usage=bool(options.get("include_usage"))):
            handler.wfile.write(chunk)
            handler.wfile.flush()
        handler.close_connection = True

    def start(self) -> ToolCallFront:
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.server.serve_forever()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
