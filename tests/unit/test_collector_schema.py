"""The OpenTelemetry Collector configs in deploy/ pass the Collector's config schema: the
JSON Schema generated from the Collector's own config structs (tests/data/otelcol), so
unknown components, misspelt fields and wrong types fail here as `otelcol validate` would
fail them (no Collector binary with the contrib components installs on this machine)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from tests.unit.test_deploy_files import ROOT, collector_configs

COLLECTOR_SCHEMA = ROOT / "tests" / "data" / "otelcol" / "config.schema.json"


@pytest.mark.parametrize(("where", "config"), list(collector_configs()), ids=lambda v: str(v)[:30])
def test_collector_config_passes_the_collectors_config_schema(
    where: str, config: dict[str, Any]
) -> None:
    # The schema generated from the Collector's own config structs (tests/data/otelcol):
    # unknown components, misspelt fields and wrong types fail as `otelcol validate` would.
    validator = Draft202012Validator(json.loads(COLLECTOR_SCHEMA.read_text()))
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in
              validator.iter_errors(config)]  # fmt: skip
    assert errors == [], where
    assert set(config["service"]["pipelines"]) >= {"traces", "logs"}
    # The check has teeth: a misspelt field and a list given as a string are refused.
    broken = json.loads(json.dumps(config))
    broken["processors"]["batch"]["send_batch_sise"] = 512
    broken["exporters"]["loadbalancing"]["routing_key"] = ["traceID"]
    assert len(list(validator.iter_errors(broken))) == 2
