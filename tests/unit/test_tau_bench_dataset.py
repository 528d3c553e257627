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
from faultfinder.benchmarks.datasets import DatasetError, load_dataset
from faultfinder.benchmarks.datasets.tau_bench import convert, folded, main, packets

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
    records = list(load_dataset(str(REPO / "benchmarks/conversations/tau-bench-airline.jsonl")))
    labels = [
        json.loads(line)
        for line in (REPO / "benchmarks/conversations/tau-bench-airline-labels.jsonl").open()
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
