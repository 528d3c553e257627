"""The deployment files in deploy/ agree with the code: the Collector routes by trace id to
every sidecar replica, and every faultfinder container runs a real subcommand with
settings that faultfinder accepts."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from faultfinder.cli import main
from faultfinder.server.settings import Settings, SettingsError, load_settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
GRPC_DEFAULT = Settings.model_fields["grpc_port"].default
HTTP_DEFAULT = Settings.model_fields["port"].default


def settings_variables() -> set[str]:
    """Every environment variable the sidecar's settings read."""
    names: set[str] = set()
    for name, field in Settings.model_fields.items():
        alias = field.validation_alias
        choices = getattr(alias, "choices", None)
        if choices:
            names.update(str(choice) for choice in choices if str(choice) != name)
        else:
            names.add(f"FAULTFINDER_{name.upper()}")
    return names


def collector_configs() -> Iterator[tuple[str, dict[str, Any]]]:
    yield "deploy/otelcol.yaml", yaml.safe_load((DEPLOY / "otelcol.yaml").read_text())
    for document in k8s_documents():
        if document["kind"] == "ConfigMap" and "config.yaml" in document.get("data", {}):
            yield "deploy/k8s ConfigMap", yaml.safe_load(document["data"]["config.yaml"])


def k8s_documents() -> list[dict[str, Any]]:
    documents = []
    for path in sorted(K8S.glob("*.yaml")):
        documents += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return documents


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return loaded


_INTERPOLATION = re.compile(r"\$\{[A-Z_]+:-([^}]*)\}")


def interpolated(value: object) -> str:
    """A compose value with `${VAR:-default}` replaced by its default."""
    return _INTERPOLATION.sub(lambda match: match.group(1), str(value))


@dataclass
class Container:
    """A faultfinder process some deployment file starts."""

    where: str
    args: list[str]
    env: dict[str, str]


def parse_command(args: list[str]) -> tuple[str, dict[str, Any]]:
    """Resolve `args` to a faultfinder subcommand and parse its options (nothing runs)."""
    command: click.Command = main
    path: list[str] = []
    rest = list(args)
    context = click.Context(main, info_name="faultfinder")
    while isinstance(command, click.Group):
        assert rest, f"{args}: names a command group, not a command"
        name, rest = rest[0], rest[1:]
        sub = command.get_command(context, name)
        assert sub is not None, f"{args}: faultfinder has no command {' '.join([*path, name])!r}"
        path.append(name)
        command = sub
    parsed = command.make_context(" ".join(path), rest, parent=context)
    return " ".join(path), dict(parsed.params)


def compose_containers() -> list[Container]:
    services = compose()["services"]
    found = []
    for name, service in services.items():
        if not str(service.get("image", "")).startswith("faultfinder"):
            continue
        env = {key: interpolated(value) for key, value in service.get("environment", {}).items()}
        found.append(Container(f"compose service {name}", list(service["command"]), env))
    return found


def k8s_containers() -> list[Container]:
    documents = k8s_documents()
    secrets = {
        doc["metadata"]["name"]: doc.get("stringData", {})
        for doc in documents
        if doc["kind"] == "Secret"
    }
    found = []
    for doc in documents:
        if doc["kind"] != "Deployment":
            continue
        for container in doc["spec"]["template"]["spec"]["containers"]:
            if not container["image"].startswith("faultfinder:"):
                continue
            assert "command" not in container, "the image's entrypoint is faultfinder"
            env: dict[str, str] = {}
            for source in container.get("envFrom", []):
                name = source["secretRef"]["name"]
                assert name in secrets, f"{doc['metadata']['name']}: no Secret {name!r}"
                env.update(secrets[name])
            env.update({item["name"]: str(item["value"]) for item in container.get("env", [])})
            found.append(Container(f"Deployment {doc['metadata']['name']}", container["args"], env))
    return found


ALL_CONTAINERS = compose_containers() + k8s_containers()


def grpc_port(container: Container) -> int:
    command, params = parse_command(container.args)
    assert command == "serve"
    port = params.get("grpc_port") or container.env.get("FAULTFINDER_GRPC_PORT") or GRPC_DEFAULT
    return int(port)


# --- the Collector ----------------------------------------------------------------------


@pytest.mark.parametrize(("where", "config"), list(collector_configs()), ids=lambda v: str(v)[:30])
def test_collector_routes_every_trace_to_one_replica_and_retries(
    where: str, config: dict[str, Any]
) -> None:
    exporter = config["exporters"]["loadbalancing"]
    assert exporter["routing_key"] == "traceID", where
    otlp = exporter["protocol"]["otlp"]
    assert "endpoint" not in otlp  # the resolver supplies one per replica
    assert otlp["tls"]["insecure"] is True  # the sidecar's gRPC port speaks plain h2c
    # faultfinder answers UNAVAILABLE when saturated: the exporter must retry and queue.
    assert otlp["retry_on_failure"]["enabled"] is True
    assert otlp["sending_queue"]["enabled"] is True
    assert otlp["headers"]["authorization"].startswith("Bearer ")
    traces = config["service"]["pipelines"]["traces"]
    assert "loadbalancing" in traces["exporters"]
    for kind in ("receivers", "processors", "exporters"):
        for component in traces.get(kind, []):
            assert component in config[kind], f"{where}: {kind[:-1]} {component!r} is not defined"
    grpc = config["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]
    assert grpc.endswith(":4317")


def test_compose_collector_lists_every_replica_at_its_grpc_port() -> None:
    services = compose()["services"]
    hostnames = yaml.safe_load((DEPLOY / "otelcol.yaml").read_text())["exporters"]["loadbalancing"][
        "resolver"
    ]["static"]["hostnames"]
    replicas = {
        c.where.removeprefix("compose service "): grpc_port(c)
        for c in compose_containers()
        if parse_command(c.args)[0] == "serve"
    }
    assert len(replicas) >= 2
    listed = {host: int(port) for host, port in (entry.split(":") for entry in hostnames)}
    assert listed == replicas
    otelcol = services["otelcol"]
    assert "contrib" in otelcol["image"]  # the core distribution has no loadbalancing exporter
    mounted = [volume.split(":")[0] for volume in otelcol["volumes"]]
    assert "./otelcol.yaml" in mounted and (DEPLOY / "otelcol.yaml").exists()
    depends = set(otelcol["depends_on"])
    assert set(replicas) <= depends


def test_k8s_collector_resolves_a_headless_service_of_the_sidecar_pods() -> None:
    documents = k8s_documents()
    config = next(cfg for where, cfg in collector_configs() if "ConfigMap" in where)
    dns = config["exporters"]["loadbalancing"]["resolver"]["dns"]
    name, namespace, *_ = dns["hostname"].split(".")
    service = next(
        doc
        for doc in documents
        if doc["kind"] == "Service"
        and doc["metadata"]["name"] == name
        and doc["metadata"]["namespace"] == namespace
    )
    assert service["spec"]["clusterIP"] == "None"  # DNS returns every pod, not one VIP
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == dns["port"]]
    serving = {c.where for c in k8s_containers() if parse_command(c.args)[0] == "serve"}
    sidecars = [
        doc
        for doc in documents
        if doc["kind"] == "Deployment" and f"Deployment {doc['metadata']['name']}" in serving
    ]
    assert len(sidecars) == 1 and sidecars[0]["spec"]["replicas"] >= 2
    pod = sidecars[0]["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    container = pod["spec"]["containers"][0]
    (target,) = [p for p in container["ports"] if p["name"] == port["targetPort"]]
    sidecar = next(c for c in k8s_containers() if c.where.endswith(sidecars[0]["metadata"]["name"]))
    assert target["containerPort"] == grpc_port(sidecar)


# --- faultfinder containers -------------------------------------------------------------


def test_every_deployment_runs_replicas_and_separate_workers() -> None:
    for containers in (compose_containers(), k8s_containers()):
        commands = [parse_command(c.args)[0] for c in containers]
        assert "serve" in commands and "worker" in commands
        for container in containers:
            if parse_command(container.args)[0] == "serve":
                # Replicas leave attribution to the workers.
                assert container.env.get("FAULTFINDER_WORKERS") == "0", container.where


@pytest.mark.parametrize("container", ALL_CONTAINERS, ids=lambda c: c.where)
def test_containers_run_real_commands_with_settings_faultfinder_accepts(
    container: Container, monkeypatch: pytest.MonkeyPatch
) -> None:
    command, params = parse_command(container.args)  # raises on unknown commands or options
    assert command in ("serve", "worker")
    if command == "serve":
        port = params.get("port") or HTTP_DEFAULT
        assert int(port) == 4318  # what the probes, Services and compose ports point at
    unknown = set(container.env) - settings_variables()
    assert not unknown, f"{container.where}: not faultfinder settings: {sorted(unknown)}"
    assert container.env["FAULTFINDER_DATABASE_URL"].startswith("postgresql+asyncpg://")
    for variable in settings_variables():
        monkeypatch.delenv(variable, raising=False)
    for variable, value in container.env.items():
        monkeypatch.setenv(variable, value)
    try:
        settings = load_settings()
    except SettingsError as exc:
        pytest.fail(f"{container.where}: {exc}")
    if command == "serve":
        assert not settings.is_loopback  # reachable from other containers
        assert settings.api_keys and settings.ingest_keys  # not an open sidecar on the network


def test_compose_builds_the_repository_image_whose_entrypoint_is_faultfinder() -> None:
    for name, service in compose()["services"].items():
        if not str(service.get("image", "")).startswith("faultfinder"):
            continue
        context = (DEPLOY / service["build"]["context"]).resolve()
        dockerfile = context / service["build"]["dockerfile"]
        assert dockerfile.exists(), name
        assert 'ENTRYPOINT ["faultfinder"]' in dockerfile.read_text()


def test_kustomization_applies_every_manifest_namespace_first() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    resources = kustomization["resources"]
    assert resources[0] == "namespace.yaml"
    manifests = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(resources) == manifests
    for document in k8s_documents():
        if document["kind"] == "Deployment":
            spec = document["spec"]
            labels = spec["template"]["metadata"]["labels"]
            assert spec["selector"]["matchLabels"].items() <= labels.items()


def test_the_command_parser_used_here_refuses_what_faultfinder_refuses() -> None:
    with pytest.raises(AssertionError, match="no command"):
        parse_command(["serv"])
    with pytest.raises(click.NoSuchOption):
        parse_command(["serve", "--workers", "2"])
    assert parse_command(["db", "upgrade"])[0] == "db upgrade"
