"""A zero-LLM attributor answers at once while a slow model attributes: the worker's
zero-LLM jobs have slots of their own, so `learned` never waits behind `all_at_once`.

A real sidecar with one job slot (`FAULTFINDER_WORKERS=1`), its model a scripted
OpenAI-compatible endpoint that takes seconds per reply.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from tests.integration.sidecar import running_sidecar
from tests.integration.test_service import agent_run, run_id_of, send
from tests.stub_llm import StubLLM, answer

MODEL_SECONDS = 4.0
"""How long the scripted model takes per reply: five runs keep it busy for 20 s."""
SLOW_PICK = answer(
    {"agent": "Coder", "step": 2, "reason": "parsed the hotels by a key they lack"},
    delay=MODEL_SECONDS,
)


def _learned_answered(client: httpx.Client, run_id: str) -> bool:
    run = client.get(f"/api/runs/{run_id}").json()
    return any(a["method"] == "learned" for a in run["attributions"])


def _unfinished_model_jobs(client: httpx.Client, run_ids: list[str]) -> int:
    jobs = [job for run_id in run_ids for job in client.get(f"/api/runs/{run_id}/jobs").json()]
    return sum(1 for j in jobs if j["attributor"] == "all_at_once" and j["status"] != "done")


def test_learned_answers_within_two_seconds_while_a_slow_model_attributes(
    sqlite_database_url: str, tmp_path: Path
) -> None:
    stub = StubLLM([SLOW_PICK] * 10)
    with stub.running():
        env = {
            "FAULTFINDER_ATTRIBUTORS": "learned,all_at_once",
            "FAULTFINDER_WORKERS": "1",
            "FAULTFINDER_SWEEP_INTERVAL": "0.2",
            "FAULTFINDER_LLM_BASE_URL": stub.base_url,
            "FAULTFINDER_LLM_MODEL": "stub-slow",
        }
        with (
            running_sidecar(sqlite_database_url, tmp_path, **env) as sidecar,
            httpx.Client(base_url=sidecar.url, timeout=30) as client,
        ):
            run_ids: list[str] = []
            waits: list[float] = []
            busy: list[int] = []
            for index in range(5):
                spans = agent_run(failed=True, marker=str(index))
                run_id = run_id_of(spans)
                run_ids.append(run_id)
                assert send(client, spans).status_code == 200
                posted = time.monotonic()
                outcome = client.post(f"/api/runs/{run_id}/outcome", json={"outcome": "failure"})
                assert outcome.status_code < 300, outcome.text
                while not _learned_answered(client, run_id):
                    assert time.monotonic() - posted < 30, sidecar.log()
                    time.sleep(0.05)
                waits.append(time.monotonic() - posted)
                busy.append(_unfinished_model_jobs(client, run_ids))
            # Every answer came within 2 s of its outcome, while the model was still at work
            # on this run or an earlier one.
            assert max(waits) <= 2.0, (waits, sidecar.log())
            assert all(count >= 1 for count in busy), busy
            assert len(stub.completions) < 5  # the model lane is still behind
