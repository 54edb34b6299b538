"""Export both cn_clip towers to ONNX for the Triton model repository.

    python export.py                              # seeded RN50@RBT3-chinese (no weights offline)
    python export.py --checkpoint clip_cn_rn50.pt # a real Chinese-CLIP checkpoint
    python export.py --static                     # also the static batch-1 graphs (NPU), version 2

Writes (all gitignored):
  model_repository/image_encoder/1/model.onnx   PIXEL_VALUES [-1,3,224,224] -> EMBEDDING [-1,1024]
  model_repository/text_encoder/1/model.onnx    INPUT_IDS [-1,52] int64     -> EMBEDDING [-1,1024]
  model_repository/{image,text}_encoder/2/model.onnx   with --static: batch fixed at 1
each stamped with the weights' identity (harness.provenance: sha256 of the model's tensors), and sets the ``logit_scale`` parameter of model_repository/zero_shot/config.pbtxt: the scalar
is not a graph output (a shapeless output does not fit config.pbtxt).

Embeddings leave the graph L2-normalised, so the entry models return them as they are.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from cn_clip_model import (  # noqa: E402
    DEFAULT_ARCH,
    DEFAULT_SEED,
    ImageTower,
    TextTower,
    build_model,
    image_resolution,
    weights_identity,
)

from harness import provenance  # noqa: E402

CONTEXT_LENGTH = 52


def _export(module, example, path: Path, input_name: str, dynamic: bool, opset: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    axes = {input_name: {0: "batch"}, "EMBEDDING": {0: "batch"}} if dynamic else None
    torch.onnx.export(
        module,
        (example,),
        str(path),
        input_names=[input_name],
        output_names=["EMBEDDING"],
        dynamic_axes=axes,
        opset_version=opset,
        do_constant_folding=True,
        dynamo=False,
    )
    if not dynamic:
        # A static graph still computes shapes at run time (Shape/Gather/Concat chains);
        # folding them away is the "remove the dynamic op" step that matters on the NPU.
        import contextlib
        import io

        import onnxslim

        with contextlib.redirect_stdout(io.StringIO()):  # onnxslim prints a table of op counts
            onnxslim.slim(str(path), str(path))


def _verify(path: Path, torch_module, example) -> float:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    got = session.run(None, {name: example.numpy()})[0]
    with torch.no_grad():
        want = torch_module(example).numpy()
    return float(np.abs(got - want).max())


def _set_logit_scale(config: Path, value: float) -> None:
    text = config.read_text()
    pattern = r'(key:\s*"logit_scale"\s*value:\s*\{\s*string_value:\s*")[^"]*(")'
    new, count = re.subn(pattern, lambda m: f"{m.group(1)}{value:.6f}{m.group(2)}", text)
    if count != 1:
        raise SystemExit(f'{config}: no parameters {{ key: "logit_scale" ... }} entry to update')
    if new != text:
        config.write_text(new)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default=DEFAULT_ARCH, help="cn_clip '<vision>@<text>' architecture")
    parser.add_argument(
        "--checkpoint", help="a Chinese-CLIP .pt checkpoint (e.g. clip_cn_rn50.pt); default: seeded weights"
    )
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--opset", type=int, default=17)
    parser.add_argument("--static", action="store_true", help="also export static batch-1 graphs as version 2 (NPU)")
    parser.add_argument(
        "--static-opset", type=int, default=14, help="opset of the static graphs (npu_ge recommends 14)"
    )
    parser.add_argument("--repository", default=str(HERE / "model_repository"))
    args = parser.parse_args(argv)

    started = time.time()
    repo = Path(args.repository)
    model = build_model(args.arch, args.checkpoint, args.seed)
    identity = weights_identity(model, args.arch, args.checkpoint, args.seed)
    logit_scale = float(model.logit_scale.detach().exp())
    size = image_resolution(args.arch)

    towers = {
        "image_encoder": (ImageTower(model).eval(), "PIXEL_VALUES", torch.randn(2, 3, size, size)),
        "text_encoder": (TextTower(model).eval(), "INPUT_IDS", _example_ids()),
    }
    for name, (module, input_name, example) in towers.items():
        if not (repo / name).is_dir():  # a copy that keeps one tower (harness new --models)
            continue
        variants = [("1", True, args.opset)] + ([("2", False, args.static_opset)] if args.static else [])
        for version, dynamic, opset in variants:
            path = repo / name / version / "model.onnx"
            sample = example if dynamic else example[:1]

            def write(
                temporary: Path, module=module, sample=sample, input_name=input_name, dynamic=dynamic, opset=opset
            ):
                _export(module, sample, temporary, input_name, dynamic, opset)
                provenance.stamp_onnx(temporary, identity, "deployments/cn_clip/export.py")

            provenance.replace_atomically(path, write)  # beside, then renamed over: a copy's file is never written into
            check = torch.cat([example, example[:1]]) if dynamic else sample  # another batch size than traced
            err = _verify(path, module, check)
            print(
                f"{path.relative_to(HERE)}: {'dynamic batch' if dynamic else 'static batch 1'}, "
                f"opset {opset}, max |onnx - torch| = {err:.2e}"
            )
            if err > 1e-4:
                raise SystemExit(f"{path}: onnxruntime differs from torch by {err}")

    if (repo / "zero_shot").is_dir():
        _set_logit_scale(repo / "zero_shot" / "config.pbtxt", logit_scale)
    print(f"weights {identity.describe()}, logit_scale {logit_scale:.4f}; in {time.time() - started:.0f} s")
    return 0


def _example_ids() -> torch.Tensor:
    from harness.deployments import load_module

    tokenizer = load_module(HERE / "model_repository" / "tokenize" / "1" / "cn_clip_tokenizer.py", "cn_clip_tokenizer")
    return torch.from_numpy(tokenizer.CnClipTokenizer(CONTEXT_LENGTH).encode(["一只猫", "A photo of a dog 🐶"]))


if __name__ == "__main__":
    sys.exit(main())
