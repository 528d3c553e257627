"""Dataset loaders: counts, hand-checked records, gold labels on the right step, clear errors."""

from __future__ import annotations

import json
import shutil
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from faultfinder.attributors.model import StepKind
from faultfinder.benchmarks.datasets import (
    DATASET_SPECS,
    BenchmarkRecord,
    DatasetError,
    count_records,
    load_dataset,
    load_who_and_when_pro_record,
    load_who_and_when_record,
    resolve_datasets_dir,
)

ROOT = resolve_datasets_dir()
WHO_AND_WHEN = ROOT / "who_and_when"
PRO_TRACES = ROOT / "who_and_when_pro" / "data" / "traces"

needs_who_and_when = pytest.mark.skipif(
    not WHO_AND_WHEN.is_dir(), reason=f"Who&When is not at {WHO_AND_WHEN}"
)
needs_pro = pytest.mark.skipif(
    not PRO_TRACES.is_dir(), reason=f"Who&When Pro samples are not at {PRO_TRACES}"
)


@cache
def records(spec: str) -> dict[str, BenchmarkRecord]:
    return {record.record_id: record for record in load_dataset(spec)}


def raw(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


# --- Who&When --------------------------------------------------------------------------------


@needs_who_and_when
@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("who_and_when", 184),
        ("who_and_when:algorithm-generated", 126),
        ("who_and_when:hand-crafted", 58),
    ],
)
def test_record_counts(spec: str, expected: int) -> None:
    assert count_records(spec) == expected
    assert len(records(spec)) == expected


@needs_who_and_when
def test_records_come_in_numeric_file_order_algorithm_generated_first() -> None:
    ids = [record.record_id for record in load_dataset("who_and_when")]
    assert ids[:3] == ["algorithm-generated/1", "algorithm-generated/2", "algorithm-generated/3"]
    assert ids[9:11] == ["algorithm-generated/10", "algorithm-generated/11"]
    assert ids[125:127] == ["algorithm-generated/126", "hand-crafted/1"]
    assert ids[-1] == "hand-crafted/58"


def test_unknown_spec_lists_the_valid_ones_before_any_iteration() -> None:
    with pytest.raises(DatasetError) as caught:
        load_dataset("who_and_when:human-made")
    for spec in DATASET_SPECS:
        assert spec in str(caught.value)


@needs_who_and_when
def test_hand_crafted_1() -> None:
    record = records("who_and_when")["hand-crafted/1"]
    steps = record.trajectory.steps
    assert (record.dataset, record.subset) == ("who_and_when", "hand-crafted")
    assert record.trajectory.run_id == "who_and_when/hand-crafted/1"
    assert record.trajectory.task.startswith("Where can I take martial arts classes")
    assert record.trajectory.ground_truth == "Renzo Gracie Jiu-Jitsu Wall Street"
    assert record.trajectory.metadata["framework"] == "magentic-one"
    assert record.gold.step == 12
    assert record.gold.agent == "WebSurfer"
    assert record.gold.reason.startswith("WebSurfer clicks on an irrelevant website")
    assert len(steps) == 29
    assert (steps[0].agent, steps[0].kind) == ("human", StepKind.HUMAN)
    assert steps[1].agent == "Orchestrator"
    assert steps[1].kind is StepKind.MESSAGE
    assert steps[1].role == "Orchestrator (thought)"
    assert steps[3].kind is StepKind.HANDOFF
    assert (steps[3].agent, steps[3].role) == ("Orchestrator", "Orchestrator (-> WebSurfer)")
    assert steps[12].agent == "WebSurfer"
    assert steps[12].content.startswith("I clicked 'NY Jidokwan Taekwondo'.")


@needs_who_and_when
def test_algorithm_generated_1() -> None:
    record = records("who_and_when")["algorithm-generated/1"]
    steps = record.trajectory.steps
    assert record.trajectory.metadata["framework"] == "ag2"
    assert record.trajectory.metadata["question_id"] == "4d51c4bf-4b0e-4f3d-897b-3f6687a7d9f2"
    assert record.trajectory.metadata["level"] == "2"
    assert record.trajectory.ground_truth == "8"
    assert (record.gold.step, record.gold.agent, record.gold.mode) == (0, "Excel_Expert", None)
    assert [step.agent for step in steps] == [
        "Excel_Expert",
        "Computer_terminal",
        "BusinessLogic_Expert",
        "Computer_terminal",
        "DataVerification_Expert",
        "DataVerification_Expert",
    ]
    assert (steps[0].role, steps[1].role) == ("assistant", "user")
    assert steps[1].kind is StepKind.TOOL
    assert steps[2].kind is StepKind.MESSAGE
    assert steps[5].content == "TERMINATE"


@needs_who_and_when
def test_algorithm_generated_30_carries_its_error_label() -> None:
    record = records("who_and_when")["algorithm-generated/30"]
    steps = record.trajectory.steps
    assert record.gold.mode == "Factual_Error"
    assert (record.gold.step, record.gold.agent) == (3, "Culinary_Expert")
    assert steps[3].agent == "Culinary_Expert"
    assert steps[3].content.startswith("Based on the transcription provided")
    assert (steps[5].agent, steps[5].kind) == ("Computer_terminal", StepKind.TOOL)
    assert (steps[6].agent, steps[6].role, steps[6].content) == (
        "AudioProcessing_Expert",
        "assistant",
        "TERMINATE",
    )


@needs_who_and_when
def test_hand_crafted_3_carries_its_mistake_type_and_integer_level() -> None:
    record = records("who_and_when")["hand-crafted/3"]
    assert record.gold.mode == "Tool failure"
    assert (record.gold.step, record.gold.agent) == (32, "WebSurfer")
    assert record.trajectory.steps[32].agent == "WebSurfer"
    assert record.trajectory.metadata["level"] == 2
    assert len(record.trajectory) == 93


@needs_who_and_when
def test_hand_crafted_22_keeps_a_label_whose_speaker_differs() -> None:
    # The annotators blame FileSurfer at step 4, which WebSurfer spoke; kept as given.
    record = records("who_and_when")["hand-crafted/22"]
    assert (record.gold.step, record.gold.agent) == (4, "FileSurfer")
    assert record.trajectory.steps[4].agent == "WebSurfer"
    assert record.gold.reason.startswith("FileSurfer failed to access the article")


@needs_who_and_when
def test_exactly_the_six_documented_labels_blame_another_speaker() -> None:
    differing = sorted(
        record.record_id
        for record in records("who_and_when").values()
        if record.trajectory.steps[record.gold.step].agent != record.gold.agent
    )
    assert differing == [
        "algorithm-generated/14",
        "algorithm-generated/15",
        "algorithm-generated/59",
        "hand-crafted/20",
        "hand-crafted/22",
        "hand-crafted/49",
    ]


@needs_who_and_when
def test_every_history_entry_is_one_step_with_its_content_and_role_verbatim() -> None:
    folders = {"algorithm-generated": "Algorithm-Generated", "hand-crafted": "Hand-Crafted"}
    for record in records("who_and_when").values():
        subset, number = record.record_id.split("/")
        history = raw(WHO_AND_WHEN / folders[subset] / f"{number}.json")["history"]
        steps = record.trajectory.steps
        assert [step.content for step in steps] == [entry["content"] for entry in history]
        assert [step.role for step in steps] == [entry["role"] for entry in history]
        assert record.trajectory.metadata["record"] == record.record_id
        for step in steps:
            # Hand-Crafted agents lose the role's note; handoffs keep their target.
            assert "(" not in step.agent, (record.record_id, step.index)
            if step.kind is StepKind.HANDOFF:
                assert step.role == f"{step.agent} (-> {step.metadata['handoff_to']})"


# --- Who&When Pro ----------------------------------------------------------------------------


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


def write_json(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


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


# --- broken Who&When inputs ------------------------------------------------------------------


@pytest.fixture
def broken_root(tmp_path: Path) -> Path:
    """A datasets root whose Hand-Crafted folder holds one editable record, 7.json."""
    folder = tmp_path / "who_and_when" / "Hand-Crafted"
    folder.mkdir(parents=True)
    source = WHO_AND_WHEN / "Hand-Crafted" / "7.json"
    if source.is_file():
        shutil.copy(source, folder / "7.json")
    else:
        write_json(
            folder / "7.json",
            {
                "question": "q",
                "question_ID": "id",
                "ground_truth": "a",
                "history": [
                    {"role": "human", "content": "q"},
                    {"role": "Orchestrator (thought)", "content": "plan"},
                    {"role": "WebSurfer", "content": "done"},
                ],
                "mistake_agent": "WebSurfer",
                "mistake_step": "2",
                "mistake_reason": "r",
            },
        )
    return tmp_path


def edit_record(root: Path, **changes: Any) -> Path:
    path = root / "who_and_when" / "Hand-Crafted" / "7.json"
    data = raw(path)
    for name, value in changes.items():
        if value is None:
            del data[name]
        else:
            data[name] = value
    return write_json(path, data)


def load_broken(root: Path) -> list[BenchmarkRecord]:
    return list(load_dataset("who_and_when:hand-crafted", root=root))


def test_the_untouched_copy_loads(broken_root: Path) -> None:
    [record] = load_broken(broken_root)
    assert record.record_id == "hand-crafted/7"


def test_missing_dataset_folder_names_it(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="Algorithm-Generated: dataset folder not found"):
        load_dataset("who_and_when", root=tmp_path)
    with pytest.raises(DatasetError, match="traces: dataset folder not found"):
        count_records("who_and_when_pro", root=tmp_path)


def test_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"12\.json: file not found"):
        load_who_and_when_record(tmp_path / "12.json", "hand-crafted")
    with pytest.raises(DatasetError, match=r"gone\.json: file not found"):
        load_who_and_when_pro_record(tmp_path / "gone.json")


def test_invalid_json_names_the_file_and_position(broken_root: Path) -> None:
    path = broken_root / "who_and_when" / "Hand-Crafted" / "7.json"
    path.write_text('{"question": "q",\n  "history": [}', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"7\.json: invalid JSON at line 2 column"):
        load_broken(broken_root)


def test_missing_history_names_the_field(broken_root: Path) -> None:
    edit_record(broken_root, history=None)
    with pytest.raises(DatasetError, match=r"Hand-Crafted/7\.json: field 'history' is missing"):
        load_broken(broken_root)


def test_non_integer_mistake_step_names_the_field_and_value(broken_root: Path) -> None:
    edit_record(broken_root, mistake_step="abc")
    with pytest.raises(DatasetError) as caught:
        load_broken(broken_root)
    assert str(caught.value).endswith(
        "Hand-Crafted/7.json: field 'mistake_step' must be an integer string, got 'abc'"
    )


def test_mistake_step_beyond_the_history_is_an_error(broken_root: Path) -> None:
    history = raw(broken_root / "who_and_when" / "Hand-Crafted" / "7.json")["history"]
    edit_record(broken_root, mistake_step=str(len(history)))
    with pytest.raises(DatasetError, match=r"7\.json: field 'mistake_step' is step \d+, outside"):
        load_broken(broken_root)


def test_ill_typed_history_entry_names_its_position(broken_root: Path) -> None:
    history = raw(broken_root / "who_and_when" / "Hand-Crafted" / "7.json")["history"]
    history[2]["content"] = 5
    edit_record(broken_root, history=history)
    with pytest.raises(
        DatasetError, match=r"7\.json: field 'history\[2\]\.content' must be a string, got int"
    ):
        load_broken(broken_root)


def test_a_file_that_is_not_a_record_number_is_refused(broken_root: Path) -> None:
    write_json(broken_root / "who_and_when" / "Hand-Crafted" / "notes.json", {})
    with pytest.raises(DatasetError, match=r"notes\.json: file name must be a record number"):
        load_broken(broken_root)


def test_roster_is_the_magentic_one_team_for_hand_crafted_and_the_speakers_for_ag() -> None:
    hand_crafted = next(iter(load_dataset("who_and_when:hand-crafted")))
    assert hand_crafted.trajectory.roster == (
        "Orchestrator", "WebSurfer", "FileSurfer", "Assistant", "ComputerTerminal",
    )  # fmt: skip
    # The human who asked is not a member of the team the random baseline draws from.
    assert "human" in hand_crafted.trajectory.agents
    assert "human" not in hand_crafted.trajectory.roster
    generated = next(iter(load_dataset("who_and_when:algorithm-generated")))
    assert generated.trajectory.roster == generated.trajectory.agents
