"""A Python-based ``onnxruntime`` backend for the pip-installed tritonserver.

PyPI has no native onnxruntime Triton backend, so the local launcher places this file at
``<backend-dir>/onnxruntime/model.py``: any ``config.pbtxt`` with ``backend: "onnxruntime"``
(or ``platform: "onnxruntime_onnx"``) then runs here unchanged, and runs on the native
backend of the NGC image. It honours the native backend's keys that apply on CPU:
``default_model_filename``, the ``intra_op_thread_count`` / ``inter_op_thread_count`` /
``execution_mode`` / ``enable_mem_arena`` / ``enable_mem_pattern`` parameters (and passes
parameters named ``session.*`` to onnxruntime as session config entries) and
``optimization { graph { level } }``, and the ``memory.enable_memory_arena_shrinkage`` run option
(e.g. ``cpu:0``: the arena returns what a run took once it ends). A dynamically batched set of
requests runs as ONE session run (concatenate, run, split); requests whose non-batch shapes differ
run apart, and requests to a model without batching always run one by one.

One key is this backend's own (the native backend ignores it): ``max_batch_tokens`` bounds what one
session run of a batching model holds to rows x the longest non-batch dim (padded tokens for
``[batch, length]`` token ids): a larger run, a dynamic batch or one request, runs in row chunks
within it, one after another, its outputs joined back (a single row over it runs alone). A
transformer's activations grow with rows x length (x length for attention), so this bounds the
memory of an execution whatever the requests' shapes.
"""

import json
import os
from collections import defaultdict

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils

IMPLEMENTATION = f"harness-python-onnxruntime/{ort.__version__}"

GRAPH_LEVELS = {
    -1: ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    0: ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    1: ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    2: ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


def _parameter(config, key, default=None):
    value = config.get("parameters", {}).get(key, {}).get("string_value")
    return default if value in (None, "") else value


def session_options(config):
    """onnxruntime SessionOptions from the native backend's config keys."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = int(_parameter(config, "intra_op_thread_count", 0))
    options.inter_op_num_threads = int(_parameter(config, "inter_op_thread_count", 0))
    if int(_parameter(config, "execution_mode", 0)) == 1:
        options.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    else:
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.enable_cpu_mem_arena = _parameter(config, "enable_mem_arena", "1") not in ("0", "false")
    options.enable_mem_pattern = _parameter(config, "enable_mem_pattern", "1") not in ("0", "false")
    level = config.get("optimization", {}).get("graph", {}).get("level")
    options.graph_optimization_level = GRAPH_LEVELS.get(int(level) if level is not None else 0)
    for key, value in config.get("parameters", {}).items():
        if key.startswith("session."):  # onnxruntime's own session config keys, e.g. session.intra_op.allow_spinning
            options.add_session_config_entry(key, value.get("string_value", ""))
    return options


def run_options(config):
    """onnxruntime RunOptions: the ``memory.enable_memory_arena_shrinkage`` parameter as a run config entry."""
    options = ort.RunOptions()
    shrinkage = _parameter(config, "memory.enable_memory_arena_shrinkage")
    if shrinkage:
        options.add_run_config_entry("memory.enable_memory_arena_shrinkage", shrinkage)
    return options


def row_chunks(run, max_tokens):
    """``run`` that runs a feed's rows in chunks of at most ``max_tokens`` (rows x the longest
    non-batch dim of the feed; at least one row a chunk) and joins their outputs on axis 0."""

    def run_in_chunks(names, feed):
        rows = len(next(iter(feed.values())))
        width = max((a.shape[1] for a in feed.values() if a.ndim > 1), default=1)
        step = max(1, max_tokens // max(width, 1))
        if rows <= step:
            return run(names, feed)
        parts = [run(names, {n: a[start : start + step] for n, a in feed.items()}) for start in range(0, rows, step)]
        return [np.concatenate(outputs) for outputs in zip(*parts)]

    return run_in_chunks


def plan_runs(arrays, batching):
    """Which requests share one session run: with batching, those whose non-batch input shapes
    agree (concatenated on axis 0); without batching, every request runs alone."""
    if not batching:
        return [[index] for index in range(len(arrays))]
    groups = defaultdict(list)
    for index, tensors in enumerate(arrays):
        groups[tuple((n, a.shape[1:]) for n, a in sorted(tensors.items()))].append(index)
    return list(groups.values())


#: onnxruntime failures that a request's own values cause (a shape the graph refuses, a token id
#: past an embedding table, a sequence longer than the position table): answered as bad input.
INPUT_FAULTS = ("InvalidArgument", "out of data bounds", "out of bounds", "Invalid input", "Got invalid dimensions")


class RunError(str):
    """A request's error message, and whether its input caused it (INVALID_ARG, HTTP 400)."""

    input_fault = False


def run_error(exc):
    error = RunError(f"onnxruntime backend: {type(exc).__name__}: {exc}")
    error.input_fault = any(marker in f"{type(exc).__name__} {exc}" for marker in INPUT_FAULTS)
    return error


def run_requests(run, arrays, requested, batching):
    """Per request, ``{output name: array}`` of its own rows, or a ``RunError`` message.

    ``run(names, feed)`` is ``InferenceSession.run``; ``arrays`` the input arrays of each
    request; ``requested`` the output names each request asked for. When a batched run fails,
    its requests run again one by one, so one bad request fails alone."""
    results = [None] * len(arrays)
    groups = plan_runs(arrays, batching)
    while groups:
        indices = groups.pop(0)
        names = sorted(set().union(*(requested[i] for i in indices)))
        try:
            if len(indices) > 1:
                feed = {n: np.concatenate([arrays[i][n] for i in indices]) for n in arrays[indices[0]]}
            else:
                feed = arrays[indices[0]]
            outputs = dict(zip(names, run(names, feed)))
        except Exception as exc:  # noqa: BLE001 - report per request, keep serving
            if len(indices) > 1:
                groups[:0] = [[i] for i in indices]
            else:
                results[indices[0]] = run_error(exc)
            continue
        offset = 0
        for i in indices:
            size = len(next(iter(arrays[i].values()))) if len(indices) > 1 else None
            rows = slice(offset, offset + size) if size is not None else slice(None)
            results[i] = {name: outputs[name][rows] for name in requested[i]}
            offset += size or 0
    return results


class TritonPythonModel:
    """Serve one ONNX file with onnxruntime, batching requests into one session run."""

    def initialize(self, args):
        """Open the session with the config's options and read I/O names and dtypes."""
        self.config = json.loads(args["model_config"])
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        filename = self.config.get("default_model_filename") or "model.onnx"
        path = os.path.join(version_dir, filename)
        if not os.path.exists(path):
            raise pb_utils.TritonModelException(f"onnxruntime backend: no model file {path}")
        self.session = ort.InferenceSession(
            path, sess_options=session_options(self.config), providers=["CPUExecutionProvider"]
        )
        self.batching = int(self.config.get("max_batch_size", 0)) > 0
        self.run_options = run_options(self.config)
        self.run = lambda names, feed: self.session.run(names, feed, self.run_options)
        max_batch_tokens = int(_parameter(self.config, "max_batch_tokens", 0))
        if self.batching and max_batch_tokens > 0:
            self.run = row_chunks(self.run, max_batch_tokens)
        self.input_names = [i["name"] for i in self.config["input"]]
        self.output_dtypes = {o["name"]: pb_utils.triton_string_to_numpy(o["data_type"]) for o in self.config["output"]}
        session_inputs = {i.name: i for i in self.session.get_inputs()}
        missing = [n for n in self.input_names if n not in session_inputs]
        if missing:
            raise pb_utils.TritonModelException(
                f"onnxruntime backend: config inputs {missing} are not inputs of {filename} "
                f"(it has {sorted(session_inputs)})"
            )
        options = self.session.get_session_options()
        pb_utils.Logger.log_info(
            f"{self.config['name']}: served by {IMPLEMENTATION}, file {filename}, "
            f"intra_op_thread_count={options.intra_op_num_threads} "
            f"inter_op_thread_count={options.inter_op_num_threads} "
            f"execution_mode={options.execution_mode.name} "
            f"graph_optimization_level={options.graph_optimization_level.name}"
            + "".join(
                f" {k}={v['string_value']}"
                for k, v in self.config.get("parameters", {}).items()
                if k.startswith(("session.", "memory.")) or k == "max_batch_tokens"
            )
        )

    def execute(self, requests):
        """Run the requests (a batched group as one session run) and answer each with its own rows."""
        arrays = [self._inputs(request) for request in requests]
        requested = [self._requested_outputs(request) for request in requests]
        responses = []
        for result in run_requests(self.run, arrays, requested, self.batching):
            if isinstance(result, str):
                code = pb_utils.TritonError.INVALID_ARG if getattr(result, "input_fault", False) else None
                error = pb_utils.TritonError(result, code) if code is not None else pb_utils.TritonError(result)
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            outputs = [
                pb_utils.Tensor(name, np.ascontiguousarray(value, dtype=self.output_dtypes[name]))
                for name, value in result.items()
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses

    def _inputs(self, request):
        tensors = {}
        for name in self.input_names:
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            if tensor is not None:
                tensors[name] = tensor.as_numpy()
        return tensors

    def _requested_outputs(self, request):
        wanted = [n for n in request.requested_output_names() if n in self.output_dtypes]
        return wanted or list(self.output_dtypes)

    def finalize(self):
        """Release the session."""
        self.session = None
