"""The online auditor raises its alarm while a run is still arriving, before the run ends."""

from __future__ import annotations

import html
import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from faultfinder.attributors.auditor import MODEL_FEATURES, Alarm, Auditor
from faultfinder.datasets import load_dataset
from faultfinder.reading.assembler import assemble_trajectory
from faultfinder.reading.runs import run_facts
from faultfinder.server.audit import AuditLimits, OnlineAuditor
from faultfinder.server.audit_process import NICENESS
from faultfinder.server.store import AlarmStore, SpanStore
from tests.integration.sidecar import running_sidecar, spawned_children
from tests.otlp_helpers import protobuf_body, span_records, trajectory_spans


async def test_alarms_are_raised_from_the_prefix_of_runs_still_running(store: SpanStore) -> None:
    # Long Hand-Crafted runs whose step spans arrive one by one; the root, exported when
    # it ends, comes last.
    records = [r for r in load_dataset("who_and_when:hand-crafted") if len(r.trajectory) > 30][:5]
    alarms = AlarmStore(store.engine)
    announced: list[Alarm] = []

    async def on_alarm(alarm: Alarm) -> None:
        announced.append(alarm)

    early = []
    async with OnlineAuditor(store, alarms, interval=3600, on_alarm=on_alarm) as auditor:
        for record in records:
            spans = span_records(trajectory_spans(record.trajectory))
            root = next(span for span in spans if span.parent_span_id is None)
            steps = sorted(
                (s for s in spans if s is not root), key=lambda s: s.start_time_unix_nano
            )
            for sent, span in enumerate(steps, start=1):
                await store.write_spans([span])
                for alarm in await auditor.audit_once():
                    run = await store.get_run(alarm.run_id)
                    assert run is not None and run.status == "running"
                    assert alarm.steps_seen == sent and alarm.step < sent
                    early.append(len(steps) - sent)  # steps still to come when it rang
            await store.write_spans([root])
        assert await auditor.audit_once() == []  # one alarm per run at most
    assert announced, "no alarm on five long failed runs"
    assert max(early) > 0  # at least one alarm came before the run's last step
    stored = await alarms.for_runs([alarm.run_id for alarm in announced])
    assert {run_id: (a.step, a.agent, a.reason) for run_id, a in stored.items()} == {
        alarm.run_id: (alarm.step, alarm.agent, alarm.reason) for alarm in announced
    }
    # Each reason names the step and its agent, and ranks the step among the run's steps.
    for alarm in announced:
        assert alarm.reason.startswith(f"Step {alarm.step} ({alarm.agent}) raised the alarm: ")
        assert "alarm line" in alarm.reason or "only step" in alarm.reason


async def test_a_pass_over_many_runs_raises_the_alarms_of_auditing_each_run_alone(
    store: SpanStore,
) -> None:
    # More changed runs than one batch of the pass (batches of 2 runs here).
    records = [r for r in load_dataset("who_and_when:hand-crafted") if len(r.trajectory) > 30][:8]
    run_ids = []
    for record in records:
        spans = span_records(trajectory_spans(record.trajectory))
        await store.write_spans(spans)
        run_ids.append(run_facts(spans[0]).run_id)
    alone = Auditor()
    expected = {}
    for run_id in run_ids:
        alarm = alone.observe(assemble_trajectory(run_id, await store.run_spans(run_id)))
        if alarm is not None:
            expected[run_id] = alarm
    assert len(expected) >= 2, "too few alarms to compare"
    # Another replica already stored one run's alarm: this one does not announce it again.
    elsewhere = next(iter(expected.values()))
    alarms = AlarmStore(store.engine)
    assert await alarms.add(elsewhere)
    announced: list[Alarm] = []

    async def on_alarm(alarm: Alarm) -> None:
        announced.append(alarm)

    # Passes run here, without the daemon's own.
    auditor = OnlineAuditor(
        store, alarms, auditor=Auditor(), on_alarm=on_alarm, limits=AuditLimits(batch_runs=2)
    )
    raised = await auditor.audit_once()
    assert await auditor.audit_once() == []  # nothing changed since
    assert announced == raised
    assert {a.run_id: a for a in raised} == {
        run_id: alarm for run_id, alarm in expected.items() if run_id != elsewhere.run_id
    }
    stored = await alarms.for_runs(run_ids)
    assert {run_id: (a.step, a.agent) for run_id, a in stored.items()} == {
        run_id: (a.step, a.agent) for run_id, a in expected.items()
    }


async def test_runs_over_the_audit_span_limit_are_left_alone_and_batches_stay_small(
    store: SpanStore,
) -> None:
    records = [r for r in load_dataset("who_and_when:hand-crafted") if len(r.trajectory) > 30][:8]
    sizes = {}
    for record in records:
        spans = span_records(trajectory_spans(record.trajectory))
        await store.write_spans(spans)
        sizes[run_facts(spans[0]).run_id] = len(spans)
    cap = sorted(sizes.values())[len(sizes) // 2]
    small = {run_id for run_id, n in sizes.items() if n <= cap}
    assert 0 < len(small) < len(sizes)
    alone = Auditor()
    expected = {}
    for run_id in small:
        alarm = alone.observe(assemble_trajectory(run_id, await store.run_spans(run_id)))
        if alarm is not None:
            expected[run_id] = (alarm.step, alarm.agent)
    # Batches of one run each (no two runs fit in `batch_spans`), runs over `cap` skipped.
    auditor = OnlineAuditor(
        store,
        AlarmStore(store.engine),
        auditor=Auditor(),
        limits=AuditLimits(batch_spans=min(sizes.values()), max_spans_per_run=cap),
    )
    rows = [row for run_id in small if (row := await store.get_run(run_id)) is not None]
    assert len(auditor._batches(rows)) == len(small)
    raised = await auditor.audit_once()
    assert {a.run_id: (a.step, a.agent) for a in raised} == expected
    assert auditor.runs_too_large == len(sizes) - len(small)
    assert await auditor.audit_once() == []  # the skipped runs are not read again


def _niceness(pid: int) -> int:
    # Field 19 of /proc/PID/stat; the command name (field 2) may hold spaces.
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[16])


@pytest.mark.parametrize(
    "processes",
    [
        pytest.param("1", id="auditor-in-the-serving-process"),
        pytest.param("2", id="auditor-in-its-own-process"),
    ],
)
def test_the_sidecar_exposes_early_alarms_in_the_api_and_metrics(
    sqlite_database_url: str, tmp_path: Path, processes: str
) -> None:
    record = next(r for r in load_dataset("who_and_when:hand-crafted") if len(r.trajectory) > 60)
    spans = trajectory_spans(record.trajectory)
    steps = [span for span in spans if span.parent is not None]  # the root has not ended yet
    env = {
        "FAULTFINDER_AUDIT_INTERVAL": "0.2",
        "FAULTFINDER_QUIET_PERIOD": "600",
        "FAULTFINDER_PROCESSES": processes,
    }
    with (
        running_sidecar(sqlite_database_url, tmp_path, **env) as sidecar,
        httpx.Client(base_url=sidecar.url, timeout=30) as client,
    ):
        if processes == "2":
            # Killed, the auditor's process is started again and still raises the alarm.
            (auditor,) = spawned_children(sidecar.process.pid)
            # Background work: when the cores are busy, the serving process goes first.
            # (It lowers its priority itself once started.)
            lowered = _niceness(sidecar.process.pid) + NICENESS
            deadline = time.monotonic() + 30
            while _niceness(auditor) != lowered and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _niceness(auditor) == lowered
            os.kill(auditor, signal.SIGKILL)
        for start in range(0, len(steps), 10):
            body = protobuf_body(steps[start : start + 10])
            headers = {"content-type": "application/x-protobuf"}
            assert client.post("/v1/traces", content=body, headers=headers).status_code == 200
        run_id = f"{spans[0].context.trace_id:032x}"
        deadline = time.monotonic() + 60
        while not (alarms := client.get("/api/alarms").json()):
            assert time.monotonic() < deadline, "no early alarm"
            time.sleep(0.3)
        (alarm,) = alarms
        run = client.get(f"/api/runs/{run_id}").json()
        assert run["status"] == "running"  # raised before the run ended
        assert run["alarm"] == alarm and alarm["run_id"] == run_id
        assert 0 <= alarm["step"] < len(steps)
        assert alarm["agent"] == record.trajectory.steps[alarm["step"]].agent
        # The alarm says why, and the run's page shows it while the run is still running.
        assert alarm["reason"].startswith(f"Step {alarm['step']} (")
        # It names what the step shows (an alarm is never raised on a step's place alone).
        assert len(alarm["reason"].split(". ")) >= 2, alarm["reason"]
        page = html.unescape(client.get(f"/ui/runs/{run_id}").text)
        # The page shows what a person reads; the model's features sit behind a toggle.
        lead, _, features = alarm["reason"].partition(MODEL_FEATURES)
        assert 'id="alarm"' in page and lead.strip() in page
        assert not features or 'id="alarm-model-features"' in page
        metrics = client.get("/metrics").text
        assert f'faultfinder_early_alarms_total{{agent="{alarm["agent"]}"}} 1.0' in metrics
    if processes == "2":
        assert "the online auditor's process ended" in sidecar.log()
