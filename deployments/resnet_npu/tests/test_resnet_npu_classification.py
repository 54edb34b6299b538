"""Unit tests of resnet_npu's processing (its package and its Python models' model.py) against
torchvision / torch themselves, and of its NPU configs (no server)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from resnet_npu_processing import classification as cls

from harness.testing.hostile_images import png_header_bomb
from harness.testing.python_models import Request, load_model, model_config
from triton_helpers.errors import InputError

REPOSITORY = Path(__file__).resolve().parents[1] / "model_repository"

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


def test_top_k_bounds():
    with pytest.raises(InputError):
        cls.top_k(np.zeros(10, np.float32), 0)
    with pytest.raises(InputError):
        cls.top_k(np.zeros(10, np.float32), 11)


def test_class_names_file_is_torchvisions_imagenet_order():
    from torchvision.models._meta import _IMAGENET_CATEGORIES

    names = (REPOSITORY / "classification_postprocess" / "imagenet_classes.txt").read_text(encoding="utf-8")
    assert names.splitlines() == list(_IMAGENET_CATEGORIES) and names.splitlines()[654] == "minibus"


# -- the models' model.py, loaded as the stub loads them, with a stand-in for pb_utils -----
def _error(response) -> str:
    return response.error().message() if response.has_error() else ""


def _jpeg(width=320, height=240) -> bytes:
    buffer = io.BytesIO()
    _image(width, height).save(buffer, format="JPEG")
    return buffer.getvalue()


def preprocess_model(output: tuple, parameters: dict, model: str = "resnet50_preprocess"):
    """``model``'s TritonPythonModel initialised on IMAGE_BYTES in and ``output`` = (name, type, dims) out."""
    instance = load_model(REPOSITORY / model / "1" / "model.py").TritonPythonModel()
    config = model_config([("IMAGE_BYTES", "TYPE_STRING", [1])], [output], parameters)
    instance.initialize({"model_config": json.dumps(config)})
    return instance


def test_both_preprocess_models_run_the_same_code():
    """Their configs choose the transform; below the docstring the two model.py files are one."""

    def code(model):
        text = (REPOSITORY / model / "1" / "model.py").read_text()
        return text[text.index('"""', 3) + 3 :]

    assert code("resnet50_preprocess") == code("efficientnet_lite0_preprocess")


def test_preprocess_model_answers_each_request_and_names_bad_items():
    model = preprocess_model(("PIXELS", "TYPE_FP32", [3, 224, 224]), {"mode": "resize_crop", "max_pixels": "1000000"})
    good = _jpeg()
    requests = [
        Request({"IMAGE_BYTES": np.array([[good], [good]], dtype=object)}),
        Request({"IMAGE_BYTES": np.array([[good], [b"junk"]], dtype=object)}),
        Request({"IMAGE_BYTES": np.array([[png_header_bomb()]], dtype=object)}),
        Request({"IMAGE_BYTES": np.array([[_jpeg(1200, 1000)]], dtype=object)}),
        Request({"IMAGE_BYTES": np.array([[b""]], dtype=object)}),
        Request({}),
    ]
    responses = model.execute(requests)
    assert len(responses) == len(requests)
    assert not responses[0].has_error()
    errors = [_error(r) for r in responses]
    assert all(r.error().code() == r.error().INVALID_ARG for r in responses[1:]), "bad input is INVALID_ARG (400)"
    image = responses[0].output("PIXELS")
    assert image.shape == (2, 3, 224, 224) and image.dtype == np.float32
    expected = cls.ImageTransform.torchvision_imagenet()(Image.open(io.BytesIO(good)).convert("RGB"))
    np.testing.assert_array_equal(image[1], expected)
    assert "IMAGE_BYTES[1]" in errors[1] and "cannot decode" in errors[1]
    assert "over the limit" in errors[2]  # PIL's own bomb error becomes an input error
    assert "over the limit" in errors[3] and "max_pixels" in errors[3]  # 1.2 MP > max_pixels from the config
    assert "empty" in errors[4]
    assert "missing" in errors[5]


def test_preprocess_model_checks_output_dims_against_crop():
    with pytest.raises(ValueError, match="crop"):
        preprocess_model(("PIXELS", "TYPE_FP32", [3, 256, 256]), {})


def test_preprocess_model_uint8_output_is_the_reference_tensor_before_normalisation():
    """A TYPE_UINT8 (crop, crop, 3) output: the resized pixels; normalising them channel-first (what
    the folded graph does) gives the reference tensor bit for bit."""
    model = preprocess_model(
        ("PIXELS", "TYPE_UINT8", [224, 224, 3]),
        {"mode": "crop_resize", "crop": "224", "interpolation": "bicubic"},
        model="efficientnet_lite0_preprocess",
    )
    data = [_jpeg(640, 480), _jpeg(200, 300)]
    [response] = model.execute([Request({"IMAGE_BYTES": np.array([[d] for d in data], dtype=object)})])
    pixels = response.output("PIXELS")
    assert pixels.shape == (2, 224, 224, 3) and pixels.dtype == np.uint8
    transform = cls.ImageTransform.efficientnet_lite()
    for row, item in enumerate(data):
        image = Image.open(io.BytesIO(item)).convert("RGB")
        np.testing.assert_array_equal(transform.normalize(pixels[row]), transform(image))


def test_preprocess_model_uint8_output_needs_channels_last():
    with pytest.raises(ValueError, match=r"\[224, 224, 3\]"):
        preprocess_model(("PIXELS", "TYPE_UINT8", [3, 224, 224]), {})


def postprocess_model(tmp_path, classes: int = 10, default_top_k: int = 3):
    (tmp_path / "names.txt").write_text("".join(f"c{i}\n" for i in range(classes)))
    instance = load_model(REPOSITORY / "classification_postprocess" / "1" / "model.py").TritonPythonModel()
    config = model_config(
        [("LOGITS", "TYPE_FP32", [classes])],
        [("LABELS", "TYPE_STRING", [-1]), ("PROBABILITIES", "TYPE_FP32", [-1]), ("CLASS_IDS", "TYPE_INT64", [-1])],
        {"class_names": "names.txt", "default_top_k": default_top_k},
    )
    instance.initialize({"model_repository": str(tmp_path), "model_config": json.dumps(config)})
    return instance


def test_postprocess_model_top_k_per_request(tmp_path):
    model = postprocess_model(tmp_path)
    logits = np.tile(np.arange(10, dtype=np.float32), (2, 1))
    responses = model.execute(
        [
            Request({"LOGITS": logits}),
            Request({"LOGITS": logits[:1]}, {"top_k": 1}),
            Request({"LOGITS": logits[:1]}, {"top_k": 11}),
            Request({"LOGITS": logits[:1]}, {"top_k": "2"}),
        ]
    )
    assert responses[0].output("CLASS_IDS").tolist() == [[9, 8, 7]] * 2
    assert responses[0].output("LABELS").tolist() == [[b"c9", b"c8", b"c7"]] * 2
    np.testing.assert_allclose(responses[0].output("PROBABILITIES").sum(axis=1) < 1, True)
    assert responses[1].output("CLASS_IDS").tolist() == [[9]]
    assert "top_k" in _error(responses[2]) and responses[2].error().code() == responses[2].error().INVALID_ARG
    assert responses[3].output("CLASS_IDS").tolist() == [[9, 8]]


@pytest.mark.parametrize("bad", [0, -1, 11, "x", True, "2.5", [3]])
def test_postprocess_model_refuses_a_bad_top_k(tmp_path, bad):
    model = postprocess_model(tmp_path)
    good = Request({"LOGITS": np.zeros((1, 10), np.float32)})
    responses = model.execute([good, Request({"LOGITS": np.zeros((1, 10), np.float32)}, {"top_k": bad}), good])
    assert not responses[0].has_error() and not responses[2].has_error(), "the rest of the batch is answered"
    assert "top_k" in _error(responses[1])


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
            assert params.pop("EXECUTION_ENV_PATH") == "$$TRITON_MODEL_DIRECTORY/../../envs/npu.tar.gz", (
                "the NPU configs use the env `make pack-env DEPLOYMENT=resnet_npu TARGET=npu` packs (Python 3.10)"
            )
            # The model's own parameters (transform, limits, class names) may not drift; batching,
            # instances and the env may differ (gate_* keys are the front gate's, not the model's).
            cpu_params = {k: v.string_value for k, v in cpu.parameters.items() if not k.startswith("gate_")}
            params = {k: v for k, v in params.items() if not k.startswith("gate_")}
            assert params == cpu_params, f"{folder.name}: configs/npu.pbtxt parameters differ from config.pbtxt"


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


def test_checks_judge_a_reference_at_its_own_scale(monkeypatch):
    """A reference of tiny logits (seeded weights) is judged at its own scale, top-5 ties within the
    tolerance in either order; all-zero or image-blind logits are refused, with the reason and the
    command that regenerates the fixtures."""
    from harness.deployments import get_deployment

    checks = get_deployment(REPOSITORY.parent.name, REPOSITORY.parents[1]).checks_module
    logits = {f"m/{i}.jpg": np.random.default_rng(i).normal(size=10).astype(np.float32) * 1e-7 for i in range(3)}
    monkeypatch.setattr(checks, "expected_logits", lambda: logits)
    checks.assert_reference_not_degenerate("m")
    assert checks.logit_scale("m") == max(float(np.abs(v).max()) for v in logits.values())
    refresh = f"python -m harness refresh {REPOSITORY.parent.name}"
    monkeypatch.setattr(checks, "expected_logits", lambda: {k: np.zeros(10, np.float32) for k in logits})
    with pytest.raises(AssertionError, match=f"every reference logit is 0.*{refresh}"):
        checks.assert_reference_not_degenerate("m")
    monkeypatch.setattr(checks, "expected_logits", lambda: {k: logits["m/0.jpg"] for k in logits})
    with pytest.raises(AssertionError, match=f"one and the same logits.*{refresh}"):
        checks.assert_reference_not_degenerate("m")
