"""The committed Kubernetes objects (deploy/k8s/<deployment>/, a kustomize folder on deploy/k8s/base) as
`kubectl kustomize` renders them: valid against the Kubernetes API schemas (offline, kubernetes-validate's
strict schemas), wired together, and equal to the deployment they serve: its gate policy, its server
flags, the ports and probe paths the gate serves, requests that cover its measured footprint. Nothing is
applied to a cluster.
"""

from __future__ import annotations

import copy
import json
import tarfile
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from harness import PROJECT_ROOT
from harness.deployments import discover
from harness.serving.packenv import packed_repository, resolve_env_path
from triton_gate.policy import GatePolicy

K8S = PROJECT_ROOT / "deploy" / "k8s"
#: One replica measured in the CPU image (lab/docs/scaling.md, "Resource requests").
FOOTPRINTS = PROJECT_ROOT / "lab" / "harness_lab" / "scaleout" / "footprints.json"
#: preStop ``sleep`` needs 1.30; the newest schemas kubernetes-validate carries are checked too.
K8S_VERSIONS = ["1.30", kubernetes_validate.utils.latest_version()]
DEPLOYMENTS = discover()
IDS = [d.name for d in DEPLOYMENTS]
KINDS = {"ConfigMap", "Service", "Deployment", "PodDisruptionBudget", "HorizontalPodAutoscaler"}


def objects(kustomized, deployment) -> dict[str, dict]:
    """The deployment's objects by kind; its two ConfigMaps by their name before the suffix."""
    by_kind = {}
    for obj in kustomized(K8S / deployment.name):
        key = obj["kind"]
        if key == "ConfigMap":
            key = "gate-policy" if obj["metadata"]["name"].startswith("gate-policy") else "adapter-rules"
        assert key not in by_kind, f"two {key} objects"
        by_kind[key] = obj
    return by_kind


def container(objs: dict) -> dict:
    return objs["Deployment"]["spec"]["template"]["spec"]["containers"][0]


def flags(command: list[str]) -> dict[str, str]:
    """``--name=value`` flags of a command line, by name."""
    return dict(arg.split("=", 1) for arg in command if arg.startswith("--") and "=" in arg)


def test_every_deployment_has_a_folder():
    assert sorted(IDS) == sorted(p.name for p in K8S.iterdir() if p.is_dir() and p.name != "base")


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=IDS)
def test_objects_pass_strict_schema_validation(kustomized, deployment, version):
    rendered = kustomized(K8S / deployment.name)
    assert {o["kind"] for o in rendered} == KINDS
    for obj in rendered:
        kubernetes_validate.validate(obj, version, strict=True)


def test_the_validator_rejects_a_broken_object(kustomized):
    """The schema check can fail: a misspelt field and a wrong type are both caught."""
    deployment = objects(kustomized, DEPLOYMENTS[0])["Deployment"]
    misspelt = copy.deepcopy(deployment)
    misspelt["spec"]["template"]["spec"]["containers"][0]["readinessprobe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(misspelt, K8S_VERSIONS[0], strict=True)
    wrong_type = copy.deepcopy(deployment)
    wrong_type["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(wrong_type, K8S_VERSIONS[0], strict=True)


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=IDS)
def test_objects_are_wired_together(kustomized, deployment):
    objs = objects(kustomized, deployment)
    dep, svc, hpa, pdb = (objs[k] for k in ("Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget"))
    pod = dep["spec"]["template"]
    assert dep["metadata"]["name"] == "triton-" + deployment.name.replace("_", "-")
    for selector in (
        dep["spec"]["selector"]["matchLabels"],
        svc["spec"]["selector"],
        pdb["spec"]["selector"]["matchLabels"],
    ):
        assert selector.items() <= pod["metadata"]["labels"].items() and "app.kubernetes.io/instance" in selector
    anti = pod["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["podAffinityTerm"]["labelSelector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    target = {"apiVersion": "apps/v1", "kind": "Deployment", "name": dep["metadata"]["name"]}
    assert hpa["spec"]["scaleTargetRef"] == target
    assert hpa["spec"]["minReplicas"] <= dep["spec"]["replicas"] <= hpa["spec"]["maxReplicas"]
    # The autoscaler's metric is the one the prometheus-adapter rule serves, made of Triton's counters.
    rule = yaml.safe_load(objs["adapter-rules"]["data"]["config.yaml"])["rules"][0]
    assert hpa["spec"]["metrics"][0]["pods"]["metric"]["name"] == rule["name"]["as"]
    assert {"nv_inference_queue_duration_us", "nv_inference_request_success"} <= set(
        rule["metricsQuery"].replace("(", " ").replace("{", " ").split()
    )
    # The gate reads the policy ConfigMap the pod mounts.
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in container(objs)["volumeMounts"]}
    assert volumes["gate-policy"]["configMap"]["name"] == objs["gate-policy"]["metadata"]["name"]
    policy_file = Path(flags(container(objs)["command"])["--policy-file"])
    assert str(policy_file.parent) == mounts["gate-policy"] and policy_file.name in objs["gate-policy"]["data"]
    # Zero-downtime rolls: never below the wanted replicas; endpoints drop a pod before SIGTERM.
    assert dep["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0 and pdb["spec"]["maxUnavailable"] == 1
    assert container(objs)["lifecycle"]["preStop"]["sleep"]["seconds"] < pod["spec"]["terminationGracePeriodSeconds"]


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=IDS)
def test_the_pod_serves_the_deployment_behind_its_gate(kustomized, deployment):
    """The gate's policy is the one the harness gives this deployment's gate; tritonserver gets the
    deployment's own flags and the bundle's repository; ports and probes are the gate's."""
    objs = objects(kustomized, deployment)
    pod = container(objs)
    command = pod["command"]
    split = command.index("--")
    assert command[:4] == ["python3", "-m", "triton_gate", "serve"]
    policy = GatePolicy.model_validate_json(objs["gate-policy"]["data"]["policy.json"])
    assert policy == deployment.gate_policy()
    gate, triton = flags(command[:split]), command[split + 1 :]
    ports = {p["name"]: p["containerPort"] for p in pod["ports"]}
    assert ports == {
        "http": int(gate["--http-port"]),
        "grpc": int(gate["--grpc-port"]),
        "metrics": int(gate["--metrics-port"]),
    }
    assert {p["targetPort"] for p in objs["Service"]["spec"]["ports"]} == set(ports)
    assert objs["Deployment"]["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == str(
        ports["metrics"]
    )
    server = deployment.server_options("cpu")
    bundle = next(m["mountPath"] for m in pod["volumeMounts"] if m["name"] == "bundle")
    assert triton[0] == "tritonserver" and flags(triton)["--model-repository"] == f"{bundle}/model_repository"
    assert flags(triton)["--allow-grpc"] == str(server.allow_grpc).lower()
    own = [*server.extra_args, *(f"--backend-config={v}" for v in server.backend_config)]
    own += [f"--model-config-name={server.model_config_name}"] if server.model_config_name else []
    assert set(own) <= set(triton), (own, triton)
    assert {e["name"]: e["value"] for e in pod.get("env", [])} == server.env
    for probe, path in (("startupProbe", "ready"), ("readinessProbe", "ready"), ("livenessProbe", "live")):
        assert pod[probe]["httpGet"] == {"path": f"/v2/health/{path}", "port": "http"}


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=IDS)
def test_requests_and_startup_cover_the_measured_footprint(kustomized, deployment):
    """FOOTPRINTS: the memory request covers the measured peak, the startup probe waits at least the
    measured start."""
    measured = json.loads(FOOTPRINTS.read_text())["deployments"][deployment.name]
    pod = container(objects(kustomized, deployment))
    mib = {k: int(v["memory"].removesuffix("Mi")) for k, v in pod["resources"].items()}
    assert "cpu" not in pod["resources"]["limits"], "no CPU limit: throttling adds latency to every request"
    assert mib["requests"] >= measured["peak_mib"] and mib["limits"] > mib["requests"], (mib, measured)
    startup = pod["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= max(120, measured["start_to_ready_s"])


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=IDS)
def test_bundle_layout_reaches_the_packed_env(kustomized, deployment, tmp_path):
    """The bundle as packed_repository writes it: every Python model's EXECUTION_ENV_PATH, resolved
    with the repository where the pod mounts it, lands on <bundle>/envs/<env>."""
    bundle = next(
        m["mountPath"] for m in container(objects(kustomized, deployment))["volumeMounts"] if m["name"] == "bundle"
    )
    tarball = tmp_path / "cpu-image.tar.gz"
    with tarfile.open(tarball, "w:gz"):
        pass
    copy_root = packed_repository(deployment.model_repository, tarball, tmp_path / "bundle")
    found = 0
    for config in sorted(copy_root.glob("*/config.pbtxt")):
        parsed = text_format.Parse(config.read_text(), model_config_pb2.ModelConfig())
        if "EXECUTION_ENV_PATH" in parsed.parameters:
            found += 1
            value = parsed.parameters["EXECUTION_ENV_PATH"].string_value
            inside = resolve_env_path(value, Path(bundle) / "model_repository" / config.parent.name)
            assert str(inside) == f"{bundle}/envs/{tarball.name}"
    assert (tmp_path / "bundle" / "envs" / tarball.name).exists()
    if not found:
        pytest.skip(f"{deployment.name} has no Python-backend model")
