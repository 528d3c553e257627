"""One Who&When Pro element as a `Step`: who acted, what kind of step it is, and its
text, rendered from the element's sections (plan, reasoning, code, action, observation,
tool calls, ledger)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from faultfinder.attributors.model import Step, StepKind, StepStatus
from faultfinder.benchmarks.datasets.pro_elements import ProElement, as_text

SINGLE_AGENT_NAME = "agent"
"""The one agent of a single-agent framework, as the release scores it."""

# Element kinds played by something other than an agent, and the actor we name for them.
_FRAMING_ACTORS = {"user": "user", "system": "system", "final_answer": "system"}
_FRAMING_KINDS = {"user": StepKind.HUMAN, "system": StepKind.SYSTEM}

# Steps copy only the fields named in `pro_step`: the markers of the injected fault
# (`injected`, `is_injected`, `is_replayed`, `phase`) would hand an attributor the answer.


def pro_step(
    index: int,
    element: ProElement,
    framework: str,
    single_agent: bool,
    agent_by_role: Mapping[str, str],
) -> Step:
    """Step `index` of the record, from `element`."""
    fields = element.fields
    kind = element.kind
    tool_name: str | None = None
    tool_arguments: str | None = None
    tool_result: str | None = None
    error: str | None = None
    metadata: dict[str, Any] = {
        name: element.get(name)
        for name in ("round", "position", "stage", "step_number")
        if element.get(name) is not None
    }
    if element.round is not None:
        metadata["round"] = element.round
    if kind is not None:
        metadata["element_kind"] = kind
    images = _image_paths(element)
    if images:
        metadata["images"] = images

    if kind in _FRAMING_ACTORS:
        agent = _FRAMING_ACTORS[kind]
        step_kind = _FRAMING_KINDS.get(kind, StepKind.SYSTEM)
        content = fields.text("content")
    elif kind == "tool":
        tool_name = fields.optional_string("tool_name")
        content = fields.text("content")
        tool_result = content
        # DVD's frame inspector is a VLM that answers the orchestrator: a sub-agent.
        agent = (
            "frame_inspect_agent"
            if framework == "dvd" and tool_name == "frame_inspect_tool"
            else "tool"
        )
        step_kind = StepKind.TOOL
    else:
        agent = _pro_agent(element, framework, single_agent)
        step_kind = StepKind.MESSAGE
        sections: list[tuple[str, str]] = []
        if kind == "planning":
            sections.append(("", fields.optional_text("plan")))
        elif kind == "action":
            reasoning = fields.optional_text("reasoning")
            code = fields.optional_text("code")
            action = fields.optional_text("action")
            observation = fields.optional_text("observation")
            sections.append(("", reasoning))
            if code and code.strip() not in reasoning:
                sections.append(("Code", code))
            sections.append(("Action", action))
            sections.append(("Observation", observation))
            if code:
                # smolagents' CodeAgent records each code action as a call to this tool.
                tool_name, tool_arguments = "python_interpreter", code
            elif action:
                tool_arguments = action
            tool_result = observation or None
            if element.get("error") is not None:
                error = as_text(element.get("error"))
                sections.append(("Error", error))
        else:
            sections.append(("", fields.optional_text("content") or fields.optional_text("output")))
        calls = element.get("tool_calls")
        if isinstance(calls, list) and calls:
            sections.extend(("Tool call", _describe_call(call)) for call in calls)
            first = calls[0] if isinstance(calls[0], dict) else {}
            tool_name = as_text(first.get("name")) or None
            tool_arguments = as_text(first.get("arguments")) or None
        actions = element.get("tool_actions")
        if isinstance(actions, list) and actions:
            sections.append(("Tool actions", as_text(actions)))
            first = actions[0] if isinstance(actions[0], dict) else {}
            tool_name = as_text(first.get("name")) or None
            tool_arguments = as_text(first.get("args")) or None
        ledger = element.get("ledger")
        if ledger is not None:
            sections.append(("Ledger", as_text(ledger)))
            next_speaker = _ledger_answer(ledger, "next_speaker")
            if next_speaker:
                step_kind = StepKind.HANDOFF
                metadata["handoff_to"] = agent_by_role.get(next_speaker, next_speaker)
        content = "\n\n".join(
            f"{label}:\n{text}" if label else text for label, text in sections if text
        )

    role = element.get("role")
    return Step(
        index=index,
        agent=agent,
        kind=step_kind,
        content=content,
        role=role if isinstance(role, str) else kind,
        tool_name=tool_name,
        tool_arguments=tool_arguments,
        tool_result=tool_result,
        status=StepStatus.ERROR if error else StepStatus.UNSET,
        error=error,
        metadata=metadata,
    )


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
