"""Image classification pre/post-processing in numpy + PIL, equal to the reference transforms.

``ImageTransform`` reproduces, without torch, the two eval transforms of the classifiers
served here:

- ``resize_crop`` (torchvision's ImageNet eval transform, as used for ResNet):
  ``Resize(256)`` on the PIL image (shorter side to 256, the longer one truncated as
  torchvision does; PIL resampling, which antialiases), ``CenterCrop(224)`` (offsets rounded
  as torchvision does), ``ToTensor`` (``/255`` in float32), ``Normalize(mean, std)``.
- ``crop_resize`` (the TensorFlow EfficientNet eval transform, as used for EfficientNet-Lite):
  a centred square crop of ``crop / (crop + 32)`` of the shorter side, resized to
  ``crop x crop``, normalised with mean 127 / std 128 (on the 0..255 scale).

Both produce float32 ``(3, crop, crop)`` arrays, channel-first RGB, bit-identical to the
torchvision pipeline on the same PIL image; ``ImageTransform.pixels`` stops before the
normalisation (``uint8`` channel-last), for graphs that normalise themselves. ``top_k`` turns
logits into class ids, softmax probabilities and labels.

``reducing_gap`` (off by default) is Pillow's fast path for a large downscale: an integer box
reduction (``Image.reduce``) first, then the filter over the last ``>= reducing_gap`` times. It
changes pixels (agreement measured by deployments/resnet_npu/agreement.py, docs/tuning.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from triton_helpers.errors import InputError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# EfficientNet-Lite (TensorFlow official): MEAN_RGB = 127.0, STDDEV_RGB = 128.0 on 0..255.
EFFICIENTNET_LITE_MEAN = (127.0 / 255.0,) * 3
EFFICIENTNET_LITE_STD = (128.0 / 255.0,) * 3
TF_CROP_PADDING = 32

_INTERPOLATIONS = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
}
MODES = ("resize_crop", "crop_resize")


@dataclass(frozen=True)
class ImageTransform:
    """An eval transform: PIL RGB image in, float32 ``(3, crop, crop)`` array out."""

    mode: str = "resize_crop"
    resize: int = 256
    crop: int = 224
    interpolation: str = "bilinear"
    mean: tuple = IMAGENET_MEAN
    std: tuple = IMAGENET_STD
    reducing_gap: float | None = None

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"transform mode must be one of {MODES}, got {self.mode!r}")
        if self.interpolation not in _INTERPOLATIONS:
            raise ValueError(f"interpolation must be one of {sorted(_INTERPOLATIONS)}, got {self.interpolation!r}")
        if len(self.mean) != 3 or len(self.std) != 3:
            raise ValueError("mean and std need 3 values (R, G, B)")
        if self.crop <= 0 or (self.mode == "resize_crop" and self.resize < self.crop):
            raise ValueError(f"bad sizes: resize={self.resize} crop={self.crop}")
        if self.reducing_gap is not None and not self.reducing_gap >= 1.0:
            raise ValueError(f"reducing_gap must be a number >= 1.0 (Pillow's rule), got {self.reducing_gap!r}")

    @classmethod
    def torchvision_imagenet(cls, resize: int = 256, crop: int = 224) -> ImageTransform:
        """torchvision's ImageNet eval transform (ResNet & co.)."""
        return cls("resize_crop", resize, crop, "bilinear", IMAGENET_MEAN, IMAGENET_STD)

    @classmethod
    def efficientnet_lite(cls, crop: int = 224) -> ImageTransform:
        """The TensorFlow EfficientNet-Lite eval transform (centre crop then bicubic resize)."""
        return cls(
            "crop_resize", crop + TF_CROP_PADDING, crop, "bicubic", EFFICIENTNET_LITE_MEAN, EFFICIENTNET_LITE_STD
        )

    @classmethod
    def from_parameters(cls, parameters: Mapping[str, str]) -> ImageTransform:
        """Build from string key/values (a Triton config's ``parameters``).

        Keys: ``mode``, ``resize``, ``crop``, ``interpolation``, ``mean``, ``std`` (comma
        separated floats), ``reducing_gap`` (a float >= 1, or ``none``/empty: the exact resize);
        any missing key keeps the torchvision ImageNet default.
        """

        def floats(text: str) -> tuple:
            return tuple(float(v) for v in text.split(","))

        kwargs = {}
        if "mode" in parameters:
            kwargs["mode"] = parameters["mode"].strip()
        for key in ("resize", "crop"):
            if key in parameters:
                kwargs[key] = int(parameters[key])
        if "interpolation" in parameters:
            kwargs["interpolation"] = parameters["interpolation"].strip().lower()
        for key in ("mean", "std"):
            if key in parameters:
                kwargs[key] = floats(parameters[key])
        gap = parameters.get("reducing_gap", "").strip().lower()
        if gap not in ("", "none"):
            try:
                kwargs["reducing_gap"] = float(gap)
            except ValueError:
                raise ValueError(f"reducing_gap must be a number >= 1.0 or 'none', got {gap!r}") from None
        return cls(**kwargs)

    # -- steps ---------------------------------------------------------------------------
    def resize_crop_pil(self, image: Image.Image) -> Image.Image:
        """The geometric part: the PIL image that ``ToTensor`` would see."""
        resample = _INTERPOLATIONS[self.interpolation]
        width, height = image.size
        if self.mode == "resize_crop":
            image = image.resize(
                shorter_side_size(width, height, self.resize), resample, reducing_gap=self.reducing_gap
            )
            return center_crop(image, self.crop)
        side = int(self.crop / (self.crop + TF_CROP_PADDING) * min(width, height))
        side = max(side, 1)
        top = (height - side + 1) // 2
        left = (width - side + 1) // 2
        image = image.crop((left, top, left + side, top + side))
        return image.resize((self.crop, self.crop), resample, reducing_gap=self.reducing_gap)

    def min_source_side(self) -> int:
        """The shorter side the geometric step resamples from at the least (a reduced decode keeps it)."""
        if self.mode == "resize_crop":
            return self.resize
        return self.crop + TF_CROP_PADDING

    def normalize(self, rgb: np.ndarray) -> np.ndarray:
        """``(H, W, 3)`` uint8 -> ``(3, H, W)`` float32, as ``ToTensor`` + ``Normalize``."""
        chw = np.ascontiguousarray(rgb.transpose(2, 0, 1)).astype(np.float32) / np.float32(255)
        mean = np.asarray(self.mean, dtype=np.float32).reshape(3, 1, 1)
        std = np.asarray(self.std, dtype=np.float32).reshape(3, 1, 1)
        return (chw - mean) / std

    def pixels(self, image: Image.Image) -> np.ndarray:
        """The geometric step as ``(crop, crop, 3)`` RGB ``uint8``: what a graph that normalises itself takes."""
        if image.mode != "RGB":
            image = image.convert("RGB")
        return np.asarray(self.resize_crop_pil(image))

    def __call__(self, image: Image.Image) -> np.ndarray:
        return self.normalize(self.pixels(image))


def shorter_side_size(width: int, height: int, size: int) -> tuple[int, int]:
    """``(width, height)`` after torchvision ``Resize(size)``: shorter side = size, longer truncated."""
    short, long = (width, height) if width <= height else (height, width)
    if short == size:
        return width, height
    new_short, new_long = size, int(size * long / short)
    return (new_short, new_long) if width <= height else (new_long, new_short)


def center_crop(image: Image.Image, size: int) -> Image.Image:
    """torchvision ``CenterCrop(size)`` on a PIL image at least ``size`` on each side."""
    width, height = image.size
    if width < size or height < size:
        raise ValueError(f"image {width}x{height} is smaller than the crop {size}")
    top = int(round((height - size) / 2.0))
    left = int(round((width - size) / 2.0))
    return image.crop((left, top, left + size, top + size))


# -- postprocessing ----------------------------------------------------------------------
def softmax(logits: np.ndarray) -> np.ndarray:
    """Softmax over the last axis in float32 (stable: max subtracted)."""
    x = np.asarray(logits, dtype=np.float32)
    x = x - x.max(axis=-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)


def top_k(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(class_ids, probabilities)`` of the ``k`` best classes of a 1-D logits vector.

    Ties keep the lower class id first (stable sort), as ``torch.topk`` does in practice.
    """
    logits = np.asarray(logits, dtype=np.float32).reshape(-1)
    if not 1 <= k <= logits.size:
        raise InputError(f"top_k must be between 1 and {logits.size}, got {k}")
    probs = softmax(logits)
    ids = np.argsort(-logits, kind="stable")[:k]
    return ids.astype(np.int64), probs[ids]


def parse_top_k(value, default: int = 5, maximum: int = 1000) -> int:
    """A request's ``top_k`` parameter (int or numeric string) checked against ``1..maximum``."""
    if value is None:
        return default
    if isinstance(value, bool):
        raise InputError(f"parameter top_k must be an integer, got {value!r}")
    try:
        k = int(value)
    except (TypeError, ValueError):
        raise InputError(f"parameter top_k must be an integer, got {value!r}") from None
    if not 1 <= k <= maximum:
        raise InputError(f"parameter top_k must be between 1 and {maximum}, got {k}")
    return k


# -- class names -------------------------------------------------------------------------
def load_class_names(path: str | Path) -> list[str]:
    """Class names from a text file, one per line, in class-id order (blank lines ignored)."""
    names = [line.strip() for line in Path(path).read_text(encoding="utf-8").splitlines()]
    names = [n for n in names if n]
    if not names:
        raise ValueError(f"{path}: no class names")
    return names


def write_class_names(path: str | Path, names: Iterable[str]) -> None:
    """Write class names one per line (the format ``load_class_names`` reads)."""
    Path(path).write_text("".join(f"{n}\n" for n in names), encoding="utf-8")


def imagenet_class_names() -> list[str]:
    """The 1000 ImageNet-1k class names in torchvision's order (needs torchvision)."""
    from torchvision.models._meta import _IMAGENET_CATEGORIES

    return list(_IMAGENET_CATEGORIES)


def labels_for(ids: Sequence[int], names: Sequence[str]) -> list[str]:
    """Names for class ids; an id outside the list becomes ``class_<id>``."""
    return [names[i] if 0 <= i < len(names) else f"class_{i}" for i in ids]


# -- Triton Python-backend models (pb_utils is given by the subclass in each model.py) ---
def config_parameters(model_config: dict) -> dict[str, str]:
    """A Triton model config's ``parameters`` as a plain ``{key: string_value}`` dict."""
    return {k: v.get("string_value", "") for k, v in model_config.get("parameters", {}).items()}


def request_parameters(request) -> dict:
    """A Python-backend request's parameters (a JSON string in Triton 2.51) as a dict."""
    import json

    raw = request.parameters() if hasattr(request, "parameters") else "{}"
    return json.loads(raw) if isinstance(raw, str) and raw else (raw or {})


DECODE_MODES = ("full", "reduced")


def decode_min_side(mode: str | None, transform: ImageTransform) -> int | None:
    """``open_image``'s ``min_shorter_side`` for a config's ``decode`` parameter.

    ``full`` (default): every pixel decoded, equal to the reference pipeline. ``reduced``:
    JPEGs at least twice the size the transform resamples from are decoded at 1/2, 1/4 or 1/8
    scale (libjpeg-turbo DCT scaling), never below ``transform.min_source_side()``.
    """
    mode = (mode or "full").strip().lower()
    if mode not in DECODE_MODES:
        raise ValueError(f"decode must be one of {DECODE_MODES}, got {mode!r}")
    return transform.min_source_side() if mode == "reduced" else None


#: Fallback for a PreprocessModel built without initialize() (tests).
DEFAULT_REQUEST_BYTES = 64 * 1024 * 1024


class PreprocessModel:
    """Encoded image bytes in, one image batch out, in the form the config's output declares.

    - output dims ``[3, crop, crop]`` (float): normalised channel-first, as the reference's tensor;
    - output ``TYPE_UINT8`` dims ``[crop, crop, 3]``: the resized RGB pixels only, for a model whose
      graph casts, normalises and transposes itself (export.py folds that in), so no float copy
      is made here and a quarter of the bytes cross to the next step.

    The transform comes from the config's ``parameters`` (see ``ImageTransform.from_parameters``)
    plus ``max_pixels`` / ``max_bytes`` for the decoder. A bad image fails its own request only.
    """

    pb_utils = None  # the model.py subclass sets ``pb_utils = triton_python_backend_utils``
    raw_pixels = False

    def initialize(self, args):
        import json

        from triton_helpers.errors import output_dtypes
        from triton_helpers.images import DEFAULT_MAX_BYTES, DEFAULT_MAX_PIXELS

        config = json.loads(args["model_config"])
        params = config_parameters(config)
        self.transform = ImageTransform.from_parameters(params)
        self.limits = {
            "max_pixels": int(params.get("max_pixels") or DEFAULT_MAX_PIXELS),
            "max_bytes": int(params.get("max_bytes") or DEFAULT_MAX_BYTES),
        }
        from triton_helpers.errors import DEFAULT_MAX_REQUEST_BYTES

        self.max_request_bytes = int(params.get("max_request_bytes") or DEFAULT_MAX_REQUEST_BYTES)
        self.limits["min_shorter_side"] = decode_min_side(params.get("decode"), self.transform)
        self.input_name = config["input"][0]["name"]
        self.output_name = config["output"][0]["name"]
        self.dtype = output_dtypes(self.pb_utils, config)[self.output_name]
        dims = [int(d) for d in config["output"][0]["dims"]]
        crop = self.transform.crop
        self.raw_pixels = np.dtype(self.dtype) == np.uint8
        want = [crop, crop, 3] if self.raw_pixels else [3, crop, crop]
        if dims != want:
            layout = "uint8 (crop, crop, 3)" if self.raw_pixels else "(3, crop, crop)"
            raise ValueError(
                f"output dims {dims} do not match the transform's crop {crop}: a {layout} output needs {want}"
            )

    def preprocess(self, items: list[bytes]) -> np.ndarray:
        """Decode and transform every image of one request (an error names the bad item)."""
        from triton_helpers.images import open_image

        convert = self.transform.pixels if self.raw_pixels else self.transform
        batch = []
        for index, data in enumerate(items):
            try:
                image = open_image(data, **self.limits)
                batch.append(convert(image))
            except InputError as exc:
                where = f"{self.input_name}[{index}]: " if len(items) > 1 else ""
                raise InputError(f"{where}{exc}") from None
        return np.stack(batch).astype(self.dtype, copy=False)

    def _handle(self, request):
        from triton_helpers.errors import single_bytes_items

        pb = self.pb_utils
        tensor = pb.get_input_tensor_by_name(request, self.input_name)
        if tensor is None:
            raise InputError(f"input '{self.input_name}' is missing")
        from triton_helpers.errors import check_request_bytes

        items = single_bytes_items(tensor.as_numpy(), self.input_name)
        check_request_bytes(items, self.input_name, getattr(self, "max_request_bytes", DEFAULT_REQUEST_BYTES))
        images = self.preprocess(items)
        return pb.InferenceResponse(output_tensors=[pb.Tensor(self.output_name, images)])

    def execute(self, requests):
        from triton_helpers.errors import respond_each

        return respond_each(self.pb_utils, requests, self._handle)


class TopKPostprocessModel:
    """Logits ``(n, classes)`` in; the ``top_k`` best ``LABELS`` / ``PROBABILITIES`` / ``CLASS_IDS`` out.

    ``top_k`` is a request parameter (default from the config's ``default_top_k``, else 5).
    Class names come from the file named by the config's ``class_names`` parameter, relative
    to the model directory.
    """

    pb_utils = None

    def initialize(self, args):
        import json
        import os

        from triton_helpers.errors import output_dtypes

        config = json.loads(args["model_config"])
        params = config_parameters(config)
        self.default_top_k = int(params.get("default_top_k") or 5)
        names_file = params.get("class_names") or "imagenet_classes.txt"
        self.names = load_class_names(os.path.join(args["model_repository"], names_file))
        self.input_name = config["input"][0]["name"]
        self.dtypes = output_dtypes(self.pb_utils, config)
        for needed in ("LABELS", "PROBABILITIES", "CLASS_IDS"):
            if needed not in self.dtypes:
                raise ValueError(f"config has no output {needed}")

    def postprocess(self, logits: np.ndarray, k: int) -> dict[str, np.ndarray]:
        """``{LABELS, PROBABILITIES, CLASS_IDS}`` arrays of shape ``(n, k)``."""
        logits = np.asarray(logits, dtype=np.float32)
        if logits.ndim != 2:
            raise InputError(f"input '{self.input_name}' must be (batch, classes), got shape {logits.shape}")
        ids = np.empty((len(logits), k), dtype=np.int64)
        probs = np.empty((len(logits), k), dtype=np.float32)
        for row, vector in enumerate(logits):
            ids[row], probs[row] = top_k(vector, k)
        labels = np.array([[n.encode("utf-8") for n in labels_for(r, self.names)] for r in ids], dtype=object)
        return {
            "LABELS": labels.astype(self.dtypes["LABELS"]),
            "PROBABILITIES": probs.astype(self.dtypes["PROBABILITIES"]),
            "CLASS_IDS": ids.astype(self.dtypes["CLASS_IDS"]),
        }

    def _handle(self, request):
        pb = self.pb_utils
        tensor = pb.get_input_tensor_by_name(request, self.input_name)
        if tensor is None:
            raise InputError(f"input '{self.input_name}' is missing")
        logits = tensor.as_numpy()
        k = parse_top_k(
            request_parameters(request).get("top_k"),
            self.default_top_k,
            maximum=min(logits.shape[-1], len(self.names)) if logits.ndim else 1,
        )
        outputs = self.postprocess(logits, k)
        return pb.InferenceResponse(output_tensors=[pb.Tensor(n, a) for n, a in outputs.items()])

    def execute(self, requests):
        from triton_helpers.errors import respond_each

        return respond_each(self.pb_utils, requests, self._handle)
