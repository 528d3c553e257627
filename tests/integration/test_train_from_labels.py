"""The labelling loop on real sidecars: a team's runs arrive as OTLP from the SDK, people
label the culprit, `faultfinder train --from-database` learns from those labels, and a
sidecar started with FAULTFINDER_LEARNED_MODEL blames new runs the way the labels did.

The team here has a habit the packaged model (trained on Who&When) has never seen: its
decisive mistake is the Reviewer's one short approval late in the run, which shows no
error signal at all (the packaged model blames it in none of the new runs; it leans to
the opening plan). Only a model trained on this team's labels can pick that up.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import httpx
import pytest

from faultfinder.attributors.learned import StepModel
from faultfinder.attributors.learned.step_model import default_model
from faultfinder.sdk import Client
from faultfinder.server.db.engine import create_engine
from faultfinder.server.store import LabelStore
from tests.integration.sidecar import FAULTFINDER, ROOT, Sidecar, running_sidecar

TRAINING_RUNS = 30
NEW_RUNS = 10
DONE = {"failed", "attributed"}

PROGRAM = textwrap.dedent(
    """
    import random, sys
    from faultfinder.sdk import configure, message, run, shutdown

    first, count = int(sys.argv[1]), int(sys.argv[2])
    configure(service_name="review-team", project="labelled")
    for number in range(first, first + count):
        rng = random.Random(number)
        length = rng.randint(8, 11)
        culprit = rng.randint(length - 4, length - 2)
        cast = ["Planner", "Researcher", "Coder"]
        with run(task=f"Summarise report {number} in three sentences.") as r:
            for index in range(length):
                # Points are named by letter and details are not numbered: a figure no
                # earlier step shows is evidence of its own, which this team's habit is not.
                point = chr(ord("A") + index)
                if index == culprit:
                    message("Reviewer", f"Approved: point {point} of the report can stay.")
                else:
                    speaker = cast[index % 3]
                    details = " ".join("one more detail." for _ in range(rng.randint(5, 30)))
                    message(speaker, f"{speaker} notes point {point} of the report: {details}")
            r.fail("the summary lost the report's conclusion", final_answer="a summary")
        print(r.run_id)
    shutdown()
    """
)


def send_runs(sidecar: Sidecar, first: int, count: int, tmp_path: Path) -> list[str]:
    """Run the team's program against the sidecar; the run ids it printed."""
    script = tmp_path / "team.py"
    script.write_text(PROGRAM)
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FAULT"))}
    environment.update(FAULTFINDER_ENDPOINT=sidecar.url, PYTHONPATH=str(ROOT))
    result = subprocess.run(
        [sys.executable, str(script), str(first), str(count)],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"{result.stderr}\n--- sidecar log ---\n{sidecar.log()}"
    run_ids = result.stdout.split()
    assert len(run_ids) == count
    return run_ids


def reviewer_step(client: Client, run_id: str) -> int:
    trajectory = client.wait_for_run(run_id, DONE, timeout=60, poll_interval=0.1).trajectory
    (step,) = [s.index for s in trajectory.steps if s.agent == "Reviewer"]
    return step


async def stale_label(url: str, run_id: str) -> None:
    engine = create_engine(url)
    try:
        await LabelStore(engine).add(
            run_id, agent="Reviewer", step=500, reason="a typo in the step number", author=None
        )
    finally:
        await engine.dispose()


def learned_answers(sidecar: Sidecar, trajectories: list[dict[str, object]]) -> list[dict]:  # type: ignore[type-arg]
    answers = []
    for trajectory in trajectories:
        response = httpx.post(
            f"{sidecar.url}/api/attribute",
            json={"trajectory": trajectory, "attributor": "learned"},
            timeout=60,
        )
        assert response.status_code == 200, response.text
        answers.append(response.json()["attribution"])
    return answers


def test_a_model_trained_on_the_sidecars_labels_blames_as_the_labels_did(
    tmp_path: Path, database_url: str
) -> None:
    url = database_url  # SQLite and PostgreSQL
    with running_sidecar(
        url, tmp_path, FAULTFINDER_QUIET_PERIOD="0.3", FAULTFINDER_SWEEP_INTERVAL="0.1"
    ) as sidecar:
        labelled = send_runs(sidecar, 0, TRAINING_RUNS, tmp_path)
        new = send_runs(sidecar, 1000, NEW_RUNS, tmp_path)
        with Client(sidecar.url) as client:
            for run_id in labelled:
                client.label(run_id, "Reviewer", reviewer_step(client, run_id), "lost the point")
            gold = {run_id: reviewer_step(client, run_id) for run_id in new}
            trajectories = [
                httpx.get(f"{sidecar.url}/api/runs/{run_id}").json()["trajectory"] for run_id in new
            ]
        packaged = learned_answers(sidecar, trajectories)

    # A label the API would refuse today (a step past the run's end), as an older sidecar
    # or a hand-edited database may hold: training must skip it and say so.
    anyio.run(stale_label, url, new[0])
    model_path = tmp_path / "team-model.json"
    trained = subprocess.run(
        [str(FAULTFINDER), "train", "--dataset", "none", "--from-database", url,
         "--out", str(model_path)],
        capture_output=True, text=True, timeout=600, check=False, cwd=ROOT,
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr
    summary = json.loads(trained.stdout)
    assert summary["records"] == TRAINING_RUNS
    assert summary["dataset"] == f"database ({TRAINING_RUNS} labelled runs)"
    (skipped,) = summary["skipped"]
    assert new[0] in skipped and "step 500" in skipped
    model = StepModel.load(model_path)
    assert model.training["records"] == TRAINING_RUNS and model.auditor is not None

    # Before serving it: how well does a model trained on these labels do on labelled
    # runs it did not see? (held-out folds of the database's runs alone)
    curve = subprocess.run(
        [str(FAULTFINDER), "bench", "learning-curve", "--dataset", "none", "--from-database",
         url, "--folds", "3", "--cv-seeds", "1", "--shares", "1", "--json", "--no-progress",
         "--out", str(tmp_path / "curve")],
        capture_output=True, text=True, timeout=600, check=False, cwd=ROOT,
    )  # fmt: skip
    assert curve.returncode == 0, curve.stderr
    (point,) = json.loads(curve.stdout)["shares"]
    assert point["train_runs"] == pytest.approx(TRAINING_RUNS * 2 / 3, abs=1)
    assert point["held_out"]["live"]["step"]["mean"] >= 0.8

    serving = tmp_path / "serving"
    serving.mkdir()
    with running_sidecar(
        f"sqlite+aiosqlite:///{serving / 'faultfinder.db'}",
        serving,
        FAULTFINDER_LEARNED_MODEL=str(model_path),
    ) as sidecar:
        answers = learned_answers(sidecar, trajectories)

    hits = sum(
        a["step"] == gold[r] and a["agent"] == "Reviewer" for a, r in zip(answers, new, strict=True)
    )
    packaged_hits = sum(a["step"] == gold[r] for a, r in zip(packaged, new, strict=True))
    assert all(a["details"]["model"]["dataset"] == summary["dataset"] for a in answers)
    shipped = default_model().training["dataset"]
    assert all(a["details"]["model"]["dataset"] == shipped for a in packaged)
    print(f"trained model: {hits}/{NEW_RUNS} right, packaged model: {packaged_hits}/{NEW_RUNS}")
    assert hits >= NEW_RUNS - 1, (hits, packaged_hits)
    assert packaged_hits < hits


def test_a_model_file_that_cannot_be_read_stops_start_up_naming_the_setting(
    tmp_path: Path,
) -> None:
    broken = tmp_path / "model.json"
    broken.write_text('{"features": ["position"], "scorer": {"type": "linear"}}')
    environment = {**os.environ, "FAULTFINDER_LEARNED_MODEL": str(broken)}
    result = subprocess.run(
        [str(FAULTFINDER), "serve", "--database-url", f"sqlite+aiosqlite:///{tmp_path}/x.db"],
        env=environment, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert "learned_model" in result.stderr and "FAULTFINDER_LEARNED_MODEL" in result.stderr
    assert str(broken) in result.stderr


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        (["--dataset", "none"], "--dataset"),
        (["--dataset", "none", "--from-database", "mysql://x"], "--from-database"),
        (["--from-database", "sqlite+aiosqlite:///{tmp}/absent.db"], "--from-database"),
    ],
)
def test_train_refuses_what_it_cannot_train_on(
    arguments: list[str], named: str, tmp_path: Path
) -> None:
    arguments = [argument.replace("{tmp}", str(tmp_path)) for argument in arguments]
    result = subprocess.run(
        [str(FAULTFINDER), "train", *arguments, "--out", str(tmp_path / "m.json")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert named in result.stderr
    assert not (tmp_path / "m.json").exists()
    assert not (tmp_path / "absent.db").exists()  # reading a database never creates one


def test_train_on_a_database_that_is_not_faultfinders_says_so(tmp_path: Path) -> None:
    empty = tmp_path / "other.db"
    sqlite3.connect(empty).execute("create table notes (text)").connection.close()
    result = subprocess.run(
        [str(FAULTFINDER), "train", "--dataset", "none", "--from-database",
         f"sqlite+aiosqlite:///{empty}", "--out", str(tmp_path / "m.json")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert "faultfinder db upgrade" in result.stderr
    assert not (tmp_path / "m.json").exists()
