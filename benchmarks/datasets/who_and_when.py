"""The Who&When reader: one Algorithm-Generated (AG2) or Hand-Crafted (Magentic-One) log
file becomes a `BenchmarkRecord`; docs/datasets.md documents the mapping field by field."""

from __future__ import annotations

import re
from pathlib import Path

from faultfinder.attributors.model import Step, StepKind, Trajectory
from faultfinder.benchmarks.datasets.fields import Fields, read_json_object, type_name
from faultfinder.benchmarks.datasets.records import (
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

_TERMINAL_AGENTS = frozenset({"Computer_terminal", "ComputerTerminal"})
_HUMAN_AGENT = "human"
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
    fields = Fields(path, read_json_object(path))
    hand_crafted = subset == "hand-crafted"

    steps = [
        _who_and_when_step(index, entry, hand_crafted)
        for index, entry in enumerate(fields.mappings("history"))
    ]
    gold_step = fields.integer_string("mistake_step")
    fields.check_step_in_range("mistake_step", gold_step, len(steps), "'history'")
    mode_field = "mistake_type" if hand_crafted else "labels"
    gold = GoldLabel(
        agent=fields.string("mistake_agent", non_empty=True),
        step=gold_step,
        reason=fields.string("mistake_reason"),
        mode=fields.optional_string(mode_field),
    )
    level = fields.data.get("level")
    if level is not None and (isinstance(level, bool) or not isinstance(level, str | int)):
        raise fields.error("level", f"must be a string or an integer, got {type_name(level)}")
    trajectory = Trajectory(
        run_id=f"{WHO_AND_WHEN}/{record_id}",
        task=fields.string("question"),
        ground_truth=fields.text("ground_truth"),
        steps=tuple(steps),
        metadata={
            "dataset": WHO_AND_WHEN,
            "subset": subset,
            "record": record_id,
            "question_id": fields.string("question_ID"),
            "level": level,
            "framework": "magentic-one" if hand_crafted else "ag2",
            **({"roster": list(MAGENTIC_ONE_ROSTER)} if hand_crafted else {}),
        },
    )
    return BenchmarkRecord(WHO_AND_WHEN, subset, record_id, trajectory, gold)


def _who_and_when_step(index: int, entry: Fields, hand_crafted: bool) -> Step:
    content = entry.string("content")
    role = entry.string("role", non_empty=hand_crafted)
    handoff_to: str | None = None
    if hand_crafted:
        agent, note = _split_role(role)
        if note is not None and note.startswith("->"):
            handoff_to = note[2:].strip()
    else:
        agent = entry.string("name", non_empty=True)

    if handoff_to:
        kind = StepKind.HANDOFF
    elif agent in _TERMINAL_AGENTS:
        kind = StepKind.TOOL
    elif agent == _HUMAN_AGENT:
        kind = StepKind.HUMAN
    else:
        kind = StepKind.MESSAGE
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
