"""Many tiny runs: does the run lifecycle keep up with the span writer on one database?

    python -m faultfinder.drills.sweep_speed --database-url sqlite+aiosqlite:///x.db

In one process, as in the sidecar: a writer stores 6-span runs (`ChaosTraffic`, as
`faultfinder bench chaos` sends them) through `SpanStore.write_spans` as fast as the
database takes them (or paced, `--runs-per-second`), while the lifecycle sweep runs
every second (and enqueues jobs for failed runs) with a short quiet period. Reported
per 10 s: runs written per second, write latency, and runs the sweeps settled; at the
end, the runs that were due (quiet for longer than the quiet period) but not yet
settled. A lifecycle that keeps up leaves about one sweep's worth of runs due; one that
falls behind leaves a backlog that grows with the duration. The database must be empty
(it is migrated first).

The batches are decoded before the clock starts, `PREPARED_PER_SECOND` per second of
the run (about 1.7 MB each at 200 runs per write: 2 GB for 60 s), and then frozen out
of Python's garbage collector: otherwise every full collection walks those millions of
benchmark-owned objects and stalls the writer for 0.4-1.6 s, a pause of the benchmark,
not of the database. If the writer uses them all up early, the report says when.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import sys
import time
from dataclasses import dataclass, field

import click

from faultfinder.drills.chaos import ChaosTraffic
from faultfinder.reading.model import SpanRecord
from faultfinder.server import lifecycle
from faultfinder.server.composition import span_store_for
from faultfinder.server.db.engine import create_engine
from faultfinder.server.db.migrate import upgrade
from faultfinder.server.otlp.decode import decode_protobuf
from faultfinder.server.store import JobQueue, RunStatus


@dataclass
class SweepFigures:
    writes: list[tuple[float, float, int]] = field(default_factory=list)
    """(seconds since start, write latency s, runs) per write."""
    sweeps: list[tuple[float, float, int]] = field(default_factory=list)
    """(seconds since start, sweep duration s, runs moved) per sweep."""
    running: int = 0
    due: int = 0
    ran_out_at: float | None = None
    """Seconds since start when the writer used up the prepared batches, if it did."""
    backlog: list[tuple[float, int]] = field(default_factory=list)
    """(seconds since start, runs due but not settled) every `BACKLOG_EVERY_S`."""


PREPARED_PER_SECOND = 20
"""Writes prepared per second of the run; PostgreSQL on a 2-core machine took about 16."""

BACKLOG_EVERY_S = 10.0
"""How often the runs that are due but not settled are counted while the clock runs."""


async def measure(
    database_url: str,
    *,
    duration: float,
    quiet: float,
    runs_per_write: int,
    prepared_per_second: float = PREPARED_PER_SECOND,
    runs_per_second: float | None = None,
) -> SweepFigures:
    engine = create_engine(database_url)
    store = span_store_for(engine)
    jobs = JobQueue(engine, record_attribution=store.record_attribution)
    traffic = ChaosTraffic(steps_per_run=5, runs_per_request=runs_per_write, failed_interval_s=1)

    def batch() -> list[SpanRecord]:
        spans: list[SpanRecord] = decode_protobuf(
            traffic.next_request().body, project_header=None
        ).spans
        return spans

    # Decoded up front (more than the writer can store in `duration`): the database and
    # the sweep are measured, not the decoder. Frozen so that the collector skips them.
    # Paced, just the writes the run needs; else as many as the writer might take.
    per_second = runs_per_second / runs_per_write if runs_per_second else prepared_per_second
    planned = int(duration * per_second) + 1
    interval = 1 / per_second if runs_per_second else 0.0
    click.echo(f"decoding {planned} writes of {runs_per_write} runs before the clock starts…")
    prepared = []
    with click.progressbar(length=planned, label="decoding", file=sys.stderr) as bar:
        for _ in range(planned):
            prepared.append(batch())
            bar.update(1)
    gc.collect()
    gc.freeze()
    figures = SweepFigures()
    start = time.monotonic()
    stop = start + duration

    async def writer() -> None:
        for number, spans in enumerate(prepared):
            # Paced open loop: each write when it is due, whether the last one was slow or not.
            await asyncio.sleep(max(0.0, start + number * interval - time.monotonic()))
            if time.monotonic() >= stop:
                return
            began = time.perf_counter()
            await store.write_spans(spans)
            elapsed = time.perf_counter() - began
            figures.writes.append((time.monotonic() - start, elapsed, runs_per_write))
            await asyncio.sleep(0)
        figures.ran_out_at = time.monotonic() - start

    async def sweeper() -> None:
        while time.monotonic() < stop:
            began = time.perf_counter()
            moved = await lifecycle.sweep(store, now=time.time(), quiet_period_s=quiet)
            await jobs.enqueue_for_failed_runs(["first_error"])
            elapsed = time.perf_counter() - began
            figures.sweeps.append((time.monotonic() - start, elapsed, len(moved)))
            await asyncio.sleep(1.0)

    running = RunStatus.RUNNING.value

    async def due_now() -> int:
        cutoff = time.time_ns() - int(quiet * 1e9)
        return await store.count_runs(status=running, quiet_since=cutoff)

    async def backlog() -> None:
        # The growth of this count over the run is the verdict: flat (about one sweep's
        # worth of writes) keeps up; rising falls behind.
        while True:
            await asyncio.sleep(BACKLOG_EVERY_S)
            if time.monotonic() >= stop:
                return
            due = await due_now()
            figures.backlog.append((time.monotonic() - start, due))
            click.echo(f"{time.monotonic() - start:6.0f} s  due but not settled: {due}", err=True)

    try:
        await asyncio.gather(writer(), sweeper(), backlog())
        figures.running = await store.count_runs(status=running)
        figures.due = await due_now()
    finally:
        await store.aclose()
        await engine.dispose()
        gc.unfreeze()
    return figures


@click.command()
@click.option("--database-url", required=True, help="An empty database (it is migrated).")
@click.option("--duration", type=float, default=60.0, show_default=True, help="Seconds.")
@click.option("--quiet", type=float, default=5.0, show_default=True, help="Quiet period, s.")
@click.option("--runs-per-write", type=int, default=200, show_default=True)
@click.option(
    "--prepared-per-second",
    type=float,
    default=PREPARED_PER_SECOND,
    show_default=True,
    help="Writes decoded before the clock starts, per second of the run (about 1.7 MB "
    "each at 200 runs): lower it for long runs on a machine whose writer is slower.",
)
@click.option(
    "--runs-per-second",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Write this many runs a second (paced, open loop) instead of as fast as the "
    "database takes them; only the writes the run needs are prepared.",
)
def main(
    database_url: str,
    duration: float,
    quiet: float,
    runs_per_write: int,
    prepared_per_second: float,
    runs_per_second: float | None,
) -> None:
    upgrade(database_url, show_progress=False)
    figures = asyncio.run(
        measure(
            database_url,
            duration=duration,
            quiet=quiet,
            runs_per_write=runs_per_write,
            prepared_per_second=prepared_per_second,
            runs_per_second=runs_per_second,
        )
    )
    due_at = dict(
        (int(at // BACKLOG_EVERY_S) * int(BACKLOG_EVERY_S), due) for at, due in figures.backlog
    )
    click.echo(
        "seconds   runs written/s  write p50 / max ms   sweeps  runs settled  sweep max ms"
        "  due after"
    )
    for window in range(0, int(duration), 10):
        writes = [w for w in figures.writes if window <= w[0] < window + 10]
        sweeps = [s for s in figures.sweeps if window <= s[0] < window + 10]
        if not writes:
            continue
        latencies = [w[1] * 1000 for w in writes]
        click.echo(
            f"{window:3d}-{window + 10:<4d} {sum(w[2] for w in writes) / 10:14.0f}"
            f"  {statistics.median(latencies):8.0f} / {max(latencies):6.0f}"
            f"  {len(sweeps):8d}  {sum(s[2] for s in sweeps):12d}"
            f"  {max((s[1] * 1000 for s in sweeps), default=0):12.0f}"
            f"  {due_at.get(window + 10, figures.due if window + 10 >= duration else '-'):>9}"
        )
    written = sum(w[2] for w in figures.writes)
    click.echo(
        f"runs written: {written} ({written / duration:.0f}/s); at the end {figures.running} "
        f"running, {figures.due} of them due (quiet > {quiet:g} s) but not settled"
    )
    if figures.ran_out_at is not None:
        click.echo(
            f"the writer used up the {len(figures.writes)} prepared writes after "
            f"{figures.ran_out_at:.1f} s; it wrote nothing after that"
        )


if __name__ == "__main__":
    main()
