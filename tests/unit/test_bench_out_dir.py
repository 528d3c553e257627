"""Where `bench run` writes when no --out is given: one folder under ./bench-out."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from faultfinder.cli import main


@pytest.mark.parametrize("spec", ["absolute", "relative"])
def test_a_dataset_path_gets_one_folder_under_bench_out(
    spec: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    dataset = data / "team runs.jsonl"
    dataset.write_text(
        '{"format": "faultfinder.labelled-trajectory/1", "id": "r1", "task": "t",'
        ' "steps": [{"role": "agent", "agent": "a", "content": "x"}],'
        ' "label": {"agent": "a", "step": 0}}\n',
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    given = str(dataset) if spec == "absolute" else "data/team runs.jsonl"
    result = CliRunner().invoke(
        main, ["bench", "run", "--dataset", given, "--attributor", "first_error", "--json"]
    )
    assert result.exit_code == 0, result.output
    written = [p for p in (tmp_path / "bench-out").iterdir() if p.is_dir()]
    assert len(written) == 1
    assert (written[0] / "summary.json").is_file()
    assert "/" not in written[0].name and " " not in written[0].name
    assert not any(p.name.endswith("Z") for p in data.iterdir())  # nothing beside the data
