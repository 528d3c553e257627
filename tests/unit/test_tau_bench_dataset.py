"""τ-bench result files with people's labels: every chat message a step with its role, the
labelled step the one the annotators saw under that number, and the file read back by the
generic loader with the simulated customer blameable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from faultfinder.attributors.learned import blameable
from faultfinder.attributors.model import StepKind
from faultfinder.datasets import DatasetError, load_dataset
from faultfinder.datasets.tau_bench import convert, folded, main, packets
from faultfinder.datasets.who_and_when import load_who_and_when_format_record

REPO = Path(__file__).resolve().parents[2]


def a_run(task_id: int, reward: float) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "trial": 1,
        "reward": reward,
        "info": {"task": {"instruction": "You are ann_1. Cancel reservation AB12.",
                          "actions": [{"name": "cancel_reservation",
                                       "kwargs": {"reservation_id": "AB12"}}],
                          "outputs": []}},
        "traj": [
            {"role": "system", "content": "Policy: confirm before any write."},
            {"role": "user", "content": "Please cancel my trip, I'm ann_1."},
            {"role": "assistant", "content": None, "tool_calls": [
                {"function": {"name": "get_user_details", "arguments": "{\"user_id\": \"ann_1\"}"}},
                {"function": {"name": "think", "arguments": "{\"thought\": \"two trips\"}"}}]},
            {"role": "tool", "name": "get_user_details",
             "content": "{\"reservations\": [\"AB12\", \"CD34\"]}"},
            {"role": "tool", "name": "think", "content": ""},
            {"role": "assistant", "content": None, "tool_calls": [
                {"function": {"name": "cancel_reservation",
                              "arguments": "{\"reservation_id\": \"CD34\"}"}}]},
            {"role": "tool", "name": "cancel_reservation",
             "content": "{\"status\": \"cancelled\"}"},
            {"role": "assistant", "content": "Your trip CD34 is cancelled."},
        ],
    }  # fmt: skip


LABEL: dict[str, Any] = {
    "id": "tau-airline-7-t1", "step": 6, "agent": "assistant", "mode": "wrong_argument",
    "confidence": "high", "reason": "cancelled CD34, the user meant AB12",
}  # fmt: skip


def test_each_call_is_a_step_and_the_label_lands_on_the_call_the_annotators_numbered(
    tmp_path: Path,
) -> None:
    results = [a_run(7, 0.0), a_run(8, 1.0)]
    (packet,) = packets(results, "airline", tmp_path / "packets")
    shown = packet.read_text()
    assert "[step 6] assistant tool call:\ncancel_reservation" in shown
    assert "Cancel reservation AB12." in shown and "tau-airline-8" not in shown

    (record,) = convert(results, {LABEL["id"]: LABEL}, domain="airline", framework="tau-air")
    roles = [(step["role"], step.get("tool_name")) for step in record["steps"]]
    assert roles == [
        ("system", None), ("user", None), ("agent", "get_user_details"), ("agent", "think"),
        ("tool", "get_user_details"), ("tool", "think"), ("agent", "cancel_reservation"),
        ("tool", "cancel_reservation"), ("agent", None),
    ]  # fmt: skip
    assert record["label"]["step"] == 6 and record["subset"] == "tau-air/odd-tasks"


def test_the_written_file_reads_back_with_the_customer_blameable(tmp_path: Path) -> None:
    results = tmp_path / "results.json"
    results.write_text(json.dumps([a_run(7, 0.0)]))
    labels = tmp_path / "labels.jsonl"
    labels.write_text(json.dumps(LABEL) + "\n")
    out = tmp_path / "out.jsonl"
    main([str(results), "--labels", str(labels), "--framework", "tau-air", "--out", str(out)])

    (record,) = load_dataset(str(out))
    steps = record.trajectory.steps
    assert [step.kind for step in steps[:3]] == [StepKind.SYSTEM, StepKind.HUMAN, StepKind.MESSAGE]
    assert record.gold.step == 6 and steps[6].tool_name == "cancel_reservation"
    mask = blameable(steps, record.trajectory.declared_roster)
    assert mask[1] and not mask[0]


def test_a_label_on_a_tool_reply_is_refused() -> None:
    label: dict[str, Any] = dict(LABEL, step=4)
    with pytest.raises(DatasetError, match="not an agent's or the user's turn"):
        convert([a_run(7, 0.0)], {LABEL["id"]: label}, domain="airline", framework="tau-air")


def test_the_committed_airline_set_is_what_the_labels_and_steps_say() -> None:
    records = list(load_dataset(str(REPO / "data/conversations/tau-bench-airline.jsonl")))
    labels = [
        json.loads(line)
        for line in (REPO / "data/conversations/tau-bench-airline-labels.jsonl").open()
        if line.strip()
    ]
    assert len(records) == len(labels) == 116
    by_id = {record.record_id: record for record in records}
    for label in labels:
        record = by_id[label["id"]]
        assert (record.gold.step, record.gold.agent) == (label["step"], label["agent"])
        kind = record.trajectory.steps[label["step"]].kind
        assert kind is (StepKind.HUMAN if label["agent"] == "user" else StepKind.MESSAGE)


def test_the_folded_layout_keeps_the_label_on_the_same_turn() -> None:
    (record,) = convert([a_run(7, 0.0)], {LABEL["id"]: LABEL}, domain="airline", framework="t")
    other = folded(record)
    roles = [
        (step["role"], step.get("tool_name"), "tool_result" in step) for step in other["steps"]
    ]
    assert roles == [
        ("user", None, False), ("agent", "get_user_details", True), ("agent", "think", True),
        ("agent", "cancel_reservation", True), ("agent", None, False),
    ]  # fmt: skip
    labelled = other["steps"][other["label"]["step"]]
    assert labelled == {**record["steps"][LABEL["step"]], "tool_result": '{"status": "cancelled"}'}


def test_the_who_and_when_layout_reads_back_as_the_same_calls_reports_and_label(
    tmp_path: Path,
) -> None:
    """A Who&When-format file says a call only in its text (`name({...})`) and a report
    only as "tool": read back, the calls, the reports' tools and the label are the generic
    file's, reports answering two calls of one turn in the order they were made."""
    results = tmp_path / "results.json"
    results.write_text(json.dumps([a_run(7, 0.0)]))
    labels = tmp_path / "labels.jsonl"
    labels.write_text(json.dumps(LABEL) + "\n")
    generic = tmp_path / "out.jsonl"
    main([str(results), "--labels", str(labels), "--framework", "tau-air", "--out", str(generic)])
    main(["--who-and-when", str(generic), "--out", str(tmp_path / "ww")])

    (expected,) = load_dataset(str(generic))
    read = load_who_and_when_format_record(tmp_path / "ww" / "1.json", "tau-air")
    written = json.loads((tmp_path / "ww" / "1.json").read_text())["history"]
    # The file names no tool: its reports are all "tool", its calls only text.
    assert [entry["role"] for entry in written] == [
        "system", "user", "assistant", "assistant", "tool", "tool", "assistant", "tool",
        "assistant",
    ]  # fmt: skip
    fields = ("agent", "kind", "tool_name", "tool_arguments", "content")
    assert [[getattr(step, f) for f in fields] for step in read.trajectory.steps] == [
        [getattr(step, f) for f in fields] for step in expected.trajectory.steps
    ]
    assert (read.gold.agent, read.gold.step) == (expected.gold.agent, expected.gold.step)
    # The system prompt is nobody in the team.
    assert set(read.trajectory.declared_roster) == set(expected.trajectory.declared_roster)
    # The customer's hidden instruction travels with the run in both layouts.
    instruction = "You are ann_1. Cancel reservation AB12."
    assert expected.trajectory.metadata["user_instruction"] == instruction
    assert read.trajectory.metadata["user_instruction"] == instruction


def test_a_file_made_before_the_instruction_was_written_gets_it_by_run_id(
    tmp_path: Path,
) -> None:
    """`--instructions` adds each run's instruction to an older file, a live copy (named
    after its run in `details.record`) included, and changes nothing else."""
    results = tmp_path / "results.json"
    results.write_text(json.dumps([a_run(7, 0.0)]))
    (record,) = convert([a_run(7, 0.0)], {LABEL["id"]: LABEL}, domain="airline", framework="t")
    older = {key: value for key, value in record.items() if key != "user_instruction"}
    live = dict(older, id=f"{LABEL['id']}/live", details={"record": LABEL["id"]})
    stray = dict(older, id="tau-airline-99-t0")
    given = tmp_path / "older.jsonl"
    given.write_text("".join(json.dumps(line) + "\n" for line in (older, live)))
    out = tmp_path / "with.jsonl"
    main([str(results), "--instructions", str(given), "--out", str(out)])
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert written[0] == record
    assert [line["user_instruction"] for line in written] == [record["user_instruction"]] * 2
    assert {k: v for k, v in written[1].items() if k != "user_instruction"} == live
    given.write_text(json.dumps(stray) + "\n")
    with pytest.raises(DatasetError, match="no τ-bench run 'tau-airline-99-t0'"):
        main([str(results), "--instructions", str(given), "--out", str(out)])


def test_a_turn_that_only_mentions_a_call_is_not_taken_for_one(tmp_path: Path) -> None:
    history = [
        {"role": "user", "content": "Find the fare."},
        {"role": "assistant", "content": "I looked it up (see the table above)."},
        {"role": "assistant", "content": "lookup([1, 2])"},
        {"role": "assistant", "content": 'Calling lookup({"fare": 1}) then done.'},
        {"role": "assistant", "content": '{"name": "Alice", "fare": 42}'},
        {"role": "tool", "content": "42"},
    ]
    path = tmp_path / "1.json"
    path.write_text(
        json.dumps({"question": "q", "history": history, "mistake_agent": "assistant",
                    "mistake_step": "1"})
    )  # fmt: skip
    steps = load_who_and_when_format_record(path, "x").trajectory.steps
    assert [step.tool_name for step in steps] == [None] * 6
    assert steps[5].agent == "tool"


def test_calls_written_as_json_and_reports_under_the_tools_own_names_are_read(
    tmp_path: Path,
) -> None:
    """OpenAI's `tool_calls` as a turn's text, two calls in one turn, each report under
    the name of the tool it answers: the calls are the turn's, the reports are tools'
    (not agents of the team, not blameable), in the order the calls were made."""
    calls = {"tool_calls": [
        {"id": "a", "type": "function",
         "function": {"name": "get_user_details", "arguments": "{\"user_id\": \"ann_1\"}"}},
        {"id": "b", "type": "function",
         "function": {"name": "get_reservation_details", "arguments": {"id": "AB12"}}},
    ]}  # fmt: skip
    history = [
        {"role": "user", "content": "Cancel AB12, I'm ann_1."},
        {"role": "assistant", "content": json.dumps(calls)},
        {"role": "get_user_details", "content": "{\"name\": \"Ann\"}"},
        {"role": "get_reservation_details", "content": "{\"status\": \"booked\"}"},
        {"role": "assistant", "content": json.dumps({"name": "cancel_reservation",
                                                     "arguments": {"id": "AB12"}})},
        {"role": "tool", "content": "{\"status\": \"cancelled\"}"},
        {"role": "assistant", "content": "Done: AB12 is cancelled."},
    ]  # fmt: skip
    path = tmp_path / "1.json"
    path.write_text(
        json.dumps({"question": "q", "history": history, "mistake_agent": "assistant",
                    "mistake_step": "4", "simulated_user": True})
    )  # fmt: skip
    record = load_who_and_when_format_record(path, "x")
    steps = record.trajectory.steps
    assert [(step.kind, step.agent, step.tool_name) for step in steps] == [
        (StepKind.HUMAN, "user", None),
        (StepKind.MESSAGE, "assistant", "get_user_details"),
        (StepKind.TOOL, "get_user_details", "get_user_details"),
        (StepKind.TOOL, "get_reservation_details", "get_reservation_details"),
        (StepKind.MESSAGE, "assistant", "cancel_reservation"),
        (StepKind.TOOL, "cancel_reservation", "cancel_reservation"),
        (StepKind.MESSAGE, "assistant", None),
    ]
    assert steps[1].tool_arguments == '{"user_id": "ann_1"}'
    assert steps[4].tool_arguments == '{"id":"AB12"}'
    assert set(record.trajectory.declared_roster) == {"user", "assistant"}
