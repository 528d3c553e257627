"""The user's later turns, seen only inside model calls' inputs (assembler rule 7): a
customer's reply to what an agent said in the run becomes a user step before the first
model call that saw it; what a step before it already said, fed back in the user's role
(a ReAct loop's observation, a group chat's agent), a named participant's message and the
user messages of a prompt's examples do not."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from faultfinder import conventions as c
from faultfinder.attributors.learned.step_model import is_conversation
from faultfinder.attributors.model import StepKind
from faultfinder.reading.assembler import assemble_trajectory
from faultfinder.reading.model import SpanRecord
from tests.otlp_helpers import MS, T0, SpanRecorder, input_messages, output_messages, span_records

TASK = "What is in my order #W26?"
CALL = 'order_details({"order_id": "#W26"})'
REPORT = '{"items": ["Water Bottle", "Office Chair"]}'
ANSWER = "Your order #W26 holds a Water Bottle and an Office Chair."
REPLY = "Please cancel the chair, it is the wrong colour."
SYSTEM = ("system", "You run a shop.")


def chat(recorder: SpanRecorder, parent: Any, at: int, inputs: str, output: str) -> None:
    recorder.span(
        "chat gpt-4o",
        parent=parent,
        start=T0 + at * MS,
        end=T0 + (at + 1) * MS - 1,
        attributes={
            c.GEN_AI_OPERATION_NAME: c.OP_CHAT,
            c.GEN_AI_AGENT_NAME: "shop",
            c.GEN_AI_INPUT_MESSAGES: inputs,
            c.GEN_AI_OUTPUT_MESSAGES: output_messages(output),
        },
    )


def tool(recorder: SpanRecorder, parent: Any, at: int, result: str) -> None:
    recorder.span(
        "execute_tool order_details",
        parent=parent,
        start=T0 + at * MS,
        end=T0 + (at + 1) * MS - 1,
        attributes={
            c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL,
            c.GEN_AI_AGENT_NAME: "shop",
            c.GEN_AI_TOOL_NAME: "order_details",
            c.GEN_AI_TOOL_CALL_RESULT: result,
        },
    )


def a_chat(*later: tuple[str, str]) -> list[SpanRecord]:
    """The model calls a tool, answers (`ANSWER`); the third call's input holds the
    conversation so far and then `later`."""
    recorder = SpanRecorder()
    root = recorder.tracer.start_span("support chat", start_time=T0)
    chat(recorder, root, 1, input_messages(SYSTEM, ("user", TASK)), CALL)
    tool(recorder, root, 2, REPORT)
    so_far = [SYSTEM, ("user", TASK), ("assistant", CALL), ("tool", REPORT)]
    chat(recorder, root, 3, input_messages(*so_far), ANSWER)
    chat(recorder, root, 4, input_messages(*so_far, ("assistant", ANSWER), *later), "Done.")
    root.end(end_time=T0 + 6 * MS)
    return span_records(recorder.spans)


def kinds_of(spans: list[SpanRecord]) -> list[StepKind]:
    return [step.kind for step in assemble_trajectory("r", spans).steps]


ASKED = [StepKind.LLM, StepKind.TOOL, StepKind.LLM, StepKind.LLM]
"""The steps of `a_chat` with no turn of the user's after the first request."""


def test_the_customers_reply_is_a_user_step_before_the_call_that_saw_it() -> None:
    trajectory = assemble_trajectory("r", a_chat(("user", REPLY)))
    assert [(step.kind, step.agent) for step in trajectory.steps] == [
        (StepKind.LLM, "shop"), (StepKind.TOOL, "shop"), (StepKind.LLM, "shop"),
        (StepKind.HUMAN, "user"), (StepKind.LLM, "shop"),
    ]  # fmt: skip
    assert trajectory.steps[3].content == REPLY
    assert [step.index for step in trajectory.steps] == [0, 1, 2, 3, 4]
    assert trajectory.task == TASK  # the first request, not the reply
    assert is_conversation(trajectory)


def test_a_report_or_an_answer_fed_back_as_the_user_is_no_turn_of_the_users() -> None:
    assert kinds_of(a_chat(("user", f"Observation: {REPORT}"))) == ASKED
    assert kinds_of(a_chat(("user", REPORT))) == ASKED
    # The first call's own words, relayed in the user's role (a group chat).
    assert kinds_of(a_chat(("user", f"shop said: {CALL}"))) == ASKED


def test_a_named_participant_in_the_users_role_is_not_the_user() -> None:
    spans = a_chat(("user", "replaced below by a named participant's message"))
    last = max(spans, key=lambda span: span.start_time_unix_nano)
    messages = json.loads(str(last.attributes[c.GEN_AI_INPUT_MESSAGES]))
    messages[-1] = {"role": "user", "name": "critic", "content": "Chairs are cheaper elsewhere."}
    attributes = {**last.attributes, c.GEN_AI_INPUT_MESSAGES: json.dumps(messages)}
    spans = [replace(span, attributes=attributes) if span is last else span for span in spans]
    assert kinds_of(spans) == ASKED


def test_the_examples_in_a_prompt_are_no_turns() -> None:
    """A prompt's demonstrations (user, assistant, user, …, as DSPy's adapters write them)
    put user messages after assistant ones that no step of the run said."""
    recorder = SpanRecorder()
    root = recorder.tracer.start_span("program", start_time=T0)
    demos = [("user", "question: 2 + 2?"), ("assistant", "answer: 4"), ("user", "question: 3 + 5?")]
    chat(recorder, root, 1, input_messages(SYSTEM, *demos), "answer: 8")
    chat(recorder, root, 2, input_messages(SYSTEM, *demos[:2], ("user", "question: 9 - 1?")),
         "answer: 8")  # fmt: skip
    root.end(end_time=T0 + 4 * MS)
    assert kinds_of(span_records(recorder.spans)) == [StepKind.LLM, StepKind.LLM]


def test_a_short_reply_is_the_users_own_and_a_labelled_short_report_is_not() -> None:
    """ "Yes" appears inside earlier steps' words but is the customer's confirmation;
    "Observation: 7" relays a tool's report of "7"."""
    steps = assemble_trajectory("r", a_chat(("user", "Yes"))).steps
    assert (steps[3].kind, steps[3].content) == (StepKind.HUMAN, "Yes")
    recorder = SpanRecorder()
    root = recorder.tracer.start_span("react", start_time=T0)
    chat(recorder, root, 1, input_messages(("user", TASK)), 'count({"of": "chairs"})')
    tool(recorder, root, 2, "7")
    later = input_messages(("user", TASK), ("assistant", 'count({"of": "chairs"})'),
                           ("user", "Observation: 7"))  # fmt: skip
    chat(recorder, root, 3, later, "There are 7 chairs.")
    root.end(end_time=T0 + 5 * MS)
    assert kinds_of(span_records(recorder.spans)) == [StepKind.LLM, StepKind.TOOL, StepKind.LLM]


def test_a_turn_seen_by_every_later_call_is_one_step_and_openinference_inputs_count() -> None:
    recorder = SpanRecorder()
    root = recorder.tracer.start_span("support chat", start_time=T0)
    so_far = [("user", TASK)]
    for at, output in ((1, ANSWER), (2, "Cancelling."), (3, "Done.")):
        if at == 2:
            so_far.append(("user", REPLY))
        flattened: dict[str, Any] = {c.OPENINFERENCE_SPAN_KIND: c.OI_KIND_LLM}
        for n, (role, text) in enumerate(so_far):
            flattened[f"{c.OI_LLM_INPUT_MESSAGES}.{n}.{c.OI_MESSAGE_ROLE}"] = role
            flattened[f"{c.OI_LLM_INPUT_MESSAGES}.{n}.{c.OI_MESSAGE_CONTENT}"] = text
        flattened[f"{c.OI_LLM_OUTPUT_MESSAGES}.0.{c.OI_MESSAGE_ROLE}"] = "assistant"
        flattened[f"{c.OI_LLM_OUTPUT_MESSAGES}.0.{c.OI_MESSAGE_CONTENT}"] = output
        recorder.span(
            "ChatCompletion", parent=root, start=T0 + at * MS, end=T0 + (at + 1) * MS - 1,
            attributes=flattened,
        )  # fmt: skip
        so_far.append(("assistant", output))
    root.end(end_time=T0 + 5 * MS)
    steps = assemble_trajectory("r", span_records(recorder.spans)).steps
    assert [(step.kind, step.content) for step in steps] == [
        (StepKind.LLM, ANSWER), (StepKind.HUMAN, REPLY), (StepKind.LLM, "Cancelling."),
        (StepKind.LLM, "Done."),
    ]  # fmt: skip
