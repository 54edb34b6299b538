"""perf_analyzer as a load generator: its CSV, its input data and command line, why it cannot
run here, and the records of a scenario naming it as their generator."""

from __future__ import annotations

import json

from harness.measuring.matrix import generator_family
from harness.measuring.perf_analyzer import availability, command, input_data, parse_csv

PA_CSV = """Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency
4,120.5,30,900,1500,80,25000,60,20,33000,36000,37000,41000
1,50.25,25,700,100,70,15000,50,18,19800,21000,22000,25000
"""


def test_perf_analyzer_csv_parsed_to_record_fields():
    rows = parse_csv(PA_CSV)
    assert [r["concurrency"] for r in rows] == [1, 4]
    first = rows[0]
    assert first["perf_throughput"] == 50.25 and first["perf_latency_p99"] == 25.0
    assert first["perf_server_queue"] == 0.1 and first["perf_server_compute_infer"] == 15.0
    assert first["perf_server_request"] == round((100 + 70 + 15000 + 50) / 1000, 3)


def test_perf_analyzer_input_data_and_command(tmp_path):
    import numpy as np

    data, batch = input_data({"TEXT": np.array([[b"hello"]], dtype=object)}, batched=True)
    assert batch == 1 and data == {"data": [{"TEXT": {"content": ["hello"], "shape": [1]}}]}
    data, _ = input_data({"IMAGE": np.array([b"\xff\xd8\xff"], dtype=object)}, batched=False)
    assert data["data"][0]["IMAGE"] == {"b64": "/9j/", "shape": [1]}
    cmd = command("m", "127.0.0.1:8001", "grpc", [4], tmp_path / "in.json", tmp_path / "out.csv", 3000)
    assert cmd[:3] == ["perf_analyzer", "-m", "m"] and "4:4" in cmd and "-f" in cmd


def test_perf_analyzer_availability_says_why(tmp_path, monkeypatch):
    ok, reason = availability("definitely-not-perf-analyzer")
    assert not ok and "glibc" in reason
    fake = tmp_path / "perf_analyzer"
    fake.write_text(
        "#!/bin/sh\necho 'perf_analyzer: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.38` not found' >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    ok, reason = availability(str(fake))
    assert not ok and "newer glibc" in reason


def test_perf_analyzer_scenario_writes_records_naming_the_generator(tmp_path, monkeypatch):
    """run_scenario end to end with a stand-in perf_analyzer binary and a stand-in server."""
    import types

    import numpy as np

    from harness.deployments import Benchmark
    from harness.measuring import perf_analyzer
    from harness.measuring.loadgen import Workload

    fake = tmp_path / "perf_analyzer"
    fake.write_text(
        "#!/usr/bin/env python3\nimport sys\n"
        "if '--version' in sys.argv: print('perf_analyzer 2.60.0'); sys.exit(0)\n"
        "out = sys.argv[sys.argv.index('-f') + 1]\n"
        f"open(out, 'w').write({PA_CSV.splitlines()[0]!r} + '\\n' + {PA_CSV.splitlines()[2]!r} + '\\n')\n"
    )
    fake.chmod(0o755)
    perf_analyzer.availability.cache_clear()
    monkeypatch.setenv("HARNESS_RESULTS_DIR", str(tmp_path / "results"))

    class Client:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def get_model_config(self, model):
            return {"backend": "python", "max_batch_size": 8}

    workload = Workload(
        model="m", inputs={"TEXT": np.array([[b"hi"]], dtype=object)}, outputs=["EMBEDDING"], variant="m text"
    )
    server = types.SimpleNamespace(
        grpc_url="127.0.0.1:1",
        http_url="127.0.0.1:2",
        backend_implementation=str,
        describe=lambda: {"server_mode": "local", "server_version": "2.51.0"},
    )
    deployment = types.SimpleNamespace(name="toy", resolve=lambda ref: lambda ctx: workload)
    ctx = types.SimpleNamespace(deployment=deployment, server=server, target="cpu", http_client=Client)
    rows = perf_analyzer.run_scenario(
        ctx, Benchmark(id="m-b1", workload="checks.py:w", concurrency=(1,)), duration_s=1, binary=str(fake)
    )
    perf_analyzer.availability.cache_clear()
    assert len(rows) == 1 and rows[0]["generator"].startswith("perf_analyzer")
    assert rows[0]["perf_throughput"] == 50.25 and rows[0]["bytes_sent_per_request"] > 0
    assert "-b 1" in rows[0]["perf_analyzer_command"] and "--input-data" in rows[0]["perf_analyzer_command"]
    written = (tmp_path / "results" / "records.jsonl").read_text()
    assert generator_family(json.loads(written.splitlines()[0])) == "perf_analyzer"
