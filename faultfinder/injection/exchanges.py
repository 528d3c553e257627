"""Chat-completion exchanges as the replay proxy records, compares and replays them.

A recorded run is the ordered list of its model calls: each request as the agent program
sent it and the reply the model gave. Two requests are the same call when their
canonical forms are equal: the JSON with sorted keys, without the fields that carry no
meaning for the model (`user`, `metadata`, `stream`, `stream_options`), and with tool-call ids
renamed by order of appearance (frameworks that mint their own ids then still match).
A reply is always fetched whole from the model and streamed back, when the program asked
for a stream, as chat-completion chunks built from it, so recording and replay send the
program the same thing.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "Exchange",
    "Recording",
    "canonical_request",
    "reply_message",
    "reply_text",
    "reply_tool_calls",
    "sse_chunks",
    "with_message",
]

RECORDING_FORMAT = "faultfinder.recording/1"

_IGNORED_FIELDS = frozenset(
    {"user", "metadata", "stream", "stream_options", "store", "service_tier"}
)


def canonical_request(body: Mapping[str, Any]) -> str:
    """The request as compared between a recording and a replay (see the module's docstring)."""
    kept = {key: value for key, value in body.items() if key not in _IGNORED_FIELDS}
    renamed: dict[str, str] = {}

    def rename(value: Any) -> Any:
        if isinstance(value, dict):
            out: dict[str, Any] = {}
            for key, item in value.items():
                if key in ("tool_call_id", "id") and isinstance(item, str) and _is_call_id(value):
                    out[key] = renamed.setdefault(item, f"call_{len(renamed)}")
                else:
                    out[key] = rename(item)
            return out
        if isinstance(value, list):
            return [rename(item) for item in value]
        return value

    return json.dumps(rename(kept), sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _is_call_id(holder: Mapping[str, Any]) -> bool:
    """Whether an `id`/`tool_call_id` key of this object names a tool call (a tool call
    `{"id", "type", "function"}` or a tool message `{"role": "tool", "tool_call_id"}`)."""
    return "tool_call_id" in holder or "function" in holder


def reply_message(reply: Mapping[str, Any]) -> dict[str, Any]:
    """The first choice's message of a chat-completion reply (empty when there is none)."""
    choices = reply.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return {}
    message = choices[0].get("message")
    return message if isinstance(message, dict) else {}


def reply_text(reply: Mapping[str, Any]) -> str:
    content = reply_message(reply).get("content")
    return content if isinstance(content, str) else ""


def reply_tool_calls(reply: Mapping[str, Any]) -> list[dict[str, Any]]:
    calls = reply_message(reply).get("tool_calls")
    return [call for call in calls if isinstance(call, dict)] if isinstance(calls, list) else []


def with_message(
    reply: Mapping[str, Any], content: str | None, tool_calls: list[dict[str, Any]] | None
) -> dict[str, Any]:
    """A copy of `reply` whose message says `content` and makes `tool_calls` (none: a
    plain answer), with the finish reason to match."""
    out = copy.deepcopy(dict(reply))
    choices = out.get("choices") or [{"index": 0}]
    choice = dict(choices[0])
    message = dict(choice.get("message") or {"role": "assistant"})
    message["content"] = content
    if tool_calls:
        message["tool_calls"] = tool_calls
    else:
        message.pop("tool_calls", None)
    choice["message"] = message
    choice["finish_reason"] = "tool_calls" if tool_calls else "stop"
    out["choices"] = [choice, *choices[1:]]
    return out


def sse_chunks(reply: Mapping[str, Any], *, include_usage: bool) -> Iterator[bytes]:
    """Server-sent events of a chat-completion stream that carries `reply`."""
    base = {
        "id": reply.get("id") or "chatcmpl-replay",
        "object": "chat.completion.chunk",
        "created": reply.get("created") or int(time.time()),
        "model": reply.get("model") or "local",
    }
    if reply.get("system_fingerprint"):
        base["system_fingerprint"] = reply["system_fingerprint"]

    def event(choices: list[dict[str, Any]], **extra: Any) -> bytes:
        payload = {**base, "choices": choices, **extra}
        return b"data: " + json.dumps(payload, ensure_ascii=False).encode() + b"\n\n"

    message = reply_message(reply)
    yield event(
        [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]
    )
    content = message.get("content")
    if isinstance(content, str) and content:
        yield event([{"index": 0, "delta": {"content": content}, "finish_reason": None}])
    for position, call in enumerate(reply_tool_calls(reply)):
        function = call.get("function") or {}
        delta = {
            "index": position,
            "id": call.get("id"),
            "type": call.get("type") or "function",
            "function": {"name": function.get("name"), "arguments": function.get("arguments", "")},
        }
        yield event([{"index": 0, "delta": {"tool_calls": [delta]}, "finish_reason": None}])
    choices = reply.get("choices") or [{}]
    finish = choices[0].get("finish_reason") if isinstance(choices[0], dict) else None
    yield event([{"index": 0, "delta": {}, "finish_reason": finish or "stop"}])
    if include_usage and isinstance(reply.get("usage"), dict):
        yield event([], usage=reply["usage"])
    yield b"data: [DONE]\n\n"


@dataclass
class Exchange:
    """One model call: what the program asked, what it was answered."""

    request: dict[str, Any]
    reply: dict[str, Any]
    seconds: float = 0.0
    source: str = "model"
    """`model` (answered live), `recording` (replayed) or `injected`."""

    def as_json(self) -> dict[str, Any]:
        return {
            "request": self.request,
            "reply": self.reply,
            "seconds": round(self.seconds, 3),
            "source": self.source,
        }


@dataclass
class Recording:
    """A run's model calls in order, with what is known of the run."""

    exchanges: list[Exchange] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    def save(self, path: Path) -> None:
        """Write atomically (a partial file never replaces a good one)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        payload = {
            "format": RECORDING_FORMAT,
            "info": self.info,
            "exchanges": [exchange.as_json() for exchange in self.exchanges],
        }
        partial.write_text(json.dumps(payload, ensure_ascii=False, indent=1))
        partial.replace(path)

    @classmethod
    def load(cls, path: Path) -> Recording:
        data = json.loads(path.read_text())
        if data.get("format") != RECORDING_FORMAT:
            raise ValueError(f"{path}: not a recording ({RECORDING_FORMAT})")
        exchanges = [
            Exchange(
                request=item["request"],
                reply=item["reply"],
                seconds=float(item.get("seconds", 0.0)),
                source=str(item.get("source", "model")),
            )
            for item in data["exchanges"]
        ]
        return cls(exchanges=exchanges, info=dict(data.get("info") or {}))
