"""Which run a span belongs to, and what it says about that run.

A run is a trace, or the spans naming one `faultfinder.run.id`, or (when the sidecar
groups by conversation) one GenAI conversation / OpenInference session. `run_id_of` is
the one place that rule lives: the decoder applies it once per span (`SpanRecord.run_id`)
and the run-span budget, the span store and the event bus read the stamp. Pure, no I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, replace

from faultfinder import conventions as c
from faultfinder.reading.mapping import is_log_events_carrier
from faultfinder.reading.messages import as_text, lower
from faultfinder.reading.model import AttributeValue, SpanRecord, StatusCode

__all__ = [
    "IDENTITY_KEYS",
    "MAX_ID_CHARS",
    "RunFacts",
    "bound_identities",
    "bounded_id",
    "run_facts",
    "run_id_of",
    "with_run_id",
]


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What one span says about the run it belongs to."""

    run_id: str
    """The run: the span's stamped `SpanRecord.run_id` (`run_id_of`)."""
    is_root: bool
    """The span has no parent, or a parent in another process (a request's server span):
    the run's root (or a provisional root for an orphan)."""
    failed: bool
    """The span is a root with status ERROR, or says outcome=failure."""
    outcome: str | None
    """`success` / `failure` when the span carries an explicit outcome."""
    task: str | None
    ground_truth: str | None
    final_answer: str | None
    local_parent: bool = False
    """The sender says the span's parent is in the same process (OTLP span flags): the
    run's root is a span of that process and will arrive once it has ended."""
    opens_run: bool = True
    """False for a root span that only records setting an agent up (GenAI `create_agent`,
    which autogen-core sends in a trace of its own as each agent is built; Microsoft Agent
    Framework's `workflow.build`): stored, but no run of its own."""


def run_id_of(
    trace_id: str,
    attributes: Mapping[str, AttributeValue],
    *,
    group_by_conversation: bool = False,
) -> str:
    """The run a span of trace `trace_id` with these attributes belongs to:
    `faultfinder.run.id`, else (when grouping by conversation) the conversation/session
    id, else the trace id. The decoder stamps it on every span (`SpanRecord.run_id`), so
    that nothing after it derives the run again."""
    run_id = as_text(attributes.get(c.RUN_ID))
    if run_id is None and group_by_conversation:
        run_id = as_text(
            attributes.get(c.GEN_AI_CONVERSATION_ID) or attributes.get(c.OI_SESSION_ID)
        )
    return trace_id if run_id is None else bounded_id(run_id)


MAX_ID_CHARS = 256
"""Longest run id (and agent name, conversation id: `IDENTITY_KEYS`) kept as sent;
a longer one becomes `bounded_id`'s shortening. Every run id is a database key, a URL and
a line of each listing: a megabyte-long one would make all three that large."""

IDENTITY_KEYS = (
    c.RUN_ID,
    c.GEN_AI_AGENT_NAME,
    c.GEN_AI_AGENT_ID,
    c.OI_AGENT_NAME,
    c.OI_GRAPH_NODE_ID,
    c.GEN_AI_CONVERSATION_ID,
    c.OI_SESSION_ID,
    c.LABEL_AGENT,
)
"""Attributes that name a run or an agent: bounded to `MAX_ID_CHARS` at decode."""


def bound_identities(attributes: dict[str, AttributeValue]) -> int:
    """Shorten the over-long `IDENTITY_KEYS` values of `attributes` in place (`bounded_id`);
    how many were."""
    shortened = 0
    for key in IDENTITY_KEYS:
        value = attributes.get(key)
        if isinstance(value, str) and len(value) > MAX_ID_CHARS:
            attributes[key] = bounded_id(value)
            shortened += 1
    return shortened


def bounded_id(text: str) -> str:
    """`text` if at most `MAX_ID_CHARS` long, else its start, `…` and a hash of the whole:
    the same long id always shortens to the same one, and two long ids that share a start
    stay apart."""
    if len(text) <= MAX_ID_CHARS:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{text[: MAX_ID_CHARS - 18]}…{digest}"


def with_run_id(span: SpanRecord, *, group_by_conversation: bool = False) -> SpanRecord:
    """`span` stamped with its run (`run_id_of`), for spans built other than by the
    decoder (replays of stored spans, benchmarks, tests)."""
    run_id = run_id_of(span.trace_id, span.attributes, group_by_conversation=group_by_conversation)
    return replace(span, run_id=run_id)


def run_facts(span: SpanRecord) -> RunFacts:
    """Run-level facts of one span (its run as stamped, root status, outcome, task,
    answers)."""
    attrs = span.attributes
    run_id = span.run_id
    is_root = span.parent_span_id is None or span.parent_remote is True
    outcome = as_text(attrs.get(c.RUN_OUTCOME))
    outcome = outcome.strip().lower() if outcome else None
    failed = outcome == "failure" or (is_root and span.status_code == StatusCode.ERROR)
    setup = is_root and (
        lower(attrs.get(c.GEN_AI_OPERATION_NAME)) == c.OP_CREATE_AGENT or _builds_a_workflow(span)
    )
    # The GenAI events of a span sent as log records join that span's run.
    setup = setup or is_log_events_carrier(span)
    return RunFacts(
        run_id=run_id,
        is_root=is_root,
        local_parent=span.parent_remote is False,
        failed=failed,
        outcome=outcome,
        task=as_text(attrs.get(c.RUN_TASK)),
        ground_truth=as_text(attrs.get(c.RUN_GROUND_TRUTH)),
        final_answer=as_text(attrs.get(c.RUN_FINAL_ANSWER)),
        opens_run=not setup,
    )


def _builds_a_workflow(span: SpanRecord) -> bool:
    """Microsoft Agent Framework's record of building a workflow (`workflow.build`), sent
    as a trace of its own when the workflow is made: setup, not a run."""
    return span.name == c.AGENT_FRAMEWORK_BUILD_SPAN and any(
        event.name == c.AGENT_FRAMEWORK_BUILD_STARTED for event in span.events
    )
