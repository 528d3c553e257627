"""`GET /metrics` on a real sidecar after a Who&When replay: spans, runs, attributions, blame."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from faultfinder.attributors.failure_modes import MODES
from faultfinder.datasets import load_dataset, resolve_datasets_dir
from faultfinder.evaluation.replay import replay
from tests.integration.sidecar import running_sidecar

FAST = {"FAULTFINDER_QUIET_PERIOD": "0.3", "FAULTFINDER_SWEEP_INTERVAL": "0.2"}
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(client: httpx.Client) -> Samples:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def total(samples: Samples, name: str, **labels: str) -> float:
    wanted = set(labels.items())
    return sum(value for (sample, have), value in samples.items()
               if sample == name and wanted <= have)  # fmt: skip


def wait_for(check: Callable[[], bool], *, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_metrics_count_what_a_replay_did(database_url: str, tmp_path: Path) -> None:
    records = list(load_dataset("who_and_when:algorithm-generated", resolve_datasets_dir(None)))[:3]
    with (
        running_sidecar(database_url, tmp_path, **FAST) as sidecar,
        httpx.Client(base_url=sidecar.url, timeout=30) as client,
    ):
        before = scrape(client)
        assert total(before, "faultfinder_spans_received_total") == 0
        assert total(before, "faultfinder_database_up") == 1
        assert total(before, "faultfinder_ingest_commit_seconds_count") == 0

        result = replay(records, to=sidecar.url, progress=False)
        assert result.failures == 0
        # An undecodable request is counted as rejected, by reason.
        bad = client.post(
            "/v1/traces",
            content=b"not protobuf",
            headers={"content-type": "application/x-protobuf"},
        )
        assert bad.status_code == 400

        def attributed() -> bool:
            # Both default attributors (learned, first_error) have answered every run.
            runs = client.get("/api/runs", params={"status": "attributed"}).json()["items"]
            done = total(scrape(client), "faultfinder_attribution_jobs", status="done")
            return len(runs) == len(records) and done == 2 * len(records)

        wait_for(attributed)
        after = scrape(client)
        assert total(after, "faultfinder_spans_received_total") == result.spans
        assert total(after, "faultfinder_spans_stored_total") == result.spans
        assert total(after, "faultfinder_ingest_requests_rejected_total", reason="undecodable") == 1
        assert total(after, "faultfinder_ingest_queue_spans") == 0
        # Where ingest time went: every decoded request was timed, waited in the queue
        # once, and every committed transaction was timed.
        decoded = total(after, "faultfinder_ingest_decode_seconds_count")
        assert decoded >= 1
        assert total(after, "faultfinder_ingest_decode_seconds_bucket", le="+Inf") == decoded
        assert total(after, "faultfinder_ingest_queue_wait_seconds_count") == decoded
        commits = total(after, "faultfinder_ingest_commit_seconds_count")
        assert commits == total(after, "faultfinder_ingest_batches_total") >= 1
        assert total(after, "faultfinder_ingest_commit_seconds_sum") > 0
        # The gRPC receiver is timed the same way.
        over_grpc = replay(
            records[:1], to=f"http://{sidecar.grpc_endpoint}", protocol="grpc", progress=False
        )
        assert over_grpc.failures == 0 and over_grpc.spans > 0
        grpc_after = scrape(client)
        assert total(grpc_after, "faultfinder_spans_stored_total") == result.spans + over_grpc.spans
        assert total(grpc_after, "faultfinder_ingest_decode_seconds_count") > decoded
        assert total(grpc_after, "faultfinder_ingest_queue_wait_seconds_count") == total(
            grpc_after, "faultfinder_ingest_decode_seconds_count"
        )
        assert total(after, "faultfinder_runs", status="attributed") == len(records)
        assert total(after, "faultfinder_runs", status="running") == 0
        for attributor in ("learned", "first_error"):
            assert total(
                after, "faultfinder_attribution_jobs", attributor=attributor, status="done"
            ) == len(records)
            assert total(
                after, "faultfinder_attributions_total", attributor=attributor, outcome="ok"
            ) == len(records)
            assert total(
                after, "faultfinder_attribution_latency_seconds_count", attributor=attributor
            ) == len(records)
        # Blame adds up to one vote per run and attributor, on agents that are in the runs.
        agents = {step.agent for record in records for step in record.trajectory.steps}
        blamed = {dict(labels)["agent"] for (name, labels), value in after.items()
                  if name == "faultfinder_blame_total" and value > 0}  # fmt: skip
        assert blamed and blamed <= agents
        assert total(after, "faultfinder_blame_total") == 2 * len(records)
        # Each vote names its failure mode: a taxonomy code, or `unknown` for a guess.
        modes = {dict(labels)["mode"] for (name, labels), value in after.items()
                 if name == "faultfinder_blame_total" and value > 0}  # fmt: skip
        assert modes & set(MODES) and modes <= {*MODES, "unknown"}
        # No model was called by the zero-LLM attributors.
        assert total(after, "faultfinder_llm_tokens_total") == 0
