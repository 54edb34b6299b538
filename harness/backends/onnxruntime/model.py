"""A Python-based ``onnxruntime`` backend for the pip-installed tritonserver.

PyPI has no native onnxruntime Triton backend, so the local launcher places this file at
``<backend-dir>/onnxruntime/model.py``: any ``config.pbtxt`` with ``backend: "onnxruntime"``
(or ``platform: "onnxruntime_onnx"``) then runs here unchanged, and runs on the native
backend of the NGC image. It honours the native backend's keys that apply on CPU:
``default_model_filename``, the ``intra_op_thread_count`` / ``inter_op_thread_count`` /
``execution_mode`` / ``enable_mem_arena`` / ``enable_mem_pattern`` parameters and
``optimization { graph { level } }``. A dynamically batched set of requests runs as ONE
session run (concatenate, run, split); requests whose non-batch shapes differ are grouped.
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
    return options


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
        self.input_names = [i["name"] for i in self.config["input"]]
        self.output_dtypes = {
            o["name"]: pb_utils.triton_string_to_numpy(o["data_type"]) for o in self.config["output"]
        }
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
        )

    def execute(self, requests):
        """Group requests by non-batch input shapes; one session run per group; split results."""
        groups = defaultdict(list)
        arrays = []
        for index, request in enumerate(requests):
            tensors = {}
            for name in self.input_names:
                tensor = pb_utils.get_input_tensor_by_name(request, name)
                if tensor is not None:
                    tensors[name] = tensor.as_numpy()
            arrays.append(tensors)
            key = tuple((n, a.shape[1:] if self.batching else a.shape) for n, a in sorted(tensors.items()))
            groups[key].append(index)
        responses = [None] * len(requests)
        for indices in groups.values():
            self._run_group(indices, arrays, requests, responses)
        return responses

    def _run_group(self, indices, arrays, requests, responses):
        requested = [self._requested_outputs(requests[i]) for i in indices]
        names = sorted(set().union(*requested))
        try:
            if self.batching and len(indices) > 1:
                feed = {n: np.concatenate([arrays[i][n] for i in indices]) for n in arrays[indices[0]]}
            else:
                feed = arrays[indices[0]]
            results = dict(zip(names, self.session.run(names, feed)))
        except Exception as exc:  # noqa: BLE001 - report per request, keep serving
            error = pb_utils.TritonError(f"onnxruntime backend: {type(exc).__name__}: {exc}")
            for i in indices:
                responses[i] = pb_utils.InferenceResponse(error=error)
            return
        offset = 0
        for i, wanted in zip(indices, requested):
            size = len(next(iter(arrays[i].values()))) if self.batching else None
            outputs = []
            for name in wanted:
                value = results[name][offset:offset + size] if self.batching else results[name]
                outputs.append(pb_utils.Tensor(name, np.ascontiguousarray(value, dtype=self.output_dtypes[name])))
            responses[i] = pb_utils.InferenceResponse(output_tensors=outputs)
            offset += size or 0

    def _requested_outputs(self, request):
        wanted = [n for n in request.requested_output_names() if n in self.output_dtypes]
        return wanted or list(self.output_dtypes)

    def finalize(self):
        """Release the session."""
        self.session = None
