"""perf_analyzer as a load generator: its CSV, its input data and command line, why it cannot
run here, the records of a scenario naming it as their generator, and the container runner
(images/perf-analyzer) against a real tritonserver."""

from __future__ import annotations

import base64
import json
import os
import subprocess

import pytest

from harness.measuring.matrix import generator_family
from harness_lab.perf_analyzer import availability, command, input_data, parse_csv, select_runner
from harness_lab.perf_analyzer_container import Runner, default_image, docker_command, image_version

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
    # binary BYTES go as Triton's serialized tensor: each element after its 4-byte little-endian length
    assert data["data"][0]["IMAGE"] == {"b64": base64.b64encode(b"\x03\0\0\0\xff\xd8\xff").decode(), "shape": [1]}
    data, _ = input_data({"IMAGE": np.array([b"\xff", b"\xfe\x00"], dtype=object)}, batched=False)
    assert base64.b64decode(data["data"][0]["IMAGE"]["b64"]) == b"\x01\0\0\0\xff\x02\0\0\0\xfe\x00"
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
    from harness.measuring.loadgen import Workload
    from harness_lab import perf_analyzer

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
        ctx, Benchmark(id="m-b1", workload="checks.py:w", concurrency=[1]), duration_s=1, binary=str(fake)
    )
    perf_analyzer.availability.cache_clear()
    assert len(rows) == 1 and rows[0]["generator"].startswith("perf_analyzer")
    assert rows[0]["perf_throughput"] == 50.25 and rows[0]["bytes_sent_per_request"] > 0
    assert "-b 1" in rows[0]["perf_analyzer_command"] and "--input-data" in rows[0]["perf_analyzer_command"]
    written = (tmp_path / "results" / "records.jsonl").read_text()
    assert generator_family(json.loads(written.splitlines()[0])) == "perf_analyzer"


# --- the container runner ------------------------------------------------------------------------


def test_command_carries_headers_and_stability(tmp_path):
    cmd = command(
        "m", "127.0.0.1:8000", "http", [1], tmp_path / "in.json", tmp_path / "out.csv", 2000,
        headers={"X-Admin": "t"}, stability_percent=50,
    )  # fmt: skip
    assert cmd[cmd.index("-H") + 1] == "X-Admin:t"
    assert cmd[cmd.index("--stability-percentage") + 1] == "50"


def test_docker_command_host_network_same_path_mount_and_cpuset(tmp_path):
    inner = ["perf_analyzer", "-m", "m", "--input-data", str(tmp_path / "in.json")]
    run = docker_command(inner, "img:1", tmp_path, {3, 1})
    assert run[:3] == ["docker", "run", "--rm"]
    assert run[run.index("--network") + 1] == "host"
    assert run[run.index("-v") + 1] == f"{tmp_path}:{tmp_path}"
    assert run[run.index("--cpuset-cpus") + 1] == "1,3"
    assert run[run.index("img:1") + 1 :] == inner
    assert "--cpuset-cpus" not in docker_command(inner, "img:1", tmp_path)


def test_runner_wraps_only_in_a_container_and_names_generator_and_pinning(tmp_path):
    cmd = ["/opt/pa/perf_analyzer", "-m", "m"]
    local = Runner(version="Perf Analyzer Version 2.60.0", binary=cmd[0])
    assert local.command(cmd, tmp_path, {1}) == cmd
    assert local.generator == "perf_analyzer (Perf Analyzer Version 2.60.0)"
    assert local.pinning("server cpus 0 (3 processes), generator cpus 1", {1}).endswith("generator cpus 1")
    boxed = Runner(version="2.60.0", image="img:1")
    wrapped = boxed.command(cmd, tmp_path, {1})
    assert wrapped[0] == "docker" and wrapped[wrapped.index("img:1") + 1 :] == ["perf_analyzer", "-m", "m"]
    assert boxed.generator == "perf_analyzer 2.60.0 (container)"
    assert boxed.pinning("server cpus 0 (3 processes), generator cpus 1", {1}) == (
        "server cpus 0 (3 processes), generator cpus 1 (perf_analyzer container: --cpuset-cpus 1)"
    )
    assert boxed.pinning("none", None) == "none"


def test_no_binary_and_no_image_is_one_line_naming_the_make_target():
    with pytest.raises(RuntimeError, match="make perf-analyzer-image") as error:
        select_runner("definitely-not-perf-analyzer", "triton-harness/no-such-perf-analyzer:0")
    assert "\n" not in str(error.value) and "glibc" in str(error.value)


def _engine_and_image() -> str:
    """The perf_analyzer image, or skip saying what is missing."""
    try:
        engine = subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        engine = False
    if not engine:
        pytest.skip("no Docker engine answers (make docker-engine)")
    image = default_image()
    if image_version(image) is None:
        pytest.skip(f"no {image} image (make perf-analyzer-image)")
    return image


@pytest.fixture(scope="module")
def echo_server(tmp_path_factory):
    from harness.tests.repositories import make_repository, ready_server

    _engine_and_image()
    repo = make_repository(tmp_path_factory.mktemp("perf-analyzer"), models=("echo",))
    with ready_server(repo, ["echo"]) as server:
        yield server


@pytest.mark.timeout(300)
@pytest.mark.parametrize("text", [b"hello", b"\xff\xd8\xff\xe0"], ids=["utf8-content", "binary-b64"])
def test_container_runner_measures_a_real_server(echo_server, text, tmp_path, monkeypatch):
    """perf_analyzer in the image, against a real tritonserver's echo model: records name the
    container generator and its pinning, and the server counted the requests it reports."""
    import types

    import numpy as np

    from harness.context import DeploymentContext
    from harness.deployments import Benchmark
    from harness.measuring.loadgen import Workload
    from harness_lab import perf_analyzer

    image = default_image()
    runner = select_runner("definitely-not-perf-analyzer")
    assert runner.image == image and runner.version == image_version(image)
    workload = Workload(model="echo", inputs={"TEXT": np.array([[text]], dtype=object)}, outputs=["TEXT_OUT"])
    deployment = types.SimpleNamespace(name="toy", resolve=lambda ref: lambda ctx: workload)
    monkeypatch.setenv("HARNESS_RESULTS_DIR", str(tmp_path / "results"))
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) > 1:
        monkeypatch.setenv("HARNESS_PIN", f"server={cpus[0]} generator={cpus[-1]}")
    mine = os.sched_getaffinity(0)
    ctx = DeploymentContext(deployment, echo_server)
    before = _successes(ctx)
    try:
        # stability 100 %: this checks the runner, not the machine's noise
        rows = perf_analyzer.run_scenario(
            ctx,
            Benchmark(id="echo-b1", workload="w", concurrency=[2], protocol="grpc"),
            duration_s=1,
            runner=runner,
            stability_percent=100,
        )
    finally:
        os.sched_setaffinity(0, mine)
    counted = _successes(ctx) - before
    assert len(rows) == 1 and rows[0]["concurrency"] == 2
    row = rows[0]
    assert row["generator"] == f"perf_analyzer {image_version(image)} (container)"
    assert row["perf_analyzer_command"].startswith("docker run --rm --network host")
    assert row["perf_throughput"] > 0 and row["perf_latency_p50"] > 0
    # perf_analyzer reports the mean of its last 3 one-second windows; the server saw at least those
    assert counted >= 0.5 * row["perf_throughput"] * 3
    if len(cpus) > 1:
        assert f"--cpuset-cpus {cpus[-1]}" in row["perf_analyzer_command"]
        assert row["pinning"].startswith(f"server cpus {cpus[0]}") and "--cpuset-cpus" in row["pinning"]
    written = (tmp_path / "results" / "records.jsonl").read_text().splitlines()
    assert generator_family(json.loads(written[0])) == "perf_analyzer"


def _successes(ctx) -> int:
    with ctx.http_client() as client:
        stats = client.get_inference_statistics("echo")["model_stats"][0]
    return int(stats["inference_stats"]["success"]["count"])
