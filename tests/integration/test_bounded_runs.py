"""Runs are bounded in bytes, not only in spans, on a real sidecar: a run's spans past
`FAULTFINDER_MAX_RUN_BYTES` are stored with their texts cut, its page shows each text up
to a bound and says where the whole is, and over-long run ids and agent names are
shortened at ingest, so a listing of 500 runs stays small."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from faultfinder import conventions as c
from faultfinder.attributors.model import Step, StepKind, Trajectory
from faultfinder.reading.runs import MAX_ID_CHARS
from faultfinder.server.api.dashboard.page_bounds import PAGE_TEXT_CHARS
from faultfinder.server.run_bytes import SHRUNK_VALUE_CHARS
from tests.integration.sidecar import quick_sidecar
from tests.otlp_helpers import protobuf_body, trajectory_spans

PROTOBUF = {"content-type": "application/x-protobuf"}
MIB = 1024 * 1024


def _settled(api: httpx.Client, run_id: str) -> dict[str, object]:
    deadline = time.monotonic() + 60
    while True:
        run: dict[str, object] = api.get(f"/api/runs/{run_id}").json()
        if run["status"] in ("attributed", "complete"):
            return run
        assert time.monotonic() < deadline, run["status"]
        time.sleep(0.3)


def test_a_run_past_its_bytes_keeps_its_steps_with_their_texts_cut(tmp_path: Path) -> None:
    texts = [f"step {i} says " + f"{i} " * (MIB // 4) for i in range(12)]
    steps = tuple(
        Step(index=i, agent=("A", "B")[i % 2], kind=StepKind.MESSAGE, content=text)
        for i, text in enumerate(texts)
    )
    spans = trajectory_spans(
        Trajectory(run_id="big", task="t", steps=steps),
        root_attributes={c.RUN_OUTCOME: "failure"},
    )
    run_id = spans[-1].context.trace_id.to_bytes(16, "big").hex()
    env = {"FAULTFINDER_MAX_RUN_BYTES": str(2 * MIB), "FAULTFINDER_AUDIT": "false"}
    with (
        quick_sidecar(tmp_path, **env) as sidecar,
        httpx.Client(base_url=sidecar.url, timeout=60) as api,
    ):
        for start in (0, 7):
            body = protobuf_body(spans[start : start + 7])
            sent = api.post("/v1/traces", content=body, headers=PROTOBUF)
            assert sent.status_code == 200
        run = _settled(api, run_id)
        page = api.get(f"/ui/runs/{run_id}").text
    assert run["status"] == "attributed"
    stored = [step["content"] for step in run["trajectory"]["steps"]]  # type: ignore[index]
    assert len(stored) == len(texts)
    assert stored[0] == texts[0]  # the run's first bytes are kept whole
    assert all(len(text) < SHRUNK_VALUE_CHARS + 100 for text in stored[4:])
    assert "the run is over its size" in stored[-1]
    # The page shows each text up to its bound and says where the whole text is.
    assert texts[0][: PAGE_TEXT_CHARS + 10] not in page
    assert f"the whole text is at /api/runs/{run_id}?steps_offset=0" in page.replace("&amp;", "&")
    assert len(page) < 12 * (PAGE_TEXT_CHARS + 400) + 300_000


def test_over_long_run_ids_and_agent_names_are_shortened_at_ingest(tmp_path: Path) -> None:
    with (
        quick_sidecar(tmp_path, FAULTFINDER_AUDIT="false") as sidecar,
        httpx.Client(base_url=sidecar.url, timeout=60) as api,
    ):
        for n in range(20):
            run_id = f"run {n} " + "r" * 100_000
            steps = (Step(index=0, agent="a" * 100_000, kind=StepKind.MESSAGE, content="hi"),)
            body = protobuf_body(
                trajectory_spans(Trajectory(run_id=run_id, task="t", steps=steps), run_id=run_id)
            )
            assert api.post("/v1/traces", content=body, headers=PROTOBUF).status_code == 200
        listing = api.get("/api/runs", params={"limit": 500})
        runs = listing.json()["items"]
        one = api.get("/api/runs", params={"limit": 1}).json()["items"][0]
        found = api.get(f"/api/runs/{one['id']}")
    assert len(runs) == 20
    assert len(listing.content) < 200_000
    assert all(len(run["id"]) <= MAX_ID_CHARS for run in runs)
    assert all(len(agent) <= MAX_ID_CHARS for run in runs for agent in run["agents"])
    assert found.status_code == 200
