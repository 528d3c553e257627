"""The SDK's spans, sent through real OTLP bytes and assembled as the sidecar does.

Each test records with `faultfinder.sdk` into an in-memory exporter, encodes the spans
as an OTLP request, decodes them with the server's decoder and assembles the run's
trajectory: what a user sees in the sidecar is what these tests check.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import faultfinder.sdk
from faultfinder import conventions as c
from faultfinder.attributors.model import StepKind, StepStatus
from faultfinder.reading.runs import run_facts
from faultfinder.sdk import (
    agent,
    agent_step,
    current_run,
    current_step,
    handoff,
    message,
    run,
    tool,
    tool_call,
)
from tests.sdk_recording import finished_span, recording, records, root_of, steps, trajectory


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    with recording() as (memory, _):
        yield memory


# --- trajectories ---------------------------------------------------------------------------


def test_a_multi_agent_run_reads_back_in_program_order(exporter: InMemorySpanExporter) -> None:
    with run(task="What is 17 * 3?", ground_truth="51", framework="scripted") as r:
        with agent_step("Planner", input="What is 17 * 3?") as planner:
            planner.say("Ask the Calculator for 17 * 3.")
        handoff("Planner", "Calculator", "Please compute 17 * 3.")
        with agent_step("Calculator") as calculator:
            calculator.say("I will use the multiply tool.")
            with tool_call("multiply", {"a": 17, "b": 3}) as call:
                call.result(41)
            calculator.say("17 * 3 = 41")
        message("Planner", "The answer is 41.")
        r.fail("answered 41, expected 51", final_answer="41")

    got = trajectory(exporter, r.run_id)
    assert steps(got) == [
        ("Planner", StepKind.MESSAGE, "Ask the Calculator for 17 * 3."),
        ("Planner", StepKind.HANDOFF, "Please compute 17 * 3."),
        ("Calculator", StepKind.MESSAGE, "I will use the multiply tool."),
        ("Calculator", StepKind.TOOL, "41"),
        ("Calculator", StepKind.MESSAGE, "17 * 3 = 41"),
        ("Planner", StepKind.MESSAGE, "The answer is 41."),
    ]
    tool_step = got.steps[3]
    assert tool_step.tool_name == "multiply"
    assert json.loads(tool_step.tool_arguments or "") == {"a": 17, "b": 3}
    assert tool_step.tool_result == "41"
    assert (got.task, got.ground_truth, got.final_answer) == ("What is 17 * 3?", "51", "41")
    assert got.metadata["outcome"] == "failure"
    assert got.metadata["outcome_reason"] == "answered 41, expected 51"
    assert got.metadata["framework"] == "scripted"
    assert re.fullmatch(r"[0-9a-f]{32}", r.run_id) and r.run_id == r.trace_id


def test_an_agent_step_with_no_nested_step_is_one_semconv_span(
    exporter: InMemorySpanExporter,
) -> None:
    with run(task="greet") as r, agent_step("Greeter", input="Say hello") as step:
        step.say("Hello")
        step.say("and welcome")

    got = trajectory(exporter, r.run_id)
    assert steps(got) == [("Greeter", StepKind.MESSAGE, "Hello\nand welcome")]
    span = finished_span(exporter, "invoke_agent Greeter")
    attributes = span.attributes or {}
    assert attributes[c.GEN_AI_OPERATION_NAME] == "invoke_agent"
    assert attributes[c.GEN_AI_AGENT_NAME] == "Greeter"
    assert json.loads(str(attributes[c.GEN_AI_OUTPUT_MESSAGES])) == [
        {"role": "assistant", "parts": [{"type": "text", "content": "Hello"}]},
        {"role": "assistant", "parts": [{"type": "text", "content": "and welcome"}]},
    ]
    assert json.loads(str(attributes[c.GEN_AI_INPUT_MESSAGES])) == [
        {"role": "user", "parts": [{"type": "text", "content": "Say hello"}]}
    ]
    root = finished_span(exporter, "invoke_workflow")
    assert (root.attributes or {})[c.GEN_AI_OPERATION_NAME] == "invoke_workflow"
    assert root.parent is None and span.parent is not None


def test_a_raising_tool_is_an_error_step_and_the_exception_propagates(
    exporter: InMemorySpanExporter,
) -> None:
    with run(task="look up pens") as r, agent_step("Shopper") as shopper:
        with pytest.raises(KeyError, match="pen"), tool_call("catalog", {"item": "pen"}):
            raise KeyError("pen")
        shopper.say("No price for pens.")

    got = trajectory(exporter, r.run_id)
    assert [(step.agent, step.kind, step.status) for step in got.steps] == [
        ("Shopper", StepKind.TOOL, StepStatus.ERROR),
        ("Shopper", StepKind.MESSAGE, StepStatus.UNSET),
    ]
    assert "KeyError" in (got.steps[0].error or "") and "pen" in (got.steps[0].error or "")
    span = finished_span(exporter, "execute_tool catalog")
    assert span.status.status_code is StatusCode.ERROR
    assert (span.attributes or {})[c.ERROR_TYPE] == "KeyError"
    assert [event.name for event in span.events] == ["exception"]
    # The exception was handled inside the run: the run itself did not fail.
    assert "outcome" not in got.metadata
    assert finished_span(exporter, "invoke_workflow").status.status_code is StatusCode.UNSET


def test_a_crashing_agent_turn_shows_its_error_once(exporter: InMemorySpanExporter) -> None:
    with run(task="t") as r:
        with pytest.raises(ValueError, match="bad plan"), agent_step("Planner") as planner:
            planner.say("Let me check the calendar.")
            with tool_call("calendar", {}) as call:
                call.result("busy")
            raise ValueError("bad plan")
        with pytest.raises(LookupError), agent_step("Booker"), tool_call("book", {}):
            raise LookupError("sold out")

    got = trajectory(exporter, r.run_id)
    assert [(s.agent, s.kind, s.status, s.error) for s in got.steps] == [
        ("Planner", StepKind.MESSAGE, StepStatus.UNSET, None),
        ("Planner", StepKind.TOOL, StepStatus.UNSET, None),
        ("Planner", StepKind.MESSAGE, StepStatus.ERROR, "ValueError: bad plan"),
        ("Booker", StepKind.TOOL, StepStatus.ERROR, "LookupError: sold out"),
    ]


def test_an_exception_escaping_the_run_fails_it_and_is_reraised(
    exporter: InMemorySpanExporter,
) -> None:
    with pytest.raises(RuntimeError, match="model overloaded"), run(task="t") as r:
        with agent_step("Planner", "thinking"):
            pass
        raise RuntimeError("model overloaded")

    assert run_facts(root_of(exporter, r.trace_id)).failed
    got = trajectory(exporter, r.run_id)
    assert got.metadata["outcome"] == "failure"
    assert "model overloaded" in got.metadata["outcome_reason"]
    assert r.outcome == "failure"


def test_succeed_records_the_answer_and_a_later_exception_still_fails_the_run(
    exporter: InMemorySpanExporter,
) -> None:
    with run(task="2+2", ground_truth="4") as good:
        message("Solver", "4")
        good.succeed("4")
    facts = run_facts(root_of(exporter, good.trace_id))
    assert (facts.outcome, facts.final_answer, facts.failed) == ("success", "4", False)

    with pytest.raises(ValueError), run(task="2+2") as bad:
        bad.succeed("4")
        raise ValueError("grader crashed")
    assert run_facts(root_of(exporter, bad.trace_id)).failed


def test_an_explicit_run_id_reaches_every_span_of_the_run() -> None:
    with recording() as (exporter, provider):
        other_instrumentation = provider.get_tracer("some.http.client")
        r = record_order_run(other_instrumentation)

    assert r.run_id == "order-42" and r.trace_id != "order-42"
    assert {run_facts(span).run_id for span in records(exporter)} == {"order-42"}
    got = trajectory(exporter, "order-42")
    assert [step.kind for step in got.steps] == [
        StepKind.MESSAGE,
        StepKind.TOOL,
        StepKind.MESSAGE,
    ]


def record_order_run(other_instrumentation: trace.Tracer) -> faultfinder.sdk.Run:
    with run(task="t", run_id="order-42") as r:
        with agent_step("Planner") as planner:
            planner.say("fetch the order")
            with other_instrumentation.start_as_current_span("GET /orders/42"):
                pass
            with tool_call("fetch", "42") as call:
                call.result("ok")
        message("Planner", "done")
    return r


def test_a_run_inside_another_span_starts_its_own_trace_linked_to_it() -> None:
    with recording() as (exporter, provider):
        web = provider.get_tracer("web")
        with web.start_as_current_span("POST /ask") as request, run(task="t") as r:
            message("Agent", "hi")
    root = finished_span(exporter, "invoke_workflow")
    assert root.parent is None
    assert r.trace_id != trace.format_trace_id(request.get_span_context().trace_id)
    assert [link.context.span_id for link in root.links] == [request.get_span_context().span_id]
    assert steps(trajectory(exporter, r.run_id)) == [("Agent", StepKind.MESSAGE, "hi")]


def test_messages_by_role_become_human_system_and_agent_steps(
    exporter: InMemorySpanExporter,
) -> None:
    with run(task="") as r:
        message("system", "You are a travel team.", role="system")
        message("user", "Book me a flight to Lisbon.", role="user")
        message("Planner", "Searching flights.")
    got = trajectory(exporter, r.run_id)
    assert [step.kind for step in got.steps] == [
        StepKind.SYSTEM,
        StepKind.HUMAN,
        StepKind.MESSAGE,
    ]
    assert got.task == "Book me a flight to Lisbon."


def test_decorated_agents_and_tools_record_sync_and_async_calls(
    exporter: InMemorySpanExporter,
) -> None:
    @tool("add")
    def add(a: int, b: int) -> int:
        return a + b

    @tool()
    async def lookup(city: str) -> str:
        await asyncio.sleep(0)
        return {"Paris": "CDG"}[city]

    @agent("Adder")
    def adder() -> str:
        assert current_step() is not None
        return f"sum is {add(2, b=3)}"

    @agent()
    async def router(city: str) -> str:
        return f"airport {await lookup(city)}"

    with run(task="t") as r:
        assert current_run() is r
        assert adder() == "sum is 5"
        assert asyncio.run(router("Paris")) == "airport CDG"

    got = trajectory(exporter, r.run_id)
    assert [(s.agent, s.kind, s.content, s.tool_name) for s in got.steps] == [
        ("Adder", StepKind.TOOL, "5", "add"),
        ("Adder", StepKind.MESSAGE, "sum is 5", None),
        ("router", StepKind.TOOL, "CDG", "lookup"),
        ("router", StepKind.MESSAGE, "airport CDG", None),
    ]
    assert json.loads(got.steps[0].tool_arguments or "") == {"a": 2, "b": 3}
    assert adder.__name__ == "adder"


def test_decorators_refuse_generators() -> None:
    with pytest.raises(TypeError, match="agent_step"):

        @agent("Streamer")
        def stream() -> Iterator[str]:
            yield "a"


def test_steps_are_entered_once_and_closed_steps_refuse_more_output(
    exporter: InMemorySpanExporter,
) -> None:
    step = agent_step("Planner")
    with run(task="t"):
        with step:
            step.say("one")
        with pytest.raises(RuntimeError, match="already ended"):
            step.say("two")
        with pytest.raises(RuntimeError, match="only once"), step:
            pass
    with pytest.raises(ValueError, match="name"):
        agent_step(" ")


# --- concurrency ---------------------------------------------------------------------------


async def _async_team(label: str, gate: asyncio.Barrier) -> str:
    async with run(task=f"task {label}") as r:
        for turn in range(3):
            async with agent_step(f"{label}-agent") as step:
                await gate.wait()  # both runs are inside a step at the same moment
                step.say(f"{label} turn {turn}")
                async with tool_call(f"{label}-tool", {"turn": turn}) as call:
                    await asyncio.sleep(0)
                    call.result(f"{label} result {turn}")
    return r.run_id


def _expected(label: str) -> list[tuple[str, StepKind, str]]:
    expected = []
    for turn in range(3):
        expected.append((f"{label}-agent", StepKind.MESSAGE, f"{label} turn {turn}"))
        expected.append((f"{label}-agent", StepKind.TOOL, f"{label} result {turn}"))
    return expected


def test_runs_in_concurrent_asyncio_tasks_do_not_mix(exporter: InMemorySpanExporter) -> None:
    async def both() -> list[str]:
        gate = asyncio.Barrier(2)
        return list(await asyncio.gather(_async_team("A", gate), _async_team("B", gate)))

    run_a, run_b = asyncio.run(both())
    assert run_a != run_b
    assert steps(trajectory(exporter, run_a)) == _expected("A")
    assert steps(trajectory(exporter, run_b)) == _expected("B")


def test_runs_in_concurrent_threads_do_not_mix(exporter: InMemorySpanExporter) -> None:
    gate = threading.Barrier(2, timeout=10)
    run_ids: dict[str, str] = {}

    def team(label: str) -> None:
        with run(task=f"task {label}") as r:
            for turn in range(3):
                with agent_step(f"{label}-agent") as step:
                    gate.wait()
                    step.say(f"{label} turn {turn}")
                    with tool_call(f"{label}-tool", {"turn": turn}) as call:
                        gate.wait()
                        call.result(f"{label} result {turn}")
        run_ids[label] = r.run_id

    threads = [threading.Thread(target=team, args=(label,)) for label in "AB"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert steps(trajectory(exporter, run_ids["A"])) == _expected("A")
    assert steps(trajectory(exporter, run_ids["B"])) == _expected("B")
