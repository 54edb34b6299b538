"""Unit-testing a Python-backend ``model.py`` without a server: a stand-in for the parts of
``triton_python_backend_utils`` the models use, and a loader that imports a model file as the stub does."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import numpy as np
from tritonclient.utils import triton_to_np_dtype


class Tensor:
    def __init__(self, name: str, array):
        self._name, self._array = name, np.asarray(array)

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array


class TritonError:
    UNKNOWN, INTERNAL, NOT_FOUND, INVALID_ARG, UNAVAILABLE, UNSUPPORTED, ALREADY_EXISTS = range(7)

    def __init__(self, message: str, code: int | None = None):
        self._message, self._code = message, self.INTERNAL if code is None else code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code


class TritonModelException(Exception):
    pass


class InferenceResponse:
    def __init__(self, output_tensors=None, error: TritonError | None = None):
        self.output_tensors, self._error = list(output_tensors or []), error

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def output(self, name: str) -> np.ndarray:
        """The output tensor ``name`` as numpy (not in pb_utils: a test's shortcut)."""
        return next(t.as_numpy() for t in self.output_tensors if t.name() == name)


class Request:
    """A request with input tensors (name -> array) and request parameters (as Triton 2.51 gives them: JSON)."""

    def __init__(self, tensors: dict, parameters: dict | None = None):
        self.tensors, self._parameters = tensors, json.dumps(parameters or {})

    def parameters(self) -> str:
        return self._parameters


def get_input_tensor_by_name(request: Request, name: str) -> Tensor | None:
    return Tensor(name, request.tensors[name]) if name in request.tensors else None


def get_output_config_by_name(model_config: dict, name: str) -> dict | None:
    return next((o for o in model_config.get("output", []) if o["name"] == name), None)


def triton_string_to_numpy(name: str):
    """The numpy type of a config's ``TYPE_*`` (``TYPE_STRING``: object, as the stub's)."""
    return triton_to_np_dtype(name.removeprefix("TYPE_").replace("STRING", "BYTES"))


def stand_in() -> types.ModuleType:
    """A ``triton_python_backend_utils`` module made of the classes and functions above."""
    module = types.ModuleType("triton_python_backend_utils")
    for name in (
        "Tensor",
        "TritonError",
        "TritonModelException",
        "InferenceResponse",
        "get_input_tensor_by_name",
        "get_output_config_by_name",
        "triton_string_to_numpy",
    ):
        setattr(module, name, globals()[name])
    return module


def model_config(inputs, outputs, parameters: dict | None = None, **fields) -> dict:
    """A model config as ``initialize`` gets it: inputs/outputs as ``(name, TYPE_..., dims)``."""
    return {
        "input": [{"name": n, "data_type": t, "dims": list(d)} for n, t, d in inputs],
        "output": [{"name": n, "data_type": t, "dims": list(d)} for n, t, d in outputs],
        "parameters": {k: {"string_value": str(v)} for k, v in (parameters or {}).items()},
        **fields,
    }


def load_model(path: str | Path):
    """Import a ``model.py`` as the stub does (its folder first on ``sys.path``, the stand-in as
    ``triton_python_backend_utils``); a fresh module each call. Returns the module."""
    from harness.deployments import load_module

    path = Path(path).resolve()
    saved_path, saved_utils = list(sys.path), sys.modules.get("triton_python_backend_utils")
    sys.path.insert(0, str(path.parent))
    sys.modules["triton_python_backend_utils"] = stand_in()
    try:
        return load_module(path, "model_" + "_".join(path.parts[-3:-1]).replace("-", "_"), fresh=True)
    finally:
        sys.path[:] = saved_path
        if saved_utils is None:
            sys.modules.pop("triton_python_backend_utils", None)
        else:
            sys.modules["triton_python_backend_utils"] = saved_utils
