"""The generic labelled-trajectory format: what a team or another benchmark writes, read
back exactly, with roles kept and every mistake in a file named by line and field."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from faultfinder.attributors.model import StepKind
from faultfinder.cli.dataset import dataset_group
from faultfinder.datasets import (
    GENERIC_FORMAT,
    MAGENTIC_ONE_ROSTER,
    BenchmarkRecord,
    DatasetError,
    count_records,
    load_dataset,
    write_records,
)
from faultfinder.datasets.generic import record_json


def line(**fields: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "format": GENERIC_FORMAT,
        "id": "r1",
        "framework": "retail-bot",
        "task": "Exchange my keyboard for the clicky one.",
        "steps": [
            {"role": "user", "content": "Exchange my keyboard for the clicky one."},
            {"role": "agent", "agent": "Assistant", "content": "get_order(order_id='#W1')",
             "tool_name": "get_order", "tool_arguments": "{\"order_id\": \"#W1\"}"},
            {"role": "tool", "tool_name": "get_order", "content": "{\"items\": [\"kb-1\"]}"},
            {"role": "user", "content": "Actually make it the red one."},
            {"role": "agent", "agent": "Assistant", "content": "Done: exchanged for kb-9."},
        ],
        "label": {"agent": "Assistant", "step": 4, "mode": "R.1", "source": "human"},
    }  # fmt: skip
    record.update(fields)
    return record


def write_lines(path: Path, *lines: dict[str, Any] | str) -> Path:
    path.write_text(
        "\n".join(item if isinstance(item, str) else json.dumps(item) for item in lines) + "\n"
    )
    return path


def test_published_datasets_convert_and_read_back_identically(
    who_and_when: list[BenchmarkRecord], datasets_dir: Path, tmp_path: Path
) -> None:
    pro = list(load_dataset("who_and_when_pro", datasets_dir))
    for records in (who_and_when, pro):
        out = tmp_path / "out.jsonl"
        with out.open("w") as handle:
            assert write_records(records, handle) == len(records)
        back = list(load_dataset(str(out)))
        assert [r.record_id for r in back] == [r.record_id for r in records]
        for original, read in zip(records, back, strict=True):
            assert read.trajectory == original.trajectory
            assert read.gold == original.gold
            assert read.subset == original.subset
            assert read.gold.source == "dataset"


def test_roles_are_kept_and_a_user_is_not_an_agent(tmp_path: Path) -> None:
    (record,) = load_dataset(str(write_lines(tmp_path / "d.jsonl", line())))
    steps = record.trajectory.steps
    assert [s.kind for s in steps] == [
        StepKind.HUMAN, StepKind.MESSAGE, StepKind.TOOL, StepKind.HUMAN, StepKind.MESSAGE,
    ]  # fmt: skip
    assert steps[0].agent == "user" and steps[2].agent == "get_order"
    assert record.subset == "retail-bot" and record.trajectory.metadata["framework"] == "retail-bot"
    # No roster was declared: the user is the task giver, not a member of the system.
    assert record.trajectory.declared_roster == ()
    assert record.gold.mode == "R.1" and record.gold.source == "human"


def test_a_simulated_user_joins_the_roster(tmp_path: Path) -> None:
    flagged = line(simulated_user=True)
    listed = line(id="r2", roster=["Assistant", "user"])
    records = list(load_dataset(str(write_lines(tmp_path / "d.jsonl", flagged, listed))))
    for record in records:
        assert set(record.trajectory.declared_roster) == {"Assistant", "user"}
    assert records[0].trajectory.metadata["simulated_user"] is True


def test_a_simulated_users_instruction_is_read_and_written_back(tmp_path: Path) -> None:
    told = "You are ann_lee_1234. Exchange your keyboard for the red one."
    path = write_lines(tmp_path / "d.jsonl", line(simulated_user=True, user_instruction=told))
    (record,) = load_dataset(str(path))
    assert record.trajectory.metadata["user_instruction"] == told
    assert record_json(record)["user_instruction"] == told


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format": "other/1"}, "field 'format' must be 'faultfinder.labelled-trajectory/1'"),
        ({"steps": []}, "field 'steps' must hold at least one step"),
        ({"label": {"agent": "Assistant", "step": 9}}, "field 'label.step' is step 9, outside"),
        ({"label": {"agent": "Assistant", "step": 1, "source": "oracle"}}, "label.source"),
        ({"steps": [{"role": "robot", "content": "x"}]}, "field 'steps[0].role' must be one of"),
        ({"steps": [{"role": "user", "kind": "handoff"}]}, "'steps[0].kind' of a 'user' step"),
        ({"steps": [{"role": "agent", "content": "x"}]}, "field 'steps[0].agent' is missing"),
        ({"roster": ["A", 3]}, "field 'roster[1]' must be a non-empty string"),
        ({"simulated_user": "yes"}, "field 'simulated_user' must be true or false"),
        ({"user_instruction": ["x"]}, "field 'user_instruction' must be"),
    ],
)
def test_a_bad_line_is_named_by_file_line_and_field(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    path = write_lines(tmp_path / "d.jsonl", line(id="ok"), "", line(**change))
    with pytest.raises(DatasetError) as error:
        list(load_dataset(str(path)))
    assert f"{path}:3: " in str(error.value)
    assert message in str(error.value)


def test_invalid_json_and_duplicate_ids_are_errors(tmp_path: Path) -> None:
    broken = write_lines(tmp_path / "broken.jsonl", line(), "{not json")
    with pytest.raises(DatasetError, match=r"broken.jsonl:2: invalid JSON"):
        list(load_dataset(str(broken)))
    twice = write_lines(tmp_path / "twice.jsonl", line(), line())
    with pytest.raises(DatasetError, match=r"twice.jsonl:2: id 'r1' appears twice"):
        list(load_dataset(str(twice)))


def test_specs_join_named_datasets_files_and_folders(datasets_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    write_lines(folder / "a.jsonl", line(id="a1"), line(id="a2"))
    write_lines(folder / "b.jsonl", line(id="b1"))
    spec = f"who_and_when:hand-crafted,{folder}"
    assert count_records(spec, datasets_dir) == 58 + 3
    ids = [r.record_id for r in load_dataset(spec, datasets_dir)]
    assert ids[-3:] == ["a1", "a2", "b1"] and len(ids) == 61
    with pytest.raises(DatasetError, match="no such named dataset, file or folder"):
        count_records(str(tmp_path / "missing.jsonl"))


def test_who_and_when_format_from_another_system_has_no_borrowed_roster(tmp_path: Path) -> None:
    """A τ-bench-like run written in the Who&When format: roles without names, a user who
    answers during the run. It is not Magentic-One, so it gets no Magentic-One roster; the
    user's turns are the user's, tools' outputs are tools'."""
    folder = tmp_path / "tau-retail"
    folder.mkdir()
    history = [
        {"role": "user", "content": "I want to return order #W7."},
        {"role": "assistant", "content": "Let me look it up."},
        {"role": "tool", "content": '{"status": "delivered"}'},
        {"role": "user", "content": "Use my gift card."},
        {"role": "assistant", "content": "Refunded to your credit card."},
    ]
    common = {"question": "Return #W7", "ground_truth": "gift card", "history": history}
    (folder / "1.json").write_text(
        json.dumps(common | {"mistake_agent": "assistant", "mistake_step": "4"})
    )
    (folder / "2.json").write_text(
        json.dumps(common | {"mistake_agent": "user", "mistake_step": "3", "simulated_user": True})
    )
    first, second = load_dataset(str(folder))
    assert first.subset == "tau-retail" and first.record_id == "tau-retail/1"
    assert [s.kind for s in first.trajectory.steps] == [
        StepKind.HUMAN, StepKind.MESSAGE, StepKind.TOOL, StepKind.HUMAN, StepKind.MESSAGE,
    ]  # fmt: skip
    assert first.trajectory.declared_roster == ()
    assert set(second.trajectory.declared_roster) == {"user", "assistant"}


def test_magentic_one_runs_keep_their_team(who_and_when: list[BenchmarkRecord]) -> None:
    hand_crafted = [r for r in who_and_when if r.subset == "hand-crafted"]
    assert all(r.trajectory.declared_roster == MAGENTIC_ONE_ROSTER for r in hand_crafted)
    generated = [r for r in who_and_when if r.subset == "algorithm-generated"]
    assert all(r.trajectory.declared_roster == () for r in generated)


def test_cli_converts_and_checks(datasets_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "pro.jsonl"
    runner = CliRunner()
    converted = runner.invoke(
        dataset_group, ["convert", "who_and_when_pro", "--out", str(out),
                        "--datasets-dir", str(datasets_dir)],
    )  # fmt: skip
    assert converted.exit_code == 0, converted.output
    assert len(out.read_text().splitlines()) == 6
    assert not out.with_name("pro.jsonl.partial").exists()
    checked = runner.invoke(dataset_group, ["check", str(out)])
    assert checked.exit_code == 0, checked.output
    assert "6 records" in checked.output
    assert "error modes: C.3 1, P.1 1, PL.1 1, R.1 2, R.4 1" in checked.output
    bad = write_lines(tmp_path / "bad.jsonl", line(label={"agent": "A", "step": 99}))
    failed = runner.invoke(dataset_group, ["check", str(bad)])
    assert failed.exit_code == 1 and "bad.jsonl:1: field 'label.step'" in failed.output


def test_written_lines_are_one_json_object_each(who_and_when: list[BenchmarkRecord]) -> None:
    buffer = io.StringIO()
    write_records(who_and_when[:3], buffer)
    lines = buffer.getvalue().splitlines()
    assert len(lines) == 3
    assert all(json.loads(text)["format"] == GENERIC_FORMAT for text in lines)
