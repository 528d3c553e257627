"""A sidecar without keys (the default) against the web pages its user visits, and against
JSON it cannot store: on a real sidecar.

A page of another origin can send a `text/plain` form or a no-cors fetch to 127.0.0.1, and
a page whose own name was re-pointed at 127.0.0.1 (DNS rebinding) can read the answers.
Writes must be JSON and come from no other site; only configured Host names are served;
a JSON body nested too deeply is refused before anything is stored.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx

from faultfinder.attributors.model import Step, StepKind, Trajectory
from faultfinder.evaluation.replay import replay
from tests.integration.sidecar import Sidecar, quick_sidecar

FORGED_OUTCOME = '{"outcome": "success"}'


def _one_failed_run(sidecar: Sidecar) -> dict[str, Any]:
    steps = (
        Step(index=0, agent="user", kind=StepKind.HUMAN, content="Add 2 and 2."),
        Step(index=1, agent="writer", kind=StepKind.MESSAGE, content="5"),
    )
    trajectory = Trajectory(run_id="page-run", task="Add 2 and 2.", steps=steps)
    replay([trajectory], to=sidecar.url, progress=False)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        items = httpx.get(f"{sidecar.url}/api/runs", timeout=10).json()["items"]
        if items and items[0]["status"] == "attributed":
            run: dict[str, Any] = items[0]
            return run
        time.sleep(0.2)
    raise AssertionError("the replayed run was never attributed")


def _run(sidecar: Sidecar, run_id: str) -> dict[str, Any]:
    run: dict[str, Any] = httpx.get(f"{sidecar.url}/api/runs/{run_id}", timeout=10).json()
    return run


def test_pages_of_other_origins_cannot_write(tmp_path: Path) -> None:
    with quick_sidecar(tmp_path) as sidecar:
        run = _one_failed_run(sidecar)
        run_id = run["id"]
        jobs = httpx.get(f"{sidecar.url}/api/runs/{run_id}/jobs", timeout=10).json()
        other_port = "http://127.0.0.1:9"  # the same site, another origin
        forgeries = [
            # a <form enctype="text/plain"> posted from another site
            ({"content-type": "text/plain", "origin": "http://evil.example"}, 403),
            # a no-cors fetch from a browser without fetch metadata, from another port
            ({"content-type": "text/plain;charset=UTF-8", "origin": other_port}, 403),
            # JSON from another site (its preflight was never granted, but it tried)
            ({"content-type": "application/json", "sec-fetch-site": "cross-site"}, 403),
            ({"content-type": "application/json", "sec-fetch-site": "same-site"}, 403),
            # JSON under another content type, from no page at all
            ({"content-type": "text/plain"}, 415),
            ({"content-type": "application/x-www-form-urlencoded"}, 415),
        ]
        for path, body in (
            ("outcome", FORGED_OUTCOME),
            ("labels", '{"agent": "user", "step": 0, "reason": "forged"}'),
            ("attributions", '{"attributor": "heuristic"}'),
        ):
            for headers, status in forgeries:
                response = httpx.post(
                    f"{sidecar.url}/api/runs/{run_id}/{path}",
                    content=body,
                    headers=headers,
                    timeout=10,
                )
                assert response.status_code == status, (path, headers, response.text)
        after = _run(sidecar, run_id)
        assert (after["status"], after["outcome"]) == (run["status"], run["outcome"])
        assert httpx.get(f"{sidecar.url}/api/runs/{run_id}/labels", timeout=10).json() == []
        assert httpx.get(f"{sidecar.url}/api/runs/{run_id}/jobs", timeout=10).json() == jobs
        # The sidecar's own pages, scripts and the SDK still write.
        for headers in (
            {"content-type": "application/json", "origin": sidecar.url},
            {"content-type": "application/json", "sec-fetch-site": "same-origin"},
            {"content-type": "application/json"},
        ):
            response = httpx.post(
                f"{sidecar.url}/api/runs/{run_id}/outcome",
                content=FORGED_OUTCOME,
                headers=headers,
                timeout=10,
            )
            assert response.status_code == 200, response.text
        assert _run(sidecar, run_id)["outcome"] == "success"


def _status_for_host(sidecar: Sidecar, host: str) -> int:
    return httpx.get(f"{sidecar.url}/api/runs", headers={"host": host}, timeout=10).status_code


def test_only_configured_host_names_are_served(tmp_path: Path) -> None:
    for folder in ("default", "named", "any"):
        (tmp_path / folder).mkdir()
    with quick_sidecar(tmp_path / "default") as sidecar:
        port = sidecar.url.rsplit(":", 1)[1]
        # A rebinding page's requests carry its own name.
        assert _status_for_host(sidecar, f"attacker.example:{port}") == 400
        assert _status_for_host(sidecar, "attacker.example") == 400
        for name in ("127.0.0.1", "localhost", "[::1]", "LOCALHOST"):
            assert _status_for_host(sidecar, f"{name}:{port}") == 200, name
        # Probes keep answering for the names they use.
        assert httpx.get(f"{sidecar.url}/healthz", timeout=10).status_code == 200
    named = {"FAULTFINDER_ALLOWED_HOSTS": "faultfinder, 127.0.0.1"}
    with quick_sidecar(tmp_path / "named", **named) as sidecar:
        assert _status_for_host(sidecar, "faultfinder:4318") == 200
        assert _status_for_host(sidecar, "localhost") == 400
    with quick_sidecar(tmp_path / "any", FAULTFINDER_ALLOWED_HOSTS="*") as sidecar:
        assert _status_for_host(sidecar, "attacker.example") == 200


def _nested(levels: int) -> str:
    return '{"a": ' * levels + "1" + "}" * levels


def test_deeply_nested_json_is_refused_and_nothing_stored(tmp_path: Path) -> None:
    with quick_sidecar(tmp_path) as sidecar:
        run_id = _one_failed_run(sidecar)["id"]
        labels = f"{sidecar.url}/api/runs/{run_id}/labels"
        for levels in (100, 300, 989, 5_000):
            label = '{"agent": "user", "step": 0, "details": ' + _nested(levels) + "}"
            response = httpx.post(
                labels, content=label, headers={"content-type": "application/json"}, timeout=10
            )
            assert response.status_code == 400, (levels, response.text)
        listed = httpx.get(labels, timeout=10)
        assert (listed.status_code, listed.json()) == (200, [])
        trajectory = Trajectory(
            run_id="deep",
            task="t",
            steps=(Step(index=0, agent="writer", kind=StepKind.MESSAGE, content="5"),),
        ).model_dump(mode="json")
        trajectory["metadata"] = json.loads(_nested(300))
        for wait in (False, True):
            response = httpx.post(
                f"{sidecar.url}/api/attribute",
                content=json.dumps({"wait": wait, "trajectory": trajectory}),
                headers={"content-type": "application/json"},
                timeout=30,
            )
            assert response.status_code == 400, (wait, response.text)
        # Nesting within the bound is taken as before.
        label = '{"agent": "user", "step": 0, "details": ' + _nested(20) + "}"
        response = httpx.post(
            labels, content=label, headers={"content-type": "application/json"}, timeout=10
        )
        assert response.status_code == 201, response.text
        assert httpx.get(labels, timeout=10).status_code == 200
