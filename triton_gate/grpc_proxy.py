"""gRPC side of the gate: a byte-level grpc.aio proxy in front of tritonserver's gRPC port.

Calls go through as raw bytes; only ``ModelInfer`` / ``ModelStreamInfer`` requests are parsed (the
HTTP side's checks) and ``ServerReady`` / ``ModelReady`` answered from the gate's own readiness;
the restricted methods reach tritonserver with its internal token only for the admin header. grpc
cannot serve a socket it is handed, so the proxy binds the public address itself once the socket
that held it is closed.
"""

from __future__ import annotations

import asyncio
import socket
import time

import grpc
from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig

from triton_gate import log
from triton_gate.auth import PROBE_METHODS
from triton_gate.validate import GateError, check_binary, check_input

SERVICE = "/inference.GRPCInferenceService/"
#: Triton's gRPC restricted protocols read their header with this prefix (Triton 2.51 docs).
GRPC_PREFIX = "triton-grpc-protocol-"
#: The typed contents field per datatype (8- to 32-bit integers share one; FP16 and BF16 have none).
TYPED_FIELD = {name: f"{name.lower()}_contents" for name in ("BOOL", "INT64", "UINT64", "FP32", "FP64", "BYTES")}
TYPED_FIELD |= {f"{u}INT{n}": f"{u.lower()}int_contents" for u in ("", "U") for n in (8, 16, 32)}
DROP_METADATA = {"user-agent", "content-type", "te", "grpc-timeout", "grpc-encoding", "grpc-accept-encoding"}
UNAUTHENTICATED = "a valid API key is required: send the metadata 'authorization: Bearer <key>'"
STATUS = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    503: grpc.StatusCode.UNAVAILABLE,
}


def validate_grpc_infer(
    request: service_pb2.ModelInferRequest, config: ModelConfig, max_dims: dict | None = None
) -> None:
    """Declared shape x datatype against the data actually in the message (raw or typed contents)."""
    raw = list(request.raw_input_contents)
    if raw and len(raw) != len(request.inputs):
        raise GateError(400, f"{len(request.inputs)} inputs but {len(raw)} raw_input_contents")
    seen = set()
    for i, item in enumerate(request.inputs):
        where = f"input '{item.name}'"
        shape = list(item.shape)
        elements, size = check_input(request.model_name, config, item.name, item.datatype, shape, max_dims, seen)
        if raw:
            check_binary(where, shape, item.datatype, elements, size, raw[i], f"{len(raw[i])} sent")
        elif "shared_memory_region" in item.parameters:
            continue
        else:
            count = len(getattr(item.contents, TYPED_FIELD.get(item.datatype, "bytes_contents")))
            if count != elements:
                raise GateError(400, f"{where}: shape {shape} declares {elements} values, contents hold {count}")


async def refuse(context, exc: GateError, method: str) -> None:
    """Abort the call with the refusal's status, logged in one line as the HTTP side logs one."""
    log(f"refused {exc.status} model={exc.model or '-'} client={context.peer()} (gRPC {method}): {exc.message}")
    await context.abort(STATUS.get(exc.status, grpc.StatusCode.INVALID_ARGUMENT), exc.message)


class ProxyHandler(grpc.GenericRpcHandler):
    def __init__(self, gate):
        self.gate = gate
        self.channel = grpc.aio.insecure_channel(
            gate.upstream_grpc, options=[("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
        )

    def service(self, details):
        method = details.method
        if not method.startswith(SERVICE):
            return None
        name = method[len(SERVICE) :]
        if name == "ModelStreamInfer":
            return grpc.stream_stream_rpc_method_handler(self._stream(method))
        return grpc.unary_unary_rpc_method_handler(self._unary(method, name))

    def _metadata(self, context) -> tuple[list, bool, bool]:
        """(metadata to forward, admin?, authorized?): the HTTP side's checks (``HttpFront.authorized``)
        on the call's metadata; the API key and the admin header are checked here, not forwarded."""
        gate, received = self.gate, context.invocation_metadata() or ()
        sent, admin_keys = dict(received), (gate.cfg.admin_header, GRPC_PREFIX + gate.cfg.admin_header)
        admin = any(sent.get(key) == gate.cfg.admin_token for key in admin_keys)
        drop = DROP_METADATA | {"authorization", *admin_keys}
        out = [(key, value) for key, value in received if not key.startswith(":") and key not in drop]
        if admin:
            out.append((GRPC_PREFIX + gate.cfg.admin_header, gate.cfg.internal_token))
        return out, admin, admin or gate.authorized(sent, "")

    async def _check_infer(self, request_bytes: bytes, admin: bool) -> bytes:
        """The request re-serialized from what was checked (unknown fields dropped): a field sent
        twice or an encoding two protobuf parsers could read differently never reaches Triton."""
        try:
            request = service_pb2.ModelInferRequest.FromString(request_bytes)
        except DecodeError:
            raise GateError(400, "ModelInferRequest is not a valid protobuf message") from None
        try:
            config = await self.gate.check_inference(request.model_name, admin)
            validate_grpc_infer(request, config, self.gate.policy.max_dims.get(request.model_name))
        except GateError as exc:
            exc.model = request.model_name
            raise
        request.DiscardUnknownFields()
        return request.SerializeToString()

    def _unary(self, method: str, name: str):
        gate = self.gate

        async def call(request_bytes: bytes, context):
            metadata, admin, authorized = self._metadata(context)
            try:
                if not authorized and name not in PROBE_METHODS:
                    raise GateError(401, UNAUTHENTICATED)
                gate.check_load(name in ("RepositoryModelLoad", "RepositoryModelUnload"))
                if name == "ServerReady":
                    return service_pb2.ServerReadyResponse(ready=not await gate.not_ready()).SerializeToString()
                if name == "ModelReady":
                    request = service_pb2.ModelReadyRequest.FromString(request_bytes)
                    if request.name in gate.broken or request.name in gate.reloading:
                        return service_pb2.ModelReadyResponse(ready=False).SerializeToString()
                if name == "ModelInfer":
                    request_bytes = await self._check_infer(request_bytes, admin)
            except GateError as exc:
                await refuse(context, exc, name)
            gate.in_flight += 1
            try:
                return await self.channel.unary_unary(method)(
                    request_bytes, metadata=metadata, timeout=context.time_remaining()
                )
            except grpc.aio.AioRpcError as exc:
                await context.abort(exc.code(), exc.details() or "")
            finally:
                gate.in_flight -= 1

        return call

    def _stream(self, method: str):
        async def call(request_iterator, context):
            metadata, admin, authorized = self._metadata(context)
            if not authorized:
                await refuse(context, GateError(401, UNAUTHENTICATED), "ModelStreamInfer")

            async def checked():
                async for request_bytes in request_iterator:
                    try:
                        checked_bytes = await self._check_infer(request_bytes, admin)
                    except GateError as exc:
                        await refuse(context, exc, "ModelStreamInfer")
                    yield checked_bytes

            upstream = self.channel.stream_stream(method)(checked(), metadata=metadata)
            try:
                async for response in upstream:
                    yield response
            except grpc.aio.AioRpcError as exc:
                await context.abort(exc.code(), exc.details() or "")

        return call


async def start_grpc(gate, public_sock: socket.socket) -> grpc.aio.Server:
    """Start the proxy on the address of ``public_sock``, which held the port until now. The local
    launcher closes its own copy right after starting the gate: a bind refused meanwhile is retried."""
    host, port = public_sock.getsockname()[:2]
    public_sock.close()
    limit = gate.cfg.max_body_bytes
    options = [
        ("grpc.max_receive_message_length", limit),
        ("grpc.max_send_message_length", -1),
        ("grpc.so_reuseport", 0),
    ]
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    deadline = time.monotonic() + 10
    while True:
        server = grpc.aio.server(options=options)
        server.add_generic_rpc_handlers((ProxyHandler(gate),))
        try:
            server.add_insecure_port(address)
            break
        except RuntimeError:
            if time.monotonic() > deadline:
                raise OSError(f"gRPC could not bind {address}") from None
            await asyncio.sleep(0.05)
    await server.start()
    return server
