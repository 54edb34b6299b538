"""Classify images with the resnet_npu deployment: send the encoded file, print the top-k.

    python client.py fixtures/images/landscape_320x240.jpg
    python client.py IMAGE --model classify_resnet50 --top-k 3
    python client.py IMAGE --protocol grpc          # 127.0.0.1:8001
    python client.py IMAGE --url npu-host:8000      # Ascend images: HTTP only

The client does no image processing: the ensemble decodes, resizes and normalises on the
server, so each request carries the file as it is. Needs tritonclient[all] and numpy only: it
runs outside this repository too (README, "Outside this repository"). Importable:
``classify(images, ...)``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from tritonclient.utils import InferenceServerException

# Command-line plumbing, the same in every deployment's client so that each file stands alone
# (tritonclient and numpy are all it needs): server options, one-line failures, exit codes
# 0 done, 1 server unreachable or request refused, 2 bad arguments or an unreadable file.
DEFAULT_URLS = {"http": "127.0.0.1:8000", "grpc": "127.0.0.1:8001"}
EXIT_SERVER, EXIT_USAGE = 1, 2


class ClientError(Exception):
    """A failure the client explains in one line (``exit_code`` says which kind)."""

    def __init__(self, message: str, exit_code: int = EXIT_SERVER):
        super().__init__(message)
        self.exit_code = exit_code


class ClientArgumentParser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line (``--help`` still prints the usage)."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def add_server_options(parser: argparse.ArgumentParser, in_subcommand: bool = False) -> None:
    """``--url`` and ``--protocol``; on a subcommand they default to what was given before it."""
    url_default = argparse.SUPPRESS if in_subcommand else None
    protocol_default = argparse.SUPPRESS if in_subcommand else "http"
    parser.add_argument("--url", default=url_default, help="host:port (default 127.0.0.1:8000 http, :8001 grpc)")
    parser.add_argument("--protocol", choices=("http", "grpc"), default=protocol_default)


def read_file(path) -> bytes:
    """A file's bytes, or a one-line ``ClientError`` saying why it cannot be read."""
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ClientError(f"cannot read {path}: {exc.strerror or exc}", EXIT_USAGE) from None


def explain(exc: Exception, url: str, protocol: str) -> tuple[str, int]:
    """One line and an exit code for a failure."""
    unreachable = f"cannot reach a Triton server at {url} ({protocol}): is it running?"
    if isinstance(exc, ClientError):
        return str(exc), exc.exit_code
    if isinstance(exc, InferenceServerException):
        message = " ".join(str(exc.message() or exc).split())
        if exc.status() in ("StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED") or "failed to connect" in message:
            return unreachable, EXIT_SERVER
        return f"server refused the request: {message}", EXIT_SERVER
    if isinstance(exc, OSError) and exc.filename:
        return f"{exc.filename}: {exc.strerror}", EXIT_USAGE
    if isinstance(exc, OSError) or type(exc).__module__.startswith(("aiohttp", "gevent")):
        return unreachable, EXIT_SERVER
    return f"{type(exc).__name__}: {exc}", EXIT_SERVER


def run(parser: argparse.ArgumentParser, handler, argv=None) -> int:
    """Parse ``argv`` and call ``handler(args, url)``; a failure becomes one line on stderr."""
    args = parser.parse_args(argv)
    url = args.url or DEFAULT_URLS[args.protocol]
    try:
        return handler(args, url) or 0
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - a command-line tool explains, it does not dump a traceback
        message, code = explain(exc, url, args.protocol)
        print(f"{parser.prog}: {message}", file=sys.stderr)
        return code


ENSEMBLES = ("classify_efficientnet_lite0", "classify_resnet50")
OUTPUTS = ("LABELS", "PROBABILITIES", "CLASS_IDS")


def classify(
    images: list[bytes],
    url: str = "127.0.0.1:8000",
    protocol: str = "http",
    model: str = "classify_efficientnet_lite0",
    top_k: int = 5,
) -> list[list[tuple[str, float, int]]]:
    """``[(label, probability, class_id), ...]`` (best first) for each encoded image, one request."""
    if protocol == "grpc":
        import tritonclient.grpc as client_module
    else:
        import tritonclient.http as client_module
    data = np.array([[image] for image in images], dtype=object)
    tensor = client_module.InferInput("IMAGE_BYTES", list(data.shape), "BYTES")
    tensor.set_data_from_numpy(data)
    outputs = [client_module.InferRequestedOutput(name) for name in OUTPUTS]
    client = client_module.InferenceServerClient(url)
    try:
        result = client.infer(model, [tensor], outputs=outputs, parameters={"top_k": top_k})
    finally:
        client.close()
    labels, probs, ids = (result.as_numpy(name) for name in OUTPUTS)
    return [
        [(label.decode("utf-8"), float(p), int(i)) for label, p, i in zip(labels[row], probs[row], ids[row])]
        for row in range(len(images))
    ]


def _classify(args, url: str) -> int:
    results = classify([read_file(p) for p in args.images], url, args.protocol, args.model, args.top_k)
    for path, rows in zip(args.images, results):
        print(f"{path}:")
        for rank, (label, prob, class_id) in enumerate(rows, 1):
            print(f"  {rank}. {label:<32s} {prob:7.2%}  (class {class_id})")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = ClientArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_options(parser)
    parser.add_argument("images", nargs="+", type=Path, help="image files (JPEG, PNG, ...)")
    parser.add_argument("--model", default=ENSEMBLES[0], choices=ENSEMBLES, help="ensemble to call")
    parser.add_argument("--top-k", type=int, default=5)
    return run(parser, _classify, argv)


if __name__ == "__main__":
    sys.exit(main())
