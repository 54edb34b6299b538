"""The in-process ceiling: the same work as a served request, in one process, no server.

``onnx-fp32`` / ``onnx-int8``: tokenize (fast tokenizer) + the deployment's ONNX file
(onnxruntime, ``threads`` intra-op threads) + mean pooling + normalisation, at ``batch``
sentences per call. ``sentence-transformers``: ``SentenceTransformer.encode`` (torch,
``threads`` threads). Run pinned to the server's cores: ``taskset -c 1 python -m
harness.measuring.peers.ceiling --kind onnx-fp32 --batch 1,8,32``; prints one JSON line per batch.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from harness import PROJECT_ROOT

REPOSITORY = PROJECT_ROOT / "deployments" / "embedding_cpu" / "model_repository"
ONNX_FILES = {
    "onnx-fp32": REPOSITORY / "embedding_onnx" / "1" / "model.onnx",
    "onnx-int8": REPOSITORY / "embedding_onnx_int8" / "1" / "model.onnx",
}
KINDS = tuple(ONNX_FILES) + ("sentence-transformers",)


def encoder(kind: str, threads: int):
    """A function ``texts -> vectors`` doing a served request's whole work in this process."""
    from triton_helpers.text_embedding import EmbeddingModelInfo, pool, tokenize

    if kind == "sentence-transformers":
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(threads)
        model = SentenceTransformer(str(EmbeddingModelInfo.read().model_dir), device="cpu")
        return lambda texts: model.encode(texts, batch_size=len(texts), normalize_embeddings=True)
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(ONNX_FILES[kind]), options, providers=["CPUExecutionProvider"])
    normalize = EmbeddingModelInfo.read().normalize

    def encode(texts):
        tokens = tokenize(texts)
        hidden = session.run(["last_hidden_state"], dict(tokens))[0]
        return pool(hidden, tokens["attention_mask"], normalize)

    return encode


def measure(encode, texts: list[str], duration_s: float) -> float:
    """Sentences per second of ``encode(texts)`` over ``duration_s`` (after two warm-up calls)."""
    encode(texts)
    encode(texts)
    calls, began = 0, time.perf_counter()
    while time.perf_counter() - began < duration_s:
        encode(texts)
        calls += 1
    return calls * len(texts) / (time.perf_counter() - began)


def main(argv: list[str] | None = None) -> int:
    from harness.measuring.peers.workloads import sentences

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=KINDS, required=True)
    parser.add_argument("--batch", default="1,8,32", help="comma-separated batch sizes")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument(
        "--serve", action="store_true", help="read 'batch duration' lines from stdin, answer each with a JSON line"
    )
    args = parser.parse_args(argv)
    encode = encoder(args.kind, args.threads)
    if args.serve:
        print(json.dumps({"ready": args.kind}), flush=True)
        for line in sys.stdin:
            batch, duration = line.split()
            rate = measure(encode, sentences(int(batch)), float(duration))
            print(
                json.dumps(
                    {
                        "kind": args.kind,
                        "batch": int(batch),
                        "threads": args.threads,
                        "items_per_second": round(rate, 2),
                    }
                ),
                flush=True,
            )
        return 0
    for batch in [int(b) for b in args.batch.split(",")]:
        rate = measure(encode, sentences(batch), args.duration)
        print(
            json.dumps(
                {"kind": args.kind, "batch": batch, "threads": args.threads, "items_per_second": round(rate, 2)}
            ),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
