"""Small model repositories built in a temp dir for the harness's own tests."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import onnx
import tritonclient.http as httpclient
from onnx import TensorProto, helper

from harness.serving.launchers import LocalTritonServer, ServerOptions
from harness.testing.toy_models import echo_config, model_config, write_echo, write_model

DOUBLE_CONFIG = model_config(
    "double",
    [("INPUT", "FP32", (4,))],
    [("OUTPUT", "FP32", (4,))],
    backend="onnxruntime",
    max_batch_size=16,
    extra=(
        "dynamic_batching { max_queue_delay_microseconds: 300000 preferred_batch_size: [ 4 ] }",
        'parameters { key: "intra_op_thread_count" value: { string_value: "1" } }',
        'parameters { key: "inter_op_thread_count" value: { string_value: "1" } }',
        'parameters { key: "execution_mode" value: { string_value: "0" } }',
        "optimization { graph { level: 1 } }",
    ),
)

ECHO_CONFIG = echo_config(max_batch_size=8, instances=None, queue_delay_us=None)  # one instance, no batcher

#: A Python model that says where it runs: ``IN`` names modules, ``OUT`` is one JSON text with
#: ``prefix`` (sys.prefix), ``python`` (major.minor), ``numpy`` (its version) and ``modules`` (each
#: named module's file, None where it does not import).
WHOAMI_CONFIG = model_config("whoami", [("IN", "STRING", (-1,))], [("OUT", "STRING", (1,))])
WHOAMI_MODEL = """
import importlib
import json
import sys

import numpy as np
import triton_python_backend_utils as pb_utils


def where(name):
    try:
        return importlib.import_module(name).__file__
    except ImportError:
        return None


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            names = [bytes(n).decode() for n in pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()]
            info = json.dumps({"prefix": sys.prefix, "python": "%d.%d" % sys.version_info[:2],
                               "numpy": np.__version__, "modules": {n: where(n) for n in names}})
            out = pb_utils.Tensor("OUT", np.array([info.encode()], dtype=object))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
"""


def write_whoami(repo: Path) -> Path:
    """The ``whoami`` model's folder in ``repo``."""
    return write_model(repo, "whoami", WHOAMI_CONFIG, WHOAMI_MODEL)


def ask_whoami(url: str, *modules: str) -> dict:
    """What the ``whoami`` model served at ``url`` answers about itself and ``modules``."""
    with httpclient.InferenceServerClient(url) as client:
        names = httpclient.InferInput("IN", [len(modules)], "BYTES")
        names.set_data_from_numpy(np.array([m.encode() for m in modules], dtype=object))
        return json.loads(client.infer("whoami", [names]).as_numpy("OUT")[0])


def save_onnx(graph: onnx.GraphProto, path: Path) -> None:
    """Save ``graph`` as an opset-14 model (IR version 8, which the served onnxruntime reads) at ``path``."""
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)


def write_double_onnx(path: Path) -> None:
    """An ONNX graph that multiplies a ``[batch, 4]`` float input by 2."""
    x = helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, ["batch", 4])
    two = helper.make_tensor("two", TensorProto.FLOAT, [1], [2.0])
    graph = helper.make_graph(
        [helper.make_node("Mul", ["INPUT", "two"], ["OUTPUT"])], "double", [x], [y], initializer=[two]
    )
    save_onnx(graph, path)


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
def ready_server(repo: Path, models: list[str], **options):
    """A local server on ``repo``, ready with ``models`` (more ``ServerOptions`` fields: ``options``),
    stopped on exit."""
    with LocalTritonServer(ServerOptions(str(repo), required_models=list(models), **options)) as server:
        yield server
