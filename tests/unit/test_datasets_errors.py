"""Dataset loaders refuse broken copies clearly: a missing folder or file, invalid JSON,
a missing or ill-typed field, a mistake step beyond the history, each named."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from faultfinder.datasets import (
    BenchmarkRecord,
    DatasetError,
    count_records,
    load_dataset,
    load_who_and_when_pro_record,
    load_who_and_when_record,
)
from tests.unit.dataset_files import (
    WHO_AND_WHEN,
    raw,
    write_json,
)


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
