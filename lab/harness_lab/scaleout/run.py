"""The multi-replica run (``make scaleout``): throughput, kill, roll, rollback,
and with ``--nodes 2`` drain and node loss; results in ``results/scaleout/<deployment>.json``."""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from pathlib import Path

import yaml

from harness import PROJECT_ROOT
from harness.deployments import get_deployment
from harness.measuring.loadgen import RequestRecord
from harness.measuring.records import machine
from harness_lab.scaleout import RETRY, ScaleoutError, stack_load, summarize, wait_for
from harness_lab.scaleout.nodes import Worker, join, kill_worker, node_state, restart_worker, start_worker
from harness_lab.scaleout.swarm import Stack, build_image, docker, host_address, stack_objects, swarm_init

RESULTS = PROJECT_ROOT / "results" / "scaleout"
#: Scenarios that need the second node (``--nodes 2``).
NODE_SCENARIOS = ("drain", "node-loss")
#: How long the balancer may take to see a changed task set (DNS every 1 s, health checks every 1 s).
BALANCER_SETTLE_S = 4.0


def served_by(outcomes: list[RequestRecord]) -> dict[str, int]:
    """Successful requests per task address (the balancer's ``X-Upstream``)."""
    return dict(Counter(o.facts["upstream"].split(",")[-1].strip().rsplit(":", 1)[0] or "?" for o in outcomes if o.ok))


def by_version(outcomes: list[RequestRecord]) -> dict[str, int]:
    return dict(Counter(str(o.facts["model_version"]) for o in outcomes if o.ok))


class Watch:
    """Polls the service's tasks and update status in a thread: what the engine did, when."""

    def __init__(self, stack: Stack, period_s: float = 0.5):
        self.stack, self.period_s = stack, period_s
        self.events: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)
        self._last: tuple | None = None
        self.failed_polls = 0

    def _main(self) -> None:
        while not self._stop.is_set():
            try:
                tasks = self.stack.tasks(check=True)
                update = self.stack.update_state()
            except Exception:  # noqa: BLE001 - a failed poll says nothing of the tasks: poll again
                self.failed_polls += 1
                self._stop.wait(self.period_s)
                continue
            running = sorted(t["bundle"] for t in tasks if t["state"] == "running" and t["desired"] == "running")
            key = (tuple(running), update.get("State"), len(tasks))
            if key != self._last:
                self._last = key
                self.events.append({"t": time.time(), "running": running, "update": update.get("State")})
            self._stop.wait(self.period_s)

    def start(self) -> Watch:
        self._thread.start()
        return self

    def stop(self) -> list[dict]:
        self._stop.set()
        self._thread.join(timeout=30)
        return self.events


def throughput_level(stack: Stack, count: int, concurrency: int, duration_s: float, warmup_s: float) -> dict:
    """``count`` replicas under ``concurrency`` for ``duration_s`` (after ``warmup_s``): what the client saw."""
    stack.scale(count)
    stack.wait_converged(count, deadline_s=900)
    tasks = stack.running()
    stack.wait_balanced(count, addresses={t["address"] for t in tasks if t["address"]})
    time.sleep(BALANCER_SETTLE_S)
    load = stack_load(stack, concurrency).start()
    time.sleep(warmup_s)
    began = time.time()
    time.sleep(duration_s)
    ended = time.time()
    outcomes = load.stop().records
    window = [o for o in outcomes if began <= o.end <= ended]
    return {
        "replicas": count,
        "concurrency": concurrency,
        "duration_s": duration_s,
        **summarize(window),
        "served_by": served_by(window),
        "served_by_node": served_by_node(window, tasks),
        "tasks_per_node": placement(stack),
        "lost_whole_level": summarize(outcomes)["lost"],
        "host_load_avg_1m": round(os.getloadavg()[0], 1),
    }


def linear_prediction(row: dict, one_replica: dict) -> dict:
    """Beside a measured level: n x the run's own 1-replica level."""
    measured = row["infer_per_s"]
    if not (one_replica["infer_per_s"] and measured):
        return {}
    linear = row["replicas"] * one_replica["infer_per_s"]
    return {
        "linear_from_1_replica": {
            "predicted_infer_s": round(linear, 1),
            "predicted_over_measured": round(linear / measured, 2),
        }
    }


def throughput(stack: Stack, concurrency: int, duration_s: float, warmup_s: float = 2.0) -> list[dict]:
    """The same load on 1 .. N replicas; beside each level the linear prediction."""
    rows: list[dict] = []
    for count in range(1, stack.replicas + 1):
        row = throughput_level(stack, count, concurrency, duration_s, warmup_s)
        rows.append({**row, **linear_prediction(row, rows[0] if rows else row)})
        print(
            f"scaleout: {count} replica(s), c={concurrency}: {row['infer_per_s']} infer/s, "
            f"p99 {row['p99_ms']} ms, lost {row['lost']}",
            flush=True,
        )
    stack.scale(stack.replicas)
    stack.wait_converged(stack.replicas, deadline_s=900)
    time.sleep(BALANCER_SETTLE_S)
    return rows


def kill_under_load(stack: Stack, concurrency: int, before_s: float = 4.0, after_s: float = 8.0) -> dict:
    """SIGKILL one task's container under load; what the client saw until the engine replaced it."""
    stack.wait_converged(stack.replicas, deadline_s=600)
    victim = stack.running()[-1]
    load = stack_load(stack, concurrency).start()
    time.sleep(before_s)
    served_before = served_by(list(load.log.records))
    asked_at, killed_at = stack.kill(victim)

    # The engine notices the exit and schedules a new task; it is running once its health check passes.
    def replaced():
        running = stack.running()
        return len(running) == stack.replicas and victim["id"] not in {t["id"] for t in running}

    wait_for(replaced, 900, f"a task replacing {victim['id'][:12]}")
    recovered_at = time.time()
    time.sleep(after_s)
    outcomes = load.stop().records
    after_kill = [o for o in outcomes if o.start >= killed_at]
    # The last answer any request got from an address that served before the kill but not after it.
    survivors = set(served_by([o for o in outcomes if o.start >= recovered_at]))
    gone = set(served_before) - survivors
    last_from_victim = max(
        (o.end for o in outcomes if o.ok and o.facts["upstream"].rsplit(":", 1)[0] in gone), default=None
    )
    result = {
        "victim_task": victim["id"][:12],
        "replicas": stack.replicas,
        "concurrency": concurrency,
        "lb": stack.lb,
        "client": summarize(outcomes),
        "before_kill": summarize(outcomes, ended=asked_at),
        "after_kill": summarize(outcomes, began=killed_at),
        "served_by_before_kill": served_before,
        "served_by_after_kill": served_by(after_kill),
        "last_answer_from_killed_address_s": round(last_from_victim - asked_at, 3) if last_from_victim else None,
        "replacement_running_s": round(recovered_at - asked_at, 1),
        "host_load_avg_1m": round(os.getloadavg()[0], 1),
    }
    print(
        f"scaleout: killed task {result['victim_task']} under c={concurrency}: lost {result['client']['lost']} of "
        f"{result['client']['requests']} (client retries {result['client']['retried_by_client']}); the engine had "
        f"{stack.replicas} running again after {result['replacement_running_s']} s",
        flush=True,
    )
    return result


def roll_version(stack: Stack, concurrency: int, version: str = "v2", after_s: float = 3.0) -> dict:
    """``docker service update`` to bundle ``version`` under load; the engine rolls, we watch."""
    stack.wait_converged(stack.replicas, deadline_s=600)
    before = stack.bundle
    load = stack_load(stack, concurrency).start()
    time.sleep(2.0)
    watch = Watch(stack).start()
    began = time.time()
    stack.roll_to(version)

    def settled() -> str | None:
        state = stack.update_state().get("State")
        return state if state in ("completed", "paused", "rollback_completed", "rollback_paused") else None

    state = wait_for(settled, 1800, f"the update to {version}", period_s=1.0)
    finished = time.time()
    time.sleep(after_s)
    outcomes = load.stop().records
    events = watch.stop()
    if state == "completed":
        stack.bundle = version
    tasks = stack.running()
    result = {
        "from": before,
        "to": version,
        "replicas": stack.replicas,
        "concurrency": concurrency,
        "lb": stack.lb,
        "engine_final_state": state,
        "bundles_running_after": sorted(t["bundle"] for t in tasks),
        "roll_s": round(finished - began, 1),
        "client": summarize(outcomes),
        "responses_by_model_version": by_version(outcomes),
        "responses_by_model_version_after_roll": by_version([o for o in outcomes if o.start > finished + 0.5]),
        "engine_events": [{**e, "t": round(e["t"] - began, 1)} for e in events],
        "failed_polls": watch.failed_polls,
        "host_load_avg_1m": round(os.getloadavg()[0], 1),
    }
    print(
        f"scaleout: update to {version}: engine {state} after {result['roll_s']} s, running {result['bundles_running_after']}; "
        f"lost {result['client']['lost']} of {result['client']['requests']}, by version {result['responses_by_model_version']}",
        flush=True,
    )
    return result


def rollback_bad(stack: Stack, concurrency: int) -> dict:
    """A version that cannot load: the engine's ``failure_action: rollback`` restores the previous spec."""
    result = roll_version(stack, concurrency, version="bad")
    result["rolled_back"] = (
        result["engine_final_state"] == "rollback_completed" and "bad" not in result["bundles_running_after"]
    )
    return result


def tasks_on(stack: Stack, node: str) -> int:
    return sum(1 for t in stack.running() if t["node"] == node)


def node_names() -> dict[str, str]:
    """Swarm node ID -> hostname."""
    out = docker("node", "ls", "--format", "{{.ID}} {{.Hostname}}", check=False)
    return dict(line.split(maxsplit=1) for line in out.splitlines() if " " in line)


def placement(stack: Stack) -> dict[str, int]:
    """Running tasks per node (hostname)."""
    names = node_names()
    return dict(Counter(names.get(t["node"], t["node"][:12]) for t in stack.running()))


def served_by_node(outcomes: list[RequestRecord], tasks: list[dict]) -> dict[str, int]:
    """Successful requests per node (hostname), from the balancer's ``X-Upstream`` and the tasks' addresses."""
    names = node_names()
    node_of = {t["address"]: names.get(t["node"], t["node"][:12]) for t in tasks if t["address"]}
    counts: Counter[str] = Counter()
    for address, count in served_by(outcomes).items():
        counts[node_of.get(address, "?")] += count
    return dict(counts)


def node_record(stack: Stack, node: str, on_node: int, concurrency: int, outcomes, events, seen, asked_at) -> dict:
    """What the client and the engine saw around ``node`` since ``asked_at``."""
    names = node_names()
    return {
        "node": names.get(node, node),
        "tasks_on_node_before": on_node,
        "replicas": stack.replicas,
        "concurrency": concurrency,
        "client": summarize(outcomes),
        "after_ask": summarize(outcomes, began=asked_at),
        "served_by_node": served_by_node(outcomes, list(seen.values())),
        "placement_after": placement(stack),
        "fewest_running": min((len(e["running"]) for e in events), default=None),
        "engine_events": [{**e, "t": round(e["t"] - asked_at, 1)} for e in events],
        # The engine's own record: each task of the node, its state, and the new tasks on the others.
        "tasks": [
            {
                "id": t["id"][:12],
                "node": names.get(t["node"], t["node"][:12]),
                "desired": t["desired"],
                "state": t["state"],
            }
            for t in stack.tasks()
        ],
        "host_load_avg_1m": round(os.getloadavg()[0], 1),
    }


def node_under_load(stack: Stack, concurrency: int, node: str, action, done, what: str, took_key: str, said: str):
    """Load on; ``action()`` asked of the engine; until ``done()``; load off. What the client and the
    engine saw around ``node`` (``took_key``: seconds from the ask to done), printed; and the ask's time."""
    on_node = tasks_on(stack, node)
    load = stack_load(stack, concurrency).start()
    time.sleep(3.0)
    watch = Watch(stack).start()
    seen = {t["id"]: t for t in stack.tasks()}
    asked_at = time.time()
    action()

    def finished():
        seen.update({t["id"]: t for t in stack.tasks()})
        return done()

    wait_for(finished, 900, what)
    took = time.time() - asked_at
    time.sleep(5.0)
    outcomes, events = load.stop().records, watch.stop()
    result = node_record(stack, node, on_node, concurrency, outcomes, events, seen, asked_at)
    result[took_key] = round(took, 1)
    client = result["client"]
    print(
        f"scaleout: {said} {result['node']} ({on_node} task(s)) under c={concurrency}: "
        f"lost {client['lost']} of {client['requests']} (client retries {client['retried_by_client']}); "
        f"{took_key} {result[took_key]} s; now {result['placement_after']}",
        flush=True,
    )
    return result, asked_at


def drain_node(stack: Stack, concurrency: int, node: str) -> dict:
    """``docker node update --availability drain`` of a node holding replicas, under load."""
    stack.wait_converged(stack.replicas, deadline_s=600)
    result, _ = node_under_load(
        stack,
        concurrency,
        node,
        lambda: docker("node", "update", "--availability", "drain", node),
        lambda: tasks_on(stack, node) == 0 and len(stack.running()) == stack.replicas,
        f"the drain of {node}",
        "all_replicas_running_elsewhere_s",
        "drained",
    )
    return result


def spread_again(stack: Stack, node: str) -> float:
    """The node active again and the replicas spread over both nodes (twice the replicas, then the
    replicas again: the engine moves no running task by itself); seconds until the balancer reaches each."""
    began = time.monotonic()
    for attempt in range(10):  # a node that just rejoined is still being updated: "update out of sequence"
        try:
            docker("node", "update", "--availability", "active", node)
            break
        except ScaleoutError as exc:
            if "out of sequence" not in str(exc) or attempt == 9:
                raise
            time.sleep(1)
    stack.scale(2 * stack.replicas)
    wait_for(lambda: len(stack.running()) == 2 * stack.replicas, 900, f"{2 * stack.replicas} replicas running")
    stack.scale(stack.replicas)
    wait_for(
        lambda: len(stack.running()) == stack.replicas and tasks_on(stack, node) > 0,
        900,
        "replicas spread over both nodes again",
    )
    stack.wait_balanced(stack.replicas, addresses={t["address"] for t in stack.running() if t["address"]})
    return time.monotonic() - began


def kill_node(stack: Stack, concurrency: int, worker: Worker) -> dict:
    """The node lost under load: its worker container killed; the manager reschedules its tasks."""
    stack.wait_converged(stack.replicas, deadline_s=600)
    marked: dict[str, float] = {}

    def done():
        if "down" not in marked and node_state(worker.node) == "down":
            marked["down"] = time.time()
        return "down" in marked and len([t for t in stack.running() if t["node"] != worker.node]) == stack.replicas

    result, asked_at = node_under_load(
        stack,
        concurrency,
        worker.node,
        lambda: kill_worker(worker),
        done,
        f"{stack.replicas} replicas running without {worker.name}",
        "all_replicas_running_elsewhere_s",
        "killed node",
    )
    result["node_marked_down_s"] = round(marked["down"] - asked_at, 1)
    return result


def node_back(stack: Stack, concurrency: int, worker: Worker) -> dict:
    """The lost node back under load, then ``spread_again``; seconds until every replica runs, both
    nodes hold some and the balancer reaches each."""
    # Not wait_converged: the lost node's tasks stay "running" (desired shutdown) in the engine's
    # record until that node reports again.
    wait_for(lambda: len(stack.running()) == stack.replicas, 600, f"{stack.replicas} replicas running")
    ready: dict[str, float] = {}

    def back():
        restart_worker(worker)
        ready["at"] = time.time()
        return spread_again(stack, worker.node)

    result, asked_at = node_under_load(
        stack,
        concurrency,
        worker.node,
        back,
        lambda: True,
        f"{worker.name} back with replicas",
        "full_capacity_s",
        "brought back node",
    )
    result["node_ready_s"] = round(ready["at"] - asked_at, 1)
    return result


def plan(stack: Stack, concurrency: int, duration_s: float, scenarios: tuple[str, ...], nodes: int) -> dict:
    """The report's head: what runs, where, with which command."""
    service = yaml.safe_load(stack.stack_file.read_text())["services"]["triton"]
    return {
        "deployment": stack.deployment.name,
        "replicas": stack.replicas,
        "models": list(stack.models),
        "image": stack.image,
        "stack_file": str(stack.stack_file.relative_to(PROJECT_ROOT)),
        "lb": stack.lb,
        "orchestrator": "docker swarm (docker stack deploy)",
        "engine": docker("version", "--format", "{{.Server.Version}}").strip(),
        "retry_policy": RETRY.as_record(),
        "update_config": service["deploy"]["update_config"],
        "machine": machine(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "nodes": nodes,
        "command": f"python -m harness scaleout run --deployment {stack.deployment.name} --replicas {stack.replicas} "
        f"--concurrency {concurrency} --duration {duration_s:g} --lb {stack.lb} --nodes {nodes} "
        f"--scenarios {' '.join(scenarios)}",
    }


def run_scenarios(stack: Stack, results: dict, scenarios, concurrency: int, duration_s: float, nodes: int) -> None:
    """Up (``nodes=2``: with a worker node first), then each asked scenario in order, into ``results``."""
    worker = add_node(stack, results) if nodes > 1 else None
    results["up_s"] = round(stack.up(), 1)
    print(f"scaleout: {stack.replicas} replicas healthy behind {stack.lb} at {stack.url} in {results['up_s']} s")
    if "throughput" in scenarios:
        results["throughput"] = throughput(stack, concurrency, duration_s)
    one_node = {"kill": kill_under_load, "roll": roll_version, "rollback": rollback_bad}
    for scenario, run_scenario in one_node.items():
        if scenario in scenarios:
            results[scenario] = run_scenario(stack, concurrency)
    if worker:
        results["placement"] = placement(stack)
    if "drain" in scenarios:
        results["drain"] = drain_node(stack, concurrency, worker.node)
        results["spread_again_s"] = round(spread_again(stack, worker.node), 1)
    if "node-loss" in scenarios:
        results["kill_node"] = kill_node(stack, concurrency, worker)
        results["node_back"] = node_back(stack, concurrency, worker)


def run(
    deployment: str,
    replicas: int = 3,
    concurrency: int = 8,
    duration_s: float = 10.0,
    scenarios: tuple[str, ...] = ("throughput", "kill", "roll", "rollback"),
    keep: bool = False,
    out: Path | None = None,
    lb: str = "haproxy",
    nodes: int = 1,
) -> dict:
    """Deploy the stack (``nodes=2``: with a worker node), run the scenarios, write the results, tear down."""
    if set(scenarios) & set(NODE_SCENARIOS) and nodes < 2:
        raise ScaleoutError(f"scenarios {sorted(set(scenarios) & set(NODE_SCENARIOS))} need a second node: --nodes 2")
    stack = Stack(get_deployment(deployment), replicas=replicas, lb=lb)
    results = plan(stack, concurrency, duration_s, scenarios, nodes)
    stack.prepare()
    results["lb_image"], results["prometheus_image"] = stack.lb_image, stack.prometheus_image
    failure = None
    try:
        run_scenarios(stack, results, scenarios, concurrency, duration_s, nodes)
    except (Exception, KeyboardInterrupt) as exc:
        failure = exc
        results["failed"] = f"{type(exc).__name__}: {exc}"[:2000]
    finally:
        if not keep:
            stack.down()
            results["left_behind"] = leftovers(stack)
    out = out or RESULTS / f"{stack.deployment.name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"scaleout: results in {out}", flush=True)
    if failure is not None:
        raise failure
    return results


def add_node(stack: Stack, results: dict) -> Worker:
    """A worker node joined to a swarm this run makes (its data path address: ``nodes.py``)."""
    began = time.monotonic()
    worker = start_worker(build_image("swarm-node"), [stack.image], [str(stack.work_dir)])
    stack.initialised_swarm = swarm_init(worker.data_path_address)
    if not stack.initialised_swarm:
        raise ScaleoutError(
            "a second node needs a swarm made by this run (with the host's data path address towards it), "
            "but the engine is in a swarm already: `make scaleout-down` leaves it"
        )
    join(worker, host_address())
    results["worker"] = {
        "name": worker.name,
        "node": worker.node,
        "address": worker.address,
        "manager_data_path_address": worker.data_path_address,
        "joined_s": round(time.monotonic() - began, 1),
    }
    print(f"scaleout: worker node {worker.name} ({worker.node[:12]}) joined in {results['worker']['joined_s']} s")
    return worker


def leftovers(stack: Stack) -> dict:
    """What of the stack is still on the engine after teardown (all empty when it was complete)."""
    # `docker swarm leave` can return before `docker info` reports the node inactive (one run's
    # report said active while the engine was inactive seconds later): give it 10 s.
    for _ in range(20):
        if docker("info", "--format", "{{.Swarm.LocalNodeState}}", check=False).strip() == "inactive":
            break
        time.sleep(0.5)
    return {
        **stack_objects(stack.name),
        "swarm": docker("info", "--format", "{{.Swarm.LocalNodeState}}", check=False).strip(),
    }
