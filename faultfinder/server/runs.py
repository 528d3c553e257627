"""The run service: queries, verdicts, re-attribution, labels and statistics over stored runs."""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from faultfinder.attributors.auditor import Alarm
from faultfinder.attributors.model import (
    Attribution,
    AttributionStatus,
    Trajectory,
    normalise_agent,
)
from faultfinder.server.db.models import RunStatus
from faultfinder.server.schemas import (
    AttributorAccuracy,
    BlameBucket,
    JobOut,
    LabelOut,
    RunDetail,
    RunPage,
    RunSummary,
    Stats,
    VerificationIn,
)
from faultfinder.server.store import (
    AlarmStore,
    Job,
    JobQueue,
    Label,
    LabelStore,
    RunRow,
    SpanStore,
    UnknownRunError,
)
from faultfinder.server.trajectories import load_trajectory
from faultfinder.server.verifications import COUNTERFACTUAL, counterfactual_attribution


def _seconds(nanos: int | None) -> float | None:
    return nanos / 1e9 if nanos else None


def job_out(job: Job, attribution: Attribution | None = None) -> JobOut:
    if attribution is None and job.payload and "attribution" in job.payload:
        attribution = Attribution.model_validate(job.payload["attribution"])
    return JobOut(
        id=job.id,
        run_id=job.run_id,
        attributor=job.attributor,
        status=job.status,
        attempts=job.attempts,
        max_attempts=job.max_attempts,
        last_error=job.last_error,
        attribution=attribution,
    )


def label_out(label: Label) -> LabelOut:
    return LabelOut(
        id=label.id,
        run_id=label.run_id,
        agent=label.agent,
        step=label.step,
        reason=label.reason,
        author=label.author,
        created_at=label.created_at / 1e9,
        mode=label.mode,
        source="injected" if label.source == "injected" else "human",
        details=label.details,
    )


SUMMARIES_AT_ONCE = 8
"""Runs of a listing summarised at once (each may hold its assembled trajectory)."""
UNKNOWN_MODE = "unknown"
"""The mode counted for an answer whose evidence names none (a guess)."""
LEADING_SCAN_LIMIT = 2000
"""Runs one filtered page (`agent`, `mode`) reads at most to fill itself."""


def leading_attribution(
    attributions: Sequence[Attribution], preferred: Sequence[str] = ()
) -> Attribution | None:
    """The answer a run leads with (its culprit on the runs list, its page's verdict): a
    counterfactual verification that made the run succeed (tested, where every attributor
    estimates), else the newest ok attribution of the first `preferred` attributor that has
    one, else the newest ok attribution."""
    ok = [a for a in attributions if a.status is AttributionStatus.OK]
    for method in (COUNTERFACTUAL, *preferred):
        mine = [a for a in ok if a.method == method]
        if mine:
            return mine[-1]
    return ok[-1] if ok else None


def _keep_all(attributions: Sequence[Attribution]) -> bool:
    return True


@dataclass(frozen=True)
class CulpritFilter:
    """Runs whose leading attribution (`leading_attribution` with the attributors
    `preferred`) blames `agent` (any case) with failure mode `mode`; None matches any."""

    agent: str | None = None
    mode: str | None = None
    preferred: tuple[str, ...] = ()

    @property
    def active(self) -> bool:
        return self.agent is not None or self.mode is not None

    def keeps(self, attributions: Sequence[Attribution]) -> bool:
        lead = leading_attribution(attributions, self.preferred)
        if lead is None or lead.agent is None:
            return False
        if self.agent is not None and normalise_agent(lead.agent) != normalise_agent(self.agent):
            return False
        return self.mode is None or (lead.mode or "").casefold() == self.mode.casefold()


LISTED_TEXT_CHARS = 2000
"""Longest task and outcome reason a runs listing shows (its run's page shows them whole)."""
LISTED_AGENTS = 20
"""Most agents a runs listing names per run (its run's page names them all)."""


def _listed(summary: RunSummary) -> RunSummary:
    """`summary` as a listing shows it: bounded whatever its run holds, so that a page of
    500 runs stays a few MB even when each run's task is a megabyte."""
    return summary.model_copy(
        update={
            "task": _shortened(summary.task),
            "outcome_reason": _shortened(summary.outcome_reason),
            "agents": summary.agents[:LISTED_AGENTS],
        }
    )


def _shortened(text: str | None) -> str | None:
    if text is None or len(text) <= LISTED_TEXT_CHARS:
        return text
    return f"{text[:LISTED_TEXT_CHARS]}…[truncated {len(text) - LISTED_TEXT_CHARS} chars]"


class RunService:
    """What the API and the dashboard do with runs."""

    def __init__(
        self,
        store: SpanStore,
        jobs: JobQueue,
        labels: LabelStore,
        alarms: AlarmStore | None = None,
        *,
        settle: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self._store = store
        self._jobs = jobs
        self._labels = labels
        self._alarms = alarms
        self._settle = settle
        """Applies the lifecycle to one run at once (the sweeper's), after a posted outcome."""

    async def _row(self, run_id: str) -> RunRow:
        row = await self._store.get_run(run_id)
        if row is None:
            raise UnknownRunError(f"no run {run_id!r}")
        return row

    async def _summary(
        self, row: RunRow, attributions: list[Attribution], trajectory: Trajectory | None = None
    ) -> RunSummary:
        agents, n_steps = row.agents, row.n_steps
        if agents is None or n_steps is None:
            if trajectory is None:
                trajectory = await load_trajectory(self._store, row)
            agents, n_steps = list(trajectory.agents), len(trajectory)
            if row.status != RunStatus.RUNNING:
                # Assembled once: a finished run's listing entry reads it from its row
                # from now on (until a late span clears it).
                await self._store.keep_shape(
                    row.id, agents=agents, n_steps=n_steps, version=row.version
                )
        return RunSummary(
            id=row.id,
            project=row.project,
            status=row.status,
            agents=list(agents),
            n_steps=n_steps,
            n_spans=row.n_spans,
            outcome=row.outcome,
            outcome_reason=row.outcome_reason,
            task=row.task,
            unfinished=row.unfinished,
            started_at=_seconds(row.started_at),
            ended_at=_seconds(row.ended_at),
            attributions=attributions,
        )

    async def list_runs(
        self,
        *,
        status: str | None = None,
        project: str | None = None,
        culprit: CulpritFilter | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> RunPage:
        """Runs newest first; with a `culprit` filter, those whose leading attribution
        names its agent and failure mode: the culprit a runs list shows, not any answer."""
        keep = culprit.keeps if culprit is not None and culprit.active else _keep_all
        agent = culprit.agent if culprit is not None else None
        found: list[tuple[RunRow, list[Attribution]]] = []
        next_cursor, scanned = cursor, 0
        while True:
            # Filtered, a page is read until it holds `limit` runs or LEADING_SCAN_LIMIT
            # runs were read; its cursor resumes after the last run read.
            rows, next_cursor, attributions = await self._store.list_runs_with_attributions(
                status=status,
                project=project,
                limit=limit - len(found),
                cursor=next_cursor,
                blamed_agent=agent,
                since_ns=int(since * 1e9) if since is not None else None,
                until_ns=int(until * 1e9) if until is not None else None,
            )
            scanned += len(rows)
            found += [
                (row, attributions.get(row.id, []))
                for row in rows
                if keep(attributions.get(row.id, []))
            ]
            if (
                keep is _keep_all
                or next_cursor is None
                or len(found) >= limit
                or scanned >= LEADING_SCAN_LIMIT
            ):
                break
        # Several at once: a summary may read and assemble its run (off the event loop),
        # and one after the other each would wait for a busy loop again.
        at_once = asyncio.Semaphore(SUMMARIES_AT_ONCE)

        async def summary(row: RunRow, answers: list[Attribution]) -> RunSummary:
            async with at_once:
                return _listed(await self._summary(row, answers))

        items = await asyncio.gather(*(summary(row, answers) for row, answers in found))
        return RunPage(items=items, next_cursor=next_cursor)

    async def get_run(
        self, run_id: str, *, steps_offset: int = 0, steps_limit: int | None = None
    ) -> RunDetail:
        """The run with its trajectory: all its steps, or the window `steps_offset`,
        `steps_limit` of them (each step keeps its `index`)."""
        row = await self._row(run_id)
        trajectory = await load_trajectory(self._store, row)
        summary = await self._summary(row, await self._store.list_attributions(row.id), trajectory)
        alarm = (await self._alarms.for_runs([run_id])).get(run_id) if self._alarms else None
        detail = RunDetail(
            alarm=alarm,
            **summary.model_dump(exclude={"agents", "n_steps", "attributions"}),
            attributions=summary.attributions,
            agents=list(trajectory.agents),
            n_steps=len(trajectory),
            trajectory=trajectory,
            steps_offset=steps_offset,
        )
        if steps_offset or steps_limit is not None:
            # A window is not a whole trajectory (its first index is not 0): it is set
            # after validation, and only this response carries it.
            stop = None if steps_limit is None else steps_offset + steps_limit
            window = {"steps": trajectory.steps[steps_offset:stop]}
            detail.trajectory = trajectory.model_copy(update=window)
        return detail

    async def recent_alarms(self, limit: int = 100) -> list[Alarm]:
        if self._alarms is None:
            return []
        return await self._alarms.recent(limit)

    async def post_outcome(
        self,
        run_id: str,
        outcome: str,
        *,
        reason: str | None,
        ground_truth: str | None,
        final_answer: str | None,
    ) -> RunSummary:
        """Record a verdict; a failure makes the run failed and queues its attributions."""
        await self._row(run_id)
        row = await self._store.set_outcome(
            run_id, outcome, reason=reason, ground_truth=ground_truth, final_answer=final_answer
        )
        if self._settle is not None:
            # A verdict finishes the run now: failed (with its jobs queued) or complete.
            await self._settle(run_id)
            row = await self._row(run_id)
        return await self._summary(row, await self._store.list_attributions(run_id))

    async def reattribute(self, run_id: str, attributor: str) -> JobOut:
        await self._row(run_id)
        return job_out(await self._jobs.enqueue(attributor, run_id=run_id))

    async def jobs(self, run_id: str) -> list[JobOut]:
        await self._row(run_id)
        return [job_out(job) for job in await self._jobs.for_run(run_id)]

    async def add_label(
        self,
        run_id: str,
        *,
        agent: str,
        step: int,
        reason: str | None,
        author: str | None,
        mode: str | None = None,
        source: str = "human",
        details: dict[str, Any] | None = None,
    ) -> LabelOut:
        row = await self._row(run_id)
        trajectory = await load_trajectory(self._store, row)
        if step >= len(trajectory):
            raise ValueError(f"step: {step} is outside 0..{len(trajectory) - 1}")
        known = {normalise_agent(a): a for a in (*trajectory.agents, *trajectory.roster)}
        if normalise_agent(agent) not in known:
            raise ValueError(f"agent: {agent!r} is not one of {sorted(known.values())}")
        label = await self._labels.add(
            run_id,
            agent=known[normalise_agent(agent)],
            step=step,
            reason=reason,
            author=author,
            mode=mode,
            source=source,
            details=details,
        )
        return label_out(label)

    async def add_verification(self, run_id: str, data: VerificationIn) -> Attribution:
        """Store a counterfactual verification as the run's `counterfactual` attribution
        (`server/verifications.py`); its steps must be the run's."""
        row = await self._row(run_id)
        trajectory = await load_trajectory(self._store, row)
        outside = [c.step for c in data.candidates if c.step >= len(trajectory)]
        if outside:
            raise ValueError(f"candidates: steps {outside} are outside 0..{len(trajectory) - 1}")
        attribution = counterfactual_attribution(data)
        await self._store.add_attribution(run_id, attribution)
        return attribution

    async def labels(self, run_id: str) -> list[LabelOut]:
        await self._row(run_id)
        return [label_out(label) for label in await self._labels.for_run(run_id)]

    async def stats(self, *, window_s: float = 7 * 86400, bucket_s: int = 3600) -> Stats:
        """Blame by agent over time, and each attributor's accuracy against human labels."""
        now = time.time()
        since_ns = int((now - window_s) * 1e9)
        attributions = await self._store.ok_attributions()
        # Blame counts one vote per run: the first ok attribution (the first configured
        # attributor's, normally) of each run.
        first_by_run: dict[str, tuple[str, int]] = {}
        for run_id, _method, agent, _step, created_at in attributions:
            first_by_run.setdefault(run_id, (agent, created_at))
        blame = Counter(agent for agent, _ in first_by_run.values())
        buckets: dict[int, Counter[str]] = defaultdict(Counter)
        for agent, created_at in first_by_run.values():
            if created_at >= since_ns:
                buckets[int(created_at / 1e9) // bucket_s * bucket_s][agent] += 1
        by_mode, modes_over_time = await self._modes(since_ns, bucket_s)
        labels = await self._labels.latest_by_run()
        scored: dict[str, list[tuple[bool, bool]]] = defaultdict(list)
        latest: dict[tuple[str, str], tuple[str, int]] = {}
        for run_id, method, agent, step, _created in attributions:
            latest[(run_id, method)] = (agent, step)  # the newest answer of each method counts
        for (run_id, method), (agent, step) in latest.items():
            label = labels.get(run_id)
            if label is not None:
                scored[method].append(
                    (normalise_agent(agent) == normalise_agent(label.agent), step == label.step)
                )
        accuracy = [
            AttributorAccuracy(
                method=method,
                labelled_runs=len(marks),
                agent_accuracy=sum(a for a, _ in marks) / len(marks),
                step_accuracy=sum(s for _, s in marks) / len(marks),
            )
            for method, marks in sorted(scored.items())
        ]
        return Stats(
            runs_by_status={
                status.value: await self._store.count_runs(status=status.value)
                for status in RunStatus
            },
            jobs_by_status=await self._jobs.counts(),
            blame_by_agent=dict(blame.most_common()),
            blame_over_time=[
                BlameBucket(start=float(start), counts=dict(counts))
                for start, counts in sorted(buckets.items())
            ],
            bucket_seconds=bucket_s,
            accuracy=accuracy,
            blame_by_mode=by_mode,
            modes_over_time=modes_over_time,
        )

    async def _modes(
        self, since_ns: int, bucket_s: int
    ) -> tuple[dict[str, int], list[BlameBucket]]:
        """Failed runs per failure mode (all time) and per mode in each bucket since
        `since_ns`; one vote per run, as blame by agent counts it."""
        first_by_run: dict[str, tuple[str, int]] = {}
        for run_id, _agent, mode, created_at in await self._store.ok_attribution_modes():
            first_by_run.setdefault(run_id, (mode or UNKNOWN_MODE, created_at))
        buckets: dict[int, Counter[str]] = defaultdict(Counter)
        for mode, created_at in first_by_run.values():
            if created_at >= since_ns:
                buckets[int(created_at / 1e9) // bucket_s * bucket_s][mode] += 1
        totals = Counter(mode for mode, _ in first_by_run.values())
        return dict(totals.most_common()), [
            BlameBucket(start=float(start), counts=dict(counts))
            for start, counts in sorted(buckets.items())
        ]
