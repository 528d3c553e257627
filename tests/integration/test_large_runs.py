"""A long run stays cheap to look at: the API returns a window of its steps on request,
and the run page shows one page of steps, opening on the page of the blamed step."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from faultfinder.attributors.model import Step, StepKind, Trajectory
from tests.integration.sidecar import running_sidecar
from tests.otlp_helpers import protobuf_body, trajectory_spans

STEPS = 600
WRONG = 437
"""The step that states a number the tool result before it contradicts."""


def _long_run() -> Trajectory:
    steps = [Step(index=0, agent="user", kind=StepKind.HUMAN, content="Count the widgets.")]
    for index in range(1, STEPS):
        if index == WRONG - 1:
            steps.append(
                Step(
                    index=index,
                    agent="Counter",
                    kind=StepKind.TOOL,
                    content="count_widgets() -> 1,204",
                    tool_name="count_widgets",
                    tool_result="1204",
                )
            )
        elif index == WRONG:
            steps.append(
                Step(
                    index=index,
                    agent="Counter",
                    kind=StepKind.MESSAGE,
                    content="The tool says there are 9,999 widgets.",
                )
            )
        else:
            steps.append(
                Step(
                    index=index,
                    agent=("Planner", "Counter")[index % 2],
                    kind=StepKind.MESSAGE,
                    content=f"Checking batch {index}.",
                )
            )
    return Trajectory(
        run_id="long",
        task="Count the widgets.",
        steps=tuple(steps),
        ground_truth="1204",
        final_answer="9999",
    )


def test_a_long_runs_steps_come_in_windows_and_pages(
    sqlite_database_url: str, tmp_path: Path
) -> None:
    env = {"FAULTFINDER_QUIET_PERIOD": "0.3", "FAULTFINDER_SWEEP_INTERVAL": "0.2"}
    with (
        running_sidecar(sqlite_database_url, tmp_path, **env) as sidecar,
        httpx.Client(base_url=sidecar.url, timeout=30) as api,
    ):
        body = protobuf_body(trajectory_spans(_long_run(), run_id="long"))
        assert (
            api.post(
                "/v1/traces", content=body, headers={"content-type": "application/x-protobuf"}
            ).status_code
            == 200
        )
        assert api.post("/api/runs/long/outcome", json={"outcome": "failure"}).status_code == 200
        deadline = time.monotonic() + 60
        while api.get("/api/runs/long", params={"steps_limit": 1}).json()["status"] != "attributed":
            assert time.monotonic() < deadline, "not attributed"
            time.sleep(0.3)

        window = api.get("/api/runs/long", params={"steps_offset": 590, "steps_limit": 20}).json()
        assert "n_steps" in window, window
        assert window["n_steps"] == STEPS and window["steps_offset"] == 590
        assert [s["index"] for s in window["trajectory"]["steps"]] == list(range(590, STEPS))
        assert len(api.get("/api/runs/long").json()["trajectory"]["steps"]) == STEPS

        run = api.get("/api/runs/long", params={"steps_limit": 1}).json()
        blamed = run["attributions"][0]["step"]
        # Every acting step is a candidate of first_error; the strongest 50 are kept.
        kept = {a["method"]: len(a["candidates"]) for a in run["attributions"]}
        assert kept["first_error"] == 50 and max(kept.values()) <= 50, kept
        page = api.get("/ui/runs/long").text
        # The page opens on the blamed step's page of 250 steps, with links either way.
        first = blamed - blamed % 250
        assert f'id="step-{blamed}"' in page
        assert page.count('class="step ') == min(250, STEPS - first)
        assert f"Steps {first}–{min(first + 250, STEPS) - 1} of {STEPS}" in page
        other = api.get("/ui/runs/long", params={"steps_from": 0 if first else 250}).text
        assert f'id="step-{blamed}"' not in other
        # From another page, the verdict links to the blamed step's page.
        assert f'href="?steps_from={first}#step-{blamed}"' in other
        assert api.get("/ui/runs/long", params={"steps_from": -1}).status_code == 400
