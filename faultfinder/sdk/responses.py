"""Reading the query API's JSON answers into `faultfinder.sdk.models` results.

Every reader checks the shape it reads and names the offending field in a
`ResponseError` (`run.trajectory.steps[3].index: expected an integer, got a string`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeGuard, TypeVar

from faultfinder.sdk.errors import ResponseError
from faultfinder.sdk.models import (
    Attribution,
    AttributionJob,
    AttributorAccuracy,
    BlameBucket,
    Candidate,
    IngestStats,
    Label,
    PredictionSet,
    RunDetail,
    RunSummary,
    Stats,
    Step,
    Trajectory,
)

T = TypeVar("T")


class _Fields:
    """Typed access to one JSON object of a response; mistakes name the field."""

    def __init__(self, value: object, where: str) -> None:
        self.data: dict[str, Any] = _checked(value, where, "a JSON object", _is_object)
        self.where = where

    def _required(
        self, key: str, default: T | None, expected: str, valid: Callable[[object], TypeGuard[T]]
    ) -> T:
        """The field's value (or `default` when it is absent or null), which must be there."""
        value = self.data.get(key, default)
        if value is None:
            raise ResponseError(f"{self.where}.{key}: missing")
        return _checked(value, f"{self.where}.{key}", expected, valid)

    def _optional(
        self, key: str, expected: str, valid: Callable[[object], TypeGuard[T]]
    ) -> T | None:
        """The field's value, None when it is absent or null."""
        value = self.data.get(key)
        return None if value is None else _checked(value, f"{self.where}.{key}", expected, valid)

    def text(self, key: str, default: str | None = None) -> str:
        return self._required(key, default, "a string", _is_text)

    def boolean(self, key: str, default: bool) -> bool:
        value = self._optional(key, "true or false", _is_boolean)
        return default if value is None else value

    def optional_text(self, key: str) -> str | None:
        return self._optional(key, "a string", _is_text)

    def integer(self, key: str, default: int | None = None) -> int:
        return self._required(key, default, "an integer", _is_integer)

    def optional_integer(self, key: str) -> int | None:
        return self._optional(key, "an integer", _is_integer)

    def number(self, key: str, default: float | None = None) -> float:
        return float(self._required(key, default, "a number", _is_number))

    def optional_object(self, key: str) -> dict[str, Any] | None:
        return self._optional(key, "a JSON object", _is_object)

    def optional_number(self, key: str) -> float | None:
        value = self._optional(key, "a number", _is_number)
        return None if value is None else float(value)

    def timestamp(self, key: str) -> datetime | None:
        text = self.optional_text(key)
        if text is None:
            return None
        try:
            return datetime.fromisoformat(text)
        except ValueError:
            raise ResponseError(f"{self.where}.{key}: {text!r} is not an ISO 8601 time") from None

    def items(self, key: str) -> list[tuple[str, Any]]:
        """The elements of a list field with their paths (an absent field is empty)."""
        value = self._optional(key, "a list", _is_list) or []
        return [(f"{self.where}.{key}[{n}]", item) for n, item in enumerate(value)]

    def texts(self, key: str) -> tuple[str, ...]:
        return tuple(_checked(item, where, "a string", _is_text) for where, item in self.items(key))

    def mapping(self, key: str) -> dict[str, Any]:
        return self._optional(key, "an object", _is_object) or {}

    def counts(self, key: str) -> dict[str, int]:
        counts = self.mapping(key)
        for name, count in counts.items():
            _checked(count, f"{self.where}.{key}.{name}", "an integer", _is_integer)
        return counts


def _checked(
    value: object, where: str, expected: str, valid: Callable[[object], TypeGuard[T]]
) -> T:
    if not valid(value):
        raise ResponseError(f"{where}: expected {expected}, got {_json_type(value)}")
    return value


def _is_text(value: object) -> TypeGuard[str]:
    return isinstance(value, str)


def _is_boolean(value: object) -> TypeGuard[bool]:
    return isinstance(value, bool)


def _is_integer(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_list(value: object) -> TypeGuard[list[Any]]:
    return isinstance(value, list)


def _is_object(value: object) -> TypeGuard[dict[str, Any]]:
    return isinstance(value, dict)


def _json_type(value: object) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"the number {value}"
    return names.get(type(value), type(value).__name__)


def _candidate(value: object, where: str) -> Candidate:
    f = _Fields(value, where)
    return Candidate(
        step=f.integer("step"),
        agent=f.text("agent"),
        score=f.number("score"),
        evidence=f.text("evidence", ""),
    )


def _attribution(value: object, where: str) -> Attribution:
    f = _Fields(value, where)
    prediction_set = None
    if f.data.get("prediction_set") is not None:
        p = _Fields(f.data["prediction_set"], f"{where}.prediction_set")
        prediction_set = PredictionSet(
            lo=p.integer("lo"), hi=p.integer("hi"), alpha=p.number("alpha")
        )
    return Attribution(
        method=f.text("method"),
        status=f.text("status", "ok"),
        agent=f.optional_text("agent"),
        step=f.optional_integer("step"),
        reason=f.text("reason", ""),
        confidence=f.optional_number("confidence"),
        candidates=tuple(_candidate(item, path) for path, item in f.items("candidates")),
        prediction_set=prediction_set,
        error_category=f.optional_text("error_category"),
        suggested_fix=f.optional_text("suggested_fix"),
        failure_reason=f.optional_text("failure_reason"),
        used_ground_truth=f.boolean("used_ground_truth", False),
        model=f.optional_text("model"),
        llm_calls=f.integer("llm_calls", 0),
        prompt_tokens=f.integer("prompt_tokens", 0),
        completion_tokens=f.integer("completion_tokens", 0),
        latency_s=f.number("latency_s", 0.0),
        details=f.mapping("details"),
    )


def _step(value: object, where: str) -> Step:
    f = _Fields(value, where)
    return Step(
        index=f.integer("index"),
        agent=f.text("agent"),
        kind=f.text("kind", "message"),
        content=f.text("content", ""),
        role=f.optional_text("role"),
        tool_name=f.optional_text("tool_name"),
        tool_arguments=f.optional_text("tool_arguments"),
        tool_result=f.optional_text("tool_result"),
        span_id=f.optional_text("span_id"),
        start_time=f.timestamp("start_time"),
        end_time=f.timestamp("end_time"),
        status=f.text("status", "unset"),
        error=f.optional_text("error"),
        metadata=f.mapping("metadata"),
    )


def _trajectory(value: object, where: str) -> Trajectory:
    f = _Fields(value, where)
    return Trajectory(
        run_id=f.text("run_id"),
        task=f.text("task", ""),
        ground_truth=f.optional_text("ground_truth"),
        final_answer=f.optional_text("final_answer"),
        steps=tuple(_step(item, path) for path, item in f.items("steps")),
        metadata=f.mapping("metadata"),
    )


def _summary_fields(f: _Fields) -> dict[str, Any]:
    return {
        "id": f.text("id"),
        "project": f.text("project"),
        "status": f.text("status"),
        "agents": f.texts("agents"),
        "n_steps": f.integer("n_steps", 0),
        "n_spans": f.integer("n_spans", 0),
        "outcome": f.optional_text("outcome"),
        "unfinished": f.boolean("unfinished", False),
        "started_at": f.optional_number("started_at"),
        "ended_at": f.optional_number("ended_at"),
        "attributions": tuple(_attribution(item, path) for path, item in f.items("attributions")),
    }


def read_run_summary(value: object, where: str = "run") -> RunSummary:
    return RunSummary(**_summary_fields(_Fields(value, where)))


def read_run_detail(value: object, where: str = "run") -> RunDetail:
    f = _Fields(value, where)
    if f.data.get("trajectory") is None:
        raise ResponseError(f"{where}.trajectory: missing")
    trajectory = _trajectory(f.data["trajectory"], f"{where}.trajectory")
    return RunDetail(**_summary_fields(f), trajectory=trajectory)


def read_run_page(value: object) -> tuple[list[RunSummary], str | None]:
    f = _Fields(value, "runs page")
    items = [read_run_summary(item, path) for path, item in f.items("items")]
    return items, f.optional_text("next_cursor")


def read_job(value: object, where: str = "job") -> AttributionJob:
    f = _Fields(value, where)
    attribution = f.data.get("attribution")
    return AttributionJob(
        id=f.integer("id"),
        run_id=f.optional_text("run_id"),
        attributor=f.text("attributor"),
        status=f.text("status"),
        attempts=f.integer("attempts", 0),
        max_attempts=f.integer("max_attempts", 0),
        last_error=f.optional_text("last_error"),
        attribution=None
        if attribution is None
        else _attribution(attribution, f"{where}.attribution"),
    )


def read_jobs(value: object) -> tuple[AttributionJob, ...]:
    return tuple(read_job(item, path) for path, item in _list(value, "jobs"))


def read_label(value: object, where: str = "label") -> Label:
    f = _Fields(value, where)
    return Label(
        id=f.integer("id"),
        run_id=f.text("run_id"),
        agent=f.text("agent"),
        step=f.integer("step"),
        reason=f.optional_text("reason"),
        author=f.optional_text("author"),
        created_at=f.optional_number("created_at"),
        mode=f.optional_text("mode"),
        source=f.optional_text("source") or "human",
        details=f.optional_object("details"),
    )


def read_labels(value: object) -> tuple[Label, ...]:
    return tuple(read_label(item, path) for path, item in _list(value, "labels"))


def _list(value: object, where: str) -> list[tuple[str, Any]]:
    items = _checked(value, where, "a JSON list", _is_list)
    return [(f"{where}[{n}]", item) for n, item in enumerate(items)]


def read_stats(value: object) -> Stats:
    f = _Fields(value, "stats")
    buckets = []
    for path, item in f.items("blame_over_time"):
        bucket = _Fields(item, path)
        buckets.append(BlameBucket(start=bucket.number("start"), counts=bucket.counts("counts")))
    accuracy = []
    for path, item in f.items("accuracy"):
        a = _Fields(item, path)
        accuracy.append(
            AttributorAccuracy(
                method=a.text("method"),
                labelled_runs=a.integer("labelled_runs", 0),
                agent_accuracy=a.optional_number("agent_accuracy"),
                step_accuracy=a.optional_number("step_accuracy"),
            )
        )
    return Stats(
        runs_by_status=f.counts("runs_by_status"),
        jobs_by_status=f.counts("jobs_by_status"),
        blame_by_agent=f.counts("blame_by_agent"),
        blame_over_time=tuple(buckets),
        bucket_seconds=f.integer("bucket_seconds", 0),
        accuracy=tuple(accuracy),
    )


def read_ingest_stats(value: object) -> IngestStats:
    f = _Fields(value, "ingest stats")
    return IngestStats(
        spans_stored=f.integer("spans_stored"),
        spans_received=f.integer("spans_received"),
        spans_acknowledged=f.integer("spans_acknowledged"),
        queued_spans=f.integer("queued_spans"),
        spans_rejected=f.counts("spans_rejected"),
        requests_rejected=f.counts("requests_rejected"),
        write_errors=f.integer("write_errors", 0),
        batches_written=f.integer("batches_written", 0),
    )
