"""Who&When Pro's loader: the samples and their frameworks, gold steps on the injected
element, agent names and rosters, no injection marker left in a step."""

from __future__ import annotations

from pathlib import Path

import pytest

from faultfinder.attributors.model import StepKind
from faultfinder.datasets import (
    DatasetError,
    count_records,
    load_who_and_when_pro_record,
)
from tests.unit.dataset_files import (
    PRO_TRACES,
    needs_pro,
    raw,
    records,
    write_json,
)


def injected_positions(path: Path) -> list[int]:
    """Trajectory positions the file itself marks as the injected fault."""
    marked = []
    for position, element in enumerate(raw(path)["trajectory"]):
        phase = element.get("phase")
        if (
            element.get("injected") is True
            or element.get("is_injected") is True
            or (isinstance(phase, list) and "injected" in phase)
        ):
            marked.append(position)
    return marked


@needs_pro
def test_pro_loads_the_six_samples_with_framework_subsets() -> None:
    loaded = records("who_and_when_pro")
    assert count_records("who_and_when_pro") == 6
    assert sorted(loaded) == [
        "eva/lvbench_camel",
        "macnet/macnet_triangle",
        "magentic-one/simpleqa_election",
        "smolagents/mmsearch_car",
        "smolagents/mmsearch_glasses",
        "smolagents/mmsearch_pokemon",
    ]
    for record in loaded.values():
        assert record.subset == record.trajectory.metadata["framework"]
        assert record.gold.mode is not None


@needs_pro
def test_pro_gold_step_lands_on_the_element_marked_injected() -> None:
    checked = 0
    for path in sorted(PRO_TRACES.glob("*.json")):
        marked = injected_positions(path)
        if not marked:
            continue
        record = load_who_and_when_pro_record(path)
        assert marked == [record.gold.step], path.name
        assert record.trajectory.steps[record.gold.step].agent == record.gold.agent, path.name
        checked += 1
    # eva, macnet and magentic-one mark their injected element.
    assert checked == 3


@needs_pro
def test_pro_smolagents_gold_steps_point_at_the_faulty_turn() -> None:
    loaded = records("who_and_when_pro")
    # PL.1 (bad plan): the gold is the planning step, which precedes the first action.
    car = loaded["smolagents/mmsearch_car"]
    assert car.trajectory.steps[car.gold.step].role == "planning"
    assert car.trajectory.steps[car.gold.step].content.startswith("Here are the facts I know")
    # R.1: the agent itself says, one step later, that this step misidentified the product.
    glasses = loaded["smolagents/mmsearch_glasses"]
    following = glasses.trajectory.steps[glasses.gold.step + 1]
    assert "my previous step mistakenly identified" in following.content
    # R.4: the wrong final answer ("2025", truth 2024-10-30) is given at the gold step.
    pokemon = loaded["smolagents/mmsearch_pokemon"]
    assert (
        'final_answer("Late October 2025.")' in pokemon.trajectory.steps[pokemon.gold.step].content
    )


@needs_pro
def test_pro_single_agent_traces_use_the_literal_agent_name() -> None:
    loaded = records("who_and_when_pro")
    for record_id in ("smolagents/mmsearch_car", "eva/lvbench_camel"):
        record = loaded[record_id]
        assert record.gold.agent == "agent"
        assert record.trajectory.steps[record.gold.step].agent == "agent"
    eva = loaded["eva/lvbench_camel"].trajectory
    assert [step.agent for step in eva.steps] == ["system", "user", "agent", "tool", "agent"]
    assert eva.steps[2].tool_name == "frame_select"
    assert eva.steps[3].kind is StepKind.TOOL
    assert "(B) Camel" in eva.task
    assert eva.ground_truth == "B"


@needs_pro
def test_pro_roster_is_the_team_not_the_user_system_or_tools() -> None:
    loaded = records("who_and_when_pro")
    assert loaded["eva/lvbench_camel"].trajectory.roster == ("agent",)
    assert loaded["smolagents/mmsearch_car"].trajectory.roster == ("agent",)
    assert loaded["magentic-one/simpleqa_election"].trajectory.roster == (
        "orchestrator", "websurfer", "coder", "filesurfer", "computerterminal",
    )  # fmt: skip
    assert loaded["macnet/macnet_triangle"].trajectory.roster == ("node_0", "node_1", "node_out")
    for record in loaded.values():
        assert record.gold.agent in record.trajectory.roster
        assert not {"user", "system", "tool"} & set(record.trajectory.roster)


@needs_pro
def test_pro_multi_agent_steps_name_their_agents() -> None:
    loaded = records("who_and_when_pro")
    election = loaded["magentic-one/simpleqa_election"].trajectory
    assert election.agents == ("user", "orchestrator", "websurfer", "coder")
    assert election.steps[1].kind is StepKind.HANDOFF
    assert election.steps[1].metadata["handoff_to"] == "websurfer"
    assert election.steps[2].tool_name == "input_text"
    assert election.final_answer == "190"
    triangle = loaded["macnet/macnet_triangle"].trajectory
    assert [step.agent for step in triangle.steps][1:5] == [
        "node_0",
        "node_1",
        "node_1",
        "node_out",
    ]


@needs_pro
def test_pro_steps_do_not_reveal_the_injection_markers() -> None:
    for record in records("who_and_when_pro").values():
        for step in record.trajectory.steps:
            assert not {"injected", "is_injected", "is_replayed", "phase"} & set(step.metadata)
            assert "is_injected" not in step.content


def test_pro_round_wrapped_turns_are_steps_and_gold_lands_on_the_named_turn(
    tmp_path: Path,
) -> None:
    trace = {
        "framework": "pixelcraft",
        "task": {"query": "Which bar is tallest?", "answer": "C"},
        "ground_truth": {"agent": "critic", "round": 1, "position": 1, "mode": "V.1"},
        "trajectory": [
            {"kind": "user", "content": "Which bar is tallest?"},
            {
                "kind": "round",
                "round": 0,
                "turns": [
                    {"agent_id": "planner", "position": 0, "output": "crop the chart"},
                    {"agent_id": "critic", "position": 1, "output": "looks fine"},
                ],
            },
            {
                "kind": "round",
                "round": 1,
                "turns": [
                    {"agent_id": "reasoner", "position": 0, "output": "bar B"},
                    {"agent_id": "critic", "position": 1, "output": "agreed, B"},
                ],
            },
            {"kind": "final_answer", "content": "B"},
        ],
    }
    record = load_who_and_when_pro_record(write_json(tmp_path / "chart.json", trace))
    steps = record.trajectory.steps
    assert [step.agent for step in steps] == [
        "user",
        "planner",
        "critic",
        "reasoner",
        "critic",
        "system",
    ]
    assert steps[record.gold.step].content == "agreed, B"
    assert record.trajectory.final_answer == "B"


@needs_pro
@pytest.mark.parametrize("framework", ["debate", "swarm"])
def test_pro_unsupported_framework_is_named(tmp_path: Path, framework: str) -> None:
    trace = raw(PRO_TRACES / "simpleqa_election.json") | {"framework": framework}
    path = write_json(tmp_path / "trace.json", trace)
    with pytest.raises(DatasetError, match=f"trace.json: field 'framework' '{framework}'"):
        load_who_and_when_pro_record(path)


@needs_pro
def test_pro_gold_coordinate_outside_the_trace_is_an_error(tmp_path: Path) -> None:
    trace = raw(PRO_TRACES / "simpleqa_election.json")
    trace["ground_truth"]["step"] = "9.1"
    path = write_json(tmp_path / "trace.json", trace)
    with pytest.raises(DatasetError, match=r"trace.json: field 'ground_truth.step'.*'9.1'"):
        load_who_and_when_pro_record(path)
