"""What the chat replays share (`openai_agents_chat_replay.py`, `pydantic_ai_chat_replay.py`):
a recorded τ-bench conversation cut into the customer's turns and the assistant's messages,
the scripted OpenAI-compatible chat-completions server that serves those messages in order
(not a model), the recorded tool reports, and the span processor that marks each run as
one with a simulated user (and its instructions) and remembers its trace id.

Input records are generic labelled records (`faultfinder.labelled-trajectory/1`, τ-bench
layout: a system step, user turns, an assistant step per tool call, each tool's report a
step). A replay program writes one JSON line a record (`replayed`): the record's id, the
trace id of its run, which recorded steps each model call stood for (`calls`, in order;
`[]` for a filler: when the recorded assistant handed back to the customer after a tool
call without a word, the framework still asks the model once more and is served a blank
answer, `FILLER`), the recorded steps of the customer's later turns that reached a model call
(`users`) and of their first (`task`). The customer's last turn, when nothing answered it
(τ-bench's `###STOP###`), reaches no model call, as in a live chat that ends there.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from corpus_tracing import tracer_provider
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.trace import Tracer

FILLER = " "
"""The answer to a model call no recorded message stands for: blank, not empty (pydantic-ai
takes an empty answer for no answer and asks again)."""

SIMULATED_USER = "faultfinder.run.simulated_user"
"""Said on the run's root span: the customer is part of the system under test
(`faultfinder.conventions.RUN_SIMULATED_USER`, spelled out: a framework's environment holds
no faultfinder code)."""
USER_INSTRUCTION = "faultfinder.run.user_instruction"
"""Said on the run's root span: the simulated customer's own instructions, when the record
carries them (`faultfinder.conventions.RUN_USER_INSTRUCTION`)."""


@dataclass
class Message:
    """One recorded assistant message: its text, its tool calls and the steps they were."""

    text: str
    calls: list[tuple[str, str]] = field(default_factory=list)
    """(tool name, arguments JSON) in order."""
    steps: list[int] = field(default_factory=list)


@dataclass
class Conversation:
    """A record cut into what the replay needs."""

    instructions: str
    task: str
    task_step: int
    segments: list[list[Message]]
    """The assistant's messages after the first customer turn, then after each later one."""
    users: list[tuple[int, str]]
    """The customer's later turns: (recorded step, text)."""
    reports: dict[str, deque[tuple[str, str]]]
    """Tool name → its recorded (arguments, report) in order."""


def _call_text(step: Mapping[str, Any]) -> str:
    """The assistant's own words of a call step (the layout appends `name(arguments)`)."""
    content = str(step.get("content") or "")
    suffix = f"{step.get('tool_name')}({step.get('tool_arguments') or ''})"
    return content[: -len(suffix)].strip() if content.endswith(suffix) else content


def conversation(record: Mapping[str, Any]) -> Conversation:
    """`record` cut into its customer's turns, the assistant's messages after each, and each
    tool's recorded reports."""
    steps: Sequence[Mapping[str, Any]] = record["steps"]
    instructions = "\n".join(str(s.get("content") or "") for s in steps if s["role"] == "system")
    segments: list[list[Message]] = []
    users: list[tuple[int, str]] = []
    reports: dict[str, deque[tuple[str, str]]] = defaultdict(deque)
    task, task_step = "", -1
    pending: list[tuple[str, str]] = []
    for index, step in enumerate(steps):
        role = step["role"]
        if role == "user":
            if task_step < 0:
                task, task_step = str(step.get("content") or ""), index
            else:
                users.append((index, str(step.get("content") or "")))
            segments.append([])
        elif role == "agent" and segments:
            name = step.get("tool_name")
            current = segments[-1]
            if name:
                arguments = str(step.get("tool_arguments") or "{}")
                # Calls of one message are consecutive steps with no report between them.
                joins = current and current[-1].calls and steps[index - 1]["role"] == "agent"
                if not joins:
                    current.append(Message(text=_call_text(step)))
                current[-1].calls.append((str(name), arguments))
                current[-1].steps.append(index)
                pending.append((str(name), arguments))
            else:
                current.append(Message(text=str(step.get("content") or ""), steps=[index]))
        elif role == "tool":
            name = str(step.get("tool_name") or step.get("agent") or "tool")
            arguments = next((a for n, a in pending if n == name), "{}")
            if (name, arguments) in pending:
                pending.remove((name, arguments))
            reports[name].append((arguments, str(step.get("content") or "")))
    return Conversation(instructions, task, task_step, segments, users, reports)


class Scripted:
    """The scripted chat-completions server: serves the queued messages in order."""

    def __init__(self) -> None:
        self.queue: deque[Message] = deque()
        self.served: list[list[int]] = []
        self.lock = threading.Lock()
        self.ids = iter(range(1, 10**9))

    def next_reply(self) -> dict[str, Any]:
        with self.lock:
            message = self.queue.popleft() if self.queue else Message(text="")
            self.served.append(list(message.steps))
            number = next(self.ids)
        reply: dict[str, Any] = {"role": "assistant", "content": message.text or None}
        if message.calls:
            reply["tool_calls"] = [
                {
                    "id": f"call_{number}_{i}",
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
                for i, (name, arguments) in enumerate(message.calls)
            ]
        elif not message.text:
            reply["content"] = FILLER
        return {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion",
            "created": 0,
            "model": "scripted",
            "choices": [
                {
                    "index": 0,
                    "message": reply,
                    "finish_reason": "tool_calls" if message.calls else "stop",
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }

    @contextmanager
    def running(self) -> Iterator[str]:
        scripted = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                data = json.dumps(scripted.next_reply()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            host, port = server.server_address[:2]
            yield f"http://{host!s}:{port}/v1"
        finally:
            server.shutdown()
            server.server_close()


class Traces(SpanProcessor):
    """Marks each root span as a run with a simulated user (with the customer's own
    instructions, `instruction`, when the record being replayed has them) and remembers
    its trace id."""

    def __init__(self) -> None:
        self.trace_ids: list[str] = []
        self.instruction: str | None = None

    def on_start(self, span: Span, parent_context: Any = None) -> None:
        if span.parent is None:
            span.set_attribute(SIMULATED_USER, True)
            if self.instruction:
                span.set_attribute(USER_INSTRUCTION, self.instruction)
            self.trace_ids.append(format(span.context.trace_id, "032x"))

    def on_end(self, span: ReadableSpan) -> None:
        pass


def recorded_report(reports: dict[str, deque[tuple[str, str]]], name: str, arguments: str) -> str:
    """The recorded report of a call of tool `name` with these arguments (JSON), or failing
    that the tool's next recorded report; each report is given once."""
    queue = reports[name]
    wanted = _canonical(arguments)
    for position, (recorded, report) in enumerate(queue):
        if _canonical(recorded) == wanted:
            del queue[position]
            return report
    return queue.popleft()[1] if queue else ""


def _canonical(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), sort_keys=True)
    except ValueError:
        return arguments


def replayed(
    record: Mapping[str, Any], chat: Conversation, scripted: Scripted, asked: list[int]
) -> dict[str, Any]:
    """The replay's line for `record` (without its trace id)."""
    return {
        "id": record["id"],
        "calls": scripted.served,
        "users": asked[1:],
        "task": chat.task_step,
        "left": sum(len(queue) for queue in chat.reports.values()),
    }


def turns_to_ask(chat: Conversation) -> Iterator[tuple[int, str, list[Message]]]:
    """(recorded step, text, the assistant's messages after it) for each customer turn that
    reaches a model call: all but a last turn nothing answered."""
    turns = [(chat.task_step, chat.task), *chat.users]
    for number, ((step, text), segment) in enumerate(zip(turns, chat.segments, strict=True)):
        if not segment and number == len(turns) - 1:
            return
        yield step, text, segment


Replay = Callable[[Mapping[str, Any], Scripted, str], Awaitable[dict[str, Any]]]
"""Replays one record with the scripted server at a base URL; returns its line (`replayed`)."""

Ask = Callable[[str], Awaitable[None]]
"""Gives the agent the customer's next turn, with the conversation so far, and waits until
it has answered."""


async def converse(
    record: Mapping[str, Any], chat: Conversation, scripted: Scripted, ask: Ask
) -> dict[str, Any]:
    """Ask each customer turn that reaches a model call (`turns_to_ask`), the scripted
    server serving the assistant's recorded messages after it; the replay's line."""
    scripted.served = []
    asked: list[int] = []
    for step, text, segment in turns_to_ask(chat):
        asked.append(step)
        scripted.queue = deque(segment)
        await ask(text)
    return replayed(record, chat, scripted, asked)


def keyword_tool(reports: dict[str, deque[tuple[str, str]]], name: str) -> Callable[..., str]:
    """The function of tool `name` for a framework that passes a call's arguments as
    keywords: it answers with the recorded report (`recorded_report`)."""

    def invoke(**arguments: Any) -> str:
        return recorded_report(reports, name, json.dumps(arguments))

    return invoke


def main(
    instrument: Callable[[TracerProvider], object], replayer: Callable[[Tracer], Replay]
) -> None:
    """Replay every record of the file named on the command line, one line each to stdout,
    progress to stderr, all in one event loop: spans go through a provider exporting over
    OTLP (`corpus_tracing`) that `instrument` hands to the framework's instrumentation, and
    `replayer` is given a tracer of it (for a span grouping each conversation)."""
    traces = Traces()
    provider = tracer_provider("tau-bench-replay")
    provider.add_span_processor(traces)
    instrument(provider)
    replay = replayer(provider.get_tracer("tau-bench-replay"))
    lines = Path(sys.argv[1]).read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    scripted = Scripted()

    async def every_record(base_url: str) -> None:
        for number, record in enumerate(records, 1):
            before = len(traces.trace_ids)
            traces.instruction = record.get("user_instruction")
            line = await replay(record, scripted, base_url)
            line["trace_ids"] = traces.trace_ids[before:]
            print(json.dumps(line), flush=True)
            print(f"replayed {number}/{len(records)} {record['id']}", file=sys.stderr, flush=True)

    with scripted.running() as base_url:
        asyncio.run(every_record(base_url))
    provider.shutdown()
