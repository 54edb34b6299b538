"""The swarm stack's files as ``Stack.write`` renders them (no engine needed): the stack file, the
balancers' configs naming the replicas' service, Prometheus's rule."""

from __future__ import annotations

import yaml

from harness.deployments import get_deployment
from harness_lab.scaleout.k8s import QUEUE_METRIC
from harness_lab.scaleout.swarm import Stack


def test_the_stack_files_name_the_replicas_service(tmp_path):
    stack = Stack(get_deployment("embedding_cpu"), replicas=2, work_dir=tmp_path, lb_image="lb", prometheus_image="p")
    stack.write()
    compose = yaml.safe_load((tmp_path / "stack.yml").read_text())
    assert set(compose["services"]) == {"triton", "lb", "prometheus"}
    assert compose["services"]["triton"]["deploy"]["replicas"] == 2
    assert compose["services"]["lb"]["ports"][0]["published"] == stack.lb_port
    haproxy = (tmp_path / "lb" / "haproxy.cfg").read_text()
    nginx = (tmp_path / "lb" / "nginx.conf").read_text()
    assert f"server-template t 8 tasks.{stack.service}:8000" in haproxy
    assert f"set $replicas tasks.{stack.service};" in nginx
    assert "@SERVICE@" not in haproxy + nginx
    rules = yaml.safe_load((tmp_path / "prometheus" / "rules.yml").read_text())
    assert rules["groups"][0]["rules"] == [{"record": QUEUE_METRIC, "expr": stack.recording_rule()}]
