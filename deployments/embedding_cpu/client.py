"""Client for embedding_cpu: embed sentences through ``embedding_py`` or ``embedding_onnx``.

``embedding_py`` takes the text itself. ``embedding_onnx`` is the bare transformer: this
client tokenizes with the model's fast tokenizer, sends ``input_ids`` + ``attention_mask``
and mean-pools ``last_hidden_state`` (+ L2 normalisation, as the model folder declares).

    python deployments/embedding_cpu/client.py "A sentence." "另一句话" --model embedding_onnx
"""

from __future__ import annotations

import argparse

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from triton_helpers.text_embedding import EmbeddingModelInfo, pool, tokenize

MODELS = ("embedding_py", "embedding_onnx")


def _module(client):
    return grpcclient if isinstance(client, grpcclient.InferenceServerClient) else httpclient


def text_input(module, texts: list[str], name: str = "TEXT"):
    """A ``[n, 1]`` BYTES input with one UTF-8 text per row."""
    array = np.array([[t.encode("utf-8")] for t in texts], dtype=object)
    infer_input = module.InferInput(name, list(array.shape), "BYTES")
    infer_input.set_data_from_numpy(array)
    return infer_input


def embed_py(client, texts: list[str]) -> np.ndarray:
    """Embeddings from ``embedding_py`` (server runs sentence-transformers)."""
    result = client.infer("embedding_py", [text_input(_module(client), texts)])
    return result.as_numpy("EMBEDDING")


def onnx_inputs(module, texts: list[str]) -> tuple[list, np.ndarray]:
    """Tokenized ``input_ids`` / ``attention_mask`` inputs and the mask (for pooling)."""
    tokens = tokenize(texts)
    inputs = []
    for name, array in tokens.items():
        infer_input = module.InferInput(name, list(array.shape), "INT64")
        infer_input.set_data_from_numpy(array)
        inputs.append(infer_input)
    return inputs, tokens["attention_mask"]


def embed_onnx(client, texts: list[str]) -> np.ndarray:
    """Embeddings from ``embedding_onnx``: tokenize here, pool ``last_hidden_state`` here."""
    inputs, mask = onnx_inputs(_module(client), texts)
    hidden = client.infer("embedding_onnx", inputs).as_numpy("last_hidden_state")
    return pool(hidden, mask, EmbeddingModelInfo.read().normalize)


EMBED = {"embedding_py": embed_py, "embedding_onnx": embed_onnx}


def connect(url: str, protocol: str):
    """A tritonclient client for ``url`` (host:port)."""
    return (grpcclient if protocol == "grpc" else httpclient).InferenceServerClient(url)


def main() -> None:
    parser = argparse.ArgumentParser(description="Embed sentences with the embedding_cpu deployment.")
    parser.add_argument("texts", nargs="+", help="sentences to embed")
    parser.add_argument("--url", default="127.0.0.1:8000", help="server host:port (HTTP 8000 / gRPC 8001)")
    parser.add_argument("--protocol", choices=("http", "grpc"), default="http")
    parser.add_argument("--model", choices=MODELS, default="embedding_py")
    args = parser.parse_args()
    client = connect(args.url, args.protocol)
    vectors = EMBED[args.model](client, args.texts)
    for text, vector in zip(args.texts, vectors):
        head = ", ".join(f"{x:+.4f}" for x in vector[:6])
        print(f"{text[:50]!r:54} dim={vector.shape[0]} norm={np.linalg.norm(vector):.4f} [{head}, ...]")


if __name__ == "__main__":
    main()
