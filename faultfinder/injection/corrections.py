"""Corrected steps for `faultfinder verify`: a reply that says what a candidate step should
have said, written by the user (`--correction N=TEXT`) or by a model given the task, the
run up to the step, the step, and the right answer or why the run failed.

A correction of a tool call is the call's arguments as one JSON object (the same tool is
called with them); any other text replaces the reply's message (no tool call).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from faultfinder.attributors.model import Step, StepKind, Trajectory
from faultfinder.injection.exchanges import reply_text, reply_tool_calls, with_message

__all__ = [
    "Corrector",
    "complete_with",
    "corrected_reply",
    "parse_corrections",
    "request_tools",
    "tool_call",
]

CONTEXT_CHARS = 12_000
"""The most of the run before the step shown to the corrector (its end is kept)."""

_SYSTEM = (
    "You correct one step of an AI agent team's run that ended wrong, to test whether that"
    " step decided the outcome. Write the step as a careful agent in the same role would"
    " have written it at that point: fix what is wrong in it, keep its style and format, and"
    " do not do the work of later steps. Reply with the corrected step only."
)


def parse_corrections(values: tuple[str, ...]) -> dict[int, str]:
    """`N=TEXT` options → step N → TEXT (ValueError names a malformed one)."""
    found: dict[int, str] = {}
    for value in values:
        step, sep, text = value.partition("=")
        if not sep or not step.strip().isdigit() or not text.strip():
            raise ValueError(f"--correction {value!r}: expected N=TEXT (N a step index)")
        found[int(step)] = text.strip()
    return found


def request_tools(request: Mapping[str, Any]) -> list[str]:
    """The names of the tools a chat-completion request offered the model."""
    names = []
    for tool in request.get("tools") or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            names.append(function["name"])
    return names


def corrected_reply(
    reply: Mapping[str, Any], correction: str, tools: Sequence[str] = ()
) -> dict[str, Any]:
    """`reply` saying `correction` instead: new arguments for its tool call when it made
    one and the correction is a JSON object; a call of one of `tools` (those the request
    offered) when it made none and the correction is a whole call naming one (an agent
    that stopped early should have called a tool); else the correction as its message."""
    calls = reply_tool_calls(reply)
    if not calls and tools:
        call = tool_call(correction)
        if call is not None and call[0] in tools:
            made = {
                "id": "call_corrected",
                "type": "function",
                "function": {"name": call[0], "arguments": json.dumps(call[1], ensure_ascii=False)},
            }
            return with_message(reply, None, [made])
    if calls:
        call = tool_call(correction)
        if call is not None:
            name, arguments = call
            first = dict(calls[0])
            first["function"] = {
                **(first.get("function") or {}),
                **({"name": name} if name else {}),
                "arguments": json.dumps(arguments, ensure_ascii=False),
            }
            return with_message(reply, reply_text(reply) or None, [first, *calls[1:]])
    return with_message(reply, correction, None)


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def tool_call(correction: str) -> tuple[str | None, dict[str, Any]] | None:
    """The tool (None: the same one) and arguments a corrected tool call carries, or None
    when `correction` is a message.

    Models write the arguments in more shapes than the one asked for: the object itself;
    with every brace doubled, as a format string would print it (`{{"city": "Oslo"}}`);
    or as a whole call, `{"name": TOOL, "arguments": {...}}` (the arguments possibly a
    JSON string, as the OpenAI wire format has them), which may name another tool.
    """
    text = correction.strip()
    found = _json_object(text)
    if found is None and text.startswith("{{") and text.endswith("}}"):
        found = _json_object(text.replace("{{", "{").replace("}}", "}"))
    if found is None:
        return None
    name = found.get("name")
    inner = found.get("arguments", found.get("parameters"))
    if isinstance(name, str) and set(found) <= {"name", "arguments", "parameters"}:
        if isinstance(inner, str):
            inner = _json_object(inner)
        if isinstance(inner, dict):
            return name, inner
    return None, found


_KINDS = "|".join(kind.value for kind in StepKind)
_ECHOED_HEADER = re.compile(rf"^\[\d+\]\s+[^\n()]{{1,80}}\s\((?:{_KINDS})\):\s*")
"""The `[N] agent (kind): ` header `_render` puts before a step, which a model often
repeats at the start of its correction (the step's text never starts with it)."""


def _render(step: Step) -> str:
    if step.kind is StepKind.TOOL:
        body = step.tool_result or step.content
    elif step.tool_name:
        body = f"{step.content}\ncalls tool {step.tool_name} with {step.tool_arguments or '{}'}"
    else:
        body = step.content
    return f"[{step.index}] {step.agent} ({step.kind.value}): {body.strip()}"


SIGNATURE_CHARS = 1_500
"""The most of a tool's description and parameters shown to the corrector."""


def _signature(request: Mapping[str, Any] | None, name: Any) -> str:
    """` (description; parameters: {...})` of the tool `name` as `request` offered it."""
    for tool in (request or {}).get("tools") or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or function.get("name") != name:
            continue
        described = " ".join(str(function.get("description") or "").split())
        parameters = function.get("parameters") or {}
        properties = parameters.get("properties") if isinstance(parameters, dict) else None
        shown = json.dumps(properties or parameters, ensure_ascii=False)
        text = f"{described}; parameters: {shown}" if described else f"parameters: {shown}"
        return f" ({text[:SIGNATURE_CHARS]})"
    return ""


def _returned(trajectory: Trajectory, step: int) -> str:
    """` It returned: ...` when the step after `step` is its tool's result."""
    after = trajectory.steps[step + 1] if step + 1 < len(trajectory.steps) else None
    if after is None or after.kind is not StepKind.TOOL:
        return ""
    result = " ".join((after.tool_result or after.content).split())
    return f" It returned: {result[:SIGNATURE_CHARS]}" if result else ""


@dataclass
class Corrector:
    """A model that writes the corrected step (`complete(system, user) -> text`)."""

    complete: Callable[[str, str], str]

    def prompt(
        self,
        trajectory: Trajectory,
        step: int,
        reply: Mapping[str, Any],
        request: Mapping[str, Any] | None = None,
    ) -> str:
        before = "\n".join(_render(s) for s in trajectory.steps[:step])[-CONTEXT_CHARS:]
        target = trajectory.steps[step]
        if trajectory.ground_truth:
            known = f"The right final answer is: {trajectory.ground_truth}"
        else:
            known = "The run's final answer was judged wrong."
        calls = reply_tool_calls(reply)
        if calls:
            function = calls[0].get("function") or {}
            name = function.get("name")
            # A call is corrected from what the agent had when it made it (the tool's
            # description and parameters, as the request offered them) and from what the
            # call got back; the right answer is said again here, as for a message.
            shape = (
                f"The step calls the tool {name}{_signature(request, name)} with the"
                f" arguments {function.get('arguments')}.{_returned(trajectory, step)}"
            )
            if trajectory.ground_truth:
                shape += (
                    " Give the arguments that get what the team needs from this call to reach"
                    f" the right answer, {trajectory.ground_truth}."
                )
            shape += (
                " Reply with the corrected arguments as one JSON object only (or, if the"
                " agent should not call a tool here, with its message)."
            )
        else:
            # Offering the model the tools here ("or, if the agent should have called one
            # of them, that call") made the 1.5B corrector repeat a call the run had already
            # made in place of nearly every message: 41 of 95 injected failures flipped,
            # against 58 without the offer (reports/flips.md). A user's correction may still
            # be a call (`corrected_reply`).
            shape = "Reply with the corrected message only."
            if trajectory.ground_truth:
                # Told only far above, the 1.5B corrector kept an injected guess's sentence
                # and filled it from the task's words ("The answer is South." for 740):
                # the answer is said again where the model writes.
                shape += (
                    " Where the message answers the team's task, it must give the right"
                    f" answer: {trajectory.ground_truth}"
                )
        return (
            f"The team's task: {trajectory.task}\n{known}\n"
            f"The run's final answer was: {trajectory.final_answer or '(none)'}\n\n"
            f"The run up to the step:\n<<<\n{before}\n>>>\n\n"
            f"The step to correct:\n<<<\n{_render(target)}\n>>>\n\n{shape}"
        )

    def __call__(
        self,
        trajectory: Trajectory,
        step: int,
        reply: Mapping[str, Any],
        request: Mapping[str, Any] | None = None,
    ) -> str:
        text = self.complete(_SYSTEM, self.prompt(trajectory, step, reply, request)).strip()
        if text.startswith("```"):
            text = text.split("\n", 1)[1] if "\n" in text else ""
            text = text.rsplit("```", 1)[0].strip()
        text = text.replace("<<<", "").replace(">>>", "").strip()
        return _ECHOED_HEADER.sub("", text, count=1).strip()


def complete_with(
    upstream: str, *, api_key: str, model: str, temperature: float = 0.0
) -> Callable[[str, str], str]:
    """A `complete(system, user)` calling an OpenAI-compatible endpoint (as the injection
    harness's model-written injector does)."""

    def complete(system: str, user: str) -> str:
        answer = httpx.post(
            f"{upstream.rstrip('/')}/chat/completions",
            headers={"Authorization": f"Bearer {api_key}"},
            json={
                "model": model,
                "messages": [
                    {"role": "system", "content": system},
                    {"role": "user", "content": user},
                ],
                "temperature": temperature,
                "max_tokens": 600,
            },
            timeout=600,
        )
        answer.raise_for_status()
        return reply_text(answer.json())

    return complete
