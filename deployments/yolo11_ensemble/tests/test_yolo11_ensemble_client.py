"""client.py outside the repository: the folder copied elsewhere, the ensemble served from the copy,
the client run there (harness.testing.standalone) prints the reference's detections (the checks'
match rule), at the reference's thresholds."""

from __future__ import annotations

import json

import numpy as np
import pytest

from harness.testing.standalone import client_outside, deployment_of


@pytest.mark.server
def test_client_outside_the_repository_prints_the_reference_detections(tmp_path):
    deployment = deployment_of(__file__)
    checks = deployment.checks_module
    fixtures = json.loads((deployment.fixtures_path / "expected_detections.json").read_text())
    image = max(fixtures["images"], key=lambda name: len(fixtures["images"][name]["detections"]))
    thresholds = ["--conf", str(fixtures["conf"]), "--iou", str(fixtures["iou"]), "--max-det", str(fixtures["max_det"])]
    [stdout] = client_outside(
        deployment, tmp_path, [checks.ENSEMBLE], [f"fixtures/images/{image}", "--json", *thresholds]
    )
    printed = json.loads(stdout.splitlines()[0])
    found = printed["detections"]
    assert tuple(printed["image_size"]) == tuple(fixtures["images"][image]["size"]), printed["image_size"]
    got = checks.client.Detections(
        np.array([d["box"] for d in found], np.float32).reshape(-1, 4),
        np.array([d["score"] for d in found], np.float32),
        np.array([d["class_id"] for d in found]),
        [d["class_name"] for d in found],
        tuple(printed["image_size"]),
    )
    checks.match_detections(got, fixtures["images"][image]["detections"], f"client.py outside the repository, {image}")
