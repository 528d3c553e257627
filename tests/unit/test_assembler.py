"""Assembling trajectories from real SDK spans: replays, framework traces, shuffles, orphans."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import Status, StatusCode

from faultfinder import conventions as c
from faultfinder.attributors.model import Step, StepKind, StepStatus, Trajectory
from faultfinder.benchmarks.datasets import resolve_datasets_dir
from faultfinder.server import assembler
from faultfinder.server.assembler import assemble_trajectory
from faultfinder.server.otlp.model import SpanRecord
from faultfinder.server.run_facts import task_text
from tests.otlp_helpers import (
    MS,
    T0,
    SpanRecorder,
    framework_spans,
    input_messages,
    output_messages,
    span_records,
    trajectory_spans,
)

SMALL = Trajectory(
    run_id="small",
    task="How many studio albums did Mercedes Sosa publish between 2000 and 2009?",
    ground_truth="3",
    final_answer="4",
    steps=(
        Step(index=0, agent="human", kind=StepKind.HUMAN, content="How many…?", role="human"),
        Step(
            index=1,
            agent="Orchestrator",
            content="Plan: ask WebSurfer.\n",
            role="Orchestrator (thought)",
        ),
        Step(index=2, agent="WebSurfer", content="I typed 'Mercedes Sosa' into search."),
        Step(index=3, agent="ComputerTerminal", kind=StepKind.TOOL, content=""),
        Step(index=4, agent="Orchestrator", content="  Final answer: 4  ", role="Orchestrator"),
    ),
)


def replay_fields(trajectory: Trajectory) -> list[tuple[object, ...]]:
    """What a replay must preserve of every step."""
    return [(s.index, s.agent, s.kind, s.content, s.role) for s in trajectory.steps]


def test_a_replayed_trajectory_comes_back_exactly() -> None:
    spans = span_records(trajectory_spans(SMALL))
    result = assemble_trajectory("run-1", spans)
    assert replay_fields(result) == replay_fields(SMALL)
    assert (result.task, result.ground_truth, result.final_answer) == (
        SMALL.task,
        SMALL.ground_truth,
        SMALL.final_answer,
    )
    assert result.run_id == "run-1"
    assert result.agents == ("human", "Orchestrator", "WebSurfer", "ComputerTerminal")
    assert [step.span_id for step in result.steps] == [
        span.span_id for span in sorted(spans, key=lambda s: s.start_time_unix_nano)[1:]
    ]
    assert result.steps[0].start_time == datetime.fromtimestamp((T0 + MS) / 1e9, tz=UTC)


def test_explicit_indices_order_steps_that_start_at_the_same_instant() -> None:
    result = assemble_trajectory("r", span_records(trajectory_spans(SMALL, same_times=True)))
    assert replay_fields(result) == replay_fields(SMALL)


def _who_and_when_trajectory(path: Path) -> Trajectory:
    record = json.loads(path.read_text())
    steps = []
    for index, turn in enumerate(record["history"]):
        role = turn["role"]
        steps.append(
            Step(
                index=index,
                agent=turn.get("name") or role,
                kind=StepKind.HUMAN if role == "human" else StepKind.MESSAGE,
                content=turn["content"],
                role=role,
            )
        )
    return Trajectory(
        run_id=path.stem,
        task=record["question"],
        ground_truth=record["ground_truth"],
        steps=tuple(steps),
    )


@pytest.mark.parametrize("record", ["Hand-Crafted/1.json", "Algorithm-Generated/1.json"])
def test_a_real_who_and_when_record_round_trips(record: str) -> None:
    path = resolve_datasets_dir() / "who_and_when" / record
    if not path.is_file():
        pytest.skip(f"dataset file {path} not present")
    original = _who_and_when_trajectory(path)
    result = assemble_trajectory(
        "r", span_records(trajectory_spans(original, same_times=record.startswith("Hand")))
    )
    assert len(result) == len(original)
    assert replay_fields(result) == replay_fields(original)
    assert result.task == original.task and result.ground_truth == original.ground_truth


def test_span_arrival_order_and_duplicates_do_not_change_the_trajectory() -> None:
    for spans in (
        span_records(trajectory_spans(SMALL)),
        span_records(framework_spans()),
    ):
        expected = assemble_trajectory("r", spans)
        rng = random.Random(3)
        for _ in range(10):
            shuffled = spans + rng.sample(spans, k=3)  # retried requests deliver copies
            rng.shuffle(shuffled)
            assert assemble_trajectory("r", shuffled) == expected


def test_spans_decoded_from_separate_requests_assemble_like_one_request() -> None:
    recorded = framework_spans()
    whole = assemble_trajectory("r", span_records(recorded))
    # Children first, each in its own request, the root last.
    parts = [span_records([span]) for span in recorded]
    pieces = [record for part in parts for record in part]
    assert assemble_trajectory("r", pieces) == whole


def test_framework_trace_gives_llm_and_tool_steps_with_inherited_agents() -> None:
    result = assemble_trajectory("r", span_records(framework_spans()))
    assert [(s.agent, s.kind) for s in result.steps] == [
        ("Orchestrator", StepKind.LLM),
        ("WebSurfer", StepKind.LLM),
        ("WebSurfer", StepKind.TOOL),
        ("Orchestrator", StepKind.TOOL),
    ]
    assert result.steps[0].content == "Ask WebSurfer to search flights."
    assert result.steps[1].content == 'web_search({"query": "flights Oslo"})'
    search = result.steps[2]
    assert (search.tool_name, search.tool_arguments, search.tool_result) == (
        "web_search",
        '{"query": "flights Oslo"}',
        "SAS 120 EUR; Norwegian 135 EUR",
    )
    failed = result.steps[3]
    assert failed.status is StepStatus.ERROR and failed.error == "python timed out after 10 s"
    assert result.task == "Find the cheapest flight to Oslo."
    assert result.final_answer == "The cheapest flight costs 120 EUR."
    assert result.metadata["service"] == "travel-agents"
    assert result.metadata["project"] == "default"
    assert result.metadata["span_count"] == 7


def _tool_call_output(name: str, arguments: str) -> str:
    return json.dumps(
        [
            {
                "role": "assistant",
                "parts": [
                    {"type": "tool_call", "id": "call_0", "name": name, "arguments": arguments}
                ],
                "finish_reason": "tool_call",
            }
        ]
    )


def pydantic_ai_delegation_spans(*, lookup_fails: bool) -> tuple[ReadableSpan, ...]:
    """Agent delegation as pydantic-ai's own instrumentation (version 5) records it.

    invoke_agent Orchestrator            (final_result when the run succeeds)
    ├── chat local                       → LLM, calls ask_price_lookup
    ├── execute_tool ask_price_lookup    (container: the delegated run is beneath it)
    │   └── invoke_agent PriceLookup
    │       ├── chat local               → LLM, calls lookup_price
    │       ├── execute_tool lookup_price → TOOL, raises or returns 1.2
    │       └── chat local               → LLM, answers (when the lookup worked)
    └── chat local                       → LLM, answers (when the lookup worked)

    Every span below an agent run carries the run's `gen_ai.agent.name` (pydantic-ai
    copies it from baggage); the spans of one run share a `gen_ai.conversation.id`.
    """
    recorder = SpanRecorder({c.SERVICE_NAME: "shop"}, scope="pydantic-ai")
    tracer = recorder.tracer

    def agent_attributes(agent: str, conversation: str) -> dict[str, str]:
        return {c.GEN_AI_AGENT_NAME: agent, c.GEN_AI_CONVERSATION_ID: conversation}

    def chat(parent: trace.Span, at: int, agent: str, user: str, output: str) -> None:
        recorder.span(
            "chat local",
            parent=parent,
            start=T0 + at * MS,
            end=T0 + (at + 1) * MS,
            attributes={
                c.GEN_AI_OPERATION_NAME: c.OP_CHAT,
                **agent_attributes(agent, f"conversation-{agent}"),
                c.GEN_AI_REQUEST_MODEL: "local",
                c.GEN_AI_INPUT_MESSAGES: input_messages(("user", user)),
                c.GEN_AI_OUTPUT_MESSAGES: output,
                c.GEN_AI_USAGE_INPUT_TOKENS: 35,
                c.GEN_AI_USAGE_OUTPUT_TOKENS: 13,
            },
        )

    def agent_run(name: str, parent: trace.Span | None, at: int) -> trace.Span:
        return tracer.start_span(
            f"invoke_agent {name}",
            context=trace.set_span_in_context(parent) if parent is not None else None,
            start_time=T0 + at * MS,
            attributes={
                c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_AGENT,
                "agent_name": name,
                **agent_attributes(name, f"conversation-{name}"),
                "logfire.msg": f"{name} run",
            },
        )

    def tool_span(name: str, parent: trace.Span, at: int, agent: str, arguments: str) -> trace.Span:
        return tracer.start_span(
            f"execute_tool {name}",
            context=trace.set_span_in_context(parent),
            start_time=T0 + at * MS,
            attributes={
                c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL,
                c.GEN_AI_TOOL_NAME: name,
                c.GEN_AI_TOOL_CALL_ID: "call_0",
                c.GEN_AI_TOOL_CALL_ARGUMENTS: arguments,
                **agent_attributes(agent, f"conversation-{agent}"),
            },
        )

    def fail(span: trace.Span, error: Exception, at: int) -> None:
        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        span.end(end_time=T0 + at * MS)

    orchestrator = agent_run("Orchestrator", None, 0)
    chat(
        orchestrator,
        1,
        "Orchestrator",
        "What does a pen cost?",
        _tool_call_output("ask_price_lookup", '{"item": "pen"}'),
    )
    delegate = tool_span("ask_price_lookup", orchestrator, 3, "Orchestrator", '{"item":"pen"}')
    price_lookup = agent_run("PriceLookup", delegate, 4)
    chat(
        price_lookup,
        5,
        "PriceLookup",
        "Unit price of a pen?",
        _tool_call_output("lookup_price", '{"item": "pen"}'),
    )
    lookup = tool_span("lookup_price", price_lookup, 7, "PriceLookup", '{"item":"pen"}')
    if lookup_fails:
        error = LookupError("no catalog entry for 'pen'")
        for at, span in enumerate((lookup, price_lookup, delegate, orchestrator), start=8):
            fail(span, error, at)
        return recorder.spans
    lookup.set_attribute(c.GEN_AI_TOOL_CALL_RESULT, "1.2")
    lookup.end(end_time=T0 + 8 * MS)
    chat(price_lookup, 9, "PriceLookup", "Unit price of a pen?", output_messages("1.2 EUR"))
    price_lookup.set_attribute(c.PYDANTIC_AI_FINAL_RESULT, "1.2 EUR")
    price_lookup.end(end_time=T0 + 11 * MS)
    delegate.set_attribute(c.GEN_AI_TOOL_CALL_RESULT, "1.2 EUR")
    delegate.end(end_time=T0 + 12 * MS)
    chat(orchestrator, 13, "Orchestrator", "What does a pen cost?", output_messages("1.20 EUR"))
    orchestrator.set_attribute(c.PYDANTIC_AI_FINAL_RESULT, "A pen costs 1.20 EUR.")
    orchestrator.end(end_time=T0 + 15 * MS)
    return recorder.spans


def test_pydantic_ai_delegation_reads_as_the_delegate_steps_inside_the_caller() -> None:
    result = assemble_trajectory(
        "r", span_records(pydantic_ai_delegation_spans(lookup_fails=False))
    )
    assert [(s.agent, s.kind, s.tool_name) for s in result.steps] == [
        ("Orchestrator", StepKind.LLM, None),
        ("PriceLookup", StepKind.LLM, None),
        ("PriceLookup", StepKind.TOOL, "lookup_price"),
        ("PriceLookup", StepKind.LLM, None),
        ("Orchestrator", StepKind.LLM, None),
    ]
    assert result.steps[1].content == 'lookup_price({"item": "pen"})'
    assert (result.steps[2].tool_arguments, result.steps[2].tool_result) == (
        '{"item":"pen"}',
        "1.2",
    )
    assert result.task == "What does a pen cost?"
    # The root agent run's `final_result` is the run's answer.
    assert result.final_answer == "A pen costs 1.20 EUR."


def test_pydantic_ai_raising_tool_is_the_failed_step_of_the_delegate() -> None:
    result = assemble_trajectory("r", span_records(pydantic_ai_delegation_spans(lookup_fails=True)))
    assert [(s.agent, s.kind) for s in result.steps] == [
        ("Orchestrator", StepKind.LLM),
        ("PriceLookup", StepKind.LLM),
        ("PriceLookup", StepKind.TOOL),
    ]
    # The delegating tool call and both agent runs failed too, but they are containers.
    (failed,) = [step for step in result.steps if step.status is StepStatus.ERROR]
    assert failed.tool_name == "lookup_price" and "no catalog entry" in (failed.error or "")
    assert result.final_answer is None


def test_orphans_are_provisional_roots_until_the_root_arrives() -> None:
    recorded = framework_spans()
    root = next(span for span in recorded if span.parent is None)
    without_root = span_records([span for span in recorded if span is not root])

    partial = assemble_trajectory("r", without_root)
    # The agent of the missing root is unknown; the orphans fall back to the program that
    # sent them (`service.name`), never to an LLM or tool span's name.
    assert [s.agent for s in partial.steps] == [
        "travel-agents",
        "WebSurfer",
        "WebSurfer",
        "travel-agents",
    ]
    # The earliest orphan stands in as the run root.
    assert partial.metadata["root_span_id"] == partial.steps[0].span_id

    complete = assemble_trajectory("r", [*without_root, *span_records([root])])
    assert complete == assemble_trajectory("r", span_records(recorded))
    assert complete.agents == ("Orchestrator", "WebSurfer")


def test_spans_without_conventions_fall_back_to_childless_spans() -> None:
    recorder = SpanRecorder()
    root = recorder.span("handle request", start=T0, end=T0 + 10 * MS)
    recorder.span("load rows", parent=root, start=T0 + MS, end=T0 + 2 * MS)
    compute = recorder.span("compute", parent=root, start=T0 + 3 * MS, end=T0 + 6 * MS)
    recorder.span("sql", parent=compute, start=T0 + 4 * MS, end=T0 + 5 * MS, error="deadlock")
    result = assemble_trajectory("r", span_records(recorder.spans))
    assert [(s.agent, s.status) for s in result.steps] == [
        ("load rows", StepStatus.UNSET),
        ("sql", StepStatus.ERROR),
    ]


def test_a_single_span_run_is_one_step() -> None:
    recorder = SpanRecorder()
    recorder.span(
        "chat",
        start=T0,
        end=T0 + MS,
        attributes={
            c.GEN_AI_OPERATION_NAME: c.OP_CHAT,
            c.GEN_AI_AGENT_NAME: "Solo",
            c.GEN_AI_OUTPUT_MESSAGES: output_messages("42"),
        },
    )
    result = assemble_trajectory("r", span_records(recorder.spans))
    assert [(s.agent, s.kind, s.content) for s in result.steps] == [("Solo", StepKind.LLM, "42")]
    assert result.final_answer is None  # the root is the step, not an answer about the run


def test_an_agent_span_with_its_own_step_index_stays_a_step_beside_its_children() -> None:
    recorder = SpanRecorder()
    agent = recorder.tracer.start_span(
        "invoke_agent Coder",
        start_time=T0,
        attributes={
            c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_AGENT,
            c.GEN_AI_AGENT_NAME: "Coder",
            c.STEP_INDEX: 0,
            c.STEP_CONTENT: "I will write the script.",
        },
    )
    recorder.span(
        "execute_tool bash",
        parent=agent,
        start=T0 + MS,
        end=T0 + 2 * MS,
        attributes={c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL, c.STEP_INDEX: 1},
    )
    agent.end(end_time=T0 + 3 * MS)
    result = assemble_trajectory("r", span_records(recorder.spans))
    assert [(s.agent, s.kind) for s in result.steps] == [
        ("Coder", StepKind.MESSAGE),
        ("Coder", StepKind.TOOL),
    ]


def test_mixed_explicit_indices_fall_back_to_time_order() -> None:
    recorder = SpanRecorder()
    root = recorder.span("run", start=T0, end=T0 + 10 * MS)
    for name, start, index in (("late", 5, 0), ("early", 1, None), ("middle", 3, 1)):
        attributes: dict[str, object] = {c.GEN_AI_AGENT_NAME: name, c.STEP_CONTENT: name}
        if index is not None:
            attributes[c.STEP_INDEX] = index
        recorder.span(
            name,
            parent=root,
            start=T0 + start * MS,
            end=T0 + (start + 1) * MS,
            attributes=attributes,
        )
    result = assemble_trajectory("r", span_records(recorder.spans))
    assert [s.agent for s in result.steps] == ["early", "middle", "late"]
    assert [s.index for s in result.steps] == [0, 1, 2]


def test_run_metadata_collects_labels_dataset_and_outcome() -> None:
    spans = trajectory_spans(
        SMALL,
        resource_attributes={c.PROJECT_NAME: "bench"},
        root_attributes={
            c.LABEL_AGENT: "WebSurfer",
            c.LABEL_STEP: "2",
            c.LABEL_REASON: "searched the wrong thing",
            c.DATASET_NAME: "who_and_when",
            c.DATASET_RECORD: "hand-crafted/1",
            c.RUN_OUTCOME: "FAILURE",
            c.RUN_FRAMEWORK: "magentic-one",
        },
    )
    records = span_records(spans)
    metadata = assemble_trajectory("r", records).metadata
    assert metadata["label"] == {
        "agent": "WebSurfer",
        "step": 2,
        "reason": "searched the wrong thing",
    }
    assert (metadata["dataset"], metadata["record"]) == ("who_and_when", "hand-crafted/1")
    assert (metadata["outcome"], metadata["framework"]) == ("failure", "magentic-one")
    assert metadata["project"] == "bench"
    assert metadata["trace_ids"] == [records[0].trace_id]


def test_empty_and_cyclic_inputs_still_give_a_trajectory() -> None:
    assert assemble_trajectory("none", []).steps == ()

    def span(span_id: str, parent: str) -> SpanRecord:
        return SpanRecord(
            trace_id="a" * 32,
            span_id=span_id,
            parent_span_id=parent,
            name=f"n{span_id[0]}",
            start_time_unix_nano=T0,
            end_time_unix_nano=T0 + MS,
            attributes={c.GEN_AI_OPERATION_NAME: c.OP_CHAT},
        )

    looped = [span("1" * 16, "2" * 16), span("2" * 16, "1" * 16)]
    result = assemble_trajectory("loop", looped)
    assert result.metadata["span_count"] == 2
    assert result.metadata["root_span_id"] in {"1" * 16, "2" * 16}


def test_the_module_exports_only_assemble_trajectory() -> None:
    assert assembler.__all__ == ["assemble_trajectory"]


def test_an_agent_span_named_after_its_method_names_the_agent() -> None:
    # smolagents: AGENT spans are named `<agent>.run` and carry no `agent.name`.
    recorder = SpanRecorder()
    manager = recorder.span(
        "manager.run",
        start=T0,
        end=T0 + 10 * MS,
        attributes={
            "openinference.span.kind": "AGENT",
            "input.value": '{"task": "Lyon?", "stream": false}',
        },
    )
    recorder.span(
        "OpenAIModel.generate",
        parent=manager,
        start=T0 + MS,
        end=T0 + 2 * MS,
        attributes={"openinference.span.kind": "LLM", "output.value": "census_agent(...)"},
    )
    census = recorder.span(
        "census_agent.run",
        parent=manager,
        start=T0 + 3 * MS,
        end=T0 + 6 * MS,
        attributes={"openinference.span.kind": "AGENT"},
    )
    recorder.span(
        "census_lookup",
        parent=census,
        start=T0 + 4 * MS,
        end=T0 + 5 * MS,
        attributes={"openinference.span.kind": "TOOL", "tool.name": "census_lookup"},
    )
    result = assemble_trajectory("r", span_records(recorder.spans))
    assert [s.agent for s in result.steps] == ["manager", "census_agent"]
    # The root's input is the run's call arguments as JSON: the task is the user's text.
    assert result.task == "Lyon?"


@pytest.mark.parametrize(
    ("text", "task"),
    [
        ('{"task": "Population of Lyon?", "stream": false, "reset": true}', "Population of Lyon?"),
        (
            '{"messages": [{"role": "system", "content": "be nice"},'
            ' {"role": "user", "content": "hi"}]}',
            "hi",
        ),
        ('{"input": {"question": "deep?"}}', "deep?"),
        ('{"a": 1, "b": 2}', None),
        ('{"start_event": "AgentWorkflowStartEvent()", "tags": {}}', None),
        ("plain text", "plain text"),
        ("{not json", "{not json"),
    ],
)
def test_task_text_unwraps_call_arguments(text: str, task: str | None) -> None:
    assert task_text(text) == task


def openai_agents_spans(*, last: str) -> tuple[ReadableSpan, ...]:
    """A handoff as openinference-instrumentation-openai-agents records it: the SDK's
    trace is an AGENT root with no input or output; the agents' spans carry `agent.name`.
    `last`: the specialist's last model call `answers`, `calls` a tool, or `fails`."""
    recorder = SpanRecorder()
    root = recorder.span(
        "Agent workflow",
        start=T0,
        end=T0 + 20 * MS,
        attributes={"openinference.span.kind": "AGENT"},
    )
    triage = recorder.span(
        "triage",
        parent=root,
        start=T0 + MS,
        end=T0 + 3 * MS,
        attributes={"openinference.span.kind": "AGENT", "agent.name": "triage"},
    )
    recorder.span(
        "generation",
        parent=triage,
        start=T0 + MS,
        end=T0 + 2 * MS,
        attributes={
            "openinference.span.kind": "LLM",
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": "Lyon?",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "transfer",
        },
    )
    census = recorder.span(
        "census_agent",
        parent=root,
        start=T0 + 4 * MS,
        end=T0 + 19 * MS,
        attributes={"openinference.span.kind": "AGENT", "agent.name": "census_agent"},
    )
    final: dict[str, str] = {
        "openinference.span.kind": "LLM",
        "llm.output_messages.0.message.role": "assistant",
    }
    if last == "calls":
        final["llm.output_messages.0.message.tool_calls.0.tool_call.function.name"] = "lookup"
    else:
        final["llm.output_messages.0.message.content"] = "Lyon has 225,520 inhabitants."
    recorder.span(
        "generation",
        parent=census,
        start=T0 + 5 * MS,
        end=T0 + 6 * MS,
        attributes=final,
        error="model overloaded" if last == "fails" else None,
    )
    return recorder.spans


def test_a_root_without_output_takes_the_last_model_reply_as_final_answer() -> None:
    result = assemble_trajectory("r", span_records(openai_agents_spans(last="answers")))
    assert [s.agent for s in result.steps] == ["triage", "census_agent"]
    assert result.task == "Lyon?"
    assert result.final_answer == "Lyon has 225,520 inhabitants."


@pytest.mark.parametrize("last", ["calls", "fails"])
def test_a_last_model_call_that_calls_a_tool_or_fails_is_no_final_answer(last: str) -> None:
    result = assemble_trajectory("r", span_records(openai_agents_spans(last=last)))
    assert result.steps[-1].agent == "census_agent"
    assert result.final_answer is None


def tool_recorded_twice_spans(*, fails: bool) -> tuple[ReadableSpan, ...]:
    """One tool call as AutoGen AgentChat records it with the global tracer provider set:
    the OpenInference TOOL span (arguments, result, status OK even when the tool raised)
    around autogen-core's GenAI `execute_tool` span (no content; the error, if any)."""
    recorder = SpanRecorder()
    agent = recorder.span(
        "researcher.on_messages_stream",
        start=T0,
        end=T0 + 10 * MS,
        attributes={"openinference.span.kind": "AGENT", "graph.node.id": "researcher"},
    )
    outer = recorder.span(
        "researcher.census_lookup",
        parent=agent,
        start=T0 + MS,
        end=T0 + 4 * MS,
        attributes={
            "openinference.span.kind": "TOOL",
            "tool.name": "census_lookup",
            "input.value": '{"city": "Lyon"}',
            "output.value": "census timed out" if fails else "Lyon: 522,250",
        },
    )
    recorder.span(
        "execute_tool census_lookup",
        parent=outer,
        start=T0 + 2 * MS,
        end=T0 + 3 * MS,
        attributes={
            c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL,
            c.GEN_AI_TOOL_NAME: "census_lookup",
        },
        error="census timed out" if fails else None,
    )
    return recorder.spans


@pytest.mark.parametrize("fails", [False, True])
def test_a_tool_call_recorded_by_two_instrumentations_is_one_step(fails: bool) -> None:
    result = assemble_trajectory("r", span_records(tool_recorded_twice_spans(fails=fails)))
    (step,) = result.steps
    assert (step.agent, step.kind, step.tool_name) == ("researcher", StepKind.TOOL, "census_lookup")
    assert step.metadata["span_name"] == "researcher.census_lookup"
    assert step.tool_arguments == '{"city": "Lyon"}'
    if fails:
        # The error only the inner record saw is the step's.
        assert step.status is StepStatus.ERROR and step.error == "census timed out"
        assert step.content == "census timed out"
    else:
        assert step.status is not StepStatus.ERROR
        assert step.content == step.tool_result == "Lyon: 522,250"


def test_a_tool_span_around_other_work_stays_a_container() -> None:
    recorder = SpanRecorder()
    delegate = recorder.span(
        "execute_tool task_researcher",
        start=T0,
        end=T0 + 10 * MS,
        attributes={c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL, c.GEN_AI_TOOL_NAME: "delegate"},
    )
    recorder.span(
        "execute_tool census_lookup",
        parent=delegate,
        start=T0 + MS,
        end=T0 + 2 * MS,
        attributes={c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL, c.GEN_AI_TOOL_NAME: "census"},
    )
    result = assemble_trajectory("r", span_records(recorder.spans))
    assert [s.tool_name for s in result.steps] == ["census"]


@pytest.mark.parametrize(
    ("output", "answer"),
    [
        # An AutoGen TaskResult: the last message with text, not the tool events.
        (
            {
                "messages": [
                    {"source": "user", "content": "Lyon?", "type": "TextMessage"},
                    {"source": "writer", "content": "Lyon has 522,250.", "type": "TextMessage"},
                    {"source": "writer", "content": [{"name": "f"}], "type": "ToolCallEvent"},
                ],
                "stop_reason": "Text 'TERMINATE' mentioned",
            },
            "Lyon has 522,250.",
        ),
        ({"messages": [{"kwargs": {"content": "Done."}, "type": "constructor"}]}, "Done."),
        ({"messages": []}, '{"messages": []}'),
    ],
)
def test_a_root_output_holding_the_conversation_answers_with_its_last_message(
    output: dict[str, object], answer: str
) -> None:
    recorder = SpanRecorder()
    text = json.dumps(output)
    root = recorder.span(
        "RoundRobinGroupChat.run_stream",
        start=T0,
        end=T0 + 10 * MS,
        attributes={"openinference.span.kind": "CHAIN", "output.value": text},
    )
    recorder.span(
        "create",
        parent=root,
        start=T0 + MS,
        end=T0 + 2 * MS,
        attributes={c.GEN_AI_OPERATION_NAME: c.OP_CHAT, c.GEN_AI_OUTPUT_MESSAGES: "x"},
    )
    result = assemble_trajectory("r", span_records(recorder.spans))
    assert result.final_answer == answer


def _graph_spans(*, tool_fails: bool = False) -> SpanRecorder:
    """A graph whose `researcher` node asks for a tool that a separate `tools` node runs,
    then a `writer` node answers (LangGraph's ToolNode pattern)."""

    def node(name: str) -> dict[str, object]:
        return {c.OPENINFERENCE_SPAN_KIND: c.OI_KIND_CHAIN, c.OI_GRAPH_NODE_ID: name}

    recorder = SpanRecorder()
    root = recorder.span("graph", start=T0, end=T0 + 10 * MS)
    researcher = recorder.span("researcher", parent=root, start=T0, end=T0 + 2 * MS)
    recorder.span(
        "ChatOpenAI",
        parent=researcher,
        start=T0,
        end=T0 + MS,
        attributes={
            c.OPENINFERENCE_SPAN_KIND: c.OI_KIND_LLM,
            c.OI_AGENT_NAME: "researcher",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "census",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": "{}",
        },
    )
    tools = recorder.span(
        "tools", parent=root, start=T0 + 3 * MS, end=T0 + 5 * MS, attributes=node("tools")
    )
    recorder.span(
        "census",
        parent=tools,
        start=T0 + 3 * MS,
        end=T0 + 4 * MS,
        attributes={
            c.OPENINFERENCE_SPAN_KIND: c.OI_KIND_TOOL,
            c.OI_TOOL_NAME: "census",
            c.OI_AGENT_NAME: "tools",
            **({} if tool_fails else {c.OI_OUTPUT_VALUE: "522,250"}),
        },
        error="CensusDown: timed out" if tool_fails else None,
    )
    recorder.span(
        "ChatOpenAI",
        parent=root,
        start=T0 + 6 * MS,
        end=T0 + 7 * MS,
        attributes={
            c.OPENINFERENCE_SPAN_KIND: c.OI_KIND_LLM,
            c.OI_AGENT_NAME: "writer",
            "llm.output_messages.0.message.content": "225,520",
        },
    )
    return recorder


def test_tool_steps_of_a_node_that_only_runs_tools_belong_to_the_agent_that_asked() -> None:
    result = assemble_trajectory("r", span_records(_graph_spans().spans))
    assert [(s.agent, s.kind, s.tool_name) for s in result.steps] == [
        ("researcher", StepKind.LLM, None),
        ("researcher", StepKind.TOOL, "census"),
        ("writer", StepKind.LLM, None),
    ]
    # Nobody asked for it: the tool keeps the agent it had.
    recorder = SpanRecorder()
    recorder.span(
        "census",
        start=T0,
        end=T0 + MS,
        attributes={c.OPENINFERENCE_SPAN_KIND: c.OI_KIND_TOOL, c.OI_TOOL_NAME: "census"},
    )
    (alone,) = assemble_trajectory("r", span_records(recorder.spans)).steps
    assert alone.agent != "researcher" and alone.kind is StepKind.TOOL


def test_a_failed_step_that_produced_nothing_reads_as_its_error() -> None:
    result = assemble_trajectory("r", span_records(_graph_spans(tool_fails=True).spans))
    failed = result.steps[1]
    assert (failed.agent, failed.status) == ("researcher", StepStatus.ERROR)
    assert failed.content == failed.error == "CensusDown: timed out"


def test_a_root_output_quoting_the_last_reply_answers_with_the_reply() -> None:
    def run(root_output: str) -> str | None:
        recorder = SpanRecorder()
        root = recorder.span(
            "workflow.run",
            start=T0,
            end=T0 + 3 * MS,
            attributes={c.OPENINFERENCE_SPAN_KIND: c.OI_KIND_CHAIN, c.OI_OUTPUT_VALUE: root_output},
        )
        recorder.span(
            "llm",
            parent=root,
            start=T0,
            end=T0 + MS,
            attributes={
                c.OPENINFERENCE_SPAN_KIND: c.OI_KIND_LLM,
                c.OI_AGENT_NAME: "writer",
                "llm.output_messages.0.message.content": "Lyon has 225,520 inhabitants.",
            },
        )
        return assemble_trajectory("r", span_records(recorder.spans)).final_answer

    cut_short = (
        "StopEvent(result=AgentOutput(blocks=[TextBlock(text='Lyon has 225,520 inhabitants.')"
        "]), stru..."
    )
    assert run(cut_short) == "Lyon has 225,520 inhabitants."
    # A root that says more than the reply, unquoted, is the answer as it is.
    assert run("Summary: Lyon has 225,520 inhabitants.") == "Summary: Lyon has 225,520 inhabitants."


# --- agent turns without model spans, programs as agents, crews' tasks ----------------------


def _crew_without_model_spans() -> list[SpanRecord]:
    """CrewAI traced by its own instrumentation alone: task spans (AGENT) around tool spans,
    no LLM span anywhere."""
    recorder = SpanRecorder()
    tasks = json.dumps(
        [
            {"description": "What is the population of Lyon?", "agent_role": "Researcher"},
            {"description": "Write one sentence.", "agent_role": "Writer"},
        ]
    )
    crew = recorder.tracer.start_span(
        "Crew_1.kickoff",
        start_time=T0,
        attributes={
            c.OPENINFERENCE_SPAN_KIND: "CHAIN",
            c.CREWAI_CREW_TASKS: tasks,
            c.OI_OUTPUT_VALUE: json.dumps({"raw": "Lyon, a city of 225,520.", "tasks_output": []}),
        },
    )
    researcher = recorder.tracer.start_span(
        "Researcher._execute_core",
        context=trace.set_span_in_context(crew),
        start_time=T0 + MS,
        attributes={
            c.OPENINFERENCE_SPAN_KIND: "AGENT",
            c.OI_GRAPH_NODE_ID: "Researcher",
            c.OI_INPUT_VALUE: json.dumps({"agent": {"role": "Researcher"}, "context": ""}),
            c.OI_OUTPUT_VALUE: json.dumps({"raw": "Lyon has 225,520 inhabitants."}),
        },
    )
    recorder.span(
        "census_lookup.run",
        parent=researcher,
        start=T0 + 2 * MS,
        end=T0 + 3 * MS,
        attributes={
            c.OPENINFERENCE_SPAN_KIND: "TOOL",
            c.OI_TOOL_NAME: "census_lookup",
            c.OI_INPUT_VALUE: '{"city": "Lyon"}',
            c.OI_OUTPUT_VALUE: "Lyon: 522,250 inhabitants",
        },
    )
    researcher.end(end_time=T0 + 4 * MS)
    recorder.span(
        "Writer._execute_core",
        parent=crew,
        start=T0 + 5 * MS,
        end=T0 + 6 * MS,
        attributes={
            c.OPENINFERENCE_SPAN_KIND: "AGENT",
            c.OI_GRAPH_NODE_ID: "Writer",
            c.OI_OUTPUT_VALUE: json.dumps({"raw": "Lyon, a city of 225,520."}),
        },
    )
    crew.end(end_time=T0 + 7 * MS)
    return span_records(recorder.spans)


def test_an_agent_span_with_no_model_call_beneath_is_its_answer_after_its_tools() -> None:
    result = assemble_trajectory("r", _crew_without_model_spans())
    assert [(s.agent, s.kind, s.tool_name, s.content) for s in result.steps] == [
        ("Researcher", StepKind.TOOL, "census_lookup", "Lyon: 522,250 inhabitants"),
        ("Researcher", StepKind.MESSAGE, None, "Lyon has 225,520 inhabitants."),
        ("Writer", StepKind.MESSAGE, None, "Lyon, a city of 225,520."),
    ]
    assert result.final_answer == "Lyon, a city of 225,520."


def _delegating_tool(*, member_inside: bool) -> list[SpanRecord]:
    """A leader's tool that hands the task to a member agent whose run is traced beside the
    tool's span, not beneath it (Agno's `delegate_task_to_member`); `member_inside`: the
    member's model turns begin while the tool runs, else after it ended (two tools)."""
    recorder = SpanRecorder()
    leader = recorder.tracer.start_span(
        "coordinator.run",
        start_time=T0,
        attributes={c.OPENINFERENCE_SPAN_KIND: "AGENT", c.OI_AGENT_NAME: "coordinator"},
    )

    def llm(parent: trace.Span, at: int, text: str | None, tool: str | None = None) -> None:
        attributes: dict[str, str] = {
            c.OPENINFERENCE_SPAN_KIND: "LLM",
            "llm.output_messages.0.message.role": "assistant",
        }
        if text is not None:
            attributes["llm.output_messages.0.message.content"] = text
        if tool is not None:
            prefix = "llm.output_messages.0.message.tool_calls.0.tool_call.function."
            attributes[prefix + "name"] = tool
            attributes[prefix + "arguments"] = "{}"
        recorder.span("chat", parent=parent, start=at, end=at + MS // 2, attributes=attributes)

    def tool(parent: trace.Span, name: str, start: int, end: int, result: str) -> None:
        attributes = {
            c.OPENINFERENCE_SPAN_KIND: "TOOL",
            c.OI_TOOL_NAME: name,
            c.OI_OUTPUT_VALUE: result,
        }
        recorder.span(name, parent=parent, start=start, end=end, attributes=attributes)

    llm(leader, T0 + MS, None, "delegate")
    delegate_end = T0 + 9 * MS if member_inside else T0 + 3 * MS
    tool(leader, "delegate", T0 + 2 * MS, delegate_end, "Lyon has 225,520 inhabitants.")
    member_start = T0 + 3 * MS if member_inside else T0 + 4 * MS
    member = recorder.tracer.start_span(
        "researcher.run",
        context=trace.set_span_in_context(leader),
        start_time=member_start,
        attributes={c.OPENINFERENCE_SPAN_KIND: "AGENT", c.OI_AGENT_NAME: "researcher"},
    )
    llm(member, member_start + MS, None, "census_lookup")
    tool(member, "census_lookup", member_start + 2 * MS, member_start + 3 * MS, "522,250")
    llm(member, member_start + 4 * MS, "Lyon has 225,520 inhabitants.")
    member.end(end_time=member_start + 5 * MS)
    llm(leader, T0 + 10 * MS, "Lyon has 225,520 inhabitants.")
    leader.end(end_time=T0 + 11 * MS)
    return span_records(recorder.spans)


def test_a_tool_during_which_another_agent_worked_reads_at_its_end() -> None:
    result = assemble_trajectory("r", _delegating_tool(member_inside=True))
    assert [(s.agent, s.kind, s.tool_name) for s in result.steps] == [
        ("coordinator", StepKind.LLM, None),
        ("researcher", StepKind.LLM, None),
        ("researcher", StepKind.TOOL, "census_lookup"),
        ("researcher", StepKind.LLM, None),
        # The member's answer, returned to the leader: after the member gave it.
        ("coordinator", StepKind.TOOL, "delegate"),
        ("coordinator", StepKind.LLM, None),
    ]


def test_a_tool_with_no_model_turn_during_it_reads_at_its_start() -> None:
    result = assemble_trajectory("r", _delegating_tool(member_inside=False))
    assert [(s.agent, s.tool_name) for s in result.steps][:3] == [
        ("coordinator", None),
        ("coordinator", "delegate"),
        ("researcher", None),
    ]


def _spans_with_event_spans() -> list[SpanRecord]:
    """An agent, its tool and its model, each with an instant child span of its own kind
    recording one of its events (BeeAI: `error` beneath the tool that failed,
    `final_answer` beneath the agent, `error` beneath a model call)."""
    recorder = SpanRecorder()
    agent = recorder.tracer.start_span(
        "researcher",
        start_time=T0,
        attributes={
            c.OPENINFERENCE_SPAN_KIND: "AGENT",
            c.OI_AGENT_NAME: "researcher",
            c.OI_INPUT_VALUE: "Population of Lyon",
            c.OI_OUTPUT_VALUE: "Lyon has 225,520 inhabitants.",
        },
    )
    model = recorder.tracer.start_span(
        "OpenAIChatModel",
        context=trace.set_span_in_context(agent),
        start_time=T0 + MS,
        attributes={
            c.OPENINFERENCE_SPAN_KIND: "LLM",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "census",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": "{}",
        },
    )
    recorder.span(
        "start",
        parent=model,
        start=T0 + MS,
        end=T0 + MS,
        attributes={c.OPENINFERENCE_SPAN_KIND: "LLM", c.OI_INPUT_VALUE: '{"input": []}'},
    )
    model.end(end_time=T0 + 2 * MS)
    census = recorder.tracer.start_span(
        "census",
        context=trace.set_span_in_context(agent),
        start_time=T0 + 3 * MS,
        attributes={
            c.OPENINFERENCE_SPAN_KIND: "TOOL",
            c.OI_TOOL_NAME: "census",
            c.OI_INPUT_VALUE: '{"city": "Lyon"}',
        },
    )
    recorder.span(
        "error",
        parent=census,
        start=T0 + 4 * MS,
        end=T0 + 4 * MS,
        attributes={
            c.OPENINFERENCE_SPAN_KIND: "TOOL",
            c.OI_OUTPUT_VALUE: "census service timed out",
        },
        error="Tool Error",
    )
    census.set_attribute(c.OI_OUTPUT_VALUE, "ToolError: census service timed out")
    census.end(end_time=T0 + 5 * MS)
    recorder.span(
        "final_answer",
        parent=agent,
        start=T0 + 6 * MS,
        end=T0 + 6 * MS,
        attributes={c.OPENINFERENCE_SPAN_KIND: "AGENT", c.OI_INPUT_VALUE: '{"delta": "…"}'},
    )
    agent.end(end_time=T0 + 7 * MS)
    return span_records(recorder.spans)


def test_an_instant_span_of_its_parents_kind_is_an_event_of_the_parent_not_a_step() -> None:
    result = assemble_trajectory("r", _spans_with_event_spans())
    assert [(s.agent, s.kind, s.tool_name, s.status) for s in result.steps] == [
        ("researcher", StepKind.LLM, None, StepStatus.UNSET),
        # The tool's own step, failed by the error its event recorded.
        ("researcher", StepKind.TOOL, "census", StepStatus.ERROR),
    ]
    assert result.steps[1].content == "ToolError: census service timed out"
    assert result.steps[1].error and "Tool Error" in result.steps[1].error
    assert result.agents == ("researcher",)


def test_a_failed_roots_output_is_its_error_not_the_final_answer() -> None:
    recorder = SpanRecorder()
    root = recorder.tracer.start_span(
        "coordinator.run",
        start_time=T0,
        attributes={
            c.OPENINFERENCE_SPAN_KIND: "AGENT",
            c.OI_AGENT_NAME: "coordinator",
            c.OI_INPUT_VALUE: "What is the population of Lyon?",
            c.OI_OUTPUT_VALUE: "scripted failure (500)",
        },
    )
    recorder.span(
        "chat",
        parent=root,
        start=T0 + MS,
        end=T0 + 2 * MS,
        attributes={c.OPENINFERENCE_SPAN_KIND: "LLM"},
        error="ModelProviderError: scripted failure (500)",
    )
    root.set_status(Status(StatusCode.ERROR, "run status: error"))
    root.end(end_time=T0 + 3 * MS)
    result = assemble_trajectory("r", span_records(recorder.spans))
    assert result.task == "What is the population of Lyon?"
    assert result.final_answer is None
    assert [(s.agent, s.status) for s in result.steps] == [("coordinator", StepStatus.ERROR)]


def test_a_crews_task_is_its_first_tasks_description_never_a_tools_arguments() -> None:
    result = assemble_trajectory("r", _crew_without_model_spans())
    assert result.task == "What is the population of Lyon?"


def test_a_tools_arguments_are_not_the_task() -> None:
    recorder = SpanRecorder()
    root = recorder.span("handle", start=T0, end=T0 + 10 * MS)
    recorder.span(
        "lookup",
        parent=root,
        start=T0 + MS,
        end=T0 + 2 * MS,
        attributes={c.OPENINFERENCE_SPAN_KIND: "TOOL", c.OI_INPUT_VALUE: '{"city": "Lyon"}'},
    )
    recorder.span(
        "chat",
        parent=root,
        start=T0 + 3 * MS,
        end=T0 + 4 * MS,
        attributes={
            c.GEN_AI_OPERATION_NAME: c.OP_CHAT,
            c.GEN_AI_INPUT_MESSAGES: input_messages(("user", "How big is Lyon?")),
            c.GEN_AI_OUTPUT_MESSAGES: output_messages("Big."),
        },
    )
    assert assemble_trajectory("r", span_records(recorder.spans)).task == "How big is Lyon?"


def test_an_agent_span_above_a_model_call_stays_a_container() -> None:
    recorder = SpanRecorder()
    agent = recorder.tracer.start_span(
        "Researcher._execute_core",
        start_time=T0,
        attributes={
            c.OPENINFERENCE_SPAN_KIND: "AGENT",
            c.OI_GRAPH_NODE_ID: "Researcher",
            c.OI_OUTPUT_VALUE: json.dumps({"raw": "42"}),
        },
    )
    recorder.span(
        "ChatCompletion",
        parent=agent,
        start=T0 + MS,
        end=T0 + 2 * MS,
        attributes={
            c.OPENINFERENCE_SPAN_KIND: "LLM",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": "42",
        },
    )
    agent.end(end_time=T0 + 3 * MS)
    result = assemble_trajectory("r", span_records(recorder.spans))
    assert [(s.agent, s.kind) for s in result.steps] == [("Researcher", StepKind.LLM)]


def test_with_no_agent_span_the_outermost_chain_is_the_agent() -> None:
    """DSPy: `ReAct.forward` (CHAIN) above predictor and adapter chains, LM and tool spans."""
    recorder = SpanRecorder({"service.name": "my-service"})
    program = recorder.tracer.start_span(
        "ReAct.forward",
        start_time=T0,
        attributes={
            c.OPENINFERENCE_SPAN_KIND: "CHAIN",
            c.OI_INPUT_VALUE: json.dumps({"input_args": {"question": "How big is Lyon?"}}),
            c.OI_OUTPUT_VALUE: json.dumps({"reasoning": "…", "answer": "Big."}),
        },
    )
    predict = recorder.tracer.start_span(
        "Predict.forward",
        context=trace.set_span_in_context(program),
        start_time=T0 + MS,
        attributes={c.OPENINFERENCE_SPAN_KIND: "CHAIN"},
    )
    recorder.span(
        "LM.__call__",
        parent=predict,
        start=T0 + 2 * MS,
        end=T0 + 3 * MS,
        attributes={c.OPENINFERENCE_SPAN_KIND: "LLM", c.OI_OUTPUT_VALUE: "look it up"},
    )
    predict.end(end_time=T0 + 4 * MS)
    recorder.span(
        "census_lookup.__call__",
        parent=program,
        start=T0 + 5 * MS,
        end=T0 + 6 * MS,
        attributes={c.OPENINFERENCE_SPAN_KIND: "TOOL", c.OI_OUTPUT_VALUE: "522,250"},
    )
    program.end(end_time=T0 + 7 * MS)
    result = assemble_trajectory("r", span_records(recorder.spans))
    assert [(s.agent, s.kind, s.tool_name) for s in result.steps] == [
        ("ReAct", StepKind.LLM, None),
        ("ReAct", StepKind.TOOL, "census_lookup"),
    ]
    # The program's call arguments gathered under one name hold the user's text.
    assert result.task == "How big is Lyon?"
    assert result.final_answer == "Big."


def test_task_text_looks_inside_arguments_gathered_under_one_name() -> None:
    assert task_text('{"input_args": {"question": "How big is Lyon?"}}') == "How big is Lyon?"
    # Arguments under several names name no user text: the task is looked for elsewhere.
    assert task_text('{"a": {"question": "x"}, "b": 1}') is None
