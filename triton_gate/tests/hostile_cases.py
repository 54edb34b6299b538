"""The project's request-level hostile inputs, one place for ``python -m harness hostile`` and the
tests: requests that crash or exhaust tritonserver 2.51 (huge declared shapes, deep JSON, duplicate
keys, many HTTP chunks) and requests a server must refuse with a 4xx (bad framing, encodings,
binary sections, datatypes, dims, parameters, restricted APIs without a token).

Every case is derived from a :class:`Target` (a model's name, inputs and batch size, as the
server's metadata states them), so the same cases fit any model of any repository. Sizes are
bounded: the largest body is the 6 MB of one-byte chunks; the allocation crashers declare more
bytes than the machine has (:func:`declared_bytes`), so that an unprotected server fails its
allocation at once instead of filling memory.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from harness.tests.hostile_requests import nested, with_deep_parameters

#: Elements whose byte size exceeds this declare an allocation no machine here can make.
MIN_DECLARED_BYTES = 1 << 40

#: Bytes per element of each fixed-size datatype (BYTES: variable).
DATATYPE_BYTES = {"BOOL": 1, "BF16": 2} | {
    f"{kind}{bits}": bits // 8
    for kind, sizes in (("INT", (8, 16, 32, 64)), ("UINT", (8, 16, 32, 64)), ("FP", (16, 32, 64)))
    for bits in sizes
}
#: A model name no repository has: load/unload probes must never touch a real model.
MISSING_MODEL = "__hostile_probe_missing_model__"


def declared_bytes(meminfo: str | Path = "/proc/meminfo") -> int:
    """Bytes the allocation crashers declare: a power of two over 4x this machine's RAM + swap,
    at least 1 TiB, so that (with the kernel's default heuristic overcommit) the allocation fails
    at once with ``std::bad_alloc`` instead of succeeding and filling memory."""
    total = 0
    try:
        for line in Path(meminfo).read_text().splitlines():
            if line.startswith(("MemTotal:", "SwapTotal:")):
                total += int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return max(MIN_DECLARED_BYTES, 1 << math.ceil(math.log2(max(4 * total, 2))))


def overcommit_always(path: str | Path = "/proc/sys/vm/overcommit_memory") -> bool:
    """True where the kernel grants any allocation (mode 1): a declared-shape crasher would then
    fill memory instead of failing, so the allocation cases are not sent to a local server."""
    try:
        return Path(path).read_text().strip() == "1"
    except OSError:
        return False


@dataclass(frozen=True)
class InputSpec:
    name: str
    datatype: str
    shape: tuple[int, ...]  # as the metadata states it: -1 for a variable dim (and the batch dim)


@dataclass(frozen=True)
class Target:
    """The model the cases are built for, from the server's model metadata and config."""

    model: str
    inputs: tuple[InputSpec, ...]
    max_batch_size: int = 0

    @classmethod
    def from_metadata(cls, metadata: dict, config: dict | None = None) -> Target:
        inputs = tuple(
            InputSpec(i["name"], i["datatype"], tuple(int(d) for d in i.get("shape", []))) for i in metadata["inputs"]
        )
        return cls(metadata["name"], inputs, int((config or {}).get("max_batch_size") or 0))

    @property
    def infer_path(self) -> str:
        return f"/v2/models/{self.model}/infer"

    def describe(self) -> str:
        return ", ".join(f"{i.name} {i.datatype} {list(i.shape)}" for i in self.inputs)

    def bytes_input(self) -> InputSpec | None:
        return next((i for i in self.inputs if i.datatype == "BYTES"), None)

    def sized_input(self) -> InputSpec:
        """The input the allocation cases use: a fixed-size one if the model has one."""
        return next((i for i in self.inputs if i.datatype in DATATYPE_BYTES), self.inputs[0])


def valid_shape(spec: InputSpec) -> list[int]:
    return [1 if d < 0 else d for d in spec.shape] or [1]


def valid_values(spec: InputSpec, count: int) -> list:
    if spec.datatype == "BYTES":
        return ["a"] * count
    return [False] * count if spec.datatype == "BOOL" else [0] * count


def valid_item(spec: InputSpec) -> dict:
    """A JSON input of ``spec`` that looks valid: variable dims 1, zeros (``"a"`` for BYTES)."""
    shape = valid_shape(spec)
    return {"name": spec.name, "shape": shape, "datatype": spec.datatype, "data": valid_values(spec, math.prod(shape))}


def huge_shape(rank: int, nbytes: int, element_bytes: int, batched: bool = False) -> list[int]:
    """A shape of ``rank`` (at least 1) whose element count x ``element_bytes`` is ``nbytes``:
    the last two dims carry it (one when only one is free), the others, and a batch dim, are 1."""
    count = max(nbytes // element_bytes, 1)
    free = max(rank, 1) - (1 if batched else 0)
    lead = [1] * (max(rank, 1) - max(free, 1))
    if free < 2:
        return lead + [count]
    a = 1 << (count.bit_length() // 2)
    return lead + [1] * (free - 2) + [a, max(count // a, 1)]


def serialize_bytes(elements: list[bytes]) -> bytes:
    """Triton's binary BYTES layout: each element a little-endian uint32 length, then its bytes."""
    return b"".join(struct.pack("<I", len(e)) + e for e in elements)


def binary_of(spec: InputSpec) -> tuple[list[int], bytes]:
    """A valid shape of ``spec`` and its binary section."""
    shape = valid_shape(spec)
    count = math.prod(shape)
    if spec.datatype == "BYTES":
        return shape, serialize_bytes([b"a"] * count)
    return shape, bytes(count * DATATYPE_BYTES.get(spec.datatype, 4))


@dataclass
class Case:
    """One hostile request. ``body`` is bytes, or a callable that yields the wire pieces of a
    chunked body. gRPC cases carry ``grpc_method`` and ``grpc_request`` (built lazily)."""

    klass: str
    name: str
    summary: str
    method: str = "POST"
    path: str = ""
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes | Callable[[], Iterator[bytes]] | None = None
    chunked: bool = False
    grpc_method: str | None = None
    grpc_request: Callable[[], object] | None = None
    #: Refused cleanly means 401/403 (a token was required), not just any 4xx.
    restricted: bool = False
    #: Declares an allocation larger than the machine (not sent where overcommit is "always").
    allocates: bool = False

    @property
    def protocol(self) -> str:
        return "grpc" if self.grpc_method else "http"


#: Class name -> what it tries; in the order they run (the differential classes last: on a gate
#: that reads them differently from Triton they can take tritonserver down).
CLASSES = {
    "huge_shape": "a declared shape far over the machine's memory with one value (JSON and binary)",
    "deep_json": "50,000 nested '[' in data, 300,000 in parameters, deep JSON to generate",
    "chunked_many": "1,000,000 one-byte HTTP chunks (6 MB) of a request both parsers refuse",
    "content_encoding": "br / gzip that do not decode, an unknown encoding, a 256 MiB gzip bomb",
    "bytes_lengths": "BYTES binary elements whose length prefix runs past the end, too few elements",
    "binary_size": "binary_data_size and Inference-Header-Content-Length that do not add up",
    "wrong_datatype": "a datatype other than the model's, an unknown one, a number",
    "negative_dims": "negative, non-integer and 2^63 dims",
    "parameter_types": 'request parameters of the wrong type ("timeout": -1, "priority": "high", ...)',
    "malformed": "not JSON, a JSON array, inputs that are not a list, a value count off by one",
    "restricted_apis": "repository index/load/unload, shared memory, trace, logging without a token",
    "grpc_huge_shape": "gRPC: a huge declared shape with 4 bytes of raw contents or one typed value",
    "grpc_bytes": "gRPC: raw BYTES with a huge declared element count, a length prefix past the end",
    "duplicate_keys": 'a key twice in one object ("shape" huge first, then valid: Triton reads the first)',
    "repeated_header": "Inference-Header-Content-Length twice with different values, CL + chunked",
}


def _json(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _request(target: Target, replace: dict | None = None, **top) -> dict:
    """A valid-looking request of every input, with ``replace`` ({input name: item}) swapped in."""
    replace = replace or {}
    return {**top, "inputs": [replace.get(i.name, valid_item(i)) for i in target.inputs]}


def _with_item_text(target: Target, spec: InputSpec, item_text: bytes) -> bytes:
    """The request JSON with ``spec``'s item written as raw ``item_text`` (for what json.dumps
    cannot write: duplicate keys, deep nesting)."""
    marker = {"__hostile__": spec.name}
    text = _json(_request(target, {spec.name: marker}))
    return text.replace(_json(marker), item_text)


def _binary_request(target: Target, spec: InputSpec, shape, size: int, data: bytes, header_length=None):
    item = {"name": spec.name, "shape": shape, "datatype": spec.datatype, "parameters": {"binary_data_size": size}}
    header = _json(_request(target, {spec.name: item}))
    length = str(len(header)) if header_length is None else header_length
    return header + data, [("Inference-Header-Content-Length", length)]


def one_byte_chunks(body: bytes, batch: int = 8192) -> Callable[[], Iterator[bytes]]:
    """The wire form of ``body`` as one-byte HTTP chunks (``1\\r\\nX\\r\\n`` each), sent in batches."""

    def pieces() -> Iterator[bytes]:
        for start in range(0, len(body), batch):
            yield b"".join(b"1\r\n" + body[i : i + 1] + b"\r\n" for i in range(start, min(start + batch, len(body))))
        yield b"0\r\n\r\n"

    return pieces


def http_cases(target: Target, nbytes: int | None = None) -> list[Case]:
    """Every HTTP case for ``target``; ``nbytes`` is what the allocation crashers declare."""
    nbytes = nbytes or declared_bytes()
    path = target.infer_path
    sized = target.sized_input()
    element = DATATYPE_BYTES.get(sized.datatype, 4)
    datatype = sized.datatype if sized.datatype in DATATYPE_BYTES else "FP32"
    rank = max(len(sized.shape), 1)
    big = huge_shape(rank, nbytes, DATATYPE_BYTES.get(datatype, 4), target.max_batch_size > 0)
    small_shape, small_binary = binary_of(sized)
    first = target.inputs[0]
    cases: list[Case] = []

    def add(klass, name, summary, body=None, headers=(), **kw):
        cases.append(Case(klass, name, summary, path=kw.pop("path", path), body=body, headers=list(headers), **kw))

    # huge_shape: the binary form first (2.51 checks its byte size), then the JSON crasher.
    body, headers = _binary_request(target, sized, big, element, bytes(element))
    add("huge_shape", "binary", f"{big} {sized.datatype}, binary_data_size {element}", body, headers, allocates=True)
    item = {"name": sized.name, "shape": big, "datatype": datatype, "data": [1]}
    add(
        "huge_shape",
        "json",
        f"{big} {datatype} with one JSON value",
        _json(_request(target, {sized.name: item})),
        allocates=True,
    )

    # deep_json
    deep_item = b'{"name":"%s","shape":%s,"datatype":"%s","data":%s}' % (
        first.name.encode(),
        _json(valid_shape(first)),
        first.datatype.encode(),
        nested(50000),
    )
    add("deep_json", "data", "50,000 nested '[' in data (100 KB)", _with_item_text(target, first, deep_item))
    inputs = _json(_request(target)["inputs"])
    add("deep_json", "parameters", "300,000 nested '[' in parameters (600 KB)", with_deep_parameters(inputs))
    add(
        "deep_json",
        "generate",
        "50,000 nested '[' in a generate request",
        b'{"%s":' % first.name.encode() + nested(50000) + b"}",
        path=f"/v2/models/{target.model}/generate",
    )

    # chunked_many: a body both Triton and a gate refuse (unknown input), so only the framing counts.
    refused = _json({"inputs": [{"name": "__hostile_unknown_input__", "shape": [1], "datatype": "FP32", "data": [1]}]})
    add(
        "chunked_many",
        "one_byte_chunks",
        "1,000,000 one-byte chunks",
        one_byte_chunks(refused + b" " * (1_000_000 - len(refused))),
        [("Transfer-Encoding", "chunked")],
        chunked=True,
    )

    # content_encoding
    valid = _json(_request(target))
    for name, summary, body, encoding in (
        ("br_garbage", "Content-Encoding br, body not brotli", valid, "br"),
        (
            "gzip_garbage",
            "Content-Encoding gzip, body a broken gzip stream",
            b"\x1f\x8b\x08\x00" + bytes(range(64)),
            "gzip",
        ),
        ("unknown", "Content-Encoding x-hostile", valid, "x-hostile"),
        ("gzip_bomb", "256 KiB of gzip inflating to 256 MiB", gzip_bomb(256 << 20), "gzip"),
    ):
        add("content_encoding", name, summary, body, [("Content-Encoding", encoding)])

    # bytes_lengths
    text = target.bytes_input()
    if text is not None:
        shape = valid_shape(text)
        past_end = struct.pack("<I", 1 << 30) + b"abc"
        body, headers = _binary_request(target, text, shape, len(past_end), past_end)
        add("bytes_lengths", "length_past_end", "one element claiming 1 GiB, 3 bytes sent", body, headers)
        few = [4] + shape[1:] if len(shape) > 1 else [4]
        element_bytes = serialize_bytes([b"abc"])
        body, headers = _binary_request(target, text, few, len(element_bytes), element_bytes)
        add("bytes_lengths", "too_few_elements", f"shape {few}, one element sent", body, headers)

    # binary_size
    n = len(small_binary)
    for name, summary, size, data, header_length in (
        ("size_over_sent", f"binary_data_size {n + 8}, {n} bytes sent", n + 8, small_binary, None),
        ("extra_bytes", f"binary_data_size {n}, {n + 16} bytes sent", n, small_binary + bytes(16), None),
        ("header_length_past_end", "Inference-Header-Content-Length 999999", n, small_binary, "999999"),
        ("header_length_negative", "Inference-Header-Content-Length -1", n, small_binary, "-1"),
    ):
        add("binary_size", name, summary, *_binary_request(target, sized, small_shape, size, data, header_length))

    # wrong_datatype
    other = "INT8" if first.datatype != "INT8" else "FP32"
    for name, value in (("other", other), ("unknown", "FP128"), ("number", 7)):
        item = {**valid_item(first), "datatype": value}
        add("wrong_datatype", name, f"datatype {value!r} for {first.name}", _json(_request(target, {first.name: item})))

    # negative_dims
    shape = valid_shape(first)
    for name, dims in (
        ("negative", shape[:-1] + [-5]),
        ("all_minus_one", [-1] * len(shape)),
        ("string", shape[:-1] + ["a"]),
        ("two_to_63", shape[:-1] + [1 << 63]),
    ):
        item = {**valid_item(first), "shape": dims}
        add("negative_dims", name, f"shape {dims}", _json(_request(target, {first.name: item})))

    # parameter_types
    for name, parameters in (
        ("timeout_negative", {"timeout": -1}),
        ("priority_string", {"priority": "high"}),
        ("sequence_id_object", {"sequence_id": {}}),
        ("parameters_list", [1]),
    ):
        add(
            "parameter_types",
            name,
            f"parameters {json.dumps(parameters)}",
            _json(_request(target, parameters=parameters)),
        )

    # malformed
    count_off = {**valid_item(first), "data": valid_values(first, math.prod(shape) + 1)}
    for name, body in (
        ("not_json", b'{"inputs":[{"name":'),
        ("top_level_array", b"[1,2,3]"),
        ("inputs_not_a_list", b'{"inputs":{"name":"x"}}'),
        ("value_count_off_by_one", _json(_request(target, {first.name: count_off}))),
    ):
        add("malformed", name, name.replace("_", " "), body)

    # restricted_apis: read-only calls and load/unload of a model that does not exist.
    for name, method, api_path, body in (
        ("repository_index", "POST", "/v2/repository/index", b"{}"),
        ("load_missing_model", "POST", f"/v2/repository/models/{MISSING_MODEL}/load", b"{}"),
        ("unload_missing_model", "POST", f"/v2/repository/models/{MISSING_MODEL}/unload", b"{}"),
        ("system_shm_status", "GET", "/v2/systemsharedmemory/status", None),
        ("cuda_shm_status", "GET", "/v2/cudasharedmemory/status", None),
        ("trace_setting", "GET", "/v2/trace/setting", None),
        ("logging", "GET", "/v2/logging", None),
    ):
        add("restricted_apis", name, f"{method} {api_path}", body, method=method, path=api_path, restricted=True)

    # duplicate_keys: Python's json keeps the last value, Triton's parser the first.
    valid_text = _json(valid_item(first))[1:-1]  # the item's members, without braces
    add(
        "duplicate_keys",
        "datatype",
        f'"datatype":"{other}" then the valid one',
        _with_item_text(target, first, b'{"datatype":"%s",%s}' % (other.encode(), valid_text)),
    )
    add(
        "duplicate_keys",
        "name",
        '"name" unknown first, then the valid one',
        _with_item_text(target, first, b'{"name":"__hostile_unknown_input__",%s}' % valid_text),
    )
    sized_text = _json(valid_item(sized))[1:-1]
    add(
        "duplicate_keys",
        "shape",
        f'"shape":{big} and "datatype":"{datatype}" first, then the valid ones',
        _with_item_text(
            target, sized, b'{"shape":%s,"datatype":"%s",%s}' % (_json(big), datatype.encode(), sized_text)
        ),
        allocates=True,
    )

    # repeated_header
    body, _ = _binary_request(target, sized, small_shape, n, small_binary)
    header_length = len(body) - n
    add(
        "repeated_header",
        "header_length_twice",
        f"Inference-Header-Content-Length {header_length} then {header_length + n}",
        body,
        [
            ("Inference-Header-Content-Length", str(header_length)),
            ("Inference-Header-Content-Length", str(header_length + n)),
        ],
    )
    add(
        "repeated_header",
        "content_length_and_chunked",
        "Content-Length and Transfer-Encoding: chunked together",
        b"%x\r\n%s\r\n0\r\n\r\n" % (len(valid), valid),
        [("Transfer-Encoding", "chunked"), ("Content-Length", str(len(valid)))],
        chunked=True,
    )
    return cases


@lru_cache(maxsize=2)
def gzip_bomb(inflated: int) -> bytes:
    """A gzip stream of ``inflated`` spaces (about 1/1000 of that on the wire)."""
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=9) as stream:
        for _ in range(inflated >> 20):
            stream.write(b" " * (1 << 20))
    return out.getvalue()


def grpc_cases(target: Target, nbytes: int | None = None) -> list[Case]:
    """The gRPC cases for ``target`` (protobuf messages built when sent)."""
    nbytes = nbytes or declared_bytes()
    sized = target.sized_input()
    datatype = sized.datatype if sized.datatype in DATATYPE_BYTES else "FP32"
    element = DATATYPE_BYTES[datatype]
    big = huge_shape(max(len(sized.shape), 1), nbytes, element, target.max_batch_size > 0)

    def message(spec_name, spec_datatype, shape, raw=None, contents=None):
        def build():
            from tritonclient.grpc import service_pb2

            tensor = service_pb2.ModelInferRequest.InferInputTensor
            inputs, raws = [], []
            for spec in target.inputs:
                if spec.name == spec_name:
                    kwargs = {"contents": service_pb2.InferTensorContents(**contents)} if contents else {}
                    inputs.append(tensor(name=spec.name, datatype=spec_datatype, shape=shape, **kwargs))
                    if raw is not None:
                        raws.append(raw)
                else:
                    vshape, data = binary_of(spec)
                    inputs.append(tensor(name=spec.name, datatype=spec.datatype, shape=vshape))
                    raws.append(data)
            if contents:  # raw and typed contents cannot be mixed in one request
                raws = []
            return service_pb2.ModelInferRequest(model_name=target.model, inputs=inputs, raw_input_contents=raws)

        return build

    typed = {"FP32": "fp32_contents", "FP64": "fp64_contents", "INT64": "int64_contents", "BOOL": "bool_contents"}
    typed_field = typed.get(datatype, "int_contents" if datatype in ("INT8", "INT16", "INT32") else "uint_contents")
    cases: list[Case] = []

    def add(klass, name, summary, build, **kw):
        cases.append(Case(klass, name, summary, grpc_method=kw.pop("method", "ModelInfer"), grpc_request=build, **kw))

    add(
        "grpc_huge_shape",
        "raw",
        f"{big} {datatype} with {element} bytes of raw contents",
        message(sized.name, datatype, big, raw=bytes(element)),
        allocates=True,
    )
    add(
        "grpc_huge_shape",
        "typed",
        f"{big} {datatype} with one typed value",
        message(sized.name, datatype, big, contents={typed_field: [1]}),
        allocates=True,
    )
    text = target.bytes_input()
    if text is not None:
        huge_count = huge_shape(max(len(text.shape), 1), nbytes, 1, target.max_batch_size > 0)
        one = serialize_bytes([b"a"])
        add(
            "grpc_bytes",
            "raw_huge_count",
            f"raw BYTES {huge_count}, one element sent",
            message(text.name, "BYTES", huge_count, raw=one),
        )
        add(
            "grpc_bytes",
            "typed_huge_count",
            f"bytes_contents {huge_count}, one element sent",
            message(text.name, "BYTES", huge_count, contents={"bytes_contents": [b"a"]}),
        )
        add(
            "grpc_bytes",
            "length_past_end",
            "raw BYTES element claiming 1 GiB, 3 bytes sent",
            message(text.name, "BYTES", valid_shape(text), raw=struct.pack("<I", 1 << 30) + b"abc"),
        )
    for name, method in (
        ("repository_index", "RepositoryIndex"),
        ("system_shm_status", "SystemSharedMemoryStatus"),
        ("trace_setting", "TraceSetting"),
        ("log_settings", "LogSettings"),
    ):

        def build(method=method):
            from tritonclient.grpc import service_pb2

            return getattr(service_pb2, f"{method}Request")()

        add("restricted_apis", f"grpc_{name}", f"gRPC {method}", build, method=method, restricted=True)
    return cases


def all_cases(target: Target, nbytes: int | None = None, grpc: bool = True) -> list[Case]:
    """HTTP and (when ``grpc``) gRPC cases, grouped in the order of :data:`CLASSES`."""
    cases = http_cases(target, nbytes) + (grpc_cases(target, nbytes) if grpc else [])
    order = list(CLASSES)
    return sorted(cases, key=lambda c: order.index(c.klass))  # stable: a class's cases keep their order
