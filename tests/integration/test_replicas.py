"""Scale-out: two sidecar replicas and two workers on one PostgreSQL.

Spans of each trace are split across the replicas (as a load balancer without trace-id
affinity would, the worst case) and sent concurrently; every run must still come out as
one complete trajectory with exactly one attribution per attributor.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan

from faultfinder import conventions as c
from faultfinder.attributors.base import AttributeOptions, get_attributor
from faultfinder.attributors.model import Step, StepKind, Trajectory
from tests.integration.sidecar import running_sidecar, running_worker
from tests.otlp_helpers import protobuf_body, trajectory_spans

PROTOBUF = {"content-type": "application/x-protobuf"}
RUNS = 16
ENV = {
    # Longer than it takes to send one run, so no run settles with spans still on the way.
    "FAULTFINDER_QUIET_PERIOD": "2",
    "FAULTFINDER_SWEEP_INTERVAL": "0.2",
    "FAULTFINDER_ATTRIBUTORS": "first_error",
    "FAULTFINDER_GRPC_ENABLED": "false",
}
AGENTS = ("Planner", "Searcher", "Coder", "Reviewer")


def failing_trajectory(number: int, rng: random.Random) -> Trajectory:
    """A run whose error shows at a random step (so runs differ in who and when)."""
    length = rng.randint(4, 9)
    broken = rng.randrange(1, length)
    steps = []
    for index in range(length):
        agent = AGENTS[(index + number) % len(AGENTS)]
        if index == broken:
            text = f"Traceback (most recent call last): ValueError in run {number}"
            steps.append(Step(index=index, agent=agent, kind=StepKind.TOOL, content=text))
        else:
            text = f"{agent} works on run {number}, step {index}."
            steps.append(Step(index=index, agent=agent, content=text))
    return Trajectory(run_id=f"replica-run-{number}", task=f"task {number}", steps=tuple(steps))


def expected_attribution(trajectory: Trajectory) -> tuple[str | None, int | None]:
    attribution = asyncio.run(
        get_attributor("first_error").attribute(trajectory, AttributeOptions())
    )
    return attribution.agent, attribution.step


def wait_for(check: Any, *, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.25)
    return result


@pytest.mark.postgres
def test_spans_split_across_two_replicas_make_one_run_and_one_attribution(
    postgres_database_url: str, tmp_path: Path
) -> None:
    rng = random.Random(5)
    trajectories = [failing_trajectory(n, rng) for n in range(RUNS)]
    traces: list[tuple[ReadableSpan, ...]] = [
        trajectory_spans(t, root_attributes={c.RUN_OUTCOME: "failure"}) for t in trajectories
    ]
    with (
        running_sidecar(postgres_database_url, tmp_path, FAULTFINDER_WORKERS="0", **ENV) as one,
        running_sidecar(postgres_database_url, tmp_path, FAULTFINDER_WORKERS="0", **ENV) as two,
        running_worker(postgres_database_url, tmp_path, FAULTFINDER_WORKERS="1", **ENV),
        running_worker(postgres_database_url, tmp_path, FAULTFINDER_WORKERS="1", **ENV),
        httpx.Client(timeout=30) as client,
        ThreadPoolExecutor(8) as pool,
    ):
        replicas = [one.url, two.url]

        def send(job: tuple[str, ReadableSpan]) -> httpx.Response:
            url, span = job
            return client.post(f"{url}/v1/traces", content=protobuf_body([span]), headers=PROTOBUF)

        for spans in traces:
            # Alternate replicas span by span, in a shuffled order, all at once.
            jobs = [(replicas[n % 2], span) for n, span in enumerate(spans)]
            rng.shuffle(jobs)
            answers = list(pool.map(send, jobs))
            assert {answer.status_code for answer in answers} == {200}
        for url in replicas:
            stats = client.get(f"{url}/api/stats/ingest").json()
            assert stats["spans_acknowledged"] > 0  # both replicas took part

        def all_attributed() -> bool:
            runs = client.get(f"{one.url}/api/stats").json()["runs_by_status"]
            return bool(runs.get("attributed", 0) == RUNS)

        wait_for(all_attributed, timeout=90, what="every run attributed")
        listed = client.get(f"{two.url}/api/runs", params={"limit": 100}).json()["items"]
        assert len(listed) == RUNS  # one run per trace, not one per replica
        for trajectory, spans in zip(trajectories, traces, strict=True):
            run_id = f"{spans[0].context.trace_id:032x}"
            run = client.get(f"{replicas[rng.randrange(2)]}/api/runs/{run_id}").json()
            assert run["n_spans"] == len(spans)
            got = [(s["index"], s["agent"], s["content"]) for s in run["trajectory"]["steps"]]
            assert got == [(s.index, s.agent, s.content) for s in trajectory.steps]
            (attribution,) = run["attributions"]  # exactly one, not one per replica
            assert attribution["method"] == "first_error" and attribution["status"] == "ok"
            assert (attribution["agent"], attribution["step"]) == expected_attribution(trajectory)
            jobs = client.get(f"{one.url}/api/runs/{run_id}/jobs").json()
            assert Counter(job["status"] for job in jobs) == {"done": 1}
        # The replicas attributed nothing themselves (the workers did), yet each one's
        # /metrics counts every run's blame, on the agent the worker blamed.
        expected = Counter(expected_attribution(t)[0] for t in trajectories)
        for url in replicas:
            blamed: Counter[str] = Counter()
            for line in client.get(f"{url}/metrics").text.splitlines():
                if line.startswith("faultfinder_blame_total{"):
                    agent = line.split('agent="', 1)[1].split('"', 1)[0]
                    blamed[agent] += int(float(line.rsplit(" ", 1)[1]))
            assert blamed == expected
