"""The gate on its own, in front of a tritonserver command line: the CPU image's entry point.

``python -m triton_gate serve [options] -- tritonserver ...`` (``--help``) binds the public ports,
starts the command on private loopback ports (its address / port flags replaced) and serves as
behind ``LocalTritonServer``. The admin
token comes from a file, never the command line; without one the restricted APIs are closed
(images/cpu/README.md).
"""

from __future__ import annotations

import argparse
import os
import secrets
import socket
import tempfile
from pathlib import Path

from triton_gate import log
from triton_gate.auth import read_keys
from triton_gate.config import ADMIN_HEADER, GateConfig
from triton_gate.policy import GatePolicy

#: APIs behind ADMIN_HEADER: shared-memory registration names /dev/shm objects from client input;
#: trace/logging change server behaviour; model-repository is also closed unless explicit/poll mode was asked for.
RESTRICTED_APIS = ("shared-memory", "trace", "logging")
#: Flags of the user's command that the gate sets itself (tritonserver listens on private ports).
REPLACED = (
    "--http-address",
    "--http-port",
    "--grpc-address",
    "--grpc-port",
    "--metrics-address",
    "--metrics-port",
    "--http-restricted-api",
    "--grpc-restricted-protocol",
    "--model-control-mode",
)


def read_flags(command: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """(the flags the gate reads or replaces, as ``--flag value`` or ``--flag=value``; the rest in order)."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    for name in REPLACED + ("--allow-grpc", "--allow-metrics", "--exit-timeout-secs"):
        parser.add_argument(name)
    return parser.parse_known_args(command)


def gated_command(
    command: list[str], private_ports: tuple[int, int, int], internal_token: str, restricted_apis: list[str], grpc: bool
) -> list[str]:
    """The user's tritonserver command on private loopback ports, restricted APIs behind the
    gate's internal token, and explicit model control (the gate reloads a model whose stub died;
    a user's mode ``none`` becomes explicit with every model loaded at start)."""
    flags, kept = read_flags(command)
    for name in ("--allow-grpc", "--allow-metrics", "--exit-timeout-secs"):
        value = getattr(flags, name[2:].replace("-", "_"))
        kept += [f"{name}={value}"] if value is not None else []
    mode = flags.model_control_mode or "none"
    out = kept + listen_flags("127.0.0.1", private_ports, restricted_apis, internal_token, grpc)
    if mode == "none":
        return out + ["--model-control-mode=explicit", "--load-model=*"]
    return out + [f"--model-control-mode={mode}"]


def listen_flags(
    host: str, ports: tuple[int, int, int], restricted_apis: list[str], token: str, grpc: bool
) -> list[str]:
    """tritonserver's address and (HTTP, gRPC, metrics) port flags, its restricted APIs behind ``token``."""
    http, grpc_port, metrics = ports
    restricted = f"{','.join(restricted_apis)}:{ADMIN_HEADER}={token}"
    flags = [
        f"--http-address={host}",
        f"--http-port={http}",
        f"--grpc-address={host}",
        f"--grpc-port={grpc_port}",
        f"--metrics-address={host}",
        f"--metrics-port={metrics}",
        f"--http-restricted-api={restricted}",
    ]
    return flags + ([f"--grpc-restricted-protocol={restricted}"] if grpc else [])


def serve_command(triton: list[str], *gate_options: str) -> list[str]:
    """The command line that runs ``triton`` (a tritonserver command) behind the gate, in an image that
    carries ``triton_gate`` (the container's entry point form)."""
    return ["python3", "-m", "triton_gate", "serve", *gate_options, "--", *triton]


def free_ports(count: int) -> tuple[int, ...]:
    """``count`` distinct TCP ports on 127.0.0.1 that are free right now. All are held at once while
    chosen: ports taken one at a time can repeat."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return tuple(sock.getsockname()[1] for sock in socks)
    finally:
        for sock in socks:
            sock.close()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    return free_ports(1)[0]


def restricted_apis(mode: str) -> list[str]:
    """``RESTRICTED_APIS``, and the model repository too in model-control mode ``none``."""
    return list(RESTRICTED_APIS) + (["model-repository"] if mode == "none" else [])


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


def listen(host: str, port: int) -> socket.socket:
    """A listening (inheritable) socket; OSError ``... (while attempting to bind on address ...)``."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family, backlog=1024, dualstack_ipv6=family == socket.AF_INET6)
    sock.set_inheritable(True)
    return sock


def public_sockets(
    host: str, ports: tuple[int, int, int], grpc: bool, metrics: bool = True
) -> dict[str, socket.socket]:
    """The gate's public sockets by name: ``http``, and ``grpc`` and ``metrics`` when served."""
    wanted = {"http": ports[0]}
    wanted.update({"grpc": ports[1]} if grpc else {})
    wanted.update({"metrics": ports[2]} if metrics else {})
    socks: dict[str, socket.socket] = {}
    try:
        for name, port in wanted.items():
            socks[name] = listen(host, port)
    except OSError:
        close_sockets(socks)
        raise
    return socks


def close_sockets(socks: dict[str, socket.socket]) -> None:
    for sock in socks.values():
        sock.close()


def read_token(path: str | None) -> tuple[str, str]:
    """(token, where it came from). The file is removed after reading when that is allowed."""
    if not path:
        return secrets.token_hex(16), "no admin token file: restricted APIs closed (random token)"
    with open(path) as f:
        token = f.read().strip()
    if not token:
        raise SystemExit(f"gate: admin token file {path} is empty")
    try:
        os.unlink(path)
    except OSError:
        pass  # a read-only mounted secret stays; it is readable by its owner only
    return token, f"admin token read from {path}"


def serve_main(argv: list[str]) -> int:
    from triton_gate.server import run_gate  # aiohttp, grpc, uvloop: only the entry point needs them

    args = serve_parser().parse_args(argv)
    command = args.command
    flags, _ = read_flags(command)
    grpc = (flags.allow_grpc or "true").lower() not in ("false", "0", "no")
    metrics = (flags.allow_metrics or "true").lower() not in ("false", "0", "no")
    token, token_note = read_token(args.admin_token_file)
    socks = public_sockets(args.host, (args.http_port, args.grpc_port, args.metrics_port), grpc, metrics)
    work_dir = tempfile.mkdtemp(prefix="triton-gate-")
    policy_text = Path(args.policy_file).read_text() if args.policy_file else "{}"
    config = gate_config(
        command,
        work_dir=work_dir,
        admin_token=token,
        grpc=grpc,
        events_path=os.path.join(work_dir, "gate-events.jsonl"),
        policy=GatePolicy.model_validate_json(policy_text),
        api_keys=read_keys(args.api_key_file),
    )
    log(
        f"serving {args.host}:{args.http_port} (HTTP)"
        + (f", :{args.grpc_port} (gRPC)" if grpc else "")
        + (f", :{args.metrics_port} (metrics)" if metrics else "")
        + f"; tritonserver on 127.0.0.1:{config.private_ports[0]}"
        f" behind it; {token_note}; API keys {'on' if config.api_keys else 'off'}"
    )
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        log(f"listening on {args.host}: no TLS; put TLS in front of the gate when the network is not trusted")
    return run_gate(config, socks)


def serve_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m triton_gate serve",
        usage="%(prog)s [options] -- tritonserver --model-repository=...",
        description=__doc__.split("\n\n")[0],
    )
    parser.add_argument("command", nargs="+", help="the tritonserver command line, after --")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--http-port", type=int, default=8000)
    parser.add_argument("--grpc-port", type=int, default=8001)
    parser.add_argument("--metrics-port", type=int, default=8002)
    parser.add_argument("--admin-token-file", default=os.environ.get("TRITON_GATE_ADMIN_TOKEN_FILE"))
    parser.add_argument(
        "--api-key-file",
        default=os.environ.get("TRITON_GATE_API_KEY_FILE"),
        help="API keys, one per line: every route but the health probes then needs 'Authorization: Bearer <key>' "
        "(triton_gate.auth; default: off)",
    )
    parser.add_argument(
        "--policy-file",
        default=os.environ.get("TRITON_GATE_POLICY_FILE"),
        help="the deployment's gate policy (JSON: public models, body and dimension bounds; triton_gate.policy)",
    )
    return parser
