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
   span, or content and an agent of its own). A candidate is a step unless another
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
   names no agent), else the step's span name.
6. **Run facts.** `faultfinder.run.*`, `faultfinder.dataset.*` and `faultfinder.label.*`
   are read from the root first, then from the other spans in start order. The task
   falls back to the first human step's text, then the root's (or first step's) user
   input; the final answer falls back to the output of a root that is not a step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from faultfinder.attributors.model import Step, StepKind, Trajectory
from faultfinder.sdk import conventions as c
from faultfinder.server.otlp.mapping import MappedSpan, as_text, map_span
from faultfinder.server.otlp.model import AttributeValue, SpanRecord

__all__ = ["assemble_trajectory"]

_SpanKey = tuple[str, str]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def assemble_trajectory(run_id: str, spans: Sequence[SpanRecord]) -> Trajectory:
    """The trajectory of run `run_id` from all of its spans (any order, duplicates allowed)."""
    ordered = sorted(_deduplicated(spans).values(), key=_time_key)
    if not ordered:
        return Trajectory(run_id=run_id, metadata={"span_count": 0})
    by_key = {_key(span): span for span in ordered}
    parent_of = {
        _key(span): (span.trace_id, span.parent_span_id)
        for span in ordered
        if span.parent_span_id is not None and (span.trace_id, span.parent_span_id) in by_key
    }
    mapped = {_key(span): map_span(span) for span in ordered}
    root = _run_root(ordered, parent_of)

    step_spans = _step_spans(ordered, parent_of, mapped, root)
    if step_spans and all(mapped[_key(span)].step_index is not None for span in step_spans):
        step_spans.sort(key=lambda span: (mapped[_key(span)].step_index, *_time_key(span)))

    steps = tuple(
        _step(position, span, mapped, parent_of, by_key) for position, span in enumerate(step_spans)
    )
    return _trajectory(run_id, ordered, root, mapped, step_spans, steps)


def _key(span: SpanRecord) -> _SpanKey:
    return (span.trace_id, span.span_id)


def _time_key(span: SpanRecord) -> tuple[int, int, str, str]:
    return (span.start_time_unix_nano, span.end_time_unix_nano, span.trace_id, span.span_id)


def _deduplicated(spans: Iterable[SpanRecord]) -> dict[_SpanKey, SpanRecord]:
    kept: dict[_SpanKey, SpanRecord] = {}
    for span in spans:
        key = _key(span)
        other = kept.get(key)
        if other is None or _copy_rank(span) > _copy_rank(other):
            kept[key] = span
    return kept


def _copy_rank(span: SpanRecord) -> tuple[int, int, int, str]:
    # The fullest copy wins; the repr breaks remaining ties so arrival order never matters.
    return (
        span.end_time_unix_nano,
        len(span.attributes),
        len(span.events),
        repr(sorted(span.attributes.items(), key=lambda item: item[0])),
    )


def _run_root(ordered: Sequence[SpanRecord], parent_of: dict[_SpanKey, _SpanKey]) -> SpanRecord:
    true_roots = [span for span in ordered if span.parent_span_id is None]
    if true_roots:
        return true_roots[0]
    provisional = [span for span in ordered if _key(span) not in parent_of]
    # With no span lacking a parent the parent links form a cycle; take the earliest.
    return provisional[0] if provisional else ordered[0]


def _ancestors(key: _SpanKey, parent_of: dict[_SpanKey, _SpanKey]) -> Iterable[_SpanKey]:
    seen = {key}
    parent = parent_of.get(key)
    while parent is not None and parent not in seen:
        yield parent
        seen.add(parent)
        parent = parent_of.get(parent)


def _step_spans(
    ordered: Sequence[SpanRecord],
    parent_of: dict[_SpanKey, _SpanKey],
    mapped: dict[_SpanKey, MappedSpan],
    root: SpanRecord,
) -> list[SpanRecord]:
    candidates = [span for span in ordered if mapped[_key(span)].is_step_candidate]
    if candidates:
        containers: set[_SpanKey] = set()
        for span in candidates:
            containers.update(_ancestors(_key(span), parent_of))
        return [
            span
            for span in candidates
            if _key(span) not in containers or mapped[_key(span)].step_index is not None
        ]
    if len(ordered) == 1:
        return list(ordered)
    parents = set(parent_of.values())
    return [span for span in ordered if span is not root and _key(span) not in parents]


def _agent(
    span: SpanRecord,
    mapped: dict[_SpanKey, MappedSpan],
    parent_of: dict[_SpanKey, _SpanKey],
    by_key: dict[_SpanKey, SpanRecord],
) -> str:
    own: str | None = mapped[_key(span)].agent
    if own is not None:
        return own
    for ancestor in _ancestors(_key(span), parent_of):
        facts = mapped[ancestor]
        inherited: str | None = facts.agent
        if inherited is None and facts.is_agent_span:
            inherited = by_key[ancestor].name.strip() or None
        if inherited is not None:
            return inherited
    name: str = span.name.strip()
    return name or span.span_id


def _utc(nanos: int) -> datetime | None:
    return _EPOCH + timedelta(microseconds=nanos // 1000) if nanos > 0 else None


def _step(
    position: int,
    span: SpanRecord,
    mapped: dict[_SpanKey, MappedSpan],
    parent_of: dict[_SpanKey, _SpanKey],
    by_key: dict[_SpanKey, SpanRecord],
) -> Step:
    facts = mapped[_key(span)]
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
        content=facts.content or "",
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


def _first_attribute(
    root: SpanRecord, ordered: Sequence[SpanRecord], key: str
) -> AttributeValue | None:
    for span in (root, *ordered):
        value = span.attributes.get(key)
        if value is not None:
            return value
    return None


def _trajectory(
    run_id: str,
    ordered: Sequence[SpanRecord],
    root: SpanRecord,
    mapped: dict[_SpanKey, MappedSpan],
    step_spans: Sequence[SpanRecord],
    steps: tuple[Step, ...],
) -> Trajectory:
    def attribute(key: str) -> str | None:
        text: str | None = as_text(_first_attribute(root, ordered, key))
        return text

    root_facts = mapped[_key(root)]
    first_step_facts = mapped[_key(step_spans[0])] if step_spans else None
    task = _first_of(
        attribute(c.RUN_TASK),
        next((step.content for step in steps if step.kind is StepKind.HUMAN), None),
        root_facts.user_input,
        root_facts.input,
        first_step_facts.user_input if first_step_facts else None,
        first_step_facts.input if first_step_facts else None,
    )
    final_answer = attribute(c.RUN_FINAL_ANSWER)
    if final_answer is None and not any(span is root for span in step_spans):
        final_answer = root_facts.content
    return Trajectory(
        run_id=run_id,
        task=task or "",
        ground_truth=attribute(c.RUN_GROUND_TRUTH),
        final_answer=final_answer,
        steps=steps,
        metadata=_metadata(root, ordered, attribute),
    )


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
