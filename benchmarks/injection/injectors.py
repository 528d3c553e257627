"""Injectors: turn a recorded model reply into a flawed one of a given error mode.

The modes are the text modes of the Who&When Pro taxonomy (INJECTION.md). Where a flaw
can be made exactly, a deterministic injector makes it (a number relayed from a tool
changed to one no observation holds, a calculation slip, a comparison reversed or an
entity swapped, a tool argument changed, a premature answer, a repeated call, a handoff
to the wrong agent, information withheld). The others are written by a model asked to
rewrite the reply with that flaw (`LLMInjector`), and checked: the result must differ from
the original, keep valid tool calls, and not contain the correct answer.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from faultfinder.benchmarks.injection.exchanges import (
    reply_text,
    reply_tool_calls,
    with_message,
)

__all__ = [
    "DETERMINISTIC_MODES",
    "LLM_MODES",
    "MODES",
    "Injected",
    "InjectionContext",
    "Injector",
    "LLMInjector",
    "deterministic_injectors",
    "eligible_calls",
]

MODES: dict[str, str] = {
    "R.1": "Hallucination: a claim absent from every observation the agent has",
    "R.2": "Reasoning error: one local mistake, correct information misapplied (entity "
    "confusion, reversed comparison)",
    "R.3": "Numerical/calculation error: arithmetic, units, counting, off-by-one, rounding",
    "R.4": "Task misunderstanding: answering a different question",
    "PL.1": "Ineffective planning: an unsound plan or decomposition",
    "PL.2": "Goal drift: leaving the original objective",
    "A.1": "Tool parameter/invocation error: right tool, wrong or missing arguments",
    "A.2": "Output format/syntax error",
    "A.3": "Premature termination: stopping before the objective is met",
    "A.4": "Repetitive/looping behaviour: repeating actions without progress",
    "V.1": "Context/memory loss: forgetting constraints or earlier observations",
    "V.2": "Inadequate or incorrect verification: confirming a wrong result",
    "C.1": "Delegation/orchestration error: the wrong agent or a bad decomposition",
    "C.2": "Communication failure: withholding or ignoring another agent's information",
    "C.3": "Over-reliance on other agents: abandoning a correct answer for another's",
}
"""The injectable modes (INJECTION.md's codes and short definitions)."""


@dataclass(frozen=True)
class InjectionContext:
    """What an injector knows: the task, its correct answer, the call to flaw."""

    task: str
    answer: str
    request: Mapping[str, Any]
    """The program's request at the injection call (its messages and tools)."""
    reply: Mapping[str, Any]
    """The recorded reply to flaw."""
    rng: random.Random = field(default_factory=random.Random)

    @property
    def messages(self) -> list[Mapping[str, Any]]:
        messages = self.request.get("messages")
        return [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []

    def texts(self, *roles: str) -> list[str]:
        """The text of the request's messages of these roles, in order."""
        out: list[str] = []
        for message in self.messages:
            if roles and message.get("role") not in roles:
                continue
            out.append(_message_text(message))
        return out

    @property
    def observations(self) -> str:
        """Everything the agent has seen: the task, user and tool messages."""
        return "\n".join([self.task, *self.texts("user", "tool", "function")])

    @property
    def context(self) -> str:
        return "\n".join([self.task, *self.texts()])


@dataclass(frozen=True)
class Injected:
    """A flawed reply and what was changed."""

    mode: str
    reply: dict[str, Any]
    original: str
    injected: str
    how: str
    """One sentence: what the injector did."""
    injector: str = "deterministic"


class Injector(Protocol):
    @property
    def mode(self) -> str:
        """The error mode's code."""

    @property
    def name(self) -> str:
        """The injector's name, as attempts record it."""

    def __call__(self, context: InjectionContext) -> Injected | None:
        """The flawed reply, or None when this mode cannot be planted in this reply."""


def _message_text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        text = " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    else:
        text = ""
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        for call in calls:
            function = call.get("function", {}) if isinstance(call, dict) else {}
            text += f"\n{function.get('name', '')}({function.get('arguments', '')})"
    return text


def shown_reply(reply: Mapping[str, Any]) -> str:
    """A reply as one text: its content, then each tool call as `name(arguments)`."""
    return _message_text({"content": reply_text(reply), "tool_calls": reply_tool_calls(reply)})


# Numbers -----------------------------------------------------------------------------

_NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?![\w])")


def _value(token: str) -> float | None:
    try:
        return float(token.replace(",", ""))
    except ValueError:
        return None


def _values_in(text: str) -> set[float]:
    return {v for v in (_value(t) for t in _NUMBER.findall(text)) if v is not None}


def _format_like(value: float, token: str) -> str:
    """`value` written the way `token` was (thousands commas, decimals)."""
    decimals = len(token.split(".", 1)[1]) if "." in token else 0
    if decimals == 0:
        value = round(value)
    text = f"{value:,.{decimals}f}" if "," in token else f"{value:.{decimals}f}"
    return text


def _answer_values(answer: str) -> set[float]:
    return _values_in(answer)


def _replace_span(text: str, start: int, end: int, new: str) -> str:
    return text[:start] + new + text[end:]


def _number_tokens(text: str) -> list[re.Match[str]]:
    # Years, list markers and one-digit counts are rarely the value an answer rests on.
    out = []
    for match in _NUMBER.finditer(text):
        value = _value(match.group())
        if value is None or (abs(value) < 10 and "." not in match.group()):
            continue
        out.append(match)
    return out


def _fabricated(value: float, token: str, rng: random.Random, avoid: set[float]) -> str | None:
    """A value of the same kind that no observation holds (a hallucinated figure)."""
    for _ in range(20):
        factor = rng.choice((0.3, 0.45, 0.6, 1.4, 1.75, 2.2, 3.1))
        candidate = value * factor
        if "." not in token and abs(candidate) >= 100:
            magnitude = 10 ** max(0, len(str(int(abs(candidate)))) - 3)
            candidate = (
                round(candidate / magnitude) * magnitude + rng.randint(1, 9) * magnitude / 10
            )
        text = _format_like(candidate, token)
        got = _value(text)
        if got is not None and got not in avoid and got != value:
            return text
    return None


def _slipped(value: float, token: str, rng: random.Random, avoid: set[float]) -> str | None:
    """A calculation slip: a digit off, a wrong carry, a factor of ten, a rounding."""
    decimals = len(token.split(".", 1)[1]) if "." in token else 0
    unit = 10**-decimals
    digits = len(str(int(abs(value)))) if abs(value) >= 1 else 1
    choices = [
        value + rng.choice((-1, 1)) * unit * rng.randint(1, 9),
        value + rng.choice((-1, 1)) * 10 ** max(0, digits - 2),
        value * 10,
        value / 10 if decimals or value % 10 == 0 else value * 100,
    ]
    rng.shuffle(choices)
    for candidate in choices:
        text = _format_like(candidate, token)
        got = _value(text)
        if got is not None and got not in avoid and got != value:
            return text
    return None


@dataclass(frozen=True)
class _NumberInjector:
    """R.1 changes a figure the reply relays from an observation into one no observation
    holds; R.3 makes a slip in a figure the reply computed (or, failing that, relays)."""

    mode: str

    @property
    def name(self) -> str:
        return f"number-{self.mode}"

    def __call__(self, context: InjectionContext) -> Injected | None:
        text = reply_text(context.reply)
        if not text or reply_tool_calls(context.reply):
            return None
        seen = _values_in(context.observations)
        matches = _number_tokens(text)
        relayed = [m for m in matches if _value(m.group()) in seen]
        computed = [m for m in matches if _value(m.group()) not in seen]
        pool = relayed if self.mode == "R.1" else (computed or relayed)
        if not pool:
            return None
        target = context.rng.choice(pool)
        value = _value(target.group())
        assert value is not None
        avoid = seen | _values_in(text) | _answer_values(context.answer)
        change = _fabricated if self.mode == "R.1" else _slipped
        new = change(value, target.group(), context.rng, avoid)
        if new is None:
            return None
        flawed = text.replace(target.group(), new)
        what = "a figure no observation holds" if self.mode == "R.1" else "a calculation slip"
        return Injected(
            self.mode,
            with_message(context.reply, flawed, None),
            text,
            flawed,
            f"{target.group()} became {new} ({what})",
        )


_FLIPS = {
    "more": "less", "less": "more", "higher": "lower", "lower": "higher",
    "larger": "smaller", "smaller": "larger", "largest": "smallest", "smallest": "largest",
    "greater": "smaller", "highest": "lowest", "lowest": "highest", "most": "least",
    "least": "most", "before": "after", "after": "before", "above": "below",
    "below": "above", "increase": "decrease", "decrease": "increase", "bigger": "smaller",
    "biggest": "smallest", "cheaper": "dearer", "cheapest": "dearest", "older": "younger",
    "oldest": "youngest", "younger": "older", "youngest": "oldest", "north": "south",
    "south": "north", "east": "west", "west": "east", "maximum": "minimum",
    "minimum": "maximum", "max": "min", "min": "max",
}  # fmt: skip
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]+")
_ENTITY = re.compile(r"\b[A-Z][a-z]{2,}(?:\s[A-Z][a-z]{2,})?\b")
_STOP_ENTITIES = frozenset({
    "The", "This", "That", "These", "Those", "What", "Which", "When", "Where", "Who",
    "Here", "There", "Then", "Thus", "Final", "Answer", "Let", "Now", "First", "Next",
    "Based", "According", "Since", "Step", "Result", "Please", "Sure", "Yes", "Okay",
    "Task", "Tool", "Agent", "User", "Assistant", "However", "Therefore", "So", "And",
})  # fmt: skip


@dataclass(frozen=True)
class _ReasoningInjector:
    """R.2: a comparison reversed (`larger` → `smaller`), else an entity of the reply
    swapped for another entity the run has seen (information misapplied)."""

    mode: str = "R.2"
    name: str = "reasoning-R.2"

    def __call__(self, context: InjectionContext) -> Injected | None:
        text = reply_text(context.reply)
        if not text or reply_tool_calls(context.reply):
            return None
        flips = [m for m in _WORD.finditer(text) if m.group().lower() in _FLIPS]
        if flips:
            target = context.rng.choice(flips)
            new = _FLIPS[target.group().lower()]
            if target.group()[0].isupper():
                new = new.capitalize()
            flawed = _replace_span(text, target.start(), target.end(), new)
            how = f"the comparison '{target.group()}' became '{new}'"
            return Injected(self.mode, with_message(context.reply, flawed, None), text, flawed, how)
        mine = [m for m in _ENTITY.finditer(text) if m.group() not in _STOP_ENTITIES]
        others = sorted(
            {
                m.group()
                for m in _ENTITY.finditer(context.context)
                if m.group() not in _STOP_ENTITIES
            }
            - {m.group() for m in mine}
            - set(_ENTITY.findall(context.answer))
        )
        if not mine or not others:
            return None
        target = context.rng.choice(mine)
        new = context.rng.choice(others)
        flawed = text.replace(target.group(), new)
        how = f"the entity '{target.group()}' became '{new}' (another entity of the run)"
        return Injected(self.mode, with_message(context.reply, flawed, None), text, flawed, how)


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
        avoid = _values_in(context.answer)
        new: Any
        if isinstance(value, int | float):
            text = _slipped(float(value), str(value), context.rng, avoid | {float(value)})
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
    numbers = list(_NUMBER.finditer(value))
    if numbers:
        target = context.rng.choice(numbers)
        parsed = _value(target.group())
        if parsed is not None:
            new = _slipped(parsed, target.group(), context.rng, {parsed})
            if new is not None:
                return _replace_span(value, target.start(), target.end(), new)
    entities = sorted(
        {
            m.group()
            for m in _ENTITY.finditer(context.observations)
            if m.group() not in _STOP_ENTITIES
        }
        - {value}
        - set(_ENTITY.findall(context.answer))
        - {word for word in _ENTITY.findall(value)}
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
        answer_values = _answer_values(context.answer)
        seen = [
            m.group()
            for m in _number_tokens(context.observations)
            if _value(m.group()) not in answer_values
        ]
        if seen:
            guess = context.rng.choice(seen)
        else:
            words = [w for w in _ENTITY.findall(context.task) if w not in _STOP_ENTITIES]
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


_SENTENCE = re.compile(r"[^.!?\n]+[.!?]?")


@dataclass(frozen=True)
class _WithholdInjector:
    """C.2: the agent passes its turn on without the figures it had found."""

    mode: str = "C.2"
    name: str = "withhold-C.2"

    def __call__(self, context: InjectionContext) -> Injected | None:
        text = reply_text(context.reply)
        if not text or reply_tool_calls(context.reply):
            return None
        seen = _values_in(context.observations)
        sentences = [s.group() for s in _SENTENCE.finditer(text) if s.group().strip()]
        kept = [s for s in sentences if not (_values_in(s) & seen)]
        if len(kept) == len(sentences):
            return None
        flawed = " ".join(s.strip() for s in kept) or "I looked into it and passed it on."
        return Injected(
            self.mode,
            with_message(context.reply, flawed, None),
            text,
            flawed,
            "left out the figures it had found",
        )


def deterministic_injectors() -> list[Injector]:
    """One deterministic injector per mode that can be planted exactly."""
    return [
        _NumberInjector("R.1"),
        _ReasoningInjector(),
        _NumberInjector("R.3"),
        _ArgumentInjector(),
        _PrematureInjector(),
        _RepeatInjector(),
        _DelegationInjector(),
        _WithholdInjector(),
    ]


DETERMINISTIC_MODES = tuple(injector.mode for injector in deterministic_injectors())

_LLM_INSTRUCTIONS: dict[str, str] = {
    "R.4": "Make the message answer a slightly different question than the task asks (a"
    " different quantity, item or unit), confidently and without saying so.",
    "PL.1": "Replace the plan or next action with an unsound one that skips a step the task"
    " needs, stated confidently.",
    "PL.2": "Make the message drift away from the task: pursue a related but different goal.",
    "V.1": "Make the message forget a constraint of the task or an earlier observation, and"
    " use a value or condition that contradicts it.",
    "V.2": "Make the message claim it double-checked the result while it accepts a wrong value.",
    "C.3": "Make the message abandon its correct figure and adopt a different one, saying"
    " another agent reported it.",
    "R.1": "Make the message state a figure or fact that appears in no earlier message.",
}
"""What the model is asked to plant, per mode written by `LLMInjector`."""

LLM_MODES = tuple(_LLM_INSTRUCTIONS)

_SYSTEM = (
    "You edit one message written by an AI agent so that it contains one specific mistake,"
    " for testing a debugger of agent systems. Keep its style, length and format. Do not"
    " mention that anything was changed. Reply with the edited message only."
)


@dataclass
class LLMInjector:
    """A mode planted by a model: it rewrites the reply's text with that flaw.

    `complete(system, user)` returns the model's text (the harness passes a call to the
    agents' own model endpoint). Only text replies are rewritten; the result must differ
    from the original and must not contain the correct answer.
    """

    mode: str
    complete: Callable[[str, str], str]

    @property
    def name(self) -> str:
        return f"llm-{self.mode}"

    def __call__(self, context: InjectionContext) -> Injected | None:
        text = reply_text(context.reply)
        if not text.strip() or reply_tool_calls(context.reply):
            return None
        prompt = (
            f"The agents' task: {context.task}\n\n"
            f"The message to edit:\n<<<\n{text}\n>>>\n\n"
            f"The mistake to plant: {MODES[self.mode]}. {_LLM_INSTRUCTIONS[self.mode]}\n\n"
            "The edited message:"
        )
        flawed = _strip_fences(self.complete(_SYSTEM, prompt)).strip()
        if not flawed or _normalised(flawed) == _normalised(text):
            return None
        if _contains_answer(flawed, context.answer) and not _contains_answer(text, context.answer):
            return None
        return Injected(
            self.mode,
            with_message(context.reply, flawed, None),
            text,
            flawed,
            f"the model rewrote the message with a {self.mode} flaw",
            injector="llm",
        )


def _strip_fences(text: str) -> str:
    text = text.strip()
    for marker in ("<<<", ">>>"):
        text = text.replace(marker, "")
    if text.startswith("```"):
        text = text.split("\n", 1)[1] if "\n" in text else ""
        text = text.rsplit("```", 1)[0]
    return text


def _normalised(text: str) -> str:
    return " ".join(text.split()).casefold()


def _contains_answer(text: str, answer: str) -> bool:
    values = _values_in(answer)
    if values and len(values) == 1 and len(_NUMBER.findall(answer)) == 1:
        return bool(values & _values_in(text))
    return bool(answer.strip()) and _normalised(answer) in _normalised(text)


def eligible_calls(replies: Sequence[Mapping[str, Any]]) -> list[int]:
    """The model calls a flaw may be planted in: an agent's own turn with something to
    flaw (text or tool calls), never the last call of the run (the final formatting step,
    where a flaw is only a wrong answer, not an error the run carried forward)."""
    return [
        index
        for index, reply in enumerate(replies[:-1])
        if reply_text(reply).strip() or reply_tool_calls(reply)
    ]
