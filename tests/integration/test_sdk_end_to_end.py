"""The SDK against a real sidecar: an instrumented program's run is stored, failed, attributed
and queried back with `Client`, with API keys switched on.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from faultfinder.sdk import Attribution, AuthError, Client, NotFoundError
from tests.integration.sidecar import Sidecar, quick_sidecar, running_sidecar

ROOT = Path(__file__).resolve().parents[2]
API_KEY = "sdk-test-key"
DONE = {"failed", "attributed"}


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sidecar]:
    """One sidecar (SQLite) for the module; each test works in a project of its own."""
    folder = tmp_path_factory.mktemp("sdk-sidecar")
    with quick_sidecar(folder, FAULTFINDER_API_KEYS=API_KEY) as running:  # default attributors
        yield running


def run_python(sidecar: Sidecar, *args: str, **env: str) -> str:
    """Run a program the way a user would, pointed at the sidecar by the environment."""
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("OTEL_", "FAULTFINDER_"))
    }
    environment.update(FAULTFINDER_ENDPOINT=sidecar.url, FAULTFINDER_API_KEY=API_KEY)
    environment.update(env)
    result = subprocess.run(
        [sys.executable, *args],
        env=environment,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"{result.stderr}\n--- sidecar log ---\n{sidecar.log()}"
    return result.stdout


def test_the_example_program_is_stored_failed_and_attributed(sidecar: Sidecar) -> None:
    output = run_python(sidecar, str(ROOT / "examples" / "multi_agent_sdk.py"))
    match = re.search(r"run ([0-9a-f]{32}) finished: failure", output)
    assert match, output
    run_id = match.group(1)

    with Client(sidecar.url, API_KEY) as client:
        got = client.wait_for_run(run_id, DONE, timeout=60, poll_interval=0.1)
        assert got.project == "examples"
        assert got.outcome == "failure"
        trajectory = got.trajectory
        assert trajectory.agents == ("Orchestrator", "PriceLookup", "Calculator")
        assert trajectory.ground_truth == "19.08 EUR" and trajectory.final_answer == "18.60 EUR"
        assert trajectory.metadata["service"] == "shopping-team"
        assert [step.index for step in trajectory.steps] == list(range(len(trajectory.steps)))
        (failed_tool,) = [step for step in trajectory.steps if step.status == "error"]
        assert (failed_tool.agent, failed_tool.kind) == ("PriceLookup", "tool")
        assert failed_tool.tool_name == "catalog.lookup"
        assert "CatalogError" in (failed_tool.error or "")
        guess = trajectory.steps[failed_tool.index + 1]
        assert guess.agent == "PriceLookup" and "1.00 EUR" in guess.content
        # Both default attributors answered. The failed lookup is PriceLookup's own tool
        # call (its span sits under PriceLookup's), so first_error blames PriceLookup there,
        # not the Orchestrator whose handoff came before it.
        attributed = client.wait_for_run(run_id, "attributed", timeout=60, poll_interval=0.1)
        deadline = time.monotonic() + 60
        while len(attributed.attributions) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)  # "attributed" comes with the first answer; the second follows
            attributed = client.run(run_id)
        answers = {a.method: a for a in attributed.attributions if a.ok}
        assert set(answers) == {"learned", "first_error"}
        first_error = answers["first_error"]
        assert (first_error.agent, first_error.step) == ("PriceLookup", failed_tool.index)
        assert answers["learned"].prediction_set is not None

        listed = list(client.runs(status=attributed.status, project="examples"))
        assert [run.id for run in listed] == [run_id]
        assert listed[0].agents == trajectory.agents

        # A human marks the decisive step; the sidecar attributes again on request.
        label = client.label(run_id, guess.agent, guess.index, "guessed a price")
        assert client.labels(run_id) == (label,)
        job = client.reattribute(run_id, "first_error")
        finished = client.wait_for_job(job.id, timeout=60, poll_interval=0.1)
        assert finished.status == "done", finished.last_error
        attributions = client.wait_for_run(run_id, "attributed", timeout=60).attributions
        assert attributions and all(a.agent in trajectory.agents for a in attributions if a.ok)
        stats = client.stats()
        assert stats.runs_by_status.get("attributed", 0) >= 1
        assert sum(stats.blame_by_agent.values()) >= 1

        with pytest.raises(NotFoundError, match="no-such-run"):
            client.run("no-such-run")

    with Client(sidecar.url, "wrong-key") as stranger, pytest.raises(AuthError):
        list(stranger.runs())


def test_the_documented_snippets_work_as_written(sidecar: Sidecar) -> None:
    markdown = (ROOT / "README.md").read_text()
    instrument, query = re.findall(r"```python\n(.*?)```", markdown, flags=re.DOTALL)[:2]
    output = run_python(sidecar, "-c", instrument + "\n" + query)

    lines = output.strip().splitlines()
    assert lines, "the query snippet printed no attribution"
    answers = {line.split(" ", 1)[0]: line.split(" ", 3)[1:3] for line in lines}
    # The run is "attributed" with the first default attributor's answer; the other may
    # or may not have followed by the time the snippet prints.
    assert lines[0].startswith("learned ") and set(answers) <= {"learned", "first_error"}
    for agent, step in answers.values():
        assert agent in {"Planner", "Searcher"} and 0 <= int(step) <= 3
    with Client(sidecar.url, API_KEY) as client:
        (summary,) = client.runs(project="demo")
        assert summary.status == "attributed" and summary.outcome == "failure"
        assert summary.agents == ("Planner", "Searcher")


def test_the_readme_example_is_attributed_within_3_s_of_r_fail_at_the_default_quiet_period(
    tmp_path: Path,
) -> None:
    """`r.fail()` says the run is over: its attribution does not wait the 30 s quiet period."""
    markdown = (ROOT / "README.md").read_text()
    instrument = re.findall(r"```python\n(.*?)```", markdown, flags=re.DOTALL)[0]
    # When the program handed its spans over (shutdown() returned), and which run it was.
    program = instrument + "\nimport time\nprint(r.run_id, time.time())\n"
    database = f"sqlite+aiosqlite:///{tmp_path / 'faultfinder.db'}"
    with running_sidecar(database, tmp_path, FAULTFINDER_API_KEYS=API_KEY) as sidecar:
        run_id, sent_at = run_python(sidecar, "-c", program).split()
        with Client(sidecar.url, API_KEY) as client:
            got = client.wait_for_run(run_id, "attributed", timeout=60, poll_interval=0.05)
            waited = time.time() - float(sent_at)
    assert got.outcome == "failure" and got.attributions
    assert waited <= 3.0, f"attributed {waited:.1f} s after r.fail()"


def test_spans_can_travel_over_grpc_configured_by_the_standard_variables(
    sidecar: Sidecar,
) -> None:
    program = (
        "from faultfinder.sdk import configure, run, agent_step, shutdown\n"
        "configure(project='grpc')\n"
        "with run(task='ping') as r, agent_step('Echo') as step:\n"
        "    step.say('pong')\n"
        "    r.fail('no reason')\n"
        "shutdown()\n"
        "print(r.run_id)\n"
    )
    output = run_python(
        sidecar,
        "-c",
        program,
        FAULTFINDER_ENDPOINT="",
        OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
        OTEL_EXPORTER_OTLP_ENDPOINT=sidecar.grpc_endpoint,
        OTEL_EXPORTER_OTLP_HEADERS=f"authorization=Bearer%20{API_KEY}",
    )
    run_id = output.strip().splitlines()[-1]
    with Client(sidecar.url, API_KEY) as client:
        got = client.wait_for_run(run_id, DONE, timeout=60, poll_interval=0.1)
    assert got.project == "grpc"
    assert [(step.agent, step.content) for step in got.trajectory.steps] == [("Echo", "pong")]


CONVERSATION = """
from faultfinder.sdk import agent_step, configure, message, run, shutdown, tool_call

configure(service_name="help-desk", project="talks")
with run(task="Cancel my trip to Lisbon.") as r:
    message("customer", "Hi, please cancel my trip to Lisbon.", role="user")
    with agent_step("Agent") as agent:
        agent.say("Sure. What is your reservation id?")
    message("customer", "It is AB12.", role="user")
    with agent_step("Agent"), tool_call("cancel_reservation", {"reservation_id": "CD34"}) as call:
        call.result({"reservation_id": "CD34", "status": "cancelled"})
    message("Agent", "Your trip CD34 is cancelled.")
    message("customer", "Thanks, bye.", role="user")
    r.fail("cancelled CD34; the customer had asked for AB12")
shutdown()
print(r.run_id)
"""


def test_a_customer_conversation_is_scored_by_the_conversation_model(sidecar: Sidecar) -> None:
    run_id = run_python(sidecar, "-c", CONVERSATION).strip().splitlines()[-1]
    with Client(sidecar.url, API_KEY) as client:
        got = client.wait_for_run(run_id, "attributed", timeout=60, poll_interval=0.1)
        kinds = [step.kind for step in got.trajectory.steps]
        assert kinds.count("human") == 3, kinds
        (learned,) = [a for a in got.attributions if a.method == "learned" and a.ok]
        # The customer speaks again after the agent acted: a conversation, scored by the
        # model trained on conversations.
        assert learned.details["model_group"] == "conversation"
        # The customer is not part of the system: none of its turns can be blamed.
        probabilities = learned.details["step_probabilities"]
        assert [p for p, kind in zip(probabilities, kinds, strict=True) if kind == "human"] == [
            0.0
        ] * 3


def test_a_simulated_customer_is_one_of_the_team_and_its_turns_may_be_blamed(
    sidecar: Sidecar,
) -> None:
    """The same conversation with `run(..., simulated_user=True)`, as an evaluation
    harness's user simulator says it: the customer is in the run's team, and its turns
    get a share of the blame."""
    program = CONVERSATION.replace(
        'run(task="Cancel my trip to Lisbon.")',
        'run(task="Cancel my trip to Lisbon.", simulated_user=True)',
    )
    run_id = run_python(sidecar, "-c", program).strip().splitlines()[-1]
    with Client(sidecar.url, API_KEY) as client:
        got = client.wait_for_run(run_id, "attributed", timeout=60, poll_interval=0.1)
    kinds = [step.kind for step in got.trajectory.steps]
    assert set(got.trajectory.metadata["roster"]) == {"customer", "Agent"}
    (learned,) = [a for a in got.attributions if a.method == "learned" and a.ok]
    probabilities = learned.details["step_probabilities"]
    human = [p for p, kind in zip(probabilities, kinds, strict=True) if kind == "human"]
    assert len(human) == 3 and all(p > 0 for p in human), human


WITHHELD = """
from faultfinder.sdk import agent_step, configure, message, run, shutdown

configure(service_name="help-desk", project="talks")
instruction = {instruction!r}
with run(task="Hi, my flight was delayed.", simulated_user=True,
         user_instruction=instruction) as r:
    message("customer", "Hi, my flight was delayed and I want compensation.", role="user")
    with agent_step("Agent") as agent:
        agent.say("Sorry to hear that. What is your user id?")
    message("customer", "I don't have my user ID with me right now.", role="user")
    with agent_step("Agent") as agent:
        agent.say("I need your user id to look up your booking; please come back with it.")
    message("customer", "Okay, bye.", role="user")
    r.fail("no certificate was sent")
shutdown()
print(r.run_id)
"""


def both_defaults(client: Client, run_id: str) -> dict[str, Attribution]:
    """The run's answers of the two default attributors, once both have answered (the run
    is `attributed` as soon as the first does)."""
    deadline = time.monotonic() + 60
    while True:
        answers = {a.method: a for a in client.attributions(run_id) if a.ok}
        if {"learned", "first_error"} <= set(answers):
            return answers
        assert time.monotonic() < deadline, f"only {sorted(answers)} answered"
        time.sleep(0.1)


def test_a_simulated_customer_withholding_what_its_instructions_give_it_is_blamed(
    sidecar: Sidecar,
) -> None:
    """With the simulator's own instructions on the run (`user_instruction`), the
    customer's turn that says it has no user id, which its instructions give it, is the
    decisive step for both zero-LLM attributors, and the reason names the id; without
    them, nothing tells that turn apart and neither blames it."""
    told = "You are ana_lima_4412 and your flight was delayed. Ask for compensation."
    with Client(sidecar.url, API_KEY) as client:
        run_id = run_python(sidecar, "-c", WITHHELD.format(instruction=told)).split()[-1]
        got = client.wait_for_run(run_id, "attributed", timeout=60, poll_interval=0.1)
        assert got.trajectory.metadata["user_instruction"] == told
        withheld = [step.index for step in got.trajectory.steps if "don't have" in step.content]
        for method, attribution in both_defaults(client, run_id).items():
            assert (attribution.agent, attribution.step) == ("customer", withheld[0]), method
            assert "ana_lima_4412" in attribution.reason, attribution.reason

        plain = WITHHELD.replace("user_instruction=instruction", "user_instruction=None")
        run_id = run_python(sidecar, "-c", plain.format(instruction=told)).split()[-1]
        got = client.wait_for_run(run_id, "attributed", timeout=60, poll_interval=0.1)
        assert "user_instruction" not in got.trajectory.metadata
        for method, attribution in both_defaults(client, run_id).items():
            assert attribution.agent == "Agent", (method, attribution.reason)
