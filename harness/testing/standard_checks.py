"""Bad-input requests every entry model must survive, derived from its config alone.

``test_deployments.py::test_standard_bad_input[<deployment>-<model>-<kind>]`` sends each one to
the deployment's server, so a new deployment gets them with no code:

- ``empty``: BYTES elements of zero bytes, variable dims of size 0 (answered, or refused with a
  4xx: an empty text may be a valid input; never a 5xx);
- ``undecodable``: bytes that are neither UTF-8 nor any image or document format in every BYTES
  input, the wrong datatype for a tensor input (a 4xx that names the problem);
- ``oversized``: a body declared one byte over the gate's limit for the model (413, refused from
  ``Content-Length`` before the body is read).
After each one the server must still be ready.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass

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


def datatype_of(spec: dict) -> str:
    name = spec.get("data_type", "TYPE_FP32")[len("TYPE_") :]
    return "BYTES" if name == "STRING" else name


def _shape(spec: dict, batched: bool, fill: int) -> list[int]:
    dims = [int(d) for d in spec.get("dims") or []]
    return ([1] if batched else []) + [fill if d < 0 else d for d in dims]


def _input(spec: dict, batched: bool, datatype: str, fill: int, element: bytes) -> tuple[dict, bytes]:
    """One input of the request (JSON) and its binary data (BYTES elements, length-prefixed)."""
    shape = _shape(spec, batched, fill)
    count = 1
    for d in shape:
        count *= d
    item = {"name": spec["name"], "shape": shape, "datatype": datatype}
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


def bad_requests(config: dict) -> list[BadRequest]:
    """The standard bad requests of a model, from its config (the JSON form Triton serves)."""
    batched = int(config.get("max_batch_size") or 0) > 0
    specs = [s for s in config.get("input") or [] if not s.get("optional")]
    if not specs:
        return []
    found = []
    has_bytes = any(datatype_of(s) == "BYTES" for s in specs)
    has_variable = any(int(d) < 0 for s in specs for d in s.get("dims") or [])
    if has_bytes or has_variable:
        inputs = [_input(s, batched, datatype_of(s), 0 if datatype_of(s) != "BYTES" else 1, b"") for s in specs]
        found.append(_request("empty", inputs, (200, 400, 413)))
    undecodable = []
    for spec in specs:
        datatype = datatype_of(spec)
        if datatype == "BYTES":
            undecodable.append(_input(spec, batched, "BYTES", 1, UNDECODABLE))
        else:
            wrong = WRONG_DATATYPE.get(datatype, "BYTES")
            undecodable.append(_input(spec, batched, wrong, 1, UNDECODABLE))
    found.append(_request("undecodable", undecodable, (400,)))
    found.append(BadRequest("oversized", None, (413,)))
    return found
