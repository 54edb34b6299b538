"""The gate's start-up config: one typed object, made in one place (``gate_config``) by
``python -m triton_gate serve`` and by the harness's local launcher, read by field."""

from __future__ import annotations

import secrets
from pathlib import Path

from pydantic import BaseModel, ConfigDict, NonNegativeInt, PositiveFloat, PositiveInt

from triton_gate.policy import GatePolicy
from triton_gate.serve import ADMIN_HEADER, free_ports, gated_command, read_flags, restricted_apis
from triton_gate.validate import DEFAULT_MAX_BODY


class GateConfig(BaseModel):
    """What a gate process needs; the local launcher hands it over as JSON in a 0600 file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: tritonserver's command line, already on the private ports (``gated_command``).
    command: list[str]
    work_dir: str
    #: tritonserver's (HTTP, gRPC, metrics) ports on the gate's loopback.
    private_ports: tuple[int, int, int]
    admin_token: str
    #: Token of tritonserver's own restricted APIs; never given to clients.
    internal_token: str
    user_model_control_mode: str = "none"
    admin_header: str = ADMIN_HEADER
    #: tritonserver's log (None: the gate's own stdout) and the gate's events (stub deaths, reloads).
    log_path: str | None = None
    events_path: str | None = None
    exit_timeout_s: PositiveFloat = 30.0
    policy: GatePolicy = GatePolicy()
    #: Bearer-token keys of the public routes (``auth``); empty: off.
    api_keys: list[str] = []
    #: Body limit of a model without one of its own (policy, or computed from its config).
    max_body_bytes: PositiveInt = DEFAULT_MAX_BODY
    #: Bytes of request bodies in flight to tritonserver, per model (None: from its body limit, ``admission``).
    max_bytes_in_flight: PositiveInt | None = None
    #: How long a request waits for room in that budget before its 503.
    admission_wait_s: PositiveFloat = 2.0
    monitor_interval_s: PositiveFloat = 0.5
    auto_reload: bool = True
    #: Local launcher only: the inherited socket fds (``http``, optional ``grpc`` and ``metrics``).
    fds: dict[str, NonNegativeInt] = {}


def gate_config(
    triton_command: list[str],
    *,
    work_dir: str | Path,
    admin_token: str,
    grpc: bool,
    private_ports: tuple[int, int, int] | None = None,
    internal_token: str | None = None,
    **fields,
) -> GateConfig:
    """The user's tritonserver command behind a gate: rewritten onto private loopback ports
    (``gated_command``), its model-control mode and exit timeout read from it."""
    flags, _ = read_flags(triton_command)
    mode = flags.model_control_mode or "none"
    restricted = restricted_apis(mode)
    internal = internal_token or secrets.token_hex(16)
    private = tuple(private_ports or free_ports(3))
    return GateConfig(
        command=gated_command(triton_command, private, internal, restricted, grpc),
        work_dir=str(work_dir),
        private_ports=private,
        admin_token=admin_token,
        internal_token=internal,
        user_model_control_mode=mode,
        exit_timeout_s=float(flags.exit_timeout_secs or 30),
        **fields,
    )
