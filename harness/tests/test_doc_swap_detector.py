"""docs/adding-a-deployment.md "Swapping the detector": a copy of yolo11_ensemble serving a 3-class
YOLO11n (seeded weights, 320 input) on every path, renamed `detect` and `detector`; the original untouched (test_new.run_swap_guide).
Also, no server: the checks' raw-head comparison and their refusal of a degenerate reference."""

from __future__ import annotations

import json

import numpy as np
import pytest

from harness import PROJECT_ROOT
from harness.deployments import get_deployment
from harness.tests.test_new import ALL, run_swap_guide

HEADING = "## Swapping the detector"


@pytest.mark.server
def test_doc_swap_of_the_detector(tmp_path):
    if not ALL:
        pytest.skip("HARNESS_NEW_ALL=1 runs it (CI)")
    copy = run_swap_guide(tmp_path, HEADING)
    fixtures = json.loads((copy / "fixtures" / "expected_detections.json").read_text())
    assert fixtures["class_names"] == ["cat", "dog", "parrot"] and fixtures["imgsz"] == 320
    assert {ref["shape"][0] for ref in fixtures["heads"].values()} == {4 + 3}
    found = [d["class_name"] for ref in fixtures["low_conf"].values() for d in ref["detections"]]
    assert found and set(found) <= {"cat", "dog", "parrot"}, found  # the box matches compared something
    served_names = copy / "model_repository" / "postprocess" / "1" / "assets" / "class_names.json"
    assert json.loads(served_names.read_text()) == ["cat", "dog", "parrot"]
    assert "dims: [ 3, 320, 320 ]" in (copy / "model_repository" / "preprocess" / "config.pbtxt").read_text()
    assert sorted(p.name for p in (copy / "model_repository").iterdir()) == [
        "detect",
        "detector",
        "postprocess",
        "preprocess",
    ]
    assert "`my_detector.pt` at 320 pixels" in (copy / "README.md").read_text(), "the README names the user's model"


def _checks():
    return get_deployment("yolo11_ensemble", PROJECT_ROOT / "deployments").checks_module


def test_checks_refuse_a_degenerate_reference():
    checks = _checks()
    record = json.loads((PROJECT_ROOT / "deployments/yolo11_ensemble/fixtures/expected_detections.json").read_text())
    checks.assert_reference_not_degenerate(record)
    no_boxes = {**record, "images": {name: {**ref, "detections": []} for name, ref in record["images"].items()}}
    assert record["low_conf"]["bus.jpg"]["detections"], "the low-confidence reference has boxes"
    checks.assert_reference_not_degenerate(no_boxes)  # the boxes at the low confidence
    no_low_boxes = {**no_boxes, "low_conf": {n: {**ref, "detections": []} for n, ref in record["low_conf"].items()}}
    with pytest.raises(AssertionError, match="no box .* not even at a low confidence.*refresh"):
        checks.assert_reference_not_degenerate(no_low_boxes)


def test_head_match_fails_on_one_changed_value_or_shape():
    checks = _checks()
    head = np.random.default_rng(0).random((7, 2100), dtype=np.float32)
    head[:4] *= 320  # xywh in pixels, then class scores
    anchors = [0, 5, 2099]
    ref = {"shape": [7, 2100], "anchors": anchors, "values": head[:, anchors].T.round(5).tolist()}
    checks.assert_head_matches(head, ref, "same")
    changed = head.copy()
    changed[4, 5] += 0.01
    with pytest.raises(AssertionError, match="raw head"):
        checks.assert_head_matches(changed, ref, "changed")
    with pytest.raises(AssertionError, match="reference"):
        checks.assert_head_matches(head[:, :2000], ref, "fewer anchors")
