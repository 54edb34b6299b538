"""A measured benchmark record for the results matrix's tests (harness and lab)."""

from __future__ import annotations


def measured_record(**overrides) -> dict:
    """A measured record of the toy deployment's ``m-b1`` (cpu, local, c=1), ``overrides`` applied."""
    record = {
        "timestamp": "2026-11-30T10:00:00+00:00",
        "machine": {"cpu_model": "Test CPU", "cpu_cores": 2, "os": "Debian 12", "python": "3.11"},
        "deployment": "toy",
        "benchmark": "m-b1",
        "model": "m",
        "variant": "m fp32",
        "target": "cpu",
        "protocol": "grpc",
        "generator": "harness-asyncio (tritonclient grpc.aio)",
        "server_mode": "local",
        "server_version": "2.51.0",
        "backend_implementation": {"m": "onnxruntime via harness Python backend"},
        "items_per_request": 1,
        "notes": {},
        "concurrency": 1,
        "duration_s": 2.0,
        "requests": 100,
        "errors": 0,
        "perf_throughput": 50.0,
        "items_per_second": 50.0,
        "perf_latency_p50": 19.5,
        "perf_latency_p99": 30.25,
        "bytes_sent_per_request": 90,
        "bytes_received_per_request": 1580,
        "perf_server_queue": 1.5,
        "perf_server_compute_input": 0.1,
        "perf_server_compute_infer": 15.0,
        "perf_server_compute_output": 0.4,
    }
    record.update(overrides)
    return record
