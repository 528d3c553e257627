"""`faultfinder verify` end to end: the pydantic-ai team of `test_inject.py` behind the
replay proxy, a real sidecar (with an API key), and the command.

The team's scripted model has one flaw of its own: the Researcher misreads the figure
the lookup returned (790,037 for 709,037), and the Coordinator repeats what it is told.
Because the flaw is the model's, a live continuation reproduces it: correcting the
Researcher's report makes the run succeed, while correcting an earlier, innocent step
(the Coordinator's question) leaves the Researcher to misread again. The corrections are
written by the same scripted model, answering the corrector's prompt.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from faultfinder.attributors.model import Trajectory
from faultfinder.injection.proxy import ReplayProxy
from tests.integration.browser import needs_chromium
from tests.integration.sidecar import FAULTFINDER, Sidecar, quick_sidecar
from tests.integration.test_inject import PROGRAM, scripted_model, scripted_reply

KEY = "verify-key"
TASK = "What is the population of Oslo?"
MISREAD = "790,037"


def flawed_reply(body: dict[str, Any]) -> dict[str, Any]:
    """The team's model, with the Researcher's misreading; it also writes corrections."""
    system = " ".join(str(m.get("content")) for m in body["messages"][:1])
    if system.startswith("You correct one step"):
        prompt = str(body["messages"][-1]["content"])
        if "calls the tool ask_researcher" in prompt:
            return {"content": json.dumps({"question": "How many people live in Oslo?"})}
        if "calls the tool population_lookup" in prompt:
            return {"content": json.dumps({"city": "Oslo"})}
        truth = int(re.findall(r"right final answer is: (\d+)", prompt)[0])
        return {"content": f"Oslo has {truth:,} inhabitants."}
    answer = scripted_reply(body)
    if "Researcher" in system and answer.get("content"):
        return {"content": answer["content"].replace("709,037", MISREAD)}
    return answer


def _record_failed_run(tmp_path: Path, sidecar: Sidecar, upstream: str) -> tuple[str, Path]:
    """Run the team once through a recording proxy; the run fails. Its id and recording."""
    recordings = tmp_path / "recordings"
    with ReplayProxy(upstream, record_dir=recordings).serve() as proxy:
        assert proxy.address is not None
        host, port = proxy.address
        done = subprocess.run(
            [sys.executable, str(tmp_path / "team.py")],
            input=TASK,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
            env={
                **os.environ,
                "OPENAI_BASE_URL": f"http://{host}:{port}/s/failed/v1",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{sidecar.url}/v1/traces",
                "OTEL_EXPORTER_OTLP_HEADERS": f"Authorization=Bearer {KEY}",
            },
        )
    assert MISREAD in done.stdout
    client = httpx.Client(base_url=sidecar.url, headers={"Authorization": f"Bearer {KEY}"})
    with client:
        (run,) = client.get("/api/runs").json()["items"]
        verdict = client.post(
            f"/api/runs/{run['id']}/outcome",
            json={"outcome": "failure", "ground_truth": "709037", "final_answer": done.stdout},
        )
        assert verdict.status_code == 200, verdict.text
    return run["id"], recordings / "failed.json"


def _verify(sidecar: Sidecar, upstream: str, run_id: str, recording: Path, out: Path,
            *extra: str) -> subprocess.CompletedProcess[str]:  # fmt: skip
    command = [
        str(FAULTFINDER), "verify", "--program", f"{sys.executable} {out.parent / 'team.py'}",
        "--recording", str(recording), "--run", run_id, "--sidecar", sidecar.url,
        "--sidecar-api-key", KEY, "--upstream", upstream, "--out", str(out),
        "--timeout", "120", *extra,
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)


def _steps(sidecar: Sidecar, run_id: str) -> tuple[int, int]:
    """The Coordinator's question to the Researcher, and the Researcher's misreport."""
    answer = httpx.get(
        f"{sidecar.url}/api/runs/{run_id}", headers={"Authorization": f"Bearer {KEY}"}
    )
    trajectory = Trajectory.model_validate(answer.json()["trajectory"])
    question = next(
        s.index
        for s in trajectory.steps
        if s.agent == "Coordinator" and s.content.startswith("ask_researcher(")
    )
    misread = next(
        s.index
        for s in trajectory.steps
        if s.agent == "Researcher" and MISREAD in s.content and s.kind.value != "tool"
    )
    assert question < misread
    return question, misread


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@needs_chromium
def test_correcting_the_flawed_step_flips_the_run_and_an_innocent_one_does_not(
    tmp_path: Path, browser: Any, expect: Any
) -> None:
    (tmp_path / "team.py").write_text(PROGRAM)
    out = tmp_path / "verify-out"
    with (
        scripted_model(flawed_reply) as upstream,
        quick_sidecar(tmp_path, FAULTFINDER_API_KEYS=KEY) as sidecar,
    ):
        run_id, recording = _record_failed_run(tmp_path, sidecar, upstream)
        question, misread = _steps(sidecar, run_id)
        steps = ("--step", str(misread), "--step", str(question), "--task", TASK)
        done = _verify(sidecar, upstream, run_id, recording, out, *steps, "--repeats", "2")
        assert done.returncode == 0, done.stderr[-5000:]
        summary = json.loads(done.stdout)
        # Progress, one line per candidate.
        assert f"step {misread} (Researcher, model call 2): flipped" in done.stderr
        assert f"step {question} (Coordinator, model call 0): still failed" in done.stderr

        results = {c["step"]: c for c in summary["candidates"]}
        assert results[misread]["result"] == "flipped"
        assert results[misread]["flips"] == results[misread]["replays"] == 2
        assert results[question]["result"] == "still_failed"
        assert results[question]["flips"] == 0

        # The continuation is kept: after the corrected report, the Coordinator answered
        # live with the right figure; after the corrected question, the Researcher
        # misread again.
        flipped = _lines(out / f"step-{misread}.jsonl")
        assert [line["outcome"] for line in flipped] == ["flipped", "flipped"]
        corrected, *live = flipped[0]["continuation"]
        assert corrected["source"] == "injected" and "709,037" in json.dumps(corrected)
        assert live and all(call["source"] == "model" for call in live)
        assert "709,037" in flipped[0]["final_answer"]
        kept = _lines(out / f"step-{question}.jsonl")
        assert MISREAD in kept[0]["final_answer"]
        assert "How many people live in Oslo?" in kept[0]["correction"]

        # The sidecar holds the verification next to the other attributions, and counts it.
        client = httpx.Client(base_url=sidecar.url, headers={"Authorization": f"Bearer {KEY}"})
        with client:
            attributions = client.get(f"/api/runs/{run_id}").json()["attributions"]
            metrics = client.get("/metrics").text
            outside = client.post(
                f"/api/runs/{run_id}/verifications",
                json={"candidates": [{"step": 99, "agent": "Coordinator", "result": "flipped"}]},
            )
            refused = httpx.post(
                f"{sidecar.url}/api/runs/{run_id}/verifications",
                json={"candidates": [{"step": 0, "agent": "Coordinator", "result": "flipped"}]},
            )
        (counterfactual,) = [a for a in attributions if a["method"] == "counterfactual"]
        assert counterfactual["status"] == "ok"
        assert counterfactual["agent"] == "Researcher" and counterfactual["step"] == misread
        assert counterfactual["reason"] == (
            f"correcting step {misread} made the run succeed in 2 of 2 replays;"
            f" correcting step {question} did not"
        )
        assert counterfactual["confidence"] == 1.0
        assert 'faultfinder_verifications_total{result="flipped"} 1.0' in metrics
        assert 'faultfinder_verifications_total{result="still_failed"} 1.0' in metrics
        assert refused.status_code == 401
        assert outside.status_code == 400 and "outside" in outside.text

        # The run page leads with the verification: tested, where the others estimate.
        page = browser.new_page()
        page.goto(f"{sidecar.url}/ui/runs/{run_id}")
        page.locator("#key").fill(KEY)
        page.locator("#login button[type=submit]").click()
        page.wait_for_url(f"**/ui/runs/{run_id}")
        expect(page.locator("#verdict")).to_contain_text(f"Researcher at step {misread}")
        expect(page.locator("#verdict .by")).to_have_text("by counterfactual")
        card = page.locator('article.attribution[data-method="counterfactual"]')
        expect(card.locator("h3 .badge")).to_have_text("leading")
        expect(card.locator(".reason")).to_have_text(counterfactual["reason"])
        expect(card.locator(".basis")).to_have_text("evidence: counterfactual-replay")
        page.close()

        # Run again: every candidate is done, nothing is replayed or posted twice.
        before = (out / f"step-{misread}.jsonl").stat().st_mtime_ns
        again = _verify(sidecar, upstream, run_id, recording, out, *steps, "--repeats", "2")
        assert again.returncode == 0, again.stderr[-3000:]
        assert json.loads(again.stdout) == summary
        assert (out / f"step-{misread}.jsonl").stat().st_mtime_ns == before
        after = httpx.get(
            f"{sidecar.url}/api/runs/{run_id}", headers={"Authorization": f"Bearer {KEY}"}
        ).json()["attributions"]
        assert len([a for a in after if a["method"] == "counterfactual"]) == 1


def test_earliest_search_stops_at_the_first_flip_and_a_changed_task_diverges(
    tmp_path: Path,
) -> None:
    (tmp_path / "team.py").write_text(PROGRAM)
    with (
        scripted_model(flawed_reply) as upstream,
        quick_sidecar(tmp_path, FAULTFINDER_API_KEYS=KEY) as sidecar,
    ):
        run_id, recording = _record_failed_run(tmp_path, sidecar, upstream)
        question, misread = _steps(sidecar, run_id)

        # Every model-made step in order of position, up to the first that flips: the
        # Researcher's report is the earliest decisive step.
        earliest = tmp_path / "earliest"
        done = _verify(sidecar, upstream, run_id, recording, earliest,
                       "--search", "earliest", "--task", TASK, "--no-post")  # fmt: skip
        assert done.returncode == 0, done.stderr[-5000:]
        tried = [(c["step"], c["result"]) for c in json.loads(done.stdout)["candidates"]]
        assert tried[-1] == (misread, "flipped")
        assert all(result == "still_failed" for _, result in tried[:-1])
        assert question in [step for step, _ in tried]
        assert not (earliest / f"step-{misread + 1}.jsonl").exists()
        label = json.loads((earliest / "label.json").read_text())
        assert (label["agent"], label["step"]) == ("Researcher", misread)

        # The program given another task asks its first model call differently: the
        # recorded prefix cannot be replayed.
        diverging = tmp_path / "diverging"
        done = _verify(sidecar, upstream, run_id, recording, diverging, "--step", str(misread),
                       "--correction", f"{misread}=Oslo has 709,037 inhabitants.",
                       "--task", "What is the population of Bergen?")  # fmt: skip
        assert done.returncode == 0, done.stderr[-5000:]
        (candidate,) = json.loads(done.stdout)["candidates"]
        assert candidate["result"] == "diverged" and candidate["replays"] == 0
        (line,) = _lines(diverging / f"step-{misread}.jsonl")
        assert line["diverged_at"] == 0
        assert "could not be replayed" in json.loads(done.stdout)["attribution"]["reason"]
