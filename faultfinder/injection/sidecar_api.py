"""The sidecar's HTTP API as the injection harness and `faultfinder verify` use it: new
runs, verdicts, trajectories, labels and verifications."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import httpx

from faultfinder.attributors.model import Trajectory

__all__ = ["SidecarAPI"]


class SidecarAPI:
    """The sidecar's HTTP API as the harness uses it."""

    def __init__(self, url: str, api_key: str | None) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.url = url.rstrip("/")
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=60)

    def run_ids_since(self, since: float) -> dict[str, int]:
        """Runs started at/after `since` (Unix seconds) → their span counts."""
        found: dict[str, int] = {}
        cursor: str | None = None
        while True:
            params: dict[str, Any] = {"since": since, "limit": 500}
            if cursor:
                params["cursor"] = cursor
            page = self.http.get("/api/runs", params=params)
            page.raise_for_status()
            body = page.json()
            found.update({item["id"]: int(item["n_spans"]) for item in body["items"]})
            cursor = body.get("next_cursor")
            if not cursor:
                return found

    def post_outcome(
        self, run_id: str, *, success: bool, answer: str, final: str, reason: str
    ) -> None:
        answer_ = self.http.post(
            f"/api/runs/{quote(run_id, safe='')}/outcome",
            json={
                "outcome": "success" if success else "failure",
                "ground_truth": answer,
                "final_answer": final,
                "reason": reason,
            },
        )
        answer_.raise_for_status()

    def trajectory(self, run_id: str) -> Trajectory:
        answer = self.http.get(f"/api/runs/{quote(run_id, safe='')}")
        answer.raise_for_status()
        return Trajectory.model_validate(answer.json()["trajectory"])

    def label(self, run_id: str, body: Mapping[str, Any]) -> None:
        answer = self.http.post(f"/api/runs/{quote(run_id, safe='')}/labels", json=dict(body))
        answer.raise_for_status()

    def run(self, run_id: str) -> dict[str, Any]:
        """The run as `GET /api/runs/{id}` gives it: trajectory, attributions, outcome."""
        answer = self.http.get(f"/api/runs/{quote(run_id, safe='')}")
        answer.raise_for_status()
        body: dict[str, Any] = answer.json()
        return body

    def post_verification(self, run_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Store a counterfactual verification; returns the attribution it became."""
        answer = self.http.post(
            f"/api/runs/{quote(run_id, safe='')}/verifications", json=dict(body)
        )
        answer.raise_for_status()
        stored: dict[str, Any] = answer.json()
        return stored

    def close(self) -> None:
        self.http.close()
