"""τ-bench conversations as the sidecar received them live (replayed through the OpenAI
Agents SDK, pydantic-ai and LangGraph): each person's label carried to the live step that says
the same turn, and the live runs read as conversations whose simulated customer may be
blamed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from faultfinder.attributors.learned.blame import blameable_agents
from faultfinder.attributors.learned.step_model import is_conversation
from faultfinder.attributors.model import StepKind
from faultfinder.datasets import load_dataset
from faultfinder.datasets.tau_bench_live import live_steps, name_exported

REPO = Path(__file__).resolve().parents[2]
RECORDED = REPO / "data/conversations/tau-bench-airline.jsonl"
LIVE = {
    "live": REPO / "data/conversations/tau-bench-airline-live.jsonl",
    "live-pydantic-ai": REPO / "data/conversations/tau-bench-airline-live-pydantic-ai.jsonl",
    "live-langgraph": REPO / "data/conversations/tau-bench-airline-live-langgraph.jsonl",
}
ASSISTANT = "assistant"
"""The one agent's name in every live set: the SDKs' agent's, and the name LangGraph's
`create_react_agent` was given (not its node's, `agent`)."""


def _words(text: str) -> str:
    return " ".join(text.split())[:100]


def test_model_calls_and_customer_turns_move_to_the_live_steps_in_order() -> None:
    replayed = {"calls": [[2], [4, 5], []], "users": [3, 9], "task": 1}
    live = [
        {"index": 0, "kind": "llm"},
        {"index": 1, "kind": "human"},
        {"index": 2, "kind": "llm"},
        {"index": 3, "kind": "tool"},
        {"index": 4, "kind": "tool"},
        {"index": 5, "kind": "llm"},
    ]
    # Both calls of one message are the one model call that made them; the filler call
    # stands for no recorded step; a customer turn the run never showed moves nowhere.
    assert live_steps(replayed, live) == {2: 0, 4: 2, 5: 2, 3: 1}


def test_exported_runs_get_their_records_id_and_half_back() -> None:
    records = [{"id": "r1", "subset": "air/odd-tasks", "dataset": "tau-bench", "framework": "air"}]
    exported: list[dict[str, Any]] = [
        {"id": "database/abc", "subset": "openai-agents", "details": {"record": "r1"}, "steps": []}
    ]
    (named,) = name_exported(exported, records)
    assert (named["id"], named["subset"], named["framework"]) == ("r1/live", "air/odd-tasks", "air")


@pytest.mark.parametrize("suffix", sorted(LIVE))
def test_the_committed_live_sets_label_the_turn_the_people_labelled(suffix: str) -> None:
    recorded = {record.record_id: record for record in load_dataset(str(RECORDED))}
    live = list(load_dataset(str(LIVE[suffix])))
    # One label is on the customer's last word (###STOP###), which reaches no model call.
    assert len(live) == len(recorded) - 1
    for record in live:
        source = recorded[record.record_id.removesuffix(f"/{suffix}")]
        said = source.trajectory.steps[source.gold.step]
        step = record.trajectory.steps[record.gold.step]
        customer = source.gold.agent == "user"
        assert record.gold.agent == step.agent == ("user" if customer else ASSISTANT)
        assert step.kind is (StepKind.HUMAN if step.agent == "user" else StepKind.LLM)
        assert (
            _words(said.content) == _words(step.content) or (said.tool_name or "\0") in step.content
        )
        assert record.subset == source.subset
        assert is_conversation(record.trajectory)
        assert set(blameable_agents(record.trajectory)) == {ASSISTANT, "user"}
