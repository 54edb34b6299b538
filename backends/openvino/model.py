"""A Python-based ``openvino`` backend for the pip-installed tritonserver.

The local launcher places this file at ``<backend-dir>/openvino/model.py``: a ``config.pbtxt`` with
``backend: "openvino"`` then runs here unchanged, and does the same on the native openvino_backend
of NGC's images. It reads the native backend's keys (its README), with their semantics:

- ``default_model_filename``: the file in the version folder; default ``model.xml`` (IR), as the
  native backend; ``model.onnx`` is read directly.
- parameters ``PERFORMANCE_HINT`` (LATENCY / THROUGHPUT / CUMULATIVE_THROUGHPUT), ``NUM_STREAMS``
  (AUTO / NUMA / n), ``INFERENCE_NUM_THREADS``, ``COMPILATION_NUM_THREADS``, ``HINT_BF16`` (YES),
  ``CPU_EXTENSION_PATH``, ``TARGET_DEVICE`` (default CPU), ``RESHAPE_IO_LAYERS``,
  ``SKIP_OV_DYNAMIC_BATCHSIZE``, ``ENABLE_BATCH_PADDING`` (YES); other keys are ignored, as there.
- precision: the native backend has no key for FP32, so on a CPU with BF16 (AVX512-BF16, AMX)
  OpenVINO's default runs BF16; so does this backend. ``INFERENCE_PRECISION_HINT`` (f32 / bf16 /
  f16) is OURS ONLY: the native backend ignores it (and then runs its default precision).
- batching (``max_batch_size`` > 0): as the native backend, the model is compiled for a batch of
  exactly ``max_batch_size`` (``ov::set_batch``); an execution whose requests hold fewer rows fails,
  unless ``ENABLE_BATCH_PADDING`` is YES: then zero rows pad it to ``max_batch_size`` (the cost of
  a full batch, as there); one infer call per batch (``batched_runs``). Dynamic shapes: the model's
  own dynamic dimensions (``max_batch_size: 0`` with ``-1`` dims for the batch), or the config's
  ``-1`` dims with ``RESHAPE_IO_LAYERS``.

Ours only too: ``max_batch_tokens`` on a model with dynamic dims (``max_batch_size: 0``, the first
dim the batch) runs a request's rows within that token budget (``batched_runs.row_chunks``); a
fixed-batch model runs ``max_batch_size`` rows a call whatever the key: that is its bound.

Unlike the native backend (one compiled model shared by all instances of a model, one infer request
each), each instance here is its own stub process with its own compiled model and thread pool.
"""

import functools
import json
import os

import batched_runs
import numpy as np
import openvino as ov
import triton_python_backend_utils as pb_utils
from batched_runs import BatchedModel, Refused, row_chunks, run_error

ENGINE_VERSION = ov.__version__.split("-")[0]
IMPLEMENTATION = f"harness-python-openvino/{ENGINE_VERSION}"

#: The native backend's device keys, in the order it sets them on the core.
DEVICE_KEYS = ("INFERENCE_NUM_THREADS", "COMPILATION_NUM_THREADS", "HINT_BF16", "NUM_STREAMS", "PERFORMANCE_HINT")
MODEL_KEYS = (
    "CPU_EXTENSION_PATH",
    "SKIP_OV_DYNAMIC_BATCHSIZE",
    "ENABLE_BATCH_PADDING",
    "RESHAPE_IO_LAYERS",
    "TARGET_DEVICE",
)
#: Ours only (the native backend ignores it): an explicit inference precision.
OUR_KEYS = ("INFERENCE_PRECISION_HINT",)
#: Ours only, read by the execution, not the device: the token budget of one infer call.
RUN_KEYS = ("max_batch_tokens",)
PRECISIONS = {"f32": "f32", "fp32": "f32", "bf16": "bf16", "f16": "f16", "fp16": "f16"}

CONFIG_TYPES = {
    "TYPE_BOOL": ov.Type.boolean,
    "TYPE_UINT8": ov.Type.u8,
    "TYPE_UINT16": ov.Type.u16,
    "TYPE_UINT32": ov.Type.u32,
    "TYPE_UINT64": ov.Type.u64,
    "TYPE_INT8": ov.Type.i8,
    "TYPE_INT16": ov.Type.i16,
    "TYPE_INT32": ov.Type.i32,
    "TYPE_INT64": ov.Type.i64,
    "TYPE_FP16": ov.Type.f16,
    "TYPE_FP32": ov.Type.f32,
    "TYPE_FP64": ov.Type.f64,
    "TYPE_BF16": ov.Type.bf16,
}


class ConfigError(ValueError):
    """A parameter value the native backend refuses too (it fails the model load)."""


def parameter(config, key):
    """The string value of parameter ``key`` ('' when absent), as the native backend reads it."""
    return str(config.get("parameters", {}).get(key, {}).get("string_value", "")).strip()


def is_yes(config, key):
    return parameter(config, key).lower() == "yes"


def device_properties(config):
    """``{OpenVINO property: value}`` for the device, from the native keys (and ours), validated
    as the native backend validates them (lower-cased values)."""
    properties = {}
    for key in DEVICE_KEYS + OUR_KEYS:
        value = parameter(config, key).lower()
        if not value:
            continue
        if key in ("INFERENCE_NUM_THREADS", "COMPILATION_NUM_THREADS"):
            if not value.isdigit():
                raise ConfigError(f"expected the parameter '{key}' to be a non-negative number, got {value}")
            properties[key] = int(value)
        elif key == "HINT_BF16":
            if value != "yes":
                raise ConfigError(f"expected the parameter '{key}' to be YES, got {value}")
            properties["INFERENCE_PRECISION_HINT"] = "bf16"
        elif key == "NUM_STREAMS":
            if value in ("auto", "numa"):
                properties[key] = value.upper()
            elif value.isdigit():
                properties[key] = int(value)
            else:
                raise ConfigError(f"expected the parameter '{key}' to be either AUTO/NUMA/<int_value>, got {value}")
        elif key == "PERFORMANCE_HINT":
            if value not in ("latency", "throughput", "cumulative_throughput"):
                raise ConfigError(
                    f"expected the parameter '{key}' to be LATENCY/THROUGHPUT/CUMULATIVE_THROUGHPUT, got {value}"
                )
            properties[key] = value.upper()
        elif key == "INFERENCE_PRECISION_HINT":
            if value not in PRECISIONS:
                raise ConfigError(f"expected the parameter '{key}' (ours) to be f32/bf16/f16, got {value}")
            properties[key] = PRECISIONS[value]
    return properties


def ignored_keys(config):
    """Parameters neither backend reads (e.g. onnxruntime's, kept by a config variant)."""
    known = set(DEVICE_KEYS + MODEL_KEYS + OUR_KEYS + RUN_KEYS)
    return sorted(k for k in config.get("parameters", {}) if k not in known)


def cpu_flags(path="/proc/cpuinfo"):
    """The instruction-set extensions that decide OpenVINO's kernels and default precision."""
    try:
        with open(path) as f:
            line = next((l for l in f if l.startswith("flags")), "")
    except OSError:
        return []
    flags = set(line.split(":", 1)[-1].split())
    wanted = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8", "avx512_fp16")
    return [f for f in wanted if f in flags]


#: OpenVINO failures that a request's own tensors cause (a shape the compiled model refuses).
INPUT_FAULTS = ("shape", "size is not equal", "dimension", "out of bounds", "Batch of")
error = functools.partial(run_error, "openvino", faults=INPUT_FAULTS)


def fit_batch(feed, rows, max_batch_size, pad):
    """``feed`` with exactly ``max_batch_size`` rows (zero rows appended when ``pad``), as the native
    backend's fixed batch requires; ``Refused`` when it cannot be."""
    if rows == max_batch_size:
        return feed
    if not pad or rows > max_batch_size:
        raise Refused(
            error(
                f"expected requests with batch size '{max_batch_size}', got '{rows}'... this error can be "
                "avoided by setting 'ENABLE_BATCH_PADDING' parameter in model configuration to 'YES' at a "
                "performance cost.",
                input_fault=True,
            )
        )
    return {n: np.concatenate([a, np.zeros((max_batch_size - rows, *a.shape[1:]), a.dtype)]) for n, a in feed.items()}


def run_requests(run, arrays, requested, max_batch_size=0, pad=False):
    """Per request, ``{output name: array}`` of its own rows, or a ``RunError`` (``batched_runs``).

    With ``max_batch_size`` > 0 a run holds exactly that many rows (``fit_batch``). A request with an
    empty tensor (a 0 dim) fails without a run: OpenVINO's kernels fail on them with internal errors."""
    empty = [[f"'{n}' {list(a.shape)}" for n, a in tensors.items() if a.size == 0] for tensors in arrays]
    runnable = [i for i, names in enumerate(empty) if not names]
    fit = functools.partial(fit_batch, max_batch_size=max_batch_size, pad=pad) if max_batch_size > 0 else None
    ran = iter(
        batched_runs.run_requests(
            run, [arrays[i] for i in runnable], [requested[i] for i in runnable], max_batch_size > 0, error, fit
        )
    )
    return [
        error(f"input {', '.join(names)} holds no elements", input_fault=True) if names else next(ran)
        for names in empty
    ]


def prepare_model(model, config):
    """The native backend's model preparation: element types and layout from the config, the
    config's dims when ``RESHAPE_IO_LAYERS``, and the batch fixed to ``max_batch_size``."""
    max_batch_size = int(config.get("max_batch_size", 0))
    inputs = {i.get_any_name(): i for i in model.inputs}
    if len(inputs) != len(config.get("input", [])):
        raise ConfigError(f"configuration expects {len(config.get('input', []))} inputs, model provides {len(inputs)}")
    outputs = {o.get_any_name() for o in model.outputs}
    ppp = ov.preprocess.PrePostProcessor(model)
    for io in config.get("input", []):
        name = io["name"]
        if name not in inputs:
            raise ConfigError(f"config input '{name}' is not an input of the model (it has {sorted(inputs)})")
        tensor = ppp.input(name).tensor()
        tensor.set_element_type(CONFIG_TYPES[io["data_type"]])
        if is_yes(config, "RESHAPE_IO_LAYERS"):
            shape = inputs[name].get_partial_shape()
            dims = [int(d) for d in io.get("reshape", {}).get("shape", io["dims"])]
            for index, dim in enumerate(dims, start=1 if max_batch_size else 0):
                shape[index] = ov.Dimension(dim) if dim > 0 else ov.Dimension()
            tensor.set_shape(shape)
        if max_batch_size:
            tensor.set_layout(ov.Layout("N..."))
    for io in config.get("output", []):
        if io["name"] not in outputs:
            raise ConfigError(f"config output '{io['name']}' is not an output of the model (it has {sorted(outputs)})")
        ppp.output(io["name"]).tensor().set_element_type(CONFIG_TYPES[io["data_type"]])
    model = ppp.build()
    if max_batch_size:
        ov.set_batch(model, max_batch_size)
    return model


class TritonPythonModel(BatchedModel):
    """Serve one OpenVINO-readable file (IR or ONNX), batching requests into one infer call."""

    def initialize(self, args):
        """Read, prepare and compile the model with the config's properties."""
        self.config = json.loads(args["model_config"])
        name = self.config["name"]
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        filename = self.config.get("default_model_filename") or "model.xml"
        path = os.path.join(version_dir, filename)
        if not os.path.exists(path):
            raise pb_utils.TritonModelException(f"openvino backend: unable to find '{path}' for model '{name}'")
        device = parameter(self.config, "TARGET_DEVICE").upper() or "CPU"
        core = ov.Core()
        try:
            if parameter(self.config, "CPU_EXTENSION_PATH"):
                core.add_extension(parameter(self.config, "CPU_EXTENSION_PATH"))
            properties = device_properties(self.config)
            model = prepare_model(core.read_model(path), self.config)
            if properties:
                core.set_property(device, properties)
            self.max_batch_size = int(self.config.get("max_batch_size", 0))
            auto_batching = self.max_batch_size != 0 and not is_yes(self.config, "SKIP_OV_DYNAMIC_BATCHSIZE")
            self.compiled = core.compile_model(model, device, {"ALLOW_AUTO_BATCHING": auto_batching})
        except Exception as exc:  # noqa: BLE001 - a load failure names the model and the cause
            raise pb_utils.TritonModelException(f"openvino backend: unable to load model '{name}': {exc}") from exc
        self.request = self.compiled.create_infer_request()
        self.pad = is_yes(self.config, "ENABLE_BATCH_PADDING")
        self.input_names = [i["name"] for i in self.config["input"]]
        self.output_dtypes = {o["name"]: pb_utils.triton_string_to_numpy(o["data_type"]) for o in self.config["output"]}
        self.ports = {n: self.compiled.output(n) for n in self.output_dtypes}
        self.run = self._run
        max_batch_tokens = parameter(self.config, "max_batch_tokens")
        if self.max_batch_size == 0 and max_batch_tokens.isdigit() and int(max_batch_tokens) > 0:
            self.run = row_chunks(self._run, int(max_batch_tokens))
        ran = {"INFERENCE_PRECISION_HINT": self.compiled.get_property("INFERENCE_PRECISION_HINT").to_string()}
        ran["PERFORMANCE_HINT"] = self.compiled.get_property("PERFORMANCE_HINT")
        ran.update({key: self.compiled.get_property(key) for key in ("NUM_STREAMS", "INFERENCE_NUM_THREADS")})
        ignored = ignored_keys(self.config)
        pb_utils.Logger.log_info(
            f"{name}: served by {IMPLEMENTATION}, file {filename}, device {device}, "
            f"precision={ran['INFERENCE_PRECISION_HINT']} "
            f"PERFORMANCE_HINT={ran['PERFORMANCE_HINT']} NUM_STREAMS={ran['NUM_STREAMS']} "
            f"INFERENCE_NUM_THREADS={ran['INFERENCE_NUM_THREADS']} "
            f"batch={'fixed ' + str(self.max_batch_size) + (' padded' if self.pad else '') if self.max_batch_size else 'none'} "
            f"cpu_flags={','.join(cpu_flags()) or 'none'}"
            + (" max_batch_tokens=" + max_batch_tokens if self.run is not self._run else "")
            + (f" ignored_parameters={','.join(ignored)}" if ignored else "")
        )

    def _run(self, names, feed):
        result = self.request.infer(feed)
        return [np.array(result[self.ports[name]]) for name in names]

    def answer(self, arrays, requested):
        return run_requests(self.run, arrays, requested, self.max_batch_size, self.pad)

    def finalize(self):
        """Release the compiled model."""
        self.request = None
        self.compiled = None
