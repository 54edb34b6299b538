"""A served deployment stops the way a service manager stops it: SIGTERM to the whole process group
of ``make deploy-*`` gives no traceback, and the command returns only when its ports are free."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from harness import PROJECT_ROOT
from harness.serving.launchers.base import ports_in_use
from triton_gate.serve import free_ports


@pytest.mark.server
@pytest.mark.timeout(600)
def test_make_deploy_stopped_with_sigterm_is_quiet_and_frees_its_ports():
    ports = free_ports(3)
    serve_args = "--http-port {} --grpc-port {} --metrics-port {}".format(*ports)
    make = subprocess.Popen(
        ["make", "--no-print-directory", "deploy-embedding", f"SERVE_ARGS={serve_args}"],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, as a terminal or a service manager gives it
    )
    output = []
    for line in make.stdout:
        output.append(line)
        if " ready in " in line:
            break
    assert make.poll() is None, "make deploy-embedding exited before it was ready:\n" + "".join(output)

    os.killpg(make.pid, signal.SIGTERM)
    rest, _ = make.communicate(timeout=120)
    output.append(rest)
    text = "".join(output)

    assert "Traceback" not in text, text
    assert ports_in_use("127.0.0.1", ports) == [], text
