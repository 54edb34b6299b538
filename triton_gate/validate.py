"""Checks an HTTP/REST inference request before tritonserver parses it.

tritonserver 2.51 allocates an input from its *declared* shape before it reads the data, and
parses JSON recursively (a 193-byte request can abort it with ``std::bad_alloc``, deep nesting
overflow its stack): the body size, JSON nesting, every input's name, datatype and shape against
the config, and the declared shape x datatype against the data actually sent are checked here,
each refusal a 4xx. Plain Python on bytes and dicts, tested without a server.
"""

from __future__ import annotations

import json
import math
import struct

import numpy as np
from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInput
from tritonclient.utils import triton_to_np_dtype

#: Bytes per element of each Triton datatype (BYTES is variable).
DATATYPES = ["BOOL", "FP16", "BF16", "FP32", "FP64"] + [f"{u}INT{n}" for u in ("", "U") for n in (8, 16, 32, 64)]
DTYPE_SIZE = {name: np.dtype(triton_to_np_dtype(name)).itemsize for name in DATATYPES} | {"BYTES": None}
#: Longest JSON text of one element counted when bounding a JSON body from the config.
JSON_CHARS_PER_ELEMENT = 32
#: Slack for the JSON envelope (names, parameters, outputs) when the body bound is computed.
ENVELOPE_BYTES = 64 * 1024
DEFAULT_MAX_BODY = 64 * 1024 * 1024
SCALAR = (str, int, float, bool)


class GateError(Exception):
    """A request refused by the gate: HTTP status, a message for the client and, on the OpenAI
    routes (``openai_api``), the request field it is about."""

    def __init__(self, status: int, message: str, param: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.model: str | None = None  # the model it is about, for the log line


def triton_datatype(config_type: int | str) -> str:
    """``TYPE_FP32`` (a config's ``data_type``, or its name) -> ``FP32``; ``TYPE_STRING`` -> ``BYTES``."""
    if isinstance(config_type, int):
        config_type = model_config_pb2.DataType.Name(config_type)
    name = config_type.removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


def body_limit(config: ModelConfig, default: int = DEFAULT_MAX_BODY, explicit: int | None = None) -> int:
    """Largest request body accepted for this model, in bytes: ``explicit`` (the gate policy's
    ``max_body_bytes``), else a bound from the config's fixed-size inputs, else ``default``."""
    if explicit:
        return int(explicit)
    batch = max(config.max_batch_size, 1)
    total = 0
    for spec in config.input:
        dims = list(spec.dims)
        size = DTYPE_SIZE.get(triton_datatype(spec.data_type))
        if size is None or any(d < 0 for d in dims):
            return default
        total += batch * math.prod(dims) * max(size, JSON_CHARS_PER_ELEMENT)
    return min(default, total + ENVELOPE_BYTES) if total else default


def _object_without_duplicates(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object whose keys are all different: Python's json keeps the last of two equal keys,
    Triton's parser the first, so a repeated key would let Triton read what the gate never checked."""
    obj = {}
    for key, value in pairs:
        if key in obj:
            raise GateError(400, f"request JSON has the key {key!r} twice in one object")
        obj[key] = value
    return obj


def _no_constant(name: str):
    raise GateError(400, f"request JSON holds {name}, which is not JSON (RFC 8259)")


def parse_json(text: bytes) -> object:
    """Strict JSON: no repeated key in any object, no NaN/Infinity, UTF-8 only (GateError 400)."""
    try:
        return json.loads(
            text.decode("utf-8"), object_pairs_hook=_object_without_duplicates, parse_constant=_no_constant
        )
    except RecursionError:
        raise GateError(400, "request JSON is nested too deeply") from None
    except UnicodeDecodeError as exc:
        raise GateError(400, f"request JSON is not UTF-8 (byte {exc.start})") from None
    except ValueError as exc:
        raise GateError(400, f"request is not valid JSON: {exc}") from None


def canonical_json(value: object) -> bytes:
    """The one serialization of a validated header that the gate forwards: what Triton parses is
    then exactly what the gate checked (no duplicate keys, no escapes or number spellings read
    two ways). Refuses strings that UTF-8 cannot carry (lone surrogates)."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    except UnicodeEncodeError:
        raise GateError(400, "request JSON holds a string with an unpaired UTF-16 surrogate escape") from None


def parse_header(body: bytes, header_length: int | None) -> tuple[dict, memoryview]:
    """The JSON header (a dict) and the binary section after it."""
    if header_length is not None:
        if header_length < 0 or header_length > len(body):
            raise GateError(
                400, f"Inference-Header-Content-Length {header_length} does not fit the {len(body)}-byte body"
            )
    else:
        header_length = len(body)
    header = parse_json(bytes(memoryview(body)[:header_length]))
    if not isinstance(header, dict):
        raise GateError(400, "request JSON must be an object")
    return header, memoryview(body)[header_length:]


def _is_uint64(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 64


#: What each parameter Triton 2.51 reads with a type of its own must be (anything else there answers
#: HTTP 500): its description and its test.
UINT64 = ("a non-negative integer", _is_uint64)
BOOL = ("true or false", lambda value: isinstance(value, bool))
STRING = ("a string", lambda value: isinstance(value, str))
SEQUENCE_ID = ("a non-negative integer or a string", lambda value: _is_uint64(value) or isinstance(value, str))
SHARED_MEMORY = {"shared_memory_region": STRING, "shared_memory_byte_size": UINT64, "shared_memory_offset": UINT64}
TYPED_PARAMETERS = {
    "request": {
        "sequence_id": SEQUENCE_ID,
        "sequence_start": BOOL,
        "sequence_end": BOOL,
        "binary_data_output": BOOL,
        "priority": UINT64,
        "timeout": UINT64,
    },
    "input": {"binary_data_size": UINT64, **SHARED_MEMORY},
    "output": {"binary_data": BOOL, "classification": UINT64, **SHARED_MEMORY},
}


def _check_parameters(value, where: str, scope: str = "request") -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        raise GateError(400, f"{where}: 'parameters' must be an object")
    typed = TYPED_PARAMETERS[scope]
    for key, item in value.items():
        if key in typed:
            kind, test = typed[key]
            if not test(item):
                raise GateError(400, f"{where}: parameter '{key}' must be {kind}, not {json.dumps(item)}")
        elif not isinstance(item, SCALAR) and item is not None:
            raise GateError(
                400, f"{where}: parameter '{key}' must be a string, number or boolean, not {type(item).__name__}"
            )


#: Python types a JSON ``data`` value may have per datatype, and the range of the integer ones.
JSON_TYPES = {"BOOL": {bool}, "BYTES": {str}, "FP16": {int, float}, "BF16": {int, float}}
JSON_TYPES.update({name: {int, float} for name in ("FP32", "FP64")})
INT_RANGE = {f"INT{n}": (-(1 << (n - 1)), (1 << (n - 1)) - 1) for n in (8, 16, 32, 64)}
INT_RANGE.update({f"UINT{n}": (0, (1 << n) - 1) for n in (8, 16, 32, 64)})
JSON_TYPES.update({name: {int} for name in INT_RANGE})
JSON_TYPE_NAMES = {bool: "true/false", str: "strings", int: "integers", float: "numbers", type(None): "null"}


def check_json_values(values: list, datatype: str) -> None:
    """Every JSON value of a flat ``data`` list is of the kind ``datatype`` needs (and in range)."""
    allowed = JSON_TYPES.get(datatype)
    if allowed is None:
        return
    types = set(map(type, values))
    if not types <= allowed:
        wrong = sorted(JSON_TYPE_NAMES.get(t, t.__name__) for t in types - allowed)
        want = "numbers" if float in allowed else JSON_TYPE_NAMES[next(iter(allowed))]
        raise GateError(400, f"'data' of a {datatype} input must hold {want}, it holds {', '.join(wrong)}")
    if datatype in INT_RANGE and values:
        low, high = INT_RANGE[datatype]
        if min(values) < low or max(values) > high:
            raise GateError(400, f"'data' of a {datatype} input holds a value outside {low}..{high}")


def count_values(data, max_depth: int, datatype: str) -> int:
    """Number of scalar values in (possibly nested) ``data``; refuses nesting deeper than ``max_depth``."""
    if not isinstance(data, list):
        check_json_values([data], datatype)
        return 1
    if max_depth <= 0:
        raise GateError(400, "'data' is nested deeper than the declared shape")
    if not any(isinstance(x, (list, dict)) for x in data):
        check_json_values(data, datatype)
        return len(data)
    total = 0
    for item in data:
        if isinstance(item, dict):
            raise GateError(400, f"'data' of a {datatype} input holds an object")
        total += count_values(item, max_depth - 1, datatype)
    return total


def count_bytes_elements(section: memoryview, limit: int) -> int:
    """Elements in a BYTES binary section (4-byte little-endian length + bytes each); must be exact."""
    count, offset, end = 0, 0, len(section)
    while offset < end:
        if offset + 4 > end:
            raise GateError(400, "BYTES binary data ends inside an element's 4-byte length")
        (length,) = struct.unpack_from("<I", section, offset)
        offset += 4 + length
        if offset > end:
            raise GateError(400, f"BYTES binary element {count} declares {length} bytes past the end of its data")
        count += 1
        if count > limit:
            break
    return count


def check_shape(
    model: str, config: ModelConfig, spec: ModelInput, shape: list[int], bound: list[int] | None = None
) -> None:
    """The declared shape against the config: rank, fixed dims, batch within max_batch_size,
    and the optional ``bound`` (the gate policy's ``max_dims`` of this input, batch dim excluded)."""
    where = f"input '{spec.name}'"
    max_batch = config.max_batch_size
    dims = list(spec.dims)
    full = ([-1] if max_batch > 0 else []) + dims
    ragged = spec.allow_ragged_batch
    if len(shape) != len(full) and not ragged:
        raise GateError(
            400,
            f"{where}: shape {shape} has rank {len(shape)}, model '{model}' expects "
            f"{'[batch] + ' if max_batch > 0 else ''}{dims}",
        )
    if any(d < 0 for d in shape):
        raise GateError(400, f"{where}: shape {shape} has a negative dimension")
    if max_batch > 0 and shape and not 1 <= shape[0] <= max_batch:
        raise GateError(
            400, f"{where}: shape {shape} has batch size {shape[0]}, outside 1..{max_batch} (max_batch_size)"
        )
    if not ragged:
        for i, (got, want) in enumerate(zip(shape, full)):
            if want >= 0 and got != want:
                raise GateError(
                    400,
                    f"{where}: shape {shape} dimension {i} is {got}, model '{model}' "
                    f"expects {want} (config dims {dims})",
                )
    if bound:
        item_shape = shape[1:] if max_batch > 0 else shape
        if any(got > limit for got, limit in zip(item_shape, bound)):
            raise GateError(400, f"{where}: shape {shape} is over the bound {list(bound)} of model '{model}'")


def check_input(
    model: str, config: ModelConfig, name, datatype, shape, max_dims: dict | None, seen: set
) -> tuple[int, int | None]:
    """One input's name (known, not given twice), datatype and shape against the config (``check_shape``);
    returns its element count and bytes per element (None: BYTES)."""
    specs = {spec.name: spec for spec in config.input}
    if not isinstance(name, str) or name not in specs:
        raise GateError(
            400, f"unexpected inference input '{name}' for model '{model}'; expected one of {sorted(specs)}"
        )
    if name in seen:
        raise GateError(400, f"input '{name}' given twice")
    seen.add(name)
    expected = triton_datatype(specs[name].data_type)
    if datatype != expected:
        raise GateError(400, f"input '{name}': datatype {datatype!r}, model '{model}' expects {expected}")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        raise GateError(400, f"input '{name}': 'shape' must be a list of integers")
    check_shape(model, config, specs[name], shape, (max_dims or {}).get(name))
    return math.prod(shape), DTYPE_SIZE[expected]


def validate_infer(
    model: str, config: ModelConfig, body: bytes, header_length: int | None, max_dims: dict | None = None
) -> tuple[bytes, int | None]:
    """Refuse (``GateError``) an inference request Triton must not see; else the body to forward:
    the validated header re-serialized (``canonical_json``) followed by the binary data unchanged,
    and the new ``Inference-Header-Content-Length`` (None when the request had none)."""
    header, binary = parse_header(body, header_length)
    check_header(model, config, header, binary, max_dims)
    canonical = canonical_json(header)
    if header_length is None:
        return canonical, None
    return canonical + bytes(binary), len(canonical)


def check_header(
    model: str, config: ModelConfig, header: dict, binary: memoryview, max_dims: dict | None = None
) -> None:
    """The checks of ``validate_infer`` on an already parsed header and its binary section
    (``max_dims``: the policy's bounds of this model's inputs)."""
    _check_parameters(header.get("parameters"), "request")
    if "id" in header and not isinstance(header["id"], str):
        raise GateError(400, "request 'id' must be a string")
    inputs = header.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise GateError(400, "request has no 'inputs' list")
    outputs = header.get("outputs")
    if outputs is not None:
        if not isinstance(outputs, list):
            raise GateError(400, "'outputs' must be a list")
        for out in outputs:
            if not isinstance(out, dict) or not isinstance(out.get("name"), str):
                raise GateError(400, "each output must be an object with a 'name' string")
            _check_parameters(out.get("parameters"), f"output '{out.get('name')}'", "output")
    binary_offset, seen = 0, set()
    for item in inputs:
        if not isinstance(item, dict):
            raise GateError(400, "each input must be an object")
        binary_offset += check_input_data(model, config, item, binary[binary_offset:], max_dims, seen)
    if binary_offset != len(binary):
        raise GateError(
            400, f"{len(binary) - binary_offset} bytes of binary data sent after the inputs declare none for them"
        )


def check_input_data(
    model: str, config: ModelConfig, item: dict, binary: memoryview, max_dims: dict | None, seen: set
) -> int:
    """One input of a header (``check_input``) and its data: JSON ``data``, a binary section at the
    start of ``binary``, or a shared-memory region. Returns the binary bytes it takes."""
    name, datatype, shape = item.get("name"), item.get("datatype"), item.get("shape")
    where = f"input '{name}'"
    elements, size = check_input(model, config, name, datatype, shape, max_dims, seen)
    params = item.get("parameters") or {}
    _check_parameters(params, where, "input")
    if "data" in item:
        if "binary_data_size" in params or "shared_memory_region" in params:
            raise GateError(400, f"{where}: both 'data' and binary or shared-memory data")
        count = count_values(item["data"], max(len(shape), 1), datatype)
        if count != elements:
            raise GateError(
                400, f"{where}: shape {shape} declares {elements} values of {datatype}, 'data' holds {count}"
            )
        return 0
    if "binary_data_size" in params:
        nbytes = params["binary_data_size"]  # a non-negative integer (_check_parameters)
        if nbytes > len(binary):
            raise GateError(
                400, f"{where}: binary_data_size {nbytes} runs past the {len(binary)} bytes of binary data left"
            )
        check_binary(where, shape, datatype, elements, size, binary[:nbytes], f"binary_data_size is {nbytes}")
        return nbytes
    if "shared_memory_region" not in params:
        raise GateError(400, f"{where} has no 'data', binary_data_size or shared_memory_region")
    nbytes = params.get("shared_memory_byte_size")
    if nbytes is None:
        raise GateError(400, f"{where}: shared_memory_byte_size must be a non-negative integer")
    if size is not None and nbytes != elements * size:
        raise GateError(
            400, f"{where}: shape {shape} x {datatype} is {elements * size} bytes, shared_memory_byte_size is {nbytes}"
        )
    return 0


def check_binary(where: str, shape: list[int], datatype: str, elements: int, size: int | None, data, sent: str) -> None:
    """Binary data of one input (an HTTP binary section, gRPC raw contents) against its declared
    shape x datatype: its exact size (else refused, ``sent`` saying what was), or for BYTES exactly
    ``elements`` length-prefixed elements."""
    if size is not None and len(data) != elements * size:
        raise GateError(400, f"{where}: shape {shape} x {datatype} is {elements * size} bytes, {sent}")
    count = count_bytes_elements(memoryview(data), elements) if size is None else elements
    if count != elements:
        held = "more" if count > elements else count
        raise GateError(400, f"{where}: shape {shape} declares {elements} BYTES elements, the binary data holds {held}")
