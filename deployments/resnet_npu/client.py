"""Classify images with the resnet_npu deployment: send the encoded file, print the top-k.

    .venv/bin/python deployments/resnet_npu/client.py deployments/resnet_npu/fixtures/images/landscape_320x240.jpg
    .venv/bin/python deployments/resnet_npu/client.py IMAGE --model classify_resnet50 --top-k 3
    .venv/bin/python deployments/resnet_npu/client.py IMAGE --protocol grpc          # 127.0.0.1:8001
    .venv/bin/python deployments/resnet_npu/client.py IMAGE --url npu-host:8000      # Ascend images: HTTP only

The client does no image processing: the ensemble decodes, resizes and normalises on the
server, so each request carries the file as it is. Importable: ``classify(paths, ...)``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from harness.client_cli import client_parser, read_file, run, server_url

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


def _classify(args) -> int:
    results = classify([read_file(p) for p in args.images], server_url(args), args.protocol, args.model, args.top_k)
    for path, rows in zip(args.images, results):
        print(f"{path}:")
        for rank, (label, prob, class_id) in enumerate(rows, 1):
            print(f"  {rank}. {label:<32s} {prob:7.2%}  (class {class_id})")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = client_parser(__doc__)
    parser.add_argument("images", nargs="+", type=Path, help="image files (JPEG, PNG, ...)")
    parser.add_argument("--model", default=ENSEMBLES[0], choices=ENSEMBLES, help="ensemble to call")
    parser.add_argument("--top-k", type=int, default=5)
    return run(parser, _classify, argv)


if __name__ == "__main__":
    sys.exit(main())
