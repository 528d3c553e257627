"""Deterministic injectors of an agent's tool calls: a wrong argument (A.1), stopping
early with a guess (A.3), repeating the previous call (A.4), handing off to the wrong
agent (C.1)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from faultfinder.injection.context import Injected, InjectionContext, shown_reply
from faultfinder.injection.exchanges import reply_text, reply_tool_calls, with_message
from faultfinder.injection.figures import (
    ENTITY,
    NUMBER,
    STOP_ENTITIES,
    figure_value,
    figures_of_answer,
    number_tokens,
    replace_span,
    slipped,
    values_in,
)


def _arguments(call: Mapping[str, Any]) -> dict[str, Any] | None:
    function = call.get("function") or {}
    raw = function.get("arguments")
    try:
        parsed = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _with_arguments(call: Mapping[str, Any], arguments: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(call))
    out["function"]["arguments"] = json.dumps(arguments, ensure_ascii=False)
    return out


@dataclass(frozen=True)
class _ArgumentInjector:
    """A.1: one argument of one tool call changed to a wrong value (a number off, a string
    swapped for another value the run has seen, or cut short)."""

    mode: str = "A.1"
    name: str = "arguments-A.1"

    def __call__(self, context: InjectionContext) -> Injected | None:
        calls = reply_tool_calls(context.reply)
        candidates = []
        for position, call in enumerate(calls):
            arguments = _arguments(call)
            for key, value in (arguments or {}).items():
                if isinstance(value, int | float | str) and not isinstance(value, bool):
                    candidates.append((position, key, value))
        if not candidates:
            return None
        position, key, value = context.rng.choice(candidates)
        avoid = values_in(context.answer)
        new: Any
        if isinstance(value, int | float):
            text = slipped(float(value), str(value), context.rng, avoid | {float(value)})
            if text is None:
                return None
            new = type(value)(float(text.replace(",", "")))
        else:
            new = _other_string(value, context)
            if new is None:
                return None
        arguments = dict(_arguments(calls[position]) or {})
        arguments[key] = new
        flawed_calls = [
            _with_arguments(call, arguments) if i == position else call
            for i, call in enumerate(calls)
        ]
        original = shown_reply(context.reply)
        reply = with_message(context.reply, reply_text(context.reply) or None, flawed_calls)
        return Injected(
            self.mode,
            reply,
            original,
            shown_reply(reply),
            f"argument {key}={value!r} became {new!r}",
        )


def _other_string(value: str, context: InjectionContext) -> str | None:
    """Another value of the same kind: a number inside changed, else another name the
    task or a tool's report gave (not a word of the agents' own instructions), else the
    value with two letters swapped (a typo)."""
    numbers = list(NUMBER.finditer(value))
    if numbers:
        target = context.rng.choice(numbers)
        parsed = figure_value(target.group())
        if parsed is not None:
            new = slipped(parsed, target.group(), context.rng, {parsed})
            if new is not None:
                return replace_span(value, target.start(), target.end(), new)
    entities = sorted(
        {m.group() for m in ENTITY.finditer(context.observations) if m.group() not in STOP_ENTITIES}
        - {value}
        - set(ENTITY.findall(context.answer))
        - {word for word in ENTITY.findall(value)}
    )
    if entities and value[:1].isupper():
        return context.rng.choice(entities)
    letters = [i for i in range(1, len(value) - 1) if value[i].isalpha() and value[i + 1].isalpha()]
    if len(value) > 3 and letters:
        i = context.rng.choice(letters)
        swapped = value[:i] + value[i + 1] + value[i] + value[i + 2 :]
        return swapped if swapped != value else None
    return None


@dataclass(frozen=True)
class _PrematureInjector:
    """A.3: instead of the next action, the agent stops and answers with a guess taken
    from what it has seen so far (never the correct answer)."""

    mode: str = "A.3"
    name: str = "premature-A.3"

    def __call__(self, context: InjectionContext) -> Injected | None:
        original = shown_reply(context.reply)
        answer_values = figures_of_answer(context.answer)
        seen = [
            m.group()
            for m in number_tokens(context.observations)
            if figure_value(m.group()) not in answer_values
        ]
        if seen:
            guess = context.rng.choice(seen)
        else:
            words = [w for w in ENTITY.findall(context.task) if w not in STOP_ENTITIES]
            words = [w for w in words if w.lower() not in context.answer.lower()]
            if not words:
                return None
            guess = context.rng.choice(words)
        flawed = f"I have enough to answer now. The answer is {guess}."
        if flawed == original:
            return None
        return Injected(
            self.mode,
            with_message(context.reply, flawed, None),
            original,
            flawed,
            f"stopped early and answered {guess}",
        )


@dataclass(frozen=True)
class _RepeatInjector:
    """A.4: the agent repeats its previous tool call (or its previous message) instead of
    moving on."""

    mode: str = "A.4"
    name: str = "repeat-A.4"

    def __call__(self, context: InjectionContext) -> Injected | None:
        calls = reply_tool_calls(context.reply)
        original = shown_reply(context.reply)
        for message in reversed(context.messages):
            if message.get("role") != "assistant":
                continue
            previous = message.get("tool_calls")
            if calls and isinstance(previous, list) and previous:
                repeated = [
                    {**json.loads(json.dumps(call)), "id": f"{call.get('id', 'call')}-again"}
                    for call in previous
                    if isinstance(call, dict)
                ]
                reply = with_message(context.reply, reply_text(context.reply) or None, repeated)
                if shown_reply(reply) == original:
                    return None
                return Injected(
                    self.mode,
                    reply,
                    original,
                    shown_reply(reply),
                    "repeated its previous tool call",
                )
            text = message.get("content")
            if not calls and isinstance(text, str) and text.strip() and text != original:
                reply = with_message(context.reply, text, None)
                return Injected(self.mode, reply, original, text, "repeated its previous message")
        return None


_HANDOFF_NAME = re.compile(r"transfer|handoff|hand_off|delegate|route|assign|ask_|call_agent")


@dataclass(frozen=True)
class _DelegationInjector:
    """C.1: a handoff or delegation call sent to another agent than the one chosen."""

    mode: str = "C.1"
    name: str = "delegation-C.1"

    def __call__(self, context: InjectionContext) -> Injected | None:
        calls = reply_tool_calls(context.reply)
        tools = context.request.get("tools")
        names = [
            str((tool.get("function") or {}).get("name"))
            for tool in (tools if isinstance(tools, list) else [])
            if isinstance(tool, dict)
        ]
        handoffs = [name for name in names if _HANDOFF_NAME.search(name.lower())]
        for position, call in enumerate(calls):
            current = str((call.get("function") or {}).get("name"))
            if current not in handoffs:
                continue
            others = [name for name in handoffs if name != current]
            if not others:
                continue
            new = context.rng.choice(others)
            changed = json.loads(json.dumps(call))
            changed["function"]["name"] = new
            flawed_calls = [changed if i == position else c for i, c in enumerate(calls)]
            reply = with_message(context.reply, reply_text(context.reply) or None, flawed_calls)
            return Injected(
                self.mode,
                reply,
                shown_reply(context.reply),
                shown_reply(reply),
                f"handed off with {new} instead of {current}",
            )
        return None
