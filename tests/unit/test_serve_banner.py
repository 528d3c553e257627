"""`faultfinder serve --attributors` and the start-up banner: an operator sees which
attributors, model endpoint, database, ports and keys are in effect."""

from __future__ import annotations

from typing import Any

import pytest
import uvicorn
from click.testing import CliRunner

import faultfinder.server.app
from faultfinder.cli.main import main
from faultfinder.server.settings import Settings


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[Settings]:
    """`serve` up to the point where it would start serving: the settings it built."""
    built: list[Settings] = []

    def create_app(settings: Settings) -> object:
        built.append(settings)
        return object()

    def run(app: object, **options: Any) -> None:
        return None

    monkeypatch.setattr(faultfinder.server.app, "create_app", create_app)
    monkeypatch.setattr(uvicorn, "run", run)
    for name in ("FAULTFINDER_ATTRIBUTORS", "FAULTFINDER_API_KEYS", "FAULTFINDER_LLM_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    return built


def test_serve_takes_its_attributors_and_says_what_it_runs(started: list[Settings]) -> None:
    result = CliRunner().invoke(
        main,
        [
            "serve",
            "--attributors",
            "learned,all_at_once",
            "--database-url",
            "postgresql+asyncpg://faultfinder:s3cret@db.internal/faultfinder",
            "--port",
            "4999",
        ],
        env={"FAULTFINDER_API_KEYS": "k1,k2", "FAULTFINDER_LLM_BASE_URL": "http://gpu:8000/v1"},
    )
    assert result.exit_code == 0, result.output
    (settings,) = started
    assert settings.attributors == ["learned", "all_at_once"]
    banner = result.stderr
    assert "s3cret" not in banner
    assert "postgresql+asyncpg://faultfinder:***@db.internal/faultfinder" in banner
    assert "learned, all_at_once" in banner
    assert "http://gpu:8000/v1" in banner and "asked by all_at_once" in banner
    assert "http://127.0.0.1:4999" in banner
    assert "on (2 API key(s)" in banner


def test_the_banner_says_when_the_sidecar_is_open_and_no_model_is_asked(
    started: list[Settings],
) -> None:
    result = CliRunner().invoke(main, ["serve", "--no-grpc"])
    assert result.exit_code == 0, result.output
    banner = result.stderr
    assert "learned, first_error" in banner
    assert "unused: no attributor asks a model" in banner
    assert "auth" in banner and "off (open" in banner
    assert "OTLP/gRPC" in banner and "  off" in banner


def test_an_unknown_attributor_stops_serve_with_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: None)
    result = CliRunner().invoke(main, ["serve", "--attributors", "learned,no_such_method"])
    assert result.exit_code != 0
    assert "no_such_method" in result.output
