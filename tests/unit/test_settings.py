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


@pytest.mark.parametrize(
    ("cores", "audit", "processes", "auditor_apart", "decoders"),
    [
        ({0}, "true", None, False, 0),  # one core: everything in one process
        ({0, 1}, "true", None, True, 0),  # two: the auditor in its own process
        ({0, 1}, "false", None, False, 1),  # auditor off: the second process decodes
        ({0, 1, 2, 3}, "true", "4", True, 2),
        ({0, 1}, "true", "1", False, 0),  # asked for one process: one
    ],
)
def test_processes_default_to_two_on_two_cores_and_the_auditor_takes_the_second(
    monkeypatch: pytest.MonkeyPatch,
    cores: set[int],
    audit: str,
    processes: str | None,
    auditor_apart: bool,
    decoders: int,
) -> None:
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: cores)
    monkeypatch.setenv("FAULTFINDER_AUDIT", audit)
    if processes is None:
        monkeypatch.delenv("FAULTFINDER_PROCESSES", raising=False)
    else:
        monkeypatch.setenv("FAULTFINDER_PROCESSES", processes)
    settings = load_settings()
    assert settings.processes == (int(processes) if processes else min(len(cores), 2))
    assert settings.audit_in_process is auditor_apart
    assert settings.decoder_processes == decoders
