"""The model client every LLM attributor uses: an OpenAI-compatible endpoint, structured
output with graceful degradation down the rung ladder, retries, and per-attribution token
accounting and budget.
"""

from __future__ import annotations

import logging
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import openai

from faultfinder.attributors.llm.replies import (
    ContextOverflow,
    ModelCallFailed,
    Prompt,
    ReplyFormat,
    ReplyInvalid,
    excerpt,
)
from faultfinder.attributors.llm.settings import (
    CHARS_PER_TOKEN,
    ModelSettings,
    StructuredRung,
    estimate_tokens,
)

__all__ = ["Endpoint", "ModelClient", "ModelSession"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

_CONTEXT_OVERFLOW = re.compile(
    r"context[_ ](?:length|window|size)|exceed(?:s|ed)? (?:the )?(?:available )?"
    r"(?:context|maximum)|too many tokens",
    re.IGNORECASE,
)

_OVERFLOW_COUNTS = (
    # vLLM and OpenAI: "maximum context length is 8192 tokens. However, you requested 9041"
    re.compile(r"context length is (?P<available>[\d,]+).*?requested (?P<requested>[\d,]+)", re.S),
    # llama.cpp: "request (9041 tokens) exceeds the available context size (8192 tokens)"
    re.compile(r"request \((?P<requested>[\d,]+) tokens\).*?context size \((?P<available>[\d,]+)"),
    # llama-cpp-python: "Requested tokens (9041) exceed context window of 8192"
    re.compile(r"tokens \((?P<requested>[\d,]+)\) exceed context window of (?P<available>[\d,]+)"),
    # "9,041 tokens requested of 8,192"
    re.compile(r"(?P<requested>[\d,]+) tokens requested of (?P<available>[\d,]+)"),
)

_CALIBRATION_CHARS = 2000
"""Shortest prompt whose token count is used to calibrate characters per token."""

PROMPT_CHARS_PER_TOKEN = CHARS_PER_TOKEN * 0.85
"""Characters per token assumed for a prompt before the endpoint has counted any: below the
usual 4 because logs full of code, JSON and identifiers tokenize densely."""


_KNOWN_RUNGS: dict[str, StructuredRung] = {}
"""The rung each endpoint (base URL and model) was found to accept, shared by all clients
in the process so that only the first call to an endpoint pays for the discovery."""


class Endpoint:
    """One OpenAI-compatible endpoint (base URL, key and model): the connection and the limit
    on calls in flight, shared by every client of the endpoint."""

    def __init__(
        self, settings: ModelSettings, *, openai_client: openai.AsyncOpenAI | None = None
    ) -> None:
        self.timeout = settings.timeout
        self.openai = openai_client or openai.AsyncOpenAI(
            base_url=settings.base_url,
            api_key=settings.api_key,
            timeout=settings.timeout,
            # Attempts are made here so that each one is counted and its failure recorded.
            max_retries=0,
        )
        self.limiter = anyio.CapacityLimiter(settings.concurrency)
        self.chars_per_token = PROMPT_CHARS_PER_TOKEN
        """Characters per prompt token, lowered to what the endpoint's own counts show
        (reported usage, context errors), so that prompts are fitted as the model counts."""
        self.context_tokens: int | None = None
        """The context window the endpoint reported in a context error, when smaller than the
        settings say."""

    def observe_prompt(self, chars: int, tokens: int) -> None:
        """Learn from the endpoint's count of `tokens` for a prompt of `chars` characters.

        Only ever lowers the ratio: a prompt of unusually long tokens must not make the next
        prompt, of dense text, overflow. Short prompts teach nothing: the chat template's
        own tokens would dominate their count.
        """
        if chars >= _CALIBRATION_CHARS and tokens > 0:
            self.chars_per_token = max(1.0, min(self.chars_per_token, chars / tokens))

    def observe_context(self, available: int) -> None:
        """Remember the context window the endpoint reported (its n_ctx may be smaller than
        the settings' context_tokens)."""
        if available > 0:
            self.context_tokens = min(available, self.context_tokens or available)

    @staticmethod
    def key(settings: ModelSettings) -> tuple[str, str, str]:
        """What tells endpoints apart: the base URL, the API key and the model."""
        return (settings.base_url, settings.api_key, settings.model)

    async def aclose(self) -> None:
        await self.openai.close()


class ModelClient:
    """A model endpoint as one attributor calls it: its settings, the endpoint's connection
    and concurrency limit, and the structured-output rung the endpoint was found to accept.

    Without `endpoint` the client opens its own (on `openai_client` when given) and closes it
    in `aclose`; a shared endpoint is closed by whoever made it.
    """

    def __init__(
        self,
        settings: ModelSettings,
        *,
        openai_client: openai.AsyncOpenAI | None = None,
        endpoint: Endpoint | None = None,
    ) -> None:
        self.settings = settings
        self._owns_endpoint = endpoint is None
        self._endpoint = endpoint or Endpoint(settings, openai_client=openai_client)
        known = _KNOWN_RUNGS.get(settings.endpoint)
        ladder = list(StructuredRung)
        self._rung = settings.first_rung
        if known is not None and ladder.index(known) > ladder.index(self._rung):
            self._rung = known

    @property
    def endpoint(self) -> Endpoint:
        """The endpoint's connection and concurrency limit this client calls through."""
        return self._endpoint

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
        """Close the endpoint's connection if this client opened it."""
        if self._owns_endpoint:
            await self._endpoint.aclose()

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
        if settings.timeout != self._endpoint.timeout:
            extra["timeout"] = settings.timeout
        async with self._endpoint.limiter:
            return await self._endpoint.openai.chat.completions.create(
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
                if exc.status_code in (400, 413, 422, 500, 501) and _CONTEXT_OVERFLOW.search(
                    message
                ):
                    raise self._overflow(exc, message, messages) from None
                lower = (
                    self.client.step_down(rung) if exc.status_code in (400, 422, 500, 501) else None
                )
                if lower is not None:
                    # The endpoint may not support this structured-output rung: step down
                    # for the endpoint, not just for this call.
                    self.rung_fallbacks.append(
                        f"{rung.value} -> {lower.value}: "
                        f"HTTP {exc.status_code}: {excerpt(message, 120)}"
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
                failures = self._retry_or_fail(failures, f"the model refused: {excerpt(refusal)}")
                continue
            return text, rung

    def _overflow(
        self, exc: openai.APIStatusError, message: str, messages: list[dict[str, str]]
    ) -> ContextOverflow:
        """The context error as a `ContextOverflow`, with what it teaches the endpoint."""
        requested, available = overflow_counts(exc.body, message)
        endpoint = self.client.endpoint
        if available is not None:
            endpoint.observe_context(available)
        if requested is not None:
            endpoint.observe_prompt(sum(len(m["content"]) for m in messages), requested)
        return ContextOverflow(
            f"the prompt does not fit the model's context: HTTP {exc.status_code}: {message}",
            requested=requested,
            available=available,
        )

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
            self.client.endpoint.observe_prompt(sum(len(m["content"]) for m in messages), prompt)
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
            return excerpt(inner["message"], 300)
        if isinstance(inner, str):
            return excerpt(inner, 300)
    return excerpt(str(exc.message), 300)


def overflow_counts(body: object, message: str) -> tuple[int | None, int | None]:
    """The (requested, available) token counts a context error reports, each None when
    absent: llama.cpp's `n_prompt_tokens`/`n_ctx` fields, else the numbers in its message."""
    inner = body.get("error", body) if isinstance(body, dict) else None
    if isinstance(inner, dict):
        requested, available = inner.get("n_prompt_tokens"), inner.get("n_ctx")
        if isinstance(requested, int) and isinstance(available, int):
            return requested, available
    for pattern in _OVERFLOW_COUNTS:
        match = pattern.search(message)
        if match is not None:
            return (
                int(match.group("requested").replace(",", "")),
                int(match.group("available").replace(",", "")),
            )
    return None, None


def _backoff(failures: int) -> float:
    return float(min(0.25 * 2 ** (failures - 1), 4.0))
