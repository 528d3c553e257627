"""Natural failures end to end (`data/corpus/natural.sh`): the pydantic-ai team of
`test_inject.py`, whose scripted model misreads the lookup's figure by itself (the
Researcher of `test_verify.py`), is run by `faultfinder inject run`; the failed run's
model calls are kept, `faultfinder verify --search earliest` finds that correcting the
Researcher's report makes the run succeed, and the run is gathered into a labelled
file of the generic format with that step as its counterfactual label."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from faultfinder.datasets import load_dataset
from faultfinder.injection.exchanges import Recording
from tests.integration.sidecar import FAULTFINDER, ROOT
from tests.integration.test_inject import PROGRAM, scripted_model
from tests.integration.test_verify import MISREAD, TASK, flawed_reply


def _natural(tmp_path: Path, upstream: str) -> subprocess.CompletedProcess[str]:
    environment = {
        **os.environ,
        "FRAMEWORKS": "pydantic-ai",
        "TASKS": str(tmp_path / "tasks.jsonl"),
        "NATURAL": str(tmp_path / "natural"),
        "PROGRAM": f"{sys.executable} {tmp_path / 'team.py'}",
        "UPSTREAM": upstream,
        "FAULTFINDER": str(FAULTFINDER),
        "TIMEOUT": "120",
    }
    return subprocess.run(
        ["bash", str(ROOT / "data/corpus/natural.sh")],
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_a_run_that_fails_by_itself_is_kept_verified_and_labelled(tmp_path: Path) -> None:
    (tmp_path / "team.py").write_text(PROGRAM)
    (tmp_path / "tasks.jsonl").write_text(
        json.dumps({"id": "oslo", "task": TASK, "answer": "709037"}) + "\n"
    )
    with scripted_model(flawed_reply) as upstream:
        done = _natural(tmp_path, upstream)
        assert done.returncode == 0, done.stderr[-5000:]
        # Run again: the task was run and its search finished; nothing is done twice.
        again = _natural(tmp_path, upstream)
        assert again.returncode == 0, again.stderr[-3000:]
    assert "verifying pydantic-ai oslo (wrong" in done.stderr
    assert "verifying" not in again.stderr

    out = tmp_path / "natural" / "runs" / "pydantic-ai"
    recording = Recording.load(out / "natural-recordings" / "oslo.json")
    assert recording.info["outcome"] == "wrong"
    assert MISREAD in recording.info["final_answer"]
    assert not (out / "recordings" / "oslo.json").exists()

    # The label: the Researcher's report of a figure the lookup did not return, the
    # earliest step whose correction made the run succeed.
    (record,) = load_dataset(str(tmp_path / "natural" / "pydantic-ai.jsonl"))
    step = record.trajectory.steps[record.gold.step]
    assert record.gold.source == "counterfactual"
    assert record.gold.agent == "Researcher" == step.agent
    assert MISREAD in step.content and step.kind.value != "tool"
    assert record.trajectory.ground_truth == "709037"
    assert MISREAD in (record.trajectory.final_answer or "")
    assert record.subset == "pydantic-ai"
    assert "709,037" in record.details["correction"]
    label = json.loads((out / "verify" / "oslo" / "label.json").read_text())
    assert (label["agent"], label["step"]) == (record.gold.agent, record.gold.step)
    # No earlier step is the Researcher's misreport: each tried before it left the run failed.
    earlier = record.trajectory.steps[: record.gold.step]
    assert not any(MISREAD in s.content and s.agent == "Researcher" for s in earlier)

    yields = json.loads((tmp_path / "natural" / "runs" / "pydantic-ai.yields.json").read_text())
    assert (yields["runs"], yields["failed"], yields["labelled"], yields["kept"]) == (1, 1, 1, 1)
    assert yields["nothing_flips"] == yields["diverged"] == yields["pending"] == 0
    tried = yields["flips_per_candidate_position"]
    last = str(len(tried) - 1)
    assert tried[last] == {"tried": 1, "flipped": 1}
    assert all(tried[str(p)]["flipped"] == 0 for p in range(len(tried) - 1))
    assert yields["label_candidate_positions"] == {last: 1}
    assert yields["label_agents"] == {"Researcher": 1}
    assert yields["steps_per_run"]["max"] == len(record.trajectory.steps)
    # The Researcher's report is not the last model-made step: the Coordinator answers after it.
    assert yields["labels_at_last_model_step"] == 0
    assert yields["model_steps_per_run"]["max"] == len(tried) + 1
