"""The Python-based openvino backend: the native backend's keys and fixed batch, batching as one infer
call, a bad request failing alone."""

from __future__ import annotations

import importlib.util
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.http as httpclient

from harness import PROJECT_ROOT
from harness.serving.launchers.local import HARNESS_BACKENDS, pytriton_root
from harness.tests.repositories import ready_server, write_double_onnx

#: NGC's openvino_backend keys; ENABLE_BATCH_PADDING: executions of fewer than 8 rows are padded to 8.
DOUBLE_CONFIG = """
name: "double_ov"
backend: "openvino"
default_model_filename: "model.onnx"
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
dynamic_batching { max_queue_delay_microseconds: 300000 }
parameters { key: "PERFORMANCE_HINT" value: { string_value: "LATENCY" } }
parameters { key: "NUM_STREAMS" value: { string_value: "1" } }
parameters { key: "INFERENCE_NUM_THREADS" value: { string_value: "1" } }
parameters { key: "ENABLE_BATCH_PADDING" value: { string_value: "YES" } }
parameters { key: "intra_op_thread_count" value: { string_value: "1" } }
"""
#: Dynamic shapes, no batching: the batch is a -1 dim of the request itself, as in the native README.
DYNAMIC_CONFIG = """
name: "double_dynamic"
backend: "openvino"
default_model_filename: "model.onnx"
max_batch_size: 0
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]
parameters { key: "INFERENCE_PRECISION_HINT" value: { string_value: "f32" } }
"""
#: No ENABLE_BATCH_PADDING: as on NGC, only executions of exactly max_batch_size rows run.
UNPADDED_CONFIG = DOUBLE_CONFIG.replace('name: "double_ov"', 'name: "double_unpadded"').replace(
    'parameters { key: "ENABLE_BATCH_PADDING" value: { string_value: "YES" } }\n', ""
)


@pytest.fixture(scope="module")
def backend():
    """The backend's model.py, imported beside the wheel's triton_python_backend_utils and batched_runs."""
    sys.path[:0] = [str(pytriton_root() / "backends" / "python"), str(HARNESS_BACKENDS)]
    try:
        spec = importlib.util.spec_from_file_location(
            "harness_openvino_backend", PROJECT_ROOT / "backends" / "openvino" / "model.py"
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        del sys.path[:2]


def doubling_run(calls):
    """A run that doubles ``INPUT`` and records each feed; a row of -1 fails the whole run."""

    def run(names, feed):
        calls.append({n: a.copy() for n, a in feed.items()})
        if (feed["INPUT"] == -1).all(axis=1).any():
            raise RuntimeError("Exception from src/plugins/intel_cpu: value -1 refused")
        return [feed["INPUT"] * 2]

    return run


def test_batched_requests_run_as_one_padded_call_and_split_back(backend):
    calls = []
    arrays = [{"INPUT": np.full((n, 4), i, np.float32)} for i, n in enumerate([1, 3, 2])]
    results = backend.run_requests(doubling_run(calls), arrays, [["OUTPUT"]] * 3, max_batch_size=8, pad=True)
    assert len(calls) == 1 and calls[0]["INPUT"].shape == (8, 4)
    np.testing.assert_array_equal(calls[0]["INPUT"][6:], 0)
    for i, n in enumerate([1, 3, 2]):
        np.testing.assert_array_equal(results[i]["OUTPUT"], np.full((n, 4), 2 * i, np.float32))


def test_without_padding_a_short_execution_fails_as_on_the_native_backend(backend):
    results = backend.run_requests(doubling_run([]), [{"INPUT": np.ones((3, 4), np.float32)}], [["OUTPUT"]], 8)
    assert isinstance(results[0], str) and results[0].input_fault
    assert "expected requests with batch size '8', got '3'" in results[0]
    exact = backend.run_requests(doubling_run([]), [{"INPUT": np.ones((8, 4), np.float32)}], [["OUTPUT"]], 8)
    np.testing.assert_array_equal(exact[0]["OUTPUT"], np.full((8, 4), 2, np.float32))


def test_a_failed_batched_run_runs_its_requests_one_by_one(backend):
    calls = []
    arrays = [{"INPUT": np.full((1, 4), v, np.float32)} for v in (1, -1, 3)]
    results = backend.run_requests(doubling_run(calls), arrays, [["OUTPUT"]] * 3, max_batch_size=8, pad=True)
    assert len(calls) == 4  # the batch, then each request alone
    assert isinstance(results[1], str) and "value -1 refused" in results[1]
    np.testing.assert_array_equal(results[0]["OUTPUT"], np.full((1, 4), 2, np.float32))
    np.testing.assert_array_equal(results[2]["OUTPUT"], np.full((1, 4), 6, np.float32))


def test_an_empty_tensor_is_refused_without_a_run(backend):
    calls = []
    arrays = [{"INPUT": np.ones((1, 4), np.float32)}, {"INPUT": np.ones((1, 0), np.float32)}]
    results = backend.run_requests(doubling_run(calls), arrays, [["OUTPUT"]] * 2, max_batch_size=8, pad=True)
    assert len(calls) == 1 and calls[0]["INPUT"].shape == (8, 4)
    assert isinstance(results[1], str) and results[1].input_fault and "'INPUT' [1, 0] holds no elements" in results[1]
    np.testing.assert_array_equal(results[0]["OUTPUT"], np.full((1, 4), 2, np.float32))


def test_requests_of_other_shapes_or_without_batching_run_apart(backend):
    calls = []
    arrays = [{"X": np.zeros((1, 2))}, {"X": np.zeros((1, 3))}, {"X": np.zeros((2, 2))}]
    run = lambda names, feed: calls.append(feed["X"].shape) or [feed["X"]]
    backend.run_requests(run, arrays, [["Y"]] * 3, max_batch_size=4, pad=True)
    assert sorted(calls) == [(4, 2), (4, 3)]
    calls.clear()
    results = backend.run_requests(run, arrays, [["Y"]] * 3, max_batch_size=0)
    assert calls == [(1, 2), (1, 3), (2, 2)] and results[2]["Y"].shape == (2, 2)


def test_native_keys_become_openvino_properties_and_bad_values_are_refused(backend):
    def config(**parameters):
        return {"parameters": {k: {"string_value": v} for k, v in parameters.items()}}

    assert backend.device_properties(
        config(PERFORMANCE_HINT="throughput", NUM_STREAMS="auto", INFERENCE_NUM_THREADS="2", HINT_BF16="YES")
    ) == {
        "PERFORMANCE_HINT": "THROUGHPUT",
        "NUM_STREAMS": "AUTO",
        "INFERENCE_NUM_THREADS": 2,
        "INFERENCE_PRECISION_HINT": "bf16",
    }
    assert backend.device_properties(config()) == {}  # the engine's defaults, as on NGC (BF16 where the CPU has it)
    assert backend.device_properties(config(INFERENCE_PRECISION_HINT="FP32")) == {"INFERENCE_PRECISION_HINT": "f32"}
    for key, value in [
        ("NUM_STREAMS", "many"),
        ("HINT_BF16", "no"),
        ("INFERENCE_NUM_THREADS", "-1"),
        ("PERFORMANCE_HINT", "fast"),
    ]:
        with pytest.raises(backend.ConfigError, match=key):
            backend.device_properties(config(**{key: value}))
    assert backend.ignored_keys(config(intra_op_thread_count="1", NUM_STREAMS="1")) == ["intra_op_thread_count"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("openvino") / "model_repository"
    for name, config in [
        ("double_ov", DOUBLE_CONFIG),
        ("double_dynamic", DYNAMIC_CONFIG),
        ("double_unpadded", UNPADDED_CONFIG),
    ]:
        write_double_onnx(repo / name / "1" / "model.onnx")
        (repo / name / "config.pbtxt").write_text(config)
    with ready_server(repo, ["double_ov", "double_dynamic", "double_unpadded"]) as server:
        yield server


def _infer(server, model, array):
    with httpclient.InferenceServerClient(server.http_url) as client:
        infer_input = httpclient.InferInput("INPUT", list(array.shape), "FP32")
        infer_input.set_data_from_numpy(array)
        try:
            return client.infer(model, [infer_input]).as_numpy("OUTPUT")
        except Exception as exc:  # noqa: BLE001 - the answer under test
            return exc


@pytest.mark.server
def test_config_keys_reach_the_compiled_model(server):
    line = next(l for l in server.logs().splitlines() if "double_ov: served by harness-python-openvino/" in l)
    for part in ["PERFORMANCE_HINT=LATENCY", "NUM_STREAMS=1", "INFERENCE_NUM_THREADS=1", "batch=fixed 8 padded"]:
        assert part in line, line
    assert "precision=" in line and "cpu_flags=" in line and "ignored_parameters=intra_op_thread_count" in line
    dynamic = next(l for l in server.logs().splitlines() if "double_dynamic: served by" in l)
    assert "precision=f32" in dynamic and "batch=none" in dynamic, dynamic


@pytest.mark.server
def test_dynamic_batch_runs_as_one_infer_call_and_splits_results(server):
    def stats():
        with httpclient.InferenceServerClient(server.http_url) as client:
            return client.get_inference_statistics("double_ov")["model_stats"][0]

    before = stats()
    with ThreadPoolExecutor(4) as pool:  # one dynamic batch (300 ms queue delay)
        results = list(pool.map(lambda i: _infer(server, "double_ov", np.full((1, 4), i, np.float32)), range(4)))
    after = stats()
    for i, result in enumerate(results):
        np.testing.assert_array_equal(result, np.full((1, 4), 2 * i, np.float32))
    assert after["inference_count"] - before["inference_count"] == 4
    executions = after["execution_count"] - before["execution_count"]
    assert executions < 4, f"4 requests ran as {executions} executions: the batch was not formed"


@pytest.mark.server
def test_dynamic_shapes_run_each_request_at_its_own_batch(server):
    for rows in (1, 5):
        np.testing.assert_array_equal(_infer(server, "double_dynamic", np.ones((rows, 4), np.float32)), 2)


@pytest.mark.server
def test_a_bad_request_fails_alone_with_400_and_the_model_keeps_serving(server):
    with ThreadPoolExecutor(3) as pool:  # a 5-column request among good ones in the same queue window
        good, bad, other = pool.map(
            lambda a: _infer(server, "double_dynamic", a),
            [np.ones((2, 4), np.float32), np.ones((1, 5), np.float32), np.ones((3, 4), np.float32)],
        )
    np.testing.assert_array_equal(good, 2)
    np.testing.assert_array_equal(other, 2)
    assert "400" in str(bad.status()), bad
    short = _infer(server, "double_unpadded", np.ones((3, 4), np.float32))
    assert "400" in str(short.status()) and "ENABLE_BATCH_PADDING" in str(short), short
    np.testing.assert_array_equal(_infer(server, "double_unpadded", np.ones((8, 4), np.float32)), 2)


@pytest.mark.server
def test_the_default_precision_is_the_engines_and_records_name_what_ran(server):
    """No precision key: the engine's own default for this CPU (BF16 with AVX512-BF16 or AMX, as on
    NGC); INFERENCE_PRECISION_HINT (ours) pins it. Benchmark records read both from the load line."""
    import openvino as ov

    from harness.measuring.bench import engine_ran

    default = ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT").to_string()
    ran = engine_ran(server.logs(), "double_ov")
    assert ran.startswith(f"precision={default} cpu_flags="), ran
    assert engine_ran(server.logs(), "double_dynamic").startswith("precision=f32 cpu_flags="), server.logs()
    assert engine_ran(server.logs(), "no_such_model") == ""


def test_max_batch_tokens_runs_an_unbatched_request_in_row_chunks(backend):
    """Dynamic dims (max_batch_size 0): a request of 5 rows x 4 under a budget of 8 runs as 2 + 2 + 1
    rows, its output joined back in order."""
    calls = []
    arrays = [{"INPUT": np.arange(20, dtype=np.float32).reshape(5, 4)}]
    results = backend.run_requests(backend.row_chunks(doubling_run(calls), 8), arrays, [["OUTPUT"]])
    assert [c["INPUT"].shape for c in calls] == [(2, 4), (2, 4), (1, 4)]
    np.testing.assert_array_equal(results[0]["OUTPUT"], arrays[0]["INPUT"] * 2)
    assert "max_batch_tokens" not in backend.ignored_keys({"parameters": {"max_batch_tokens": {"string_value": "8"}}})
