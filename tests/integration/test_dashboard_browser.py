"""The dashboard in a real headless Chromium against a real sidecar: live runs list, run page
with the culprit highlighted, labelling, the overview, and inert hostile trajectory content.

Needs Debian's `chromium` (tests/integration/browser.py). Screenshots go to test-artifacts/; with
FAULTFINDER_UPDATE_SCREENSHOT=1 the runs list, a failed run's page and the overview are also
saved as docs/runs.png, docs/run.png (and docs/dashboard.png) and docs/overview.png.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from faultfinder.attributors.auditor import MODEL_FEATURES
from faultfinder.attributors.learned.step_model import default_model
from faultfinder.attributors.model import Step, StepKind, StepStatus, Trajectory
from faultfinder.datasets import load_dataset, resolve_datasets_dir
from faultfinder.evaluation.replay import replay
from tests.integration.browser import LIVE_TIMEOUT_MS, needs_chromium
from tests.integration.sidecar import ROOT, running_sidecar
from tests.otlp_helpers import protobuf_body, trajectory_spans

ARTIFACTS = ROOT / "test-artifacts"
FAST = {"FAULTFINDER_QUIET_PERIOD": "0.3", "FAULTFINDER_SWEEP_INTERVAL": "0.2"}

HOSTILE_AGENT = '<img src=x onerror="window.__xss=3;alert(3)">Mallory'
HOSTILE_CONTENT = "<script>window.__xss=1;alert(1)</script> and <b>bold</b> claims"
HOSTILE_TOOL = '<img src=x onerror="window.__xss=2;alert(2)">'
HOSTILE_ERROR = '</pre><svg onload="window.__xss=4;alert(4)"></svg>'


def hostile_trajectory() -> Trajectory:
    """A failed run whose agent name, content, tool result and error are markup."""
    steps = (
        Step(index=0, agent="user", kind=StepKind.HUMAN, content="Summarise the report."),
        Step(index=1, agent=HOSTILE_AGENT, kind=StepKind.MESSAGE, content=HOSTILE_CONTENT),
        Step(
            index=2,
            agent=HOSTILE_AGENT,
            kind=StepKind.TOOL,
            content="fetching",
            tool_name="fetch",
            tool_arguments='{"url": "javascript:alert(5)"}',
            tool_result=HOSTILE_TOOL,
            status=StepStatus.ERROR,
            error=HOSTILE_ERROR,
        ),
        Step(index=3, agent="user", kind=StepKind.HUMAN, content="That is wrong."),
    )
    return Trajectory(run_id="hostile", task="<i>task</i>", steps=steps)


def _watch(page: Any, dialogs: list[str], errors: list[str]) -> Any:
    def dismiss(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", dismiss)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.set_default_timeout(LIVE_TIMEOUT_MS)
    return page


@needs_chromium
@pytest.mark.slow
def test_the_dashboard_shows_live_runs_culprits_labels_and_stays_inert(
    sqlite_database_url: str, tmp_path: Path, browser: Any, expect: Any
) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    records = list(load_dataset("who_and_when:algorithm-generated", resolve_datasets_dir(None)))[
        1:4
    ]
    dialogs: list[str] = []
    errors: list[str] = []
    with (
        running_sidecar(sqlite_database_url, tmp_path, **FAST) as sidecar,
        httpx.Client(base_url=sidecar.url, timeout=30) as api,
    ):
        context = browser.new_context(viewport={"width": 1280, "height": 860})
        runs_page = _watch(context.new_page(), dialogs, errors)
        overview = _watch(context.new_page(), dialogs, errors)
        overview.goto(f"{sidecar.url}/ui/overview")
        expect(overview.locator("[data-figure=runs]")).to_have_text("0")
        runs_page.goto(f"{sidecar.url}/")  # the root leads to the runs list
        expect(runs_page.locator("tr.empty")).to_contain_text("No runs")
        expect(runs_page.locator("#live-status")).to_have_text("live")
        runs_page.evaluate("window.__sameDocument = true")

        replay([*records, hostile_trajectory()], to=sidecar.url, progress=False)

        # New runs appear and get attributed without a reload (server-sent events).
        expect(runs_page.locator("tr.run")).to_have_count(4)
        expect(runs_page.locator("tr.run .badge.status-attributed")).to_have_count(4)
        assert runs_page.evaluate("window.__sameDocument") is True
        expect(overview.locator("[data-figure=attributed]")).to_have_text("4")
        expect(overview.locator("#blame svg.chart rect")).not_to_have_count(0)
        # The hostile agent name is shown as text in the list, not as an element.
        hostile_row = runs_page.locator("tr.run", has_text="Mallory")
        expect(hostile_row.locator(".agents")).to_contain_text(HOSTILE_AGENT)
        assert runs_page.locator("tr.run img").count() == 0
        runs_page.screenshot(path=str(ARTIFACTS / "dashboard-runs.png"), full_page=True)

        # Filters: by status and by text search.
        runs_page.goto(f"{sidecar.url}/ui/?q=mallory")
        expect(runs_page.locator("tr.run")).to_have_count(1)

        # A Who&When run's page: the culprit step is highlighted where the API says.
        listed = api.get("/api/runs", params={"limit": 10}).json()["items"]
        run = next(item for item in listed if HOSTILE_AGENT not in item["agents"])
        attribution = run["attributions"][0]
        page = runs_page
        page.goto(f"{sidecar.url}/ui/")
        page.locator(f'tr.run[data-run-id="{run["id"]}"] td.id a').click()
        page.wait_for_url(f"**/ui/runs/{run['id']}")
        culprit = page.locator("li.step.culprit")
        expect(culprit).to_have_count(1)
        expect(culprit).to_have_attribute("data-index", str(attribution["step"]))
        expect(culprit.locator(".agent")).to_have_text(attribution["agent"])
        plain = page.locator("li.step:not(.culprit):not(.status-error)").first
        highlight = culprit.evaluate("element => getComputedStyle(element).backgroundColor")
        normal = plain.evaluate("element => getComputedStyle(element).backgroundColor")
        assert highlight != normal, "the culprit step looks like any other step"
        card = page.locator("article.attribution.primary")
        expect(card).to_contain_text(attribution["method"])
        expect(card.locator(".reason")).to_have_text(attribution["reason"] or "—")
        if attribution["method"] == "learned":  # which model answered: the packaged one
            training = default_model().training
            trained_on = card.locator(".trained-on")
            expect(trained_on).to_have_text(
                f"Model trained on {training['records']} labelled runs"
                f" ({str(training['trained_at'])[:10]})"
            )
            # The card names no training file or folder a user has no use for.
            for source in str(training["dataset"]).split(","):
                expect(trained_on).not_to_contain_text(source)

        # Label the culprit through the form; the label shows up on the page and the
        # open overview counts it against the attributor.
        culprit.locator("button.label-this").click()
        page.locator("#label-form textarea[name=reason]").fill("checked by hand")
        page.locator("#label-form input[name=author]").fill("reviewer")
        page.locator("#label-form button[type=submit]").click()
        expect(page.locator("#label-form [data-result]")).to_contain_text("Label saved")
        expect(page.locator("ul.labels li")).to_contain_text(
            f"{attribution['agent']} · step {attribution['step']} by reviewer"
        )
        labels = api.get(f"/api/runs/{run['id']}/labels").json()
        assert [(label["agent"], label["step"]) for label in labels] == [
            (attribution["agent"], attribution["step"])
        ]
        row = overview.locator(f'#accuracy tr[data-method="{attribution["method"]}"]')
        expect(row.locator(".labelled")).to_have_text("1")
        expect(row.locator(".agent-accuracy")).to_have_text("100.0 %")
        overview.screenshot(path=str(ARTIFACTS / "dashboard-overview.png"), full_page=True)

        # Re-attribution with a chosen attributor queues a job and its answer arrives live.
        page.locator("#reattribute-form select[name=attributor]").select_option("random")
        page.locator("#reattribute-form button[type=submit]").click()
        expect(page.locator("#reattribute-form [data-result]")).to_contain_text("Queued job")
        expect(page.locator('article.attribution[data-method="random"]')).to_have_count(1)
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(ARTIFACTS / "dashboard-run.png"))

        # The hostile run: every piece of markup is shown as text and nothing runs.
        hostile = next(item for item in listed if HOSTILE_AGENT in item["agents"])
        page.goto(f"{sidecar.url}/ui/runs/{hostile['id']}")
        page.locator("#content-1, #result-2").evaluate_all(
            "elements => elements.forEach(element => { element.open = true; })"
        )
        timeline = page.locator("#timeline")
        expect(timeline).to_contain_text(HOSTILE_CONTENT)
        expect(timeline).to_contain_text(HOSTILE_TOOL)
        expect(timeline).to_contain_text(HOSTILE_ERROR)
        expect(page.locator("#label-form select[name=agent]")).to_contain_text(HOSTILE_AGENT)
        assert (
            page.locator(
                "main img, main script, #timeline svg:not(.swatch):not(.wf-track), main b"
            ).count()
            == 0
        )
        page.wait_for_timeout(300)  # time for any injected handler to have fired
        assert page.evaluate("typeof window.__xss") == "undefined"
        page.screenshot(path=str(ARTIFACTS / "dashboard-hostile.png"), full_page=True)
        context.close()

    assert dialogs == [], f"trajectory content opened dialogs: {dialogs}"
    assert errors == [], f"the dashboard's script failed: {errors}"


@needs_chromium
def test_with_api_keys_the_browser_logs_in_once_and_keeps_the_key_in_a_strict_cookie(
    sqlite_database_url: str, tmp_path: Path, browser: Any, expect: Any
) -> None:
    dialogs: list[str] = []
    errors: list[str] = []
    with running_sidecar(sqlite_database_url, tmp_path, FAULTFINDER_API_KEYS="s3cret") as sidecar:
        context = browser.new_context()
        page = _watch(context.new_page(), dialogs, errors)
        page.set_default_timeout(10_000)
        response = page.goto(f"{sidecar.url}/ui/overview")
        assert response is not None and response.status == 401
        page.locator("#key").fill("not-the-key")
        page.locator("#login button[type=submit]").click()
        expect(page.locator("#problem")).to_have_text("That key was not accepted.")
        assert context.cookies() == []
        page.locator("#key").fill("s3cret")
        page.locator("#login button[type=submit]").click()
        page.wait_for_url("**/ui/overview")
        expect(page.locator("h1")).to_have_text("Overview")
        expect(page.locator("#live-status")).to_have_text("live")  # the event stream got in
        (cookie,) = context.cookies()
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert "s3cret" not in page.evaluate("document.cookie")
        # Logging out forgets the key.
        page.locator("form.logout button").click()
        expect(page.locator("#login")).to_be_visible()
        assert context.cookies() == []
        context.close()
    assert dialogs == [] and errors == []


def _events(stream: Iterator[str], until: str, limit: int = 200) -> list[dict[str, str]]:
    """Parse server-sent events from `stream` up to (and with) the first of kind `until`."""
    events: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for _, line in zip(range(limit * 5), stream, strict=False):
        if not line:
            if "event" in current:
                events.append(current)
                if current["event"] == until:
                    return events
            current = {}
            continue
        field, _, value = line.partition(": ")
        if field in ("id", "event", "data"):
            current[field] = value
    raise AssertionError(f"no {until!r} event in {events}")


def test_the_event_stream_announces_runs_and_resumes_from_the_last_event_id(
    sqlite_database_url: str, tmp_path: Path
) -> None:
    record = load_dataset("who_and_when:algorithm-generated", resolve_datasets_dir(None))
    with running_sidecar(sqlite_database_url, tmp_path, **FAST) as sidecar:
        url = f"{sidecar.url}/ui/events"
        with httpx.stream("GET", url, timeout=30) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            lines = response.iter_lines()
            assert next(lines) == ": connected"
            replay([next(iter(record))], to=sidecar.url, progress=False)
            seen = _events(lines, until="attribution")
        kinds = [event["event"] for event in seen]
        assert kinds[0] == "spans" and "run.status" in kinds
        run_id = json.loads(seen[-1]["data"])["run_id"]
        assert run_id in json.loads(seen[0]["data"])["runs"]
        assert json.loads(seen[-1]["data"])["method"] == "learned"  # the first default

        # Reconnecting after the first event replays the rest, in order.
        headers = {"last-event-id": seen[0]["id"]}
        with httpx.stream("GET", url, headers=headers, timeout=30) as response:
            replayed = _events(response.iter_lines(), until="attribution")
        assert [event["id"] for event in replayed] == [event["id"] for event in seen[1:]]

        # An id from another process (or long gone) asks the page to reload everything.
        headers = {"last-event-id": "0000:1"}
        with httpx.stream("GET", url, headers=headers, timeout=30) as response:
            assert _events(response.iter_lines(), until="reset")[0]["event"] == "reset"


@needs_chromium
def test_an_early_alarm_appears_on_the_open_run_page_while_the_run_is_running(
    sqlite_database_url: str, tmp_path: Path, browser: Any, expect: Any
) -> None:
    record = next(r for r in load_dataset("who_and_when:hand-crafted") if len(r.trajectory) > 60)
    spans = trajectory_spans(record.trajectory)
    steps = [span for span in spans if span.parent is not None]  # the root never ends here
    env = {"FAULTFINDER_AUDIT_INTERVAL": "0.2", "FAULTFINDER_QUIET_PERIOD": "600"}
    headers = {"content-type": "application/x-protobuf"}
    dialogs: list[str] = []
    errors: list[str] = []
    with (
        running_sidecar(sqlite_database_url, tmp_path, **env) as sidecar,
        httpx.Client(base_url=sidecar.url, timeout=30) as api,
    ):
        run_id = f"{spans[0].context.trace_id:032x}"
        first = api.post("/v1/traces", content=protobuf_body(steps[:1]), headers=headers)
        assert first.status_code == 200
        page = _watch(browser.new_page(), dialogs, errors)
        page.goto(f"{sidecar.url}/ui/runs/{run_id}")
        expect(page.locator("#alarm")).to_have_count(0)
        page.evaluate("window.__sameDocument = true")
        for start in range(1, len(steps), 10):
            body = protobuf_body(steps[start : start + 10])
            assert api.post("/v1/traces", content=body, headers=headers).status_code == 200
        # The alarm shows up without a reload, with its agent, step and reason.
        alarm = page.locator("#alarm")
        expect(alarm).to_have_count(1)
        stored = api.get(f"/api/runs/{run_id}").json()
        assert stored["status"] == "running" and stored["alarm"] is not None
        raised = stored["alarm"]
        expect(alarm).to_contain_text(f"{raised['agent']} at step {raised['step']}")
        # What a person reads is in view; the model's features wait behind "details".
        lead, _, features = raised["reason"].partition(MODEL_FEATURES)
        expect(alarm).to_contain_text(lead.strip())
        if features:
            toggle = alarm.locator("details.model-features")
            expect(toggle).not_to_have_attribute("open", "")
            toggle.locator("summary").click()
            expect(toggle.locator("li").first).to_be_visible()
        assert page.evaluate("window.__sameDocument") is True
    assert not dialogs and not errors


README_RUN = """
import sys, time
from opentelemetry import trace
from faultfinder.sdk import agent_step, configure, message, run, shutdown, tool_call

configure(sys.argv[1], service_name="travel-agents", project="demo")
with run(task="Cheapest Friday flight from Paris to Lisbon?", ground_truth="TP 433") as r:
    with agent_step("Planner") as planner:
        trace.get_current_span().set_attributes(
            {"gen_ai.usage.input_tokens": 412, "gen_ai.usage.output_tokens": 38}
        )
        time.sleep(0.3)
        planner.say("Searcher: list Friday flights CDG→LIS; I will pick the cheapest.")
    with agent_step("Searcher"), tool_call("flights.search", {"from": "CDG", "to": "LIS"}) as call:
        time.sleep(0.5)
        call.result([{"flight": "TP 433", "eur": 89}, {"flight": "AF 1024", "eur": 140}])
    time.sleep(0.2)
    message("Planner", "The cheapest flight is AF 1024.")
    r.fail("answered AF 1024, expected TP 433", final_answer="AF 1024")
shutdown()
"""
"""The README's SDK example (with the token counts an LLM span records and the time its steps
take), run as its own program against the sidecar."""


def _leading(run: dict[str, Any]) -> dict[str, Any]:
    """The run's leading attribution under the default attributors (learned first)."""
    ok = [a for a in run["attributions"] if a["status"] == "ok"]
    return next((a for a in reversed(ok) if a["method"] == "learned"), ok[-1])


@needs_chromium
@pytest.mark.slow
def test_a_failed_runs_page_leads_with_its_reason_verdict_evidence_and_waterfall(
    sqlite_database_url: str, tmp_path: Path, browser: Any, expect: Any
) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    records = list(load_dataset("who_and_when:algorithm-generated", resolve_datasets_dir(None)))
    dialogs: list[str] = []
    errors: list[str] = []
    with (
        running_sidecar(sqlite_database_url, tmp_path, **FAST) as sidecar,
        httpx.Client(base_url=sidecar.url, timeout=30) as api,
    ):
        replay(records[4:10], to=sidecar.url, progress=False)
        subprocess.run([sys.executable, "-c", README_RUN, sidecar.url], check=True, timeout=120)
        context = browser.new_context(viewport={"width": 1280, "height": 860})
        page = _watch(context.new_page(), dialogs, errors)
        page.goto(f"{sidecar.url}/ui/")
        expect(page.locator("tr.run .badge.status-attributed")).to_have_count(7)
        listed = api.get("/api/runs", params={"limit": 20}).json()["items"]
        run = next(item for item in listed if item["project"] == "demo")
        lead = _leading(run)
        assert run["outcome_reason"] == "answered AF 1024, expected TP 433"
        assert lead["mode"] is not None

        # The runs list: task, why it failed, the culprit and its mode, at a glance.
        row = page.locator(f'tr.run[data-run-id="{run["id"]}"]')
        expect(row.locator("a.task")).to_have_text("Cheapest Friday flight from Paris to Lisbon?")
        expect(row.locator(".badge")).to_have_text("failed · attributed")
        expect(row.locator(".outcome-reason")).to_have_text("answered AF 1024, expected TP 433")
        expect(row.locator(".culprit")).to_contain_text(f"{lead['agent']} · step {lead['step']}")
        expect(row.locator(".culprit .mode .code")).to_have_text(lead["mode"])
        if os.environ.get("FAULTFINDER_UPDATE_SCREENSHOT") == "1":
            page.screenshot(path=str(ROOT / "docs" / "runs.png"))

        # Filters match the culprit the list shows: the leading answer, not any answer.
        for item in listed:
            shown = _leading(item)
            filters = [("agent", shown["agent"])] + (
                [("mode", shown["mode"])] if shown["mode"] else []
            )
            for name, value in filters:
                found = api.get("/api/runs", params={name: value, "limit": 50}).json()["items"]
                assert item["id"] in {other["id"] for other in found}
                assert {_leading(other)[name] for other in found} == {value}
        page.goto(f"{sidecar.url}/ui/?mode={lead['mode']}")
        expect(page.locator(f'tr.run[data-run-id="{run["id"]}"]')).to_have_count(1)
        expect(page.locator("tr.run .culprit .mode .code")).to_have_text(
            [lead["mode"]] * page.locator("tr.run").count()
        )

        # The run page: the outcome and its reason, then one verdict line.
        row_link = f'tr.run[data-run-id="{run["id"]}"] a.task'
        page.goto(f"{sidecar.url}/ui/")
        page.locator(row_link).click()
        page.wait_for_url(f"**/ui/runs/{run['id']}")
        expect(page.locator("#outcome")).to_contain_text(
            "Failed: answered AF 1024, expected TP 433"
        )
        verdict = page.locator("#verdict")
        expect(verdict).to_contain_text(f"{lead['agent']} at step {lead['step']}: ")
        expect(verdict.locator(".mode .code")).to_have_text(lead["mode"])
        # The blamed step is in view at once, its text shown in full.
        culprit = page.locator("li.step.culprit")
        expect(culprit).to_have_attribute("data-index", str(lead["step"]))
        expect(culprit).to_be_in_viewport()
        expect(culprit.locator(".content")).to_be_visible()
        # Each piece of evidence links to its step, where the phrase it cites is marked.
        page.evaluate("window.scrollTo(0, 0)")
        expect(culprit).not_to_be_in_viewport()
        # The model's features are not in the reason but behind a "details" toggle under it.
        assert "(model:" not in lead["reason"] and lead["details"]["model_features"]
        weighed = page.locator("#model-features")
        expect(weighed.locator("li").first).to_be_hidden()
        weighed.locator("summary").click()
        expect(weighed.locator("li")).to_have_count(len(lead["details"]["model_features"]))
        link = page.locator("#evidence a.evidence-link").first
        step = link.get_attribute("data-step")
        link.click()
        phrase = page.locator(f"#step-{step} mark")
        expect(phrase).to_be_in_viewport()
        expect(phrase).to_have_class("flash")
        assert phrase.inner_text() in page.locator(f"#step-{step} pre").first.inner_text()
        # The waterfall: one bar per step with its duration, and the tokens recorded.
        bars = page.locator("#waterfall .wf-row")
        expect(bars).to_have_count(run["n_steps"])
        planner = bars.nth(0)
        expect(planner.locator(".wf-duration")).to_have_text(re.compile(r"^\d{3} ms$"))
        expect(planner.locator(".wf-tokens")).to_have_text("450 tok")
        expect(page.locator("#waterfall")).to_be_in_viewport()
        # Agents keep one colour each, none of them the red of errors.
        fills = page.locator("#waterfall .wf-track rect").evaluate_all(
            "rects => rects.map(rect => rect.getAttribute('fill'))"
        )
        agents = [page.locator(f"#step-{i} .agent").inner_text() for i in range(run["n_steps"])]
        assert len(dict(zip(agents, fills, strict=True))) == len(set(fills)) == len(set(agents))
        assert not any(fill.lower() in ("#e15759", "#b3261e", "#ff0000") for fill in fills)
        # Every tint has its legend, the label form starts at the blamed agent and step.
        expect(page.locator("#tints")).to_contain_text("prediction set")
        expect(page.locator("#label-form select[name=agent]")).to_have_value(lead["agent"])
        expect(page.locator("#label-form input[name=step]")).to_have_value(str(lead["step"]))
        page.screenshot(path=str(ARTIFACTS / "dashboard-run-verdict.png"), full_page=True)
        if os.environ.get("FAULTFINDER_UPDATE_SCREENSHOT") == "1":
            page.evaluate("window.scrollTo(0, 0)")
            page.screenshot(path=str(ROOT / "docs" / "run.png"), full_page=True)
            page.screenshot(path=str(ROOT / "docs" / "dashboard.png"))

        # The overview counts every failed run as failed and draws failures per mode.
        page.goto(f"{sidecar.url}/ui/overview")
        expect(page.locator("[data-figure=failed]")).to_have_text("7")
        expect(page.locator("[data-figure=attributed]")).to_have_text("7")
        expect(page.locator("#modes svg.chart rect")).not_to_have_count(0)
        expect(page.locator("#modes-over-time .legend")).to_contain_text(lead["mode"])
        if os.environ.get("FAULTFINDER_UPDATE_SCREENSHOT") == "1":
            page.screenshot(path=str(ROOT / "docs" / "overview.png"), full_page=True)
        context.close()
    assert dialogs == [] and errors == []
