"""The image classifier swap guide of docs/adding-a-deployment.md, run step by step."""

from __future__ import annotations

import json

import numpy as np
import pytest

from harness.tests.test_new import ALL, run_swap_guide


@pytest.mark.server
def test_doc_swap_of_the_image_classifier(tmp_path):
    """A seeded 10-class ResNet-18 at 160x160 with its own mean/std in a copy of the image
    classification deployment that keeps the ResNet-50 slot alone, renamed `parts`, `make refresh`,
    the copy's checks and tests; the copy's fixtures, configs and served files are the new model's."""
    if not ALL:
        pytest.skip("HARNESS_NEW_ALL=1 runs it (CI)")
    copy = run_swap_guide(tmp_path, "## Swapping the image classifier")
    labels = (copy / "my_classifier" / "labels.txt").read_text().split()
    expected = json.loads((copy / "fixtures" / "expected.json").read_text())
    assert list(expected["models"]) == ["parts"], "the copy still serves EfficientNet-Lite0"
    for image in expected["models"]["parts"]["images"].values():
        assert set(image["top5_labels"]) <= set(labels) and len(image["top5_ids"]) == 5, image
    with np.load(copy / "fixtures" / "logits.npz") as logits:
        assert {logits[key].shape for key in logits.files} == {(len(labels),)}
    repository = copy / "model_repository"
    assert 'string_value: "labels.txt"' in (repository / "classification_postprocess" / "config.pbtxt").read_text()
    assert sorted(p.name for p in repository.iterdir()) == [
        "classification_postprocess",
        "classify_parts",
        "parts",
        "parts_preprocess",
        "parts_uint8",
    ]
    preprocess = (repository / "parts_preprocess" / "config.pbtxt").read_text()
    assert 'key: "crop" value: { string_value: "160" }' in preprocess
    assert 'key: "std" value: { string_value: "0.25,0.25,0.25" }' in preprocess
    assert "dims: [ 160, 160, 3 ]" in (repository / "parts_uint8" / "config.pbtxt").read_text()
    readme = (copy / "README.md").read_text()
    assert "`my_classifier/model.onnx`" in readme and "ResNet-50" not in readme, "the README names the user's model"


def _export_module(tmp_path):
    """The guide's deployment's export.py, loaded with its model repository copied (configs only)."""
    import importlib.util
    import shutil

    from harness.tests.test_new import PROJECT_ROOT, swap_source

    folder = PROJECT_ROOT / "deployments" / swap_source("## Swapping the image classifier")
    spec = importlib.util.spec_from_file_location("swap_classifier_export", folder / "export.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    shutil.copytree(folder / "model_repository", tmp_path / "repo", ignore=shutil.ignore_patterns("1"))
    for model_py in (folder / "model_repository").glob("*/1/model.py"):
        (tmp_path / "repo" / model_py.parent.relative_to(folder / "model_repository")).mkdir()
    module.HERE, module.REPO, module.EXPORTED = tmp_path, tmp_path / "repo", tmp_path / "exported"
    return module


def test_export_serves_an_onnx_classifier_with_its_size_classes_and_transform(tmp_path):
    """export.py --onnx's steps on a 4-class 8x8 classifier: the file renamed IMAGE/LOGITS and
    stamped, every config (CPU and NPU) set to its size, classes, mean/std and labels; the folded
    graph normalises with them."""
    import onnx
    import onnxruntime
    from google.protobuf import text_format
    from onnx import TensorProto, helper, numpy_helper
    from tritonclient.grpc import model_config_pb2

    from harness import provenance

    export = _export_module(tmp_path)
    weights = numpy_helper.from_array(np.random.default_rng(0).normal(size=(192, 4)).astype(np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("Flatten", ["x"], ["flat"]), helper.make_node("MatMul", ["flat", "W"], ["scores"])],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 8, 8])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["n", 4])],
        [weights],
    )
    source, labels = tmp_path / "tiny.onnx", tmp_path / "tiny_labels.txt"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(source))
    labels.write_text("a\nb\nc\nd\n")
    export.import_onnx(source, labels, 8, 9, (0.5, 0.25, 0.125), (0.5, 0.5, 2.0))
    served = export.REPO / "resnet50" / "1" / "model.onnx"
    names = onnxruntime.InferenceSession(str(served), providers=["CPUExecutionProvider"])
    assert [i.name for i in names.get_inputs()] == ["IMAGE"] and [o.name for o in names.get_outputs()] == ["LOGITS"]
    assert provenance.read_stamp(served).sha256 == provenance.file_sha256(source)

    def config(path):
        return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())

    for variant in ("config.pbtxt", "configs/npu.pbtxt"):
        bare, folded = (config(export.REPO / m / variant) for m in ("resnet50", "resnet50_uint8"))
        preprocess, post = (
            config(export.REPO / m / variant) for m in ("resnet50_preprocess", "classification_postprocess")
        )
        assert list(bare.input[0].dims) == [3, 8, 8] and list(bare.output[0].dims) == [4], variant
        assert list(folded.input[0].dims) == [8, 8, 3] and list(folded.output[0].dims) == [4], variant
        assert list(preprocess.output[0].dims) == [8, 8, 3] and list(post.input[0].dims) == [4], variant
        params = {k: v.string_value for k, v in preprocess.parameters.items()}
        assert (params["resize"], params["crop"], params["mean"], params["std"]) == (
            "9",
            "8",
            "0.5,0.25,0.125",
            "0.5,0.5,2.0",
        )
        assert post.parameters["class_names"].string_value == "tiny_labels.txt", variant
    assert (export.REPO / "classification_postprocess" / "tiny_labels.txt").read_text() == labels.read_text()
    assert json.loads((export.EXPORTED / "resnet50.json").read_text())["onnx"] == str(source.resolve())
    export.fold_pixels("resnet50")
    pixels = np.random.default_rng(1).integers(0, 256, size=(2, 8, 8, 3), dtype=np.uint8)
    normalised = (
        pixels.transpose(0, 3, 1, 2) / np.float32(255) - np.array([0.5, 0.25, 0.125], np.float32).reshape(1, 3, 1, 1)
    ) / np.array([0.5, 0.5, 2.0], np.float32).reshape(1, 3, 1, 1)
    folded_session = onnxruntime.InferenceSession(
        str(export.REPO / "resnet50_uint8" / "1" / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    want = names.run(None, {"IMAGE": normalised.astype(np.float32)})[0]
    np.testing.assert_allclose(folded_session.run(None, {"PIXELS": pixels})[0], want, rtol=1e-5, atol=1e-5)
