"""The deployment files in deploy/ agree with the code: the Collector routes by trace id to
every sidecar replica, every faultfinder container runs a real subcommand with settings
that faultfinder accepts, and the nightly benchmark runs on a schedule (Kubernetes CronJob,
a compose profile, a CI workflow) with a suite faultfinder reads."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from faultfinder.attributors.base import available_attributors
from faultfinder.cli import main
from faultfinder.datasets import WHO_AND_WHEN
from faultfinder.evaluation.nightly import load_suite
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
    """The long-running faultfinder services (those `up` starts); one-off jobs behind a
    profile, the nightly benchmark, are checked with the schedules below."""
    services = compose()["services"]
    found = []
    for name, service in services.items():
        if not str(service.get("image", "")).startswith("faultfinder") or service.get("profiles"):
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
    pipelines = config["service"]["pipelines"]
    for signal in ("traces", "logs"):  # GenAI events arrive as OTLP log records
        assert "loadbalancing" in pipelines[signal]["exporters"], f"{where}: {signal}"
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
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == int(dns["port"])]
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


# --- the nightly benchmark's schedules --------------------------------------------------

CI_WORKFLOW = DEPLOY / "ci" / "github-nightly.yml"
CRON_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
"""minute, hour, day of month, month, day of week (0 and 7 are Sunday)."""
_CRON_ITEM = re.compile(r"^(\*|(\d+)(?:-(\d+))?)(?:/(\d+))?$")


def cron_problem(expression: str) -> str | None:
    """Why `expression` is not a standard five-field cron schedule, or None."""
    fields = expression.split()
    if len(fields) != len(CRON_RANGES):
        return f"{expression!r} has {len(fields)} fields, not 5"
    for text, (low, high) in zip(fields, CRON_RANGES, strict=True):
        for item in text.split(","):
            match = _CRON_ITEM.match(item)
            if match is None:
                return f"{item!r} in {expression!r} is not *, N, N-M or one of them /S"
            first, last, step = match.group(2), match.group(3), match.group(4)
            values = [int(v) for v in (first, last) if v is not None]
            if any(not low <= value <= high for value in values) or (step and int(step) < 1):
                return f"{item!r} in {expression!r} is outside {low}-{high}"
            if len(values) == 2 and values[0] > values[1]:
                return f"{item!r} in {expression!r} is an empty range"
    return None


def test_the_cron_check_used_here_refuses_what_cron_refuses() -> None:
    assert cron_problem("30 2 * * *") is None and cron_problem("*/15 0-6 1,15 * 1-5") is None
    for bad in ("30 2 * *", "61 2 * * *", "30 24 * * *", "0 0 0 * *", "0 5-2 * * *", "@daily"):
        assert cron_problem(bad) is not None, bad


def nightly_variables() -> set[str]:
    """The environment variables `faultfinder bench nightly` reads: its options' and the
    model client's (LLM entries)."""
    command, _ = parse_command(["bench", "nightly"])
    context = click.Context(main, info_name="faultfinder")
    bench = main.get_command(context, "bench")
    assert isinstance(bench, click.Group)
    nightly = bench.get_command(context, "nightly")
    assert nightly is not None and command == "bench nightly"
    options = {str(p.envvar) for p in nightly.params if isinstance(p, click.Option) and p.envvar}
    model = {"OPENAI_BASE_URL", "OPENAI_API_KEY"} | {
        f"FAULTFINDER_LLM_{name.upper()}"
        for name in ("base_url", "model", "max_tokens", "timeout", "token_budget")
    }
    return options | model


@dataclass
class Scheduled:
    """A scheduled `faultfinder bench nightly` and where its suite comes from."""

    where: str
    args: list[str]
    env: dict[str, str]
    suite_file: Path
    """The repository file that the container sees at its --suite path."""
    writable: list[str]
    """Mount points of writable volumes."""


def k8s_cronjobs() -> list[dict[str, Any]]:
    return [doc for doc in k8s_documents() if doc["kind"] == "CronJob"]


def scheduled_nightlies() -> list[Scheduled]:
    found = []
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    generated = {g["name"]: g["files"] for g in kustomization.get("configMapGenerator", [])}
    secrets = {
        doc["metadata"]["name"]: doc.get("stringData", {})
        for doc in k8s_documents()
        if doc["kind"] == "Secret"
    }
    for job in k8s_cronjobs():
        pod = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        volumes = {volume["name"]: volume for volume in pod["volumes"]}
        for container in pod["containers"]:
            env = {item["name"]: str(item["value"]) for item in container.get("env", [])}
            for source in container.get("envFrom", []):
                env.update(secrets[source["secretRef"]["name"]])
            suite_path = Path(parse_command(container["args"])[1]["suite_path"])
            (mount,) = [
                m for m in container["volumeMounts"] if suite_path.parent == Path(m["mountPath"])
            ]
            config_map = volumes[mount["name"]]["configMap"]["name"]
            assert config_map in generated, f"no configMapGenerator {config_map!r}"
            (source_file,) = [f for f in generated[config_map] if Path(f).name == suite_path.name]
            writable = [
                m["mountPath"]
                for m in container["volumeMounts"]
                if not m.get("readOnly") and "emptyDir" in volumes[m["name"]]
            ]
            found.append(
                Scheduled(f"CronJob {job['metadata']['name']}", container["args"], env,
                          K8S / source_file, writable)
            )  # fmt: skip
    for name, service in compose()["services"].items():
        if not service.get("profiles") or not str(service.get("image")).startswith("faultfinder"):
            continue
        suite_path = parse_command(list(service["command"]))[1]["suite_path"]
        mounts = [volume.split(":") for volume in service["volumes"]]
        (source,) = [m[0] for m in mounts if m[1] == str(suite_path)]
        env = {key: interpolated(value) for key, value in service["environment"].items()}
        writable = [m[1] for m in mounts if len(m) == 2 and m[0] in compose()["volumes"]]
        found.append(
            Scheduled(f"compose service {name}", list(service["command"]), env,
                      DEPLOY / source, writable)
        )  # fmt: skip
    return found


@pytest.mark.parametrize("scheduled", scheduled_nightlies(), ids=lambda s: s.where)
def test_scheduled_nightlies_run_a_suite_faultfinder_reads_into_the_sidecars_database(
    scheduled: Scheduled,
) -> None:
    command, params = parse_command(scheduled.args)
    assert command == "bench nightly"
    suite = load_suite(scheduled.suite_file)  # raises SuiteError naming what is wrong
    unknown = {a.method for a in suite.attributors} - set(available_attributors())
    assert not unknown, f"{scheduled.where}: unregistered attributors {unknown}"
    assert any(d.database is True for d in suite.datasets), "the deployment's own labels"
    # The history goes where the sidecars (and their dashboard and /metrics) read it.
    assert scheduled.env["FAULTFINDER_DATABASE_URL"].startswith("postgresql+asyncpg://")
    unknown_env = set(scheduled.env) - settings_variables() - nightly_variables()
    assert not unknown_env, f"{scheduled.where}: not read by faultfinder: {sorted(unknown_env)}"
    # Its working folder (resumable results, report.html) is on a writable volume.
    assert any(str(params["out"]).startswith(path) for path in scheduled.writable)


def test_the_k8s_cronjob_runs_nightly_once_at_a_time_and_does_not_retry_a_regression() -> None:
    (job,) = k8s_cronjobs()
    spec = job["spec"]
    assert cron_problem(spec["schedule"]) is None
    assert spec["concurrencyPolicy"] == "Forbid"  # two nights never write one run together
    job_spec = spec["jobTemplate"]["spec"]
    pod = job_spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"  # podFailurePolicy requires it
    (container,) = pod["containers"]
    # A regression (exit 1) or a usage error (2) fails the Job; an evicted pod is retried
    # and continues the same suite run.
    (rule,) = [r for r in job_spec["podFailurePolicy"]["rules"] if r["action"] == "FailJob"]
    assert rule["onExitCodes"]["containerName"] == container["name"]
    assert rule["onExitCodes"]["operator"] == "In" and {1, 2} <= set(rule["onExitCodes"]["values"])
    assert job_spec["backoffLimit"] >= 1
    assert container["image"].startswith("faultfinder:") and "command" not in container


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl (kustomize)")
def test_kustomize_renders_the_cronjob_with_the_generated_suite() -> None:
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(K8S)], capture_output=True, text=True, check=True
    ).stdout
    documents = [doc for doc in yaml.safe_load_all(rendered) if doc]
    suites = [
        d for d in documents if d["kind"] == "ConfigMap" and "nightly-suite.toml" in d["data"]
    ]
    (config_map,) = suites
    (job,) = [d for d in documents if d["kind"] == "CronJob"]
    volumes = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["volumes"]
    names = [v["configMap"]["name"] for v in volumes if "configMap" in v]
    assert names == [config_map["metadata"]["name"]]  # the hashed name, rewritten
    assert config_map["data"]["nightly-suite.toml"] == (K8S / "nightly-suite.toml").read_text()


def test_the_compose_nightly_is_a_one_off_job_behind_a_profile() -> None:
    services = compose()["services"]
    (name,) = [n for n, s in services.items() if "nightly" in s.get("profiles", [])]
    service = services[name]
    assert service["restart"] == "no"  # a job, not a daemon: `up` does not start it
    assert service["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_the_ci_workflow_runs_the_repository_suite_every_night() -> None:
    workflow = yaml.safe_load(CI_WORKFLOW.read_text())
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads `on` as true
    (schedule,) = triggers["schedule"]
    assert cron_problem(schedule["cron"]) is None
    assert "workflow_dispatch" in triggers
    assert workflow["concurrency"]["cancel-in-progress"] is False
    (job,) = workflow["jobs"].values()
    steps = job["steps"]
    runs = [step["run"] for step in steps if "run" in step]
    (nightly,) = [run for run in runs if run.startswith("faultfinder bench nightly")]
    args = shlex.split(re.sub(r"\$\{\{[^}]*\}\}", "X", nightly))[1:]
    command, params = parse_command(args)
    assert command == "bench nightly"
    load_suite(ROOT / params["suite_path"])
    assert "github.run_id" in nightly  # a re-run of the job continues the same suite run
    env = job["env"]
    assert "secrets.FAULTFINDER_DATABASE_URL" in env["FAULTFINDER_DATABASE_URL"]
    unknown = set(env) - settings_variables() - nightly_variables()
    assert not unknown, f"not read by faultfinder: {sorted(unknown)}"
    # Who&When is laid out where FAULTFINDER_DATASETS_DIR says.
    datasets = env["FAULTFINDER_DATASETS_DIR"].rsplit("/", 1)[-1]
    assert any(f"{datasets}/{WHO_AND_WHEN}" in run for run in runs)
    (upload,) = [s for s in steps if str(s.get("uses", "")).startswith("actions/upload-artifact")]
    assert upload["if"] == "always()"
    assert Path(upload["with"]["path"]) == Path(params["out"])
