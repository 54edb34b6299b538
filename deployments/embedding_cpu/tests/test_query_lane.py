"""A query lane: passages on ``embedding_onnx_text`` at a lower CPU priority (parameter ``nice``),
short queries on a copy of it at the default, on a real server (what it buys:
docs/deployments/embedding_cpu.md, "A lane for queries")."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.deployments import get_deployment
from harness.manifest import ConfigOverrides
from harness.testing.processes import served_processes, stub_processes
from harness.testing.servers import deployment_server, started, stop_server

MODEL = "embedding_onnx_text"


def thread_nice_values(process) -> set[int]:
    """The nice value of every thread of ``process`` (field 19 of /proc/<pid>/task/<tid>/stat)."""
    tasks = Path(f"/proc/{process.pid}/task")
    return {int((task / "stat").read_text().rsplit(")", 1)[1].split()[16]) for task in tasks.iterdir()}


@pytest.mark.server
@pytest.mark.timeout(300)
def test_nice_lowers_every_thread_of_the_model_stubs_and_answers_still_match_the_reference():
    checks = get_deployment("embedding_cpu").checks_module
    server = started(
        deployment_server("embedding_cpu", [MODEL], overrides={MODEL: ConfigOverrides(parameters={"nice": "10"})})
    )
    try:
        checks._check_sentence_model(SimpleNamespace(server=server), MODEL, skip_empty=True)
        stubs = stub_processes(server.process.pid, MODEL)
        assert len(stubs) == 2 and all(thread_nice_values(stub) == {10} for stub in stubs)
        tritonserver = served_processes(server.process.pid)["server"]
        assert tritonserver and all(thread_nice_values(p) == {0} for p in tritonserver)
    finally:
        stop_server(server)
