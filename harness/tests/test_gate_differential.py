"""The gate reads every inference request exactly as Triton does (issue: a parser differential).

Hypothesis writes HTTP/REST inference requests the way a hostile client could spell them: keys in
any order, a key given twice in one object (with another value), escaped key names, numbers as
``1``, ``1.0``, ``1e0``, random whitespace, and a framing header (``Inference-Header-Content-Length``)
sent twice. Each goes through a real gated tritonserver to ``receipt``, a Python model that answers
what Triton handed it: per input the shape, datatype, byte size and values. For every request the
gate accepts, that receipt must equal what the gate checked (its own parse of the same bytes,
``triton_gate.validate.parse_header``); a request the gate refuses gets a 4xx, never a 5xx.
"""

from __future__ import annotations

import http.client
import json
import math
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from harness.serving.launchers import LocalTritonServer, ServerOptions
from triton_gate.validate import DTYPE_SIZE, GateError, parse_header

RECEIPT_CONFIG = """
name: "receipt"
backend: "python"
max_batch_size: 4
input [
  { name: "F" data_type: TYPE_FP32 dims: [ -1 ] optional: true },
  { name: "I" data_type: TYPE_INT64 dims: [ 2 ] optional: true },
  { name: "S" data_type: TYPE_STRING dims: [ -1 ] optional: true }
]
output [ { name: "RECEIPT" data_type: TYPE_STRING dims: [ 1 ] } ]
"""
RECEIPT_MODEL = '''
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Answers, per input it was given, the shape, datatype, byte size and values."""

    def execute(self, requests):
        responses = []
        for request in requests:
            seen = {}
            for name in ("F", "I", "S"):
                tensor = pb_utils.get_input_tensor_by_name(request, name)
                if tensor is None:
                    continue
                array = tensor.as_numpy()
                if array.dtype == np.object_:
                    values = [bytes(v).hex() for v in array.reshape(-1)]
                    nbytes = sum(len(v) // 2 for v in values)
                else:
                    values = array.reshape(-1).tolist()
                    nbytes = array.nbytes
                seen[name] = {"shape": list(array.shape), "nbytes": nbytes, "values": values}
            out = np.array([[json.dumps(seen, sort_keys=True).encode()]], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("RECEIPT", out)]))
        return responses
'''
CONFIG = {
    "name": "receipt",
    "max_batch_size": 4,
    "input": [
        {"name": "F", "data_type": "TYPE_FP32", "dims": [-1]},
        {"name": "I", "data_type": "TYPE_INT64", "dims": [2]},
        {"name": "S", "data_type": "TYPE_STRING", "dims": [-1]},
    ],
}
DATATYPE = {"F": "FP32", "I": "INT64", "S": "BYTES"}
NUMPY = {"FP32": np.float32, "INT64": np.int64}


@pytest.fixture(scope="module")
def receipt_server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("differential") / "model_repository"
    (repo / "receipt" / "1").mkdir(parents=True)
    (repo / "receipt" / "config.pbtxt").write_text(RECEIPT_CONFIG)
    (repo / "receipt" / "1" / "model.py").write_text(RECEIPT_MODEL)
    with LocalTritonServer(ServerOptions(str(repo), required_models=["receipt"], allow_grpc=False)) as server:
        yield server


# -- JSON written by hand: pairs may repeat a key, numbers and keys have several spellings ---------
def spell_key(draw, key: str) -> str:
    """``"name"``, or the same key with one letter escaped as ``\\u00XX``."""
    if draw(st.booleans()) or not key:
        return json.dumps(key)
    i = draw(st.integers(0, len(key) - 1))
    return '"' + key[:i] + f"\\u{ord(key[i]):04x}" + key[i + 1 :] + '"'


def spell_number(draw, value, datatype: str) -> str:
    if datatype == "FP32":
        return draw(st.sampled_from([repr(float(value)), f"{float(value):e}", f"{float(value):E}"]))
    return draw(st.sampled_from([str(int(value)), f"{int(value)}"]))


def render(draw, node) -> str:
    """Serialize ``("obj", [(key, node), ...])`` / ``("arr", [...])`` / ``("raw", text)``."""
    kind, payload = node
    space = draw(st.sampled_from(["", " ", "\n", "\t "]))
    if kind == "raw":
        return payload
    if kind == "arr":
        return "[" + space + ("," + space).join(render(draw, item) for item in payload) + "]"
    pairs = list(payload)
    order = draw(st.permutations(range(len(pairs)))) if len(pairs) > 1 else range(len(pairs))
    return (
        "{" + ",".join(f"{space}{spell_key(draw, pairs[i][0])}{space}:{render(draw, pairs[i][1])}" for i in order) + "}"
    )


def raw(value) -> tuple[str, str]:
    return ("raw", json.dumps(value))


def duplicate(draw, pairs: list, candidates: dict) -> list:
    """Maybe give one key of ``pairs`` a second time, with another value from ``candidates``."""
    keys = [k for k, _ in pairs if k in candidates]
    if not keys or draw(st.integers(0, 7)) != 0:
        return pairs
    key = draw(st.sampled_from(keys))
    other = (key, draw(st.sampled_from(candidates[key])))
    return pairs + [other] if draw(st.booleans()) else [other] + pairs


@st.composite
def inference_requests(draw):
    """(body, header values of Inference-Header-Content-Length) of one request to ``receipt``."""
    names = draw(st.lists(st.sampled_from(["F", "I", "S"]), min_size=1, max_size=3, unique=True))
    batch = draw(st.integers(1, 3))
    binary = b""
    inputs = []
    for name in names:
        datatype = DATATYPE[name]
        width = 2 if name == "I" else draw(st.integers(1, 3))
        shape = [batch, width]
        count = batch * width
        if datatype == "BYTES":
            values = [draw(st.binary(max_size=6)) for _ in range(count)]
        else:
            values = draw(st.lists(st.integers(-1000, 1000), min_size=count, max_size=count))
        pairs = [("name", raw(name)), ("datatype", raw(datatype)), ("shape", raw(shape))]
        if draw(st.booleans()):  # binary data
            if datatype == "BYTES":
                data = b"".join(struct.pack("<I", len(v)) + v for v in values)
            else:
                data = np.asarray(values, NUMPY[datatype]).tobytes()
            binary += data
            size_pairs = duplicate(draw, [("binary_data_size", raw(len(data)))], {"binary_data_size": [raw(0), raw(4)]})
            pairs.append(("parameters", ("obj", size_pairs)))
        else:
            if datatype == "BYTES":
                items = [raw(v.decode("latin-1")) for v in values]  # JSON strings of those code points
            else:
                items = [("raw", spell_number(draw, v, datatype)) for v in values]
            pairs.append(("data", ("arr", items)))
        pairs = duplicate(
            draw,
            pairs,
            {
                "shape": [raw([batch, width + 1]), raw([batch + 1, width]), raw([1, 1])],
                "datatype": [raw("FP64"), raw("INT32"), raw("BYTES")],
                "name": [raw("F"), raw("I"), raw("S")],
            },
        )
        inputs.append(("obj", pairs))
    top = [("inputs", ("arr", inputs))]
    if draw(st.booleans()):
        top.append(("outputs", raw([{"name": "RECEIPT"}])))
    top = duplicate(draw, top, {"inputs": [raw([])]})
    header = render(draw, ("obj", top)).encode()
    lengths = [str(len(header))] if binary or draw(st.booleans()) else []
    if lengths and draw(st.integers(0, 4)) == 0:  # the framing header twice, the second one wrong
        lengths.append(str(len(header) + draw(st.sampled_from([-1, 1, 4]))))
    return header + binary, lengths


def gate_view(body: bytes, lengths: list[str]) -> dict | None:
    """What the gate checked: per input shape, byte size and values (None: the gate refuses it)."""
    if len(lengths) > 1:
        return None
    try:
        header, section = parse_header(body, int(lengths[0]) if lengths else None)
    except (GateError, ValueError):
        return None
    offset, view = 0, {}
    for item in header.get("inputs") or []:
        name, datatype, shape = item["name"], item["datatype"], item["shape"]
        if "data" in item:
            flat = list(np.asarray(item["data"], dtype=object).reshape(-1))
            if datatype == "BYTES":
                blobs = [v.encode("utf-8") for v in flat]
            else:
                array = np.asarray(flat, NUMPY[datatype])
        else:
            size = item["parameters"]["binary_data_size"]
            data = bytes(section[offset : offset + size])
            offset += size
            if datatype == "BYTES":
                blobs, at = [], 0
                while at < len(data):
                    (n,) = struct.unpack_from("<I", data, at)
                    blobs.append(data[at + 4 : at + 4 + n])
                    at += 4 + n
            else:
                array = np.frombuffer(data, NUMPY[datatype])
        if datatype == "BYTES":
            view[name] = {"shape": shape, "nbytes": sum(map(len, blobs)), "values": [b.hex() for b in blobs]}
        else:
            assert DTYPE_SIZE[datatype] * math.prod(shape) == array.nbytes
            view[name] = {"shape": shape, "nbytes": array.nbytes, "values": array.tolist()}
    return view


def send(server, body: bytes, lengths: list[str]) -> tuple[int, bytes]:
    host, port = server.http_url.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.putrequest("POST", "/v2/models/receipt/infer")
        connection.putheader("Content-Length", str(len(body)))
        for value in lengths:
            connection.putheader("Inference-Header-Content-Length", value)
        connection.endheaders(body)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def receipt(status: int, payload: bytes, lengths: list[str]) -> dict:
    """The RECEIPT output of a 200 answer (JSON, or binary when the request asked for none)."""
    reply_length = None
    try:
        answer = json.loads(payload)
    except ValueError:
        # binary output: the JSON header is followed by one length-prefixed BYTES element
        reply_length = payload.index(b"}]}") + 3
        answer = json.loads(payload[:reply_length])
    output = answer["outputs"][0]
    if "data" in output:
        return json.loads(output["data"][0])
    blob = payload[reply_length:]
    (n,) = struct.unpack_from("<I", blob, 0)
    return json.loads(blob[4 : 4 + n])


@pytest.mark.server
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=inference_requests())
def test_what_triton_receives_is_what_the_gate_checked(receipt_server, case):
    body, lengths = case
    status, payload = send(receipt_server, body, lengths)
    assert status < 500, f"{status} {payload[:300]!r} for {body[:300]!r} (header lengths {lengths})"
    event(f"HTTP {status}")
    if status == 200:
        expected = gate_view(body, lengths)
        assert expected is not None, f"the gate refuses {body[:200]!r} yet Triton answered it"
        got = receipt(status, payload, lengths)
        assert got == expected, f"Triton received {got}, the gate checked {expected}, body {body[:300]!r}"


def tritonserver_rss(server) -> int:
    """RSS of the tritonserver process behind the gate (the gate's child), in bytes."""
    import psutil

    gate = psutil.Process(server.process.pid)
    (triton,) = [p for p in gate.children(recursive=True) if p.name() == "tritonserver"]
    return triton.memory_info().rss


@pytest.mark.server
def test_a_repeated_key_never_reaches_triton(receipt_server):
    """The issue's request: ``shape`` twice, the first one (what Triton 2.51 reads) declaring
    16 GiB of FP32. Refused within a second; tritonserver's RSS moves by less than 64 MiB."""
    import time

    body = b'{"inputs":[{"name":"F","shape":[1,4294967296],"shape":[1,1],"datatype":"FP32","data":[1]}]}'
    before = tritonserver_rss(receipt_server)
    for lengths, message in [([], b"twice"), ([str(len(body)), str(len(body) - 1)], b"more than once")]:
        began = time.monotonic()
        status, payload = send(receipt_server, body, lengths)
        assert time.monotonic() - began < 1.0
        assert status == 400 and message in payload, payload
    assert tritonserver_rss(receipt_server) - before < 64 << 20
