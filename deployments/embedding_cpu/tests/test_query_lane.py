"""A query lane: passages on ``embedding_onnx_text`` at a lower CPU priority (parameter ``nice``),
short queries on a copy of it at the default, on a real server (lab's short-under-long tool
measures what it buys)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from harness.fixtures import read_fixture
from harness.testing.processes import served_processes, stub_processes
from harness.testing.servers import deployment_server, started, stop_server

MODEL = "embedding_onnx_text"
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "expected_embeddings.json"


def thread_nice_values(process) -> set[int]:
    """The nice value of every thread of ``process`` (field 19 of /proc/<pid>/task/<tid>/stat)."""
    tasks = Path(f"/proc/{process.pid}/task")
    return {int((task / "stat").read_text().rsplit(")", 1)[1].split()[16]) for task in tasks.iterdir()}


@pytest.mark.server
@pytest.mark.timeout(300)
def test_nice_lowers_every_thread_of_the_model_stubs_and_answers_still_match_the_reference():
    fixture = read_fixture(FIXTURE)
    texts = [t for t in fixture["sentences"] if t]
    expected = np.asarray([e for t, e in zip(fixture["sentences"], fixture["embeddings"]) if t], np.float32)
    server = started(deployment_server("embedding_cpu", [MODEL], overrides={MODEL: {"parameters": {"nice": "10"}}}))
    try:
        actual = embed(server, texts)
        stubs = stub_processes(server.process.pid, MODEL)
        assert len(stubs) == 2 and all(thread_nice_values(stub) == {10} for stub in stubs)
        tritonserver = served_processes(server.process.pid)["server"]
        assert tritonserver and all(thread_nice_values(p) == {0} for p in tritonserver)
    finally:
        stop_server(server)
    cosines = (actual * expected).sum(-1) / np.linalg.norm(actual, axis=-1) / np.linalg.norm(expected, axis=-1)
    assert cosines.min() >= 0.999, cosines


def embed(server, texts: list[str]) -> np.ndarray:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        tensor = httpclient.InferInput("TEXT", [len(texts), 1], "BYTES")
        tensor.set_data_from_numpy(np.array([[t.encode()] for t in texts], dtype=object))
        return client.infer(MODEL, [tensor], headers=server.auth_headers()).as_numpy("EMBEDDING")
    finally:
        client.close()
