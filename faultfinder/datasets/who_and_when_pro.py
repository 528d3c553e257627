"""The Who&When Pro reader: one trace of the release (any supported framework) becomes a
`BenchmarkRecord`; docs/datasets.md documents the mapping field by field."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from faultfinder.attributors.model import StepKind, Trajectory
from faultfinder.datasets.fields import Fields, read_json_object
from faultfinder.datasets.pro_elements import ProElement, as_text, pro_elements
from faultfinder.datasets.pro_gold import pro_gold_step
from faultfinder.datasets.pro_steps import SINGLE_AGENT_NAME, pro_step
from faultfinder.datasets.records import WHO_AND_WHEN_PRO, BenchmarkRecord, GoldLabel

PRO_TRACES = Path(WHO_AND_WHEN_PRO) / "data" / "traces"
"""Where the release's traces are under the datasets root."""

_NOT_TEAM_KINDS = frozenset({StepKind.HUMAN, StepKind.SYSTEM, StepKind.TOOL})
"""What the Pro scorer compares single-agent predictions against."""

_PRO_FRAMEWORKS = frozenset(
    {"smolagents", "alfagent", "eva", "dvd", "magentic-one", "macnet", "mathchat", "metagpt",
     "pixelcraft"}
)  # fmt: skip
_ROUND_ONLY_FRAMEWORKS = frozenset({"debate", "dylan"})


def load_who_and_when_pro_record(path: Path) -> BenchmarkRecord:
    """One Who&When Pro trace (the release's per-trace JSON object)."""
    fields = Fields(path, read_json_object(path))
    framework = fields.string("framework", non_empty=True)
    if framework in _ROUND_ONLY_FRAMEWORKS:
        raise fields.error(
            "framework",
            f"{framework!r} is unsupported: its gold label names a round, not a single step",
        )
    if framework not in _PRO_FRAMEWORKS:
        raise fields.error(
            "framework",
            f"{framework!r} is unsupported; supported: {', '.join(sorted(_PRO_FRAMEWORKS))}",
        )
    gold_fields = fields.mapping("ground_truth")
    single_agent = not gold_fields.has("agent") and not gold_fields.has("agents")
    elements = pro_elements(fields)
    # Magentic-One's ledger names the next speaker by role ("WebSurfer"); steps use ids.
    agent_by_role = {
        agent["role"]: agent["id"]
        for agent in fields.data.get("agents") or []
        if isinstance(agent, dict)
        and isinstance(agent.get("role"), str)
        and isinstance(agent.get("id"), str)
    }
    steps = [
        pro_step(index, element, framework, single_agent, agent_by_role)
        for index, element in enumerate(elements)
    ]
    gold_step = pro_gold_step(framework, gold_fields, elements, fields)
    mode = gold_fields.optional_string("mode")
    gold = GoldLabel(
        agent=SINGLE_AGENT_NAME if single_agent else gold_fields.string("agent", non_empty=True),
        step=gold_step,
        reason=gold_fields.optional_string("reason") or "",
        mode=mode,
    )

    # The system's team: the declared agents and whoever acts in the run; never the user,
    # the system prompt or a tool reply (the release never blames those). Single-agent
    # frameworks have the one literal agent the release scores against.
    declared = [
        agent["id"]
        for agent in fields.data.get("agents") or []
        if isinstance(agent, dict) and isinstance(agent.get("id"), str) and agent["id"]
    ]
    acting = [step.agent for step in steps if step.kind not in _NOT_TEAM_KINDS]
    roster = list(dict.fromkeys([*declared, *acting]))
    task = fields.mapping("task")
    record_id = f"{framework}/{path.stem}"
    trajectory = Trajectory(
        run_id=f"{WHO_AND_WHEN_PRO}/{record_id}",
        task=_pro_task_text(task),
        ground_truth=task.text("answer") if task.has("answer") else None,
        final_answer=_pro_final_answer(fields, elements),
        steps=tuple(steps),
        metadata={
            "dataset": WHO_AND_WHEN_PRO,
            "subset": framework,
            "record": record_id,
            "framework": framework,
            "benchmark": fields.optional_string("benchmark"),
            "modality": fields.optional_string("modality"),
            "agents": [
                {"id": agent.get("id"), "role": agent.get("role")}
                for agent in fields.data.get("agents") or []
                if isinstance(agent, dict)
            ],
            **({"roster": roster} if roster else {}),
        },
    )
    return BenchmarkRecord(WHO_AND_WHEN_PRO, framework, record_id, trajectory, gold)


def _pro_task_text(task: Fields) -> str:
    query = task.string("query")
    options = task.data.get("options")
    if isinstance(options, dict) and options:
        listed = "\n".join(f"({key}) {as_text(value)}" for key, value in options.items())
        return f"{query}\n\n{listed}"
    return query


def _pro_final_answer(fields: Fields, elements: Sequence[ProElement]) -> str | None:
    if fields.has("final_answer"):
        return fields.text("final_answer")
    for element in elements:
        if element.kind == "final_answer":
            return element.fields.text("content")
    return None
