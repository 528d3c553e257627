"""The Who&When reader: one Algorithm-Generated (AG2) or Hand-Crafted (Magentic-One) log
file becomes a `BenchmarkRecord`; docs/datasets.md documents the mapping field by field."""

from __future__ import annotations

import re
from pathlib import Path

import orjson

from faultfinder.attributors.model import Step, StepKind, Trajectory
from faultfinder.datasets.fields import Fields, read_json_object, type_name
from faultfinder.datasets.records import (
    WHO_AND_WHEN,
    BenchmarkRecord,
    DatasetError,
    GoldLabel,
)

# Magentic-One's fixed team, as its agents are named in the Hand-Crafted logs (the
# Coder speaks as "Assistant"). Algorithm-Generated teams are built per task, so
# their roster is the agents that appear in the run.
MAGENTIC_ONE_ROSTER = ("Orchestrator", "WebSurfer", "FileSurfer", "Assistant", "ComputerTerminal")

WHO_AND_WHEN_FOLDERS = {
    "algorithm-generated": "Algorithm-Generated",
    "hand-crafted": "Hand-Crafted",
}
"""Subset name -> its folder under the dataset's root."""

_KIND_BY_NAME: dict[str, StepKind] = {
    **dict.fromkeys(("computer_terminal", "computerterminal", "tool", "function", "ipython",
                     "observation", "environment"), StepKind.TOOL),
    **dict.fromkeys(("human", "user"), StepKind.HUMAN),
    "system": StepKind.SYSTEM,
}  # fmt: skip
"""Speakers that are not agents of the system, by their case-folded name: terminals and
tools report, the human or user gives the task (and, in a dialogue, answers), the system
prompt frames the run."""
_NOT_TEAM = frozenset({StepKind.TOOL, StepKind.HUMAN, StepKind.SYSTEM})
_TOOL_SPEAKERS = frozenset({"tool", "function", "observation"})
"""Speakers that name no tool: their report is the called tool's."""

WHO_AND_WHEN_FORMAT = "who_and_when_format"
"""`BenchmarkRecord.dataset` of a Who&When-format file read from a folder of any system."""
# Hand-Crafted roles carry a parenthesised note: "Orchestrator (thought)",
# "Orchestrator (-> WebSurfer)", "Orchestrator (termination condition)".
_ROLE_NOTE = re.compile(r"^(?P<agent>.*?)\s*\((?P<note>[^()]*)\)\s*$")


def record_number(path: Path) -> int:
    """The record number a Who&When file is named by (`12.json` -> 12)."""
    if not path.stem.isdigit():
        raise DatasetError(f"{path}: file name must be a record number such as 12.json")
    return int(path.stem)


def load_who_and_when_record(path: Path, subset: str) -> BenchmarkRecord:
    """One Who&When file; `subset` is `algorithm-generated` or `hand-crafted`."""
    if subset not in WHO_AND_WHEN_FOLDERS:
        raise DatasetError(
            f"{path}: unknown Who&When subset {subset!r}; "
            f"valid subsets: {', '.join(WHO_AND_WHEN_FOLDERS)}"
        )
    record_id = f"{subset}/{record_number(path)}"
    hand_crafted = subset == "hand-crafted"
    return _load(
        path,
        dataset=WHO_AND_WHEN,
        subset=subset,
        record_id=record_id,
        by_role=hand_crafted,
        framework="magentic-one" if hand_crafted else "ag2",
    )


def load_who_and_when_format_record(path: Path, subset: str) -> BenchmarkRecord:
    """A file in the Who&When format from any system (not the published dataset).

    Each file decides its own layout: steps whose entries carry a `name` are read as
    Algorithm-Generated ones (the agent is the `name`), the others as Hand-Crafted ones
    (the agent is the `role`). A `framework` field is kept; a top-level
    `"simulated_user": true` says the user's turns belong to the system under test. Tool
    calls written in an agent's text are read as calls (`_calls_read`).
    """
    fields = Fields(path, read_json_object(path))
    history = fields.mappings("history")
    framework = fields.data.get("framework")
    return _load(
        path,
        dataset=WHO_AND_WHEN_FORMAT,
        subset=subset,
        record_id=f"{subset}/{path.stem}",
        by_role=not any(entry.has("name") for entry in history),
        framework=framework if isinstance(framework, str) and framework.strip() else None,
        fields=fields,
        read_calls=True,
    )


# A call as a turn's last words: `lookup({"city": "Oslo"})` or `lookup()`, the way the
# GenAI messages render tool calls (`reading.messages.tool_call_text`).
_CALL_NAME = re.compile(r"(?:^|(?<=\s))[A-Za-z_][\w.-]*\(")
_NAME = re.compile(r"^[A-Za-z_][\w.-]*$")
_CALLS_TRIED = 4
"""Opening brackets tried from the end of a turn before it is taken for no call."""


def _calls_read(steps: list[Step]) -> list[Step]:
    """An agent's turn that is a tool call written in its text is that call, as a format
    with call fields would say it, and the tools' reports that follow answer the calls in
    the order they were made. The Who&When format has no field for either, so another
    system's file can only say them in the text: as `name(arguments)` at the turn's end
    (arguments a JSON object), or as the turn's whole text in JSON, OpenAI's `tool_calls`
    or one `{"name", "arguments"}` call. A report may be written under the called tool's
    own name: that speaker is the tool, not an agent of the team."""
    read: list[Step] = []
    waiting: list[str] = []
    calling = False
    for step in steps:
        if step.kind is StepKind.MESSAGE and waiting and step.agent == waiting[0]:
            step = step.model_copy(update={"kind": StepKind.TOOL})
        calls: list[tuple[str, str]] = []
        if step.kind is StepKind.TOOL:
            if waiting and step.tool_name is None:
                name = waiting.pop(0)
                # A report written as the generic "tool" is the called tool's own.
                generic = step.agent.casefold() in _TOOL_SPEAKERS
                step = step.model_copy(
                    update={"tool_name": name, **({"agent": name} if generic else {})}
                )
        elif step.kind not in _NOT_TEAM and step.tool_name is None:
            calls = _calls(step.content)
        if calls:
            if not calling:
                waiting.clear()
            waiting.extend(name for name, _ in calls)
            name, arguments = calls[0]
            step = step.model_copy(update={"tool_name": name, "tool_arguments": arguments})
        elif step.kind is not StepKind.TOOL:
            waiting.clear()
        calling = bool(calls)
        read.append(step)
    return read


def _calls(content: str) -> list[tuple[str, str]]:
    text = content.strip()
    if text.startswith(("{", "[")):
        return _json_calls(text)
    if not text.endswith(")"):
        return []
    for match in list(_CALL_NAME.finditer(text))[-_CALLS_TRIED:][::-1]:
        arguments = text[match.end() : -1].strip()
        if arguments:
            try:
                if not isinstance(orjson.loads(arguments), dict):
                    continue
            except orjson.JSONDecodeError:
                continue
        return [(match[0][:-1], arguments)]
    return []


def _json_calls(text: str) -> list[tuple[str, str]]:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return []
    if isinstance(value, dict):
        value = value.get("tool_calls", [value])
    if not isinstance(value, list):
        return []
    calls: list[tuple[str, str]] = []
    for item in value:
        function = item.get("function", item) if isinstance(item, dict) else None
        if not isinstance(function, dict):
            return []
        # A call always carries its arguments: `{"name": "Alice"}` is no call.
        name, arguments = function.get("name"), function.get("arguments")
        if not isinstance(name, str) or not _NAME.match(name) or arguments is None:
            return []
        if not isinstance(arguments, str):
            arguments = orjson.dumps(arguments).decode()
        calls.append((name, arguments))
    return calls


def _load(
    path: Path,
    *,
    dataset: str,
    subset: str,
    record_id: str,
    by_role: bool,
    framework: str | None,
    fields: Fields | None = None,
    read_calls: bool = False,
) -> BenchmarkRecord:
    if fields is None:
        fields = Fields(path, read_json_object(path))
    steps = [
        _who_and_when_step(index, entry, by_role)
        for index, entry in enumerate(fields.mappings("history"))
    ]
    if read_calls:
        steps = _calls_read(steps)
    gold_step = fields.integer_string("mistake_step")
    fields.check_step_in_range("mistake_step", gold_step, len(steps), "'history'")
    mode_field = "mistake_type" if fields.has("mistake_type") else "labels"
    gold = GoldLabel(
        agent=fields.string("mistake_agent", non_empty=True),
        step=gold_step,
        reason=fields.optional_text("mistake_reason"),
        mode=fields.optional_string(mode_field),
    )
    level = fields.data.get("level")
    if level is not None and (isinstance(level, bool) or not isinstance(level, str | int)):
        raise fields.error("level", f"must be a string or an integer, got {type_name(level)}")
    roster = _roster(steps, simulated_user=fields.data.get("simulated_user") is True)
    instruction = fields.optional_text("user_instruction")
    trajectory = Trajectory(
        run_id=f"{dataset}/{record_id}",
        task=fields.string("question"),
        ground_truth=fields.text("ground_truth") if fields.has("ground_truth") else None,
        steps=tuple(steps),
        metadata={
            "dataset": dataset,
            "subset": subset,
            "record": record_id,
            "question_id": fields.optional_string("question_ID"),
            "level": level,
            **({"framework": framework} if framework else {}),
            **({"roster": roster} if roster else {}),
            **({"simulated_user": True} if fields.data.get("simulated_user") is True else {}),
            **({"user_instruction": instruction} if instruction else {}),
        },
    )
    return BenchmarkRecord(dataset, subset, record_id, trajectory, gold)


def _roster(steps: list[Step], *, simulated_user: bool) -> list[str]:
    """Magentic-One's team when every agent of the run is one of its members; with a
    simulated user, every agent and the user. Otherwise none: the agents seen are the team."""
    agents = [step.agent for step in steps if step.kind not in (StepKind.TOOL, StepKind.SYSTEM)]
    if simulated_user:
        return list(dict.fromkeys(agents))
    acting = {step.agent for step in steps if step.kind not in _NOT_TEAM}
    if acting and acting <= set(MAGENTIC_ONE_ROSTER):
        return list(MAGENTIC_ONE_ROSTER)
    return []


def _who_and_when_step(index: int, entry: Fields, by_role: bool) -> Step:
    content = entry.string("content")
    role = entry.string("role", non_empty=by_role)
    handoff_to: str | None = None
    if by_role:
        agent, note = _split_role(role)
        if note is not None and note.startswith("->"):
            handoff_to = note[2:].strip()
    else:
        agent = entry.string("name", non_empty=True)

    kind = StepKind.HANDOFF if handoff_to else _KIND_BY_NAME.get(agent.casefold(), StepKind.MESSAGE)
    return Step(
        index=index,
        agent=agent,
        kind=kind,
        content=content,
        role=role,
        metadata={"handoff_to": handoff_to} if handoff_to else {},
    )


def _split_role(role: str) -> tuple[str, str | None]:
    """`"Orchestrator (-> WebSurfer)"` → (`"Orchestrator"`, `"-> WebSurfer"`)."""
    match = _ROLE_NOTE.match(role)
    if match and match["agent"]:
        return match["agent"], match["note"].strip()
    return role.strip(), None
