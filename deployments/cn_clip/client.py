"""Client for the cn_clip deployment: raw images and raw UTF-8 text in, no local pre-processing.

    .venv/bin/python deployments/cn_clip/client.py image deployments/cn_clip/fixtures/images/scene.jpg
    .venv/bin/python deployments/cn_clip/client.py text "一只猫" "a photo of a dog"
    .venv/bin/python deployments/cn_clip/client.py zero-shot deployments/cn_clip/fixtures/images/scene.jpg 猫 狗 公交车
    options (before or after the subcommand): --url 127.0.0.1:8000 (HTTP), --protocol grpc (port 8001)

Importable: ``image_embeddings(paths_or_bytes)``, ``text_embeddings(texts)``,
``zero_shot(image, labels)`` return numpy arrays.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from harness.client_cli import DEFAULT_URLS, add_subcommand, client_parser, read_file, run, server_url


def _client(url: str | None, protocol: str):
    if protocol == "grpc":
        import tritonclient.grpc as module
    else:
        import tritonclient.http as module
    return module, module.InferenceServerClient(url or DEFAULT_URLS[protocol])


def _infer(model: str, inputs: dict[str, np.ndarray], output: str, url: str | None, protocol: str) -> np.ndarray:
    module, client = _client(url, protocol)
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
    return image if isinstance(image, (bytes, bytearray)) else Path(image).read_bytes()


def image_embeddings(images, url: str | None = None, protocol: str = "http") -> np.ndarray:
    """``[n, 1024]`` normalised embeddings of encoded images (paths or bytes); one request."""
    data = np.array([[_read(image)] for image in images], dtype=np.object_)
    return _infer("image_embedding", {"IMAGE_BYTES": data}, "EMBEDDING", url, protocol)


def text_embeddings(texts, url: str | None = None, protocol: str = "http") -> np.ndarray:
    """``[n, 1024]`` normalised embeddings of texts; one request."""
    data = np.array([[text.encode("utf-8")] for text in texts], dtype=np.object_)
    return _infer("text_embedding", {"TEXT": data}, "EMBEDDING", url, protocol)


def zero_shot(image, labels, url: str | None = None, protocol: str = "http") -> np.ndarray:
    """One probability per label for one image (softmax over the labels)."""
    inputs = {
        "IMAGE_BYTES": np.array([_read(image)], dtype=np.object_),
        "LABELS": np.array([label.encode("utf-8") for label in labels], dtype=np.object_),
    }
    return _infer("zero_shot", inputs, "PROBABILITIES", url, protocol)


def _run(args) -> int:
    url = server_url(args)
    if args.use == "zero-shot":
        probabilities = zero_shot(read_file(args.image), args.labels, url, args.protocol)
        for label, p in sorted(zip(args.labels, probabilities), key=lambda item: -item[1]):
            print(f"{p:8.4f}  {label}")
        return 0
    if args.use == "image":
        names, embeddings = args.images, image_embeddings([read_file(p) for p in args.images], url, args.protocol)
    else:
        names, embeddings = args.texts, text_embeddings(args.texts, url, args.protocol)
    np.set_printoptions(precision=4, suppress=True)
    for name, vector in zip(names, embeddings):
        print(f"{name}: dim {vector.shape[0]}, |v| = {np.linalg.norm(vector):.4f}, head {vector[:6]}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = client_parser(__doc__)
    sub = parser.add_subparsers(dest="use", required=True)
    add_subcommand(sub, "image", "image embeddings").add_argument("images", nargs="+")
    add_subcommand(sub, "text", "text embeddings").add_argument("texts", nargs="+")
    zs = add_subcommand(sub, "zero-shot", "zero-shot classification of one image")
    zs.add_argument("image")
    zs.add_argument("labels", nargs="+")
    return run(parser, _run, argv)


if __name__ == "__main__":
    sys.exit(main())
