"""Unit tests of triton_helpers.classification against torchvision / torch themselves (no server)."""

from __future__ import annotations

import io
import json
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from triton_helpers import classification as cls
from triton_helpers.errors import InputError

torch = pytest.importorskip("torch")
T = pytest.importorskip("torchvision.transforms")

SIZES = [(300, 200), (199, 640), (256, 256), (224, 300), (96, 80), (1, 900), (1080, 810), (257, 256)]


def _image(width, height, seed=0, mode="RGB") -> Image.Image:
    rng = np.random.default_rng(seed)
    image = Image.fromarray(rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8))
    return image.convert(mode)


@pytest.mark.parametrize("size", SIZES)
def test_resnet_transform_is_torchvision_exact(size):
    ref = T.Compose(
        [T.Resize(256), T.CenterCrop(224), T.ToTensor(), T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]
    )
    image = _image(*size)
    ours = cls.ImageTransform.torchvision_imagenet()(image)
    assert ours.shape == (3, 224, 224) and ours.dtype == np.float32
    np.testing.assert_array_equal(ours, ref(image).numpy())


@pytest.mark.parametrize("size", [s for s in SIZES if min(s) >= 2])
def test_efficientnet_lite_transform_matches_torchvision_composition(size):
    def tf_crop(image):
        w, h = image.size
        side = int(224 / 256 * min(w, h))
        top, left = (h - side + 1) // 2, (w - side + 1) // 2
        return image.crop((left, top, left + side, top + side))

    ref = T.Compose(
        [
            T.Lambda(tf_crop),
            T.Resize((224, 224), interpolation=T.InterpolationMode.BICUBIC),
            T.ToTensor(),
            T.Normalize([127 / 255] * 3, [128 / 255] * 3),
        ]
    )
    image = _image(*size, seed=1)
    np.testing.assert_array_equal(cls.ImageTransform.efficientnet_lite()(image), ref(image).numpy())


def test_transform_converts_gray_and_rgba_like_convert_rgb():
    transform = cls.ImageTransform.torchvision_imagenet()
    for mode in ("L", "RGBA", "P"):
        image = _image(120, 90, mode=mode)
        np.testing.assert_array_equal(transform(image), transform(image.convert("RGB")))


def test_shorter_side_size_truncates_like_torchvision():
    assert cls.shorter_side_size(300, 200, 256) == (384, 256)
    assert cls.shorter_side_size(199, 640, 256) == (256, int(256 * 640 / 199))
    assert cls.shorter_side_size(256, 900, 256) == (256, 900)


def test_from_parameters_and_validation():
    t = cls.ImageTransform.from_parameters(
        {
            "mode": "crop_resize",
            "crop": "224",
            "interpolation": "BICUBIC",
            "mean": "0.5,0.5,0.5",
            "std": "0.5, 0.5, 0.5",
        }
    )
    assert (t.mode, t.crop, t.interpolation, t.mean, t.std) == ("crop_resize", 224, "bicubic", (0.5,) * 3, (0.5,) * 3)
    assert cls.ImageTransform.from_parameters({}) == cls.ImageTransform.torchvision_imagenet()
    for bad in ({"mode": "stretch"}, {"interpolation": "area"}, {"mean": "0.5,0.5"}, {"resize": "100"}):
        with pytest.raises(ValueError):
            cls.ImageTransform.from_parameters(bad)


def test_top_k_matches_torch():
    logits = np.random.default_rng(2).normal(size=1000).astype(np.float32) * 4
    ids, probs = cls.top_k(logits, 5)
    ref = torch.topk(torch.from_numpy(logits), 5)
    assert ids.tolist() == ref.indices.tolist()
    np.testing.assert_allclose(probs, torch.softmax(torch.from_numpy(logits), 0)[ref.indices].numpy(), rtol=1e-5)
    assert cls.softmax(np.array([1000.0, 0.0], np.float32)).tolist() == [1.0, 0.0]  # no overflow


def test_top_k_and_parameter_bounds():
    with pytest.raises(InputError):
        cls.top_k(np.zeros(10, np.float32), 11)
    assert cls.parse_top_k(None) == 5 and cls.parse_top_k("3") == 3 and cls.parse_top_k(7, maximum=10) == 7
    for bad in (0, -1, 1001, "x", True, 2.5j):
        with pytest.raises(InputError):
            cls.parse_top_k(bad)


def test_class_names_round_trip(tmp_path):
    path = tmp_path / "names.txt"
    cls.write_class_names(path, ["tench", "goldfish", "great white shark"])
    assert cls.load_class_names(path) == ["tench", "goldfish", "great white shark"]
    assert cls.labels_for([1, 5], ["a", "b"]) == ["b", "class_5"]
    names = cls.imagenet_class_names()
    assert len(names) == 1000 and names[654] == "minibus"


# -- the Triton model classes, with a stand-in for triton_python_backend_utils ----------
class _Tensor:
    def __init__(self, name, array):
        self._name, self._array = name, np.asarray(array)

    def name(self):
        return self._name

    def as_numpy(self):
        return self._array


class _Response:
    def __init__(self, output_tensors=None, error=None):
        self.output_tensors, self.error = output_tensors or [], error

    def output(self, name):
        return next(t.as_numpy() for t in self.output_tensors if t.name() == name)


class _Request:
    def __init__(self, tensors, parameters=None):
        self.tensors, self._parameters = tensors, json.dumps(parameters or {})

    def parameters(self):
        return self._parameters


class FakePbUtils:
    Tensor = _Tensor
    InferenceResponse = _Response
    TritonError = staticmethod(lambda message: message)

    @staticmethod
    def get_input_tensor_by_name(request, name):
        return _Tensor(name, request.tensors[name]) if name in request.tensors else None

    @staticmethod
    def triton_string_to_numpy(name):
        return {"TYPE_FP32": np.float32, "TYPE_INT64": np.int64, "TYPE_STRING": np.object_, "TYPE_UINT8": np.uint8}[
            name
        ]


def _config(inputs, outputs, parameters):
    return json.dumps(
        {
            "input": [{"name": n, "data_type": t, "dims": d} for n, t, d in inputs],
            "output": [{"name": n, "data_type": t, "dims": d} for n, t, d in outputs],
            "parameters": {k: {"string_value": v} for k, v in parameters.items()},
        }
    )


def _png_bomb(width=50_000, height=50_000) -> bytes:
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")
    )


def _jpeg(width=320, height=240) -> bytes:
    buffer = io.BytesIO()
    _image(width, height).save(buffer, format="JPEG")
    return buffer.getvalue()


def preprocess_model(output: tuple, parameters: dict):
    """A ``PreprocessModel`` initialised on IMAGE_BYTES in and ``output`` = (name, type, dims) out."""

    class Model(cls.PreprocessModel):
        pb_utils = FakePbUtils

    model = Model()
    model.initialize({"model_config": _config([("IMAGE_BYTES", "TYPE_STRING", [1])], [output], parameters)})
    return model


def test_preprocess_model_answers_each_request_and_names_bad_items():
    model = preprocess_model(("IMAGE", "TYPE_FP32", [3, 224, 224]), {"mode": "resize_crop", "max_pixels": "1000000"})
    good = _jpeg()
    requests = [
        _Request({"IMAGE_BYTES": np.array([[good], [good]], dtype=object)}),
        _Request({"IMAGE_BYTES": np.array([[good], [b"junk"]], dtype=object)}),
        _Request({"IMAGE_BYTES": np.array([[_png_bomb()]], dtype=object)}),
        _Request({"IMAGE_BYTES": np.array([[_jpeg(1200, 1000)]], dtype=object)}),
        _Request({"IMAGE_BYTES": np.array([[b""]], dtype=object)}),
        _Request({}),
    ]
    responses = model.execute(requests)
    assert len(responses) == len(requests)
    image = responses[0].output("IMAGE")
    assert image.shape == (2, 3, 224, 224) and image.dtype == np.float32
    expected = cls.ImageTransform.torchvision_imagenet()(Image.open(io.BytesIO(good)).convert("RGB"))
    np.testing.assert_array_equal(image[1], expected)
    assert "IMAGE_BYTES[1]" in responses[1].error and "cannot decode" in responses[1].error
    assert "over the limit" in responses[2].error  # PIL's own bomb error becomes an input error
    assert "over the limit" in responses[3].error  # 1.2 MP > max_pixels from the config
    assert "empty" in responses[4].error
    assert "missing" in responses[5].error


def test_preprocess_model_checks_output_dims_against_crop():
    with pytest.raises(ValueError, match="crop"):
        preprocess_model(("IMAGE", "TYPE_FP32", [3, 256, 256]), {})


def test_preprocess_model_uint8_output_is_the_reference_tensor_before_normalisation():
    """A TYPE_UINT8 (crop, crop, 3) output: the resized pixels; normalising them channel-first (what
    the folded graph does) gives the reference tensor bit for bit."""
    model = preprocess_model(
        ("PIXELS", "TYPE_UINT8", [224, 224, 3]), {"mode": "crop_resize", "crop": "224", "interpolation": "bicubic"}
    )
    data = [_jpeg(640, 480), _jpeg(200, 300)]
    [response] = model.execute([_Request({"IMAGE_BYTES": np.array([[d] for d in data], dtype=object)})])
    pixels = response.output("PIXELS")
    assert pixels.shape == (2, 224, 224, 3) and pixels.dtype == np.uint8
    transform = cls.ImageTransform.efficientnet_lite()
    for row, item in enumerate(data):
        image = Image.open(io.BytesIO(item)).convert("RGB")
        np.testing.assert_array_equal(transform.normalize(pixels[row]), transform(image))


def test_preprocess_model_uint8_output_needs_channels_last():
    with pytest.raises(ValueError, match=r"\[224, 224, 3\]"):
        preprocess_model(("PIXELS", "TYPE_UINT8", [3, 224, 224]), {})


def test_postprocess_model_top_k_per_request(tmp_path):
    class Model(cls.TopKPostprocessModel):
        pb_utils = FakePbUtils

    cls.write_class_names(tmp_path / "names.txt", [f"c{i}" for i in range(10)])
    model = Model()
    model.initialize(
        {
            "model_repository": str(tmp_path),
            "model_config": _config(
                [("LOGITS", "TYPE_FP32", [10])],
                [
                    ("LABELS", "TYPE_STRING", [-1]),
                    ("PROBABILITIES", "TYPE_FP32", [-1]),
                    ("CLASS_IDS", "TYPE_INT64", [-1]),
                ],
                {"class_names": "names.txt", "default_top_k": "3"},
            ),
        }
    )
    logits = np.tile(np.arange(10, dtype=np.float32), (2, 1))
    responses = model.execute(
        [
            _Request({"LOGITS": logits}),
            _Request({"LOGITS": logits[:1]}, {"top_k": 1}),
            _Request({"LOGITS": logits[:1]}, {"top_k": 11}),
        ]
    )
    assert responses[0].output("CLASS_IDS").tolist() == [[9, 8, 7]] * 2
    assert responses[0].output("LABELS").tolist() == [[b"c9", b"c8", b"c7"]] * 2
    np.testing.assert_allclose(responses[0].output("PROBABILITIES").sum(axis=1) < 1, True)
    assert responses[1].output("CLASS_IDS").tolist() == [[9]]
    assert "top_k" in responses[2].error


# -- the resnet_npu deployment that uses these helpers: its NPU variant and launch spec ---
def _resnet_npu():
    from harness.deployments import get_deployment

    return get_deployment("resnet_npu")


def _parse_config(path):
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def test_resnet_npu_every_model_has_a_consistent_npu_config():
    repository = _resnet_npu().model_repository
    for folder in sorted(p for p in repository.iterdir() if (p / "config.pbtxt").exists()):
        cpu = _parse_config(folder / "config.pbtxt")
        npu_path = folder / "configs" / "npu.pbtxt"
        if cpu.platform == "ensemble":
            assert not npu_path.exists(), f"{folder.name}: an ensemble needs no NPU variant"
            continue
        assert npu_path.exists(), f"{folder.name}: no configs/npu.pbtxt (the Ascend image would load config.pbtxt)"
        npu = _parse_config(npu_path)
        assert npu.name == cpu.name == folder.name
        assert list(npu.input) == list(cpu.input) and list(npu.output) == list(cpu.output), folder.name
        assert npu.max_batch_size == cpu.max_batch_size, f"{folder.name}: the ensembles need the same batching"
        params = {k: v.string_value for k, v in npu.parameters.items()}
        if cpu.backend == "onnxruntime":
            assert npu.backend == "npu_ge", folder.name
            assert params["device_ids"].replace(",", "").isdigit() and params["static_model"] in ("0", "1")
        else:
            assert npu.backend == cpu.backend == "python", folder.name
            assert params["EXECUTION_ENV_PATH"] == "$$TRITON_MODEL_DIRECTORY/../../envs/npu.tar.gz", (
                "the NPU configs use the env `make pack-env DEPLOYMENT=resnet_npu TARGET=npu` packs (Python 3.10)"
            )


def test_resnet_npu_docker_launch_spec():
    from harness.serving.launchers.docker import DockerTritonServer

    deployment = _resnet_npu()
    assert "npu" in deployment.targets
    spec = DockerTritonServer(deployment.server_options("npu")).container_spec()
    command = spec["command"]
    assert "--model-config-name=npu" in command
    assert any(arg.startswith("--backend-config=npu_ge,ge.aicoreNum=") for arg in command)
    assert "--allow-grpc=false" in command and "8001/tcp" not in spec["ports"], "Ascend images have no gRPC"
    devices = {d.split(":")[0] for d in spec["devices"]}
    assert {"/dev/davinci0", "/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"} <= devices
    assert spec["volumes"][str(deployment.model_repository)] == {"bind": "/models", "mode": "ro"}
    npu_benchmarks = [b for b in deployment.benchmarks if "npu" in b.targets]
    assert npu_benchmarks and all(b.protocol == "http" for b in npu_benchmarks)
