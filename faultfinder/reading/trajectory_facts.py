"""A run's facts in its trajectory: the task, the ground truth, the final answer and the
dataset's metadata and labels, read from the run's spans.

`faultfinder.run.*`, `faultfinder.dataset.*` and `faultfinder.label.*` are read from
the root first, then from the other spans in start order. The task falls back to the
first human step's text, then the root's (or first step's) user input, never an object's
repr; the final answer falls back to the output of a root that is not a step (the reply a
LlamaIndex workflow's stop event holds, not the event; a root with none: the last step,
when it is a model's reply that ended well and calls no tool).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from faultfinder import conventions as c
from faultfinder.attributors.model import Step, StepKind, StepStatus, Trajectory
from faultfinder.reading.mapping import MappedSpan, as_text, requests_tools
from faultfinder.reading.model import AttributeValue, SpanRecord

__all__ = [
    "WorkflowResult",
    "answer_text",
    "task_text",
    "trajectory_with_facts",
    "workflow_result",
]


def _first_attribute(
    root: SpanRecord, ordered: Sequence[SpanRecord], key: str
) -> AttributeValue | None:
    for span in (root, *ordered):
        value = span.attributes.get(key)
        if value is not None:
            return value
    return None


def trajectory_with_facts(
    run_id: str,
    ordered: Sequence[SpanRecord],
    root: SpanRecord,
    root_facts: MappedSpan,
    first_step_facts: MappedSpan | None,
    step_spans: Sequence[SpanRecord],
    steps: tuple[Step, ...],
) -> Trajectory:
    """The trajectory of `steps`, with the run's facts read from its spans: `root` and
    the others in start order (`ordered`), `root_facts` (the root's mapping) and
    `first_step_facts` (the first step that is not a tool's, if any)."""

    def attribute(key: str) -> str | None:
        text: str | None = as_text(_first_attribute(root, ordered, key))
        return text

    task = _first_of(
        attribute(c.RUN_TASK),
        next((step.content for step in steps if step.kind is StepKind.HUMAN), None),
        root_facts.user_input,
        task_text(root_facts.input),
        _first_crew_task(root),
        _without_task_heading(first_step_facts.user_input) if first_step_facts else None,
        task_text(first_step_facts.input) if first_step_facts else None,
        # Call arguments naming no user text are still better than no task at all.
        root_facts.input,
    )
    final_answer = attribute(c.RUN_FINAL_ANSWER)
    if final_answer is None and not any(span is root for span in step_spans):
        # A root that failed tells its error in its output (Agno, BeeAI): that is no answer.
        failed = root_facts.status is StepStatus.ERROR
        result = None if failed else workflow_result(root.attributes)
        final_answer = None if failed else answer_text(root_facts.content)
        if result is not None:
            final_answer = _completed(result, _last_reply(step_spans, steps))
        elif final_answer is None:
            final_answer = _last_reply(step_spans, steps)
        else:
            final_answer = _quoted_reply(final_answer, step_spans, steps)
    return Trajectory(
        run_id=run_id,
        task=task or "",
        ground_truth=attribute(c.RUN_GROUND_TRUTH),
        final_answer=final_answer,
        steps=steps,
        metadata=_metadata(root, ordered, attribute),
    )


_TASK_KEYS = ("task", "input", "query", "question", "prompt", "user_input", "message", "messages")
"""Where a framework's JSON call arguments put the user's text (smolagents `run(task=…)`,
AutoGen `run(task=…)`, LangChain `{"input": …}`, `{"messages": [...]}`)."""


def task_text(text: str | None) -> str | None:
    """The user's text in an input that is a JSON object of call arguments (`{"task":
    "…", "stream": false}`); None when such arguments hold none (LlamaIndex's
    `{"start_event": "AgentWorkflowStartEvent()", …}`); other input as it is."""
    if not text or not text.lstrip().startswith(("{", "[")):
        return text
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return text
    return _user_text(value, depth=0)


_OBJECT_REPR = re.compile(r"\s*[A-Z]\w*\(\w+=")
"""The start of a Python object's repr (`ActionStep(step_number=1, …`)."""
_SMOLAGENTS_TASK_HEADING = "New task:\n"
"""What smolagents puts before the user's task in the message giving it to the model."""


def _without_task_heading(text: str | None) -> str | None:
    """A model call's user text without smolagents' heading of the task."""
    return text.removeprefix(_SMOLAGENTS_TASK_HEADING) if text else text


def _user_text(value: object, *, depth: int) -> str | None:
    if depth > 4:
        return None
    if isinstance(value, str):
        # A framework object's repr (smolagents' `{"memory_step": "ActionStep(…)"}`) is
        # no user's text.
        return None if _OBJECT_REPR.match(value) else value.strip() or None
    if isinstance(value, list):
        # Messages: the last one a user wrote, else the last with text.
        for item in reversed(value):
            if isinstance(item, dict) and str(item.get("role", item.get("type", ""))).lower() in (
                "user",
                "human",
                "usermessage",
                "humanmessage",
            ):
                found = _user_text(item.get("content"), depth=depth + 1)
                if found:
                    return found
        texts = [text for item in value if (text := _user_text(item, depth=depth + 1))]
        return texts[-1] if texts else None
    if isinstance(value, dict):
        for key in (*_TASK_KEYS, "content", "text"):
            if key in value and (found := _user_text(value[key], depth=depth + 1)):
                return found
        if len(value) == 1:
            # The arguments gathered under one name (DSPy's `{"input_args": {…}}`).
            return _user_text(next(iter(value.values())), depth=depth + 1)
        return None
    return None


@dataclass(frozen=True, slots=True)
class WorkflowResult:
    """The reply text a LlamaIndex workflow's stop event holds; `cut_short` when the
    instrumentation cut the event's text before the reply ended."""

    text: str
    cut_short: bool = False


_STOP_EVENT = re.compile(r"\s*(?:StopEvent|AgentOutput)\(")
_REPLY_AT = re.compile(
    r"^\s*StopEvent\(result=(?=['\"])"
    r"|\bTextBlock\((?:block_type='text', )?text="
    r"|\bChatMessage\((?:role=<[^>]*>, )?(?:additional_kwargs=\{\}, )?content="
)
"""Where a stop event's repr quotes the reply: a plain result (`StopEvent(result='…')`), an
AgentWorkflow's `AgentOutput(response=ChatMessage(… blocks=[TextBlock(… text='…')]))`, or
an older `ChatMessage(…, content='…')`."""
_PY_STRING = re.compile(r"""(?P<q>['"])(?P<body>(?:\\.|(?!(?P=q)).)*)(?P<end>(?P=q))?""", re.DOTALL)
"""A Python string literal in a repr, possibly cut short (no closing quote)."""


def workflow_result(attrs: Mapping[str, AttributeValue]) -> WorkflowResult | None:
    """The reply a LlamaIndex workflow's span output holds: OpenInference's `output.value`,
    the stop event's repr (`StopEvent(result=AgentOutput(response=ChatMessage(…)))`, often
    cut short), or OpenLLMetry's `traceloop.entity.output`, the event as JSON (`{"result":
    {"response": {"blocks": [{"text": …}]}}}`, or the repr as a string). None when the
    output is no such event or no reply text can be read from it."""
    for key in (c.OI_OUTPUT_VALUE, c.TRACELOOP_ENTITY_OUTPUT):
        text = as_text(attrs.get(key))
        if not text:
            continue
        if text.lstrip().startswith("{"):
            found = _event_json_reply(text)
        elif _STOP_EVENT.match(text):
            found = _event_repr_reply(text)
        else:
            found = None
        if found is not None:
            return found
    return None


def _event_json_reply(text: str) -> WorkflowResult | None:
    try:
        event = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    result = event.get("result") if isinstance(event, dict) else None
    if isinstance(result, str):
        # A plain result, or an event OpenLLMetry could only serialise as its repr.
        return _event_repr_reply(result) or (WorkflowResult(result) if result.strip() else None)
    response = result.get("response") if isinstance(result, dict) else None
    if not isinstance(response, dict):
        return None
    blocks = response.get("blocks")
    texts = [
        block["text"]
        for block in (blocks if isinstance(blocks, list) else ())
        if isinstance(block, dict) and isinstance(block.get("text"), str)
    ]
    content = response.get("content")
    reply = "\n".join(texts) if texts else content if isinstance(content, str) else None
    return WorkflowResult(reply) if reply and reply.strip() else None


def _event_repr_reply(text: str) -> WorkflowResult | None:
    for at in _REPLY_AT.finditer(text):
        literal = _PY_STRING.match(text, at.end())
        if literal is None:
            continue
        quote, body = literal["q"], literal["body"]
        cut_short = literal["end"] is None
        if cut_short:
            # OpenInference cuts a long repr with "...": the literal is a prefix of the reply.
            body = body.removesuffix("...")
            if (len(body) - len(body.rstrip("\\"))) % 2:
                body = body[:-1]  # an escape cut in half
        try:
            reply = ast.literal_eval(f"{quote}{body}{quote}")
        except (SyntaxError, ValueError):
            continue
        if isinstance(reply, str) and reply.strip():
            return WorkflowResult(reply, cut_short=cut_short)
    return None


def _completed(result: WorkflowResult, reply: str | None) -> str:
    """A workflow's reply, completed from the run's last reply where it was cut short."""
    if not result.cut_short:
        return result.text
    if reply is not None and reply.startswith(result.text):
        return reply
    return result.text + "…"


def _quoted_reply(text: str, step_spans: Sequence[SpanRecord], steps: Sequence[Step]) -> str:
    """The run's last reply when the root's output is an object serialised around it, the
    reply quoted inside (LlamaIndex's `StopEvent(result=AgentOutput(… text='…')…)`, cut
    short); else the root's output as it is."""
    reply = _last_reply(step_spans, steps)
    if reply is None or reply == text.strip():
        return text
    quoted = any(f"{quote}{reply}" in text for quote in ("'", '"'))
    return reply if quoted else text


def _last_reply(step_spans: Sequence[SpanRecord], steps: Sequence[Step]) -> str | None:
    """The run's last step when it is a model's reply that answers (ended without error and
    calls no tool): the final answer of a run whose root carries no output (the OpenAI
    Agents SDK's trace span)."""
    if not steps:
        return None
    last, span = steps[-1], step_spans[-1]
    if last.kind is not StepKind.LLM or last.status is StepStatus.ERROR or requests_tools(span):
        return None
    return last.content.strip() or None


def answer_text(text: str | None) -> str | None:
    """The answer in an output that is a JSON object holding the conversation (`{"messages":
    [...], "stop_reason": …}`: an AutoGen team's result, a LangGraph state): the text of
    its last message that has text; else the output as it is."""
    if not text or not text.lstrip().startswith("{"):
        return text
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return text
    messages = value.get("messages") if isinstance(value, dict) else None
    if not isinstance(messages, list):
        return text
    for message in reversed(messages):
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if content is None and isinstance(message.get("kwargs"), dict):
            content = message["kwargs"].get("content")  # a LangChain-serialised message
        if isinstance(content, str) and content.strip():
            return content
    return text


def _first_crew_task(root: SpanRecord) -> str | None:
    """A CrewAI crew's kickoff (its root) lists the crew's tasks (OpenInference's
    `crew_tasks`, OpenLLMetry's `crewai.crew.tasks`): the user's text is the first task's
    description."""
    value = root.attributes.get(c.CREWAI_CREW_TASKS) or root.attributes.get(
        c.TRACELOOP_CREWAI_CREW_TASKS
    )
    if not isinstance(value, str) or not value.lstrip().startswith("["):
        return None
    try:
        tasks = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(tasks, list) or not tasks or not isinstance(tasks[0], dict):
        return None
    description = tasks[0].get("description")
    if not isinstance(description, str):
        return None
    return description.strip() or None


def _first_of(*values: str | None) -> str | None:
    return next((value for value in values if value), None)


def _metadata(
    root: SpanRecord, ordered: Sequence[SpanRecord], attribute: Callable[[str], str | None]
) -> dict[str, Any]:
    trace_ids = sorted({span.trace_id for span in ordered} - {root.trace_id})
    metadata: dict[str, Any] = {
        "project": root.project,
        "trace_ids": [root.trace_id, *trace_ids],
        "root_span_id": root.span_id,
        "span_count": len(ordered),
    }
    service = as_text(root.resource_attributes.get(c.SERVICE_NAME))
    outcome = attribute(c.RUN_OUTCOME)
    optional = {
        "service": service,
        "framework": attribute(c.RUN_FRAMEWORK),
        "dataset": attribute(c.DATASET_NAME),
        "record": attribute(c.DATASET_RECORD),
        "outcome": outcome.strip().lower() if outcome else None,
        "outcome_reason": attribute(c.RUN_OUTCOME_REASON),
    }
    metadata.update({name: value for name, value in optional.items() if value is not None})
    simulated = attribute(c.RUN_SIMULATED_USER)
    if simulated is not None and simulated.strip().lower() in ("true", "1", "yes"):
        metadata["simulated_user"] = True
        instruction = attribute(c.RUN_USER_INSTRUCTION)
        if instruction and instruction.strip():
            metadata["user_instruction"] = instruction
    label = _label(root, ordered)
    if label:
        metadata["label"] = label
    return metadata


def _label(root: SpanRecord, ordered: Sequence[SpanRecord]) -> dict[str, Any]:
    label: dict[str, Any] = {}
    agent = as_text(_first_attribute(root, ordered, c.LABEL_AGENT))
    if agent is not None:
        label["agent"] = agent
    step = _first_attribute(root, ordered, c.LABEL_STEP)
    if step is not None:
        text = as_text(step) or ""
        # A step label sent as a string (or float) is still a step number.
        label["step"] = int(float(text)) if _is_number(text) else text
    reason = as_text(_first_attribute(root, ordered, c.LABEL_REASON))
    if reason is not None:
        label["reason"] = reason
    return label


def _is_number(text: str) -> bool:
    try:
        value = float(text)
    except ValueError:
        return False
    return value.is_integer()
