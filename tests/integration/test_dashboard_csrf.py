"""The dashboard's login cookie writes only from the dashboard's own origin.

The cookie is SameSite=Strict, but a page on another port of the same host is the same
*site*, so the browser sends the cookie with its requests. These tests play that page: in
a real Chromium (a page served from another loopback port posting a form and a
`text/plain` fetch, as an attacker would) and with plain HTTP requests carrying the
headers a browser sends. A write made with an API key in a header (a script, the SDK) is
not a browser's and is untouched.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx

from faultfinder.attributors.model import Step, StepKind, Trajectory
from faultfinder.evaluation.replay import replay
from tests.integration.browser import needs_chromium
from tests.integration.sidecar import Sidecar, running_sidecar
from tests.loopback import serving

KEY = "s3cret"
FAST = {"FAULTFINDER_QUIET_PERIOD": "0.3", "FAULTFINDER_SWEEP_INTERVAL": "0.2"}
LABEL = {"agent": "writer", "step": 1, "reason": "forged"}


def _one_run(sidecar: Sidecar) -> str:
    steps = (
        Step(index=0, agent="user", kind=StepKind.HUMAN, content="Add 2 and 2."),
        Step(index=1, agent="writer", kind=StepKind.MESSAGE, content="5"),
    )
    replay(
        [Trajectory(run_id="csrf-run", task="Add 2 and 2.", steps=steps)],
        to=sidecar.url,
        headers={"authorization": f"Bearer {KEY}"},
        progress=False,
    )
    with httpx.Client(base_url=sidecar.url, headers={"x-api-key": KEY}, timeout=10) as api:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            items = api.get("/api/runs").json()["items"]
            if items:
                run_id: str = items[0]["id"]
                return run_id
            time.sleep(0.2)
    raise AssertionError("the replayed run never appeared")


def _settled(sidecar: Sidecar, run_id: str) -> dict[str, Any]:
    """The run once attributed (its status then changes only by a verdict)."""
    deadline = time.monotonic() + 30
    while True:
        run: dict[str, Any] = httpx.get(
            f"{sidecar.url}/api/runs/{run_id}", headers={"x-api-key": KEY}, timeout=10
        ).json()
        if run["status"] == "attributed" or time.monotonic() > deadline:
            return run
        time.sleep(0.2)


def _labels(sidecar: Sidecar, run_id: str) -> list[dict[str, Any]]:
    response = httpx.get(
        f"{sidecar.url}/api/runs/{run_id}/labels", headers={"x-api-key": KEY}, timeout=10
    )
    labels: list[dict[str, Any]] = response.json()
    return labels


def _login_cookie(sidecar: Sidecar) -> str:
    response = httpx.post(f"{sidecar.url}/ui/login", headers={"x-api-key": KEY}, timeout=10)
    assert response.status_code == 204, response.text
    cookie = response.cookies.get("faultfinder_key")
    assert cookie
    return cookie


def test_cookie_writes_need_the_dashboards_origin_and_json(
    sqlite_database_url: str, tmp_path: Path
) -> None:
    with running_sidecar(
        sqlite_database_url, tmp_path, FAULTFINDER_API_KEYS=KEY, **FAST
    ) as sidecar:
        run_id = _one_run(sidecar)
        url = f"{sidecar.url}/api/runs/{run_id}/labels"
        host = sidecar.url.removeprefix("http://")
        other = f"http://127.0.0.1:{int(host.rsplit(':', 1)[1]) + 1}"
        cookies = {"faultfinder_key": _login_cookie(sidecar)}

        def post(headers: dict[str, str], body: str) -> httpx.Response:
            return httpx.post(url, content=body, headers=headers, cookies=cookies, timeout=10)

        body = json.dumps(LABEL)
        refused = [
            # A same-site page's no-cors fetch: text/plain, its own origin.
            post({"content-type": "text/plain", "sec-fetch-site": "same-site"}, body),
            post({"content-type": "application/json", "origin": other}, body),
            post({"content-type": "application/json", "sec-fetch-site": "cross-site"}, body),
            # Same origin, but not JSON: a form post of the dashboard's own origin.
            post(
                {"content-type": "application/x-www-form-urlencoded", "origin": sidecar.url},
                "agent=writer&step=1",
            ),
        ]
        assert [response.status_code for response in refused] == [403, 403, 403, 415]
        assert "cross-site" in refused[0].json()["detail"]
        assert _labels(sidecar, run_id) == []

        # The dashboard's own fetch (same origin, JSON) and a script's key both write.
        own = post({"content-type": "application/json", "sec-fetch-site": "same-origin"}, body)
        assert own.status_code == 201, own.text
        by_origin = post({"content-type": "application/json", "origin": sidecar.url}, body)
        assert by_origin.status_code == 201, by_origin.text
        scripted = httpx.post(url, json=LABEL, headers={"x-api-key": KEY}, timeout=10)
        assert scripted.status_code == 201
        assert len(_labels(sidecar, run_id)) == 3
        # Reading with the cookie from anywhere is unchanged (the pages need it).
        read = httpx.get(url, cookies=cookies, headers={"sec-fetch-site": "same-site"})
        assert read.status_code == 200


ATTACK_PAGE = """<!doctype html>
<html><body>
<form id="forged" method="post" action="{target}/api/runs/{run_id}/outcome"
      enctype="text/plain">
  <input name='{{"outcome": "success", "x": "' value='"}}'>
</form>
<script>
  fetch("{target}/api/runs/{run_id}/labels", {{
    method: "POST", mode: "no-cors", credentials: "include",
    headers: {{"content-type": "text/plain"}},
    body: JSON.stringify({label}),
  }}).finally(() => {{ document.title = "fetched"; }});
</script>
</body></html>
"""


@contextmanager
def _attacker_site(page: str) -> Iterator[str]:
    """A page served from another port of 127.0.0.1: the same site as the sidecar."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = page.encode()
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with serving(Handler) as url:
        yield url + "/"


@needs_chromium
def test_a_page_on_another_port_cannot_write_with_the_dashboards_cookie(
    sqlite_database_url: str, tmp_path: Path, browser: Any, expect: Any
) -> None:
    with running_sidecar(
        sqlite_database_url, tmp_path, FAULTFINDER_API_KEYS=KEY, **FAST
    ) as sidecar:
        run_id = _one_run(sidecar)
        context = browser.new_context()
        page = context.new_page()
        page.goto(f"{sidecar.url}/ui/runs/{run_id}")
        page.locator("#key").fill(KEY)
        page.locator("#login button[type=submit]").click()
        # The login page stood at the run's own address: wait for the run page itself.
        expect(page.locator("#label-form")).to_be_visible()
        (cookie,) = context.cookies()
        assert cookie["sameSite"] == "Strict"
        before = _settled(sidecar, run_id)

        attack = ATTACK_PAGE.format(target=sidecar.url, run_id=run_id, label=json.dumps(LABEL))
        with _attacker_site(attack) as attacker_url:
            evil = context.new_page()
            evil.goto(attacker_url)
            expect(evil).to_have_title("fetched")
            with evil.expect_navigation():
                evil.evaluate("document.getElementById('forged').submit()")
            assert "refused" in (evil.content())

        assert _labels(sidecar, run_id) == []
        after = httpx.get(
            f"{sidecar.url}/api/runs/{run_id}", headers={"x-api-key": KEY}, timeout=10
        ).json()
        assert before["status"] == "attributed"
        assert after["status"] == before["status"]  # the forged success verdict did not land

        # The dashboard's own label form still writes with the same cookie.
        page.locator("li.step button.label-this").last.click()
        page.locator("#label-form textarea[name=reason]").fill("checked by hand")
        page.locator("#label-form button[type=submit]").click()
        expect(page.locator("#label-form [data-result]")).to_contain_text("Label saved")
        assert [label["reason"] for label in _labels(sidecar, run_id)] == ["checked by hand"]
        context.close()
