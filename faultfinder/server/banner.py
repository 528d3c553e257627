"""What `faultfinder serve` says when it starts: where it listens, which database and
attributors it uses, which model endpoint those ask and whether keys guard it, so an
operator sees the configuration in effect without reading the environment."""

from __future__ import annotations

from sqlalchemy.engine import make_url

from faultfinder.attributors.base import calls_model
from faultfinder.server.settings import Settings

__all__ = ["startup_banner", "without_password"]


def without_password(database_url: str) -> str:
    """`database_url` with its password, if any, masked."""
    return make_url(database_url).render_as_string(hide_password=True)


def _model_endpoint(settings: Settings, asking: list[str]) -> str:
    from faultfinder.attributors.llm import ModelSettings

    defaults = ModelSettings()
    where = settings.llm_base_url or defaults.base_url
    model = settings.llm_model or defaults.model
    if not asking:
        return f"{where} (model {model}; unused: no attributor asks a model)"
    return f"{where} (model {model}; asked by {', '.join(asking)})"


def _auth(settings: Settings) -> str:
    if not settings.api_keys and not settings.ingest_keys:
        return "off (open: set FAULTFINDER_API_KEYS to require keys)"
    return (
        f"on ({len(settings.api_keys)} API key(s), {len(settings.ingest_keys)} ingest-only key(s))"
    )


def _workers(settings: Settings) -> str:
    if not settings.workers:
        return "none in this process (left to `faultfinder worker`)"
    fast = f", {settings.fast_workers} for zero-LLM ones" if settings.fast_workers else ""
    return f"{settings.workers} job slot(s) for attributors that ask a model{fast}"


def startup_banner(settings: Settings, version: str) -> str:
    """The lines `serve` prints before it starts, one fact per line."""
    asking = [name for name in settings.attributors if calls_model(name)]
    grpc = f"{settings.host}:{settings.grpc_port}" if settings.grpc_enabled else "off"
    rows = [
        ("OTLP/HTTP + API", f"http://{settings.host}:{settings.port} (dashboard at /ui)"),
        ("OTLP/gRPC", grpc),
        ("database", without_password(settings.database_url)),
        ("attributors", ", ".join(settings.attributors) or "none"),
        ("model endpoint", _model_endpoint(settings, asking)),
        ("workers", _workers(settings)),
        ("auth", _auth(settings)),
    ]
    width = max(len(label) for label, _ in rows)
    return "\n".join([f"faultfinder {version}"] + [f"  {k:<{width}}  {v}" for k, v in rows])
