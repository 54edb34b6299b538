"""Bad-input requests every entry model must survive, derived from its config alone
(``test_deployments.py::test_standard_bad_input``): ``empty`` (answered or a 4xx), ``undecodable``
(a 4xx naming the problem), ``oversized`` (413 from ``Content-Length``)."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass

from harness.repository import ModelConfig
from triton_gate.validate import ModelInput, triton_datatype

#: Not UTF-8 (nor BOM-marked UTF-16), not an image or document magic number.
UNDECODABLE = b"\x80\x9c\xc3\x28 neither text nor an image \xa0\xa1\xfe"  # no BOM: not UTF-16 either
KINDS = ("empty", "undecodable", "oversized")
#: A wrong datatype for each tensor datatype (one the gate and Triton both refuse).
WRONG_DATATYPE = {"BYTES": "FP32"}


@dataclass
class BadRequest:
    kind: str
    #: The inference request (``None`` for ``oversized``: only its declared length matters).
    body: bytes | None
    #: Status codes that are a correct answer.
    statuses: tuple[int, ...]
    #: ``Inference-Header-Content-Length`` (BYTES travel as binary data: JSON cannot carry raw bytes).
    header_length: int | None = None


def _shape(spec: ModelInput, batched: bool, fill: int) -> list[int]:
    return ([1] if batched else []) + [fill if d < 0 else d for d in spec.dims]


def _input(spec: ModelInput, batched: bool, datatype: str, fill: int, element: bytes) -> tuple[dict, bytes]:
    """One input of the request (JSON) and its binary data (BYTES elements, length-prefixed)."""
    shape = _shape(spec, batched, fill)
    count = 1
    for d in shape:
        count *= d
    item = {"name": spec.name, "shape": shape, "datatype": datatype}
    if datatype == "BYTES":
        binary = (struct.pack("<I", len(element)) + element) * count
        return {**item, "parameters": {"binary_data_size": len(binary)}}, binary
    if datatype == "BOOL":
        data = [False] * count
    elif datatype.startswith(("FP", "BF")):
        data = [0.0] * count
    else:
        data = [0] * count
    return {**item, "data": data}, b""


def _request(kind: str, parts: list[tuple[dict, bytes]], statuses: tuple[int, ...]) -> BadRequest:
    header = json.dumps({"inputs": [item for item, _ in parts]}).encode()
    binary = b"".join(data for _, data in parts)
    return BadRequest(kind, header + binary, statuses, len(header) if binary else None)


def bad_requests(config: ModelConfig) -> list[BadRequest]:
    """The standard bad requests of a model, from its config (as the server auto-completed it)."""
    batched = config.max_batch_size > 0
    specs = [s for s in config.input if not s.optional]
    if not specs:
        return []
    found = []
    datatypes = [triton_datatype(s.data_type) for s in specs]
    if "BYTES" in datatypes or any(d < 0 for s in specs for d in s.dims):
        inputs = [_input(s, batched, t, 1 if t == "BYTES" else 0, b"") for s, t in zip(specs, datatypes)]
        found.append(_request("empty", inputs, (200, 400, 413)))
    undecodable = []
    for spec, datatype in zip(specs, datatypes):
        if datatype == "BYTES":
            undecodable.append(_input(spec, batched, "BYTES", 1, UNDECODABLE))
        else:
            wrong = WRONG_DATATYPE.get(datatype, "BYTES")
            undecodable.append(_input(spec, batched, wrong, 1, UNDECODABLE))
    found.append(_request("undecodable", undecodable, (400,)))
    found.append(BadRequest("oversized", None, (413,)))
    return found
