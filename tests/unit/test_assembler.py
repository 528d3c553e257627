"""Assembling trajectories from real SDK spans: replays, arrival order, orphans, fallbacks,
run metadata."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from pathlib import Path

import pytest

from faultfinder import conventions as c
from faultfinder.attributors.model import Step, StepKind, StepStatus, Trajectory
from faultfinder.datasets import resolve_datasets_dir
from faultfinder.reading import assembler
from faultfinder.reading.assembler import assemble_trajectory
from faultfinder.reading.model import SpanRecord
from tests.otlp_helpers import (
    MS,
    T0,
    SpanRecorder,
    framework_spans,
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
