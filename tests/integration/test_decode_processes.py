"""`serve --processes 3`: OTLP/HTTP bodies decoded in a decoder process beside the
serving one (and the online auditor's) store exactly what decoding in place stores,
answer the same errors, and a decoder that dies loses no request."""

from __future__ import annotations

import asyncio
import gzip
import os
import signal
import time
from pathlib import Path

import httpx

from faultfinder.drills.otlp_traces import BodyFormat, prepare_requests
from faultfinder.reading.model import SpanRecord
from faultfinder.server.db.engine import create_engine
from faultfinder.server.otlp.pool import POOL_MIN_BYTES
from faultfinder.server.store import SpanStore
from tests.integration.sidecar import running_sidecar, spawned_children

PROTOBUF = {"content-type": "application/x-protobuf"}


def _decoders(client: httpx.Client) -> list[int]:
    """The sidecar's decoder processes, as it reports them; each is its spawned child."""
    pids: list[int] = client.get("/api/stats/ingest").json()["decoder_pids"]
    return pids


def _stored(database_url: str) -> dict[str, list[SpanRecord]]:
    async def read() -> dict[str, list[SpanRecord]]:
        engine = create_engine(database_url)
        try:
            store = SpanStore(engine)
            runs, _ = await store.list_runs(limit=1000)
            return {run.id: await store.run_spans(run.id) for run in runs}
        finally:
            await engine.dispose()

    return asyncio.run(read())


def test_spans_decoded_in_a_decoder_process_are_stored_as_decoding_in_place_stores_them(
    tmp_path: Path,
) -> None:
    protobuf = prepare_requests(600, batch=100, body_format=BodyFormat.PROTOBUF)
    json_gzip = prepare_requests(300, batch=100, body_format=BodyFormat.JSON, gzip=True)
    small = prepare_requests(3, batch=3, body_format=BodyFormat.PROTOBUF)
    assert all(len(r.body) >= POOL_MIN_BYTES for r in [*protobuf, *json_gzip])
    assert len(small[0].body) < POOL_MIN_BYTES  # decoded in place either way
    stored = {}
    for processes in ("1", "3"):
        url = f"sqlite+aiosqlite:///{tmp_path / f'p{processes}.db'}"
        folder = tmp_path / f"p{processes}"
        folder.mkdir()
        with (
            running_sidecar(url, folder, FAULTFINDER_PROCESSES=processes) as sidecar,
            httpx.Client(base_url=sidecar.url, timeout=30) as client,
        ):
            decoders = _decoders(client)
            assert len(decoders) == (0 if processes == "1" else 1)
            assert set(decoders) <= set(spawned_children(sidecar.process.pid))
            for prepared in [*protobuf, *json_gzip, *small]:
                answer = client.post("/v1/traces", content=prepared.body, headers=prepared.headers)
                assert answer.status_code == 200, answer.text
            assert client.get("/api/stats/ingest").json()["spans_stored"] == 903
        stored[processes] = _stored(url)
    assert sum(map(len, stored["3"].values())) == 903
    assert stored["3"] == stored["1"]


def test_a_decoder_process_answers_bad_bodies_as_the_serving_process_does(
    tmp_path: Path,
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'errors.db'}"
    env = {
        "FAULTFINDER_PROCESSES": "2",
        "FAULTFINDER_AUDIT": "false",  # both processes beyond the first decode
        "FAULTFINDER_MAX_SPANS_PER_REQUEST": "50",
        "FAULTFINDER_MAX_DECOMPRESSED_BYTES": str(4 * 1024 * 1024),
    }
    with (
        running_sidecar(url, tmp_path, **env) as sidecar,
        httpx.Client(base_url=sidecar.url, timeout=30) as client,
    ):
        too_many = prepare_requests(100, batch=100, body_format=BodyFormat.PROTOBUF)[0]
        answer = client.post("/v1/traces", content=too_many.body, headers=PROTOBUF)
        assert answer.status_code == 413
        assert "request holds 100 spans, more than the 50" in answer.text
        bomb = gzip.compress(b"\x00" * (8 * 1024 * 1024))
        answer = client.post(
            "/v1/traces", content=bomb, headers={**PROTOBUF, "content-encoding": "gzip"}
        )
        assert answer.status_code == 413
        assert f"exceeds {4 * 1024 * 1024} bytes once decompressed" in answer.text
        garbage = b"\xff" * (POOL_MIN_BYTES * 2)
        answer = client.post("/v1/traces", content=garbage, headers=PROTOBUF)
        assert answer.status_code == 400
        assert "invalid protobuf ExportTraceServiceRequest" in answer.text
        rejected = client.get("/api/stats/ingest").json()["requests_rejected"]
        assert rejected == {"too_many_spans": 1, "too_large": 1, "undecodable": 1}
        # The decoder is still there and still decoding.
        good = prepare_requests(40, batch=40, body_format=BodyFormat.PROTOBUF)[0]
        assert client.post("/v1/traces", content=good.body, headers=PROTOBUF).status_code == 200
        assert len(_decoders(client)) == 1


def test_a_decoder_that_dies_loses_no_request_and_is_started_again(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'killed.db'}"
    requests = prepare_requests(300, batch=100, body_format=BodyFormat.PROTOBUF)
    with (
        running_sidecar(url, tmp_path, FAULTFINDER_PROCESSES="3") as sidecar,
        httpx.Client(base_url=sidecar.url, timeout=30) as client,
    ):
        (decoder,) = _decoders(client)
        os.kill(decoder, signal.SIGKILL)
        for prepared in requests:
            answer = client.post("/v1/traces", content=prepared.body, headers=prepared.headers)
            assert answer.status_code == 200, answer.text
        assert client.get("/api/stats/ingest").json()["spans_stored"] == 300
        deadline = time.monotonic() + 30
        while not (_decoders(client) and decoder not in _decoders(client)):
            assert time.monotonic() < deadline, "no new decoder process"
            time.sleep(0.1)
        assert client.get("/api/stats/ingest").json()["decoder_restarts"] == 1
    assert "an OTLP decoder process died" in sidecar.log()
