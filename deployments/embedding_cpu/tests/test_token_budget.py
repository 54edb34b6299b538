"""Token budgets: the rows of one transformer run are grouped by length and split so that padded
tokens (rows x longest) stay within ``max_batch_tokens``; on a real server a burst of the longest
requests the gate accepts stays within the memory bound lab/docs/reliability.md states, and the
memory comes back after it."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import psutil
import pytest
from embedding_cpu_processing.bls import plan_batches

MIB = 2**20
#: RSS growth of one onnxruntime run of all-MiniLM-L6-v2 per padded token at 512 tokens (measured:
#: 59-64 KiB for 8-64 rows; lab/docs/reliability.md "Token budgets").
RSS_PER_TOKEN = 64 * 1024


@pytest.mark.parametrize("budget", [None, 64, 100, 1000])
def test_plan_batches_keeps_every_batch_within_the_token_budget(budget):
    lengths = np.random.default_rng(1).integers(1, 120, 200).tolist() + [300]
    batches = plan_batches(lengths, 32, budget)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    for batch in batches:
        longest = max(lengths[i] for i in batch)
        assert len(batch) <= 32
        if budget and len(batch) > 1:
            assert len(batch) * longest <= budget, (batch, longest)
    if budget and budget < 300:
        assert [200] in batches, "the text longer than the budget runs alone"


def memory_bound(instances: int, max_batch_tokens: int, output_bytes: int) -> int:
    """The stated bound of tritonserver + stub RSS growth for a burst of token-id requests
    (docs: lab/docs/reliability.md, "Token budgets"): each instance's run holds at most
    ``max_batch_tokens x RSS_PER_TOKEN``; the burst's outputs (``last_hidden_state``) are held
    about twice (the joined rows, the stub's shared-memory copy); plus 64 MiB of allocator slack."""
    return instances * max_batch_tokens * RSS_PER_TOKEN + 2 * output_bytes + 64 * MIB


class TreeRss(threading.Thread):
    """The peak RSS of a process and its children, sampled every 20 ms while running."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.root, self.peak, self.stopping = psutil.Process(pid), 0, threading.Event()

    def now(self) -> int:
        total = 0
        for process in [self.root, *self.root.children(recursive=True)]:
            try:
                total += process.memory_info().rss
            except psutil.NoSuchProcess:
                pass
        return total

    def run(self):
        while not self.stopping.wait(0.02):
            self.peak = max(self.peak, self.now())


def _ids_request(url: str, ids: np.ndarray) -> np.ndarray:
    import tritonclient.http as httpclient

    inputs = []
    for name, values in (("input_ids", ids), ("attention_mask", np.ones_like(ids))):
        tensor = httpclient.InferInput(name, list(values.shape), "INT64")
        tensor.set_data_from_numpy(values)
        inputs.append(tensor)
    with httpclient.InferenceServerClient(url, network_timeout=300, connection_timeout=300) as client:
        return client.infer("embedding_onnx", inputs).as_numpy("last_hidden_state")


@pytest.mark.server
def test_a_burst_of_long_requests_stays_within_the_bound_and_memory_returns():
    """4 requests of 8 rows of the longest token ids the model takes (its positions: 512 for
    all-MiniLM-L6-v2, one dynamic batch of 32 x 512 without a budget: ~1 GiB) stay within the bound
    for the model's max_batch_tokens, each request gets its own rows (equal to the ONNX file run in
    this process), and 30 s after the burst RSS is within 256 MiB of idle."""
    import onnxruntime as ort

    from harness.deployments import get_deployment
    from harness.repository import parameter, read_config
    from harness.testing.processes import process_memory
    from harness.testing.servers import deployment_server, stop_server

    deployment = get_deployment("embedding_cpu")
    vocab_size, positions = deployment.checks_module.token_limits()
    server = deployment_server(deployment, ["embedding_onnx"])
    server.start()
    try:
        server.wait_ready(300)
        repository = server.options.model_repository
        config = read_config(f"{repository}/embedding_onnx/config.pbtxt")
        budget = int(parameter(config, "max_batch_tokens"))
        instances = sum(group.count for group in config.instance_group) or 1
        requests = [np.random.default_rng(seed).integers(0, vocab_size, (8, positions)) for seed in range(4)]
        _ids_request(server.http_url, requests[0][:1, :8])  # warm
        sampler = TreeRss(server.process.pid)
        time.sleep(1)
        idle = sampler.now()
        sampler.start()
        with ThreadPoolExecutor(len(requests)) as pool:
            outputs = list(pool.map(lambda ids: _ids_request(server.http_url, ids), requests))
        sampler.stopping.set()
        sampler.join()
        growth = sampler.peak - idle
        bound = memory_bound(instances, budget, sum(o.nbytes for o in outputs))
        assert growth <= bound, f"RSS grew {growth / MIB:.0f} MiB in the burst, over the bound {bound / MIB:.0f} MiB"

        session = ort.InferenceSession(f"{repository}/embedding_onnx/1/model.onnx", providers=["CPUExecutionProvider"])
        for ids, output in zip(requests, outputs):
            assert output.shape[:2] == (8, positions)  # the vector size: the allclose below
            alone = session.run(
                ["last_hidden_state"], {"input_ids": ids[-1:], "attention_mask": np.ones_like(ids[-1:])}
            )
            np.testing.assert_allclose(output[-1:], alone[0], atol=2e-4)

        deadline = time.monotonic() + 30
        while (after := sampler.now()) - idle > 256 * MIB and time.monotonic() < deadline:
            time.sleep(1)
        held = process_memory(server.process.pid)  # which process holds it, when it fails
        assert after - idle <= 256 * MIB, (
            f"RSS still {(after - idle) / MIB:.0f} MiB over idle 30 s after the burst: {held}"
        )
    finally:
        stop_server(server)
