"""The deployment files are safe to operate: the Collector's pipelines (traces and logs)
are complete, every workload runs unprivileged on a read-only root with probes that ask
something real, the image checks its own health, and Prometheus scrapes /metrics with the
API key and alerts on metrics faultfinder exposes."""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from faultfinder.server.metrics import ServerMetrics
from faultfinder.server.worker_main import beat_until
from tests.unit.test_deploy_files import (
    DEPLOY,
    K8S,
    ROOT,
    collector_configs,
    compose,
    k8s_documents,
    parse_command,
)

PROMETHEUS = DEPLOY / "prometheus"
LONG_RUNNING = ("Deployment", "StatefulSet", "DaemonSet")
BATCH = ("CronJob", "Job")

# --- the Collector ----------------------------------------------------------------------

COLLECTOR_KINDS = ("receivers", "processors", "exporters")


def collector_problems(config: dict[str, Any]) -> list[str]:
    """What the Collector would refuse at start-up in `config`: a pipeline without
    receivers or exporters, a pipeline or service extension naming an undefined component,
    an unknown section; and what faultfinder needs: both traces and logs pipelines."""
    problems = []
    known = {*COLLECTOR_KINDS, "extensions", "connectors", "service"}
    problems += [f"unknown section {name!r}" for name in sorted(set(config) - known)]
    service = config.get("service") or {}
    pipelines = service.get("pipelines") or {}
    problems += [
        f"no {signal} pipeline" for signal in ("traces", "logs") if signal not in pipelines
    ]
    for extension in service.get("extensions", []):
        if extension not in (config.get("extensions") or {}):
            problems.append(f"extension {extension!r} is not defined")
    for name, pipeline in pipelines.items():
        if name.split("/")[0] not in ("traces", "logs", "metrics"):
            problems.append(f"pipeline {name!r} is not of a signal type")
        for kind in COLLECTOR_KINDS:
            listed = pipeline.get(kind) or []
            if kind != "processors" and not listed:
                problems.append(f"pipeline {name!r} has no {kind}")
            for component in listed:
                if component not in (config.get(kind) or {}):
                    problems.append(f"pipeline {name!r}: {kind[:-1]} {component!r} is not defined")
    return problems


@pytest.mark.parametrize(("where", "config"), list(collector_configs()), ids=lambda v: str(v)[:30])
def test_collector_pipelines_carry_traces_and_logs_through_defined_components(
    where: str, config: dict[str, Any]
) -> None:
    assert collector_problems(config) == [], where
    pipelines = config["service"]["pipelines"]
    # GenAI events (OTLP log records) take the spans' route, to the replica of their trace.
    assert pipelines["logs"]["receivers"] == pipelines["traces"]["receivers"] == ["otlp"]
    assert pipelines["logs"]["exporters"] == pipelines["traces"]["exporters"]
    assert pipelines["logs"]["processors"][0] == "memory_limiter"  # first, as documented
    assert "health_check" in config["service"]["extensions"]  # what the probes ask


def test_the_collector_check_used_here_refuses_what_the_collector_refuses() -> None:
    broken = yaml.safe_load((DEPLOY / "otelcol.yaml").read_text())
    del broken["service"]["pipelines"]["logs"]
    broken["service"]["pipelines"]["traces"]["processors"].append("tail_sampling")
    broken["service"]["pipelines"]["metrics"] = {"receivers": ["otlp"]}
    broken["service"]["extensions"].append("pprof")
    assert collector_problems(broken) == [
        "no logs pipeline",
        "extension 'pprof' is not defined",
        "pipeline 'traces': processor 'tail_sampling' is not defined",
        "pipeline 'metrics' has no exporters",
    ]


# --- Kubernetes workloads ---------------------------------------------------------------


def rendered_manifests() -> list[dict[str, Any]]:
    """What `kubectl kustomize deploy/k8s` renders, or the files themselves without kubectl."""
    if shutil.which("kubectl") is None:
        return k8s_documents()
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(K8S)], capture_output=True, text=True, check=True
    ).stdout
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    spec = workload["spec"]
    if workload["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    pod: dict[str, Any] = spec["template"]["spec"]
    return pod


WORKLOADS = [doc for doc in rendered_manifests() if doc["kind"] in (*LONG_RUNNING, *BATCH)]


def test_every_kind_of_workload_is_rendered() -> None:
    kinds = {doc["kind"] for doc in WORKLOADS}
    names = {doc["metadata"]["name"] for doc in WORKLOADS}
    assert kinds == {"Deployment", "CronJob"}
    assert {"faultfinder-sidecar", "faultfinder-worker", "otelcol"} <= names


@pytest.mark.parametrize("workload", WORKLOADS, ids=lambda w: w["metadata"]["name"])
def test_every_workload_runs_unprivileged_on_a_read_only_root(workload: dict[str, Any]) -> None:
    pod = pod_spec(workload)
    context = pod["securityContext"]
    assert context["runAsNonRoot"] is True
    assert isinstance(context["runAsUser"], int) and context["runAsUser"] > 0
    assert context["seccompProfile"]["type"] == "RuntimeDefault"
    volumes = {volume["name"]: volume for volume in pod.get("volumes", [])}
    for container in pod["containers"]:
        own = container["securityContext"]
        assert own["allowPrivilegeEscalation"] is False, container["name"]
        assert own["capabilities"]["drop"] == ["ALL"], container["name"]
        assert own["readOnlyRootFilesystem"] is True, container["name"]
        assert "privileged" not in own and "runAsUser" not in own  # the pod's user holds
        if container["image"].startswith("faultfinder:"):
            # Python, multiprocessing and the libraries write temporary files.
            (tmp,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/tmp"]
            assert "emptyDir" in volumes[tmp["name"]]


@pytest.mark.parametrize(
    "workload",
    [w for w in WORKLOADS if w["kind"] in LONG_RUNNING],
    ids=lambda w: w["metadata"]["name"],
)
def test_every_long_running_container_has_probes_that_ask_it_something(
    workload: dict[str, Any],
) -> None:
    for container in pod_spec(workload)["containers"]:
        ports = {p.get("name") for p in container.get("ports", [])} | {
            p["containerPort"] for p in container.get("ports", [])
        }
        for kind in ("readinessProbe", "livenessProbe"):
            probe = container[kind]
            if "httpGet" in probe:
                assert probe["httpGet"]["port"] in ports, f"{kind} asks an undeclared port"
            else:
                # The worker has no HTTP port: its probe reads the heartbeat file it writes.
                (heartbeat,) = [
                    value
                    for option, value in itertools.pairwise(container["args"])
                    if option == "--heartbeat-file"
                ]
                assert heartbeat in " ".join(probe["exec"]["command"])
        sidecar = container["image"].startswith("faultfinder:") and "serve" in container["args"]
        if sidecar:
            assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
            assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"


def worker_probe_commands() -> list[tuple[str, list[str], str]]:
    """(where, probe command, heartbeat path) of every worker's exec probe and healthcheck."""
    found = []
    for workload in WORKLOADS:
        for container in pod_spec(workload)["containers"]:
            args = container.get("args", [])
            if args[:1] == ["worker"]:
                heartbeat = parse_command(args)[1]["heartbeat_file"]
                for kind in ("readinessProbe", "livenessProbe"):
                    where = f"{workload['metadata']['name']} {kind}"
                    found.append((where, container[kind]["exec"]["command"], str(heartbeat)))
    for name, service in compose()["services"].items():
        command = [str(part) for part in service.get("command", [])]
        if command[:1] == ["worker"]:
            heartbeat = parse_command(command)[1]["heartbeat_file"]
            test = service["healthcheck"]["test"]
            assert test[0] == "CMD"
            found.append((f"compose {name}", test[1:], str(heartbeat)))
    return found


def test_worker_probes_pass_while_the_worker_beats_and_fail_once_it_stopped(
    tmp_path: Path,
) -> None:
    probes = worker_probe_commands()
    assert len(probes) == 3  # k8s readiness and liveness, compose healthcheck
    heartbeat = tmp_path / "worker.alive"

    def probe_passes(command: list[str], path: str) -> bool:
        assert command[0] == "python"  # the slim image has no shell tools
        local = [sys.executable, *(part.replace(path, str(heartbeat)) for part in command[1:])]
        return subprocess.run(local, capture_output=True, timeout=30).returncode == 0

    async def beating() -> list[bool]:
        stop = asyncio.Event()
        task = asyncio.create_task(beat_until(stop, heartbeat))
        await asyncio.sleep(0.1)
        passing = [
            await asyncio.to_thread(probe_passes, command, path) for _, command, path in probes
        ]
        stop.set()
        await task
        return passing

    assert all(asyncio.run(beating())), probes
    assert not heartbeat.exists()  # a stopped worker is neither ready nor alive
    assert not any(probe_passes(command, path) for _, command, path in probes)


# --- the image and compose --------------------------------------------------------------


@contextmanager
def healthz_server() -> Iterator[int]:
    """A loopback HTTP server answering 200 on /healthz only; yields its port."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/healthz" else 404)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def test_the_image_runs_unprivileged_and_checks_its_health_with_python() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    (user,) = re.findall(r"^USER (\d+)(?::(\d+))?$", dockerfile, re.M)
    uid = int(user[0])
    assert uid > 0  # numeric, so that runAsNonRoot can verify it
    assert f"chown {uid}:" in dockerfile and "VOLUME /data" in dockerfile  # SQLite's folder
    (check,) = re.findall(r"^HEALTHCHECK .*\n\s+CMD (\[.*\])$", dockerfile, re.M)
    command = yaml.safe_load(check)
    assert command[:2] == ["python", "-c"] and "/healthz" in command[2]
    # The check itself: passes on a port answering /healthz, fails on a closed one.
    with healthz_server() as port:
        environment = {**os.environ, "FAULTFINDER_PORT": str(port)}
        run = [sys.executable, *command[1:]]
        assert subprocess.run(run, env=environment, timeout=30).returncode == 0
    closed = {**os.environ, "FAULTFINDER_PORT": str(port)}
    assert subprocess.run(run, env=closed, capture_output=True, timeout=30).returncode != 0
    manifests_uid = {pod_spec(w)["securityContext"]["runAsUser"] for w in WORKLOADS}
    assert uid in manifests_uid


def test_every_long_running_compose_service_has_a_healthcheck() -> None:
    for name, service in compose()["services"].items():
        if service.get("profiles") or not str(service.get("image", "")).startswith(
            ("faultfinder", "postgres")
        ):
            continue
        check = service["healthcheck"]
        assert check["test"][0] == "CMD", name
        if service.get("command", [None])[0] == "serve":
            assert "/readyz" in check["test"][-1], name


# --- Prometheus ------------------------------------------------------------------------


def scrape_configs() -> list[tuple[str, dict[str, Any]]]:
    return [
        (path.name, yaml.safe_load(path.read_text()))
        for path in (PROMETHEUS / "prometheus.yml", PROMETHEUS / "kubernetes.yml")
    ]


@pytest.mark.parametrize(("name", "config"), scrape_configs(), ids=lambda v: str(v)[:20])
def test_prometheus_scrapes_metrics_with_the_api_key(name: str, config: dict[str, Any]) -> None:
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "faultfinder"]
    assert job.get("metrics_path", "/metrics") == "/metrics"
    # /metrics is behind the query API keys; faultfinder reads `Authorization: Bearer`.
    assert job["authorization"]["type"] == "Bearer"
    assert job["authorization"]["credentials_file"].startswith("/")
    assert config["rule_files"] == ["alerts.yml"]


def test_compose_prometheus_scrapes_every_replica_on_its_http_port() -> None:
    config = dict(scrape_configs())["prometheus.yml"]
    (job,) = config["scrape_configs"]
    targets = {t for group in job["static_configs"] for t in group["targets"]}
    services = compose()["services"]
    replicas = {
        f"{name}:4318"
        for name, service in services.items()
        if service.get("command", [None])[0] == "serve"
    }
    assert targets == replicas
    prometheus = services["prometheus"]
    (secret,) = prometheus["secrets"]
    assert job["authorization"]["credentials_file"] == f"/run/secrets/{secret}"
    assert compose()["secrets"][secret]["environment"] == "FAULTFINDER_API_KEY"


def alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def exposed_metric_names() -> set[str]:
    """Every sample name faultfinder's /metrics can expose (counters with `_total`)."""
    text = ServerMetrics().exposition().decode()
    names = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M):
        names.add(name)
        if kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    return names


_METRIC = re.compile(r"\b(faultfinder_[a-z_]+)\b")


def test_alert_rules_are_well_formed_and_use_metrics_faultfinder_exposes() -> None:
    rules = alert_rules()
    exposed = exposed_metric_names()
    assert {"faultfinder_blame_total", "faultfinder_attribution_jobs"} <= exposed
    used = set()
    for rule in rules:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
        assert re.fullmatch(r"[A-Z][A-Za-z]+", rule["alert"])
        assert rule["labels"]["severity"] in ("info", "warning", "critical")
        assert rule["annotations"]["summary"]
        if "for" in rule:
            assert re.fullmatch(r"\d+[smh]", rule["for"])
        names = set(_METRIC.findall(rule["expr"]))
        assert names <= exposed, f"{rule['alert']}: not in /metrics: {names - exposed}"
        used |= names
    # What an operator asks first: who is blamed, is attribution keeping up, is ingest refused.
    assert {
        "faultfinder_blame_total",
        "faultfinder_attribution_jobs",
        "faultfinder_ingest_requests_rejected_total",
    } <= used


@pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool (Prometheus)")
def test_promtool_accepts_the_rules_and_the_compose_config(tmp_path: Path) -> None:
    rules = subprocess.run(
        ["promtool", "check", "rules", str(PROMETHEUS / "alerts.yml")],
        capture_output=True,
        text=True,
    )
    assert rules.returncode == 0, rules.stdout + rules.stderr
    # The full check also opens the key file and the rule files: give it both.
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    key = tmp_path / "api-key"
    key.write_text("a-key")
    config["scrape_configs"][0]["authorization"]["credentials_file"] = str(key)
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    shutil.copy(PROMETHEUS / "alerts.yml", tmp_path / "alerts.yml")
    checked = subprocess.run(
        ["promtool", "check", "config", str(tmp_path / "prometheus.yml")],
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
