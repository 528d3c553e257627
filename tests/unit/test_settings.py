"""Settings: argument beats environment beats default; bad values name the field."""

from __future__ import annotations

import pytest

from faultfinder.server.settings import SettingsError, load_settings


def test_argument_beats_environment_beats_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FAULTFINDER_QUIET_PERIOD", raising=False)
    assert load_settings().quiet_period == 30.0
    monkeypatch.setenv("FAULTFINDER_QUIET_PERIOD", "2.5")
    assert load_settings().quiet_period == 2.5
    assert load_settings(quiet_period=7).quiet_period == 7.0
    # None means "not given on the command line": the environment still applies.
    assert load_settings(quiet_period=None).quiet_period == 2.5


@pytest.mark.parametrize(
    ("env", "value", "named"),
    [
        ("FAULTFINDER_PORT", "70000", "port"),
        ("FAULTFINDER_QUIET_PERIOD", "soon", "quiet_period"),
        ("FAULTFINDER_DATABASE_URL", "mysql://x/y", "database_url"),
        ("FAULTFINDER_INGEST_QUEUE_SPANS", "0", "ingest_queue_spans"),
        ("FAULTFINDER_LLM_PREFILTER_TOP_K", "-1", "llm_prefilter_top_k"),
        ("FAULTFINDER_AUDIT_BUSY_SHARE", "0", "audit_busy_share"),
    ],
)
def test_invalid_values_stop_start_up_naming_the_field(
    monkeypatch: pytest.MonkeyPatch, env: str, value: str, named: str
) -> None:
    monkeypatch.setenv(env, value)
    with pytest.raises(SettingsError) as excinfo:
        load_settings()
    assert named in str(excinfo.value)
    assert env in str(excinfo.value)


def test_unknown_setting_is_refused() -> None:
    with pytest.raises(SettingsError, match="no_such_knob"):
        load_settings(no_such_knob=1)


def test_settings_are_frozen() -> None:
    settings = load_settings()
    with pytest.raises(ValueError):
        settings.port = 1  # type: ignore[misc]


def test_the_llm_prefilter_setting_reaches_every_llm_attributor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from faultfinder.attributors.base import get_attributor
    from faultfinder.attributors.llm.methods import LLM_METHODS
    from faultfinder.server.composition import attributor_context_for

    monkeypatch.setenv("FAULTFINDER_LLM_PREFILTER_TOP_K", "3")
    monkeypatch.setenv("FAULTFINDER_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    context = attributor_context_for(load_settings(), None)
    assert context.llm.base_url == "http://127.0.0.1:9/v1"
    for name in LLM_METHODS:
        attributor = get_attributor(name, context)
        assert attributor.prefilter_top_k == 3, name  # type: ignore[attr-defined]
    monkeypatch.delenv("FAULTFINDER_LLM_PREFILTER_TOP_K")
    a2p = get_attributor("a2p", attributor_context_for(load_settings(), None))
    assert a2p.prefilter_top_k == 0  # type: ignore[attr-defined]
