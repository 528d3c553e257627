"""The tool-call front of `faultfinder llm serve`: tool calls a small model writes as text
come back as OpenAI `tool_calls`, streamed or not, and everything else passes through."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from openai import OpenAI

from faultfinder.cli.tool_call_front import ToolCallFront, recover_tool_calls

TOOLS: dict[str, set[str] | None] = {"city_facts": {"city"}, "read_sales_csv": set()}
CITY_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "city_facts",
        "description": "Facts about a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>\n{"name": "city_facts", "arguments": {"city": "Varnholm"}}\n</tool_call>',
        '{"name": "city_facts", "arguments": {"city": "Varnholm"}}',
        '```json\n{\n  "name": "city_facts",\n  "arguments": {"city": "Varnholm"}\n}\n```',
        '<tools>\n{"name": "city_facts", "arguments": {"city": "Varnholm"}}\n</tools>',
        '{{"name": "city_facts", "arguments": {"city": "Varnholm"}}}',
        'I will look it up. {"name": "city_facts", "arguments": "{\\"city\\": \\"Varnholm\\"}"}',
    ],
)
def test_the_forms_a_small_model_writes_are_read_as_one_call(text: str) -> None:
    (call,) = recover_tool_calls(text, TOOLS)
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "city_facts"
    assert json.loads(call["function"]["arguments"]) == {"city": "Varnholm"}


def test_several_calls_undeclared_arguments_and_echoed_definitions() -> None:
    text = (
        '{"type": "function", "function": {"name": "city_facts", "parameters": {}}}\n'
        '{"name": "city_facts", "arguments": {"city": "A", "country": "X"}}\n'
        '{"name": "read_sales_csv", "arguments": {"csv": "sales.csv"}}\n'
        '{"name": "unknown_tool", "arguments": {}}'
    )
    calls = recover_tool_calls(text, TOOLS)
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("city_facts", {"city": "A"}),  # an argument the tool does not declare is dropped
        ("read_sales_csv", {}),
    ]
    assert recover_tool_calls("The population of Varnholm is 48210.", TOOLS) == []


class Upstream:
    """A stand-in model server answering each chat completion with the next reply."""

    def __init__(self, replies: list[dict[str, Any]]) -> None:
        self.replies = replies
        self.requests: list[dict[str, Any]] = []
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                self._answer(200, {"object": "list", "data": [{"id": "local"}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                upstream.requests.append(body)
                self._answer(200, upstream.replies.pop(0))

            def _answer(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"


def reply(content: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "local",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": content},
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


@pytest.fixture
def served() -> Iterator[tuple[Upstream, OpenAI]]:
    upstream = Upstream([])
    front = ToolCallFront(upstream.base_url).start()
    try:
        yield upstream, OpenAI(base_url=front.base_url, api_key="x", max_retries=0)
    finally:
        front.stop()
        upstream.server.shutdown()


CALL_TEXT = '```json\n{"name": "city_facts", "arguments": {"city": "Varnholm"}}\n```'
ASK: Any = [{"role": "user", "content": "Look up Varnholm."}]


def test_a_text_call_comes_back_as_tool_calls(served: tuple[Upstream, OpenAI]) -> None:
    upstream, client = served
    upstream.replies.append(reply(CALL_TEXT))
    answer = client.chat.completions.create(model="local", messages=ASK, tools=[CITY_TOOL])
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert call.function.name == "city_facts"  # type: ignore[union-attr]
    assert json.loads(call.function.arguments) == {"city": "Varnholm"}  # type: ignore[union-attr]
    assert upstream.requests[0]["tools"] == [CITY_TOOL]  # the request went on unchanged


def test_a_streamed_text_call_arrives_as_tool_call_deltas(
    served: tuple[Upstream, OpenAI],
) -> None:
    upstream, client = served
    upstream.replies.append(reply(CALL_TEXT))
    chunks = list(
        client.chat.completions.create(
            model="local",
            messages=ASK,
            tools=[CITY_TOOL],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert "stream" not in upstream.requests[0]  # asked upstream whole
    deltas = [d for c in chunks if c.choices for d in c.choices[0].delta.tool_calls or []]
    assert [(d.id is not None, d.function.name) for d in deltas] == [(True, "city_facts")]  # type: ignore[union-attr]
    finish = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finish[-1] == "tool_calls"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 15


def test_text_without_a_call_and_requests_without_tools_pass_through(
    served: tuple[Upstream, OpenAI],
) -> None:
    upstream, client = served
    upstream.replies += [reply("The answer is 48210."), reply(CALL_TEXT), reply("48210")]
    plain = client.chat.completions.create(model="local", messages=ASK, tools=[CITY_TOOL])
    assert plain.choices[0].message.content == "The answer is 48210."
    assert plain.choices[0].finish_reason == "stop"
    untouched = client.chat.completions.create(model="local", messages=ASK)
    assert untouched.choices[0].message.content == CALL_TEXT  # no tools offered: text stays
    streamed = client.chat.completions.create(model="local", messages=ASK, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    assert text == "48210"


def test_other_endpoints_are_relayed(served: tuple[Upstream, OpenAI]) -> None:
    _, client = served
    models = httpx.get(str(client.base_url) + "models").json()
    assert models["data"][0]["id"] == "local"
