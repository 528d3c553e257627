"""Our own frozen span model: what every OTLP transport decodes into.

Nothing past `faultfinder/server/otlp/` sees protobuf; the store persists `SpanRecord`s and the
assembler (`faultfinder/reading/assembler.py`) turns a run's `SpanRecord`s into a `Trajectory`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

AttributeValue = str | bool | int | float | list[Any] | dict[str, Any] | bytes | None


class StatusCode(IntEnum):
    """OTLP span status codes."""

    UNSET = 0
    OK = 1
    ERROR = 2


@dataclass(frozen=True, slots=True)
class SpanEvent:
    name: str
    time_unix_nano: int
    attributes: dict[str, AttributeValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """One decoded span with its resource and the project it was sent for."""

    trace_id: str
    """32 lowercase hex characters."""
    span_id: str
    """16 lowercase hex characters."""
    parent_span_id: str | None
    name: str
    start_time_unix_nano: int
    end_time_unix_nano: int
    """0 while the span has not ended (never the case for exported spans, kept for safety)."""
    kind: int = 0
    parent_remote: bool | None = None
    """Whether the parent span lives in another process (propagated in a request), as the
    OTLP span flags say; None when the span has no parent or the sender does not say
    (flags were added to OTLP in 1.1; the OpenTelemetry SDKs send them)."""
    status_code: StatusCode = StatusCode.UNSET
    status_message: str = ""
    attributes: dict[str, AttributeValue] = field(default_factory=dict)
    events: tuple[SpanEvent, ...] = ()
    resource_attributes: dict[str, AttributeValue] = field(default_factory=dict)
    scope_name: str = ""
    project: str = "default"
    run_id: str = ""
    """The run the span belongs to, stamped once by the decoder (`faultfinder.reading.runs.
    run_id_of`, which knows whether runs are grouped by conversation) and read by all that
    follows. A span built without one belongs to its trace's run."""

    def __post_init__(self) -> None:
        if not self.run_id:
            object.__setattr__(self, "run_id", self.trace_id)
