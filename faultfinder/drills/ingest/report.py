"""The figures of one ingest benchmark run and how they are printed."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class StageTimes:
    """One server-side ingest stage over the run, from the difference of two scrapes of
    faultfinder's histograms. Quantiles are bucket upper bounds (None: above the largest)."""

    count: int
    total_s: float
    mean_ms: float
    p50_at_most_ms: float | None
    p99_at_most_ms: float | None


@dataclass
class IngestReport:
    """Figures of one ingest benchmark run."""

    url: str
    body_format: str
    gzip: bool
    concurrency: int
    batch: int
    spans_requested: int
    requests: int
    mean_span_bytes: float
    """Serialized size per span before compression."""
    bytes_sent: int = 0
    spans_accepted: int = 0
    spans_rejected: int = 0
    """Spans in requests that finally failed, plus spans a 2xx answer reported as rejected."""
    status_2xx: int = 0
    status_4xx: int = 0
    """4xx answers other than 429."""
    status_5xx: int = 0
    """5xx answers other than 503."""
    throttled: int = 0
    """429 and 503 answers (each is retried after Retry-After)."""
    retries: int = 0
    transport_errors: int = 0
    send_seconds: float = 0.0
    offered_spans_per_s: float | None = None
    """The fixed offered load (`--rate`); None when each connection sent as fast as it
    was answered."""
    accepted_spans_per_s: float = 0.0
    latency_p50_ms: float = 0.0
    latency_p99_ms: float = 0.0
    durable_spans_per_s: float | None = None
    durable_after_s: float | None = None
    """Seconds from the first send until every accepted span was queryable."""
    spans_stored: int | None = None
    """Growth of the server's stored-span count during the run."""
    lost_spans: int | None = None
    """Accepted but not stored."""
    durability_note: str | None = None
    client_peak_rss_mb: float = 0.0
    server_peak_rss_mb: float | None = None
    """The server process's VmHWM (peak since it started)."""
    server_sampled_peak_rss_mb: float | None = None
    """Highest VmRSS seen while this run was sending and waiting."""
    server_stages: dict[str, StageTimes] | None = None
    """With --verify faultfinder: decode, queue wait and commit times inside the server."""
    writer_busy: float | None = None
    """Share of the time until every span was stored that the server spent committing."""
    errors: list[str] = field(default_factory=list)
    """A few distinct failure messages, for diagnosis."""

    @property
    def ok(self) -> bool:
        """Every span accepted, and (when verified) stored."""
        return self.spans_accepted == self.spans_requested and not self.lost_spans


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 1]); 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def report_lines(report: IngestReport) -> list[str]:
    """The report as aligned human-readable lines."""
    codec = report.body_format + (", gzip" if report.gzip else "")
    lines = [
        f"target            {report.url} ({codec}, {report.batch} spans/request, "
        f"{report.concurrency} connections)",
        f"spans             {report.spans_requested} requested in {report.requests} requests, "
        f"{report.spans_accepted} accepted, {report.spans_rejected} rejected "
        f"({report.mean_span_bytes:.0f} B/span)",
        f"accepted          {report.accepted_spans_per_s:.0f} spans/s over "
        f"{report.send_seconds:.2f} s",
        f"latency           p50 {report.latency_p50_ms:.1f} ms, p99 {report.latency_p99_ms:.1f} ms"
        + (
            f" (offered {report.offered_spans_per_s:.0f} spans/s; from when each request was due)"
            if report.offered_spans_per_s is not None
            else ""
        ),
        f"responses         2xx {report.status_2xx}, 4xx {report.status_4xx}, "
        f"5xx {report.status_5xx}, 429/503 {report.throttled} "
        f"({report.retries} retries), transport errors {report.transport_errors}",
    ]
    if report.durable_spans_per_s is not None and report.durable_after_s is not None:
        lines.append(
            f"durable           {report.durable_spans_per_s:.0f} spans/s "
            f"(all stored {report.durable_after_s:.2f} s after the first send)"
        )
    if report.lost_spans is not None:
        lines.append(f"lost              {report.lost_spans} spans (stored {report.spans_stored})")
    if report.durability_note:
        lines.append(f"durability        {report.durability_note}")
    for stage, times in (report.server_stages or {}).items():
        label = {"decode": "decoding", "queue_wait": "queue wait", "commit": "commits"}[stage]
        what = "transactions" if stage == "commit" else "requests"
        lines.append(
            f"server {label:<11}{times.count} {what}, mean {times.mean_ms:.1f} ms, "
            f"p50 ≤ {_bound(times.p50_at_most_ms)}, p99 ≤ {_bound(times.p99_at_most_ms)}"
            + (
                f"; writer busy {report.writer_busy:.0%} of the run"
                if stage == "commit" and report.writer_busy is not None
                else ""
            )
        )
    lines.append(f"client peak RSS   {report.client_peak_rss_mb:.0f} MB")
    if report.server_peak_rss_mb is not None or report.server_sampled_peak_rss_mb is not None:
        peak = f"{report.server_peak_rss_mb:.0f} MB" if report.server_peak_rss_mb else "n/a"
        sampled = report.server_sampled_peak_rss_mb
        lines.append(
            f"server peak RSS   {peak} (VmHWM)"
            + (f", {sampled:.0f} MB sampled during the run" if sampled is not None else "")
        )
    lines.extend(f"error             {message}" for message in report.errors)
    return lines


def _bound(milliseconds: float | None) -> str:
    if milliseconds is None:
        return "∞ (above the largest bucket)"
    return f"{milliseconds:g} ms"
