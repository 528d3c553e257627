"""Controlled failure injection end to end: a real pydantic-ai team (its own OpenTelemetry
instrumentation, the standard OTLP exporter, no faultfinder code in it) behind the replay
proxy, a real sidecar, and `faultfinder inject run`.

The agents' model is a scripted OpenAI-compatible server that reads the conversation (it
is not a model): the Coordinator delegates to the Researcher, the Researcher looks the
city up and reports the figure the tool returned, the Coordinator repeats the figure it
was told. So a figure the Researcher misreports reaches the final answer (the injected
failure is kept), while a lookup asked with a wrong city is answered "unknown" and the
Researcher asks again (the failure is recovered and discarded).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from faultfinder.datasets import load_dataset
from faultfinder.injection.exchanges import Exchange, Recording
from faultfinder.injection.proxy import DIVERGED_STATUS, ReplayProxy
from tests.integration.sidecar import FAULTFINDER
from tests.loopback import serving

PROGRAM = textwrap.dedent(
    '''
    """A two-agent pydantic-ai team: the Coordinator delegates to the Researcher."""
    import os, sys
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from pydantic_ai import Agent, InstrumentationSettings, RunContext
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = TracerProvider(resource=Resource.create({"service.name": "census-team"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
    Agent.instrument_all(InstrumentationSettings(tracer_provider=provider))
    model = OpenAIChatModel(
        os.environ.get("FAULTFINDER_AGENT_MODEL", "local"),
        provider=OpenAIProvider(base_url=os.environ["OPENAI_BASE_URL"], api_key="none"),
    )
    POPULATION = {"oslo": "709,037", "bergen": "291,940"}
    researcher = Agent(model, name="Researcher", instructions="You are the Researcher.")

    @researcher.tool_plain
    def population_lookup(city: str) -> str:
        """The city's population."""
        return POPULATION.get(city.strip().lower(), "unknown city")

    coordinator = Agent(model, name="Coordinator", instructions="You are the Coordinator.")

    @coordinator.tool
    async def ask_researcher(ctx: RunContext[None], question: str) -> str:
        """Ask the Researcher."""
        return (await researcher.run(question, usage=ctx.usage)).output

    result = coordinator.run_sync(sys.stdin.read())
    provider.shutdown()
    print(result.output)
    '''
)


def _system(body: dict[str, Any]) -> str:
    return " ".join(
        str(m.get("content")) for m in body["messages"] if m.get("role") in ("system", "developer")
    )


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {
        "content": None,
        "tool_calls": [
            {
                "id": f"call_{name}_{len(json.dumps(arguments))}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }


def scripted_reply(body: dict[str, Any]) -> dict[str, Any]:
    """What the scripted team model answers (see the module docstring)."""
    last = body["messages"][-1]
    figure = re.findall(r"\d[\d,]*", str(last.get("content"))) if last["role"] == "tool" else []
    if "Researcher" in _system(body):
        if figure:
            return {"content": f"Oslo has {figure[-1]} inhabitants."}
        return _call("population_lookup", city="Oslo")
    if last["role"] == "tool":
        return {"content": f"The population of Oslo is {figure[-1] if figure else 'unknown'}."}
    return _call("ask_researcher", question="What is the population of Oslo?")


@contextmanager
def scripted_model(
    reply: Callable[[dict[str, Any]], dict[str, Any]] = scripted_reply,
) -> Iterator[str]:
    """The scripted OpenAI-compatible server answering with `reply(request)`; yields its
    base URL."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            message = {"role": "assistant", **reply(body)}
            payload = json.dumps(
                {
                    "id": "chatcmpl-scripted",
                    "object": "chat.completion",
                    "created": 1,
                    "model": body.get("model", "local"),
                    "choices": [
                        {
                            "index": 0,
                            "message": message,
                            "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    with serving(Handler) as url:
        yield url + "/v1"


def test_inject_run_keeps_a_failure_discards_a_recovery_and_exports_the_label(
    tmp_path: Path,
) -> None:
    program = tmp_path / "team.py"
    program.write_text(PROGRAM)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        json.dumps({"id": "oslo", "task": "What is the population of Oslo?", "answer": "709037"})
        + "\n"
    )
    out = tmp_path / "out"
    with scripted_model() as upstream:
        command = [
            str(FAULTFINDER), "inject", "run", "--program", f"{sys.executable} {program}",
            "--tasks", str(tasks), "--framework", "pydantic-ai", "--out", str(out),
            "--upstream", upstream, "--modes", "R.1,A.1", "--attempts-per-run", "2",
            "--no-llm-injector", "--timeout", "120",
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
        assert done.returncode == 0, done.stderr[-5000:]
        summary = json.loads(done.stdout)
        # Run again: everything is done already, nothing is repeated.
        again = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
        assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout) == summary

    assert summary["originals"] == {"success": 1}
    assert summary["per_mode"]["R.1"]["kept"] == 1
    assert summary["per_mode"]["A.1"]["recovered"] == 1
    assert summary["outcomes"] == {"kept": 1, "recovered": 1}
    assert summary["prefix_replay"] == {"replayed": 2, "matched": 2}

    # The kept failure, as written in the generic format: labelled at the Researcher's
    # report of the figure it never saw, with the mode and the injected text.
    (record,) = load_dataset(str(out / "injected.jsonl"))
    attempt = next(
        json.loads(line)
        for line in (out / "attempts.jsonl").read_text().splitlines()
        if json.loads(line)["outcome"] == "kept"
    )
    step = record.trajectory.steps[record.gold.step]
    assert record.gold.agent == "Researcher" == step.agent
    assert record.gold.mode == "R.1" and record.gold.source == "injected"
    assert attempt["injected"] in step.content
    assert "709,037" not in step.content
    assert record.trajectory.ground_truth == "709037"
    assert record.subset == "pydantic-ai"
    # Every step before it is the recorded successful run's.
    recording = Recording.load(out / "recordings" / "oslo.json")
    recorded_steps = recording.info["trajectory"]["steps"]
    for index in range(record.gold.step):
        assert record.trajectory.steps[index].content == recorded_steps[index]["content"]
    # The failure's own model calls are kept for `faultfinder verify`: the injected reply
    # at its call, what the model said live after it.
    (kept_recording,) = [Recording.load(p) for p in (out / "injected-recordings").iterdir()]
    assert kept_recording.info["label_step"] == record.gold.step
    injected_call = kept_recording.exchanges[kept_recording.info["injected_call"]]
    assert injected_call.source == "injected" and attempt["injected"] in json.dumps(
        injected_call.reply
    )

    # The sidecar holds the same label, and exports it.
    exported = tmp_path / "exported.jsonl"
    database = f"sqlite+aiosqlite:///{out / 'sidecar.db'}"
    export = subprocess.run(
        [str(FAULTFINDER), "dataset", "export", "--database", database, "--out", str(exported)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert export.returncode == 0, export.stderr
    (from_sidecar,) = load_dataset(str(exported))
    assert from_sidecar.gold.step == record.gold.step
    assert from_sidecar.gold.mode == "R.1" and from_sidecar.gold.source == "injected"
    assert from_sidecar.details["injected"] == attempt["injected"]
    assert from_sidecar.trajectory.steps == record.trajectory.steps


def _tool_reply() -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "local",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", **_call("population_lookup", city="Oslo")},
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }


def test_streamed_replies_replay_as_recorded_and_a_differing_request_diverges() -> None:
    question = [{"role": "user", "content": "Population of Oslo?"}]
    with scripted_model() as upstream:
        proxy = ReplayProxy(upstream)
        with proxy.serve():
            recording_session = proxy.record()
            client = openai.OpenAI(base_url=proxy.base_url(recording_session), api_key="x")
            recorded = client.chat.completions.create(
                model="local",
                messages=[{"role": "system", "content": "You are the Researcher."}, *question],  # type: ignore[list-item]
            )
            assert recorded.choices[0].message.tool_calls
            recording = recording_session.as_recording()

            # A stream of the replayed reply carries the same tool call.
            replay = proxy.inject(
                Recording([*recording.exchanges, Exchange({}, {})]), 1, _tool_reply()
            )
            client = openai.OpenAI(base_url=proxy.base_url(replay), api_key="x")
            stream = client.chat.completions.create(
                model="local",
                messages=[{"role": "system", "content": "You are the Researcher."}, *question],  # type: ignore[list-item]
                stream=True,
                stream_options={"include_usage": True},
            )
            chunks = list(stream)
            calls = [
                c
                for chunk in chunks
                if chunk.choices
                for c in chunk.choices[0].delta.tool_calls or []
            ]
            (streamed,) = calls
            original = recorded.choices[0].message.tool_calls[0]
            assert streamed.id == original.id
            assert streamed.function is not None and original.type == "function"
            assert streamed.function.name == original.function.name  # type: ignore[union-attr]
            assert streamed.function.arguments == original.function.arguments  # type: ignore[union-attr]
            assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 15
            assert replay.calls[0].source == "recording"

            # A request that differs from the recorded one: refused, and the session says so.
            diverging = proxy.inject(Recording([*recording.exchanges, Exchange({}, {})]), 1, {})
            answer = httpx.post(
                proxy.base_url(diverging) + "/chat/completions",
                json={"model": "local", "messages": [{"role": "user", "content": "Bergen?"}]},
            )
            assert answer.status_code == DIVERGED_STATUS
            assert "left the recorded prefix" in answer.json()["error"]["message"]
            assert diverging.diverged_at == 0 and not diverging.injected


@pytest.mark.parametrize("streamed", [False, True])
def test_the_injected_reply_is_what_the_program_receives(streamed: bool) -> None:
    with scripted_model() as upstream:
        proxy = ReplayProxy(upstream)
        with proxy.serve():
            first = proxy.record()
            client = openai.OpenAI(base_url=proxy.base_url(first), api_key="x")
            messages: list[Any] = [{"role": "system", "content": "You are the Coordinator."}]
            client.chat.completions.create(model="local", messages=messages)
            flawed = {
                **_tool_reply(),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "Oslo has 2,100,000 people."},
                        "finish_reason": "stop",
                    }
                ],
            }
            session = proxy.inject(first.as_recording(), 0, flawed)
            client = openai.OpenAI(base_url=proxy.base_url(session), api_key="x")
            if streamed:
                text = "".join(
                    chunk.choices[0].delta.content or ""
                    for chunk in client.chat.completions.create(
                        model="local", messages=messages, stream=True
                    )
                    if chunk.choices
                )
            else:
                reply = client.chat.completions.create(model="local", messages=messages)
                text = reply.choices[0].message.content or ""
            assert text == "Oslo has 2,100,000 people."
            assert session.injected and session.calls[0].source == "injected"
