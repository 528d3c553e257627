"""The sidecar's one settings object: argument → environment (`FAULTFINDER_*`) → default.

Built once at start-up and passed down; nothing deeper reads the environment.
Invalid values stop start-up with a message naming the field.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Annotated, Any

from pydantic import AliasChoices, Field, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from faultfinder.server.errors import SettingsError as SettingsError

CONFIG_ENV = "FAULTFINDER_CONFIG"
"""Environment variable naming a TOML settings file (keys = field names)."""

CommaList = Annotated[list[str], NoDecode]
"""A list given in the environment as comma-separated values."""


DEFAULT_UNFINISHED_AFTER_S = 300.0
"""The `unfinished_after` setting's default (seconds); the lifecycle's too."""


def default_processes() -> int:
    """2 where this process may run on two cores or more (its CPU affinity), else 1."""
    return 2 if len(os.sched_getaffinity(0)) >= 2 else 1


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
    unfinished_after: float = Field(
        default=DEFAULT_UNFINISHED_AFTER_S,
        ge=0,
        description="Seconds a run whose root span has not arrived, but whose spans say it is"
        " in their own process (OTLP span flags), waits after its last span before it is"
        " finished `failed` and marked unfinished: its process crashed, was killed or hung"
        " before ending the root (some instrumentations end no span when an exception"
        " escapes). At least the quiet period; raise it above the longest pause of your runs"
        " (a slow model call, a wait for a person).",
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
    heap_trim_mb: int = Field(
        default=32,
        ge=0,
        description="Give freed heap back to the system once the serving process has grown "
        "by this many MB since the last time (checked every second; 0: never).",
    )
    max_spans_per_request: int = Field(
        default=20_000,
        gt=0,
        description="Most spans one OTLP request may carry (HTTP 413, gRPC RESOURCE_EXHAUSTED).",
    )
    max_spans_per_run: int = Field(
        default=20_000,
        gt=0,
        description="Most spans one run may have: ingest refuses a full run's further spans"
        " (partial success) and reading a run stops there.",
    )
    max_run_bytes: int = Field(
        default=32 * 1024 * 1024,
        gt=0,
        description="Bytes of attribute values one run's spans keep whole: once a run holds"
        " them, its further spans are stored with each text value cut to 4,096 characters"
        " (marked), so its page, attribution and storage stay bounded.",
    )
    max_attribution_steps: int = Field(
        default=10_000,
        gt=0,
        description="Most steps a trajectory posted to /api/attribute may have (HTTP 413).",
    )
    body_read_timeout: float = Field(
        default=30.0,
        gt=0,
        description="Seconds an OTLP/HTTP request may take to send its body (HTTP 408 after).",
    )
    body_progress_timeout: float = Field(
        default=5.0,
        gt=0,
        description="Seconds an OTLP/HTTP body may go without a byte arriving: a stalled upload"
        " gets 408 and gives back the share of the in-flight limit it held, well before"
        " `body_read_timeout`. Exporters send a body in one go; a pause of seconds is a"
        " stalled or hostile sender.",
    )
    keep_alive: int = Field(
        default=75,
        ge=1,
        description="Seconds an idle HTTP connection is kept open for its next request. Longer"
        " than exporters wait between batches (5 s for the OpenTelemetry SDK's batch processor)"
        " and than the 60 s idle timeout of common load balancers, so that the client or proxy,"
        " not the sidecar, closes an idle connection: a request sent on a connection the"
        " server is closing is lost in flight.",
    )
    head_timeout: float = Field(
        default=10.0,
        gt=0,
        description="Seconds an HTTP connection may take to send a request's head (request"
        " line and headers): one that has not finished it by then gets 408 and is closed, so"
        " connections that never finish their heads (slowloris) cannot take every file"
        " descriptor.",
    )
    max_connections_per_client: int = Field(
        default=256,
        ge=0,
        description="Most HTTP connections one client address may hold open; more are answered"
        " 503 and closed (0: no cap). Exporters use one or a few; raise it when many clients"
        " reach the sidecar through one proxy address.",
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
    ingest_inflight_bytes: int = Field(
        default=64 * 1024 * 1024,
        gt=0,
        description="Request bytes ingest may hold at once while receiving and decoding; "
        "beyond it ingest answers 503 without keeping the body.",
    )
    retry_after: int = Field(
        default=1,
        ge=1,
        description="Seconds suggested in Retry-After when ingest is saturated: the least; "
        "under sustained overload the advice grows to about the time ingest needs to take "
        "the senders already waiting.",
    )
    retry_after_max: int = Field(
        default=300,
        ge=1,
        description="The most seconds suggested in Retry-After under sustained overload "
        "(the OpenTelemetry Collector's exporters keep retrying for 300 s by default).",
    )
    migrate_on_start: bool = Field(
        default=True, description="Upgrade the database schema to the latest revision on start."
    )
    attributors: CommaList = Field(
        default=["learned", "first_error"],
        description="Attributors run on every failed run, in order (comma-separated names); "
        "the dashboard leads with the first one that answers.",
    )
    plugins: CommaList = Field(
        default=[],
        description="Python modules imported at start-up that register extra attributors.",
    )
    processes: int = Field(
        default_factory=default_processes,
        ge=1,
        le=64,
        description="Processes the sidecar runs on (one span writer whatever the number): "
        "1 does everything in the serving process; from 2, the online auditor (when on) "
        "scores runs in a process of its own and the rest decode OTLP/HTTP bodies, so "
        "ingest and auditing use more than one core. Default: 2 where the process may "
        "run on two cores or more, else 1.",
    )

    @property
    def audit_in_process(self) -> bool:
        """Whether the online auditor runs in a process of its own."""
        return self.audit and self.processes >= 2

    @property
    def decoder_processes(self) -> int:
        """Processes that decode OTLP/HTTP bodies beside the serving one."""
        return self.processes - 1 - int(self.audit_in_process)

    workers: int = Field(
        default=1,
        ge=0,
        description="Attribution jobs of attributors that ask a model run at once in this "
        "process (0: leave every job to `faultfinder worker` processes).",
    )
    fast_workers: int = Field(
        default=1,
        ge=0,
        description="Jobs of zero-LLM attributors (`learned`, `first_error`) run at once beside "
        "those, in slots of their own, so they never wait behind a model (0: they share "
        "the `workers` slots).",
    )
    job_lease: float = Field(
        default=60.0, gt=0, description="Seconds a claimed job stays a worker's without renewal."
    )
    job_max_attempts: int = Field(default=3, ge=1, description="Tries before a job fails.")
    job_backoff: float = Field(
        default=2.0, ge=0, description="Seconds before the first retry; doubles per attempt."
    )
    attribution_timeout: float = Field(
        default=600.0, gt=0, description="Seconds one attribution may take before it fails."
    )
    audit: bool = Field(
        default=True,
        description="Score the steps of running runs and raise early alarms (online auditor).",
    )
    audit_interval: float = Field(
        default=1.0, gt=0, description="Seconds between the online auditor's passes."
    )
    audit_busy_share: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="Share of the process's time the online auditor may take while runs "
        "keep arriving; lower favours ingest throughput over early alarms during a flood.",
    )
    api_keys: CommaList = Field(
        default=[],
        repr=False,
        description="Keys for the query API and ingest (Authorization: Bearer KEY); none: open.",
    )
    allowed_hosts: CommaList = Field(
        default=[],
        description="Host names (as in the Host header, without port) the HTTP server answers;"
        " others get 400, so a web page cannot reach it by re-pointing its own name at this"
        " address (DNS rebinding). Default: localhost, 127.0.0.1, ::1 and the bound address."
        " `*` answers any name: for a sidecar reached by service names (Docker, Kubernetes).",
    )
    ingest_keys: CommaList = Field(
        default=[], repr=False, description="Keys that may only send spans (OTLP)."
    )
    webhook_urls: CommaList = Field(
        default=[], description="URLs that receive a POST for every new attribution."
    )
    webhook_secret: str | None = Field(
        default=None, repr=False, description="HMAC-SHA256 key signing webhook bodies."
    )
    llm_base_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices(
            "FAULTFINDER_LLM_BASE_URL", "OPENAI_BASE_URL", "llm_base_url"
        ),
        description="OpenAI-compatible endpoint for LLM attributors (or OPENAI_BASE_URL).",
    )
    llm_api_key: str | None = Field(
        default=None,
        repr=False,
        validation_alias=AliasChoices("FAULTFINDER_LLM_API_KEY", "OPENAI_API_KEY", "llm_api_key"),
        description="Key for the LLM endpoint (or OPENAI_API_KEY).",
    )
    llm_model: str | None = Field(
        default=None, description="Model name for LLM attributors at that endpoint."
    )
    llm_timeout: float = Field(default=120.0, gt=0, description="Seconds per LLM request.")
    llm_concurrency: int = Field(default=2, ge=1, description="LLM requests at once.")
    llm_prefilter_top_k: int = Field(
        default=0,
        ge=0,
        description="Learned pre-filter for LLM attributors: name the zero-LLM scorer's top-k "
        "steps to the model as hints and shorten steps away from them (0 = off).",
    )

    learned_model: Path | None = Field(
        default=None,
        description="A model file from `faultfinder train` for the learned attributor, the "
        "online auditor and the LLM pre-filter (default: the packaged model, trained on "
        "Who&When).",
    )

    @field_validator("learned_model")
    @classmethod
    def _readable_model(cls, value: Path | None) -> Path | None:
        if value is None:
            return None
        from faultfinder.attributors.learned import ModelFormatError, StepModel

        try:
            StepModel.load(value)
        except ModelFormatError as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator(
        "attributors",
        "plugins",
        "api_keys",
        "ingest_keys",
        "allowed_hosts",
        "webhook_urls",
        mode="before",
    )
    @classmethod
    def _split_commas(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @property
    def is_loopback(self) -> bool:
        return self.host in ("127.0.0.1", "localhost", "::1") or self.host.startswith("127.")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # argument → environment → config file (FAULTFINDER_CONFIG, TOML) → default
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = os.environ.get(CONFIG_ENV)
        if config_file:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=Path(config_file)))
        return tuple(sources)

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
    except (FileNotFoundError, tomllib.TOMLDecodeError) as exc:
        raise SettingsError(f"settings file {os.environ.get(CONFIG_ENV)!r}: {exc}") from None
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            field = ".".join(str(part) for part in error["loc"]) or "settings"
            problems.append(f"{field} (FAULTFINDER_{field.upper()}): {error['msg']}")
        raise SettingsError("invalid settings: " + "; ".join(problems)) from None
