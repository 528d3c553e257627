"""The model client every LLM attributor uses: an OpenAI-compatible endpoint, structured output
with graceful degradation, validated replies, retries and per-attribution token accounting.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Generic, TypeVar

import anyio
import openai
from pydantic import BaseModel, ConfigDict, Field

from faultfinder.attributors.model import Trajectory, normalise_agent

__all__ = [
    "CHARS_PER_TOKEN",
    "ModelCallFailed",
    "ModelClient",
    "ModelSession",
    "ModelSettings",
    "Prompt",
    "ReplyFormat",
    "ReplyInvalid",
    "StructuredRung",
    "estimate_tokens",
    "extract_json_object",
    "parse_who_and_when_text",
    "resolve_agent",
    "resolve_step",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

CHARS_PER_TOKEN = 4
"""Rough characters per token, used to estimate prompt sizes before a call."""


def estimate_tokens(text: str) -> int:
    """A rough token count for `text` (about 4 characters per token)."""
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


class StructuredRung(StrEnum):
    """How strongly a reply's shape is constrained, strongest first.

    Endpoints differ: OpenAI and vLLM accept the standard `json_schema` format,
    llama-cpp-python rejects it (HTTP 500) but accepts `json_object` with its own
    `schema` key, others accept only plain `json_object`, and some accept nothing.
    """

    JSON_SCHEMA = "json_schema"
    JSON_OBJECT_SCHEMA = "json_object_schema"
    JSON_OBJECT = "json_object"
    TEXT = "text"

    @property
    def asks_for_json(self) -> bool:
        return self is not StructuredRung.TEXT

    def weaker(self) -> StructuredRung | None:
        """The next weaker rung, or None at the bottom of the ladder."""
        ladder = list(StructuredRung)
        position = ladder.index(self)
        return ladder[position + 1] if position + 1 < len(ladder) else None


class ModelSettings(BaseModel):
    """Where the model is and how to call it; built once by the caller (CLI, server settings)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str = Field(
        default="http://127.0.0.1:8080/v1",
        description="OpenAI-compatible endpoint, ending in /v1 (`faultfinder llm serve` default).",
    )
    api_key: str = Field(
        default="local", repr=False, description="Bearer key; local servers ignore it."
    )
    model: str = Field(default="local", description="Model name sent with each request.")
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_tokens: int = Field(default=512, gt=0, description="Completion tokens per call.")
    timeout: float = Field(default=120.0, gt=0, description="Seconds per call attempt.")
    retries: int = Field(
        default=2,
        ge=0,
        description="Further attempts after a timeout, connection error, HTTP 5xx or refusal.",
    )
    concurrency: int = Field(default=2, gt=0, description="Calls in flight at once per client.")
    token_budget: int = Field(
        default=300_000,
        gt=0,
        description="Prompt plus completion tokens one attribution may spend before it stops.",
    )
    context_tokens: int = Field(
        default=8192,
        gt=256,
        description="The model's context window; longer trajectories are windowed to fit.",
    )
    first_rung: StructuredRung = Field(
        default=StructuredRung.JSON_SCHEMA,
        description="Structured-output rung to try first; failures move down the ladder.",
    )
    seed: int | None = Field(default=None, description="Sampling seed sent to the endpoint.")

    @classmethod
    def from_environment(cls, environ: Mapping[str, str], **overrides: Any) -> ModelSettings:
        """Settings from `OPENAI_BASE_URL`, `OPENAI_API_KEY` and `FAULTFINDER_LLM_*` variables
        (`MODEL`, `TEMPERATURE`, `MAX_TOKENS`, `TIMEOUT`, `RETRIES`, `CONCURRENCY`,
        `TOKEN_BUDGET`, `CONTEXT_TOKENS`, `FIRST_RUNG`, `SEED`) in `environ`; explicit
        `overrides` (None values ignored) win. Meant to be called once where settings are built.
        """
        values: dict[str, Any] = {}
        if environ.get("OPENAI_BASE_URL"):
            values["base_url"] = environ["OPENAI_BASE_URL"]
        if environ.get("OPENAI_API_KEY"):
            values["api_key"] = environ["OPENAI_API_KEY"]
        for name in cls.model_fields:
            variable = f"FAULTFINDER_LLM_{name.upper()}"
            if environ.get(variable):
                values[name] = environ[variable]
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls.model_validate(values)

    @property
    def endpoint(self) -> str:
        """The endpoint's identity for remembering which structured-output rung works."""
        return f"{self.base_url.rstrip('/')}#{self.model}"


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
    raise ReplyInvalid(f"the reply contains no JSON object: {_excerpt(stripped)!r}")


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
            f"the reply has neither 'Agent Name:' nor 'Step Number:' lines: {_excerpt(text)!r}"
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


def _excerpt(text: str, limit: int = 160) -> str:
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


# --- the client -----------------------------------------------------------------------

_CONTEXT_OVERFLOW = re.compile(
    r"context[_ ](?:length|window)|exceed(?:s|ed)? (?:the )?(?:context|maximum)|too many tokens",
    re.IGNORECASE,
)


_KNOWN_RUNGS: dict[str, StructuredRung] = {}
"""The rung each endpoint (base URL and model) was found to accept, shared by all clients
in the process so that only the first call to an endpoint pays for the discovery."""


class ModelClient:
    """One OpenAI-compatible endpoint shared by attributions: the connection, the
    concurrency limit and the structured-output rung that the endpoint was found to accept."""

    def __init__(self, settings: ModelSettings, *, openai_client: openai.AsyncOpenAI | None = None):
        self.settings = settings
        self._openai = openai_client or openai.AsyncOpenAI(
            base_url=settings.base_url,
            api_key=settings.api_key,
            timeout=settings.timeout,
            # Attempts are made here so that each one is counted and its failure recorded.
            max_retries=0,
        )
        self._limiter = anyio.CapacityLimiter(settings.concurrency)
        known = _KNOWN_RUNGS.get(settings.endpoint)
        ladder = list(StructuredRung)
        self._rung = settings.first_rung
        if known is not None and ladder.index(known) > ladder.index(self._rung):
            self._rung = known

    @property
    def rung(self) -> StructuredRung:
        """The strongest rung this endpoint is known (or still hoped) to accept."""
        return self._rung

    def step_down(self, from_rung: StructuredRung) -> StructuredRung | None:
        """Record that the endpoint rejected `from_rung`; the rung to use next, or None."""
        lower = from_rung.weaker()
        if lower is None:
            return None
        ladder = list(StructuredRung)
        if ladder.index(lower) > ladder.index(self._rung):
            self._rung = lower
            _KNOWN_RUNGS[self.settings.endpoint] = lower
        return lower

    def session(self) -> ModelSession:
        """Accounting and the token budget for one attribution."""
        return ModelSession(self)

    async def aclose(self) -> None:
        await self._openai.close()

    async def _create(
        self,
        messages: list[dict[str, str]],
        rung: StructuredRung,
        reply: ReplyFormat[Any],
        max_tokens: int | None = None,
    ) -> Any:
        settings = self.settings
        extra: dict[str, Any] = {}
        if rung is StructuredRung.JSON_SCHEMA:
            extra["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": reply.name, "schema": reply.schema, "strict": True},
            }
        elif rung is StructuredRung.JSON_OBJECT_SCHEMA:
            extra["response_format"] = {"type": "json_object", "schema": reply.schema}
        elif rung is StructuredRung.JSON_OBJECT:
            extra["response_format"] = {"type": "json_object"}
        if settings.seed is not None:
            extra["seed"] = settings.seed
        async with self._limiter:
            return await self._openai.chat.completions.create(
                model=settings.model,
                messages=messages,  # type: ignore[arg-type]
                temperature=settings.temperature,
                max_tokens=max_tokens or settings.max_tokens,
                **extra,
            )


@dataclass
class ModelSession:
    """Calls made for one attribution: counts, tokens, the rungs used, and the budget."""

    client: ModelClient
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    rungs: Counter[str] = field(default_factory=Counter)
    rung_fallbacks: list[str] = field(default_factory=list)
    retried_errors: list[str] = field(default_factory=list)
    invalid_replies: list[str] = field(default_factory=list)
    usage_estimated: bool = False

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def accounting(self) -> dict[str, Any]:
        """The attribution fields this session fills."""
        return {
            "llm_calls": self.calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "model": self.client.settings.model,
        }

    def details(self) -> dict[str, Any]:
        """How the replies were obtained, for the attribution's `details`."""
        found: dict[str, Any] = {
            "structured_output": dict(self.rungs),
            "rung": self.client.rung.value,
        }
        if self.rung_fallbacks:
            found["rung_fallbacks"] = list(self.rung_fallbacks)
        if self.retried_errors:
            found["retried_errors"] = list(self.retried_errors)
        if self.invalid_replies:
            found["invalid_replies"] = list(self.invalid_replies)
        if self.usage_estimated:
            found["usage_estimated"] = True
        return found

    async def ask(
        self, prompt: Prompt, reply: ReplyFormat[T], *, max_tokens: int | None = None
    ) -> T:
        """Ask one question and return its validated answer.

        An unusable reply is asked again once with the problem stated; raises
        ModelCallFailed with the reason when no usable answer can be had.
        """
        conversation: list[dict[str, str]] = [
            {"role": "system", "content": prompt.system},
            {"role": "user", "content": prompt.user},
        ]
        problem: str | None = None
        for _ in range(2):
            text, rung = await self._complete(conversation, reply, max_tokens)
            try:
                return reply.read(text, rung)
            except ReplyInvalid as exc:
                problem = str(exc)
                self.invalid_replies.append(problem)
                conversation += [
                    {"role": "assistant", "content": text},
                    {
                        "role": "user",
                        "content": f"That reply cannot be used: {problem}\nAnswer again.",
                    },
                ]
        raise ModelCallFailed(f"no valid reply after a retry: {problem}")

    async def _complete(
        self, conversation: list[dict[str, str]], reply: ReplyFormat[Any], max_tokens: int | None
    ) -> tuple[str, StructuredRung]:
        """One reply's text and the rung it came on, moving down the ladder and retrying
        transient failures as needed."""
        settings = self.client.settings
        failures = 0
        while True:
            rung = self.client.rung
            # The answer-format instructions follow the rung actually used for this call.
            messages = [
                *conversation[:-1],
                {
                    "role": "user",
                    "content": f"{conversation[-1]['content']}\n\n{reply.instructions(rung)}",
                },
            ]
            self._check_budget(messages)
            self.calls += 1
            started = time.monotonic()
            try:
                response = await self.client._create(messages, rung, reply, max_tokens)
            except openai.APIStatusError as exc:
                message = _error_message(exc)
                if exc.status_code in (400, 422, 500, 501) and _CONTEXT_OVERFLOW.search(message):
                    raise ModelCallFailed(
                        "the prompt does not fit the model's context: "
                        f"HTTP {exc.status_code}: {message}"
                    ) from None
                lower = (
                    self.client.step_down(rung) if exc.status_code in (400, 422, 500, 501) else None
                )
                if lower is not None:
                    # The endpoint may not support this structured-output rung: step down
                    # for the endpoint, not just for this call.
                    self.rung_fallbacks.append(
                        f"{rung.value} -> {lower.value}: "
                        f"HTTP {exc.status_code}: {_excerpt(message, 120)}"
                    )
                    logger.info(
                        "%s: %s rejected (HTTP %s), trying %s",
                        settings.endpoint,
                        rung.value,
                        exc.status_code,
                        lower.value,
                    )
                    continue
                if exc.status_code == 429 or exc.status_code >= 500:
                    failures = self._retry_or_fail(failures, f"HTTP {exc.status_code}: {message}")
                    await anyio.sleep(_backoff(failures))
                    continue
                raise ModelCallFailed(
                    f"the endpoint refused the request: HTTP {exc.status_code}: {message}"
                ) from None
            except openai.APITimeoutError:
                failures = self._retry_or_fail(failures, f"timed out after {settings.timeout:g} s")
                continue
            except openai.APIConnectionError as exc:
                failures = self._retry_or_fail(failures, f"connection error: {exc}")
                await anyio.sleep(_backoff(failures))
                continue
            except openai.APIError as exc:
                # A response that is not a chat completion at all (e.g. an HTML error page).
                failures = self._retry_or_fail(failures, f"unusable response: {exc}")
                continue
            self._count_usage(response, messages, time.monotonic() - started)
            self.rungs[rung.value] += 1
            text, refusal = _reply_text(response)
            if refusal is not None:
                failures = self._retry_or_fail(failures, f"the model refused: {_excerpt(refusal)}")
                continue
            return text, rung

    def _retry_or_fail(self, failures: int, problem: str) -> int:
        self.retried_errors.append(problem)
        if failures >= self.client.settings.retries:
            attempts = failures + 1
            raise ModelCallFailed(f"{problem} ({attempts} attempt{'s' if attempts > 1 else ''})")
        return failures + 1

    def _check_budget(self, messages: list[dict[str, str]]) -> None:
        budget = self.client.settings.token_budget
        upcoming = sum(estimate_tokens(m["content"]) for m in messages)
        if self.tokens + upcoming > budget:
            raise ModelCallFailed(
                f"token budget of {budget} exhausted: {self.tokens} tokens spent in "
                f"{self.calls} calls, the next prompt needs about {upcoming}"
            )

    def _count_usage(self, response: Any, messages: list[dict[str, str]], seconds: float) -> None:
        usage = getattr(response, "usage", None)
        prompt = getattr(usage, "prompt_tokens", None)
        completion = getattr(usage, "completion_tokens", None)
        if isinstance(prompt, int) and isinstance(completion, int):
            self.prompt_tokens += prompt
            self.completion_tokens += completion
        else:
            # Some servers omit usage; an estimate keeps the budget meaningful.
            self.usage_estimated = True
            self.prompt_tokens += sum(estimate_tokens(m["content"]) for m in messages)
            self.completion_tokens += estimate_tokens(_reply_text(response)[0])
        logger.debug("model call took %.2f s", seconds)


def _reply_text(response: Any) -> tuple[str, str | None]:
    """The reply's text and, if the model refused, its refusal."""
    choices = getattr(response, "choices", None) or []
    if not choices:
        return "", None
    message = getattr(choices[0], "message", None)
    refusal = getattr(message, "refusal", None)
    if isinstance(refusal, str) and refusal.strip():
        return "", refusal
    if getattr(choices[0], "finish_reason", None) == "content_filter":
        return "", "the endpoint's content filter stopped the reply"
    content = getattr(message, "content", None)
    return (content if isinstance(content, str) else ""), None


def _error_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return _excerpt(inner["message"], 300)
        if isinstance(inner, str):
            return _excerpt(inner, 300)
    return _excerpt(str(exc.message), 300)


def _backoff(failures: int) -> float:
    return float(min(0.25 * 2 ** (failures - 1), 4.0))
