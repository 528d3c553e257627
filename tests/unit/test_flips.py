"""`faultfinder inject flip-rate`: how many kept injected failures correcting their labelled
step made succeed, from the files `inject run` and `faultfinder verify` leave behind."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from faultfinder.injection.exchanges import Recording
from faultfinder.injection.flips import flip_rate, flips_command


def _failure(out: Path, key: str, mode: str, step: int, results: dict[int, str] | None) -> None:
    # Saved under the key made a file name (`t1:0:A.1` → `t1_0_A.1`), as `inject run` does.
    name = key.replace(":", "_")
    Recording(info={"task_id": key.split(":")[0], "label_step": step}).save(
        out / "injected-recordings" / f"{name}.json"
    )
    with (out / "attempts.jsonl").open("a") as handle:
        line = {"key": key, "mode": mode, "injector": f"x-{mode}", "outcome": "kept"}
        handle.write(json.dumps(line) + "\n")
    if results is not None:
        verify = out / "verify" / name
        verify.mkdir(parents=True)
        candidates = [{"step": s, "result": r} for s, r in results.items()]
        (verify / "verification.json").write_text(json.dumps({"candidates": candidates}))


def test_the_rate_counts_the_labelled_step_of_each_failure_replayed_to_the_end(
    tmp_path: Path,
) -> None:
    (tmp_path / "injected-recordings").mkdir()
    _failure(tmp_path, "t1:0:A.1", "A.1", 2, {2: "flipped"})
    _failure(tmp_path, "t2:1:A.1", "A.1", 3, {3: "still_failed"})
    # Another step flipping does not count: the label's step is the one corrected.
    _failure(tmp_path, "t3:1:R.1", "R.1", 4, {1: "flipped", 4: "still_failed"})
    _failure(tmp_path, "t4:2:R.1", "R.1", 1, {1: "diverged"})
    _failure(tmp_path, "t5:0:R.3", "R.3", 0, None)
    found = flip_rate(tmp_path)
    assert (found["kept_failures"], found["tested"], found["flipped"]) == (5, 3, 1)
    assert (found["diverged"], found["pending"]) == (1, 1)
    assert found["flip_rate"] == 0.333
    assert found["by_mode"]["A.1"]["flip_rate"] == 0.5
    assert found["by_mode"]["R.1"] == {"still_failed": 1, "diverged": 1, "tested": 1,
                                       "flip_rate": 0.0}  # fmt: skip
    assert found["by_mode"]["R.3"]["flip_rate"] is None

    shown = CliRunner().invoke(flips_command, ["--out", str(tmp_path)])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["flipped"] == 1
    assert "5 kept failures, 3 replayed to the end, 1 flipped" in shown.stderr
