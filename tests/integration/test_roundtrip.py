"""Who&When through real OTLP into a running sidecar and back out of the API, step for step."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from faultfinder.datasets import BenchmarkRecord, load_dataset
from faultfinder.evaluation.replay import replay
from tests.integration.sidecar import Sidecar, running_sidecar


@pytest.fixture(scope="module")
def records() -> list[BenchmarkRecord]:
    return list(load_dataset("who_and_when"))


@pytest.fixture
def sidecar(database_url: str, tmp_path: Path) -> Iterator[Sidecar]:
    with running_sidecar(
        database_url,
        tmp_path,
        FAULTFINDER_QUIET_PERIOD="0.5",
        FAULTFINDER_SWEEP_INTERVAL="0.2",
    ) as running:
        yield running


def all_runs(client: httpx.Client, **params: Any) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = []
    cursor = None
    while True:
        query = {"limit": 100, **params} | ({"cursor": cursor} if cursor else {})
        page = client.get("/api/runs", params=query).raise_for_status().json()
        runs.extend(page["items"])
        cursor = page["next_cursor"]
        if not cursor:
            return runs


def fetch_by_record(client: httpx.Client) -> dict[str, dict[str, Any]]:
    by_record = {}
    for run in all_runs(client):
        detail = client.get(f"/api/runs/{run['id']}").raise_for_status().json()
        record_id = detail["trajectory"]["metadata"].get("record")
        by_record[record_id] = detail
    return by_record


def assert_same_steps(record: BenchmarkRecord, detail: dict[str, Any]) -> None:
    expected = record.trajectory.steps
    got = detail["trajectory"]["steps"]
    assert len(got) == len(expected), record.record_id
    for want, have in zip(expected, got, strict=True):
        where = f"{record.record_id} step {want.index}"
        assert have["index"] == want.index, where
        assert have["agent"] == want.agent, where
        assert have["content"] == want.content, where
        assert have["role"] == want.role, where
        assert have["kind"] == want.kind.value, where


def test_every_who_and_when_record_round_trips_over_otlp_protobuf(
    sidecar: Sidecar, records: list[BenchmarkRecord]
) -> None:
    result = replay(records, to=sidecar.url, protocol="http/protobuf", progress=False)
    assert result.failures == 0
    assert result.records == 184
    with httpx.Client(base_url=sidecar.url, timeout=30) as client:
        by_record = fetch_by_record(client)
        assert len(by_record) == 184
        for record in records:
            detail = by_record[record.record_id]
            assert_same_steps(record, detail)
            assert detail["trajectory"]["task"] == record.trajectory.task
            assert detail["trajectory"]["ground_truth"] == record.trajectory.ground_truth
        # Every replayed run says outcome=failure: once quiet, each is a failed run and the
        # default attributors (learned, then first_error) attribute it.
        deadline = time.monotonic() + 180
        while True:
            runs = all_runs(client)
            statuses = {run["status"] for run in runs}
            assert statuses <= {"running", "failed", "attributed"}, statuses
            methods = [sorted(a["method"] for a in run["attributions"]) for run in runs]
            if methods == [["first_error", "learned"]] * 184:
                break
            assert time.monotonic() < deadline, statuses
            time.sleep(0.5)
        assert statuses == {"attributed"}


@pytest.mark.parametrize("protocol", ["http/json", "grpc"])
def test_a_subset_round_trips_over_json_and_grpc(
    sidecar: Sidecar, records: list[BenchmarkRecord], protocol: str
) -> None:
    # Both subsets, including the longest Hand-Crafted runs.
    subset = records[:6] + sorted(records, key=lambda r: len(r.trajectory))[-3:]
    to = sidecar.url if protocol.startswith("http") else f"http://{sidecar.grpc_endpoint}"
    result = replay(subset, to=to, protocol=protocol, progress=False)
    assert result.failures == 0
    with httpx.Client(base_url=sidecar.url, timeout=30) as client:
        by_record = fetch_by_record(client)
        assert len(by_record) == len(subset)
        for record in subset:
            assert_same_steps(record, by_record[record.record_id])
