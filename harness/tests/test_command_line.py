"""The clients and the harness CLI fail like good command-line tools: one line on stderr, a
non-zero exit code, no traceback; a broken deployment folder fails only its own tests; test runs
keep out of the records the results matrix reads."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import PROJECT_ROOT
from harness.measuring.records import records_path

CLIENTS = {
    "embedding_cpu": ["sentences", "A sentence."],
    "yolo11_ensemble": ["deployments/yolo11_ensemble/fixtures/images/bus.jpg"],
    "cn_clip": ["text", "一只猫"],
    "resnet_npu": ["deployments/resnet_npu/fixtures/images/landscape_320x240.jpg"],
}
MISSING_FILE = {
    "embedding_cpu": ["files", "no/such/file.txt"],
    "yolo11_ensemble": ["no/such/file.jpg"],
    "cn_clip": ["image", "no/such/file.jpg"],
    "resnet_npu": ["no/such/file.jpg"],
}


def _run(args: list[str], timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=timeout, **kwargs)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _assert_one_line(done: subprocess.CompletedProcess, code: int, *needles: str) -> None:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == code, f"exit {done.returncode}, expected {code}; stderr:\n{done.stderr}"
    assert len(lines) == 1 and "Traceback" not in done.stderr, f"not one line:\n{done.stderr}"
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"


@pytest.mark.parametrize("deployment", sorted(CLIENTS))
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_client_with_server_down_says_so_in_one_line(deployment, protocol):
    port = _closed_port()
    args = CLIENTS[deployment]
    # --url/--protocol after the positional arguments (and after the subcommand where there is one)
    done = _run(
        [
            sys.executable,
            f"deployments/{deployment}/client.py",
            *args,
            "--url",
            f"127.0.0.1:{port}",
            "--protocol",
            protocol,
        ]
    )
    _assert_one_line(done, 1, "cannot reach", f"127.0.0.1:{port}", protocol)


@pytest.mark.parametrize("deployment", sorted(CLIENTS))
def test_client_options_before_the_subcommand_work_too(deployment):
    port = _closed_port()
    done = _run(
        [sys.executable, f"deployments/{deployment}/client.py", "--url", f"127.0.0.1:{port}", *CLIENTS[deployment]]
    )
    _assert_one_line(done, 1, f"127.0.0.1:{port}")


@pytest.mark.parametrize("deployment", sorted(CLIENTS))
def test_client_missing_file_and_bad_arguments(deployment):
    done = _run(
        [
            sys.executable,
            f"deployments/{deployment}/client.py",
            *MISSING_FILE[deployment],
            "--url",
            f"127.0.0.1:{_closed_port()}",
        ]
    )
    _assert_one_line(done, 2, "no/such/file")
    done = _run([sys.executable, f"deployments/{deployment}/client.py", "--no-such-option"])
    _assert_one_line(done, 2, "error")


def test_harness_cli_unknown_deployment_and_target():
    done = _run([sys.executable, "-m", "harness", "serve", "nosuch"])
    _assert_one_line(done, 2, "no deployment 'nosuch'", "embedding_cpu")
    done = _run([sys.executable, "-m", "harness", "serve", "yolo11_ensemble", "--target", "npu"])
    _assert_one_line(done, 2, "does not support target 'npu'")
    done = _run([sys.executable, "-m", "harness", "bench", "resnet_npu", "--only", "resnet50-b1", "nosuch-b1"])
    _assert_one_line(done, 2, "--only: no benchmark nosuch-b1", "efficientnet_lite0-b1")


def test_one_command_tree_reaches_every_tool():
    """The core's tools and, where the lab is installed, its tools (entry points ``triton_harness.commands``)."""
    from harness.__main__ import tools

    listed = _run([sys.executable, "-m", "harness", "--help"])
    assert listed.returncode == 0
    for name, (module, _) in tools().items():
        assert name in listed.stdout, f"{name} missing from python -m harness --help"
        done = _run([sys.executable, "-m", "harness", name, "--help"])
        assert done.returncode == 0 and "usage:" in done.stdout, (name, done.stdout[-500:], done.stderr[-500:])
    script = Path(sys.executable).parent / "triton-harness"
    assert script.exists(), "the console script comes with `pip install -e .` (make install)"
    assert _run([str(script), "list"]).returncode == 0


def test_without_installed_commands_the_tree_lists_the_core_alone(monkeypatch, capsys):
    """No distribution registers commands (the lab not installed): --help works and names no lab tool."""
    import harness.__main__ as cli

    monkeypatch.setattr(cli, "entry_points", lambda group: [])
    with pytest.raises(SystemExit) as stopped:
        cli.main(["--help"])
    listed = capsys.readouterr().out
    assert stopped.value.code == 0 and "pair-bench" in listed
    assert not {"soak", "faults", "hostile", "scaleout", "peers"} & set(listed.split())


def test_harness_serve_refuses_a_port_in_use_before_loading_models():
    """An old listener on the HTTP port: refused at once, never "ready" for somebody else's server."""
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        began = time.monotonic()
        done = _run(
            [
                sys.executable,
                "-m",
                "harness",
                "serve",
                "resnet_npu",
                "--http-port",
                str(port),
                "--grpc-port",
                str(_closed_port()),
                "--metrics-port",
                str(_closed_port()),
            ],
            timeout=120,
        )
        took = time.monotonic() - began
    assert done.returncode != 0 and "ready in" not in done.stdout, done.stdout + done.stderr
    assert str(port) in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert took < 30, f"found the busy port only after {took:.0f} s"


def test_a_broken_deployment_folder_fails_alone(tmp_path):
    good = tmp_path / "resnet_npu"
    shutil.copytree(
        PROJECT_ROOT / "deployments" / "resnet_npu",
        good,
        ignore=shutil.ignore_patterns("*.onnx", "envs", "__pycache__"),
    )
    broken = tmp_path / "broken_copy"
    shutil.copytree(good, broken)
    (broken / "deployment.toml").write_text(
        (good / "deployment.toml")
        .read_text()
        .replace('name = "resnet_npu"', 'name = "broken_copy"\nentry_models = ["nope"]\n[oops')
    )
    done = _run(
        [
            sys.executable,
            "-m",
            "pytest",
            "harness/tests/test_deployments.py",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        env={**os.environ, "HARNESS_DEPLOYMENTS_DIR": str(tmp_path)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "test_deployment_manifest_loads[broken_copy]" in done.stdout
    assert "test_check[resnet_npu-" in done.stdout
    done = _run(
        [
            sys.executable,
            "-m",
            "pytest",
            "harness/tests/test_deployments.py",
            "-q",
            "-p",
            "no:cacheprovider",
            "-k",
            "manifest_loads",
        ],
        env={**os.environ, "HARNESS_DEPLOYMENTS_DIR": str(tmp_path)},
    )
    assert done.returncode == 1 and "broken_copy/deployment.toml" in done.stdout, done.stdout


def test_test_runs_keep_out_of_the_matrix_records(request):
    """`make test` must not replace `make bench` numbers at the next `make matrix`."""
    if request.config.getoption("--record-results"):
        pytest.skip("this run was asked to record results")
    assert records_path() != PROJECT_ROOT / "results" / "records.jsonl"
