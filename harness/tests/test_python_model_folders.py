"""What the deployments' Python models rely on from the Python backend, on the real server: a
module beside ``model.py`` in the version folder imports by its plain name, and the model's
folder is on ``sys.path`` too (the stub appends both before loading ``model.py``)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tritonclient.http as httpclient

from harness.testing.toy_models import model_config, write_model
from harness.tests.repositories import ready_server

pytestmark = pytest.mark.server

MODEL = """
import json
import sys

import numpy as np
import triton_python_backend_utils as pb_utils
from sibling_helper import WHERE  # beside this file, in the version folder


class TritonPythonModel:
    def execute(self, requests):
        text = json.dumps({"helper": WHERE, "path": sys.path}).encode()
        return [pb_utils.InferenceResponse([pb_utils.Tensor("INFO", np.array([text], dtype=object))]) for _ in requests]
"""

CONFIG = model_config("folders", [("X", "INT32", (1,))], [("INFO", "STRING", (1,))])


def test_a_module_beside_model_py_imports_and_both_model_folders_are_on_sys_path(tmp_path):
    folder = write_model(tmp_path / "model_repository", "folders", CONFIG, MODEL)
    (folder / "1" / "sibling_helper.py").write_text("from pathlib import Path\n\nWHERE = str(Path(__file__).parent)\n")
    with ready_server(tmp_path / "model_repository", ["folders"]) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        tensor = httpclient.InferInput("X", [1], "INT32")
        tensor.set_data_from_numpy(np.array([1], np.int32))
        info = json.loads(client.infer("folders", [tensor]).as_numpy("INFO")[0])
    version_folder = (folder / "1").resolve()
    assert info["helper"] == str(version_folder)
    paths = [str(p) for p in info["path"]]
    assert str(version_folder) in paths and str(folder.resolve()) in paths, paths
