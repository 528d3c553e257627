"""The sidecar's one settings object: argument → environment (`FAULTFINDER_*`) → default.

Built once at start-up and passed down; nothing deeper reads the environment.
Invalid values stop start-up with a message naming the field.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class SettingsError(ValueError):
    """A setting has an invalid value; the message names the setting and its variable."""


class Settings(BaseSettings):
    """Every knob of the sidecar, each documented; env var = `FAULTFINDER_` + upper-case name."""

    model_config = SettingsConfigDict(
        env_prefix="FAULTFINDER_", frozen=True, extra="forbid", validate_default=True
    )

    host: str = Field(default="127.0.0.1", description="Address the HTTP server binds to.")
    port: int = Field(
        default=4318, ge=0, le=65535, description="HTTP port: OTLP/HTTP, API, dashboard."
    )
    grpc_enabled: bool = Field(default=True, description="Serve the OTLP/gRPC TraceService.")
    grpc_port: int = Field(default=4317, ge=0, le=65535, description="OTLP/gRPC port.")
    database_url: str = Field(
        default="sqlite+aiosqlite:///faultfinder.db",
        description="SQLAlchemy async URL: sqlite+aiosqlite:///file.db or postgresql+asyncpg://…",
    )
    quiet_period: float = Field(
        default=30.0,
        ge=0,
        description="Seconds without new spans after the root span ended before a run is complete.",
    )
    sweep_interval: float = Field(
        default=1.0, gt=0, description="Seconds between checks for runs that became complete."
    )
    group_by_conversation: bool = Field(
        default=False,
        description="Group spans into runs by gen_ai.conversation.id / session.id, not trace id.",
    )
    max_request_bytes: int = Field(
        default=16 * 1024 * 1024, gt=0, description="Largest accepted request body (HTTP 413)."
    )
    max_decompressed_bytes: int = Field(
        default=64 * 1024 * 1024,
        gt=0,
        description="Largest body after gzip/deflate decompression (HTTP 413).",
    )
    ingest_queue_spans: int = Field(
        default=50_000,
        gt=0,
        description="Spans that may wait for the writer; beyond it ingest answers 503.",
    )
    ingest_batch_spans: int = Field(
        default=5_000, gt=0, description="Most spans the writer stores in one transaction."
    )
    ingest_ack_timeout: float = Field(
        default=30.0,
        gt=0,
        description="Seconds an ingest request waits for its spans to be stored.",
    )
    retry_after: int = Field(
        default=1, ge=1, description="Seconds suggested in Retry-After when ingest is saturated."
    )
    migrate_on_start: bool = Field(
        default=True, description="Upgrade the database schema to the latest revision on start."
    )

    @field_validator("database_url")
    @classmethod
    def _async_driver(cls, value: str) -> str:
        allowed = ("sqlite+aiosqlite://", "postgresql+asyncpg://")
        if not value.startswith(allowed):
            raise ValueError(f"must start with one of {', '.join(allowed)} (got {value!r})")
        return value


def load_settings(**overrides: Any) -> Settings:
    """Settings from explicit overrides (None means 'not given'), the environment, the defaults."""
    given = {key: value for key, value in overrides.items() if value is not None}
    try:
        return Settings(**given)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            field = ".".join(str(part) for part in error["loc"]) or "settings"
            problems.append(f"{field} (FAULTFINDER_{field.upper()}): {error['msg']}")
        raise SettingsError("invalid settings: " + "; ".join(problems)) from None
