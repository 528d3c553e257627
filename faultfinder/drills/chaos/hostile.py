"""The hostile drills of `faultfinder bench chaos --hostile`: the eight probes of issue 28
(memory exhaustion, a database that takes no writes, unfinished and slow uploads, CSRF,
large runs, readiness, hostile names), and four of the second round (issue 55: small
bodies that would expand to gigabytes; storage faults and deep values; one client holding
ingest for the others; runs bounded in bytes), re-run against
real `faultfinder serve` processes.

Each drill fills a `Finding` with figures (probe → measure → value) and named checks
(what must hold now that the issue is fixed); `run_hostile` runs the chosen drills on
each database, a fresh database and sidecar per drill.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from faultfinder.drills.chaos.hostile_context import (
    Drill,
    DrillContext,
    Finding,
    HostileScale,
    database_label,
)

__all__ = ["ITEMS", "finding_lines", "parse_items", "run_hostile"]


def _drills() -> dict[int, tuple[str, Drill, bool]]:
    """Item → (title, drill, SQLite only)."""
    from faultfinder.drills.chaos import (
        hostile_bounds,
        hostile_database,
        hostile_holds,
        hostile_requests,
        hostile_runs,
        hostile_sizes,
        hostile_uploads,
    )

    return {
        1: ("one request, one run: memory", hostile_runs.memory_drill, False),
        2: ("a read-only database", hostile_database.read_only_drill, False),
        3: ("unfinished chunked uploads", hostile_uploads.chunked_drill, False),
        4: ("slow senders", hostile_uploads.slow_senders_drill, False),
        5: ("CSRF with the dashboard cookie", hostile_requests.csrf_drill, False),
        6: ("large runs stall everything", hostile_runs.large_run_drill, False),
        7: ("readiness and a full disk", hostile_database.full_disk_drill, True),
        8: ("hostile names", hostile_requests.names_drill, False),
        9: ("small bodies that would expand", hostile_bounds.bodies_drill, False),
        10: ("storage faults and deep values", hostile_bounds.storage_drill, False),
        11: ("one client holding ingest for others", hostile_holds.holds_drill, False),
        12: ("runs bounded in bytes, a failed run over its cap", hostile_sizes.sizes_drill, False),
    }


ITEMS = tuple(range(1, 13))


def parse_items(value: str) -> list[int]:
    """`all`, or item numbers separated by commas (`1,3,6`), in order, each once."""
    if value.strip().lower() == "all":
        return list(ITEMS)
    items: list[int] = []
    for part in value.split(","):
        part = part.strip()
        if not part:
            continue
        if not part.isdigit() or int(part) not in ITEMS:
            raise ValueError(f"{part!r} is not a hostile drill (1–12, or 'all')")
        if int(part) not in items:
            items.append(int(part))
    if not items:
        raise ValueError("no item given (1–12, or 'all')")
    return sorted(items)


def run_hostile(
    items: Sequence[int],
    database_urls: Sequence[str],
    workdir: Path,
    scale: HostileScale,
    say: Callable[[str], None],
    *,
    on_finding: Callable[[Finding], None] | None = None,
) -> list[Finding]:
    """Run the drills `items` on each of `database_urls`; their findings, in order."""
    drills = _drills()
    findings: list[Finding] = []
    for number, database_url in enumerate(database_urls):
        dialect = make_url(database_url).get_backend_name()
        for item in items:
            title, drill, sqlite_only = drills[item]
            finding = Finding(item, title, database_label(database_url))
            folder = workdir / f"hostile-{item}-{dialect}-{number}"
            folder.mkdir(parents=True, exist_ok=True)
            started = time.monotonic()

            def said(message: str, prefix: str = f"[item {item}, {dialect}]") -> None:
                say(f"{prefix} {message}")

            if sqlite_only and dialect != "sqlite":
                finding.skipped = "a SQLite-only drill (it fills a small tmpfs under the file)"
            else:
                said(f"{title} …")
                try:
                    drill(DrillContext(database_url, folder, scale, said), finding)
                except Exception as exc:
                    finding.error = f"{type(exc).__name__}: {exc}"
                    said(traceback.format_exc())
            finding.seconds = round(time.monotonic() - started, 1)
            findings.append(finding)
            if on_finding is not None:
                on_finding(finding)
    return findings


def finding_lines(finding: Finding) -> Iterator[str]:
    """`finding` as text: a header with the verdict, a line per measure, then the checks."""
    verdict = {True: "holds", False: "DOES NOT HOLD", None: "not run"}[finding.holds]
    yield (
        f"== item {finding.item}: {finding.title} ({finding.database}) — {verdict}"
        f" [{finding.seconds:g} s]"
    )
    if finding.skipped:
        yield f"  not run: {finding.skipped}"
    for probe, measures in finding.figures.items():
        for number, (measure, value) in enumerate(measures.items()):
            yield f"  {probe if number == 0 else '':44} {measure:28} {_shown(value)}"
    for name, held in finding.checks.items():
        yield f"  {'ok  ' if held else 'FAIL'} {name}"
    for note in finding.notes:
        yield f"  note: {note}"
    if finding.error:
        yield f"  error: {finding.error}"


def _shown(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".") if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)
