"""Passes over the mapped facts of a run's spans before the assembler picks its steps.

Each pass folds what one span records into another's facts, or gives a span an agent
its context implies: one tool call recorded twice, a framework's event recorded as a
span of its own, a LangGraph node named after its replies' author, a workflow's turn, the
agent whose own span never arrived.
Pure: each takes the facts by span key and returns them changed (the input untouched).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from faultfinder.attributors.model import StepKind, StepStatus
from faultfinder.reading.mapping import MappedSpan
from faultfinder.reading.model import SpanRecord
from faultfinder.reading.shapes import managed_agent_named
from faultfinder.reading.span_tree import SpanKey, ancestors, span_key

__all__ = [
    "events_into_their_spans",
    "lost_agents_named",
    "nodes_as_their_authors",
    "one_record_per_tool_call",
    "workflow_turns",
]


def one_record_per_tool_call(
    ordered: Sequence[SpanRecord],
    parent_of: dict[SpanKey, SpanKey],
    mapped: dict[SpanKey, MappedSpan],
) -> dict[SpanKey, MappedSpan]:
    """One tool call recorded twice (an agent framework's tool span around its tool
    library's own `execute_tool` span) is one step: a tool span whose only step-like
    spans beneath are spans of the same tool keeps them as part of itself, taking what
    they know that it does not (arguments, result, an error it did not record)."""
    beneath: dict[SpanKey, list[SpanKey]] = {}
    for span in ordered:
        key = span_key(span)
        if mapped[key].is_step_candidate:
            for ancestor in ancestors(key, parent_of):
                if mapped[ancestor].is_step_candidate:
                    beneath.setdefault(ancestor, []).append(key)
    merged = dict(mapped)
    for outer, inner in beneath.items():
        facts = mapped[outer]
        if facts.kind is not StepKind.TOOL or not facts.tool_name or facts.step_index is not None:
            continue
        copies = [mapped[key] for key in inner]
        if all(
            copy.kind is StepKind.TOOL
            and copy.tool_name == facts.tool_name
            and copy.step_index is None
            for copy in copies
        ):
            for key in inner:
                merged[key] = replace(mapped[key], is_step_candidate=False)
            merged[outer] = _folded(facts, copies)
    return merged


def events_into_their_spans(
    ordered: Sequence[SpanRecord],
    parent_of: dict[SpanKey, SpanKey],
    mapped: dict[SpanKey, MappedSpan],
) -> dict[SpanKey, MappedSpan]:
    """A span that lasts no time, has nothing beneath it, is of its parent's kind and names
    no tool or agent of its own records an event of its parent (BeeAI's instrumentation
    turns each emitter event, `error`, `final_answer`, into such a span): it is part of
    the parent, not a step, and an error it records is the parent's."""
    parents = set(parent_of.values())
    merged = dict(mapped)
    for span in ordered:
        key = span_key(span)
        parent = parent_of.get(key)
        if parent is None or key in parents or span.end_time_unix_nano != span.start_time_unix_nano:
            continue
        event, owner = mapped[key], merged[parent]
        if not (
            event.is_step_candidate
            and owner.is_step_candidate
            and event.kind is owner.kind
            and event.is_agent_span == owner.is_agent_span
            and event.tool_name is None
            and event.agent is None
            and event.step_index is None
        ):
            continue
        merged[key] = replace(event, is_step_candidate=False)
        if event.status is StepStatus.ERROR and owner.status is not StepStatus.ERROR:
            merged[parent] = replace(
                owner, status=StepStatus.ERROR, error=owner.error or event.error
            )
    return merged


def _folded(facts: MappedSpan, copies: Sequence[MappedSpan]) -> MappedSpan:
    """`facts` with what its `copies` (records of the same call) add."""

    def first(values: Iterable[str | None]) -> str | None:
        return next((value for value in values if value), None)

    records = (facts, *copies)
    failed = next((record for record in records if record.status is StepStatus.ERROR), None)
    status = StepStatus.ERROR if failed else facts.status
    if status is StepStatus.UNSET:
        status = next((cp.status for cp in copies if cp.status is not StepStatus.UNSET), status)
    return replace(
        facts,
        content=first(record.content for record in records),
        tool_arguments=first(record.tool_arguments for record in records),
        tool_result=first(record.tool_result for record in records),
        status=status,
        error=facts.error or (failed.error if failed else None),
        agent=facts.agent or first(copy.agent for copy in copies),
    )


def nodes_as_their_authors(mapped: dict[SpanKey, MappedSpan]) -> dict[SpanKey, MappedSpan]:
    """`mapped` with each LangGraph node whose spans name one author for its replies
    (`MappedSpan.node_author`) renamed to that author, on every span the node names
    (rule 5); a node whose spans name several authors keeps its own name."""
    authors: dict[str, set[str]] = {}
    for facts in mapped.values():
        if facts.agent_from_context and facts.agent is not None and facts.node_author:
            authors.setdefault(facts.agent, set()).add(facts.node_author)
    renamed = {node: names.pop() for node, names in authors.items() if len(names) == 1}
    if not renamed:
        return mapped
    return {
        key: replace(facts, agent=renamed.get(facts.agent, facts.agent))
        if facts.agent_from_context and facts.agent is not None
        else facts
        for key, facts in mapped.items()
    }


def workflow_turns(
    ordered: Sequence[SpanRecord],
    parent_of: dict[SpanKey, SpanKey],
    mapped: dict[SpanKey, MappedSpan],
) -> dict[SpanKey, MappedSpan]:
    """`mapped` with each span that names no agent, among siblings of which an earlier one
    gave the turn to an agent (`MappedSpan.turn_of`: a LlamaIndex workflow step's event),
    made that agent's, as its run context (rule 10): a workflow's steps run one after
    another, and the agent named holds the turn until an event names another."""
    if not any(facts.turn_of for facts in mapped.values()):
        return mapped
    merged = dict(mapped)
    holder: dict[SpanKey, str] = {}
    for span in ordered:  # start order
        key = span_key(span)
        parent = parent_of.get(key)
        if parent is None:
            continue
        facts = mapped[key]
        if facts.turn_of:
            holder[parent] = facts.turn_of
        elif facts.agent is None and parent in holder:
            merged[key] = replace(facts, agent=holder[parent], agent_from_context=True)
    return merged


def lost_agents_named(
    ordered: Sequence[SpanRecord],
    parent_of: dict[SpanKey, SpanKey],
    mapped: dict[SpanKey, MappedSpan],
) -> dict[SpanKey, MappedSpan]:
    """`mapped` with the spans whose parent never arrived made the agent a model call
    beneath them names, when it names one (rule 12). smolagents never ends an agent's span
    when an exception escapes its run: only its steps' spans (`Step 1`, …, children of the
    lost span) and the calls beneath them are exported, and a managed agent's model calls
    carry the task that names it (`shapes.managed_agent_named`). The steps of one lost
    span are one agent's; a call beneath another agent's span that did arrive is that
    agent's, and names nothing here."""
    lost_parent = {
        span_key(span): (span.trace_id, span.parent_span_id)
        for span in ordered
        if span.parent_span_id is not None and span_key(span) not in parent_of
    }
    names: dict[SpanKey, set[str]] = {}
    for span in ordered:
        key = span_key(span)
        facts = mapped[key]
        if facts.kind is not StepKind.LLM or facts.agent is not None:
            continue
        name = managed_agent_named(facts.user_input or facts.input)
        lineage = [key, *ancestors(key, parent_of)]
        if name is None or any(mapped[k].agent or mapped[k].is_agent_span for k in lineage):
            continue
        lost = lost_parent.get(lineage[-1])
        if lost is not None:
            names.setdefault(lost, set()).add(name)
    named = {lost: found.pop() for lost, found in names.items() if len(found) == 1}
    if not named:
        return mapped
    merged = dict(mapped)
    for key, lost in lost_parent.items():
        if lost in named and mapped[key].agent is None:
            merged[key] = replace(mapped[key], agent=named[lost], agent_from_context=True)
    return merged
