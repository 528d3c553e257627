"""A LlamaIndex workflow's final answer is the reply its stop event holds, however the
instrumentation recorded the event (OpenInference's repr, cut short or not; OpenLLMetry's
JSON), never the event's repr."""

from __future__ import annotations

import json

import pytest

from faultfinder import conventions as c
from faultfinder.reading.assembler import assemble_trajectory
from tests.otlp_helpers import MS, T0, SpanRecorder, span_records

REPLY = 'Lyon\'s population:\n- 225,520 inhabitants ("census").'


def _answer(root_attributes: dict[str, str], last_reply: str = REPLY) -> str | None:
    """The final answer of a workflow run whose root span holds `root_attributes` and whose
    last step is the writer's model call replying `last_reply`."""
    recorder = SpanRecorder()
    root = recorder.span("AgentWorkflow.run", start=T0, end=T0 + 3 * MS, attributes=root_attributes)
    recorder.span(
        "OpenAILike.astream_chat",
        parent=root,
        start=T0 + MS,
        end=T0 + 2 * MS,
        attributes={
            c.OPENINFERENCE_SPAN_KIND: c.OI_KIND_LLM,
            c.OI_AGENT_NAME: "writer",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": last_reply,
        },
    )
    return assemble_trajectory("r", span_records(recorder.spans)).final_answer


def _stop_event(reply: str) -> str:
    return (
        "StopEvent(result=AgentOutput(response=ChatMessage(role=<MessageRole.ASSISTANT:"
        " 'assistant'>, additional_kwargs={}, blocks=[TextBlock(block_type='text',"
        f" text={reply!r})]), structured_response=None, current_agent_name='writer',"
        " raw={'id': 'x'}, tool_calls=[], retry_messages=[]))"
    )


def _openinference(output: str) -> dict[str, str]:
    return {c.OPENINFERENCE_SPAN_KIND: c.OI_KIND_CHAIN, c.OI_OUTPUT_VALUE: output}


def test_a_stop_event_repr_answers_with_its_reply_text() -> None:
    # A reply with a newline and quotes is escaped in the repr: the answer is the text.
    assert _answer(_openinference(_stop_event(REPLY))) == REPLY


def test_a_stop_event_repr_cut_short_answers_with_the_reply_it_begins() -> None:
    full = _stop_event(REPLY)
    cut = full[: full.index("inhabitants")] + "..."  # the instrumentation cut the reply itself
    assert _answer(_openinference(cut)) == REPLY
    # A cut reply no step completes is still the reply's text, never the repr.
    other = "Nothing to report."
    assert (_answer(_openinference(cut), last_reply=other) or "").startswith("Lyon's population:\n")


def test_a_stop_event_whose_reply_is_not_the_last_step_answers_with_the_event() -> None:
    # The workflow's result is what the user got, whatever the last model call said.
    assert _answer(_openinference(_stop_event(REPLY)), last_reply="thinking…") == REPLY


@pytest.mark.parametrize(
    "event",
    [
        {
            "result": {
                "response": {
                    "role": "assistant",
                    "blocks": [{"block_type": "text", "text": REPLY}],
                },
                "current_agent_name": "writer",
                "tool_calls": [],
            }
        },
        {"result": _stop_event(REPLY)},
    ],
    ids=["event-json", "repr-in-json"],
)
def test_openllmetrys_workflow_output_answers_with_the_reply(event: dict[str, object]) -> None:
    attributes = {
        "traceloop.span.kind": "workflow",
        c.TRACELOOP_ENTITY_OUTPUT: json.dumps(event),
    }
    assert _answer(attributes, last_reply="thinking…") == REPLY


def test_an_event_with_no_reply_text_stays_as_it_is() -> None:
    event = "StopEvent(result=None)"
    assert _answer(_openinference(event), last_reply="thinking…") == event
