"""What the deployments' command-line clients share: server options and one-line failures.

Exit 0: done; 1: the server is unreachable or refused the request; 2: bad arguments or an
unreadable input file. Never a traceback."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

DEFAULT_URLS = {"http": "127.0.0.1:8000", "grpc": "127.0.0.1:8001"}
EXIT_SERVER = 1
EXIT_USAGE = 2


class ClientError(Exception):
    """A failure the client explains in one line (``exit_code`` says which kind)."""

    def __init__(self, message: str, exit_code: int = EXIT_SERVER):
        super().__init__(message)
        self.exit_code = exit_code


class ClientArgumentParser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line (``--help`` still prints the usage)."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def add_server_options(parser: argparse.ArgumentParser, *, in_subcommand: bool = False) -> None:
    """``--url`` and ``--protocol``; on a subcommand they default to what was given before it."""
    default = argparse.SUPPRESS if in_subcommand else None
    parser.add_argument(
        "--url", default=default, help="server host:port (default 127.0.0.1:8000 for http, 127.0.0.1:8001 for grpc)"
    )
    parser.add_argument("--protocol", choices=("http", "grpc"), default=argparse.SUPPRESS if in_subcommand else "http")


def client_parser(description: str | None) -> ClientArgumentParser:
    """A client's top-level parser, with the server options."""
    parser = ClientArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_options(parser)
    return parser


def add_subcommand(subparsers, name: str, help_text: str) -> argparse.ArgumentParser:
    """A subcommand that also accepts the server options after its name."""
    sub = subparsers.add_parser(name, help=help_text, description=help_text)
    add_server_options(sub, in_subcommand=True)
    return sub


def server_url(args: argparse.Namespace) -> str:
    """``--url``, or the default port of ``--protocol`` on 127.0.0.1."""
    return args.url or DEFAULT_URLS[args.protocol]


def read_file(path: str | Path) -> bytes:
    """A file's bytes, or a one-line ``ClientError`` saying why it cannot be read."""
    path = Path(path)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise ClientError(f"no such file: {path}", EXIT_USAGE) from None
    except IsADirectoryError:
        raise ClientError(f"is a folder, not a file: {path}", EXIT_USAGE) from None
    except OSError as exc:
        raise ClientError(f"cannot read {path}: {exc.strerror or exc}", EXIT_USAGE) from None


def _explain(exc: BaseException, url: str, protocol: str) -> tuple[str, int]:
    from tritonclient.utils import InferenceServerException

    unreachable = f"cannot reach a Triton server at {url} ({protocol}): is it running? (e.g. `make deploy-<name>`)"
    if isinstance(exc, ClientError):
        return str(exc), exc.exit_code
    if isinstance(exc, InferenceServerException):
        message = " ".join(str(exc.message() or exc).split())
        if exc.status() in ("StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED") or "failed to connect" in message:
            return unreachable, EXIT_SERVER
        return f"server refused the request: {message}", EXIT_SERVER
    if isinstance(exc, (ConnectionError, TimeoutError)) or type(exc).__module__.startswith(("aiohttp", "gevent")):
        return unreachable, EXIT_SERVER
    if isinstance(exc, OSError):
        if exc.filename:
            return f"cannot read {exc.filename}: {exc.strerror}", EXIT_USAGE
        return unreachable, EXIT_SERVER
    return f"{type(exc).__name__}: {exc}", EXIT_SERVER


def run(
    parser: argparse.ArgumentParser, handler: Callable[[argparse.Namespace], int | None], argv: list[str] | None = None
) -> int:
    """Parse ``argv``, call ``handler(args)``; any failure becomes one line on stderr and an exit code."""
    args = parser.parse_args(argv)
    try:
        return handler(args) or 0
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - a command-line tool explains, it does not dump a traceback
        message, code = _explain(exc, server_url(args), args.protocol)
        print(f"{parser.prog}: {message}", file=sys.stderr)
        return code
