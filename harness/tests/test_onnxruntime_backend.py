"""The Python-based onnxruntime backend: batching as one run, native config keys honoured."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.http as httpclient

from harness.tests.repositories import make_repository, ready_server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = make_repository(tmp_path_factory.mktemp("ort"), models=("double",))
    with ready_server(repo, ["double"]) as server:
        yield server


def test_config_keys_reach_the_session(server):
    line = next(l for l in server.logs().splitlines() if "served by harness-python-onnxruntime" in l)
    assert "intra_op_thread_count=1" in line and "inter_op_thread_count=1" in line
    assert "execution_mode=ORT_SEQUENTIAL" in line
    assert "graph_optimization_level=ORT_ENABLE_EXTENDED" in line


def test_dynamic_batch_runs_as_one_execution_and_splits_results(server):
    def send(i):
        with httpclient.InferenceServerClient(server.http_url) as client:
            infer_input = httpclient.InferInput("INPUT", [1, 4], "FP32")
            infer_input.set_data_from_numpy(np.full((1, 4), i, np.float32))
            return client.infer("double", [infer_input]).as_numpy("OUTPUT")

    with httpclient.InferenceServerClient(server.http_url) as client:
        before = client.get_inference_statistics("double")["model_stats"][0]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(send, range(4)))
    with httpclient.InferenceServerClient(server.http_url) as client:
        after = client.get_inference_statistics("double")["model_stats"][0]
    for i, result in enumerate(results):
        np.testing.assert_array_equal(result, np.full((1, 4), 2 * i, np.float32))
    inferences = after["inference_count"] - before["inference_count"]
    executions = after["execution_count"] - before["execution_count"]
    assert inferences == 4
    assert executions < 4, f"4 requests ran as {executions} executions: the batch was not formed"


def test_wrong_shape_is_a_clear_error_and_the_model_keeps_serving(server):
    with httpclient.InferenceServerClient(server.http_url) as client:
        bad = httpclient.InferInput("INPUT", [1, 5], "FP32")
        bad.set_data_from_numpy(np.zeros((1, 5), np.float32))
        with pytest.raises(Exception, match="shape"):
            client.infer("double", [bad])
        assert client.is_model_ready("double")
