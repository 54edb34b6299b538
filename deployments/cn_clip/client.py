"""Client for the cn_clip deployment: raw images and raw UTF-8 text in, no local pre-processing.

    python client.py image fixtures/images/scene.jpg
    python client.py text "一只猫" "a photo of a dog"
    python client.py zero-shot fixtures/images/scene.jpg 猫 狗 公交车
    options (before or after the subcommand): --url 127.0.0.1:8000 (HTTP), --protocol grpc (port 8001)

Needs tritonclient[all] and numpy only: it runs outside this repository too (README, "Outside
this repository"). Importable: ``image_embeddings(paths_or_bytes)``, ``text_embeddings(texts)``,
``zero_shot(image, labels)`` return numpy arrays.
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


def _infer(model: str, inputs: dict[str, np.ndarray], output: str, url: str | None, protocol: str) -> np.ndarray:
    if protocol == "grpc":
        import tritonclient.grpc as module
    else:
        import tritonclient.http as module
    client = module.InferenceServerClient(url or DEFAULT_URLS[protocol])
    try:
        tensors = []
        for name, array in inputs.items():
            tensor = module.InferInput(name, list(array.shape), "BYTES")
            tensor.set_data_from_numpy(array)
            tensors.append(tensor)
        result = client.infer(model, tensors, outputs=[module.InferRequestedOutput(output)])
        return result.as_numpy(output)
    finally:
        client.close()


def _read(image) -> bytes:
    return image if isinstance(image, (bytes, bytearray)) else read_file(image)


def image_embeddings(images, url: str | None = None, protocol: str = "http") -> np.ndarray:
    """``[n, dim]`` normalised embeddings of encoded images (paths or bytes); one request."""
    data = np.array([[_read(image)] for image in images], dtype=np.object_)
    return _infer("image_embedding", {"IMAGE_BYTES": data}, "EMBEDDING", url, protocol)


def text_embeddings(texts, url: str | None = None, protocol: str = "http") -> np.ndarray:
    """``[n, dim]`` normalised embeddings of texts; one request."""
    data = np.array([[text.encode("utf-8")] for text in texts], dtype=np.object_)
    return _infer("text_embedding", {"TEXT": data}, "EMBEDDING", url, protocol)


def zero_shot(image, labels, url: str | None = None, protocol: str = "http") -> np.ndarray:
    """One probability per label for one image (softmax over the labels)."""
    inputs = {
        "IMAGE_BYTES": np.array([_read(image)], dtype=np.object_),
        "LABELS": np.array([label.encode("utf-8") for label in labels], dtype=np.object_),
    }
    return _infer("zero_shot", inputs, "PROBABILITIES", url, protocol)


def _run(args, url: str) -> int:
    if args.use == "zero-shot":
        probabilities = zero_shot(args.image, args.labels, url, args.protocol)
        for label, p in sorted(zip(args.labels, probabilities), key=lambda item: -item[1]):
            print(f"{p:8.4f}  {label}")
        return 0
    if args.use == "image":
        names, embeddings = args.images, image_embeddings(args.images, url, args.protocol)
    else:
        names, embeddings = args.texts, text_embeddings(args.texts, url, args.protocol)
    np.set_printoptions(precision=4, suppress=True)
    for name, vector in zip(names, embeddings):
        print(f"{name}: dim {vector.shape[0]}, |v| = {np.linalg.norm(vector):.4f}, head {vector[:6]}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = ClientArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_options(parser)
    sub = parser.add_subparsers(dest="use", required=True)
    uses = {}
    for name, help_text in (
        ("image", "image embeddings"),
        ("text", "text embeddings"),
        ("zero-shot", "zero-shot classification of one image"),
    ):
        uses[name] = sub.add_parser(name, help=help_text, description=help_text)
        add_server_options(uses[name], in_subcommand=True)
    uses["image"].add_argument("images", nargs="+")
    uses["text"].add_argument("texts", nargs="+")
    uses["zero-shot"].add_argument("image")
    uses["zero-shot"].add_argument("labels", nargs="+")
    return run(parser, _run, argv)


if __name__ == "__main__":
    sys.exit(main())
