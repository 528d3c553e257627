"""Where the model endpoint is and how to call it: `ModelSettings`, the structured-output
ladder an endpoint's replies are constrained by, and rough token estimates.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["CHARS_PER_TOKEN", "ModelSettings", "StructuredRung", "estimate_tokens"]

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
