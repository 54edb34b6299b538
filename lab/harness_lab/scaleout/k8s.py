"""Kubernetes objects of a deployment (``make k8s``), built as dicts from its manifest and dumped with
PyYAML; a ``[scaleout]`` table overrides the defaults (lab/docs/scaling.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from harness import PROJECT_ROOT
from harness.deployments import Deployment
from harness_lab.manifest import lab_manifest
from harness_lab.scaleout.footprint import UNMEASURED, footprint, probes, resources
from triton_gate.serve import serve_command

DEFAULT_IMAGE = "triton-harness/tritonserver-cpu:2.51.0"
BUNDLE_ROOT = "/mnt/models"
QUEUE_METRIC = "nv_inference_queue_duration_us_per_request"
PART_OF = "triton-reference-deployments"
PORTS = (("http", 8000), ("grpc", 8001), ("metrics", 8002))


@dataclass
class RenderOptions:
    """What the rendered objects are parameterised by (CLI flags; the manifest's ``[scaleout]`` over them)."""

    image: str = DEFAULT_IMAGE
    namespace: str | None = None
    replicas: int = 2
    min_replicas: int = 2
    max_replicas: int = 8
    #: Mean queue wait per model execution (µs) the autoscaler holds the pods at.
    queue_target_us: int = 20000
    bundle_image: str | None = None
    storage_uri: str | None = None
    target: str = "cpu"
    #: Serve through the front gate: needs an image that carries ``triton_gate`` (the CPU image does).
    gate: bool = True
    #: The manifest's ``memory_mib`` / ``cpu`` (requests of one replica instead of its measured footprint).
    extra: dict = field(default_factory=dict)


def k8s_name(deployment: Deployment) -> str:
    """DNS-1123 name of a deployment's objects: ``triton-embedding-cpu``."""
    return "triton-" + deployment.name.lower().replace("_", "-")


def labels(deployment: Deployment) -> dict:
    return {
        "app.kubernetes.io/name": "tritonserver",
        "app.kubernetes.io/instance": k8s_name(deployment),
        "app.kubernetes.io/part-of": PART_OF,
        "triton-harness/deployment": deployment.name.replace("_", "-"),
    }


def selector(deployment: Deployment) -> dict:
    return {"app.kubernetes.io/name": "tritonserver", "app.kubernetes.io/instance": k8s_name(deployment)}


def header(api_version: str, kind: str, deployment: Deployment, options: RenderOptions, name=None, **extra) -> dict:
    """An object's ``apiVersion``, ``kind`` and ``metadata`` (its name, labels, namespace, ``extra``)."""
    meta = {"name": name or k8s_name(deployment), "labels": labels(deployment), **extra}
    if options.namespace:
        meta["namespace"] = options.namespace
    return {"apiVersion": api_version, "kind": kind, "metadata": meta}


def apply_manifest(deployment: Deployment, options: RenderOptions) -> RenderOptions:
    """The deployment's ``[scaleout]`` table over the defaults (CLI values already in ``options``)."""
    table = lab_manifest(deployment).scaleout.model_dump(exclude_none=True, exclude={"model", "rolled_models"})
    options.extra.update({key: table.pop(key) for key in ("memory_mib", "cpu") if key in table})
    for key, value in table.items():
        setattr(options, key, value)
    return options


def server_args(deployment: Deployment, options: RenderOptions) -> list[str]:
    """tritonserver's command line in the pod: the deployment's own flags, the bundle's repository."""
    server = deployment.server_options(options.target)
    args = [
        "tritonserver",
        f"--model-repository={BUNDLE_ROOT}/model_repository",
        "--exit-timeout-secs=25",
        f"--allow-grpc={'true' if server.allow_grpc else 'false'}",
        "--allow-metrics=true",
        "--strict-readiness=true",
    ]
    if server.model_config_name:
        args.append(f"--model-config-name={server.model_config_name}")
    args += [f"--backend-config={value}" for value in server.backend_config]
    return args + list(server.extra_args)


def gated(deployment: Deployment, command: list[str], *gate_args: str) -> list[str]:
    """``command`` behind the front gate, the deployment's gate policy inline (public models, bounds, /v1)."""
    return serve_command(command, *gate_args, "--policy-json", deployment.gate_policy().model_dump_json())


def triton_deployment(deployment: Deployment, options: RenderOptions) -> dict:
    measured, source = footprint(deployment)
    limits = resources(deployment, options.extra)
    command = server_args(deployment, options)
    if options.gate:
        ports = ("--http-port", "8000", "--grpc-port", "8001", "--metrics-port", "8002")
        command = gated(deployment, command, "--host", "0.0.0.0", *ports)
    container = {
        "name": "tritonserver",
        "image": options.image,
        "command": command,
        "ports": [{"name": name, "containerPort": port, "protocol": "TCP"} for name, port in PORTS],
        "resources": limits,
        **probes(measured.get("start_to_ready_s") or UNMEASURED["start_to_ready_s"]),
        # Endpoints drop the pod before SIGTERM reaches tritonserver: no new request lands on a draining pod.
        "lifecycle": {"preStop": {"sleep": {"seconds": 10}}},
        "volumeMounts": [
            {"name": "bundle", "mountPath": BUNDLE_ROOT, "readOnly": True},
            {"name": "dshm", "mountPath": "/dev/shm"},
        ],
        "securityContext": {"allowPrivilegeEscalation": False},
    }
    init = {
        "name": "model-bundle",
        "image": options.bundle_image or f"triton-harness/{deployment.name.replace('_', '-')}-bundle:latest",
        "command": ["cp", "-a", "/bundle/.", BUNDLE_ROOT + "/"],
        "volumeMounts": [{"name": "bundle", "mountPath": BUNDLE_ROOT}],
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
    }
    pod = {
        "metadata": {
            "labels": labels(deployment),
            "annotations": {
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "8002",
                "prometheus.io/path": "/metrics",
            },
        },
        "spec": {
            "initContainers": [init],
            "containers": [container],
            "terminationGracePeriodSeconds": 45,
            "volumes": [
                {"name": "bundle", "emptyDir": {}},
                {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}},
            ],
            "affinity": {
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 100,
                            "podAffinityTerm": {
                                "labelSelector": {"matchLabels": selector(deployment)},
                                "topologyKey": "kubernetes.io/hostname",
                            },
                        }
                    ]
                }
            },
        },
    }
    annotations = {"triton-harness/footprint": source, "triton-harness/summary": deployment.summary}
    return {
        **header("apps/v1", "Deployment", deployment, options, annotations=annotations),
        "spec": {
            "replicas": options.replicas,
            "selector": {"matchLabels": selector(deployment)},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "minReadySeconds": 5,
            "template": pod,
        },
    }


def service(deployment: Deployment, options: RenderOptions) -> dict:
    return {
        **header("v1", "Service", deployment, options),
        "spec": {
            "type": "ClusterIP",
            "selector": selector(deployment),
            "ports": [{"name": name, "port": port, "targetPort": name, "protocol": "TCP"} for name, port in PORTS],
        },
    }


def autoscaler(deployment: Deployment, options: RenderOptions) -> dict:
    return {
        **header("autoscaling/v2", "HorizontalPodAutoscaler", deployment, options),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": k8s_name(deployment)},
            "minReplicas": options.min_replicas,
            "maxReplicas": options.max_replicas,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": QUEUE_METRIC},
                        "target": {"type": "AverageValue", "averageValue": str(options.queue_target_us)},
                    },
                }
            ],
            "behavior": {
                "scaleUp": {
                    "stabilizationWindowSeconds": 0,
                    "policies": [{"type": "Pods", "value": 2, "periodSeconds": 60}],
                },
                "scaleDown": {
                    "stabilizationWindowSeconds": 300,
                    "policies": [{"type": "Pods", "value": 1, "periodSeconds": 120}],
                },
            },
        },
    }


def disruption_budget(deployment: Deployment, options: RenderOptions) -> dict:
    return {
        **header("policy/v1", "PodDisruptionBudget", deployment, options),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector(deployment)}},
    }


def adapter_query(label_matchers: str = "<<.LabelMatchers>>", group_by: str = "<<.GroupBy>>") -> str:
    """The HPA metric's PromQL: queue µs per successful request, per ``group_by``; the defaults are
    prometheus-adapter's template fields, the swarm run fills in its own labels."""
    return (
        f"sum(rate(nv_inference_queue_duration_us{{{label_matchers}}}[1m])) by ({group_by})"
        f" / clamp_min(sum(rate(nv_inference_request_success{{{label_matchers}}}[1m])) by ({group_by}), 1)"
    )


def adapter_rule() -> dict:
    """prometheus-adapter rule: queue µs per model execution of each pod, from Triton's two counters."""
    return {
        "rules": [
            {
                "seriesQuery": 'nv_inference_queue_duration_us{namespace!="",pod!=""}',
                "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
                "name": {"matches": "^nv_inference_queue_duration_us$", "as": QUEUE_METRIC},
                "metricsQuery": adapter_query(),
            }
        ]
    }


def adapter_config(deployment: Deployment, options: RenderOptions) -> dict:
    return {
        **header("v1", "ConfigMap", deployment, options, name=f"{k8s_name(deployment)}-prometheus-adapter-rules"),
        "data": {"config.yaml": yaml.safe_dump(adapter_rule(), sort_keys=False)},
    }


def inference_service(deployment: Deployment, options: RenderOptions) -> dict:
    """KServe v1beta1 InferenceService on the Triton runtime; the bundle at ``storageUri``."""
    limits = resources(deployment, options.extra)
    args = [a for a in server_args(deployment, options)[1:] if not a.startswith("--model-repository=")]
    storage = options.storage_uri or f"pvc://triton-model-bundles/{deployment.name}"
    return {
        **header(
            "serving.kserve.io/v1beta1",
            "InferenceService",
            deployment,
            options,
            annotations={"serving.kserve.io/deploymentMode": "RawDeployment"},
        ),
        "spec": {
            "predictor": {
                "minReplicas": options.min_replicas,
                "maxReplicas": options.max_replicas,
                "model": {
                    "modelFormat": {"name": "triton"},
                    "runtime": "kserve-tritonserver",
                    "protocolVersion": "v2",
                    "storageUri": storage,
                    "image": options.image,
                    # KServe's storage initializer fills /mnt/models with the bundle (model_repository/ + envs/).
                    "args": [f"--model-repository={BUNDLE_ROOT}/model_repository", *args],
                    "resources": limits,
                },
            }
        },
    }


def render(deployment: Deployment, options: RenderOptions | None = None) -> dict[str, list[dict]]:
    """``{file name: [objects]}`` for one deployment."""
    options = apply_manifest(deployment, options or RenderOptions())
    return {
        "triton.yaml": [
            triton_deployment(deployment, options),
            service(deployment, options),
            autoscaler(deployment, options),
            disruption_budget(deployment, options),
            adapter_config(deployment, options),
        ],
        "inferenceservice.yaml": [inference_service(deployment, options)],
    }


def dump(objects: list[dict]) -> str:
    return yaml.safe_dump_all(objects, sort_keys=False, default_flow_style=False)


def write(deployment: Deployment, out_dir: Path | None = None, options: RenderOptions | None = None) -> list[Path]:
    """Write the rendered files under ``out_dir`` (default build/k8s/<deployment>); returns their paths."""
    out_dir = Path(out_dir or PROJECT_ROOT / "build" / "k8s" / deployment.name)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, objects in render(deployment, options).items():
        path = out_dir / name
        path.write_text(
            f"# Rendered by `make k8s DEPLOYMENT={deployment.name}` (lab/harness_lab/scaleout/k8s.py); "
            "do not edit, re-render.\n" + dump(objects)
        )
        written.append(path)
    return written
