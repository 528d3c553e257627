"""The checks of what the sidecar understood of an invocation, read over its HTTP API the
way a user does: the trajectory, the attributions, failed tool steps, replayed
conversations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tests.frameworks.scenarios import Expected

__all__ = [
    "ATTRIBUTORS",
    "check_attributions",
    "check_planted_claim_blamed",
    "check_replayed_conversation",
    "check_understood",
    "error_steps",
    "failed_tool_step",
    "show_trajectory",
]

ATTRIBUTORS = ("learned", "first_error", "echo")
"""The default attributors, and the test plugin that answers with the trajectory it got."""


def check_planted_claim_blamed(detail: Mapping[str, Any]) -> None:
    """Assert the zero-LLM attributors blame the planted claim: the first step stating the
    transposed figure, right after the census tool reported the true one, by the agent
    that made it, and say so in words."""
    steps = detail["trajectory"]["steps"]
    shown = show_trajectory(detail["trajectory"])
    claim = next(s for s in steps if "225,520" in s["content"] and s["kind"] != "tool")
    by_method = {a["method"]: a for a in detail["attributions"]}
    for method in ("learned", "first_error"):
        blamed = by_method[method]
        assert (blamed["step"], blamed["agent"]) == (claim["index"], claim["agent"]), (
            f"{method} blamed step {blamed['step']} ({blamed['agent']}): {blamed['reason']}\n"
            f"{shown}"
        )
        assert "225,520" in blamed["reason"] and "522,250" in blamed["reason"], (
            f"{method}: {blamed['reason']}\n{shown}"
        )


def error_steps(run: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The run's steps that ended in error."""
    return [step for step in run["trajectory"]["steps"] if step["status"] == "error"]


def failed_tool_step(
    run: Mapping[str, Any], agent: str, tool: str = "census_lookup"
) -> dict[str, Any]:
    """Assert the run's one failed step is `agent`'s call of `tool`; that step."""
    failed = error_steps(run)
    assert [(s["agent"], s["tool_name"]) for s in failed] == [(agent, tool)], failed
    return failed[0]


def show_trajectory(trajectory: Mapping[str, Any]) -> str:
    lines = [f"task={trajectory.get('task')!r} final={trajectory.get('final_answer')!r}"]
    for step in trajectory["steps"]:
        content = (step.get("content") or "").replace("\n", " ")[:110]
        lines.append(
            f"  {step['index']:>2} {step['agent']!r:<24} {step['kind']:<8} "
            f"{step.get('status', '')!s:<6} {step.get('tool_name') or '':<14} {content}"
        )
    return "\n".join(lines)


def check_understood(detail: Mapping[str, Any], expected: Expected, *, project: str) -> None:
    """Assert that the sidecar saw the invocation as its user knows it."""
    trajectory = detail["trajectory"]
    shown = show_trajectory(trajectory)
    steps = trajectory["steps"]
    assert detail["project"] == project, shown
    assert sorted(detail["agents"]) == sorted(expected.agents), (
        f"agents {detail['agents']} (expected {sorted(expected.agents)})\n{shown}"
    )
    assert trajectory["task"] == expected.task, shown
    assert all(step["content"].strip() for step in steps), f"a blank step\n{shown}"
    for tool, caller in expected.tools.items():
        assert tool not in detail["agents"], f"tool {tool!r} is listed as an agent\n{shown}"
        calls = [s for s in steps if s["kind"] == "tool" and s.get("tool_name") == tool]
        assert calls, f"no step of tool {tool!r}\n{shown}"
        assert {s["agent"] for s in calls} == {caller}, f"{tool!r} is not {caller!r}'s\n{shown}"
        # The request that called it reads `tool(args)`, before the tool's own step.
        first = calls[0]["index"]
        asked = [s for s in steps[:first] if f"{tool}(" in s["content"]]
        assert asked, f"no step before {tool!r}'s reads {tool}(…)\n{shown}"
    for tool, result in expected.tool_results.items():
        calls = [s for s in steps if s["kind"] == "tool" and s.get("tool_name") == tool]
        assert calls, f"no step of tool {tool!r}\n{shown}"
        for text in (calls[0]["content"], calls[0].get("tool_result") or ""):
            assert text.strip() == result, (
                f"{tool!r}'s result reads {text!r}, not the tool's own {result!r}\n{shown}"
            )
    if expected.final_answer is not None:
        final = trajectory.get("final_answer") or ""
        assert expected.final_answer in final, f"final answer {final!r}\n{shown}"


def check_attributions(detail: Mapping[str, Any], *, ground_truth: str | None) -> dict[str, Any]:
    """Assert every configured attributor answered, and that the one echoing its input saw
    `ground_truth`; the attributions by method."""
    by_method = {a["method"]: a for a in detail["attributions"]}
    assert set(by_method) == set(ATTRIBUTORS), sorted(by_method)
    for method, attribution in by_method.items():
        assert attribution["status"] == "ok", (method, attribution.get("failure_reason"))
        assert attribution["agent"] in detail["agents"], (method, attribution["agent"])
    echoed = by_method["echo"]["details"]
    assert echoed["ground_truth"] == ground_truth, echoed
    assert echoed["task"] == detail["trajectory"]["task"], echoed
    return by_method


def check_replayed_conversation(
    trajectory: Mapping[str, Any],
    recorded: Sequence[Mapping[str, Any]],
    replayed: Mapping[str, Any],
) -> None:
    """Assert a τ-bench conversation replayed by data/corpus/programs/chat_replay.py
    came out as the replay says it did: every model call an `llm` step saying the recorded
    message or call, in order; every later customer turn that reached a model call a user
    step, in order; every recorded tool report a tool step; no recorded report left over."""
    steps = trajectory["steps"]
    shown = show_trajectory(trajectory)
    calls = [step for step in steps if step["kind"] == "llm"]
    assert len(calls) == len(replayed["calls"]), shown
    for step, stood_for in zip(calls, replayed["calls"], strict=True):
        for index in stood_for:
            said = recorded[index]
            expected = said.get("tool_name") or " ".join(said["content"].split())[:80]
            assert expected in " ".join(step["content"].split()), (index, step, shown)
    humans = [step["content"] for step in steps if step["kind"] == "human"]
    assert humans == [recorded[index]["content"] for index in replayed["users"]], shown
    reports = [step["tool_name"] for step in recorded if step["role"] == "tool"]
    assert [step["tool_name"] for step in steps if step["kind"] == "tool"] == reports, shown
    assert replayed["left"] == 0
