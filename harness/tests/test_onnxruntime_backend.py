"""The Python-based onnxruntime backend: batching as one run, native config keys honoured."""

from __future__ import annotations

import importlib.util
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.http as httpclient

from harness import PROJECT_ROOT
from harness.serving.launchers.local import HARNESS_BACKENDS, pytriton_root
from harness.tests.repositories import make_repository, ready_server, save_onnx, write_double_onnx

#: A model without batching (max_batch_size 0): every request's shape is its full shape.
UNBATCHED_CONFIG = """
name: "double_unbatched"
backend: "onnxruntime"
max_batch_size: 0
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 1, 4 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1, 4 ] } ]
dynamic_batching { max_queue_delay_microseconds: 100000 }
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = make_repository(tmp_path_factory.mktemp("ort"), models=("double",))
    write_double_onnx(repo / "double_unbatched" / "1" / "model.onnx")
    (repo / "double_unbatched" / "config.pbtxt").write_text(UNBATCHED_CONFIG)
    with ready_server(repo, ["double", "double_unbatched"]) as server:
        yield server


@pytest.fixture(scope="module")
def backend_module():
    """The backend's model.py, imported beside the wheel's triton_python_backend_utils and batched_runs."""
    sys.path[:0] = [str(pytriton_root() / "backends" / "python"), str(HARNESS_BACKENDS)]
    try:
        spec = importlib.util.spec_from_file_location(
            "harness_onnxruntime_backend",
            PROJECT_ROOT / "backends" / "onnxruntime" / "model.py",
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        del sys.path[:2]


@pytest.fixture(scope="module")
def double_session(tmp_path_factory):
    path = tmp_path_factory.mktemp("ort-session") / "double.onnx"
    write_double_onnx(path)
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def test_unbatched_requests_of_one_shape_each_get_their_own_outputs(backend_module, double_session):
    """Regression: same-shape requests to a model without batching were grouped, and every one
    of them got the first request's outputs."""
    arrays = [{"INPUT": np.full((1, 4), i, np.float32)} for i in range(3)]
    results = backend_module.run_requests(double_session.run, arrays, [["OUTPUT"]] * 3, batching=False)
    for i, result in enumerate(results):
        np.testing.assert_array_equal(result["OUTPUT"], np.full((1, 4), 2 * i, np.float32))


def test_batched_requests_are_split_back_by_their_row_counts(backend_module, double_session):
    arrays = [{"INPUT": np.full((rows, 4), rows, np.float32)} for rows in (1, 3, 2)]
    calls = []

    def run(names, feed):
        calls.append(feed["INPUT"].shape)
        return double_session.run(names, feed)

    results = backend_module.run_requests(run, arrays, [["OUTPUT"]] * 3, batching=True)
    assert calls == [(6, 4)], f"3 requests of one non-batch shape ran as {calls}, not one run"
    for rows, result in zip((1, 3, 2), results):
        np.testing.assert_array_equal(result["OUTPUT"], np.full((rows, 4), 2 * rows, np.float32))


def test_a_failed_run_answers_its_requests_with_the_error(backend_module, double_session):
    arrays = [{"INPUT": np.zeros((1, 5), np.float32)}, {"INPUT": np.ones((1, 4), np.float32)}]
    results = backend_module.run_requests(double_session.run, arrays, [["OUTPUT"]] * 2, batching=True)
    assert isinstance(results[0], str) and "onnxruntime backend" in results[0]
    np.testing.assert_array_equal(results[1]["OUTPUT"], np.full((1, 4), 2, np.float32))


def _double(server, model: str, value: int) -> np.ndarray:
    """``model``'s answer (a double model) to one ``[1, 4]`` request filled with ``value``."""
    with httpclient.InferenceServerClient(server.http_url) as client:
        infer_input = httpclient.InferInput("INPUT", [1, 4], "FP32")
        infer_input.set_data_from_numpy(np.full((1, 4), value, np.float32))
        return client.infer(model, [infer_input]).as_numpy("OUTPUT")


def test_served_unbatched_model_answers_each_request_with_its_own_outputs(server):
    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(partial(_double, server, "double_unbatched"), range(6)))
    for i, result in enumerate(results):
        np.testing.assert_array_equal(result, np.full((1, 4), 2 * i, np.float32))


def test_config_keys_reach_the_session(server):
    line = next(l for l in server.logs().splitlines() if "double: served by harness-python-onnxruntime" in l)
    assert "intra_op_thread_count=1" in line and "inter_op_thread_count=1" in line
    assert "execution_mode=ORT_SEQUENTIAL" in line
    assert "graph_optimization_level=ORT_ENABLE_EXTENDED" in line


def test_dynamic_batch_runs_as_one_execution_and_splits_results(server):
    with httpclient.InferenceServerClient(server.http_url) as client:
        before = client.get_inference_statistics("double")["model_stats"][0]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(partial(_double, server, "double"), range(4)))
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


# -- a request's bad values fail that request alone, as bad input (HTTP 400) -------------------------
LOOKUP_CONFIG = """
name: "lookup"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "IDS" data_type: TYPE_INT64 dims: [ -1 ] } ]
output [ { name: "ROWS" data_type: TYPE_FP32 dims: [ -1, 3 ] } ]
dynamic_batching { max_queue_delay_microseconds: 300000 }
"""
TABLE = np.arange(30, dtype=np.float32).reshape(10, 3)


def write_lookup_onnx(path):
    """``ROWS = TABLE[IDS]`` (a Gather, like a text model's embedding table): an id past 9 fails."""
    from onnx import TensorProto, helper

    ids = helper.make_tensor_value_info("IDS", TensorProto.INT64, ["batch", "n"])
    rows = helper.make_tensor_value_info("ROWS", TensorProto.FLOAT, ["batch", "n", 3])
    table = helper.make_tensor("table", TensorProto.FLOAT, [10, 3], TABLE.reshape(-1).tolist())
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "IDS"], ["ROWS"])], "lookup", [ids], [rows], initializer=[table]
    )
    save_onnx(graph, path)


def test_a_failed_batched_run_runs_its_requests_one_by_one(backend_module, tmp_path):
    write_lookup_onnx(tmp_path / "lookup.onnx")
    session = ort.InferenceSession(str(tmp_path / "lookup.onnx"), providers=["CPUExecutionProvider"])
    arrays = [{"IDS": np.array([[1, 2]])}, {"IDS": np.array([[1, 99]])}, {"IDS": np.array([[3, 4]])}]
    results = backend_module.run_requests(session.run, arrays, [["ROWS"]] * 3, batching=True)
    assert isinstance(results[1], str) and results[1].input_fault, results[1]
    np.testing.assert_array_equal(results[0]["ROWS"], TABLE[[[1, 2]]])
    np.testing.assert_array_equal(results[2]["ROWS"], TABLE[[[3, 4]]])


@pytest.mark.server
def test_an_id_past_the_table_is_a_400_and_its_batch_mates_are_answered(tmp_path):
    repo = tmp_path / "model_repository"
    write_lookup_onnx(repo / "lookup" / "1" / "model.onnx")
    (repo / "lookup" / "config.pbtxt").write_text(LOOKUP_CONFIG)

    def send(ids):
        with httpclient.InferenceServerClient(server.http_url) as client:
            infer_input = httpclient.InferInput("IDS", [1, len(ids)], "INT64")
            infer_input.set_data_from_numpy(np.array([ids], np.int64))
            try:
                return client.infer("lookup", [infer_input]).as_numpy("ROWS")
            except Exception as exc:  # noqa: BLE001 - the answer under test
                return exc

    with ready_server(repo, ["lookup"]) as server:
        with ThreadPoolExecutor(3) as pool:  # one dynamic batch (300 ms queue delay)
            good, bad, other = pool.map(send, [[1, 2], [1, 99], [3, 4]])
        np.testing.assert_array_equal(good, TABLE[[[1, 2]]])
        np.testing.assert_array_equal(other, TABLE[[[3, 4]]])
        assert "400" in str(bad.status()) and "out of" in str(bad), bad


def test_max_batch_tokens_runs_a_batch_in_row_chunks_within_the_budget(backend_module, tmp_path):
    """rows x length of every session run stays within the budget (a row over it runs alone), and
    every request still gets its own rows, in order."""
    write_lookup_onnx(tmp_path / "lookup.onnx")
    session = ort.InferenceSession(str(tmp_path / "lookup.onnx"), providers=["CPUExecutionProvider"])
    shapes = []

    def run(names, feed):
        shapes.append(feed["IDS"].shape)
        return session.run(names, feed)

    rng = np.random.default_rng(0)
    arrays = [{"IDS": rng.integers(0, 10, (rows, 6))} for rows in (3, 1, 4)] + [{"IDS": rng.integers(0, 10, (1, 30))}]
    results = backend_module.run_requests(backend_module.row_chunks(run, 12), arrays, [["ROWS"]] * 4, batching=True)
    assert sorted(shapes) == [(1, 30), (2, 6), (2, 6), (2, 6), (2, 6)], shapes
    for tensors, result in zip(arrays, results):
        np.testing.assert_array_equal(result["ROWS"], TABLE[tensors["IDS"]])
