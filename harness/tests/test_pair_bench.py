"""pair-bench's manifest mode: which pairs it runs and what it records (the runs themselves need a
server and are exercised by `make bench-pairs`)."""

from __future__ import annotations

import pytest

from harness.deployments import get_deployment
from harness.measuring.pair_bench import main, manifest_pairs, pair_record


def test_every_benchmark_naming_a_model_only_one_is_paired_with_it():
    deployment = get_deployment("resnet_npu")
    pairs = manifest_pairs(deployment, "cpu")
    entries = {entry.id: alone.id for alone, entry in pairs}
    assert entries["classify_efficientnet_lite0-jpeg"] == "efficientnet_lite0-b1"
    assert entries["classify_efficientnet_lite0-jpeg-reducing-gap"] == "efficientnet_lite0-b1"
    assert all(entry.model_only == alone.id for alone, entry in pairs)
    assert [e.id for _, e in manifest_pairs(deployment, "cpu", ["classify_resnet50-jpeg"])] == [
        "classify_resnet50-jpeg"
    ]
    assert manifest_pairs(deployment, "no-such-target") == []


def _side(items, cpu, protocol="grpc", read=True):
    return {
        "items_per_s": items,
        "cpu_ms_total": cpu,
        "errors": 0,
        "protocol": protocol,
        "pinning": "server cpus 1 (9 processes), generator cpus 0",
        "server_cpu_read": read,
        "model": "m",
        "variant": None,
        "items_per_request": 1,
    }


def _level(entry, alone, read=True):
    return {
        "ratio": round(entry / alone, 3),
        "cpu_ratio": 0.8,
        "triton_cpu_ratio": 0.7,
        "entry": _side(entry, 10.0, read=read),
        "model-only": _side(alone, 8.0, read=read),
    }


def test_a_pair_record_keeps_every_round_and_takes_the_median_quotient():
    deployment = get_deployment("resnet_npu")
    alone, entry = manifest_pairs(deployment, "cpu", ["classify_efficientnet_lite0-jpeg"])[0]
    server = {"target": "cpu", "server_mode": "local", "server_version": "2.51.0"}
    levels = [_level(30.0, 50.0), _level(45.0, 50.0), _level(40.0, 50.0)]
    record = pair_record(deployment, (alone, entry), 4, levels, server, "run1")
    assert record["rounds_ratio"] == [0.6, 0.9, 0.8] and record["ratio"] == 0.8
    assert record["items_per_second"] == 40.0 and record["model_only_items_per_second"] == 50.0
    assert record["comparison"] == "processing-pair" and record["benchmark"] == "pair:classify_efficientnet_lite0-jpeg"
    assert record["cpu_ratio"] == 0.8 and record["generator"].startswith("harness-asyncio")
    unread = pair_record(deployment, (alone, entry), 4, [_level(40.0, 50.0, read=False)], server, "run1")
    assert record["triton_cpu_ratio"] == 0.7 and record["rounds_triton_cpu_ratio"] == [0.7, 0.7, 0.7]
    assert unread["cpu_ratio"] is None and unread["rounds_cpu_ratio"] == []
    assert unread["triton_cpu_ratio"] is None


def test_the_triton_only_cpu_leaves_out_the_front_gate_and_the_generator():
    from harness.measuring.pair_bench import triton_cpu_ms

    level = {
        "cpu_ms_per_request": {"gate": 4.9, "tritonserver": 1.3, "stub:efficientnet_lite0": 11.2, "generator": 1.4}
    }
    assert abs(triton_cpu_ms(level) - 12.5) < 1e-9


def test_hand_made_pairs_and_variants_are_refused():
    """The manifests' pairs are the only ones: ``--pair`` and ``--variant`` are not options."""
    with pytest.raises(SystemExit):
        main(["resnet_npu", "--manifest", "--pair", "a.py:x", "a.py:y"])
    with pytest.raises(SystemExit):
        main(["resnet_npu", "--variant", "now", "{}", "--record-results"])
