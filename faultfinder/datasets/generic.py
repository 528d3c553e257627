"""The generic labelled-trajectory format: JSON Lines of faultfinder's own trajectories,
each step with an explicit role (agent, user, tool, system), plus the label.

One line is one labelled failed run::

    {"format": "faultfinder.labelled-trajectory/1", "id": "langgraph/t07-3",
     "subset": "langgraph", "framework": "langgraph",
     "task": "...", "ground_truth": "42", "final_answer": "41",
     "roster": ["Researcher", "Analyst"],
     "steps": [{"role": "user", "agent": "user", "content": "..."},
               {"role": "agent", "agent": "Researcher", "content": "lookup(city='Oslo')",
                "tool_name": "lookup", "tool_arguments": "{\\"city\\": \\"Oslo\\"}"},
               {"role": "tool", "agent": "lookup", "content": "709,037"}],
     "label": {"agent": "Researcher", "step": 1, "mode": "R.1", "reason": "...",
               "source": "injected"}}

docs/datasets.md documents every field. A user's turn, a system prompt and a tool's report
keep their roles, so a reader never mistakes them for another agent; a simulated user
that is part of the system under test (as in τ-bench) is named in `roster` (or the record
says `"simulated_user": true`), and only then may its turns be blamed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from faultfinder.attributors.model import Step, StepKind, StepStatus, Trajectory
from faultfinder.datasets.fields import Fields, shown, type_name
from faultfinder.datasets.records import BenchmarkRecord, DatasetError, GoldLabel

__all__ = [
    "GENERIC_FORMAT",
    "LABEL_SOURCES",
    "STEP_ROLES",
    "dump_record",
    "load_generic_file",
    "record_json",
    "step_role",
    "write_records",
]

GENERIC_FORMAT = "faultfinder.labelled-trajectory/1"
"""The `format` of every line."""

GENERIC_DATASET = "generic"
"""`BenchmarkRecord.dataset` when a line names no dataset."""

STEP_ROLES: dict[str, tuple[StepKind, ...]] = {
    "agent": (StepKind.MESSAGE, StepKind.LLM, StepKind.HANDOFF),
    "user": (StepKind.HUMAN,),
    "tool": (StepKind.TOOL,),
    "system": (StepKind.SYSTEM,),
}
"""Each role and the step kinds it allows (the first is the default)."""

LABEL_SOURCES = ("human", "injected", "dataset", "counterfactual")
"""Where a label came from: a person, controlled failure injection, a published dataset,
or a counterfactual replay (the earliest step whose correction made the run succeed)."""

_DEFAULT_AGENT = {"user": "user", "system": "system"}


def step_role(step: Step) -> str:
    """The generic role of a step: `agent`, `user`, `tool` or `system`."""
    for role, kinds in STEP_ROLES.items():
        if step.kind in kinds:
            return role
    raise AssertionError(f"no role for step kind {step.kind!r}")  # pragma: no cover


def _time(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _step_json(step: Step) -> dict[str, Any]:
    out: dict[str, Any] = {"role": step_role(step), "agent": step.agent}
    if step.kind is not STEP_ROLES[out["role"]][0]:
        out["kind"] = step.kind.value
    out["content"] = step.content
    optional = {
        "source_role": step.role,
        "tool_name": step.tool_name,
        "tool_arguments": step.tool_arguments,
        "tool_result": step.tool_result,
        "status": step.status.value if step.status is not StepStatus.UNSET else None,
        "error": step.error,
        "span_id": step.span_id,
        "start_time": _time(step.start_time),
        "end_time": _time(step.end_time),
        "metadata": step.metadata or None,
    }
    out.update({key: value for key, value in optional.items() if value is not None})
    return out


_TRAJECTORY_KEYS = ("framework", "roster", "simulated_user", "user_instruction")
"""Trajectory metadata written at the top level of a line."""


def record_json(record: BenchmarkRecord) -> dict[str, Any]:
    """One record as a line of the generic format (a JSON-ready dict)."""
    trajectory = record.trajectory
    metadata = dict(trajectory.metadata)
    out: dict[str, Any] = {
        "format": GENERIC_FORMAT,
        "id": record.record_id,
        "dataset": record.dataset,
        "subset": record.subset,
    }
    for key in _TRAJECTORY_KEYS:
        if metadata.get(key) is not None:
            out[key] = metadata.pop(key)
    out["run_id"] = trajectory.run_id
    out["task"] = trajectory.task
    if trajectory.ground_truth is not None:
        out["ground_truth"] = trajectory.ground_truth
    if trajectory.final_answer is not None:
        out["final_answer"] = trajectory.final_answer
    out["steps"] = [_step_json(step) for step in trajectory.steps]
    gold = record.gold
    label: dict[str, Any] = {"agent": gold.agent, "step": gold.step}
    if gold.mode:
        label["mode"] = gold.mode
    if gold.reason:
        label["reason"] = gold.reason
    label["source"] = gold.source
    out["label"] = label
    if record.details:
        out["details"] = dict(record.details)
    if metadata:
        out["metadata"] = metadata
    return out


def dump_record(record: BenchmarkRecord) -> str:
    """One record as one line of JSON (no trailing newline)."""
    return json.dumps(record_json(record), ensure_ascii=False, separators=(",", ":"))


def write_records(records: Iterable[BenchmarkRecord], out: IO[str]) -> int:
    """Write `records` as JSON Lines to `out`; returns how many were written."""
    count = 0
    for record in records:
        out.write(dump_record(record) + "\n")
        count += 1
    return count


def load_generic_file(path: Path) -> Iterator[BenchmarkRecord]:
    """The records of a generic JSON Lines file, read and checked line by line.

    Blank lines are skipped; any other line that is not a valid record is an error that
    names the file, the line and the field. Record ids must be unique within the file.
    """
    try:
        handle = path.open(encoding="utf-8")
    except FileNotFoundError:
        raise DatasetError(f"{path}: file not found") from None
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read file: {exc.strerror or exc}") from None
    seen: set[str] = set()
    with handle:
        try:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                record = _parse_line(path, number, line)
                if record.record_id in seen:
                    raise DatasetError(f"{path}:{number}: id {record.record_id!r} appears twice")
                seen.add(record.record_id)
                yield record
        except UnicodeDecodeError as exc:
            raise DatasetError(f"{path}: not UTF-8 text ({exc.reason})") from None


def _parse_line(path: Path, number: int, line: str) -> BenchmarkRecord:
    where = Path(f"{path}:{number}")
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{where}: invalid JSON at column {exc.colno}: {exc.msg}") from None
    if not isinstance(data, dict):
        raise DatasetError(f"{where}: must hold a JSON object, got {type_name(data)}")
    fields = Fields(where, data)
    declared = fields.string("format")
    if declared != GENERIC_FORMAT:
        raise fields.error("format", f"must be {GENERIC_FORMAT!r}, got {shown(declared)}")
    return parse_record(fields)


def parse_record(fields: Fields) -> BenchmarkRecord:
    """A record from one parsed line (its `format` already checked)."""
    record_id = fields.string("id", non_empty=True)
    steps = tuple(_parse_step(index, entry) for index, entry in enumerate(fields.mappings("steps")))
    if not steps:
        raise fields.error("steps", "must hold at least one step")
    framework = fields.optional_string("framework")
    dataset = fields.optional_string("dataset") or GENERIC_DATASET
    subset = fields.optional_string("subset") or framework or "all"
    metadata: dict[str, Any] = {}
    if fields.has("metadata"):
        metadata.update(fields.mapping("metadata").data)
    metadata.update({"dataset": dataset, "subset": subset, "record": record_id})
    if framework:
        metadata["framework"] = framework
    roster = _roster(fields, steps)
    if roster:
        metadata["roster"] = roster
    if fields.has("simulated_user"):
        metadata["simulated_user"] = _boolean(fields, "simulated_user")
    instruction = fields.optional_text("user_instruction")
    if instruction:
        metadata["user_instruction"] = instruction
    trajectory = Trajectory(
        run_id=fields.optional_string("run_id") or f"{dataset}/{record_id}",
        task=fields.optional_text("task"),
        ground_truth=fields.text("ground_truth") if fields.has("ground_truth") else None,
        final_answer=fields.text("final_answer") if fields.has("final_answer") else None,
        steps=steps,
        metadata=metadata,
    )
    label = fields.mapping("label")
    gold_step = label.integer("step")
    label.check_step_in_range("step", gold_step, len(steps), "'steps'")
    source = label.optional_string("source") or "human"
    if source not in LABEL_SOURCES:
        raise label.error(
            "source", f"must be one of {', '.join(LABEL_SOURCES)}, got {shown(source)}"
        )
    gold = GoldLabel(
        agent=label.string("agent", non_empty=True),
        step=gold_step,
        reason=label.optional_text("reason"),
        mode=label.optional_string("mode"),
        source=source,
    )
    details = dict(fields.mapping("details").data) if fields.has("details") else {}
    return BenchmarkRecord(dataset, subset, record_id, trajectory, gold, details=details)


def _boolean(fields: Fields, name: str) -> bool:
    value = fields.data[name]
    if not isinstance(value, bool):
        raise fields.error(name, f"must be true or false, got {shown(value)}")
    return value


def _roster(fields: Fields, steps: tuple[Step, ...]) -> list[str]:
    """The declared roster, plus the user's names when the record says the user is simulated."""
    roster: list[str] = []
    if fields.has("roster"):
        for position, name in enumerate(fields.items("roster")):
            if not isinstance(name, str) or not name.strip():
                raise fields.error(
                    f"roster[{position}]", f"must be a non-empty string, got {shown(name)}"
                )
            roster.append(name)
    if fields.has("simulated_user") and _boolean(fields, "simulated_user"):
        if not roster:
            roster = [step.agent for step in steps if step.kind is not StepKind.TOOL]
        roster.extend(step.agent for step in steps if step.kind is StepKind.HUMAN)
    return list(dict.fromkeys(roster))


_STATUSES = {status.value: status for status in StepStatus}


def _parse_step(index: int, entry: Fields) -> Step:
    role = entry.string("role")
    if role not in STEP_ROLES:
        raise entry.error("role", f"must be one of {', '.join(STEP_ROLES)}, got {shown(role)}")
    allowed = STEP_ROLES[role]
    kind = allowed[0]
    if entry.has("kind"):
        name = entry.string("kind")
        kinds = {k.value: k for k in allowed}
        if name not in kinds:
            raise entry.error(
                "kind", f"of a {role!r} step must be one of {', '.join(kinds)}, got {shown(name)}"
            )
        kind = kinds[name]
    tool_name = entry.optional_string("tool_name")
    default_agent = _DEFAULT_AGENT.get(role) or (tool_name if role == "tool" else None)
    if entry.has("agent") or default_agent is None:
        agent = entry.string("agent", non_empty=True)
    else:
        agent = default_agent
    status = StepStatus.UNSET
    if entry.has("status"):
        value = entry.string("status")
        if value not in _STATUSES:
            raise entry.error(
                "status", f"must be one of {', '.join(_STATUSES)}, got {shown(value)}"
            )
        status = _STATUSES[value]
    metadata: dict[str, Any] = dict(entry.mapping("metadata").data) if entry.has("metadata") else {}
    if entry.has("handoff_to"):
        metadata["handoff_to"] = entry.string("handoff_to", non_empty=True)
    return Step(
        index=index,
        agent=agent,
        kind=kind,
        content=entry.optional_text("content"),
        role=entry.optional_string("source_role"),
        tool_name=tool_name,
        tool_arguments=entry.optional_string("tool_arguments"),
        tool_result=entry.optional_string("tool_result"),
        span_id=entry.optional_string("span_id"),
        start_time=_parse_time(entry, "start_time"),
        end_time=_parse_time(entry, "end_time"),
        status=status,
        error=entry.optional_string("error"),
        metadata=metadata,
    )


def _parse_time(entry: Fields, name: str) -> datetime | None:
    if not entry.has(name):
        return None
    text = entry.string(name)
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise entry.error(name, f"must be an ISO 8601 time, got {shown(text)}") from None
