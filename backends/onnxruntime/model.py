"""A Python-based ``onnxruntime`` backend for the pip-installed tritonserver.

PyPI has no native onnxruntime Triton backend, so the local launcher places this file at
``<backend-dir>/onnxruntime/model.py``: any ``config.pbtxt`` with ``backend: "onnxruntime"``
(or ``platform: "onnxruntime_onnx"``) then runs here unchanged, and runs on the native
backend of the NGC image. It honours the native backend's keys that apply on CPU:
``default_model_filename``, the ``intra_op_thread_count`` / ``inter_op_thread_count`` /
``execution_mode`` / ``enable_mem_arena`` / ``enable_mem_pattern`` parameters (and passes
parameters named ``session.*`` to onnxruntime as session config entries) and
``optimization { graph { level } }``, and the ``memory.enable_memory_arena_shrinkage`` run option
(e.g. ``cpu:0``: the arena returns what a run took once it ends). Batching: ``batched_runs``.

Ours only (the native backend ignores it): ``max_batch_tokens`` bounds one session run of a batching
model to rows x the longest non-batch dim (``batched_runs.row_chunks``): a transformer's
activations grow with rows x length.
"""

import functools
import json
import os

import batched_runs
import onnxruntime as ort
import triton_python_backend_utils as pb_utils
from batched_runs import BatchedModel, row_chunks, run_error

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


#: onnxruntime failures that a request's own values cause (a shape the graph refuses, a token id
#: past an embedding table, a sequence longer than the position table): answered as bad input.
INPUT_FAULTS = ("InvalidArgument", "out of data bounds", "out of bounds", "Invalid input", "Got invalid dimensions")


def run_requests(run, arrays, requested, batching):
    """Per request, ``{output name: array}`` of its own rows, or a ``RunError`` (``batched_runs``);
    ``run(names, feed)`` is ``InferenceSession.run``."""
    error = functools.partial(run_error, "onnxruntime", faults=INPUT_FAULTS)
    return batched_runs.run_requests(run, arrays, requested, batching, error)


class TritonPythonModel(BatchedModel):
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

    def answer(self, arrays, requested):
        return run_requests(self.run, arrays, requested, self.batching)

    def finalize(self):
        """Release the session."""
        self.session = None
