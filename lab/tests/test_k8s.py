"""`make k8s` output for every deployment: valid against the Kubernetes API schemas (offline, with
``kubernetes-validate``'s strict schemas), and wired together (selectors, probes, autoscaler metric,
bundle layout). Pure unit tests: nothing is served, nothing is applied to a cluster.

KServe's ``InferenceService`` is a custom resource whose CRD is not in ``kubernetes-validate``: its
predictor's container and its metadata are validated as the core ``Container`` and ``ObjectMeta``
schemas (inside a Pod) they are, the KServe-specific fields against the values KServe documents.
"""

from __future__ import annotations

import copy
import shutil
import tarfile
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from harness.deployments import discover, load_deployment
from harness.serving.packenv import packed_repository, resolve_env_path
from harness_lab.scaleout import k8s
from harness_lab.scaleout.__main__ import main as scaleout_main
from harness_lab.scaleout.footprint import load_footprints
from triton_gate.policy import GatePolicy

#: preStop ``sleep`` needs 1.30; the newest schemas kubernetes-validate carries are checked too.
K8S_VERSIONS = ["1.30", kubernetes_validate.utils.latest_version()]
DEPLOYMENTS = discover()
IDS = [d.name for d in DEPLOYMENTS]


def rendered(deployment, **options) -> dict[str, list[dict]]:
    """Rendered objects as a user's kubectl reads them: dumped to YAML and loaded back."""
    files = k8s.render(deployment, k8s.RenderOptions(**options))
    return {name: list(yaml.safe_load_all(k8s.dump(objects))) for name, objects in files.items()}


def by_kind(objects: list[dict]) -> dict[str, dict]:
    return {o["kind"]: o for o in objects}


def validate_in_pod(container: dict, metadata: dict | None = None) -> None:
    """Validate a container (and object metadata) as a core Pod embeds them, with the strict schemas."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata or {"name": "check"},
        "spec": {"containers": [container]},
    }
    kubernetes_validate.validate(pod, K8S_VERSIONS[0], strict=True)


def test_four_deployments_are_rendered():
    assert {"cn_clip", "embedding_cpu", "resnet_npu", "yolo11_ensemble"} <= set(IDS)


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=IDS)
def test_core_objects_pass_strict_schema_validation(deployment, version):
    objects = rendered(deployment)["triton.yaml"]
    assert [o["kind"] for o in objects] == [
        "Deployment",
        "Service",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
        "ConfigMap",
    ]
    for obj in objects:
        kubernetes_validate.validate(obj, version, strict=True)


def test_the_validator_rejects_a_broken_object():
    """The schema check can fail: a misspelt field and a wrong type are both caught."""
    deployment = by_kind(rendered(DEPLOYMENTS[0])["triton.yaml"])["Deployment"]
    misspelt = copy.deepcopy(deployment)
    misspelt["spec"]["template"]["spec"]["containers"][0]["readinessprobe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(misspelt, K8S_VERSIONS[0], strict=True)
    wrong_type = copy.deepcopy(deployment)
    wrong_type["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(wrong_type, K8S_VERSIONS[0], strict=True)


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=IDS)
def test_objects_are_wired_together(deployment):
    objects = by_kind(rendered(deployment)["triton.yaml"])
    dep, svc, hpa, pdb, rules = (
        objects[k] for k in ("Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget", "ConfigMap")
    )
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    for sel in (
        dep["spec"]["selector"]["matchLabels"],
        svc["spec"]["selector"],
        pdb["spec"]["selector"]["matchLabels"],
    ):
        assert sel.items() <= pod_labels.items()
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": dep["metadata"]["name"],
    }
    assert hpa["spec"]["minReplicas"] <= dep["spec"]["replicas"] <= hpa["spec"]["maxReplicas"]
    # The autoscaler's metric is the one the prometheus-adapter rule serves, made of Triton's counters.
    rule = yaml.safe_load(rules["data"]["config.yaml"])["rules"][0]
    assert hpa["spec"]["metrics"][0]["pods"]["metric"]["name"] == rule["name"]["as"]
    assert "nv_inference_queue_duration_us" in rule["metricsQuery"]
    assert "nv_inference_request_success" in rule["metricsQuery"]
    container = dep["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": 8000, "grpc": 8001, "metrics": 8002}
    assert {p["targetPort"] for p in svc["spec"]["ports"]} <= set(ports)
    assert dep["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == str(ports["metrics"])
    assert container["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    assert container["startupProbe"]["httpGet"]["path"] == "/v2/health/ready"
    # Zero-downtime rolls: never below the wanted replicas, endpoints drop a pod before SIGTERM.
    assert dep["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert (
        container["lifecycle"]["preStop"]["sleep"]["seconds"]
        < dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    )
    assert pdb["spec"]["maxUnavailable"] == 1


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=IDS)
def test_server_command_is_the_deployments_own(deployment):
    container = by_kind(rendered(deployment, gate=False)["triton.yaml"])["Deployment"]["spec"]["template"]["spec"][
        "containers"
    ][0]
    options = deployment.server_options("cpu")
    command = container["command"]
    assert command[0] == "tritonserver"
    assert f"--model-repository={k8s.BUNDLE_ROOT}/model_repository" in command
    for arg in options.extra_args + [f"--backend-config={v}" for v in options.backend_config]:
        assert arg in command
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts[k8s.BUNDLE_ROOT]["readOnly"] is True and "/dev/shm" in mounts


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=IDS)
def test_front_gate_in_front_of_tritonserver(deployment):
    """By default the gate's serve mode owns the public ports and runs the same tritonserver command."""
    plain = by_kind(rendered(deployment, gate=False)["triton.yaml"])["Deployment"]
    gated = by_kind(rendered(deployment)["triton.yaml"])["Deployment"]
    kubernetes_validate.validate(gated, K8S_VERSIONS[0], strict=True)
    command = gated["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:4] == ["python3", "-m", "triton_gate", "serve"]
    split = command.index("--")
    assert command[split + 1 :] == plain["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--http-port") + 1] == "8000" and "0.0.0.0" in command[:split]
    # the same gate policy the local and docker launchers give (public models, bounds, the /v1 mapping)
    policy = GatePolicy.model_validate_json(command[command.index("--policy-json") + 1])
    assert policy == deployment.gate_policy()


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=IDS)
def test_requests_come_from_the_measured_footprint(deployment):
    dep = by_kind(rendered(deployment)["triton.yaml"])["Deployment"]
    res = dep["spec"]["template"]["spec"]["containers"][0]["resources"]
    requested = int(res["requests"]["memory"].removesuffix("Mi"))
    limit = int(res["limits"]["memory"].removesuffix("Mi"))
    assert "cpu" not in res["limits"], "no CPU limit: throttling adds latency to every request"
    measured = load_footprints()["deployments"].get(deployment.name)
    source = dep["metadata"]["annotations"]["triton-harness/footprint"]
    if measured is None:
        assert source.startswith("not measured")
        pytest.skip(f"{deployment.name} has no measured footprint (python -m harness_lab.scaleout footprint)")
    assert source.startswith("measured")
    assert requested >= measured["peak_mib"] and limit > requested
    assert int(res["requests"]["cpu"].removesuffix("m")) >= 1000 * min(measured["cpu_cores_under_load"], 0.5)


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=IDS)
def test_inference_service(deployment):
    isvc = rendered(deployment)["inferenceservice.yaml"][0]
    assert isvc["apiVersion"] == "serving.kserve.io/v1beta1" and isvc["kind"] == "InferenceService"
    predictor = isvc["spec"]["predictor"]
    model = dict(predictor["model"])
    assert model.pop("modelFormat") == {"name": "triton"}
    assert model.pop("runtime") == "kserve-tritonserver"
    assert model.pop("protocolVersion") in ("v1", "v2", "grpc-v2")
    assert model.pop("storageUri").split("://")[0] in ("pvc", "s3", "gs", "hdfs", "webhdfs", "https", "oci")
    # The rest of ModelSpec is a core Container (KServe names it kserve-container).
    validate_in_pod({"name": "kserve-container", **model}, metadata=isvc["metadata"])
    assert f"--model-repository={k8s.BUNDLE_ROOT}/model_repository" in model["args"]
    assert 1 <= predictor["minReplicas"] <= predictor["maxReplicas"]


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=IDS)
def test_bundle_layout_reaches_the_packed_env(deployment, tmp_path):
    """The bundle as packed_repository writes it: every Python model's EXECUTION_ENV_PATH, resolved
    with the repository at /mnt/models/model_repository, lands on /mnt/models/envs/<env>."""
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
            inside = resolve_env_path(value, Path(k8s.BUNDLE_ROOT) / "model_repository" / config.parent.name)
            assert str(inside) == f"{k8s.BUNDLE_ROOT}/envs/{tarball.name}"
    assert (tmp_path / "bundle" / "envs" / tarball.name).exists()
    if not found:
        pytest.skip(f"{deployment.name} has no Python-backend model")


def test_a_copied_deployment_renders_with_its_scaleout_table(tmp_path, monkeypatch):
    """A new folder (the template use): its own name, and its lab [scaleout] table overrides the defaults."""
    source = next(d for d in DEPLOYMENTS if d.name == "embedding_cpu")
    folder = tmp_path / "my_embedder"
    shutil.copytree(
        source.model_repository / "embedding_onnx",
        folder / "model_repository" / "embedding_onnx",
        ignore=shutil.ignore_patterns("*.onnx"),
    )
    (folder / "deployment.toml").write_text('name = "my_embedder"\nentry_models = ["embedding_onnx"]\n')
    (tmp_path / "my_embedder.toml").write_text(
        "[scaleout]\nmin_replicas = 3\nmax_replicas = 12\nreplicas = 3\nqueue_target_us = 5000\nmemory_mib = 1024\n"
    )
    monkeypatch.setenv("HARNESS_LAB_DEPLOYMENTS_DIR", str(tmp_path))
    copied = load_deployment(folder)
    objects = by_kind(rendered(copied)["triton.yaml"])
    for obj in objects.values():
        kubernetes_validate.validate(obj, K8S_VERSIONS[0], strict=True)
    assert objects["Deployment"]["metadata"]["name"] == "triton-my-embedder"
    assert objects["Deployment"]["spec"]["replicas"] == 3
    hpa = objects["HorizontalPodAutoscaler"]["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (3, 12)
    assert hpa["metrics"][0]["pods"]["target"]["averageValue"] == "5000"
    resources = objects["Deployment"]["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources["requests"]["memory"] == "1024Mi"
    assert objects["Deployment"]["metadata"]["annotations"]["triton-harness/footprint"].startswith("not measured")


def test_command_line_writes_files_per_deployment(tmp_path, capsys):
    assert scaleout_main(["k8s", "--out", str(tmp_path), "--namespace", "inference"]) == 0
    for name in IDS:
        for file in ("triton.yaml", "inferenceservice.yaml"):
            objects = list(yaml.safe_load_all((tmp_path / name / file).read_text()))
            assert objects and all(o["metadata"]["namespace"] == "inference" for o in objects)
    assert scaleout_main(["k8s", "no_such_deployment", "--out", str(tmp_path)]) == 2
    assert "no deployment 'no_such_deployment'" in capsys.readouterr().err


def test_capacity_model_uses_only_levels_that_met_the_target():
    from harness_lab.scaleout.capacity import per_replica, replicas_for

    rows = [
        {"concurrency": 1, "perf_throughput": 40.0, "perf_latency_p99": 30.0},
        {"concurrency": 8, "perf_throughput": 120.0, "perf_latency_p99": 105.0},
    ]
    assert per_replica(rows, 100)["concurrency"] == 1
    assert per_replica(rows, 300)["concurrency"] == 8
    assert per_replica(rows, 10) is None
    # 1000/s at 70 % of 120/s per replica: 1000 / 84 = 11.9 -> 12 replicas; never fewer than one.
    assert replicas_for(1000, 120.0, 0.7) == 12 and replicas_for(1, 120.0, 0.7) == 1


def test_capacity_prediction_is_replicas_times_the_smallest_scenarios_replica(tmp_path):
    """The two-node run's predicted throughput: the served model's scenario with the smallest requests
    (nearest the run's one-sentence load), its best level within the p99 target, times the replicas."""
    import json

    from harness_lab.scaleout.capacity import predicted_throughput

    def row(benchmark, size, c, infer_s, p99, model="m"):
        return {
            "benchmark": benchmark,
            "model": model,
            "bytes_sent_per_request": size,
            "concurrency": c,
            "perf_throughput": infer_s,
            "perf_latency_p99": p99,
            "server_mode": "local",
            "target": "cpu",
        }

    rows = [
        row("m-sentence", 100, 1, 50.0, 20.0),
        row("m-sentence", 100, 8, 200.0, 250.0),
        row("m-passages", 9000, 8, 20.0, 900.0),
        row("other-sentence", 100, 8, 999.0, 10.0, model="other"),
    ]
    source = tmp_path / "results.json"
    source.write_text(json.dumps({"deployments": {"d": {"rows": rows}}}))
    three = predicted_throughput("d", "m", 3, p99_target_ms=300, source=source)
    assert three["scenario"] == "m-sentence" and three["at_concurrency"] == 8
    assert three["predicted_infer_s"] == 600.0
    assert predicted_throughput("d", "m", 2, p99_target_ms=100, source=source)["predicted_infer_s"] == 100.0
    assert predicted_throughput("d", "m", 1, p99_target_ms=10, source=source) is None
    assert predicted_throughput("d", "absent", 1, source=source) is None
