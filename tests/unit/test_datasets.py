"""Who&When's loader: record counts and order, hand-checked records, gold labels on the
right step, every history entry one step."""

from __future__ import annotations

import pytest

from faultfinder.attributors.model import StepKind
from faultfinder.datasets import (
    DATASET_SPECS,
    DatasetError,
    count_records,
    load_dataset,
)
from tests.unit.dataset_files import (
    WHO_AND_WHEN,
    needs_who_and_when,
    raw,
    records,
)


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
