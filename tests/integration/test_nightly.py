"""`faultfinder bench nightly` on real SQLite and PostgreSQL: the history it keeps, the gate
that fails on a degraded attributor and passes an unchanged rerun, resuming an interrupted
night, the time budget, and the trend page, /metrics and report.html after two nights.

The degraded attributor is registered here only: `nightly_subject` answers each record's
labelled culprit, except on the runs listed in `DEGRADED`, where it names the step after it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from click.testing import CliRunner, Result
from prometheus_client.parser import text_string_to_metric_families

import tests.plugins.counting  # noqa: F401  (registers `counting` in this process too)
from faultfinder.attributors.base import AttributeOptions, register
from faultfinder.attributors.model import Attribution, Trajectory
from faultfinder.cli import main
from faultfinder.datasets import BenchmarkRecord, load_dataset
from faultfinder.server.db.engine import create_engine
from faultfinder.server.store import BenchEntry, BenchHistory
from tests.integration.browser import LIVE_TIMEOUT_MS, needs_chromium
from tests.integration.sidecar import FAULTFINDER, ROOT, running_sidecar
from tests.stub_llm import StubLLM, answer

SUBJECT = "nightly_subject"
RECORDS = 12
GOLD: dict[str, tuple[str, int]] = {}
"""Run id → the labelled (agent, step) of the records the tests score."""
DEGRADED: set[str] = set()
"""Run ids on which the subject answers the wrong step."""


@register(SUBJECT)
class NightlySubject:
    name = SUBJECT

    async def attribute(self, trajectory: Trajectory, options: AttributeOptions) -> Attribution:
        agent, step = GOLD[trajectory.run_id]
        if trajectory.run_id in DEGRADED:
            step = step + 1 if step + 1 < len(trajectory) else step - 1
        return Attribution(method=self.name, agent=agent, step=step, reason="test subject")


TINY_SUITE = f"""
name = "tiny"

[[datasets]]
name = "ww-ag"
spec = "who_and_when:algorithm-generated"
limit = {RECORDS}

[[attributors]]
name = "{SUBJECT}"

[[attributors]]
name = "first_error"

[[settings]]
name = "default"
"""


@pytest.fixture
def records(datasets_dir: Path) -> Iterator[list[BenchmarkRecord]]:
    chosen = list(load_dataset("who_and_when:algorithm-generated", datasets_dir))[:RECORDS]
    GOLD.update({r.trajectory.run_id: (r.gold.agent, r.gold.step) for r in chosen})
    DEGRADED.clear()
    yield chosen
    DEGRADED.clear()


def nightly(suite: Path, database_url: str, out: Path, root: Path, *args: str) -> Result:
    return CliRunner().invoke(
        main,
        [
            "bench", "nightly", "--suite", str(suite), "--database", database_url,
            "--out", str(out), "--datasets-dir", str(root), *args,
        ],
    )  # fmt: skip


def history(database_url: str, *args: str) -> list[dict[str, Any]]:
    result = CliRunner().invoke(
        main, ["bench", "history", "export", "--database", database_url, *args]
    )
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def only(entries: list[dict[str, Any]], run: int, attributor: str) -> dict[str, Any]:
    """The entry of `attributor` stored by the `run`-th night (0-based)."""
    runs = list(dict.fromkeys(entry["run_id"] for entry in entries))
    (found,) = [e for e in entries if e["run_id"] == runs[run] and e["attributor"] == attributor]
    return found


def test_a_degraded_attributor_fails_the_gate_and_an_unchanged_rerun_passes(
    database_url: str, tmp_path: Path, datasets_dir: Path, records: list[BenchmarkRecord]
) -> None:
    suite = tmp_path / "tiny.toml"
    suite.write_text(TINY_SUITE)
    out = tmp_path / "out"

    first = nightly(suite, database_url, out, datasets_dir, "--code-version", "v1")
    assert first.exit_code == 0, first.output
    assert "gate: passed" in first.stdout
    assert f"ww-ag/{SUBJECT}/default" in first.stdout and "100.0" in first.stdout

    # The attributor gets worse on 8 of its 12 records: beyond noise.
    worse = records[:8]
    DEGRADED.update(record.trajectory.run_id for record in worse)
    second = nightly(suite, database_url, out, datasets_dir, "--code-version", "v2")
    assert second.exit_code == 1, second.output
    assert f"REGRESSION: ww-ag/{SUBJECT}/default (attributor {SUBJECT})" in second.stdout
    (failed,) = [line for line in second.stdout.splitlines() if line.startswith("gate: FAILED")]
    assert SUBJECT in failed and "first_error" not in failed
    (named,) = [line for line in second.stdout.splitlines() if "worse on:" in line]
    assert {r.record_id for r in records if f"{r.record_id} (gold" in named} == {
        r.record_id for r in worse
    }
    assert "step: 100.0 % -> 33.3 % (8 records worse, 0 better" in second.stdout

    # The attributor as it was: compared with the last *accepted* entry (the first night's).
    DEGRADED.clear()
    third = nightly(suite, database_url, out, datasets_dir, "--code-version", "v3")
    assert third.exit_code == 0, third.output
    assert "gate: passed" in third.stdout and "REGRESSION" not in third.stdout

    # One record worse is within noise: the gate passes and says which record changed.
    DEGRADED.add(records[0].trajectory.run_id)
    fourth = nightly(suite, database_url, out, datasets_dir, "--code-version", "v4")
    assert fourth.exit_code == 0, fourth.output
    assert f"changed within noise: ww-ag/{SUBJECT}/default" in fourth.stdout
    assert f"worse on: {records[0].record_id} (gold" in fourth.stdout

    entries = history(database_url)
    assert len(entries) == 8
    verdicts = [only(entries, night, SUBJECT)["verdict"] for night in range(4)]
    assert verdicts == ["first", "regression", "pass", "pass"]
    assert [only(entries, night, "first_error")["verdict"] for night in range(4)] == [
        "first", "pass", "pass", "pass",
    ]  # fmt: skip
    regression = only(entries, 1, SUBJECT)
    assert regression["accepted"] is False
    assert regression["code_version"] == "v2"
    assert regression["step_accuracy"] == pytest.approx(4 / 12)
    assert only(entries, 2, SUBJECT)["baseline_id"] == only(entries, 0, SUBJECT)["id"]
    assert only(entries, 3, SUBJECT)["baseline_id"] == only(entries, 2, SUBJECT)["id"]
    # Per-record correctness, figures with intervals, time.
    per_record = {r["id"]: r for r in regression["records"]}
    assert len(per_record) == RECORDS
    assert {i for i, r in per_record.items() if not r["step"]} == {r.record_id for r in worse}
    step = regression["figures"]["overall"]["step"]
    assert step["hits"] == 4 and step["n"] == RECORDS
    assert 0 < step["lo"] < 4 / 12 < step["hi"] < 1
    assert regression["wall_time_s"] > 0 and regression["n_records"] == RECORDS
    assert regression["gate"]["metrics"][1]["worse"] == sorted(r.record_id for r in worse)

    # What /metrics reads: the newest entry of each (dataset, attributor, settings).
    async def latest() -> list[BenchEntry]:
        engine = create_engine(database_url)
        try:
            return await BenchHistory(engine).latest()
        finally:
            await engine.dispose()

    newest = anyio.run(latest)
    assert {entry.id for entry in newest} == {
        only(entries, 3, a)["id"] for a in (SUBJECT, "first_error")
    }


def test_accepting_a_regression_makes_it_the_baseline(
    sqlite_database_url: str, tmp_path: Path, datasets_dir: Path, records: list[BenchmarkRecord]
) -> None:
    suite = tmp_path / "tiny.toml"
    suite.write_text(TINY_SUITE)
    out = tmp_path / "out"
    assert nightly(suite, sqlite_database_url, out, datasets_dir).exit_code == 0
    DEGRADED.update(record.trajectory.run_id for record in records[:8])
    assert nightly(suite, sqlite_database_url, out, datasets_dir).exit_code == 1
    # The same degraded answers fail again: the regression is not a baseline ...
    assert nightly(suite, sqlite_database_url, out, datasets_dir).exit_code == 1
    regression = only(history(sqlite_database_url), 1, SUBJECT)
    accepted = CliRunner().invoke(
        main,
        ["bench", "history", "accept", str(regression["id"]), "--database", sqlite_database_url],
    )
    assert accepted.exit_code == 0, accepted.output
    assert "is now the baseline" in accepted.stdout
    # ... until someone accepts it: then the unchanged degraded attributor passes.
    again = nightly(suite, sqlite_database_url, out, datasets_dir)
    assert again.exit_code == 0, again.output
    assert only(history(sqlite_database_url), 3, SUBJECT)["baseline_id"] == regression["id"]


def test_an_interrupted_night_continues_where_it_stopped(
    database_url: str, tmp_path: Path, datasets_dir: Path
) -> None:
    suite = tmp_path / "slow.toml"
    suite.write_text(
        """
name = "slow"
[[datasets]]
name = "ag"
spec = "who_and_when:algorithm-generated"
limit = 6
[[datasets]]
name = "hc"
spec = "who_and_when:hand-crafted"
limit = 6
[[attributors]]
name = "counting"
[[settings]]
name = "one-at-a-time"
concurrency = 1
"""
    )
    executions = tmp_path / "executions.txt"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "FAULTFINDER_TEST_EXECUTIONS": str(executions),
        "FAULTFINDER_TEST_SLEEP": "0.25",
    }
    command = [
        str(FAULTFINDER), "bench", "nightly", "--suite", str(suite), "--database", database_url,
        "--out", str(tmp_path / "out"), "--datasets-dir", str(datasets_dir),
        "--plugins", "tests.plugins.counting", "--code-version", "v1",
    ]  # fmt: skip

    def attributed() -> list[str]:
        text = executions.read_text() if executions.exists() else ""
        return [line.split()[0] for line in text.splitlines()]

    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while len(attributed()) < 8:  # the first entry done, two records into the second
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the nightly made no progress"
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err.decode()
    stopped = err.decode()
    assert "interrupted: run the same command again to continue nightly run" in stopped
    run_id = stopped.rsplit("nightly run ", 1)[1].split()[0]
    before = attributed()

    resumed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming nightly run {run_id}: 1 of 2 entries stored, 1 to go" in resumed.stderr
    assert f"nightly run {run_id}" in resumed.stdout
    # Nothing done before the interruption was done again but the record in flight.
    again = attributed()[len(before) :]
    assert len(set(before) & set(again)) <= 1
    assert len(set(again)) == 12 - len(set(before)) + len(set(before) & set(again))
    entries = history(database_url)
    assert [entry["run_id"] for entry in entries] == [run_id, run_id]
    assert [entry["n_records"] for entry in entries] == [6, 6]


def test_records_left_when_the_time_budget_runs_out_count_as_failed(
    sqlite_database_url: str,
    tmp_path: Path,
    datasets_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAULTFINDER_TEST_EXECUTIONS", str(tmp_path / "executions.txt"))
    monkeypatch.setenv("FAULTFINDER_TEST_SLEEP", "0.3")
    suite = tmp_path / "budget.toml"
    suite.write_text(
        """
name = "budget"
[[datasets]]
name = "ag"
spec = "who_and_when:algorithm-generated"
limit = 10
[[attributors]]
name = "counting"
time_budget_s = 1.0
[[settings]]
name = "serial"
concurrency = 1
"""
    )
    result = nightly(suite, sqlite_database_url, tmp_path / "out", datasets_dir)
    assert result.exit_code == 0, result.output
    (entry,) = history(sqlite_database_url)
    assert entry["n_records"] == 10
    assert entry["definition"]["time_budget_ran_out"] is True
    failed = [record for record in entry["records"] if record["failed"]]
    attributed = (tmp_path / "executions.txt").read_text().splitlines()
    assert 4 <= len(failed) <= 10 - len(attributed) + 1
    lines = (tmp_path / "out").glob("*/ag__counting__serial/results.jsonl")
    reasons = {
        json.loads(line)["attribution"].get("failure_reason")
        for path in lines
        for line in path.read_text().splitlines()
    }
    assert "not attributed: the entry's time budget of 1 s ran out" in reasons


def test_an_llm_entry_runs_only_with_an_endpoint_and_records_its_model_and_tokens(
    sqlite_database_url: str,
    tmp_path: Path,
    datasets_dir: Path,
    records: list[BenchmarkRecord],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for variable in ("OPENAI_BASE_URL", "FAULTFINDER_LLM_BASE_URL", "FAULTFINDER_LLM_MODEL"):
        monkeypatch.delenv(variable, raising=False)
    suite = tmp_path / "llm.toml"
    llm_suite = """
name = "llm"
[[datasets]]
name = "ww-ag"
spec = "who_and_when:algorithm-generated"
limit = 2
[[attributors]]
name = "all_at_once"
model = "judge-model"
token_budget = 5000
time_budget_s = 60
{endpoint}
[[settings]]
name = "default"
concurrency = 1
"""
    suite.write_text(llm_suite.format(endpoint=""))
    skipped = nightly(suite, sqlite_database_url, tmp_path / "out", datasets_dir)
    assert skipped.exit_code == 0, skipped.output
    assert "skipped ww-ag/all_at_once/default: no model endpoint" in skipped.stdout
    assert history(sqlite_database_url) == []

    # A scripted OpenAI-compatible endpoint (protocol stub, not a model): the gold agents.
    replies = [
        answer({"agent": r.gold.agent, "step": 0, "reason": "scripted"}, usage=(300, 40))
        for r in records[:2]
    ]
    stub = StubLLM(replies)
    with stub.running():
        suite.write_text(llm_suite.format(endpoint=f'base_url = "{stub.base_url}"'))
        ran = nightly(suite, sqlite_database_url, tmp_path / "out", datasets_dir, "--new")
    assert ran.exit_code == 0, ran.output
    assert {request["model"] for request in stub.completions} == {"judge-model"}
    (entry,) = history(sqlite_database_url)
    assert entry["model"] == "judge-model" and entry["agent_accuracy"] == 1.0
    assert (entry["llm_calls"], entry["prompt_tokens"], entry["completion_tokens"]) == (2, 600, 80)
    recorded = entry["definition"]["model_settings"]
    assert recorded["token_budget"] == 5000 and recorded["base_url"] == stub.base_url
    assert "api_key" not in recorded


def scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@needs_chromium
@pytest.mark.slow
def test_the_trend_page_metrics_and_report_after_two_nights(
    sqlite_database_url: str,
    tmp_path: Path,
    datasets_dir: Path,
    records: list[BenchmarkRecord],
    browser: Any,
    expect: Any,
) -> None:
    suite = tmp_path / "tiny.toml"
    suite.write_text(TINY_SUITE)
    out = tmp_path / "out"
    # Playwright's event loop runs in this thread: the command runs its own in another.
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(nightly, suite, sqlite_database_url, out, datasets_dir).result()
        assert first.exit_code == 0, first.output
        DEGRADED.update(record.trajectory.run_id for record in records[:8])
        second = pool.submit(nightly, suite, sqlite_database_url, out, datasets_dir).result()
    assert second.exit_code == 1, second.output
    run_id = second.stdout.split()[2]
    worse = sorted(record.record_id for record in records[:8])

    # report.html: both nights on the trend, the second one ringed as a regression.
    report = (out / run_id / "report.html").read_text()
    assert report.count('class="regression"') == 1
    assert f"REGRESSION: ww-ag/{SUBJECT}/default" in report

    with running_sidecar(sqlite_database_url, tmp_path) as sidecar:
        labels = {"dataset": "ww-ag", "settings": "default"}
        samples = scrape(sidecar.url)

        def gauge(name: str, **more: str) -> float:
            return samples[(name, frozenset({**labels, **more}.items()))]

        assert gauge("faultfinder_bench_accuracy", attributor=SUBJECT, metric="step") == (
            pytest.approx(4 / 12)
        )
        assert gauge("faultfinder_bench_accuracy", attributor=SUBJECT, metric="agent") == 1.0
        assert gauge("faultfinder_bench_regression", attributor=SUBJECT) == 1
        assert gauge("faultfinder_bench_regression", attributor="first_error") == 0
        assert gauge("faultfinder_bench_records", attributor=SUBJECT) == RECORDS

        errors: list[str] = []
        page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.on(
            "console",
            lambda message: (
                errors.append(message.text) if "Content Security Policy" in message.text else None
            ),
        )
        page.set_default_timeout(LIVE_TIMEOUT_MS)
        page.goto(f"{sidecar.url}/ui/")
        page.locator("header nav a", has_text="Nightly").click()
        page.wait_for_url("**/ui/nightly")

        row = page.locator(f'#latest-run tr.entry[data-entry="ww-ag/{SUBJECT}/default"]')
        expect(row.locator(".badge")).to_have_text("regression")
        expect(row.locator(".step-accuracy")).to_contain_text("33.3 %")
        expect(
            page.locator('#latest-run tr.entry[data-entry="ww-ag/first_error/default"] .badge')
        ).to_have_text("pass")
        flagged = page.locator("#regressions li.regression")
        expect(flagged).to_have_count(1)
        expect(flagged.locator(".attributor")).to_have_text(SUBJECT)
        expect(flagged.locator('li.change[data-metric="step"] .records')).to_have_text(
            "worse on " + ", ".join(worse)
        )
        chart = page.locator('figure.trend[data-dataset="ww-ag"][data-metric="step"]')
        subject = chart.locator(f'g.series[data-attributor="{SUBJECT}"] circle.point')
        expect(subject).to_have_count(2)
        assert [float(v) for v in subject.evaluate_all("c => c.map(e => e.dataset.value)")] == [
            1.0,
            pytest.approx(4 / 12, abs=1e-4),
        ]
        expect(
            chart.locator(f'g.series[data-attributor="{SUBJECT}"] circle.regression')
        ).to_have_count(1)
        expect(chart.locator('g.series[data-attributor="first_error"] circle.point')).to_have_count(
            2
        )
        expect(chart.locator("circle.regression")).to_have_count(1)
        # The regression is drawn apart: ringed, larger than the other points.
        ring = chart.locator("circle.regression").evaluate(
            "c => [getComputedStyle(c).stroke, c.getAttribute('r')]"
        )
        assert ring[0] != "none" and float(ring[1]) > 4
        # Below the first night's point: the trend goes down.
        ys = subject.evaluate_all("c => c.map(e => Number(e.getAttribute('cy')))")
        assert ys[1] > ys[0]
        (ROOT / "test-artifacts").mkdir(exist_ok=True)
        page.screenshot(path=str(ROOT / "test-artifacts" / "dashboard-nightly.png"), full_page=True)
        assert errors == []
