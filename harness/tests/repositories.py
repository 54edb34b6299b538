"""Small model repositories built in a temp dir for the harness's own tests."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from harness.serving.launchers import LocalTritonServer, ServerOptions
from harness.testing.toy_models import echo_config, write_echo

DOUBLE_CONFIG = """
name: "double"
backend: "onnxruntime"
max_batch_size: 16
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
dynamic_batching { max_queue_delay_microseconds: 300000 preferred_batch_size: [ 4 ] }
parameters { key: "intra_op_thread_count" value: { string_value: "1" } }
parameters { key: "inter_op_thread_count" value: { string_value: "1" } }
parameters { key: "execution_mode" value: { string_value: "0" } }
optimization { graph { level: 1 } }
"""

ECHO_CONFIG = echo_config(max_batch_size=8, instances=None, queue_delay_us=None)  # one instance, no batcher


def write_double_onnx(path: Path) -> None:
    """An ONNX graph that multiplies a ``[batch, 4]`` float input by 2."""
    x = helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, ["batch", 4])
    two = helper.make_tensor("two", TensorProto.FLOAT, [1], [2.0])
    graph = helper.make_graph(
        [helper.make_node("Mul", ["INPUT", "two"], ["OUTPUT"])], "double", [x], [y], initializer=[two]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)


def make_repository(root: Path, models: tuple[str, ...] = ("double", "echo")) -> Path:
    """A repository with the ``double`` (onnxruntime) and ``echo`` (python) models."""
    repo = root / "model_repository"
    if "double" in models:
        write_double_onnx(repo / "double" / "1" / "model.onnx")
        (repo / "double" / "config.pbtxt").write_text(DOUBLE_CONFIG)
    if "echo" in models:
        write_echo(repo, ECHO_CONFIG)
    return repo


@contextmanager
def ready_server(repo: Path, models: list[str]):
    """A local server on ``repo``, ready with ``models``, stopped on exit."""
    with LocalTritonServer(ServerOptions(str(repo), required_models=list(models))) as server:
        yield server
