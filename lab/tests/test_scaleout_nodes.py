"""Two swarm nodes carrying traffic, for real: the host's engine (manager) and a worker node (a dockerd
in a container, harness_lab.scaleout.nodes), two replicas of embedding_cpu spread one per node behind
the stack's haproxy on the manager. Both nodes' replicas must answer through the balancer; the worker
is drained under load (the engine moves its replica), then lost under load (its whole engine killed:
the engine reschedules its replica), then brought back (the engine spreads the replicas again); no
request may be lost with the client's stated retry policy (harness_lab.scaleout.RETRY).

Runs with `--server-mode docker` where a Docker engine answers and a second node can start on it
(skipped with the reason otherwise); CI runs it in the docker stage (`make test-docker`). The stack,
the worker and the swarm are removed afterwards, also when a test fails.
"""

from __future__ import annotations

import shutil

import pytest

from harness import PROJECT_ROOT
from harness.deployments import get_deployment
from harness_lab.scaleout import RETRY, ScaleoutError
from harness_lab.scaleout.nodes import (
    NODE_NETWORK,
    NODE_PREFIX,
    join,
    node_network_exists,
    node_state,
    remove_workers,
    start_worker,
)
from harness_lab.scaleout.run import drain_node, kill_node, leftovers, node_back, placement, spread_again
from harness_lab.scaleout.swarm import Stack, build_image, docker, host_address, swarm_init, swarm_state

pytestmark = pytest.mark.timeout(1800)


@pytest.fixture(scope="module")
def nodes(swarm_image):
    if swarm_state() != "inactive":
        pytest.skip(
            "the engine is in a swarm already (a second node needs a swarm this test makes): make scaleout-down"
        )
    stack = Stack(
        get_deployment("embedding_cpu"),
        replicas=2,
        image=swarm_image,
        name="tsw-nodes",
        work_dir=PROJECT_ROOT / "build" / "scaleout" / "test-nodes-embedding_cpu",
    )
    stack.prepare()
    try:
        try:
            worker = start_worker(build_image("swarm-node"), [swarm_image], [str(stack.work_dir)])
        except ScaleoutError as exc:
            pytest.skip(f"a second swarm node cannot start on this machine: {exc}")
        stack.initialised_swarm = swarm_init(worker.data_path_address)
        join(worker, host_address())
        stack.up()
        yield stack, worker
    finally:
        stack.down()
        remove_workers()
        left = leftovers(stack)
        shutil.rmtree(stack.work_dir, ignore_errors=True)
        workers = docker("ps", "-aq", "--filter", f"name=^{NODE_PREFIX}", check=False).split()
        assert not (left["containers"] or left["networks"] or left["volumes"] or workers), (left, workers)
        assert not node_network_exists(), NODE_NETWORK
        assert left["swarm"] == "inactive", left


def _no_loss(result: dict) -> None:
    client = result["client"]
    assert client["requests"] > 20, result
    assert client["lost"] == 0, (
        f"{client['lost']} requests lost with {RETRY.tries} tries ({client['first_error']}): {result}"
    )


def test_replicas_on_both_nodes_answer_through_the_balancer(nodes):
    stack, worker = nodes
    assert sorted(placement(stack).values()) == [1, 1], placement(stack)
    # Every task's overlay address answers through the balancer on the manager: the worker's across the VXLAN.
    stack.wait_balanced(2, addresses={t["address"] for t in stack.running()})


def test_a_drained_node_loses_no_request(nodes):
    stack, worker = nodes
    result = drain_node(stack, concurrency=8, node=worker.node)
    _no_loss(result)
    assert result["tasks_on_node_before"] == 1, result
    # Both nodes served during the run; the engine stopped the worker's task and runs both on the manager.
    assert set(result["served_by_node"]) == {worker.name, *result["placement_after"]}, result
    assert list(result["placement_after"].values()) == [2] and worker.name not in result["placement_after"], result
    assert any(t["node"] == worker.name and t["desired"] == "shutdown" for t in result["tasks"]), result["tasks"]
    spread_again(stack, worker.node)
    assert sorted(placement(stack).values()) == [1, 1], placement(stack)


def test_a_lost_node_loses_no_request_and_comes_back(nodes):
    stack, worker = nodes
    result = kill_node(stack, concurrency=8, worker=worker)
    _no_loss(result)
    assert result["tasks_on_node_before"] == 1 and node_state(worker.node) == "down", result
    assert worker.name not in result["placement_after"] and sum(result["placement_after"].values()) == 2, result
    back = node_back(stack, concurrency=8, worker=worker)
    _no_loss(back)
    assert node_state(worker.node) == "ready" and sorted(placement(stack).values()) == [1, 1], back
