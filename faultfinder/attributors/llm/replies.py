"""What a question to the model is and how its reply is read: the prompt, the reply's
format, JSON extraction, the Who&When free-text answer, and validation of the named agent
and step against the trajectory.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from faultfinder.attributors.heuristics import is_acting_step
from faultfinder.attributors.llm.settings import StructuredRung
from faultfinder.attributors.model import Attribution, Trajectory, normalise_agent

__all__ = [
    "ContextOverflow",
    "ModelCallFailed",
    "Prompt",
    "ReplyFormat",
    "ReplyInvalid",
    "excerpt",
    "extract_json_object",
    "parse_who_and_when_text",
    "resolve_agent",
    "resolve_step",
    "with_step_owner",
]

T = TypeVar("T")


@dataclass(frozen=True)
class Prompt:
    """A system message and a user message; the answer-format instructions are added per rung."""

    system: str
    user: str


class ReplyInvalid(ValueError):
    """A reply could not be parsed or does not fit the trajectory; the message says why."""


class ModelCallFailed(Exception):
    """No usable reply could be had; `reason` is stored as the attribution's failure reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ContextOverflow(ModelCallFailed):
    """The endpoint refused the prompt as longer than the model's context window.

    `requested` and `available` are the token counts the endpoint reported (the prompt's,
    sometimes with the completion's room, and the window's), None when it said none; the
    caller shortens the prompt by the difference, or by a fixed fraction without them.
    """

    def __init__(self, reason: str, *, requested: int | None, available: int | None) -> None:
        super().__init__(reason)
        self.requested = requested
        self.available = available


@dataclass(frozen=True)
class ReplyFormat(Generic[T]):
    """One kind of question's answer: its JSON schema, how to read it from free text, and
    how to check it against the trajectory."""

    name: str
    schema: dict[str, Any]
    json_instructions: str
    text_instructions: str
    parse_text: Callable[[str], dict[str, Any]]
    """Free-text fallback: pull the answer's fields out of prose (raises ReplyInvalid)."""
    validate: Callable[[Mapping[str, Any]], T]
    """Turn parsed fields into the answer, raising ReplyInvalid naming what is wrong."""

    def instructions(self, rung: StructuredRung) -> str:
        return self.json_instructions if rung.asks_for_json else self.text_instructions

    def read(self, text: str, rung: StructuredRung) -> T:
        """Parse and validate a reply received on `rung`."""
        data: dict[str, Any] | None = None
        json_problem: str | None = None
        try:
            data = extract_json_object(text)
        except ReplyInvalid as exc:
            json_problem = str(exc)
        if data is None:
            try:
                data = self.parse_text(text)
            except ReplyInvalid:
                if rung.asks_for_json and json_problem:
                    raise ReplyInvalid(json_problem) from None
                raise
        return self.validate(data)


# --- parsing --------------------------------------------------------------------------

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)


def extract_json_object(text: str) -> dict[str, Any]:
    """The JSON object in a reply: bare, inside markdown fences, or embedded in prose.

    Raw newlines inside strings are accepted (`strict=False`): grammar-constrained
    servers let them through.
    """
    stripped = text.strip()
    if not stripped:
        raise ReplyInvalid("the reply is empty")
    attempts = [stripped, *(match.strip() for match in _FENCE.findall(stripped))]
    for attempt in attempts:
        try:
            value = json.loads(attempt, strict=False)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    decoder = json.JSONDecoder(strict=False)
    for start in (m.start() for m in re.finditer(r"\{", stripped)):
        try:
            value, _ = decoder.raw_decode(stripped, start)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    raise ReplyInvalid(f"the reply contains no JSON object: {excerpt(stripped)!r}")


_AGENT_LINE = re.compile(r"Agent\s*Name\s*[:：]\s*(.+)", re.IGNORECASE)
_STEP_LINE = re.compile(r"Step\s*(?:Number)?\s*[:：]\s*\**\s*(-?\d+)", re.IGNORECASE)
_REASON_LINE = re.compile(
    r"(?:Reason\s*for\s*Mistake|Reason|Evidence)\s*[:：]\s*(.*)", re.IGNORECASE | re.DOTALL
)
_CONFIDENCE_LINE = re.compile(r"Confidence\s*[:：]\s*\**\s*([0-9]*\.?[0-9]+)\s*(%?)", re.IGNORECASE)


def parse_who_and_when_text(text: str) -> dict[str, Any]:
    """Fields from a Who&When-style free-text answer (`Agent Name: X`, `Step Number: N`,
    `Reason for Mistake: ...`, optionally `Confidence: 0.7`)."""
    agent = _AGENT_LINE.search(text)
    step = _STEP_LINE.search(text)
    if agent is None and step is None:
        raise ReplyInvalid(
            f"the reply has neither 'Agent Name:' nor 'Step Number:' lines: {excerpt(text)!r}"
        )
    data: dict[str, Any] = {}
    if agent is not None:
        data["agent"] = agent.group(1).strip()
    if step is not None:
        data["step"] = int(step.group(1))
    reason = _REASON_LINE.search(text)
    if reason is not None:
        data["reason"] = reason.group(1).strip()
    confidence = _CONFIDENCE_LINE.search(text)
    if confidence is not None:
        value = float(confidence.group(1))
        data["confidence"] = value / 100 if confidence.group(2) or value > 1 else value
    return data


def excerpt(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


# --- validation -----------------------------------------------------------------------

_DECORATION = re.compile(r"^[\s*_`\"'\[\(<]+|[\s*_`\"'\]\)>.,;:!]+$")
_PARENTHESISED = re.compile(r"\s*\(.*?\)\s*")


def resolve_agent(value: Any, trajectory: Trajectory) -> str:
    """The trajectory's own spelling of the agent a reply names; ReplyInvalid if none matches.

    Tolerates case, spacing, '-'/'_' choice, markdown decoration, a role suffix in
    parentheses ("Orchestrator (thought)") and a name embedded in a short phrase when
    exactly one known agent appears in it.
    """
    if not isinstance(value, str) or not value.strip():
        raise ReplyInvalid(f"'agent' must be a non-empty agent name, got {value!r}")
    names: tuple[str, ...] = (*trajectory.agents, *trajectory.roster)
    known: dict[str, str] = {normalise_agent(name): name for name in names}
    raw = value.strip().splitlines()[0]
    for candidate in (raw, _DECORATION.sub("", raw), _PARENTHESISED.sub(" ", raw)):
        key = normalise_agent(_DECORATION.sub("", candidate))
        if key in known:
            return known[key]
    flat = normalise_agent(raw)
    embedded = {name for key, name in known.items() if key and key in flat}
    # Prefer the longest match so "WebSurfer" is not shadowed by a shorter "Surfer".
    if embedded:
        longest = max(embedded, key=lambda name: len(normalise_agent(name)))
        others = {n for n in embedded if normalise_agent(n) not in normalise_agent(longest)}
        if not others:
            return longest
    raise ReplyInvalid(
        f"agent {raw!r} is not one of the trajectory's agents: {', '.join(known.values())}"
    )


def resolve_step(value: Any, allowed: Iterable[int]) -> int:
    """A step number from a reply, checked against the allowed steps; ReplyInvalid otherwise."""
    allowed_steps = sorted(set(allowed))
    number: int | None = None
    if isinstance(value, bool):
        number = None
    elif isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str):
        match = re.search(r"-?\d+", value)
        number = int(match.group()) if match else None
    if number is None:
        raise ReplyInvalid(f"'step' must be a step number, got {value!r}")
    if number not in allowed_steps:
        raise ReplyInvalid(
            f"step {number} is not a valid step here; valid steps: {_ranges(allowed_steps)}"
        )
    return number


def with_step_owner(attribution: Attribution, trajectory: Trajectory) -> Attribution:
    """The answer as the model gave it, saying so when the step it names is another
    agent's (the model named the coder, the step is the terminal's report of the coder's
    code): neither name is dropped, since either may be the one the model meant; the
    reason opens with the disagreement and `details` records the step's own agent."""
    if attribution.step is None or attribution.agent is None:
        return attribution
    step = trajectory.steps[attribution.step]
    if normalise_agent(step.agent) == normalise_agent(attribution.agent):
        return attribution
    what = "turn" if is_acting_step(step) else "report"
    note = f"The model named {attribution.agent}; step {attribution.step} is {step.agent}'s {what}."
    return attribution.model_copy(
        update={
            "reason": f"{note} {attribution.reason}".strip(),
            "details": {**attribution.details, "step_agent": step.agent},
        }
    )


def _ranges(numbers: list[int]) -> str:
    if not numbers:
        return "none"
    spans: list[str] = []
    start = previous = numbers[0]
    for number in [*numbers[1:], None]:
        if number is not None and number == previous + 1:
            previous = number
            continue
        spans.append(str(start) if start == previous else f"{start}-{previous}")
        if number is not None:
            start = previous = number
    return ", ".join(spans)
