"""The gate's start-up config: one typed object, made in one place (``serve.gate_config``) by
``python -m triton_gate serve`` and by the harness's local launcher, read by field."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, NonNegativeInt, PositiveFloat, PositiveInt

from triton_gate.policy import GatePolicy
from triton_gate.validate import DEFAULT_MAX_BODY

#: Header that unlocks the APIs a client of a harness-started server does not need (safe defaults);
#: the one definition (the harness's launchers import it from here).
ADMIN_HEADER = "x-triton-harness-admin"


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
