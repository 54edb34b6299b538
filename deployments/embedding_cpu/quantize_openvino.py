"""INT8 for OpenVINO: NNCF post-training quantization of the MiniLM model, gated by cosine.

    python quantize_openvino.py [--samples 300] [--json out.json]     (export.py runs it too)

Reads ``model_repository/embedding_onnx/1/model.onnx`` (FP32) with OpenVINO, quantizes it with
``nncf.quantize`` (``model_type=TRANSFORMER``, 8-bit weights and activations) and writes
``model_repository/embedding_onnx_int8/1/model_nncf.xml`` (+ ``.bin``) beside onnxruntime's dynamic
INT8 file: the config variant ``embedding_onnx_int8-sentence-openvino-nncf`` serves it on the
``openvino`` backend under the same model name and tensors.

Kept FP32: the six feed-forward output projections (``layer.N/output/dense`` MatMuls, fed by the
GELU: the widest activations); quantized, the weakest fixture sentence falls to cosine 0.963.
Overflow fix (7-bit weights, for CPUs without VNNI whose u8 x s8 kernels sum pairs in int16 and
can saturate): NNCF's default, first layer only. 7-bit weights everywhere (``--overflow-fix
enable``) cost the weakest sentence 0.005 (0.9877, under the gate). The gate runs on the CPU that
exports, with its own kernels, so where saturation hurts the file is not written.

Calibration: sentences from the docstrings of Python's standard library (the interpreter that
runs this), never a fixture sentence. Gate: the pooled vectors of the fixture sentences vs
sentence-transformers' (fixtures/expected_embeddings.json), cosine >= 0.99 (0.97 for the empty
string) alone and in one batch, at FP32 activations and at the engine's default precision (BF16
on CPUs that have it); the file is written only when every one holds, and only from fixtures of
the weights model.onnx is stamped with (``python -m harness refresh embedding_cpu`` makes them first).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import random
import re
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "model_repository" / "embedding_onnx" / "1" / "model.onnx"
TARGET = HERE / "model_repository" / "embedding_onnx_int8" / "1" / "model_nncf.xml"
FIXTURE = HERE / "fixtures" / "expected_embeddings.json"
CALIBRATION_MODULES = (
    "argparse", "asyncio", "collections", "csv", "datetime", "email", "functools", "http.client", "inspect",
    "json", "logging", "os", "pathlib", "pickle", "re", "shutil", "socket", "string", "subprocess", "tarfile",
    "textwrap", "threading", "typing", "unittest", "urllib.request", "zipfile",
)  # fmt: skip
FP32_PATTERN = r".*/layer\.\d+/output/dense/MatMul.*"
MIN_COSINE, MIN_COSINE_EMPTY = 0.99, 0.97
SEED = 0


def calibration_sentences(count: int, exclude: set[str]) -> list[str]:
    """``count`` first sentences of standard-library docstrings, 4-60 words, shuffled with a fixed seed."""
    found = set()
    for name in CALIBRATION_MODULES:
        module = importlib.import_module(name)
        for _, member in inspect.getmembers(module):
            doc = inspect.getdoc(member) if callable(member) else None
            if not doc:
                continue
            first = re.split(r"(?<=[.!?])\s", " ".join(doc.split()), maxsplit=1)[0]
            if 4 <= len(first.split()) <= 60 and first not in exclude:
                found.add(first)
    sentences = sorted(found)
    random.Random(SEED).shuffle(sentences)
    if len(sentences) < count:
        raise SystemExit(f"only {len(sentences)} calibration sentences found, {count} asked")
    return sentences[:count]


def cosines(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    got = got / np.linalg.norm(got, axis=1, keepdims=True)
    want = want / np.linalg.norm(want, axis=1, keepdims=True)
    return np.sum(got * want, axis=1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=300, help="calibration sentences")
    parser.add_argument("--json", help="write the gate's numbers here")
    parser.add_argument("--overflow-fix", default="first_layer_only", choices=["enable", "first_layer_only", "disable"])
    args = parser.parse_args(argv)

    import nncf
    import openvino as ov
    from embedding_cpu_processing.text_embedding import EmbeddingModelInfo, tokenize

    from harness import provenance
    from harness.fixtures import read_fixture

    fixture = read_fixture(FIXTURE)
    stamped, described = provenance.read_stamp(SOURCE), provenance.fixtures_identity(fixture, "embedding_onnx")
    if stamped is None or stamped.sha256 != described.sha256:
        print(
            f"{FIXTURE.name} describes weights {described.describe()}, {SOURCE.name} is "
            f"{stamped.describe() if stamped else 'unstamped'}: make the fixtures first "
            f"(python -m harness refresh); {TARGET.name} not written",
            file=sys.stderr,
        )
        return 1
    sentences, expected = fixture["sentences"], np.asarray(fixture["embeddings"], np.float32)
    calibration = calibration_sentences(args.samples, set(sentences))
    dataset = nncf.Dataset([tokenize([s]) for s in calibration])

    core = ov.Core()
    quantized = nncf.quantize(
        core.read_model(str(SOURCE)),
        dataset,
        model_type=nncf.ModelType.TRANSFORMER,
        subset_size=args.samples,
        ignored_scope=nncf.IgnoredScope(patterns=[FP32_PATTERN], validate=False),
        advanced_parameters=nncf.AdvancedQuantizationParameters(overflow_fix=nncf.OverflowFix(args.overflow_fix)),
    )
    result = {"calibration_sentences": len(calibration), "fp32_kept": FP32_PATTERN}
    result["precisions"] = gate(core, quantized, sentences, expected, EmbeddingModelInfo.read(), tokenize)
    passed = all(p["gate"] == "passed" for p in result["precisions"].values())
    result["gate"] = "passed" if passed else "failed"
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    if not passed:
        print(f"NNCF INT8 misses the gate; {TARGET.name} not written", file=sys.stderr)
        return 1
    save(ov, quantized)
    return 0


def gate(core, quantized, sentences: list[str], expected: np.ndarray, info, tokenize) -> dict[str, dict]:
    """Per CPU precision (f32 and the CPU's default), the cosines of ``quantized`` to the reference
    embeddings, each sentence alone and all in one batch, against the floors."""
    floors = np.array([MIN_COSINE if s else MIN_COSINE_EMPTY for s in sentences])
    found = {}
    default_precision = core.get_property("CPU", "INFERENCE_PRECISION_HINT").to_string()
    for precision in sorted({"f32", default_precision}):
        compiled = core.compile_model(quantized, "CPU", {"INFERENCE_PRECISION_HINT": precision})

        def embed(texts: list[str]) -> np.ndarray:
            tokens = tokenize(texts)
            hidden = compiled({k: tokens[k] for k in ("input_ids", "attention_mask")})[0]
            return info.pool(hidden, tokens["attention_mask"])

        alone = cosines(np.concatenate([embed([s]) for s in sentences]), expected)
        batch = cosines(embed(sentences), expected)
        ok = bool((alone >= floors).all() and (batch >= floors).all())
        found[precision] = {
            "min_cosine_alone": round(float(alone[floors == MIN_COSINE].min()), 5),
            "min_cosine_batch": round(float(batch[floors == MIN_COSINE].min()), 5),
            "empty_string": round(float(min(alone[floors != MIN_COSINE].min(), batch[floors != MIN_COSINE].min())), 5),
            "gate": "passed" if ok else "failed",
        }
    return found


def save(ov, quantized) -> None:
    """Write TARGET (+ .bin) beside, then rename over: a reader never sees half a file."""
    TARGET.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=TARGET.parent) as tmp:
        ov.save_model(quantized, str(Path(tmp) / TARGET.name), compress_to_fp16=False)
        for written in (TARGET.with_suffix(".bin"), TARGET):
            os.replace(Path(tmp) / written.name, written)
    print(f"wrote {TARGET.relative_to(HERE)} (+ .bin)")


if __name__ == "__main__":
    raise SystemExit(main())
