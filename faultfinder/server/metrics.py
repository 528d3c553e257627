"""Prometheus metrics at `GET /metrics`: ingest, runs, attribution jobs, latency, LLM cost,
blame, and the nightly benchmark's latest scores.

Counters count what happened in this process since it started (spans received,
attributions made by its worker); gauges of runs, jobs and benchmark scores, and the blame
counter, are read from the database at scrape time, so every replica reports the same
shared totals for those (a scaled-out worker serves no `/metrics` of its own). Each app
has its own registry (several apps in one process do not collide).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from faultfinder.attributors.model import Attribution, AttributionStatus
from faultfinder.server.db.models import JobStatus, RunStatus
from faultfinder.server.ingest import SpanWriter
from faultfinder.server.store import BenchEntry, BenchHistory, JobQueue, SpanStore

log = logging.getLogger(__name__)

LATENCY_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
"""Seconds: heuristics answer in milliseconds, LLM methods in seconds to minutes."""


@dataclass
class DatabaseSnapshot:
    """Run and job counts read from the database for one scrape."""

    up: bool = False
    runs: dict[str, int] = field(default_factory=dict)
    unfinished: int = 0
    """Runs failed because their root span never arrived."""
    jobs: dict[tuple[str, str], int] = field(default_factory=dict)
    """(attributor, status) → jobs."""
    bench: list[BenchEntry] = field(default_factory=list)
    """The newest nightly benchmark entry of every (dataset, attributor, settings)."""


_BLAME_ROWS_PER_SCRAPE = 50_000
"""Attributions one scrape reads at most (a large database is caught up over a few)."""


@dataclass
class BlameTally:
    """Ok attributions by (agent, attributor, failure mode), counted from the database:
    every replica reports the same totals whichever process attributed the run. Each
    scrape reads only the attributions stored since the last one."""

    counts: dict[tuple[str, str, str], int] = field(default_factory=dict)
    last_id: int = 0

    async def advance(self, store: SpanStore) -> None:
        """Count the attributions stored since the last call."""
        read = 0
        while read < _BLAME_ROWS_PER_SCRAPE:
            rows = await store.blame_after(self.last_id)
            for row_id, method, agent, mode in rows:
                key = (agent, method, mode or "unknown")
                self.counts[key] = self.counts.get(key, 0) + 1
                self.last_id = row_id
            read += len(rows)
            if not rows:
                return


BENCH_METRICS = ("agent", "step", "agent_and_step", "step_pm1", "step_pm3", "step_pm5")
"""The accuracies of a nightly entry exposed as `faultfinder_bench_accuracy{metric=…}`."""


class LiveCollector(Collector):
    """Values that already live elsewhere: the ingest writer's counters and queue, and
    the database snapshot taken just before the scrape."""

    def __init__(self) -> None:
        self.writer: SpanWriter | None = None
        self.queue_capacity: int | None = None
        self.snapshot = DatabaseSnapshot()
        self.blame = BlameTally()

    def collect(self) -> Iterator[Metric]:
        counters = self.writer.counters if self.writer is not None else None
        received = CounterMetricFamily(
            "faultfinder_spans_received", "Spans received by the OTLP receivers (HTTP and gRPC)."
        )
        stored = CounterMetricFamily(
            "faultfinder_spans_stored", "Spans acknowledged after being committed to the database."
        )
        rejected = CounterMetricFamily(
            "faultfinder_spans_rejected",
            "Spans dropped from accepted requests, by reason (invalid_span: refused at decode; "
            "unstorable: refused by the database; run_too_large: their run holds "
            "FAULTFINDER_MAX_SPANS_PER_RUN spans already).",
            labels=["reason"],
        )
        requests_rejected = CounterMetricFamily(
            "faultfinder_ingest_requests_rejected",
            "Whole ingest requests turned away, by reason (undecodable, too_large, saturated).",
            labels=["reason"],
        )
        write_errors = CounterMetricFamily(
            "faultfinder_ingest_write_errors",
            "Failed attempts to store a batch (retried, or split to isolate unstorable spans).",
        )
        truncated = CounterMetricFamily(
            "faultfinder_ingest_values_truncated",
            "Attribute values cut to the size cap or replaced for nesting too deeply at decode "
            "(their spans were kept).",
        )
        batches = CounterMetricFamily(
            "faultfinder_ingest_batches", "Transactions the span writer committed."
        )
        queued = GaugeMetricFamily(
            "faultfinder_ingest_queue_spans", "Spans waiting for the writer right now."
        )
        capacity = GaugeMetricFamily(
            "faultfinder_ingest_queue_capacity_spans",
            "Spans that may wait before ingest answers 503 (FAULTFINDER_INGEST_QUEUE_SPANS).",
        )
        if counters is not None and self.writer is not None:
            received.add_metric([], counters.spans_received)
            stored.add_metric([], counters.spans_stored)
            for reason, count in sorted(counters.spans_rejected.items()):
                rejected.add_metric([reason], count)
            for reason, count in sorted(counters.requests_rejected.items()):
                requests_rejected.add_metric([reason], count)
            write_errors.add_metric([], counters.write_errors)
            batches.add_metric([], counters.batches_written)
            truncated.add_metric([], counters.values_truncated)
            queued.add_metric([], self.writer.queued_spans)
        if self.queue_capacity is not None:
            capacity.add_metric([], self.queue_capacity)
        yield from (received, stored, rejected, requests_rejected, write_errors, batches)
        yield truncated
        yield from (queued, capacity)
        if counters is not None:
            # Where an ingest request's time goes: decode, wait in the queue, commit.
            for name, text, histogram in (
                (
                    "faultfinder_ingest_decode_seconds",
                    "Decompressing and decoding one ingest request's body.",
                    counters.decode_seconds,
                ),
                (
                    "faultfinder_ingest_queue_wait_seconds",
                    "Time a request's spans waited in the ingest queue for the writer.",
                    counters.queue_seconds,
                ),
                (
                    "faultfinder_ingest_commit_seconds",
                    "Duration of each committed write transaction (group commit of the "
                    "waiting spans; failed tries not included).",
                    counters.commit_seconds,
                ),
            ):
                yield HistogramMetricFamily(
                    name, text, buckets=histogram.cumulative(), sum_value=histogram.total_seconds
                )

        snapshot = self.snapshot
        database_up = GaugeMetricFamily(
            "faultfinder_database_up", "1 when the last scrape could read the database."
        )
        database_up.add_metric([], 1 if snapshot.up else 0)
        runs = GaugeMetricFamily(
            "faultfinder_runs", "Runs in the database by status.", labels=["status"]
        )
        unfinished = GaugeMetricFamily(
            "faultfinder_runs_unfinished",
            "Failed runs whose root span never arrived: their process crashed, was killed or"
            " hung before ending it.",
        )
        jobs = GaugeMetricFamily(
            "faultfinder_attribution_jobs",
            "Attribution jobs in the database by attributor and status.",
            labels=["attributor", "status"],
        )
        if snapshot.up:
            for status in RunStatus:
                runs.add_metric([status.value], snapshot.runs.get(status.value, 0))
            unfinished.add_metric([], snapshot.unfinished)
            attributors = sorted({attributor for attributor, _ in snapshot.jobs})
            for attributor in attributors:
                for job_status in JobStatus:
                    count = snapshot.jobs.get((attributor, job_status.value), 0)
                    jobs.add_metric([attributor, job_status.value], count)
        blame = CounterMetricFamily(
            "faultfinder_blame",
            "Failed runs blamed on each agent, by the attributor that blamed it and the"
            " failure mode it found (a Who&When Pro code, or `unknown` for a guess); counted"
            " from the database.",
            labels=["agent", "attributor", "mode"],
        )
        for labels, count in sorted(self.blame.counts.items()):
            blame.add_metric(list(labels), count)
        yield from (database_up, runs, unfinished, jobs, blame)
        yield from _bench_families(snapshot.bench if snapshot.up else [])


def _bench_families(entries: list[BenchEntry]) -> Iterator[Metric]:
    """The latest nightly score of every (dataset, attributor, settings)."""
    names = ["dataset", "attributor", "settings"]
    accuracy = GaugeMetricFamily(
        "faultfinder_bench_accuracy",
        "Latest nightly benchmark accuracy (fraction of the entry's records), by metric.",
        labels=[*names, "metric"],
    )
    bounds = GaugeMetricFamily(
        "faultfinder_bench_accuracy_interval",
        "The 95 % Wilson interval of that accuracy, by bound (lo, hi).",
        labels=[*names, "metric", "bound"],
    )
    records = GaugeMetricFamily(
        "faultfinder_bench_records", "Records the latest nightly entry scored.", labels=names
    )
    regression = GaugeMetricFamily(
        "faultfinder_bench_regression",
        "1 when the latest nightly entry failed the regression gate (worse beyond noise"
        " than its last accepted entry).",
        labels=names,
    )
    measured = GaugeMetricFamily(
        "faultfinder_bench_timestamp_seconds",
        "When the latest nightly entry was scored (Unix seconds).",
        labels=names,
    )
    for entry in entries:
        key = [entry.dataset, entry.attributor, entry.settings]
        overall = entry.figures.get("overall") or {}
        for metric in BENCH_METRICS:
            figure = overall.get(metric)
            if not isinstance(figure, dict):
                continue
            accuracy.add_metric([*key, metric], float(figure["value"]))
            bounds.add_metric([*key, metric, "lo"], float(figure["lo"]))
            bounds.add_metric([*key, metric, "hi"], float(figure["hi"]))
        records.add_metric(key, entry.n_records)
        regression.add_metric(key, 1 if entry.regression else 0)
        measured.add_metric(key, entry.created_at / 1e9)
    yield from (accuracy, bounds, records, regression, measured)


class ServerMetrics:
    """The sidecar's registry: counters fed by the attribution hook plus live values."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.live = LiveCollector()
        self.registry.register(self.live)
        self.attributions = Counter(
            "faultfinder_attributions",
            "Attributions stored by this process's worker, by attributor and outcome (ok/failed).",
            ["attributor", "outcome"],
            registry=self.registry,
        )
        self.attribution_latency = Histogram(
            "faultfinder_attribution_latency_seconds",
            "Time one attribution took, as the attributor measured it.",
            ["attributor"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.llm_calls = Counter(
            "faultfinder_llm_calls",
            "Model calls made by LLM attributors.",
            ["attributor"],
            registry=self.registry,
        )
        self.llm_tokens = Counter(
            "faultfinder_llm_tokens",
            "Tokens spent by LLM attributors, by kind (prompt/completion).",
            ["attributor", "kind"],
            registry=self.registry,
        )
        self.llm_errors = Counter(
            "faultfinder_llm_errors",
            "Model call errors that were retried, plus LLM attributions that failed.",
            ["attributor"],
            registry=self.registry,
        )
        self.alarms = Counter(
            "faultfinder_early_alarms",
            "Early alarms the online auditor raised on running runs, by suspected agent.",
            ["agent"],
            registry=self.registry,
        )

        self.verifications = Counter(
            "faultfinder_verifications",
            "Candidate steps tested by counterfactual replay (`faultfinder verify`), by"
            " result: flipped, still_failed, diverged, unmapped, error.",
            ["result"],
            registry=self.registry,
        )

    def observe_verification(self, results: Iterable[str]) -> None:
        """Count one posted verification's candidates by result."""
        for result in results:
            self.verifications.labels(result).inc()

    def attach(self, writer: SpanWriter, *, queue_capacity: int) -> None:
        """Read ingest figures from `writer` (called once the writer exists)."""
        self.live.writer = writer
        self.live.queue_capacity = queue_capacity

    def observe_attribution(self, attribution: Attribution) -> None:
        """Count one stored attribution (the worker's `on_attribution` hook calls this)."""
        method = attribution.method
        ok = attribution.status is AttributionStatus.OK
        self.attributions.labels(method, "ok" if ok else "failed").inc()
        self.attribution_latency.labels(method).observe(attribution.latency_s)
        uses_model = attribution.llm_calls > 0 or attribution.model is not None
        if uses_model:
            self.llm_calls.labels(method).inc(attribution.llm_calls)
            self.llm_tokens.labels(method, "prompt").inc(attribution.prompt_tokens)
            self.llm_tokens.labels(method, "completion").inc(attribution.completion_tokens)
            retried = attribution.details.get("retried_errors")
            errors = len(retried) if isinstance(retried, list) else 0
            if errors or not ok:
                self.llm_errors.labels(method).inc(errors + (0 if ok else 1))

    async def refresh(
        self, store: SpanStore, jobs: JobQueue, bench: BenchHistory | None = None
    ) -> None:
        """Read run and job counts and the latest benchmark scores from the database for
        the next exposition."""
        snapshot = DatabaseSnapshot()
        try:
            snapshot.runs, snapshot.unfinished = await store.runs_by_status()
            snapshot.jobs = await jobs.counts_by_attributor()
            await self.live.blame.advance(store)
            if bench is not None:
                snapshot.bench = await bench.latest()
            snapshot.up = True
        except Exception:  # a scrape reports the database as down instead of failing
            log.exception("reading run and job counts for /metrics failed")
        self.live.snapshot = snapshot

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format."""
        return generate_latest(self.registry)
