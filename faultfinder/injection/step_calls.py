"""Which model call made which step: a trajectory step index mapped to the recorded
chat-completion call whose reply it shows.

The same reading as `locate.py` uses for an injected reply, in the other direction: a
step shows a call's reply when its text holds the reply's text (whitespace and case
aside), or when it calls the tool the reply called with the same arguments (as a tool
call, or written as `name({...})`, as model-call spans record it). Calls and
steps are both in run order, so each call is looked for from the step after the last
one matched (and, failing that, among the steps no call has yet claimed).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from faultfinder.attributors.model import Step, StepKind, Trajectory
from faultfinder.injection.exchanges import Recording, reply_text, reply_tool_calls

__all__ = ["MODEL_STEP_KINDS", "model_calls_of_steps"]

MODEL_STEP_KINDS = frozenset({StepKind.MESSAGE, StepKind.LLM, StepKind.HANDOFF})
"""Kinds of steps a model reply can show as (tool results, users and the system cannot)."""


def _normal(text: str) -> str:
    return " ".join(text.split()).casefold()


def _arguments(raw: Any) -> str:
    """Tool arguments compared as canonical JSON (or as normalised text if not JSON)."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return _normal(raw)
    return json.dumps(raw, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _shows(step: Step, fragment: tuple[str, str]) -> bool:
    kind, value = fragment
    if step.kind not in MODEL_STEP_KINDS:
        return False
    if kind == "tool":
        name, _, arguments = value.partition("\0")
        if step.tool_name == name:
            return _arguments(step.tool_arguments or "{}") == arguments
        # A model step that records the call as text: `name({...})`.
        written = step.content.strip()
        if not written.startswith(f"{name}(") or not written.endswith(")"):
            return False
        return _arguments(written[len(name) + 1 : -1]) == arguments
    text = _normal(step.content)
    return bool(text) and (value in text or (len(text) > 40 and text in value))


def _fragments(reply: Mapping[str, Any]) -> list[tuple[str, str]]:
    """What of a reply a step can show: its text, and each tool call."""
    found: list[tuple[str, str]] = []
    text = _normal(reply_text(reply))
    if text:
        found.append(("text", text))
    for call in reply_tool_calls(reply):
        function = call.get("function") or {}
        name = str(function.get("name") or "")
        found.append(("tool", f"{name}\0{_arguments(function.get('arguments') or '{}')}"))
    return found


def model_calls_of_steps(trajectory: Trajectory, recording: Recording) -> dict[int, int]:
    """Step index → the 0-based model call of `recording` whose reply that step shows
    (steps no reply shows, such as tool results and the task, are absent)."""
    steps: Sequence[Step] = trajectory.steps
    found: dict[int, int] = {}
    cursor = 0
    for call, exchange in enumerate(recording.exchanges):
        for fragment in _fragments(exchange.reply):
            ahead = (i for i in range(cursor, len(steps)) if i not in found)
            unclaimed = (i for i in range(len(steps)) if i not in found)
            index = next((i for i in ahead if _shows(steps[i], fragment)), None)
            if index is None:
                index = next((i for i in unclaimed if _shows(steps[i], fragment)), None)
            if index is not None:
                found[index] = call
                cursor = max(cursor, index + 1)
    return found
