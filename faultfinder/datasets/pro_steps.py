"""One Who&When Pro element as a `Step`: who acted, what kind of step it is, and its
text, rendered from the element's sections (plan, reasoning, code, action, observation,
tool calls, ledger)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from faultfinder.attributors.model import Step, StepKind, StepStatus
from faultfinder.datasets.pro_elements import ProElement, as_text

SINGLE_AGENT_NAME = "agent"
"""The one agent of a single-agent framework, as the release scores it."""

# Element kinds played by something other than an agent, and the actor we name for them.
_FRAMING_ACTORS = {"user": "user", "system": "system", "final_answer": "system"}
_FRAMING_KINDS = {"user": StepKind.HUMAN, "system": StepKind.SYSTEM}

# Steps copy only the fields named here: the markers of the injected fault (`injected`,
# `is_injected`, `is_replayed`, `phase`) would hand an attributor the answer.


@dataclass
class _Body:
    """What an element says and who says it; the agent's sections fill in the tool fields."""

    agent: str
    kind: StepKind
    content: str = ""
    tool_name: str | None = None
    tool_arguments: str | None = None
    tool_result: str | None = None
    error: str | None = None
    handoff_to: str | None = None


def pro_step(
    index: int,
    element: ProElement,
    framework: str,
    single_agent: bool,
    agent_by_role: Mapping[str, str],
) -> Step:
    """Step `index` of the record, from `element`."""
    kind = element.kind
    metadata = _metadata(element)
    if kind in _FRAMING_ACTORS:
        body = _framing_body(element, kind)
    elif kind == "tool":
        body = _tool_body(element, framework)
    else:
        body = _agent_body(element, framework, single_agent, agent_by_role)
    if body.handoff_to is not None:
        metadata["handoff_to"] = body.handoff_to
    role = element.get("role")
    return Step(
        index=index,
        agent=body.agent,
        kind=body.kind,
        content=body.content,
        role=role if isinstance(role, str) else kind,
        tool_name=body.tool_name,
        tool_arguments=body.tool_arguments,
        tool_result=body.tool_result,
        status=StepStatus.ERROR if body.error else StepStatus.UNSET,
        error=body.error,
        metadata=metadata,
    )


def _metadata(element: ProElement) -> dict[str, Any]:
    """Where the element sits in the run (round, position, stage, step number), its kind
    and the images it shows."""
    metadata: dict[str, Any] = {
        name: element.get(name)
        for name in ("round", "position", "stage", "step_number")
        if element.get(name) is not None
    }
    if element.round is not None:
        metadata["round"] = element.round
    if element.kind is not None:
        metadata["element_kind"] = element.kind
    images = _image_paths(element)
    if images:
        metadata["images"] = images
    return metadata


def _framing_body(element: ProElement, kind: str) -> _Body:
    """The user's or the system's words, which frame the run."""
    return _Body(
        agent=_FRAMING_ACTORS[kind],
        kind=_FRAMING_KINDS.get(kind, StepKind.SYSTEM),
        content=element.fields.text("content"),
    )


def _tool_body(element: ProElement, framework: str) -> _Body:
    """A tool's answer."""
    tool_name = element.fields.optional_string("tool_name")
    content = element.fields.text("content")
    # DVD's frame inspector is a VLM that answers the orchestrator: a sub-agent.
    agent = (
        "frame_inspect_agent"
        if framework == "dvd" and tool_name == "frame_inspect_tool"
        else "tool"
    )
    return _Body(
        agent=agent,
        kind=StepKind.TOOL,
        content=content,
        tool_name=tool_name,
        tool_result=content,
    )


def _agent_body(
    element: ProElement,
    framework: str,
    single_agent: bool,
    agent_by_role: Mapping[str, str],
) -> _Body:
    """An agent's turn: its own sections, the tools it called and its ledger, each under a
    heading; a ledger naming the next speaker makes the step a handoff to that agent."""
    body = _Body(agent=_pro_agent(element, framework, single_agent), kind=StepKind.MESSAGE)
    sections = _own_sections(element, body)
    sections.extend(_tool_call_sections(element, body))
    ledger = element.get("ledger")
    if ledger is not None:
        sections.append(("Ledger", as_text(ledger)))
        next_speaker = _ledger_answer(ledger, "next_speaker")
        if next_speaker:
            body.kind = StepKind.HANDOFF
            body.handoff_to = agent_by_role.get(next_speaker, next_speaker)
    body.content = "\n\n".join(
        f"{label}:\n{text}" if label else text for label, text in sections if text
    )
    return body


def _own_sections(element: ProElement, body: _Body) -> list[tuple[str, str]]:
    """The sections of the element's kind: a plan, an action, or the agent's words."""
    fields = element.fields
    if element.kind == "planning":
        return [("", fields.optional_text("plan"))]
    if element.kind == "action":
        return _action_sections(element, body)
    return [("", fields.optional_text("content") or fields.optional_text("output"))]


def _action_sections(element: ProElement, body: _Body) -> list[tuple[str, str]]:
    """Reasoning, code, action, observation and error of an action; the code or action is
    the tool call, the observation its result."""
    fields = element.fields
    reasoning = fields.optional_text("reasoning")
    code = fields.optional_text("code")
    action = fields.optional_text("action")
    observation = fields.optional_text("observation")
    sections = [("", reasoning)]
    if code and code.strip() not in reasoning:
        sections.append(("Code", code))
    sections.append(("Action", action))
    sections.append(("Observation", observation))
    if code:
        # smolagents' CodeAgent records each code action as a call to this tool.
        body.tool_name, body.tool_arguments = "python_interpreter", code
    elif action:
        body.tool_arguments = action
    body.tool_result = observation or None
    if element.get("error") is not None:
        body.error = as_text(element.get("error"))
        sections.append(("Error", body.error))
    return sections


def _tool_call_sections(element: ProElement, body: _Body) -> list[tuple[str, str]]:
    """The element's tool calls and tool actions; the first of the last list given is the
    step's tool call."""
    sections: list[tuple[str, str]] = []
    calls = element.get("tool_calls")
    if isinstance(calls, list) and calls:
        sections.extend(("Tool call", _describe_call(call)) for call in calls)
        first = calls[0] if isinstance(calls[0], dict) else {}
        body.tool_name = as_text(first.get("name")) or None
        body.tool_arguments = as_text(first.get("arguments")) or None
    actions = element.get("tool_actions")
    if isinstance(actions, list) and actions:
        sections.append(("Tool actions", as_text(actions)))
        first = actions[0] if isinstance(actions[0], dict) else {}
        body.tool_name = as_text(first.get("name")) or None
        body.tool_arguments = as_text(first.get("args")) or None
    return sections


def _pro_agent(element: ProElement, framework: str, single_agent: bool) -> str:
    if single_agent:
        return SINGLE_AGENT_NAME
    for name in ("agent", "agent_id"):
        if element.fields.has(name):
            return element.fields.string(name, non_empty=True)
    if framework == "dvd" and element.kind == "assistant":
        return "orchestrator"
    raise element.fields.error("agent_id", "is missing (the element names no agent)")


def _describe_call(call: Any) -> str:
    if not isinstance(call, dict):
        return as_text(call)
    return f"{as_text(call.get('name'))}({as_text(call.get('arguments'))})"


def _ledger_answer(ledger: Any, question: str) -> str | None:
    entry = ledger.get(question) if isinstance(ledger, dict) else None
    answer = entry.get("answer") if isinstance(entry, dict) else None
    return answer if isinstance(answer, str) and answer else None


def _image_paths(element: ProElement) -> list[str]:
    paths: list[str] = []
    for name in ("images", "observation_images", "frames"):
        items = element.get(name)
        if isinstance(items, list):
            paths.extend(
                item["path"] for item in items if isinstance(item, dict) and "path" in item
            )
    return paths
