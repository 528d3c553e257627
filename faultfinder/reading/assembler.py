"""Assemble a run's spans into its `Trajectory`: which spans are steps, in what order, by whom.

Rules (pure, and independent of the order in which spans arrived):

1. **Identity.** Spans are keyed by (trace id, span id); a span delivered twice counts
   once (the ended / later-ended copy wins).
2. **Root.** A span whose parent is absent from the run is a provisional root. The run
   root is the earliest-starting span without a parent id, else the earliest-starting
   provisional root (when the real root never arrived).
3. **Steps.** A span is a *candidate* when it speaks a convention as a step (see
   `MappedSpan.is_step_candidate`: explicit `faultfinder.step.*` attributes, a GenAI
   chat/execute_tool/invoke_agent operation, an OpenInference LLM/TOOL/AGENT/RETRIEVER
   span, or content and an agent of its own), other than a childless agent invocation
   that says nothing (a marker of where an agent ran). A candidate is a step unless another
   candidate lies beneath it: such a span (an agent wrapping its LLM and tool calls, a
   workflow wrapping agents) is a *container*. A candidate with an explicit
   `faultfinder.step.index` is always a step. Plain spans (HTTP calls, internal
   functions) are never steps — unless the run has no candidate at all, in which case
   every childless span other than the run root is a step (the root too, when it is
   the only span).
4. **Order.** When every step carries `faultfinder.step.index`, steps are ordered by
   it; otherwise by start time. Ties fall to end time, then trace id and span id.
   `Step.index` is the position after ordering (0..n-1), so a replayed trajectory with
   indices 0..n-1 comes back with the same indices.
5. **Agent.** The step's own agent (`gen_ai.agent.name` → `agent.name` →
   `graph.node.id`), else that of the nearest ancestor naming an agent or being an agent
   invocation (`invoke_agent` / OpenInference AGENT, whose span name stands in when it
   names no agent), else the step's span name. A LangGraph node whose replies all carry
   one author's name (`create_react_agent(name=…)` names them so) is that author: the
   name the user gave the agent, not the prebuilt graph's node (`agent`). The nodes of
   an unnamed LangChain `create_agent` run on its own (`model`, `tools`) are `agent`.
6. **Run facts.** `faultfinder.reading.trajectory_facts`.
7. **The user's later turns** (`model_inputs.py`). A model call whose input carries the
   conversation so far shows the turns the user took after the model answered
   (`MappedSpan.later_user_turns`). Each such turn that answers what a step of this run
   said, and that no earlier step recorded, becomes a `human` step of agent `user`,
   placed before the first model call that saw it. A turn that follows an assistant
   message no step said (few-shot demonstrations in a prompt, an earlier run's answer)
   is not this run's; one that repeats what a step before it said (a tool's report or
   another agent's message fed back in the user's role, as ReAct loops and group chats
   do) is not the user's.
8. **A tool no span recorded.** A model call whose input carries the conversation so far
   shows the tools' reports on the calls made before it (`MappedSpan.tool_reports`).
   Where the run records no step of that tool (an instrumentation that records model
   calls but not tool executions: OpenLLMetry's CrewAI, an LLM client's alone), each
   report on a call that a step of this run made (a line of its text saying the call)
   becomes a `tool` step of the agent of that step, placed before the first model call
   that saw it.
9. **A simulated user.** A run that says `faultfinder.run.simulated_user=true` (an
   evaluation harness's user simulator) declares its team: every author of a step other
   than a tool's report or a system prompt, the user included, so the user's turns may
   be blamed; its `faultfinder.run.user_instruction`, the simulator's own instructions,
   goes into the run's metadata (`user_instruction`).
10. **A workflow's turn.** Among the steps of one workflow (sibling spans), an event
    naming the agent whose turn it is (LlamaIndex's `current_agent_name`, as OpenLLMetry
    records it: `MappedSpan.turn_of`) makes the later siblings naming no agent, and what
    lies beneath them, that agent's, until an event names another.
11. **Messages recorded elsewhere.** GenAI events sent as log records (`/v1/logs`) are
    put on the span they name before anything else (`_log_events_on_their_spans`); a
    model call that finished to call tools but whose output records no call reads as the
    tool calls that followed it.
12. **An agent whose span never arrived.** The spans whose parent never arrived (the
    steps of a smolagents agent whose run an exception escaped) are the agent a model
    call beneath them names (a managed agent's task: `folding.lost_agents_named`).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from faultfinder import conventions as c
from faultfinder.attributors.model import Step, StepKind, Trajectory
from faultfinder.reading.folding import (
    events_into_their_spans,
    lost_agents_named,
    nodes_as_their_authors,
    one_record_per_tool_call,
    workflow_turns,
)
from faultfinder.reading.mapping import MappedSpan, as_text, is_log_events_carrier, map_span
from faultfinder.reading.messages import upper
from faultfinder.reading.model import SpanRecord
from faultfinder.reading.model_inputs import with_steps_from_model_inputs
from faultfinder.reading.shapes import without_method
from faultfinder.reading.span_tree import SpanKey, ancestors, span_key
from faultfinder.reading.trajectory_facts import trajectory_with_facts

__all__ = ["assemble_trajectory"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def assemble_trajectory(run_id: str, spans: Sequence[SpanRecord]) -> Trajectory:
    """The trajectory of run `run_id` from all of its spans (any order, duplicates allowed)."""
    ordered = sorted(_log_events_on_their_spans(_deduplicated(spans)).values(), key=_time_key)
    if not ordered:
        return Trajectory(run_id=run_id, metadata={"span_count": 0})
    by_key = {span_key(span): span for span in ordered}
    parent_of = {
        span_key(span): (span.trace_id, span.parent_span_id)
        for span in ordered
        if span.parent_span_id is not None and (span.trace_id, span.parent_span_id) in by_key
    }
    mapped = one_record_per_tool_call(
        ordered, parent_of, {span_key(span): map_span(span) for span in ordered}
    )
    mapped = events_into_their_spans(ordered, parent_of, mapped)
    mapped = nodes_as_their_authors(mapped)
    mapped = workflow_turns(ordered, parent_of, mapped)
    mapped = lost_agents_named(ordered, parent_of, mapped)
    root = _run_root(ordered, parent_of)

    step_spans = _step_spans(ordered, parent_of, mapped, root)
    if step_spans and all(mapped[span_key(span)].step_index is not None for span in step_spans):
        step_spans.sort(key=lambda span: (mapped[span_key(span)].step_index, *_time_key(span)))
    else:
        _turns_at_their_end(step_spans, parent_of, mapped)

    steps = _tools_to_their_callers(
        _requests_read_from_their_calls(
            tuple(
                _step(position, span, mapped, parent_of, by_key)
                for position, span in enumerate(step_spans)
            ),
            [mapped[span_key(span)] for span in step_spans],
        )
    )
    # A tool's arguments are never the user's text: the first step that is not a tool's.
    first_step_facts = next(
        (
            facts
            for span in step_spans
            if (facts := mapped[span_key(span)]).kind is not StepKind.TOOL
        ),
        None,
    )
    trajectory = trajectory_with_facts(
        run_id, ordered, root, mapped[span_key(root)], first_step_facts, step_spans, steps
    )
    with_turns = with_steps_from_model_inputs(
        steps, [mapped[span_key(span)] for span in step_spans]
    )
    if trajectory.metadata.get("simulated_user"):
        # The simulated user is one of the system's participants (rule 9).
        roster = [step.agent for step in with_turns if step.kind not in _NOT_PARTICIPANTS]
        metadata = {**trajectory.metadata, "roster": list(dict.fromkeys(roster))}
        return trajectory.model_copy(update={"steps": with_turns, "metadata": metadata})
    if with_turns is steps:
        return trajectory
    return trajectory.model_copy(update={"steps": with_turns})


_NOT_PARTICIPANTS = frozenset({StepKind.TOOL, StepKind.SYSTEM})
"""Steps whose author is no member of a run's team: a tool's report, a system prompt."""


def _time_key(span: SpanRecord) -> tuple[int, int, str, str]:
    return (span.start_time_unix_nano, span.end_time_unix_nano, span.trace_id, span.span_id)


def _deduplicated(spans: Iterable[SpanRecord]) -> dict[SpanKey, SpanRecord]:
    kept: dict[SpanKey, SpanRecord] = {}
    for span in spans:
        key = span_key(span)
        other = kept.get(key)
        if other is None or _copy_rank(span) > _copy_rank(other):
            kept[key] = span
    return kept


def _log_events_on_their_spans(spans: dict[SpanKey, SpanRecord]) -> dict[SpanKey, SpanRecord]:
    """The GenAI events a span's instrumentation sent as log records (`/v1/logs`, held by
    carrier spans beneath it: `faultfinder/server/otlp/log_events.py`) put on that span,
    after its own, in the order they were sent; the carriers dropped, and those whose span
    never came too."""
    carriers = [span for span in spans.values() if is_log_events_carrier(span)]
    if not carriers:
        return spans
    kept = {key: span for key, span in spans.items() if not is_log_events_carrier(span)}
    by_span: dict[SpanKey, list[SpanRecord]] = {}
    for carrier in sorted(carriers, key=_time_key):
        owner = (carrier.trace_id, carrier.parent_span_id or "")
        if owner in kept:
            by_span.setdefault(owner, []).append(carrier)
    for owner, held in by_span.items():
        logged = tuple(event for carrier in held for event in carrier.events)
        kept[owner] = replace(kept[owner], events=(*kept[owner].events, *logged))
    return kept


def _copy_rank(span: SpanRecord) -> tuple[int, int, int, str]:
    # The fullest copy wins; the repr breaks remaining ties so arrival order never matters.
    return (
        span.end_time_unix_nano,
        len(span.attributes),
        len(span.events),
        repr(sorted(span.attributes.items(), key=lambda item: item[0])),
    )


def _run_root(ordered: Sequence[SpanRecord], parent_of: dict[SpanKey, SpanKey]) -> SpanRecord:
    true_roots = [span for span in ordered if span.parent_span_id is None]
    if true_roots:
        return true_roots[0]
    provisional = [span for span in ordered if span_key(span) not in parent_of]
    # With no span lacking a parent the parent links form a cycle; take the earliest.
    return provisional[0] if provisional else ordered[0]


def _step_spans(
    ordered: Sequence[SpanRecord],
    parent_of: dict[SpanKey, SpanKey],
    mapped: dict[SpanKey, MappedSpan],
    root: SpanRecord,
) -> list[SpanRecord]:
    parents = set(parent_of.values())
    candidates = [
        span
        for span in ordered
        if mapped[span_key(span)].is_step_candidate
        and (span_key(span) in parents or not _marks_an_agent(mapped[span_key(span)]))
    ]
    if candidates:
        containers: set[SpanKey] = set()
        above_words: set[SpanKey] = set()
        for span in candidates:
            above = list(ancestors(span_key(span), parent_of))
            containers.update(above)
            if mapped[span_key(span)].kind is not StepKind.TOOL:
                above_words.update(above)
        return [
            span
            for span in candidates
            if span_key(span) not in containers
            or mapped[span_key(span)].step_index is not None
            or _answers_unrecorded(mapped[span_key(span)], span_key(span) in above_words)
        ]
    if len(ordered) == 1:
        return list(ordered)
    return [span for span in ordered if span is not root and span_key(span) not in parents]


def _marks_an_agent(facts: MappedSpan) -> bool:
    """An agent invocation saying nothing (no input, output or error) marks where an agent
    ran; childless, it is no step: OpenLLMetry marks each LangGraph subgraph so, beside
    the task span that holds the agent's work. A span placed as a step by its own
    attributes (`faultfinder.step.index`, a role) is one, blank or not."""
    return (
        facts.is_agent_span
        and facts.step_index is None
        and facts.role is None
        and not (facts.content or facts.input or facts.error)
    )


def _answers_unrecorded(facts: MappedSpan, above_words: bool) -> bool:
    """An agent invocation with nothing but tool calls beneath it, no model call or
    message (an agent framework's instrumentation alone, without its LLM client's:
    CrewAI's task span around its tool spans), is a step as well as a container: its
    output is the agent's own answer, which no other step carries."""
    return facts.is_agent_span and not above_words and bool((facts.content or "").strip())


def _turns_at_their_end(
    step_spans: list[SpanRecord],
    parent_of: dict[SpanKey, SpanKey],
    mapped: dict[SpanKey, MappedSpan],
) -> None:
    """Order the agent turns kept as steps above other steps (`_answers_unrecorded`) by
    their end: the answer comes after the tool calls it was made from. In place."""
    keys = {span_key(span) for span in step_spans}
    above_steps = {
        ancestor for key in keys for ancestor in ancestors(key, parent_of) if ancestor in keys
    }
    turns = {key for key in above_steps if mapped[key].step_index is None}
    turns |= _tools_around_model_turns(step_spans, mapped)
    if not turns:
        return

    def position(span: SpanRecord) -> tuple[int, int, str, str]:
        if span_key(span) in turns:
            return (span.end_time_unix_nano, span.end_time_unix_nano, span.trace_id, span.span_id)
        return _time_key(span)

    step_spans.sort(key=position)


def _tools_around_model_turns(
    step_spans: Sequence[SpanRecord], mapped: dict[SpanKey, MappedSpan]
) -> set[SpanKey]:
    """The tool steps during which a model turn of the run began: tools that hand work to
    another agent (Agno's `delegate_task_to_member`, whose member's run is not traced
    beneath it). Such a tool's result is what that work came to, so it reads at its end,
    after the steps it was made from, not at its start."""
    starts = sorted(
        span.start_time_unix_nano
        for span in step_spans
        if mapped[span_key(span)].kind is not StepKind.TOOL
        and mapped[span_key(span)].step_index is None
    )

    def a_turn_began_during(tool: SpanRecord) -> bool:
        # The first turn starting after the tool did, by bisection: runs are re-assembled
        # on every audit pass and listing, so no scan of all turns per tool.
        at = bisect.bisect_right(starts, tool.start_time_unix_nano)
        return at < len(starts) and starts[at] < tool.end_time_unix_nano

    return {
        span_key(tool)
        for tool in step_spans
        if mapped[span_key(tool)].kind is StepKind.TOOL
        and mapped[span_key(tool)].step_index is None
        and a_turn_began_during(tool)
    }


def _requests_read_from_their_calls(
    steps: tuple[Step, ...], facts: Sequence[MappedSpan]
) -> tuple[Step, ...]:
    """A model call that finished to call tools but whose output records no call
    (OpenLLMetry's LlamaIndex instrumentation keeps only text parts) reads as the tool
    calls that followed it, `tool(arguments)`, as every other model call asking for tools
    reads."""
    filled = list(steps)
    for position, step in enumerate(steps):
        if step.kind is not StepKind.LLM or step.content.strip():
            continue
        if not facts[position].asks_for_tools:
            continue
        calls = []
        for later in steps[position + 1 :]:
            if later.kind is not StepKind.TOOL:
                break
            calls.append(f"{later.tool_name or 'tool'}({later.tool_arguments or ''})")
        if calls:
            filled[position] = step.model_copy(update={"content": "\n".join(calls)})
    return tuple(filled)


def _agent(
    span: SpanRecord,
    mapped: dict[SpanKey, MappedSpan],
    parent_of: dict[SpanKey, SpanKey],
    by_key: dict[SpanKey, SpanRecord],
) -> str:
    own: str | None = mapped[span_key(span)].agent
    if own is not None:
        return own
    if mapped[span_key(span)].is_agent_span:
        return agent_span_name(span.name) or span.span_id
    for ancestor in ancestors(span_key(span), parent_of):
        facts = mapped[ancestor]
        inherited: str | None = facts.agent
        if inherited is None and facts.is_agent_span:
            inherited = agent_span_name(by_key[ancestor].name)
        if inherited is not None:
            return inherited
    program = _outermost_chain(span, parent_of, by_key)
    if program is not None:
        return program
    # No span names the agent (an LLM-only instrumentation, or the agent's own span never
    # arrived): the program that made the call is the one agent known. An LLM or tool
    # span's name (`ChatCompletion`, `OpenAIModel.generate`) is never an agent's.
    service = as_text(span.resource_attributes.get(c.SERVICE_NAME))
    if service and service.strip() and not service.startswith("unknown_service"):
        return str(service.strip())
    name: str = span.name.strip()
    return name or span.span_id


def _outermost_chain(
    span: SpanRecord, parent_of: dict[SpanKey, SpanKey], by_key: dict[SpanKey, SpanRecord]
) -> str | None:
    """No ancestor is an agent or names one: the outermost OpenInference CHAIN above the
    step, the program the user called, is the agent (DSPy's `ReAct.forward`, whose LM and
    tool calls lie beneath its predictors' and adapters' chains), by its span name less
    the method. Only a chain that is the trace's own root counts: beneath a parent that
    never arrived (smolagents' agent span, lost when the model endpoint failed) the
    outermost chain present is a step of that agent (`Step 1`), not a program."""
    outermost: SpanRecord | None = None
    for ancestor in ancestors(span_key(span), parent_of):
        above = by_key[ancestor]
        if upper(above.attributes.get(c.OPENINFERENCE_SPAN_KIND)) == c.OI_KIND_CHAIN:
            outermost = above
    if outermost is None or outermost.parent_span_id is not None:
        return None
    return agent_span_name(outermost.name)


def agent_span_name(name: str) -> str | None:
    """The agent an agent-invocation span is named after: its name without a trailing
    method (`manager.run` → `manager`)."""
    return without_method(name) or name.strip() or None


def _tools_to_their_callers(steps: tuple[Step, ...]) -> tuple[Step, ...]:
    """Tool steps of an "agent" that did nothing but run tools (a graph's tool-executing
    node such as LangGraph's `ToolNode`, or no agent at all, so the tool's span name or
    the service stood in) belong to the agent whose step asked for the call: the latest
    earlier step of another agent that reads `tool(…)`."""
    kinds: dict[str, set[StepKind]] = {}
    for step in steps:
        kinds.setdefault(step.agent, set()).add(step.kind)
    executors = {agent for agent, seen in kinds.items() if seen == {StepKind.TOOL}}
    if not executors:
        return steps
    moved = list(steps)
    for position, step in enumerate(steps):
        if step.agent not in executors or not step.tool_name:
            continue
        asked = f"{step.tool_name}("
        caller = next(
            (
                earlier
                for earlier in reversed(steps[:position])
                if earlier.agent not in executors and asked in earlier.content
            ),
            None,
        )
        if caller is not None:
            moved[position] = step.model_copy(update={"agent": caller.agent})
    return tuple(moved)


def _utc(nanos: int) -> datetime | None:
    return _EPOCH + timedelta(microseconds=nanos // 1000) if nanos > 0 else None


def _step(
    position: int,
    span: SpanRecord,
    mapped: dict[SpanKey, MappedSpan],
    parent_of: dict[SpanKey, SpanKey],
    by_key: dict[SpanKey, SpanRecord],
) -> Step:
    facts = mapped[span_key(span)]
    extras: dict[str, Any] = {
        "span_name": span.name,
        "model": facts.model,
        "input_tokens": facts.input_tokens,
        "output_tokens": facts.output_tokens,
    }
    return Step(
        index=position,
        agent=_agent(span, mapped, parent_of, by_key),
        kind=facts.kind,
        # A failed call that produced nothing reads as its error.
        content=facts.content or facts.error or "",
        role=facts.role,
        tool_name=facts.tool_name,
        tool_arguments=facts.tool_arguments,
        tool_result=facts.tool_result,
        span_id=span.span_id,
        start_time=_utc(span.start_time_unix_nano),
        end_time=_utc(span.end_time_unix_nano),
        status=facts.status,
        error=facts.error,
        metadata={name: value for name, value in extras.items() if value is not None},
    )
