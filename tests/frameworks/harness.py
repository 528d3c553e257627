"""What every conformance module shares: the sidecar, the OTLP pipeline into it, finding
the one run an invocation made, and the checks of what the sidecar understood.

A conformance module drives a real agent framework, traced by its own instrumentation
package, through the standard OTLP/HTTP exporter into a real `faultfinder serve` (the main
environment's; the framework environment holds no faultfinder code), with the agents'
model served by `ScriptedOpenAI`. It reads the result the way a user does: over the HTTP
API.

The scenarios' data are in `scenarios`, the checks in `checks`; this module re-exports
both, so a conformance module needs only `harness`.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from tests.frameworks.checks import (
    ATTRIBUTORS,
    check_attributions,
    check_planted_claim_blamed,
    check_replayed_conversation,
    check_understood,
    error_steps,
    failed_tool_step,
    show_trajectory,
)
from tests.frameworks.scenarios import (
    CENSUS,
    FLIGHTS,
    GROUND_TRUTH,
    ORDER,
    RECORD_SCENARIOS,
    SHOP_ROLE,
    STOCK,
    TASK,
    TIMED_OUT,
    WRONG,
    CensusDown,
    Expected,
    RecordScenario,
    census_answer,
    expected_census,
    first_reply_only,
)
from tests.frameworks.scripted_openai import ScriptedOpenAI
from tests.integration.sidecar import Sidecar, running_sidecar

__all__ = [
    "ATTRIBUTORS",
    "CENSUS",
    "FLIGHTS",
    "GROUND_TRUTH",
    "ORDER",
    "RECORD_SCENARIOS",
    "SHOP_ROLE",
    "STOCK",
    "TASK",
    "TIMED_OUT",
    "WRONG",
    "CensusDown",
    "Expected",
    "Graded",
    "Instrumentor",
    "Pipeline",
    "RecordScenario",
    "census_answer",
    "check_attributions",
    "check_understood",
    "error_steps",
    "expected_census",
    "failed_tool_step",
    "first_reply_only",
    "graded",
    "graded_record_claim",
    "graded_wrong_claim",
    "instrumented",
    "pipeline_fixture",
    "show_trajectory",
    "sidecar_for",
]


@contextmanager
def sidecar_for(directory: Path) -> Iterator[Sidecar]:
    """A sidecar on SQLite with a short quiet period (and `unfinished_after`), running the
    default attributors and the `echo` probe."""
    with running_sidecar(
        f"sqlite+aiosqlite:///{directory / 'faultfinder.db'}",
        directory,
        FAULTFINDER_QUIET_PERIOD="1.0",
        # A run whose root is still in its process (never ended, when an instrumentation
        # leaves it open as an exception escapes) is given up on after this.
        FAULTFINDER_UNFINISHED_AFTER="5.0",
        FAULTFINDER_SWEEP_INTERVAL="0.1",
        FAULTFINDER_ATTRIBUTORS=",".join(ATTRIBUTORS),
        FAULTFINDER_PLUGINS="tests.plugins.echo",
    ) as sidecar:
        yield sidecar


class Instrumentor(Protocol):
    """An instrumentation package's entry point (OpenTelemetry's `BaseInstrumentor`)."""

    def instrument(self, *, tracer_provider: TracerProvider, **kwargs: Any) -> object: ...

    def uninstrument(self) -> object: ...


@contextmanager
def instrumented(
    sidecar: Sidecar,
    project: str,
    *instrumentors: Instrumentor,
    global_provider: bool = False,
    env: Mapping[str, str] | None = None,
    logs: bool = False,
) -> Iterator[Pipeline]:
    """A `Pipeline` for `project`, with `instrumentors` tracing to it (in order; undone in
    reverse). `global_provider`: its provider is the global one as well, as Phoenix's
    `register()` sets it up, for frameworks that trace to the global provider themselves;
    `env`: environment variables set meanwhile (an instrumentation's opt-in); `logs`: the
    instrumentors log to the pipeline's logger provider too (OpenTelemetry's GenAI
    instrumentations send messages as log records)."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in (env or {}).items():
            patch.setenv(name, value)
        pipeline = Pipeline(sidecar, project)
        if global_provider:
            trace.set_tracer_provider(pipeline.provider)
        started: list[Instrumentor] = []
        try:
            providers: dict[str, Any] = {"tracer_provider": pipeline.provider}
            if logs:
                providers["logger_provider"] = pipeline.logs
            for instrumentor in instrumentors:
                instrumentor.instrument(**providers)
                started.append(instrumentor)
            yield pipeline
        finally:
            for instrumentor in reversed(started):
                instrumentor.uninstrument()
            pipeline.shutdown()


def framework_under_test(default: str) -> tuple[str, str]:
    """The environment's framework (`FAULTFINDER_CONFORMANCE_FRAMEWORK`, set by
    noxfile.py; `default` for a module run by hand) and the sidecar project its runs go
    to: what a module traced more than one way (environments.py) chooses its
    instrumentation by."""
    name = os.environ.get("FAULTFINDER_CONFORMANCE_FRAMEWORK", default)
    return name, "conformance-" + name.replace("+", "-")


def pipeline_fixture(
    project: str,
    *instrumentors: Instrumentor,
    global_provider: bool = False,
    env: Mapping[str, str] | None = None,
    logs: bool = False,
) -> Any:
    """A conformance module's `pipeline` fixture (module-scoped): `instrumented(...)` on
    the module's sidecar."""

    @pytest.fixture(scope="module", name="pipeline")
    def pipeline(sidecar: Sidecar) -> Iterator[Pipeline]:
        with instrumented(
            sidecar, project, *instrumentors, global_provider=global_provider, env=env, logs=logs
        ) as pipeline:
            yield pipeline

    return pipeline


@dataclass
class Pipeline:
    """A tracer provider exporting to the sidecar over OTLP/HTTP (protobuf), with the
    project set the way Phoenix users set it (`openinference.project.name`)."""

    sidecar: Sidecar
    project: str
    provider: TracerProvider = field(init=False)
    logs: LoggerProvider = field(init=False)
    """Log records (GenAI events) go to the sidecar's `/v1/logs`, beside the spans."""

    def __post_init__(self) -> None:
        resource = Resource.create(
            {"service.name": f"{self.project}-agents", "openinference.project.name": self.project}
        )
        self.provider = TracerProvider(resource=resource)
        exporter = OTLPSpanExporter(endpoint=f"{self.sidecar.url}/v1/traces", timeout=10)
        self.provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=200))
        self.logs = LoggerProvider(resource=resource)
        log_exporter = OTLPLogExporter(endpoint=f"{self.sidecar.url}/v1/logs", timeout=10)
        self.logs.add_log_record_processor(
            BatchLogRecordProcessor(log_exporter, schedule_delay_millis=200)
        )

    def run_ids(self) -> set[str]:
        return {run["id"] for run in self._runs()}

    def _runs(self) -> list[dict[str, Any]]:
        response = httpx.get(
            f"{self.sidecar.url}/api/runs", params={"project": self.project, "limit": 200}
        )
        response.raise_for_status()
        items: list[dict[str, Any]] = response.json()["items"]
        return items

    def invoke(self, work: Callable[[], object]) -> tuple[object, BaseException | None]:
        """Run `work` (one invocation of the agents) and flush its spans; returns its result
        or the exception that escaped it.

        Each invocation runs on a thread of its own, with a fresh context, as a service's
        request handler does: an instrumentation that leaves its span current after a
        failure (smolagents when the model endpoint fails: the agent span is never ended
        nor detached) would otherwise make every later invocation a child of that span.
        """
        outcome: list[tuple[object, BaseException | None]] = []

        def target() -> None:
            try:
                outcome.append((work(), None))
            except Exception as exc:
                outcome.append((None, exc))

        thread = threading.Thread(target=target, name="invocation")
        thread.start()
        thread.join()
        # The log records first: a run is complete once its spans are quiet.
        self.logs.force_flush()
        self.provider.force_flush()
        return outcome[0]

    def serving(
        self, llm: ScriptedOpenAI, work: Callable[[], object]
    ) -> tuple[set[str], object, BaseException | None]:
        """`invoke(work)` while `llm` serves; the runs before it (for `the_run`), and the
        invocation's result or the exception that escaped it."""
        before = self.run_ids()
        with llm.running():
            result, error = self.invoke(work)
        return before, result, error

    def the_failed_run(
        self, before: set[str], *, agents: Sequence[str]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The one run made since `before`, once failed, with `agents` (order is not
        checked); and, once every attributor answered it (no ground truth: none was
        posted), its attributions by method."""
        run = self.the_run(before, statuses=("failed", "attributed"))
        assert sorted(run["agents"]) == sorted(agents), run["agents"]
        attributed = self.the_run(before, statuses=("attributed",))
        return run, check_attributions(attributed, ground_truth=None)

    def the_run(
        self, before: set[str], *, statuses: Sequence[str], timeout: float = 60
    ) -> dict[str, Any]:
        """The one run made since `before` (asserting there is exactly one), once its status
        is one of `statuses`; the run's detail (`GET /api/runs/{id}`)."""
        deadline = time.monotonic() + timeout
        while True:
            new = [run for run in self._runs() if run["id"] not in before]
            assert len(new) <= 1, f"one invocation made {len(new)} runs: {_brief(new)}"
            if new and new[0]["status"] in statuses:
                detail = self.detail(new[0]["id"])
                # A run is `attributed` at its first attribution: wait for all of them.
                answered = {a["method"] for a in detail.get("attributions") or ()}
                if detail["status"] in statuses and (
                    detail["status"] != "attributed" or answered >= set(ATTRIBUTORS)
                ):
                    return detail
            if time.monotonic() > deadline:
                everywhere = httpx.get(f"{self.sidecar.url}/api/runs", params={"limit": 20})
                raise AssertionError(
                    f"no run reached {statuses} within {timeout} s: {_brief(new)}\n"
                    f"(the sidecar's newest runs: {_brief(everywhere.json()['items'])})\n"
                    f"--- sidecar log ---\n{self.sidecar.log()[-4000:]}"
                )
            time.sleep(0.1)

    def detail(self, run_id: str) -> dict[str, Any]:
        response = httpx.get(f"{self.sidecar.url}/api/runs/{run_id}")
        response.raise_for_status()
        detail: dict[str, Any] = response.json()
        return detail

    def post_outcome(self, run_id: str, **body: Any) -> dict[str, Any]:
        response = httpx.post(f"{self.sidecar.url}/api/runs/{run_id}/outcome", json=body)
        assert response.status_code in (200, 201), response.text
        summary: dict[str, Any] = response.json()
        return summary

    def shutdown(self) -> None:
        self.provider.shutdown()
        self.logs.shutdown()


@dataclass(frozen=True)
class Graded:
    """A wrong claim graded afterwards: what the invocation returned, its run once
    complete, and the run once every attributor answered the posted failure."""

    answer: object
    run: dict[str, Any]
    attributed: dict[str, Any]

    @property
    def steps(self) -> list[dict[str, Any]]:
        """The complete run's steps."""
        steps: list[dict[str, Any]] = self.run["trajectory"]["steps"]
        return steps


def graded_wrong_claim(
    pipeline: Pipeline, llm: ScriptedOpenAI, work: Callable[[], object], expected: Expected
) -> Graded:
    """The census scenario played to the end: `work` runs while `llm` serves its script,
    raises nothing and uses the whole script; its run completes, reads as `expected`; the
    user then posts it failed with the census figure (`GROUND_TRUTH`), and every
    attributor answers, having seen that figure."""
    before, answer, error = pipeline.serving(llm, work)
    assert error is None, error
    assert llm.remaining() == {}
    run = pipeline.the_run(before, statuses=("complete",))
    check_understood(run, expected, project=pipeline.project)
    attributed = graded(pipeline, before, run)
    check_planted_claim_blamed(attributed)
    return Graded(answer, run, attributed)


def graded_record_claim(
    pipeline: Pipeline,
    llm: ScriptedOpenAI,
    work: Callable[[], object],
    agent: str,
    scenario: RecordScenario,
) -> dict[str, Any]:
    """A records scenario played to the end: `work` runs while `llm` serves its script; the
    user posts the run failed with its ground truth; the zero-LLM attributors blame
    `agent`'s claim, the first step that states it, and say why (the records that prove
    it wrong), however the framework's instrumentation carried the tool's records."""
    before, _, error = pipeline.serving(llm, work)
    assert error is None, error
    run = pipeline.the_run(before, statuses=("complete",))
    pipeline.post_outcome(run["id"], outcome="failure", ground_truth=scenario.ground_truth)
    attributed = pipeline.the_run(before, statuses=("attributed",))
    shown = show_trajectory(attributed["trajectory"])
    stated = next(
        step
        for step in attributed["trajectory"]["steps"]
        if scenario.claim in step["content"] and step["kind"] != "tool"
    )
    by_method = {a["method"]: a for a in attributed["attributions"]}
    for method in ("learned", "first_error"):
        blamed = by_method[method]
        assert (blamed["step"], blamed["agent"]) == (stated["index"], agent), (
            f"{method} blamed step {blamed['step']} ({blamed['agent']}): {blamed['reason']}\n"
            f"{shown}"
        )
        assert scenario.why in blamed["reason"], f"{method}: {blamed['reason']}\n{shown}"
    return attributed


def graded(pipeline: Pipeline, before: set[str], run: Mapping[str, Any]) -> dict[str, Any]:
    """Post `run` (the one made since `before`) failed, with `GROUND_TRUTH`; the run once
    every attributor answered, each having seen that figure."""
    pipeline.post_outcome(run["id"], outcome="failure", ground_truth=GROUND_TRUTH)
    attributed = pipeline.the_run(before, statuses=("attributed",))
    check_attributions(attributed, ground_truth=GROUND_TRUTH)
    return attributed


def _brief(runs: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, list[str]]]:
    return [(run["id"], run["status"], run["agents"]) for run in runs]


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes")


PROGRAMS = Path(__file__).resolve().parents[2] / "data" / "corpus" / "programs"
"""The agent programs, among them the chat replays (`chat_replay.py`)."""
AIRLINE = PROGRAMS.parents[1] / "conversations" / "tau-bench-airline.jsonl"
"""The labelled τ-bench airline conversations the replays replay."""


def replay_recorded_conversation(pipeline: Pipeline, program: str, record_id: str) -> Any:
    """Replay the labelled airline conversation `record_id` through the framework of
    data/corpus/programs/`program`.py (`data/conversations/replay_live.sh`), as
    one run into the pipeline's sidecar, and check it came out as the replay says
    (`check_replayed_conversation`): the premise on which the labels move to the live
    steps. Returns the run as the API shows it."""
    sys.path.insert(0, str(PROGRAMS))
    try:
        replay_program = importlib.import_module(program)
        chat_replay = importlib.import_module("chat_replay")
    finally:
        sys.path.remove(str(PROGRAMS))
    lines = AIRLINE.read_text(encoding="utf-8").splitlines()
    record = next(r for line in lines if (r := json.loads(line))["id"] == record_id)
    scripted = chat_replay.Scripted()
    replay = replay_program.replayer(pipeline.provider.get_tracer("support-chat"))

    def chat() -> object:
        with scripted.running() as base_url:
            return asyncio.run(replay(record, scripted, base_url))

    before = pipeline.run_ids()
    replayed, error = pipeline.invoke(chat)
    assert error is None, error
    assert isinstance(replayed, dict)
    run = pipeline.the_run(before, statuses=("complete",))
    check_replayed_conversation(run["trajectory"], record["steps"], replayed)
    return run
