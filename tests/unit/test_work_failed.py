"""`lifecycle.work_failed`: whether a run's work ended in an error, from its spans alone."""

from __future__ import annotations

from faultfinder.reading.model import SpanRecord, StatusCode
from faultfinder.server.lifecycle import work_failed

OK, ERROR, UNSET = StatusCode.OK, StatusCode.ERROR, StatusCode.UNSET


def span(span_id: str, parent: str | None, start: int, end: int, status: StatusCode) -> SpanRecord:
    return SpanRecord(
        trace_id="a" * 32,
        span_id=span_id.rjust(16, "0"),
        parent_span_id=parent.rjust(16, "0") if parent else None,
        name=f"span {span_id}",
        start_time_unix_nano=start,
        end_time_unix_nano=end,
        status_code=status,
    )


def test_an_exception_that_escaped_fails_the_work_whatever_the_wrappers_say() -> None:
    # OpenAI Agents SDK: model call ERROR, then its turn (OK), agent (ERROR) and two
    # workflow spans (OK) end around it.
    spans = [
        span("1", None, 0, 100, OK),
        span("2", "1", 1, 99, OK),
        span("3", "2", 2, 98, ERROR),
        span("4", "3", 3, 97, OK),
        span("5", "4", 4, 50, ERROR),
    ]
    assert work_failed(spans)


def test_an_error_the_agents_went_on_from_does_not() -> None:
    # A tool error fed back to the model; its next call ends well, then the answer.
    spans = [
        span("1", None, 0, 100, OK),
        span("2", "1", 1, 10, OK),
        span("3", "1", 11, 20, ERROR),
        span("4", "1", 21, 30, UNSET),
    ]
    assert not work_failed(spans)


def test_an_error_nothing_followed_fails_the_work_even_without_a_root() -> None:
    # smolagents when the model endpoint fails: the agent's span never arrives.
    spans = [span("2", "1", 1, 10, ERROR), span("3", "2", 2, 9, ERROR)]
    assert work_failed(spans)
    # Only errors after it do not count as going on.
    assert work_failed([*spans, span("4", "1", 11, 20, ERROR)])


def test_a_root_error_alone_is_not_the_works() -> None:
    assert not work_failed([span("1", None, 0, 10, ERROR), span("2", "1", 1, 5, OK)])
    assert not work_failed([])
