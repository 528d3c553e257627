"""The one way a stored run becomes a `Trajectory`: for the API and the dashboard, the
attribution worker, the online auditor and training alike.

The spans say what the agents did (`assembler.assemble_trajectory`); the run row adds
what was posted later through the API (a grader's ground truth and final answer), which
takes precedence over what the spans said, and the task when no span named one. Every
reader goes through `run_trajectory`, so a ground truth posted with an outcome reaches
every attributor the way the dashboard shows it.
"""

from __future__ import annotations

from collections.abc import Sequence

from faultfinder.attributors.model import Trajectory
from faultfinder.reading.assembler import assemble_trajectory
from faultfinder.reading.model import SpanRecord
from faultfinder.server.store import RunRow, SpanStore

__all__ = ["load_trajectory", "run_trajectory"]


def run_trajectory(run_id: str, spans: Sequence[SpanRecord], row: RunRow | None) -> Trajectory:
    """The trajectory of run `run_id` from its spans, with what was posted for it (`row`)."""
    trajectory = assemble_trajectory(run_id, spans)
    if row is None:
        return trajectory
    updates: dict[str, object] = {
        name: value
        for name, value in (
            ("ground_truth", row.ground_truth),
            ("final_answer", row.final_answer),
            ("task", row.task if not trajectory.task else None),
        )
        if value is not None
    }
    metadata: dict[str, object] = {}
    if row.n_spans > len(spans):
        # The store read only the run's earliest spans (`max_spans_per_run`): say so.
        metadata |= {"spans_read": len(spans), "spans_stored": row.n_spans}
    if row.unfinished:
        # The lifecycle gave up waiting for the run's root span: its work stopped.
        metadata["unfinished"] = True
    if metadata:
        updates["metadata"] = {**trajectory.metadata, **metadata}
    return trajectory.model_copy(update=updates) if updates else trajectory


async def load_trajectory(store: SpanStore, row: RunRow) -> Trajectory:
    """`run_trajectory` of a stored run, reading its spans. Assembled off the event loop
    (`SpanStore.with_run_spans`): a run of `max_spans_per_run` spans takes seconds to
    assemble, which on the loop would stall ingest and every other request for as long."""
    return await store.with_run_spans(row.id, lambda spans: run_trajectory(row.id, spans, row))
