"""Durability: SIGKILL the sidecar under sustained ingest, restart it on the same database,
and check that every acknowledged span was stored and every attribution job finished once.

The long version is `faultfinder bench chaos --kills N --duration S`.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from faultfinder.drills.chaos import KillDrill, run_kill_chaos
from faultfinder.server.db.engine import create_engine
from tests.integration.sidecar import ROOT


async def stored_rows(database_url: str) -> dict[str, list[tuple[Any, ...]]]:
    """The rows this test checks, read straight from the database."""
    queries = {
        "spans": "SELECT trace_id, span_id FROM spans",
        "failed_runs": "SELECT id FROM runs WHERE status IN ('failed', 'attributed')",
        "jobs": "SELECT run_id, status, attempts FROM jobs",
        "attributions": "SELECT run_id, method, status FROM attributions",
    }
    engine = create_engine(database_url)
    try:
        async with engine.connect() as conn:
            return {
                name: [tuple(row) for row in await conn.execute(text(sql))]
                for name, sql in queries.items()
            }
    finally:
        await engine.dispose()


@pytest.mark.slow
def test_sigkill_under_ingest_loses_no_acknowledged_span_and_jobs_resume(
    database_url: str, tmp_path: Path
) -> None:
    executions = tmp_path / "executions.txt"
    drill = KillDrill(
        kills=3,
        duration=10,
        attributors=["counting"],
        env={
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            "FAULTFINDER_PLUGINS": "tests.plugins.counting",
            "FAULTFINDER_TEST_EXECUTIONS": str(executions),
            # Jobs long enough that a kill can land in the middle of one.
            "FAULTFINDER_TEST_SLEEP": "0.5",
        },
        aim_at_jobs_s=5,
        failed_interval_s=1.0,
        settle_timeout=90,
    )
    outcome = run_kill_chaos(database_url, tmp_path, drill)
    report = outcome.report
    assert report.settled, report.errors
    assert len(report.restart_seconds) == 3  # killed and restarted three times
    assert report.spans_acknowledged > 1000, report
    assert report.spans_given_up == 0  # every request was acknowledged or in flight at a kill

    rows = asyncio.run(stored_rows(database_url))
    stored = set(rows["spans"])
    missing = outcome.acknowledged - stored
    assert not missing, f"{len(missing)} acknowledged spans were lost (seed {report.seed})"
    # Every stored span is one the test sent (acknowledged or in flight at a kill).
    assert stored <= outcome.acknowledged | outcome.interrupted

    failed_runs = {run_id for (run_id,) in rows["failed_runs"]}
    assert len(failed_runs) >= 5
    jobs = rows["jobs"]
    # One job per failed run, each finished: the killed ones resumed after the restart.
    assert Counter(run_id for run_id, _, _ in jobs) == Counter(failed_runs)
    assert {status for _, status, _ in jobs} == {"done"}
    assert report.kills_during_a_job >= 1
    assert any(attempts > 1 for _, _, attempts in jobs), "no kill interrupted a job"
    # Exactly one stored attribution per failed run, however often its job was interrupted.
    attributions = Counter(run_id for run_id, _, _ in rows["attributions"])
    assert attributions == Counter(failed_runs)
    assert {(method, status) for _, method, status in rows["attributions"]} == {("counting", "ok")}
