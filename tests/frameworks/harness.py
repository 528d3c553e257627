"""What every conformance module shares: the sidecar, the OTLP pipeline into it, finding
the one run an invocation made, and the checks of what the sidecar understood.

A conformance module drives a real agent framework, traced by its own instrumentation
package, through the standard OTLP/HTTP exporter into a real `faultfinder serve` (the main
environment's; the framework environment holds no faultfinder code), with the agents'
model served by `ScriptedOpenAI`. It reads the result the way a user does: over the HTTP
API.
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

from tests.frameworks.scripted_openai import Reply, ScriptedOpenAI, call, say
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
    "sidecar_for",
]

ATTRIBUTORS = ("learned", "first_error", "echo")
"""The default attributors, and the test plugin that answers with the trajectory it got."""

# The census scenario every module plays: the user asks for Lyon's population, an agent
# looks it up with a census tool, and the answer misstates the figure the tool gave.
TASK = "What is the population of Lyon?"
"""The user's text."""
CENSUS = "Lyon: 522,250 inhabitants (census 2021)"
"""The census tool's result."""
WRONG = "Lyon has 225,520 inhabitants."
"""The planted flaw: the digits of the census figure, transposed."""
GROUND_TRUTH = "522,250"
"""What the user posts with the failed outcome, once the answer is found wrong."""
TIMED_OUT = "census service timed out"
"""The census tool's error, when it fails."""


# The records scenarios: a tool returns records, and the agent says of them what its
# tool's own records prove wrong. One agent, "shop_agent", plays them; its instructions
# carry `SHOP_ROLE`, and its three tools return `FLIGHTS`, `ORDER` and `STOCK` as they are.
SHOP_ROLE = "SHOP-ROLE"
FLIGHTS: list[dict[str, object]] = [
    {"flight": "TP 433", "eur": 89, "departs": "07:05"},
    {"flight": "AF 1024", "eur": 140, "departs": "09:10"},
]
"""`flight_search`'s records, a list of dicts."""
ORDER: dict[str, object] = {
    "order_id": "#W2611340",
    "items": [
        {"name": "Water Bottle", "item_id": "6469567736", "price": 47.84},
        {"name": "Office Chair", "item_id": "8426249116", "price": 488.81},
    ],
}
"""`order_details`'s order, its items a list inside it."""
STOCK = (
    "Warehouse Leeds: stock 1,240 units; capacity 2,000 units; dock doors 6\n"
    "Warehouse Bristol: stock 310 units; capacity 800 units; dock doors 2"
)
"""`warehouse_stock`'s report: prose, one record a line (`Name: field value; …`)."""


@dataclass(frozen=True)
class RecordScenario:
    """One call of a records tool, then the planted claim, graded wrong afterwards."""

    name: str
    tool: str
    arguments: Mapping[str, str]
    task: str
    claim: str
    """The planted flaw."""
    ground_truth: str
    why: str
    """What the zero-LLM attributors must say of the claim."""

    def script(self) -> dict[str, list[Reply]]:
        return {SHOP_ROLE: [call(self.tool, **self.arguments), say(self.claim)]}


RECORD_SCENARIOS = (
    RecordScenario(
        "superlative",
        "flight_search",
        {"origin": "CDG", "destination": "LIS"},
        task="Which is the cheapest Friday flight from Paris to Lisbon?",
        # TP 433 is the cheapest, by the search's own list.
        claim="The cheapest Friday flight is AF 1024, departing at 09:10.",
        ground_truth="TP 433",
        why="called AF 1024 the cheapest after flight_search had returned TP 433 with eur 89",
    ),
    RecordScenario(
        "figure-of-another-record",
        "order_details",
        {"order_id": "#W2611340"},
        task="How much do I get back if I return the office chair of order #W2611340?",
        # The water bottle's price, given to the chair.
        claim="Returning the Office Chair refunds 47.84 to your card.",
        ground_truth="488.81",
        why="gave Office Chair the figure 47.84, which order_details had returned as the price"
        " of Water Bottle (Office Chair's is 488.81)",
    ),
    RecordScenario(
        "figure-given-to-another-name",
        "warehouse_stock",
        {"region": "north"},
        task="Which northern warehouse can ship a 900-unit order today, and from what stock?",
        # Leeds's stock, given to a warehouse the report does not list.
        claim="Ship it from Warehouse York, which has a stock of 1,240 units.",
        ground_truth="Warehouse Leeds",
        why="gave Warehouse York the figure 1,240, which warehouse_stock had returned as the"
        " stock of Warehouse Leeds",
    ),
)


class CensusDown(RuntimeError):
    """The census service did not answer."""


def census_answer(city: str, *, fails: bool = False) -> str:
    """The census tool's body: `CENSUS`, or (`fails`) `CensusDown`."""
    if fails:
        raise CensusDown(f"{TIMED_OUT} for {city}")
    return CENSUS


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


def check_planted_claim_blamed(detail: Mapping[str, Any]) -> None:
    """Assert the zero-LLM attributors blame the planted claim: the first step stating the
    transposed figure, right after the census tool reported the true one, by the agent
    that made it, and say so in words."""
    steps = detail["trajectory"]["steps"]
    shown = _show(detail["trajectory"])
    claim = next(s for s in steps if "225,520" in s["content"] and s["kind"] != "tool")
    by_method = {a["method"]: a for a in detail["attributions"]}
    for method in ("learned", "first_error"):
        blamed = by_method[method]
        assert (blamed["step"], blamed["agent"]) == (claim["index"], claim["agent"]), (
            f"{method} blamed step {blamed['step']} ({blamed['agent']}): {blamed['reason']}\n"
            f"{shown}"
        )
        assert "225,520" in blamed["reason"] and "522,250" in blamed["reason"], (
            f"{method}: {blamed['reason']}\n{shown}"
        )


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
    shown = _show(attributed["trajectory"])
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


def first_reply_only(
    script: Mapping[str, Sequence[Reply]], *keys: str
) -> dict[str, Sequence[Reply]]:
    """`script` with only the first reply of each of `keys`: for a tool call that ends
    the run, after which those agents say nothing more."""
    return {key: replies[:1] if key in keys else replies for key, replies in script.items()}


def error_steps(run: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The run's steps that ended in error."""
    return [step for step in run["trajectory"]["steps"] if step["status"] == "error"]


def failed_tool_step(
    run: Mapping[str, Any], agent: str, tool: str = "census_lookup"
) -> dict[str, Any]:
    """Assert the run's one failed step is `agent`'s call of `tool`; that step."""
    failed = error_steps(run)
    assert [(s["agent"], s["tool_name"]) for s in failed] == [(agent, tool)], failed
    return failed[0]


def _brief(runs: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, list[str]]]:
    return [(run["id"], run["status"], run["agents"]) for run in runs]


@dataclass(frozen=True)
class Expected:
    """What a user of the framework knows about the invocation they made."""

    agents: Sequence[str]
    """The agents by the names the framework gave them (order is not checked)."""
    task: str
    """The user's text."""
    tools: Mapping[str, str] = field(default_factory=dict)
    """Each tool the agents called → the agent that called it."""
    tool_results: Mapping[str, str] = field(default_factory=dict)
    """Each tool → the text of its result as the tool returned it."""
    final_answer: str | None = None
    """Text the run's final answer contains (None: not checked)."""


def expected_census(
    agents: Sequence[str], tools: Mapping[str, str], *, final_answer: str = "225,520"
) -> Expected:
    """What the census scenario's user knows: `TASK`, the census tool's result `CENSUS`,
    and the wrong figure in the final answer; `agents` and `tools` as in `Expected`."""
    return Expected(
        agents=agents,
        task=TASK,
        tools=tools,
        tool_results={"census_lookup": CENSUS},
        final_answer=final_answer,
    )


def _show(trajectory: Mapping[str, Any]) -> str:
    lines = [f"task={trajectory.get('task')!r} final={trajectory.get('final_answer')!r}"]
    for step in trajectory["steps"]:
        content = (step.get("content") or "").replace("\n", " ")[:110]
        lines.append(
            f"  {step['index']:>2} {step['agent']!r:<24} {step['kind']:<8} "
            f"{step.get('status', '')!s:<6} {step.get('tool_name') or '':<14} {content}"
        )
    return "\n".join(lines)


def check_understood(detail: Mapping[str, Any], expected: Expected, *, project: str) -> None:
    """Assert that the sidecar saw the invocation as its user knows it."""
    trajectory = detail["trajectory"]
    shown = _show(trajectory)
    steps = trajectory["steps"]
    assert detail["project"] == project, shown
    assert sorted(detail["agents"]) == sorted(expected.agents), (
        f"agents {detail['agents']} (expected {sorted(expected.agents)})\n{shown}"
    )
    assert trajectory["task"] == expected.task, shown
    assert all(step["content"].strip() for step in steps), f"a blank step\n{shown}"
    for tool, caller in expected.tools.items():
        assert tool not in detail["agents"], f"tool {tool!r} is listed as an agent\n{shown}"
        calls = [s for s in steps if s["kind"] == "tool" and s.get("tool_name") == tool]
        assert calls, f"no step of tool {tool!r}\n{shown}"
        assert {s["agent"] for s in calls} == {caller}, f"{tool!r} is not {caller!r}'s\n{shown}"
        # The request that called it reads `tool(args)`, before the tool's own step.
        first = calls[0]["index"]
        asked = [s for s in steps[:first] if f"{tool}(" in s["content"]]
        assert asked, f"no step before {tool!r}'s reads {tool}(…)\n{shown}"
    for tool, result in expected.tool_results.items():
        calls = [s for s in steps if s["kind"] == "tool" and s.get("tool_name") == tool]
        assert calls, f"no step of tool {tool!r}\n{shown}"
        for text in (calls[0]["content"], calls[0].get("tool_result") or ""):
            assert text.strip() == result, (
                f"{tool!r}'s result reads {text!r}, not the tool's own {result!r}\n{shown}"
            )
    if expected.final_answer is not None:
        final = trajectory.get("final_answer") or ""
        assert expected.final_answer in final, f"final answer {final!r}\n{shown}"


def check_attributions(detail: Mapping[str, Any], *, ground_truth: str | None) -> dict[str, Any]:
    """Assert every configured attributor answered, and that the one echoing its input saw
    `ground_truth`; the attributions by method."""
    by_method = {a["method"]: a for a in detail["attributions"]}
    assert set(by_method) == set(ATTRIBUTORS), sorted(by_method)
    for method, attribution in by_method.items():
        assert attribution["status"] == "ok", (method, attribution.get("failure_reason"))
        assert attribution["agent"] in detail["agents"], (method, attribution["agent"])
    echoed = by_method["echo"]["details"]
    assert echoed["ground_truth"] == ground_truth, echoed
    assert echoed["task"] == detail["trajectory"]["task"], echoed
    return by_method


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


def check_replayed_conversation(
    trajectory: Mapping[str, Any],
    recorded: Sequence[Mapping[str, Any]],
    replayed: Mapping[str, Any],
) -> None:
    """Assert a τ-bench conversation replayed by data/corpus/programs/chat_replay.py
    came out as the replay says it did: every model call an `llm` step saying the recorded
    message or call, in order; every later customer turn that reached a model call a user
    step, in order; every recorded tool report a tool step; no recorded report left over."""
    steps = trajectory["steps"]
    shown = _show(trajectory)
    calls = [step for step in steps if step["kind"] == "llm"]
    assert len(calls) == len(replayed["calls"]), shown
    for step, stood_for in zip(calls, replayed["calls"], strict=True):
        for index in stood_for:
            said = recorded[index]
            expected = said.get("tool_name") or " ".join(said["content"].split())[:80]
            assert expected in " ".join(step["content"].split()), (index, step, shown)
    humans = [step["content"] for step in steps if step["kind"] == "human"]
    assert humans == [recorded[index]["content"] for index in replayed["users"]], shown
    reports = [step["tool_name"] for step in recorded if step["role"] == "tool"]
    assert [step["tool_name"] for step in steps if step["kind"] == "tool"] == reports, shown
    assert replayed["left"] == 0
