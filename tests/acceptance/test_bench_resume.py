"""Resumable `faultfinder bench run`: a rerun in the same --out finishes what an earlier
(limited, or killed) run left, never attributes a record twice, and summarises all of it."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from click.testing import CliRunner

from faultfinder.attributors.local_model import (
    LocalModelError,
    locate_model,
)
from faultfinder.attributors.local_server import (
    runtime_missing,
)
from faultfinder.cli import main
from faultfinder.datasets import (
    BenchmarkRecord,
)
from faultfinder.evaluation.run import RESULTS_FILE, read_results
from tests.stub_llm import ScriptedReply, StubLLM, answer

AG = "who_and_when:algorithm-generated"


@pytest.fixture(scope="module")
def records(who_and_when: list[BenchmarkRecord]) -> list[BenchmarkRecord]:
    return who_and_when


def bench(datasets_dir: Path, out: Path, dataset: str, *args: str) -> dict[str, Any]:
    result = CliRunner().invoke(
        main,
        ["bench", "run", "--dataset", dataset, "--datasets-dir", str(datasets_dir),
         "--out", str(out), "--json", *args],
    )  # fmt: skip
    assert result.exit_code == 0, result.output + (result.stderr or "")
    summary: dict[str, Any] = json.loads(result.stdout)
    return summary


def keys(out: Path) -> list[tuple[str, int]]:
    return [(line["record_id"], line["seed"]) for line in read_results(out / RESULTS_FILE)]


def scripted_answers(records: list[BenchmarkRecord], delay: float = 0.0) -> list[ScriptedReply]:
    return [
        answer({"agent": r.gold.agent, "step": r.gold.step, "reason": "scripted"}, delay=delay)
        for r in records
    ]


def test_a_limited_run_is_finished_by_a_rerun_without_the_limit(
    datasets_dir: Path, records: list[BenchmarkRecord], tmp_path: Path
) -> None:
    first = bench(datasets_dir, tmp_path, "who_and_when", "--attributor", "first_error",
                  "--limit", "5", "--repeats", "2")  # fmt: skip
    assert first["records_completed"] == 10
    earlier = (tmp_path / RESULTS_FILE).read_bytes()

    second = bench(datasets_dir, tmp_path, "who_and_when", "--attributor", "first_error",
                   "--repeats", "2")  # fmt: skip
    done = keys(tmp_path)
    assert len(done) == len(set(done)) == 2 * len(records)  # each record once per seed
    assert (tmp_path / RESULTS_FILE).read_bytes().startswith(earlier)  # appended, not redone
    assert second["attributed_this_session"] == 2 * (len(records) - 10)
    assert second["records_completed"] == len(records)
    assert second["subsets"]["overall"]["n"] == len(records)
    assert second["sessions"] == 2

    # The resumed summary equals a single uninterrupted run's.
    whole = bench(datasets_dir, tmp_path / "whole", "who_and_when", "--attributor",
                  "first_error", "--repeats", "2")  # fmt: skip
    assert second["subsets"]["overall"]["accuracy"] == whole["subsets"]["overall"]["accuracy"]

    # Nothing left: a third run attributes nothing and reports the same.
    third = bench(datasets_dir, tmp_path, "who_and_when", "--attributor", "first_error",
                  "--repeats", "2")  # fmt: skip
    assert third["attributed_this_session"] == 0
    assert third["subsets"] == second["subsets"]


def test_an_llm_run_resumed_asks_the_model_only_about_new_records(
    datasets_dir: Path, records: list[BenchmarkRecord], tmp_path: Path
) -> None:
    ag = [r for r in records if r.subset == "algorithm-generated"]
    stub = StubLLM(scripted_answers(ag[:4]))
    with stub.running():
        common = ("--attributor", "all_at_once", "--concurrency", "1", "--base-url",
                  stub.base_url, "--model", "stub-resume", "--timeout", "5")  # fmt: skip
        bench(datasets_dir, tmp_path, AG, *common, "--limit", "2")
        assert len(stub.completions) == 2
        summary = bench(datasets_dir, tmp_path, AG, *common, "--limit", "4")
    assert len(stub.completions) == 4
    assert [record_id for record_id, _ in keys(tmp_path)] == [r.record_id for r in ag[:4]]
    overall = summary["subsets"]["overall"]
    assert overall["n"] == 4
    assert overall["cost"]["total_llm_calls"] == 4
    assert overall["accuracy"]["step"]["mean"] == 1.0  # the script answered with the gold labels


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_killed_run_loses_at_most_the_record_in_flight(
    datasets_dir: Path, records: list[BenchmarkRecord], tmp_path: Path, stop: signal.Signals
) -> None:
    ag = [r for r in records if r.subset == "algorithm-generated"][:8]
    out = tmp_path / "run"
    stub = StubLLM(scripted_answers(ag, delay=0.3))
    command = [
        str(Path(sys.executable).with_name("faultfinder")), "bench", "run",
        "--dataset", AG, "--datasets-dir", str(datasets_dir), "--out", str(out),
        "--attributor", "all_at_once", "--concurrency", "1", "--limit", "8",
        "--model", "stub-killed", "--timeout", "10",
    ]  # fmt: skip
    with stub.running():
        process = subprocess.Popen(
            [*command, "--base-url", stub.base_url],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and process.poll() is None:
                if (out / RESULTS_FILE).is_file() and len(keys(out)) >= 3:
                    break
                time.sleep(0.05)
            process.send_signal(stop)
        finally:
            process.wait(timeout=10)
        asked_before_kill = len(stub.completions)
    survived = keys(out)
    if stop == signal.SIGTERM:
        # A polite kill unwinds: the run file counts exactly what reached results.jsonl.
        session = json.loads((out / "run.json").read_text(encoding="utf-8"))["sessions"][-1]
        assert session["records_attributed"] == len(survived)
    assert 3 <= len(survived) < 8, "the run finished before it could be interrupted"
    # At most the one record in flight was asked about and lost.
    assert asked_before_kill - len(survived) <= 1

    rest = StubLLM(scripted_answers([r for r in ag if r.record_id not in dict(survived)]))
    with rest.running():
        summary = bench(datasets_dir, out, AG, "--attributor", "all_at_once",
                        "--concurrency", "1", "--limit", "8", "--model", "stub-killed",
                        "--timeout", "10", "--base-url", rest.base_url)  # fmt: skip
    done = keys(out)
    assert len(rest.completions) == 8 - len(survived)
    assert sorted(done) == sorted((r.record_id, 0) for r in ag)
    assert summary["records_completed"] == 8
    assert summary["subsets"]["overall"]["accuracy"]["agent"]["mean"] == 1.0


def test_a_local_model_run_serves_the_model_for_the_run_and_resumes(
    datasets_dir: Path, tmp_path: Path
) -> None:
    problem = runtime_missing()
    if problem is not None:
        pytest.skip(problem)
    try:
        locate_model("smollm2")
    except LocalModelError as exc:
        pytest.skip(str(exc))
    common = ("--attributor", "all_at_once", "--local-model", "smollm2",
              "--context-tokens", "4096", "--max-tokens", "128")  # fmt: skip
    first = bench(datasets_dir, tmp_path, AG, *common, "--limit", "1")
    second = bench(datasets_dir, tmp_path, AG, *common, "--limit", "2")
    assert first["records_completed"] == 1
    assert second["attributed_this_session"] == 1
    assert second["records_completed"] == 2
    cost = second["subsets"]["overall"]["cost"]
    assert cost["total_llm_calls"] >= 2
    assert cost["total_prompt_tokens"] > 0
    assert second["settings"]["model"] == "smollm2"
    assert second["settings"]["concurrency"] == 1
    # The server the run started is gone: its port accepts no connections.
    served = urlsplit(second["settings"]["model_settings"]["base_url"])
    with pytest.raises(OSError), socket.create_connection((served.hostname, served.port), 1):
        pass
