"""Many replicas for real, run by Docker swarm: two replicas of embedding_cpu in the CPU image
behind the stack's haproxy (``docker stack deploy`` of deploy/swarm/embedding_cpu/stack.yml). One
replica's container is killed with SIGKILL under load (the engine starts a replacement), then a
new model version is rolled by ``docker service update`` (the engine rolls, start-first and
health-gated). No request may be lost with the client's stated retry policy
(harness_lab.scaleout.RETRY), and our code only watches.

Runs with `--server-mode docker` where a Docker engine answers (skipped with the reason otherwise); CI runs
it in the docker stage (`make test-docker`), after the image and the packed envs are built. The
stack and the swarm (when this test made it) are removed afterwards, also when a test fails.
"""

from __future__ import annotations

import shutil
import time

import pytest

from harness import PROJECT_ROOT
from harness.deployments import get_deployment
from harness_lab.scaleout import RETRY, stack_load, wait_for
from harness_lab.scaleout.run import kill_under_load, leftovers, roll_version
from harness_lab.scaleout.swarm import JOB, Stack, docker, recording_rule, stacks

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def stack(swarm_image):
    stack = Stack(
        get_deployment("embedding_cpu"),
        replicas=2,
        image=swarm_image,
        name="tsw-test",
        work_dir=PROJECT_ROOT / "build" / "scaleout" / "test-embedding_cpu",
    )
    stack.prepare()
    try:
        stack.up()
        yield stack
    finally:
        stack.down()
        left = leftovers(stack)
        shutil.rmtree(stack.work_dir, ignore_errors=True)
        assert not (left["containers"] or left["networks"] or left["volumes"]), left
        if not stacks():  # no other run of ours holds the swarm: it is gone
            assert left["swarm"] == "inactive", left


def query(stack: Stack, promql: str, at: float | None = None) -> list[dict]:
    """An instant query on the stack's Prometheus (host-mode published port), now or ``at`` (Unix time)."""
    import requests

    params = {"query": promql, **({"time": f"{at:.3f}"} if at else {})}
    answer = requests.get(f"{stack.prometheus_url}/api/v1/query", params=params, timeout=10).json()
    assert answer.get("status") == "success", f"Prometheus refused {promql!r}: {answer}"
    return answer["data"]["result"]


def wait_scraped(stack: Stack, count: int, deadline_s: float = 120) -> None:
    def scraped() -> bool:
        try:
            return len(query(stack, f'up{{job="{JOB}"}} == 1')) == count
        except Exception:  # noqa: BLE001 - Prometheus still starting
            return False

    wait_for(scraped, deadline_s, f"Prometheus scraping {count} tasks", period_s=1)


def read_counters(container: str) -> dict[str, float]:
    """Triton's queue-time and success counters of one task, summed over its models, read from its
    metrics port inside the container (the host cannot reach overlay addresses)."""
    text = docker(
        "exec",
        container,
        "bash",
        "-c",
        'exec 3<>/dev/tcp/127.0.0.1/8002 && printf "GET /metrics HTTP/1.0\\r\\n\\r\\n" >&3 && cat <&3',
        timeout_s=30,
    )
    sums = {"nv_inference_queue_duration_us": 0.0, "nv_inference_request_success": 0.0}
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in sums:
            sums[name] += float(line.rsplit(" ", 1)[1])
    return sums


def task_address(container: str, network: str) -> str:
    """A task container's address on the stack's network (Prometheus's ``instance`` without the port)."""
    return docker(
        "inspect", container, "--format", f'{{{{(index .NetworkSettings.Networks "{network}").IPAddress}}}}'
    ).strip()


def test_replicas_serve_behind_the_front_gate(stack):
    """Through the balancer, each replica's gate answers: the shared-memory API is closed (plain
    tritonserver lists and registers shared-memory regions for anyone), readiness is the gate's."""
    import requests

    upstreams = set()
    for _ in range(6):  # round robin: both replicas answer
        status = requests.get(f"{stack.url}/v2/systemsharedmemory/status", timeout=10)
        assert status.status_code == 403 and "restricted" in status.text, status.text
        upstreams.add(status.headers.get("X-Upstream"))
    assert len(upstreams) == 2, upstreams
    assert requests.get(f"{stack.url}/v2/health/ready", timeout=10).status_code == 200
    # the deployment's gate policy reached the replicas: a loaded model that is no entry model is internal
    internal = [m for m in stack.models if m not in stack.deployment.entry_models]
    for model in internal[:1]:
        answer = requests.post(f"{stack.url}/v2/models/{model}/infer", json={"inputs": []}, timeout=10)
        assert answer.status_code == 403 and "internal" in answer.text, answer.text


def test_the_engine_replaces_a_killed_replica_and_no_request_is_lost(stack):
    victim_count = len(stack.running())
    result = kill_under_load(stack, concurrency=8, before_s=3.0, after_s=5.0)
    client = result["client"]
    assert victim_count == 2 and client["requests"] > 20, result
    # Both tasks served before the kill: the kill hit a replica that had traffic.
    assert len(result["served_by_before_kill"]) == 2, result
    assert client["lost"] == 0, (
        f"{client['lost']} requests lost with {RETRY.tries} tries ({client['first_error']}): {result}"
    )
    # The engine, not our code, brought the service back to 2 healthy tasks, the killed one not among them.
    running = stack.running()
    assert len(running) == 2 and result["victim_task"] not in {t["id"][:12] for t in running}, running
    assert result["after_kill"]["requests"] > 10, result


def test_the_engine_rolls_a_new_version_and_no_request_is_lost(stack):
    result = roll_version(stack, concurrency=8)
    client = result["client"]
    assert result["engine_final_state"] == "completed", result
    assert result["bundles_running_after"] == ["v2", "v2"], result
    assert client["lost"] == 0, (
        f"{client['lost']} requests lost with {RETRY.tries} tries ({client['first_error']}): {result}"
    )
    # Both versions answered during the roll; after it, only the new one.
    assert result["responses_by_model_version"].get("1", 0) > 0, result
    assert result["responses_by_model_version"].get("2", 0) > 0, result
    assert set(result["responses_by_model_version_after_roll"]) == {"2"}, result
    # The engine replaced the tasks one at a time, start-first: never fewer than 2 running.
    fewer = [e for e in result["engine_events"] if len(e["running"]) < 2]
    assert not fewer, f"{fewer} ({result['failed_polls']} polls failed)"
    assert docker("service", "inspect", stack.service, "--format", "{{.Spec.UpdateConfig.Order}}").strip() == (
        "start-first"
    )


def test_prometheus_evaluates_the_adapter_rule_as_tritons_counters_say(stack):
    """The HPA's metric for real: the stack's Prometheus (Debian's, scraping each task's metrics port)
    evaluates the Kubernetes ConfigMap's rule with the swarm's labels (deploy/swarm/rules.yml; the same
    text: test_scaleout_stack.py); per task it must equal the queue time per successful request
    computed from Triton's own counters, read inside each task."""
    rule = recording_rule()
    assert "[1m]" in rule
    wait_scraped(stack, stack.replicas)
    load = stack_load(stack, 8).start()
    try:
        time.sleep(5)
        network = f"{stack.name}_replicas"
        tasks = {task_address(t["container"], network): t["container"] for t in stack.running()}
        before = {address: read_counters(container) for address, container in tasks.items()}
        time.sleep(60)
        after = {address: read_counters(container) for address, container in tasks.items()}
        at = time.time()
    finally:
        load.stop()
    evaluated = {r["metric"]["instance"].rsplit(":", 1)[0]: float(r["value"][1]) for r in query(stack, rule, at=at)}
    assert set(evaluated) == set(tasks), (evaluated, tasks)
    for address in tasks:
        queued = after[address]["nv_inference_queue_duration_us"] - before[address]["nv_inference_queue_duration_us"]
        served = after[address]["nv_inference_request_success"] - before[address]["nv_inference_request_success"]
        assert served > 60, (address, served)  # > 1 request/s: the rule's clamp_min(.., 1) does not bite
        direct = queued / served
        assert direct > 0, (address, before[address], after[address])
        # Scrapes every 2 s against readings a few ms apart from the window's ends: a small misalignment.
        assert abs(evaluated[address] - direct) <= 0.25 * direct, (address, evaluated[address], direct)
