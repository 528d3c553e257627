"""The answers the LLM methods ask for and their reply formats: the JSON schema each
structured rung sends, the free-text fallback, and the validation of every named agent and
step against the trajectory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from faultfinder.attributors.learned import answerable_agents, blameable_agents
from faultfinder.attributors.llm import prompts
from faultfinder.attributors.llm.replies import (
    ReplyFormat,
    ReplyInvalid,
    parse_who_and_when_text,
    resolve_agent,
    resolve_step,
)
from faultfinder.attributors.model import Trajectory

__all__ = [
    "A2PAnalysis",
    "A2PAnswer",
    "AnalystVote",
    "Verdict",
    "a2p_format",
    "analyst_format",
    "decision_format",
    "half_format",
    "verdict_format",
]

T = TypeVar("T")


@dataclass(frozen=True)
class Verdict:
    """A named agent and step with the model's reason."""

    agent: str
    step: int
    reason: str


@dataclass(frozen=True)
class AnalystVote:
    """One consensus analyst's answer."""

    agent: str
    step: int
    confidence: float
    evidence: str


@dataclass(frozen=True)
class A2PAnalysis:
    """One suspicious step as A2P reasons about it."""

    step: int
    agent: str
    abduction: str
    action: str
    prediction: str
    saves_run: bool


@dataclass(frozen=True)
class A2PAnswer:
    """A2P's pick, its analyses, and how many analyses could not be used."""

    verdict: Verdict
    analyses: tuple[A2PAnalysis, ...]
    unusable_analyses: int


def _text(value: Any, limit: int = 2000) -> str:
    return str(value).strip()[:limit] if value is not None else ""


def _field(data: Mapping[str, Any], *names: str) -> Any:
    for name in names:
        if name in data:
            return data[name]
    return None


def _object_schema(properties: dict[str, Any]) -> dict[str, Any]:
    # Strict structured output wants every property required and nothing else allowed.
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def _object_format(
    name: str,
    properties: dict[str, Any],
    instructions: tuple[str, str],
    parse_text: Callable[[str], dict[str, Any]],
    validate: Callable[[Mapping[str, Any]], T],
) -> ReplyFormat[T]:
    """A reply that is one JSON object with exactly `properties`; `instructions` are the
    answer format on structured rungs and in free text."""
    json_instructions, text_instructions = instructions
    return ReplyFormat(
        name=name,
        schema=_object_schema(properties),
        json_instructions=json_instructions,
        text_instructions=text_instructions,
        parse_text=parse_text,
        validate=validate,
    )


def _agent_schema(trajectory: Trajectory) -> dict[str, Any]:
    # An enum lets grammar-constrained servers produce only names that can be blamed.
    return {"type": "string", "enum": list(blameable_agents(trajectory))}


def _answering(trajectory: Trajectory, agent: str, step: int) -> str:
    """The agent a reply names, or, when it names someone who cannot be blamed (the task
    giver, a tool whose reports answer to its caller), the agent answering for its step,
    as the learned attributor and first_error name them."""
    if agent in blameable_agents(trajectory):
        return agent
    answering: list[str] = answerable_agents(trajectory.steps, trajectory.declared_roster)
    return answering[step]


def _step_schema(allowed: Sequence[int]) -> dict[str, Any]:
    return {"type": "integer", "enum": list(allowed)}


def verdict_format(trajectory: Trajectory, allowed: Sequence[int]) -> ReplyFormat[Verdict]:
    def validate(data: Mapping[str, Any]) -> Verdict:
        agent = resolve_agent(_field(data, "agent", "agent_name", "mistake_agent"), trajectory)
        step = resolve_step(_field(data, "step", "step_number", "mistake_step"), allowed)
        return Verdict(
            _answering(trajectory, agent, step),
            step,
            _text(_field(data, "reason", "reason_for_mistake")),
        )

    return _object_format(
        "verdict",
        {
            "agent": _agent_schema(trajectory),
            "step": _step_schema(allowed),
            "reason": {"type": "string"},
        },
        (prompts.VERDICT_JSON, prompts.VERDICT_TEXT),
        parse_who_and_when_text,
        validate,
    )


def _parse_yes_no(text: str) -> dict[str, Any]:
    lowered = text.lower()
    marker = lowered.find("decisive error")
    scope = lowered[marker + len("decisive error") :] if marker >= 0 else lowered
    for word in scope.replace(":", " ").replace("*", " ").split():
        cleaned = word.strip(".,;!\"'")
        if cleaned in {"yes", "true"}:
            return {"decisive_error": True, "reason": text.strip()}
        if cleaned in {"no", "false"}:
            return {"decisive_error": False, "reason": text.strip()}
    raise ReplyInvalid("the reply says neither yes nor no")


def _decision_value(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in {"yes", "true", "no", "false"}:
        return value.strip().lower() in {"yes", "true"}
    raise ReplyInvalid(f"'decisive_error' must be true or false, got {value!r}")


def decision_format() -> ReplyFormat[tuple[bool, str]]:
    def validate(data: Mapping[str, Any]) -> tuple[bool, str]:
        value = _field(data, "decisive_error", "decisive", "answer", "error")
        return _decision_value(value), _text(data.get("reason"))

    return _object_format(
        "decision",
        {"decisive_error": {"type": "boolean"}, "reason": {"type": "string"}},
        (prompts.DECISION_JSON, prompts.DECISION_TEXT),
        _parse_yes_no,
        validate,
    )


def _parse_half(text: str) -> dict[str, Any]:
    lowered = text.lower()
    marker = lowered.find("half:")
    scope = lowered[marker:] if marker >= 0 else lowered
    positions = {half: scope.find(half) for half in ("upper", "lower", "first", "second")}
    found = {half: at for half, at in positions.items() if at >= 0}
    if not found:
        raise ReplyInvalid("the reply names neither the upper nor the lower half")
    earliest = min(found, key=lambda half: found[half])
    return {"half": earliest, "reason": text.strip()}


def half_format() -> ReplyFormat[tuple[bool, str]]:
    """Answers (upper?, reason): upper is the earlier half of the segment."""

    def validate(data: Mapping[str, Any]) -> tuple[bool, str]:
        value = _text(data.get("half")).lower()
        if value.startswith(("upper", "first", "earlier")):
            return True, _text(data.get("reason"))
        if value.startswith(("lower", "second", "later")):
            return False, _text(data.get("reason"))
        raise ReplyInvalid(f"'half' must be 'upper' or 'lower', got {data.get('half')!r}")

    return _object_format(
        "half",
        {"half": {"type": "string", "enum": ["upper", "lower"]}, "reason": {"type": "string"}},
        (prompts.HALF_JSON, prompts.HALF_TEXT),
        _parse_half,
        validate,
    )


def a2p_format(trajectory: Trajectory, allowed: Sequence[int]) -> ReplyFormat[A2PAnswer]:
    verdict = verdict_format(trajectory, allowed)

    def validate(data: Mapping[str, Any]) -> A2PAnswer:
        analyses: list[A2PAnalysis] = []
        unusable = 0
        raw = data.get("analyses")
        for item in raw if isinstance(raw, list) else []:
            try:
                if not isinstance(item, dict):
                    raise ReplyInvalid("not an object")
                step = resolve_step(item.get("step"), allowed)
                agent = _answering(
                    trajectory,
                    resolve_agent(item["agent"], trajectory) if item.get("agent") else "",
                    step,
                )
                saves = item.get("saves_run")
                analyses.append(
                    A2PAnalysis(
                        step=step,
                        agent=agent,
                        abduction=_text(item.get("abduction"), 600),
                        action=_text(item.get("action"), 600),
                        prediction=_text(item.get("prediction"), 600),
                        saves_run=_decision_value(saves) if saves is not None else False,
                    )
                )
            except ReplyInvalid:
                unusable += 1
        saving = [a for a in analyses if a.saves_run]
        if saving or ("agent" not in data and "step" not in data and analyses):
            # The method's own rule: the earliest step whose correction saves the run.
            chosen = min(saving or analyses, key=lambda a: a.step)
            pick = Verdict(chosen.agent, chosen.step, _text(data.get("reason")) or chosen.abduction)
        else:
            pick = verdict.validate(data)
        return A2PAnswer(pick, tuple(analyses), unusable)

    analysis_schema = _object_schema(
        {
            "step": _step_schema(allowed),
            "agent": _agent_schema(trajectory),
            "abduction": {"type": "string"},
            "action": {"type": "string"},
            "prediction": {"type": "string"},
            "saves_run": {"type": "boolean"},
        }
    )
    return _object_format(
        "a2p",
        {
            "analyses": {"type": "array", "items": analysis_schema},
            "agent": _agent_schema(trajectory),
            "step": _step_schema(allowed),
            "reason": {"type": "string"},
        },
        (prompts.A2P_JSON, prompts.A2P_TEXT),
        parse_who_and_when_text,
        validate,
    )


def analyst_format(trajectory: Trajectory, allowed: Sequence[int]) -> ReplyFormat[AnalystVote]:
    def validate(data: Mapping[str, Any]) -> AnalystVote:
        step = resolve_step(_field(data, "step", "step_number"), allowed)
        agent = _answering(
            trajectory, resolve_agent(_field(data, "agent", "agent_name"), trajectory), step
        )
        raw = data.get("confidence", 0.5)
        try:
            confidence = float(raw)
        except (TypeError, ValueError):
            raise ReplyInvalid(f"'confidence' must be a number from 0 to 1, got {raw!r}") from None
        if confidence > 1 and confidence <= 100:
            confidence /= 100
        return AnalystVote(
            agent, step, min(max(confidence, 0.0), 1.0), _text(_field(data, "evidence", "reason"))
        )

    return _object_format(
        "analyst_vote",
        {
            "agent": _agent_schema(trajectory),
            "step": _step_schema(allowed),
            "confidence": {"type": "number", "minimum": 0, "maximum": 1},
            "evidence": {"type": "string"},
        },
        (prompts.ANALYST_JSON, prompts.ANALYST_TEXT),
        parse_who_and_when_text,
        validate,
    )
