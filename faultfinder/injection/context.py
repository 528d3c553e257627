"""What an injector works on: the error modes, the call to flaw with what the agent had
seen (`InjectionContext`), the flawed reply (`Injected`), the `Injector` protocol, and
which model calls may be flawed at all (`eligible_calls`)."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from faultfinder.injection.exchanges import reply_text, reply_tool_calls

__all__ = ["MODES", "Injected", "InjectionContext", "Injector", "eligible_calls", "shown_reply"]

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


def eligible_calls(replies: Sequence[Mapping[str, Any]]) -> list[int]:
    """The model calls a flaw may be planted in: an agent's own turn with something to
    flaw (text or tool calls), never the last call of the run (the final formatting step,
    where a flaw is only a wrong answer, not an error the run carried forward)."""
    return [
        index
        for index, reply in enumerate(replies[:-1])
        if reply_text(reply).strip() or reply_tool_calls(reply)
    ]
