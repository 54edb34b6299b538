"""Export the sentence-transformers model to ONNX for ``embedding_onnx`` with optimum.

``optimum`` exports the transformer with ``--task feature-extraction`` (output
``last_hidden_state``). BERT-family exports also take ``token_type_ids``, which clients of
the public contract (``input_ids`` + ``attention_mask``) never send, so that input is
replaced inside the graph by zeros of the shape of ``input_ids`` (what the model uses when
it is not given). The INT8 variant is made from that file by onnxruntime's dynamic
quantization (weights INT8, activations quantized at run time); OpenVINO's NNCF INT8 IR
(``quantize_openvino.py``) is made from the FP32 file too, where its gate holds. Both ONNX files are stamped with
the weights' identity (harness.provenance): the sha256 of the installed folder's
``model.safetensors``, the file optimum and sentence-transformers open themselves; the Python
backend models (embedding_py, full_pipeline_py) load that same file, so :func:`weights_identity`
of the installed folder is their identity too.

``--model-dir DIR`` swaps the model: any sentence-transformers folder (BERT family, mean, CLS or
last-token pooling, read from its own ``modules.json`` and ``1_Pooling/config.json``) is copied
to this deployment's ``model/`` folder, which every model, check and client here then loads
(``default_model_dir``), and the configs' embedding size is set to the folder's. Every file is
written beside its target and renamed over it (never written into). The NNCF INT8 file derived
from an older FP32 file is removed: ``quantize_openvino.py`` makes it again, from the fixtures of
these weights (``python -m harness export`` runs it after this script, ``python -m harness
refresh embedding_cpu`` runs export, make_fixtures.py, then it).
Usage: ``python export.py [--model-dir DIR] [--output PATH] [--int8-output PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from harness import provenance

HERE = Path(__file__).resolve().parent
DEFAULT_OUTPUT = HERE / "model_repository" / "embedding_onnx" / "1" / "model.onnx"
DEFAULT_INT8_OUTPUT = HERE / "model_repository" / "embedding_onnx_int8" / "1" / "model.onnx"
#: This deployment's copy of the model folder (``--model-dir``); what default_model_dir() prefers.
MODEL_DIR = HERE / "model"
NNCF_FILES = [DEFAULT_INT8_OUTPUT.with_name(n) for n in ("model_nncf.xml", "model_nncf.bin")]


def default_model_dir() -> Path:
    from embedding_cpu_processing.text_embedding import default_model_dir as find

    return find()


def use_model_dir(source: Path) -> Path:
    """Copy the sentence-transformers folder ``source`` to ``model/`` (replacing the one there)."""
    if source.resolve() == MODEL_DIR.resolve():
        return MODEL_DIR
    staging = MODEL_DIR.with_name(".model.partial")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(source, staging)
    shutil.rmtree(MODEL_DIR, ignore_errors=True)
    staging.rename(MODEL_DIR)
    print(f"copied {source} to {MODEL_DIR}")
    return MODEL_DIR


def set_embedding_dimension(dimension: int) -> None:
    """The embedding size in every config of the repository, taken from an EMBEDDING output (a
    copy may have kept any of the models that have one)."""
    repository = HERE / "model_repository"
    configs = "".join(p.read_text() for p in sorted(repository.glob("*/config.pbtxt")))
    old = int(re.search(r'name: "EMBEDDING" data_type: TYPE_FP32 dims: \[ (?:-1, )?(\d+) \]', configs).group(1))
    if old == dimension:
        return
    for config in sorted(repository.glob("*/config.pbtxt")):
        text = config.read_text()
        new = re.sub(rf"(dims: \[ (?:-1, )?){old}( \])", rf"\g<1>{dimension}\g<2>", text)
        if new != text:
            provenance.replace_atomically(config, lambda path, new=new: path.write_text(new))
            print(f"{config.relative_to(HERE)}: embedding size {old} -> {dimension}")


EXPORTED_BY = "deployments/embedding_cpu/export.py"


def weights_identity(model_dir: Path) -> provenance.WeightsIdentity:
    """The identity of a sentence-transformers folder's weights: its model.safetensors file."""
    return provenance.file_identity(
        model_dir / "model.safetensors", f"installed:{model_dir.parent.name}/{model_dir.name}/model.safetensors"
    )


def drop_token_type_ids(model: onnx.ModelProto) -> onnx.ModelProto:
    """Feed ``token_type_ids`` from zeros shaped like ``input_ids`` instead of a graph input."""
    graph = model.graph
    inputs = {i.name: i for i in graph.input}
    if "token_type_ids" not in inputs:
        return model
    graph.input.remove(inputs["token_type_ids"])
    zeros = helper.make_tensor("zero_int64", TensorProto.INT64, [1], [0])
    graph.node.insert(0, helper.make_node("Shape", ["input_ids"], ["input_ids_shape"], name="token_type_ids_shape"))
    graph.node.insert(
        1,
        helper.make_node(
            "ConstantOfShape", ["input_ids_shape"], ["token_type_ids"], name="token_type_ids_zeros", value=zeros
        ),
    )
    return model


def export(model_dir: Path, output: Path, opset: int = 18) -> Path:
    """Run optimum's exporter offline and write the contract-shaped ONNX to ``output``."""
    from optimum.exporters.onnx import main_export

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory() as tmp:
        main_export(
            str(model_dir),
            output=tmp,
            task="feature-extraction",
            library_name="transformers",
            opset=opset,
            do_validation=False,
        )
        model = drop_token_type_ids(onnx.load(Path(tmp) / "model.onnx"))
    onnx.checker.check_model(model)
    identity = weights_identity(model_dir)

    def write(path: Path) -> None:
        onnx.save(model, path)
        provenance.stamp_onnx(path, identity, EXPORTED_BY)

    provenance.replace_atomically(output, write)
    print(f"exported {output} from {model_dir} (weights {identity.describe()})")
    return output


#: Transformer layers whose feed-forward output projection (``*/output/dense``) stays FP32.
FP32_FFN_OUTPUT_LAYERS = 3


def fp32_nodes(model: onnx.ModelProto, layers: int = FP32_FFN_OUTPUT_LAYERS) -> list[str]:
    """MatMuls kept FP32: the feed-forward output projection (``layer.N/output/dense``, fed by
    the GELU, the widest activations) of the first ``layers`` layers, where INT8 error grows most
    on its way to the pooled vector (measured layer by layer; see the deployment README)."""
    kept = []
    for node in model.graph.node:
        if node.op_type != "MatMul" or "attention" in node.name or "/output/dense/" not in node.name:
            continue
        layer = node.name.split("layer.", 1)[1].split("/", 1)[0] if "layer." in node.name else ""
        if layer.isdigit() and int(layer) < layers:
            kept.append(node.name)
    return kept


def fuse_transformer(fp32: Path, output: Path, model_dir: Path | None = None) -> Path:
    """onnxruntime's BERT graph fusions (Attention, SkipLayerNormalization, BiasGelu, fused bias adds)."""
    from onnxruntime.transformers import optimizer

    config = json.loads(((model_dir or default_model_dir()) / "config.json").read_text())
    fused = optimizer.optimize_model(
        str(fp32),
        model_type="bert",
        num_heads=config["num_attention_heads"],
        hidden_size=config["hidden_size"],
        opt_level=1,
    )
    fused.save_model_to_file(str(output))
    return output


def quantize_int8(fp32: Path, output: Path, model_dir: Path | None = None) -> Path:
    """Dynamic INT8 quantization (onnxruntime.quantization, QOperator format) of the fused FP32 graph.

    Weights INT8 per channel, activations quantized at run time (MatMulInteger fused by
    onnxruntime into DynamicQuantizeMatMul, and QAttention: MLAS u8s8 GEMMs, AVX512-VNNI on CPUs
    that have it). The MatMuls and fused Attention nodes are INT8 except the first
    ``FP32_FFN_OUTPUT_LAYERS`` feed-forward output projections; the embedding lookup
    (EmbedLayerNormalization) stays FP32: quantizing it or those projections cost the weakest
    fixture sentence its 0.99 bound (0.9864-0.9898, measured). Dynamic quantization
    scales activations over the whole batch, so a sentence's INT8 vector depends on its
    batch-mates; the cosine to the FP32 reference stays >= 0.99 alone and in a batch (measured;
    see the deployment README). 7-bit weights (``reduce_range``): the u8s8 kernels of CPUs without
    VNNI sum pairs of products in int16 and saturate with full-range weights; on VNNI the
    kernels and the speed are the same either way.
    """
    from onnxruntime.quantization import QuantType, quantize_dynamic

    def write(path: Path) -> None:
        quantize_dynamic(
            fused,
            path,
            weight_type=QuantType.QInt8,
            per_channel=True,
            reduce_range=True,
            op_types_to_quantize=["MatMul", "Attention"],
            nodes_to_exclude=fp32_nodes(onnx.load(fused)),
            extra_options={"DefaultTensorType": TensorProto.FLOAT},
        )
        provenance.stamp_onnx(path, weights_identity(model_dir or default_model_dir()), EXPORTED_BY)

    with tempfile.TemporaryDirectory() as tmp:
        fused = fuse_transformer(fp32, Path(tmp) / "fused.onnx", model_dir)
        provenance.replace_atomically(output, write)
    print(f"quantized {output} ({output.stat().st_size / 2**20:.1f} MiB, FP32 {fp32.stat().st_size / 2**20:.1f} MiB)")
    return output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model-dir", type=Path, default=None, help="sentence-transformers folder to serve (copied to model/)"
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--int8-output", type=Path, default=DEFAULT_INT8_OUTPUT)
    parser.add_argument("--opset", type=int, default=18)
    args = parser.parse_args()
    model_dir = use_model_dir(args.model_dir) if args.model_dir else default_model_dir()
    if args.output == DEFAULT_OUTPUT:
        from embedding_cpu_processing.text_embedding import EmbeddingModelInfo

        set_embedding_dimension(EmbeddingModelInfo.read(model_dir).dimension)
    export(model_dir, args.output, args.opset)
    quantize_int8(args.output, args.int8_output, model_dir)
    if args.output == DEFAULT_OUTPUT:
        for stale in NNCF_FILES:  # made from the FP32 file just replaced (quantize_openvino.py)
            stale.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
