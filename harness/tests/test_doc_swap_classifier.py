"""The image classifier swap guide of docs/adding-a-deployment.md, run step by step."""

from __future__ import annotations

import json

import numpy as np
import pytest

from harness.tests.test_new import ALL, run_swap_guide


@pytest.mark.server
def test_doc_swap_of_the_image_classifier(tmp_path):
    """A seeded 10-class ResNet-18 at 160x160 with its own mean/std in a copy of the image
    classification deployment, `make refresh`, the copy's checks and tests; the copy's fixtures,
    configs and served files are the new model's."""
    if not ALL:
        pytest.skip("HARNESS_NEW_ALL=1 runs it (CI)")
    copy = run_swap_guide(tmp_path, "## Swapping the image classifier")
    labels = (copy / "my_classifier" / "labels.txt").read_text().split()
    expected = json.loads((copy / "fixtures" / "expected.json").read_text())
    assert list(expected["models"]) == ["resnet50"], "the copy still serves EfficientNet-Lite0"
    for image in expected["models"]["resnet50"]["images"].values():
        assert set(image["top5_labels"]) <= set(labels) and len(image["top5_ids"]) == 5, image
    with np.load(copy / "fixtures" / "logits.npz") as logits:
        assert {logits[key].shape for key in logits.files} == {(len(labels),)}
    repository = copy / "model_repository"
    assert 'string_value: "labels.txt"' in (repository / "classification_postprocess" / "config.pbtxt").read_text()
    preprocess = (repository / "resnet50_preprocess" / "config.pbtxt").read_text()
    assert 'key: "crop" value: { string_value: "160" }' in preprocess
    assert 'key: "std" value: { string_value: "0.25,0.25,0.25" }' in preprocess
    assert "dims: [ 160, 160, 3 ]" in (repository / "resnet50_uint8" / "config.pbtxt").read_text()
