"""Hostile input end to end: a handful of generated hostile inputs to every entry model of every
deployment on its real server; each request ends in a result or an error response, and the server
and its models are healthy afterwards (no stub died). The counts go to results/reliability/fuzz.json."""

from __future__ import annotations

import random
import time
import zlib

import numpy as np
import pytest
from PIL import Image

from harness.repository import config_from_json
from harness.tests.fuzz_tally import SERVED, write_tally  # noqa: F401 - write_tally: autouse fixture
from harness.tests.hostile_inputs import encode, png_header_bomb, png_zip_bomb


def _hostile_bytes_items(rng: random.Random) -> list[bytes]:
    jpeg = encode(Image.new("RGB", (64, 48), (200, 10, 10)), "JPEG")
    return [
        b"",
        rng.randbytes(512),
        jpeg[: len(jpeg) // 2],
        png_header_bomb(60000, 60000),
        png_zip_bomb(),
        b"\xff\xfe\xfa\x00" * 8,
        b"a" * (3 << 20),
        b"%PDF-1.7\n" + rng.randbytes(256),
        b"/etc/passwd",
    ]


def _hostile_numeric(dtype: str, shape: list[int], rng: np.random.Generator) -> list[np.ndarray]:
    np_dtype = {
        "FP32": np.float32,
        "FP16": np.float16,
        "FP64": np.float64,
        "INT64": np.int64,
        "INT32": np.int32,
        "INT8": np.int8,
        "UINT8": np.uint8,
        "BOOL": np.bool_,
    }.get(dtype, np.float32)
    if np.issubdtype(np_dtype, np.floating):
        return [
            np.full(shape, np.nan, np_dtype),
            np.full(shape, np.inf, np_dtype),
            rng.normal(0, 1e6, shape).astype(np_dtype),
        ]
    if np.issubdtype(np_dtype, np.integer):
        info = np.iinfo(np_dtype)
        return [
            np.full(shape, info.max, np_dtype),
            np.full(shape, info.min, np_dtype),
            rng.integers(info.min, info.max, shape, dtype=np_dtype, endpoint=True),
        ]
    return [np.ones(shape, np_dtype)]


def _served_cases(metadata: dict, max_batch: int, seed: int) -> list[dict]:
    """Up to 9 hostile input sets for a model, from its own metadata (no per-model knowledge)."""
    rng, nprng = random.Random(seed), np.random.default_rng(seed)
    columns = {}
    for spec in metadata["inputs"]:
        shape = [int(d) for d in spec["shape"]]
        if max_batch > 0:
            shape = [1] + shape[1:]
        shape = [d if d >= 0 else 8 for d in shape]
        if spec["datatype"] == "BYTES":
            columns[spec["name"]] = [np.full(shape, item, dtype=object) for item in _hostile_bytes_items(rng)]
        else:
            columns[spec["name"]] = _hostile_numeric(spec["datatype"], shape, nprng)
    count = max(len(v) for v in columns.values())
    return [{name: values[i % len(values)] for name, values in columns.items()} for i in range(count)]


def _deployments():
    from harness.deployments import discover

    return discover()


@pytest.mark.timeout(900)
@pytest.mark.parametrize("deployment", _deployments(), ids=lambda d: d.name)
def test_served_entry_models_survive_hostile_input(server_pool, deployment, request):
    """Each entry model gets generated hostile inputs; every request is answered and no stub dies."""
    from tritonclient.utils import InferenceServerException

    target = request.config.getoption("--target")
    if target not in deployment.targets:
        pytest.skip(f"{deployment.name} does not support target {target}")
    ctx = server_pool.context(deployment)
    stubs_before = _children(ctx.server)
    with ctx.http_client(network_timeout=120, connection_timeout=120) as client:
        for model in deployment.entry_models:
            metadata = client.get_model_metadata(model)
            max_batch = config_from_json(client.get_model_config(model)).max_batch_size
            for index, inputs in enumerate(_served_cases(metadata, max_batch, seed=index_seed(model))):
                began = time.monotonic()
                try:
                    ctx.infer(model, inputs)
                    outcome = "result"
                except InferenceServerException as exc:
                    message = exc.message() or str(exc)
                    assert "not healthy" not in message and "Stub" not in message, f"{model} case {index}: {message}"
                    outcome = f"error {exc.status()}"
                elapsed = time.monotonic() - began
                assert elapsed < 120, f"{model} case {index} took {elapsed:.0f} s"
                SERVED["requests"] += 1
                SERVED["models"].add(f"{deployment.name}/{model}")
                SERVED["outcomes"][outcome] = SERVED["outcomes"].get(outcome, 0) + 1
    ctx.assert_healthy()
    # A model stays READY after its stub died (lab/docs/reliability.md): check the stub processes too.
    died = stubs_before - _children(ctx.server)
    assert not died, f"processes of the {deployment.name} server died during the fuzz: {sorted(died)}"


def _children(server) -> set[int]:
    import psutil

    process = getattr(server, "process", None)
    if process is None:
        return set()
    return {p.pid for p in psutil.Process(process.pid).children(recursive=True)}


def index_seed(model: str) -> int:
    return zlib.crc32(model.encode())
