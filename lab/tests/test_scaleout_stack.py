"""The committed swarm stacks (deploy/swarm/<deployment>/stack.yml) without an engine: each serves its
deployment's [scaleout] model and what it calls, as the deployment's Kubernetes pod does (image, gate,
policy, ports, probe path, bundle mount, memory); Prometheus records the prometheus-adapter rule with the
swarm's labels; the balancers reach the stack's service."""

from __future__ import annotations

import re

import pytest
import yaml

from harness import PROJECT_ROOT
from harness.deployments import get_deployment
from harness.repository import dependencies
from harness_lab.manifest import lab_manifest
from harness_lab.scaleout.swarm import JOB, QUEUE_METRIC, STACKS, loaded_models, recording_rule

K8S = PROJECT_ROOT / "deploy" / "k8s"
SWARMED = sorted(path.parent.name for path in STACKS.glob("*/stack.yml"))


def services(name: str) -> dict:
    return yaml.safe_load((STACKS / name / "stack.yml").read_text())["services"]


def flags(command: list[str]) -> dict[str, str]:
    return dict(arg.split("=", 1) for arg in command if arg.startswith("--") and "=" in arg)


def default(value: str) -> str:
    """The default of a ``${VARIABLE:-default}`` value."""
    return re.fullmatch(r"\$\{\w+:-(.+)\}", value).group(1)


def test_the_deployment_with_a_scaleout_model_has_a_stack():
    assert "embedding_cpu" in SWARMED


@pytest.mark.parametrize("name", SWARMED)
def test_the_stack_loads_the_scaleout_model_and_what_it_calls(name):
    deployment = get_deployment(name)
    table = lab_manifest(deployment).scaleout
    called = [m for m in dependencies(deployment.model_repository, [table.model]) if m != table.model]
    models = loaded_models(STACKS / name / "stack.yml")
    assert models[0] == table.model and sorted(models[1:]) == sorted(called)
    assert set(table.rolled_models) <= set(models)


@pytest.mark.parametrize("name", SWARMED)
def test_the_stack_runs_the_kubernetes_pod(kustomized, name):
    """The replicas run what the deployment's Kubernetes pod runs: the same image, gate and policy file,
    ports, readiness path and startup budget, repository under the bundle mount, environment, memory reservation
    and limit."""
    pod = next(o for o in kustomized(K8S / name) if o["kind"] == "Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    triton = services(name)["triton"]
    assert default(triton["image"]) == container["image"]
    gate, k8s_gate = triton["command"], container["command"]
    assert gate[: gate.index("--")][:4] == k8s_gate[:4] == ["python3", "-m", "triton_gate", "serve"]
    for flag in ("--http-port", "--metrics-port", "--policy-file"):
        assert flags(gate[: gate.index("--")])[flag] == flags(k8s_gate[: k8s_gate.index("--")])[flag], flag
    config = yaml.safe_load((STACKS / name / "stack.yml").read_text())["configs"]
    policy = next(c for c in triton["configs"] if c["target"] == flags(gate)["--policy-file"])
    assert (STACKS / name / config[policy["source"]]["file"]).resolve() == K8S / name / "gate-policy.json"
    bundle = next(v for v in triton["volumes"] if v["type"] == "bind")["target"]
    assert bundle == next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == "bundle")
    assert flags(gate)["--model-repository"] == flags(k8s_gate)["--model-repository"] == f"{bundle}/model_repository"
    assert triton.get("environment", {}) == {e["name"]: e["value"] for e in container.get("env", [])}
    check = triton["healthcheck"]["test"][-1]
    ready = container["readinessProbe"]["httpGet"]["path"]
    assert f"/dev/tcp/127.0.0.1/{flags(gate)['--http-port']}" in check and f"GET {ready} " in check, check
    startup = container["startupProbe"]
    assert triton["healthcheck"]["start_period"] == f"{startup['periodSeconds'] * startup['failureThreshold']}s"
    memory = triton["deploy"]["resources"]
    assert memory["reservations"]["memory"] + "i" == container["resources"]["requests"]["memory"]
    assert memory["limits"]["memory"] + "i" == container["resources"]["limits"]["memory"]


def test_prometheus_records_the_adapter_rule_with_the_swarms_labels():
    """One rule text: the ConfigMap's prometheus-adapter template with the swarm's job for the label
    matchers and one series per task."""
    configmap = yaml.safe_load((K8S / "base" / "prometheus-adapter-rules.yaml").read_text())
    rule = yaml.safe_load(configmap["data"]["config.yaml"])["rules"][0]
    swarm = rule["metricsQuery"].replace("<<.LabelMatchers>>", f'job="{JOB}"').replace("<<.GroupBy>>", "instance")
    assert recording_rule() == swarm and rule["name"]["as"] == QUEUE_METRIC
    scrape = yaml.safe_load((STACKS / "prometheus.yml").read_text())["scrape_configs"][0]
    assert scrape["job_name"] == JOB and scrape["dns_sd_configs"][0]["names"] == ["tasks.triton"]


@pytest.mark.parametrize("name", SWARMED)
def test_the_balancers_reach_the_stacks_replicas(name):
    stack = services(name)
    haproxy, nginx = (STACKS / "haproxy.cfg").read_text(), (STACKS / "nginx.conf").read_text()
    port = flags(stack["triton"]["command"])["--http-port"]
    assert f"server-template t 8 tasks.triton:{port}" in haproxy and "set $replicas tasks.triton;" in nginx
    assert f"proxy_pass http://$replicas:{port};" in nginx
    nginx_stack = yaml.safe_load((STACKS / "nginx.yml").read_text())["services"]["lb"]["command"]
    mounted = {c["target"] for c in stack["lb"]["configs"]}
    assert stack["lb"]["command"][-1] in mounted and nginx_stack[nginx_stack.index("-c") + 1] in mounted
