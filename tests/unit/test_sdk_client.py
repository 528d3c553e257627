"""The query-API clients against `httpx.MockTransport`, answering with the server's own schemas.

Response bodies are built from `faultfinder.server.schemas` models, so these tests
pin the client to what the sidecar really sends.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from faultfinder.attributors.model import (
    Attribution,
    Candidate,
    PredictionSet,
    Step,
    StepKind,
    StepStatus,
    Trajectory,
)
from faultfinder.sdk import (
    APIError,
    AsyncClient,
    AuthError,
    Client,
    NotFoundError,
    ResponseError,
    ServerBusyError,
    TransportError,
    ValidationError,
    WaitTimeoutError,
)
from faultfinder.server import schemas

BASE = "http://sidecar.test"
Handler = Callable[[httpx.Request], httpx.Response]

ATTRIBUTION = Attribution(
    method="first_error",
    agent="PriceLookup",
    step=2,
    reason="guessed a price",
    confidence=0.7,
    candidates=(
        Candidate(step=2, agent="PriceLookup", score=0.9, evidence="guess"),
        Candidate(step=1, agent="PriceLookup", score=0.2),
    ),
    prediction_set=PredictionSet(lo=1, hi=3, alpha=0.1),
)
STARTED = datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)
TRAJECTORY = Trajectory(
    run_id="run-1",
    task="3 notebooks and 2 pens with VAT?",
    ground_truth="19.08 EUR",
    final_answer="18.60 EUR",
    steps=(
        Step(index=0, agent="Orchestrator", content="Plan", start_time=STARTED),
        Step(
            index=1,
            agent="PriceLookup",
            kind=StepKind.TOOL,
            tool_name="catalog.lookup",
            tool_arguments='{"item": "pen"}',
            status=StepStatus.ERROR,
            error="CatalogError: no catalog entry for 'pen'",
            span_id="00f067aa0ba902b7",
        ),
        Step(index=2, agent="PriceLookup", content="pens cost 1.00 EUR"),
    ),
    metadata={"project": "shop", "outcome": "failure"},
)


def summary(run_id: str, status: str = "failed", **fields: Any) -> schemas.RunSummary:
    values: dict[str, Any] = {
        "id": run_id,
        "project": "shop",
        "status": status,
        "agents": ["Orchestrator", "PriceLookup"],
        "n_steps": 3,
        "n_spans": 5,
        **fields,
    }
    return schemas.RunSummary(**values)


def detail(run_id: str = "run-1", status: str = "attributed") -> schemas.RunDetail:
    return schemas.RunDetail(
        **summary(run_id, status, outcome="failure", attributions=[ATTRIBUTION]).model_dump(),
        trajectory=TRAJECTORY.model_copy(update={"run_id": run_id}),
    )


def reply(model: Any, status: int = 200) -> httpx.Response:
    """A JSON answer as the sidecar encodes it."""
    if isinstance(model, list):
        body: Any = [item.model_dump(mode="json") for item in model]
    else:
        body = model.model_dump(mode="json")
    return httpx.Response(status, json=body)


def problem(status: int, title: str, **extra: Any) -> httpx.Response:
    """A Problem Details answer as Litestar writes it (message in `title`)."""
    body = {"status": status, "title": title, "detail": httpx.codes.get_reason_phrase(status)}
    return httpx.Response(
        status, json={**body, **extra}, headers={"content-type": "application/problem+json"}
    )


class Recorder:
    """A MockTransport handler that records requests and answers from a script."""

    def __init__(self, *answers: httpx.Response | Handler) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return answer(request) if callable(answer) else answer

    def client(self, **kwargs: Any) -> Client:
        return Client(BASE, transport=httpx.MockTransport(self), **kwargs)

    def async_client(self, **kwargs: Any) -> AsyncClient:
        return AsyncClient(BASE, transport=httpx.MockTransport(self), **kwargs)

    def body(self, n: int = -1) -> Any:
        return json.loads(self.requests[n].content)


# --- listing and reading runs -------------------------------------------------------------


def test_runs_walks_every_page_with_the_filters_and_the_api_key() -> None:
    pages = Recorder(
        reply(schemas.RunPage(items=[summary("r1"), summary("r2")], next_cursor="c1")),
        reply(schemas.RunPage(items=[summary("r3")], next_cursor="c2")),
        reply(schemas.RunPage(items=[summary("r4")], next_cursor=None)),
    )
    with pages.client(api_key="secret") as client:
        found = list(client.runs(status="failed", project="shop", page_size=2))

    assert [run.id for run in found] == ["r1", "r2", "r3", "r4"]
    assert found[0].agents == ("Orchestrator", "PriceLookup") and found[0].status == "failed"
    cursors = [request.url.params.get("cursor") for request in pages.requests]
    assert cursors == [None, "c1", "c2"]
    for request in pages.requests:
        assert request.url.path == "/api/runs"
        assert request.url.params["status"] == "failed"
        assert request.url.params["project"] == "shop"
        assert request.headers["authorization"] == "Bearer secret"


def test_runs_stops_at_the_limit_without_fetching_more_pages() -> None:
    pages = Recorder(
        reply(schemas.RunPage(items=[summary("r1"), summary("r2")], next_cursor="c1")),
        reply(schemas.RunPage(items=[summary("r3")], next_cursor="c2")),
    )
    with pages.client() as client:
        assert [run.id for run in client.runs(limit=3, page_size=2)] == ["r1", "r2", "r3"]
    assert [request.url.params["limit"] for request in pages.requests] == ["2", "1"]


def test_runs_checks_its_filters_before_any_request() -> None:
    nothing = Recorder(httpx.Response(500))
    with nothing.client() as client:
        with pytest.raises(ValueError, match="status must be one of"):
            client.runs(status="broken")
        with pytest.raises(ValueError, match="page_size"):
            client.runs(page_size=501)
    assert nothing.requests == []


def test_run_reads_the_trajectory_and_attributions_the_server_sends() -> None:
    answer = Recorder(reply(detail("run-1")))
    with answer.client() as client:
        got = client.run("run-1")

    assert (got.id, got.status, got.outcome) == ("run-1", "attributed", "failure")
    assert got.trajectory.task == TRAJECTORY.task
    assert got.trajectory.agents == ("Orchestrator", "PriceLookup")
    assert (got.trajectory.ground_truth, got.trajectory.final_answer) == ("19.08 EUR", "18.60 EUR")
    first, tool, guess = got.trajectory.steps
    assert first.start_time == STARTED
    assert (tool.kind, tool.status, tool.tool_name) == ("tool", "error", "catalog.lookup")
    assert tool.error == "CatalogError: no catalog entry for 'pen'"
    assert (guess.index, guess.content) == (2, "pens cost 1.00 EUR")
    (attribution,) = got.attributions
    assert (attribution.agent, attribution.step, attribution.ok) == ("PriceLookup", 2, True)
    assert [c.step for c in attribution.candidates] == [2, 1]
    assert attribution.prediction_set is not None and attribution.prediction_set.hi == 3
    assert got.trajectory.metadata["outcome"] == "failure"


def test_run_ids_are_escaped_into_one_path_segment() -> None:
    answer = Recorder(reply(detail("who_and_when/algorithm-generated/1")))
    with answer.client() as client:
        client.run("who_and_when/algorithm-generated/1")
        client.attributions("a b?c")
    paths = [request.url.raw_path.decode() for request in answer.requests]
    assert paths == [
        "/api/runs/who_and_when%2Falgorithm-generated%2F1",
        "/api/runs/a%20b%3Fc",
    ]


def test_a_failed_attribution_is_read_as_not_ok() -> None:
    failed = Attribution.failed("all_at_once", "LLM down", llm_calls=2, model="m")
    body = detail().model_copy(update={"attributions": [failed]})
    with Recorder(reply(body)).client() as client:
        (attribution,) = client.attributions("run-1")
    assert (attribution.ok, attribution.agent, attribution.failure_reason) == (
        False,
        None,
        "LLM down",
    )
    assert (attribution.llm_calls, attribution.model) == (2, "m")


def test_an_attribution_without_a_confidence_is_read_as_none_not_zero() -> None:
    unsure = ATTRIBUTION.model_copy(update={"method": "all_at_once", "confidence": None})
    body = detail().model_copy(update={"attributions": [unsure, ATTRIBUTION]})
    with Recorder(reply(body)).client() as client:
        without, sure = client.attributions("run-1")
    assert (without.confidence, sure.confidence) == (None, 0.7)


# --- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "error", "words"),
    [
        (problem(404, "no run 'r9'"), NotFoundError, "no run 'r9'"),
        (problem(401, "a valid API key is required"), AuthError, "API key"),
        (problem(403, "forbidden"), AuthError, "forbidden"),
        (
            problem(400, "Validation failed", extra=[{"key": "step", "message": "must be >= 0"}]),
            ValidationError,
            "step: must be >= 0",
        ),
        (problem(503, "ingest is saturated"), ServerBusyError, "saturated"),
        (problem(500, "database is gone"), APIError, "database is gone"),
        (httpx.Response(502, text="bad gateway from the proxy"), APIError, "proxy"),
    ],
)
def test_error_answers_raise_the_matching_error_with_the_servers_words(
    answer: httpx.Response, error: type[APIError], words: str
) -> None:
    with Recorder(answer).client() as client, pytest.raises(error) as raised:
        client.run("r9")
    assert raised.value.status == answer.status_code
    assert words in raised.value.detail
    assert "/api/runs/r9" in str(raised.value)


def test_busy_answers_say_when_to_retry() -> None:
    busy = problem(503, "ingest is saturated")
    busy.headers["retry-after"] = "2"
    with Recorder(busy).client() as client, pytest.raises(ServerBusyError) as raised:
        client.stats()
    assert raised.value.retry_after == 2.0


def test_an_unreachable_sidecar_is_a_transport_error() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with Recorder(refuse).client() as client, pytest.raises(TransportError, match="refused"):
        client.run("r1")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"items": [{"id": "r1", "project": "p", "agents": []}]}, r"items\[0\]\.status: missing"),
        ({"items": [{"id": 7, "project": "p", "status": "failed"}]}, r"items\[0\]\.id: expected"),
        ({"items": "r1"}, r"runs page\.items: expected a list"),
        (["r1"], "expected a JSON object"),
    ],
)
def test_malformed_answers_name_the_field(body: Any, field: str) -> None:
    answer = Recorder(httpx.Response(200, json=body))
    with answer.client() as client, pytest.raises(ResponseError, match=field):
        list(client.runs())


def test_an_answer_that_is_not_json_is_a_response_error() -> None:
    answer = Recorder(httpx.Response(200, text="<html>"))
    with answer.client() as client, pytest.raises(ResponseError, match="not JSON"):
        client.run("r1")


# --- waiting ---------------------------------------------------------------------------------


def test_wait_for_run_waits_through_unknown_and_running_until_failed() -> None:
    script = Recorder(
        problem(404, "no run 'r1'"),
        reply(detail("r1", status="running")),
        reply(detail("r1", status="failed")),
    )
    with script.client() as client:
        got = client.wait_for_run("r1", {"failed", "attributed"}, timeout=30, poll_interval=0)
    assert got.status == "failed"
    assert len(script.requests) == 3


def test_wait_for_run_gives_up_with_the_last_status_seen() -> None:
    running = Recorder(reply(detail("r1", status="running")))
    with running.client() as client, pytest.raises(WaitTimeoutError, match="'running'") as raised:
        client.wait_for_run("r1", "failed", timeout=0.05, poll_interval=0.01)
    assert raised.value.last_status == "running"
    assert isinstance(raised.value, TimeoutError)
    with Recorder(httpx.Response(500)).client() as client, pytest.raises(ValueError, match="faild"):
        client.wait_for_run("r1", "faild")


# --- writing: outcome, attribution jobs, labels, stats --------------------------------------


def test_post_outcome_sends_the_verdict_and_returns_the_run() -> None:
    answer = Recorder(reply(summary("r1", status="failed", outcome="failure")))
    with answer.client() as client:
        got = client.post_outcome("r1", "failure", reason="wrong total", ground_truth="19.08 EUR")
        with pytest.raises(ValueError, match="outcome"):
            client.post_outcome("r1", "failed")
    assert (got.status, got.outcome) == ("failed", "failure")
    assert len(answer.requests) == 1
    request = answer.requests[0]
    assert (request.method, request.url.path) == ("POST", "/api/runs/r1/outcome")
    assert answer.body() == {
        "outcome": "failure",
        "reason": "wrong total",
        "ground_truth": "19.08 EUR",
    }


def test_reattribute_queues_a_job_that_can_be_waited_for() -> None:
    queued = schemas.JobOut(
        id=7, run_id="r1", attributor="all_at_once", status="queued", attempts=0, max_attempts=3
    )
    done = queued.model_copy(update={"status": "done", "attempts": 1, "attribution": ATTRIBUTION})
    script = Recorder(reply(queued, status=202), reply(queued), reply(done))
    with script.client() as client:
        job = client.reattribute("r1", "all_at_once")
        finished = client.wait_for_job(job.id, poll_interval=0)
    assert (job.id, job.status, job.finished) == (7, "queued", False)
    assert script.body(0) == {"attributor": "all_at_once"}
    assert script.requests[0].url.path == "/api/runs/r1/attributions"
    assert [request.url.path for request in script.requests[1:]] == ["/api/jobs/7"] * 2
    assert finished.finished and finished.attribution is not None
    assert finished.attribution.agent == "PriceLookup"


def test_label_sends_the_true_agent_and_step() -> None:
    label = schemas.LabelOut(
        id=3, run_id="r1", agent="PriceLookup", step=2, reason="guessed", created_at=1.7e9
    )
    script = Recorder(reply(label, status=201), reply([label]))
    with script.client() as client:
        got = client.label("r1", "PriceLookup", 2, "guessed")
        listed = client.labels("r1")
        with pytest.raises(ValueError, match="0-based"):
            client.label("r1", "PriceLookup", -1)
    assert script.body(0) == {"agent": "PriceLookup", "step": 2, "reason": "guessed"}
    assert (got.id, got.agent, got.step, got.created_at) == (3, "PriceLookup", 2, 1.7e9)
    assert listed == (got,)
    assert len(script.requests) == 2


def test_stats_reads_blame_and_accuracy() -> None:
    stats = schemas.Stats(
        runs_by_status={"failed": 2, "attributed": 5},
        jobs_by_status={"done": 5},
        blame_by_agent={"PriceLookup": 4, "Calculator": 1},
        blame_over_time=[schemas.BlameBucket(start=1.7e9, counts={"PriceLookup": 4})],
        bucket_seconds=3600,
        accuracy=[
            schemas.AttributorAccuracy(
                method="first_error", labelled_runs=4, agent_accuracy=0.75, step_accuracy=None
            )
        ],
    )
    script = Recorder(reply(stats))
    with script.client() as client:
        got = client.stats(window=86400, bucket=600)
    assert got.blame_by_agent == {"PriceLookup": 4, "Calculator": 1}
    assert got.blame_over_time[0].counts == {"PriceLookup": 4}
    assert got.accuracy[0].agent_accuracy == 0.75 and got.accuracy[0].step_accuracy is None
    assert dict(script.requests[0].url.params) == {"window": "86400", "bucket": "600"}


def test_the_environment_names_the_sidecar_and_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAULTFINDER_ENDPOINT", "http://elsewhere.test:9000/")
    monkeypatch.setenv("FAULTFINDER_API_KEY", "from-env")
    script = Recorder(reply(schemas.RunPage(items=[])))
    with Client(transport=httpx.MockTransport(script)) as client:
        assert list(client.runs()) == []
    request = script.requests[0]
    assert str(request.url).startswith("http://elsewhere.test:9000/api/runs")
    assert request.headers["authorization"] == "Bearer from-env"
    with pytest.raises(ValueError, match="FAULTFINDER_ENDPOINT"):
        monkeypatch.setenv("FAULTFINDER_ENDPOINT", "elsewhere.test:9000")
        Client()


# --- async -----------------------------------------------------------------------------------


async def test_the_async_client_pages_waits_and_posts_like_the_sync_one() -> None:
    script = Recorder(
        reply(schemas.RunPage(items=[summary("r1")], next_cursor="c1")),
        reply(schemas.RunPage(items=[summary("r2")], next_cursor=None)),
        problem(404, "no run 'r2'"),
        reply(detail("r2", status="failed")),
        reply(summary("r2", status="failed", outcome="failure")),
        problem(401, "a valid API key is required"),
    )
    async with script.async_client(api_key="k") as client:
        ids = [run.id async for run in client.runs(page_size=1)]
        waited = await client.wait_for_run("r2", "failed", timeout=30, poll_interval=0)
        posted = await client.post_outcome("r2", "failure", final_answer="18.60 EUR")
        with pytest.raises(AuthError, match="API key"):
            await client.stats()
    assert ids == ["r1", "r2"]
    assert waited.trajectory.run_id == "r2"
    assert posted.outcome == "failure"
    assert script.body(4) == {"outcome": "failure", "final_answer": "18.60 EUR"}
    assert all(request.headers["authorization"] == "Bearer k" for request in script.requests)
